//! A fake `libnvidia-ml.so` for testing yolo-sched without a GPU: the NVML C
//! functions node-setup uses, with the driver's MIG semantics, driven by a JSON
//! fixture (`FAKE_NVML_FIXTURE`) and a state file beside it. See docs/fake-nvml.md.
//!
//! The crate is also an rlib so that `fake-nvml-ctl` and the unit tests can reach
//! the state machine without going through C.

#![deny(unsafe_op_in_unsafe_fn)]

pub mod control;
pub mod driver;
mod exports;
pub mod fixture;
pub mod model;
pub mod state;
pub mod sysroot;

#[cfg(test)]
mod tests;
