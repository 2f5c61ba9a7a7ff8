//! Argument parsing, dispatch and output; the work is done by library modules.
//!
//! `command` holds the clap definitions (`Cli`, `GlobalArgs`, `Command`),
//! `context` what each subcommand is handed (`Context`), `dispatch` the entry
//! point (`run_main`, `execute`); one file per subcommand.

pub mod agent;
pub mod args;
pub mod backup;
pub mod checkpoint;
mod command;
pub mod compare;
mod context;
pub mod dataset;
mod dispatch;
pub mod doctor;
pub mod gc;
pub mod generate;
pub mod node_setup;
pub mod report;
pub mod runs;
pub mod status;
pub mod submit;
pub mod validate;
pub mod watch;

pub use command::{Cli, Command, GlobalArgs};
pub use context::Context;
pub use dispatch::{execute, run_main};
