//! Runs after submission: manifests, the state index, and the effects of
//! submitting a plan to Slurm.

pub mod audit;
pub mod cancel;
pub mod chain;
pub mod checkpoint;
pub mod escalate;
pub mod guard;
pub mod journal;
pub mod logs;
pub mod manifest;
pub mod query;
pub mod results;
pub mod resume;
pub mod status;
pub mod submit;
pub mod syslog;
pub mod team;

pub use manifest::{Manifest, StageRecord};
