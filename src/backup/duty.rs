//! The backup as one of the job agent's duties: the agent that watches the
//! GPU memory also uploads the checkpoints, so a training job runs one small
//! helper process, not two.

use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Result;

use super::sync::{settings_for, Backup, BackupEvent};
use crate::agent::{AgentDuty, Event};

/// Uploads what changed every `interval` (the run's `[backup] interval`),
/// and everything left when the agent stops.
pub struct BackupDuty {
    backup: Backup,
    interval: Duration,
    last: Option<Instant>,
}

impl BackupDuty {
    /// The duty for a training directory, or `None` when the run has no backup.
    pub fn for_save_dir(save_dir: &Path) -> Result<Option<BackupDuty>> {
        let Some((settings, _)) = settings_for(save_dir)? else {
            return Ok(None);
        };
        let Some(backup) = Backup::from_config(save_dir)? else {
            return Ok(None);
        };
        Ok(Some(BackupDuty {
            backup,
            interval: Duration::from_secs(settings.interval.max(1)),
            last: None,
        }))
    }
}

fn event(e: BackupEvent) -> Event {
    match e {
        BackupEvent::StoreFailed { .. } | BackupEvent::Mismatch { .. } => {
            Event::Warning(e.to_string().trim_start_matches("warning: ").to_string())
        }
        other => Event::Info(other.to_string()),
    }
}

impl AgentDuty for BackupDuty {
    fn name(&self) -> &str {
        "backup"
    }

    fn tick(&mut self, now: SystemTime) -> Vec<Event> {
        if self.last.is_some_and(|t| t.elapsed() < self.interval) {
            return Vec::new();
        }
        self.last = Some(Instant::now());
        self.backup.tick(now).into_iter().map(event).collect()
    }

    fn finish(&mut self) -> Vec<Event> {
        // The trainer has ended: its last checkpoint goes up before the job ends.
        let mut events: Vec<Event> = self
            .backup
            .sync_now(Duration::from_secs(2), Duration::from_secs(300))
            .into_iter()
            .map(event)
            .collect();
        events.push(Event::Info("the trainer has exited; last pass done".into()));
        events
    }
}
