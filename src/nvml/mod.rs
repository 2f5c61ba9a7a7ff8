//! NVIDIA GPUs through NVML (nvml-wrapper).
//!
//! `probe` only answers whether the library loads; the topology and MIG
//! apply code builds on the same loading rules.

pub mod probe;

pub use probe::{library_path, probe, NvmlProbe, LIB_ENV};
