//! Runs after submission: manifests, the state index, and the effects of
//! submitting a plan to Slurm.

pub(crate) mod audit;
pub(crate) mod cancel;
pub(crate) mod chain;
pub mod checkpoint;
pub(crate) mod escalate;
pub(crate) mod guard;
pub(crate) mod journal;
pub(crate) mod layout;
pub(crate) mod logs;
pub mod manifest;
pub(crate) mod query;
pub(crate) mod results;
pub(crate) mod resume;
pub(crate) mod status;
pub(crate) mod submit;
pub(crate) mod syslog;
pub(crate) mod team;
pub(crate) mod tune;

pub use manifest::{Manifest, StageRecord};
