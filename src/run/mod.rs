//! Runs after submission: manifests, the state index, and the effects of
//! submitting a plan to Slurm.

pub(crate) mod cancel;
pub(crate) mod chain;
pub(crate) mod escalate;
pub(crate) mod journal;
pub(crate) mod logs;
pub(crate) mod query;
pub(crate) mod resume;
pub(crate) mod status;
pub(crate) mod submit;
pub(crate) mod team;
pub(crate) mod tune;
pub(crate) mod tune_oom;
