//! Runs after submission: manifests, the state index, and the effects of
//! submitting a plan to Slurm.

pub mod audit;
pub mod checkpoint;
pub mod guard;
pub mod manifest;
pub mod query;
pub mod resume;
pub mod status;
pub mod submit;

pub use manifest::{Manifest, StageRecord};
