//! The job agent (`yolo-sched agent`): one small process beside the trainer of
//! a GPU stage. It samples the job's own device memory through NVML, keeps a
//! bounded series in the run's state directory, publishes per-job gauges for
//! node_exporter's textfile collector, and runs the memory guard: warn at a
//! fraction of the slice, stop the trainer cleanly on sustained abnormal growth
//! or on passing its share of a shared GPU (docs/agent.md).
//!
//! Pure parts: `series` (ring, growth rate), `policy` (site and spec settings,
//! the guard's decisions), `metrics` (textfile text, results.csv progress),
//! `site` (`[guard]` of the site file). Effects: `run` (NVML through
//! `nvml::memory`, files through `fsutil`, the audit log), `procs` (`/proc`
//! and signals to the trainer).
//!
//! **Extra periodic work** (checkpoint backup, …) plugs in as an [`AgentDuty`]:
//! `run::run` calls every duty's `tick` once per sample, after the guard, and
//! `finish` once at the end; their events go to the job log.
//!
//! `devices` decides which NVML devices are the job's own (pure: from
//! `CUDA_VISIBLE_DEVICES`, `SLURM_STEP_GPUS`/`SLURM_JOB_GPUS` and the node's
//! gres.conf), or that they cannot be known.
//!
//! `prune` is a search's early stopping (`[tune] early_stop`, pure): the
//! median rule and successive halving over the trials' curves; the agent of
//! a trial reads the curves, decides (`Decision::Prune`) and stops its
//! trainer, which frees the slice.
//!
//! `duty` holds that hook (`AgentDuty`, `Event`); `check` the spec's guard
//! against the site's limits (`check_spec`).

mod check;
pub(crate) mod devices;
mod duty;
pub(crate) mod metrics;
pub(crate) mod policy;
pub mod procs;
pub mod prune;
pub(crate) mod run;
pub mod series;
pub(crate) mod site;

pub use check::check_spec;
pub use duty::{AgentDuty, Event};
pub use policy::{Breaker, Decision, GuardPolicy, StopCause};
pub use run::{Options, Outcome};
pub use site::GuardSite;
