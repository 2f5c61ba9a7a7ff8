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

pub mod metrics;
pub mod policy;
pub mod procs;
pub mod run;
pub mod series;
pub mod site;

pub use policy::{Breaker, Decision, GuardPolicy, StopCause};
pub use run::{Options, Outcome};
pub use site::GuardSite;

use std::time::SystemTime;

/// Something a duty wants the job log (and, for warnings, the guard record) to show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A line for the job log.
    Info(String),
    /// A problem that never fails the job (an unreachable store, …).
    Warning(String),
}

/// Periodic work the agent does beside the memory guard, e.g. backing up
/// checkpoints. `tick` must return quickly (it runs between two samples);
/// long work belongs in the duty's own thread. A duty never stops the job.
pub trait AgentDuty {
    /// A short name for the job log ("backup").
    fn name(&self) -> &str;
    /// Called once per sample, after the guard.
    fn tick(&mut self, now: SystemTime) -> Vec<Event>;
    /// Called once when the agent stops (the trainer ended or the script exits).
    fn finish(&mut self) -> Vec<Event> {
        Vec::new()
    }
}

/// The effective guard policy of a spec under the site, or invalid input
/// naming each spec key past the site's limits (with its line). Submission and
/// `validate` call this, so a spec the agent would refuse is never submitted.
pub fn check_spec(
    site: &crate::config::Site,
    spec: &crate::spec::Spec,
) -> anyhow::Result<GuardPolicy> {
    let section = GuardSite::from_site(site)?;
    GuardPolicy::resolve(&section, &spec.guard).map_err(|errors| {
        let lines: Vec<String> = errors
            .iter()
            .map(|e| {
                let at = spec
                    .origin
                    .locations
                    .get(&e.key)
                    .map(|l| format!("{}:{}:{}", spec.origin.file, l.line, l.column))
                    .unwrap_or_else(|| spec.origin.file.clone());
                format!("{at}: {}: {}\n  help: {}", e.key, e.message, e.help)
            })
            .collect();
        crate::error::invalid(format!(
            "the spec's [guard] goes past the site's limits (site file {}, [guard.limits]):\n{}",
            site.describe(),
            lines.join("\n")
        ))
    })
}
