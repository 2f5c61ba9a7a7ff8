//! `yolo-sched report`: queue and MIG-slice usage from one `sinfo`, one
//! `squeue` and at most one `sacct` call, plus run manifests.
//!
//! `gather` is the only part with effects (Slurm commands, the manifest
//! directory, the clock); aggregation (`queue`, `inventory`, `sacct`, `runs`,
//! `rightsizing`; Slurm's output is parsed in `slurm::{listing, sinfo, sacct}`) and rendering (`render`) are
//! pure functions tested on recorded and synthetic output.
//!
//! `gather` runs the commands (through `slurm::{sinfo, listing, sacct}`) and
//! builds the `Report`; `usage` merges held slices with slice-hours;
//! `leaderboard` builds the HTML page's board and curves; `format` picks the
//! renderer for a `Format`.

mod format;
mod gather;
pub mod inventory;
mod leaderboard;
pub mod model;
pub mod queue;
pub use crate::slurm::reasons;
pub(crate) mod render;
pub(crate) mod rightsizing;
pub mod runs;
pub mod sacct;
mod usage;
pub(crate) mod window;

pub use format::{render, Format};
pub use gather::{gather, Options};
pub use leaderboard::{CURVES_MAX, CURVES_PER_DATASET};
pub use usage::usage_rows;

/// What a report is about (user, partition, account), as Slurm filters it.
pub use crate::slurm::squeue::Filter;
