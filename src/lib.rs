//! yolo-sched: YOLO training specs as Slurm job graphs on MIG slices, and MIG
//! node setup for Slurm. The binary (`src/main.rs`) is a thin shell over these
//! modules; integration tests and benchmarks use them directly.

pub mod cli;
pub mod config;
pub mod doctor;
pub mod error;
pub mod fsutil;
pub mod gres;
pub mod mig;
pub mod nvml;
pub mod process;
pub mod shell;
pub mod slurm;
