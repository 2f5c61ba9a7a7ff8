//! Argument parsing, dispatch and output; the work is done by library modules.
//!
//! `command` holds the clap definitions (`Cli`, `GlobalArgs`, `Command`),
//! `context` what each subcommand is handed (`Context`), `dispatch` the entry
//! point (`run_main`, `execute`); one file per subcommand.

pub(crate) mod advise;
pub(crate) mod agent;
pub(crate) mod args;
pub(crate) mod backup;
pub(crate) mod checkpoint;
mod command;
pub(crate) mod compare;
mod context;
pub(crate) mod dataset;
mod dispatch;
pub(crate) mod doctor;
pub(crate) mod gc;
pub(crate) mod generate;
mod global;
pub(crate) mod models;
pub(crate) mod node_setup;
pub(crate) mod report;
pub(crate) mod runs;
pub(crate) mod status;
pub(crate) mod submit;
pub(crate) mod tune;
pub(crate) mod validate;
pub(crate) mod watch;

pub use command::Cli;
pub(crate) use command::Command;
pub(crate) use context::Context;
pub use dispatch::run_main;
