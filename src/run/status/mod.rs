//! Where a run is: every stage and array task, from Slurm and from the records
//! the stage scripts write themselves.
//!
//! Sources, in order of trust: `squeue` (live, and finished jobs for
//! MinJobAge), `sacct` (only for jobs that left the queue, only with
//! accounting), and the job-written `state/<stage>[.<task>].{start,end}.json`
//! files, so status never depends on a database being up.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::rundir::manifest::{Attempt, Manifest, StageRecord};
use crate::slurm::squeue::{parse_task_list, QueueRow};
use crate::slurm::states::{self, Class};

/// A finished job as `sacct` describes it.
pub use crate::slurm::sacct::AcctRow;

mod compute;
mod files;
mod model;

/// The pending-reason wording lives beside `slurm::reasons`.
pub use crate::slurm::reasons::{reason_in_words, NEVER_RUNS};
pub use compute::*;
pub use files::*;
pub use model::*;

#[cfg(test)]
mod tests;
