//! The hook for periodic work beside the memory guard (checkpoint backup, …).

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
