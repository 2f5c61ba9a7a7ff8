//! The one place that runs Slurm commands and parses their output.
//!
//! `runner` runs a client (`sinfo`, `squeue`, `sbatch`, …) with a timeout and
//! turns failures into errors that name the command and what it printed. The
//! other modules parse one command's output each, as pure functions, so they
//! are tested on recorded output as well as on the live cluster. `node`
//! holds the one model of a node that both node readers (`cluster`,
//! `sinfo`) fill; `value` the one rule for Slurm's placeholders (`(null)`,
//! `N/A`, `None`, `Unknown`) and for limits that are none (`UNLIMITED`),
//! `time` the one model of Slurm's time stamps and durations, and `squeue`
//! the one read model of squeue's output (its fields, separator, line
//! splitter and typed readers) under every query that asks it.

pub mod accounts;
pub mod cluster;
pub(crate) mod comment;
pub(crate) mod config;
pub(crate) mod control;
pub(crate) mod gres;
pub(crate) mod isolation;
pub(crate) mod node;
pub mod reasons;
pub(crate) mod runner;
pub(crate) mod sacct;
pub mod sbatch;
pub mod sinfo;
pub mod squeue;
pub(crate) mod states;
pub mod time;
pub mod value;
pub(crate) mod version;

pub use runner::{CommandFailed, Slurm};
