//! yolo-sched: YOLO training specs as Slurm job graphs on MIG slices, and MIG
//! node setup for Slurm. The binary (`src/main.rs`) is a thin shell over these
//! modules; integration tests and benchmarks use them directly.

pub mod agent;
pub mod backup;
pub mod cli;
pub mod compare;
pub mod config;
pub mod dataset;
pub mod doctor;
pub mod error;
pub mod fsutil;
pub mod gres;
pub mod identity;
pub mod mig;
pub mod nodesetup;
pub mod nvml;
pub mod plan;
pub mod printer;
pub mod process;
pub mod render;
pub mod report;
pub mod run;
pub mod shell;
pub mod slurm;
pub mod spec;
pub mod suggest;
pub mod text;
