//! `node-setup`: bring a node's MIG layout and its gres.conf block to a target.
//!
//! `plan` decides what each GPU needs (pure); `lock`, `destroy` and `slurm` are
//! the effects. `options` holds what the command is told; `prepare` reads the
//! node and renders the gres.conf it should have (the dry-run view); `check`
//! lists how the node differs; `apply` runs the sequence step by step, with
//! `steps` naming the steps and logging each on stderr; `describe` words
//! decisions for people.

mod apply;
mod check;
mod describe;
pub(crate) mod lock;
mod options;
pub mod plan;
mod prepare;
pub(crate) mod site;
pub(crate) mod slurm;
mod steps;

pub use apply::{apply, Applied};
pub use check::{differences, Difference, DifferenceKind};
pub use describe::{describe_auto, describe_gpu, include_text};
pub use options::Options;
pub use plan::{GpuDecision, ModeAction, NodeDecision};
pub use prepare::{open_nvml, prepare, resolve_layout, Prepared};
pub use steps::{PAUSE_ENV, STEPS};
