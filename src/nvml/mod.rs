//! NVIDIA GPUs through NVML (nvml-wrapper).
//!
//! `probe` finds and loads the library (`--nvml-lib`, `YOLO_SCHED_NVML_LIB`, or the
//! driver's `libnvidia-ml.so.1`); `topology` reads every GPU and its MIG state;
//! `memory` reads one job's own device (the agent's sampling);
//! `apply` makes the MIG changes, one NVML step each; `raw` holds the calls
//! nvml-wrapper lacks and is the crate's only `unsafe` code. Tests run all of it
//! against the fake library built from `fake-nvml/` (docs/fake-nvml.md).

pub mod apply;
pub(crate) mod destroy;
pub mod memory;
pub(crate) mod probe;
pub(crate) mod raw;
pub mod topology;

/// The library handle, named here so no module outside `src/nvml` imports nvml-wrapper.
pub use nvml_wrapper::Nvml;
pub use probe::{library_path, open, probe, NvmlProbe, LIB_ENV};
pub use topology::Topology;
