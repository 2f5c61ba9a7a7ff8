//! yolo-sched: YOLO training specs as Slurm job graphs on MIG slices, and MIG
//! node setup for Slurm. The binary (`src/main.rs`) is a thin shell over these
//! modules; integration tests and benchmarks use them directly.

pub mod advise;
pub mod agent;
pub(crate) mod audit;
pub mod backup;
pub mod cli;
pub(crate) mod compare;
pub(crate) mod config;
pub(crate) mod csv;
pub mod dataset;
pub(crate) mod doctor;
pub mod error;
pub mod fsutil;
pub mod gres;
pub(crate) mod id;
pub mod identity;
pub mod localcluster;
pub mod mig;
pub mod names;
pub mod nodesetup;
pub mod nvml;
pub mod objstore;
pub mod plan;
pub(crate) mod printer;
pub mod process;
pub mod registry;
pub mod render;
pub mod report;
pub mod run;
pub mod rundir;
pub(crate) mod shell;
pub mod slurm;
pub mod spec;
pub(crate) mod suggest;
pub(crate) mod text;

#[cfg(test)]
mod architecture;
