//! `cancel` as a library workflow: every job of a run still queued or
//! running, in one `scancel`, with a truthful outcome.

use anyhow::{anyhow, Result};

use super::audit::AuditRecord;
use super::{query, Manifest};
use crate::slurm::Slurm;

/// What a cancel did (or, on a dry run, would do).
#[derive(Debug, Clone)]
pub struct Cancelled {
    pub run_id: String,
    /// The job ids given to `scancel` (array ids stand for all their tasks).
    pub job_ids: Vec<u64>,
    /// The stages those jobs belong to, in run order.
    pub stages: Vec<String>,
    /// The run's state in words, for "nothing to cancel".
    pub state: String,
    pub dry_run: bool,
}

/// Cancel what is left of `manifest`'s run. Slurm is asked first; if it does
/// not answer, nothing is cancelled (a partial guess is worse than a clear
/// error). `record` gets the audit record of a real cancel, whatever its
/// outcome; a refusal by Slurm (not the owner, not a coordinator) is an
/// error that says so.
pub fn cancel(
    slurm: &Slurm,
    manifest: &Manifest,
    dry_run: bool,
    record: &mut dyn FnMut(&AuditRecord),
) -> Result<Cancelled> {
    let (st, error) = query::run_status(slurm, manifest);
    if let Some(e) = error {
        return Err(anyhow!(
            "cannot cancel run {}: Slurm did not answer: {e}",
            manifest.run_id
        ));
    }
    let job_ids = query::active_job_ids(&st);
    let stages = st
        .stages
        .iter()
        .filter(|s| s.tasks.iter().any(|t| t.state.is_active()))
        .map(|s| s.stage.clone())
        .collect();
    if !job_ids.is_empty() && !dry_run {
        let list: Vec<String> = job_ids.iter().map(u64::to_string).collect();
        let mut argv = vec!["--quiet"];
        argv.extend(list.iter().map(String::as_str));
        let result = slurm.run_retrying("scancel", &argv);
        let outcome = match &result {
            Ok(_) => "ok".to_string(),
            Err(e) => format!("{e:#}"),
        };
        record(&AuditRecord::new(
            "cancel",
            Some(&manifest.run_id),
            job_ids.clone(),
            &outcome,
        ));
        result.map_err(|e| {
            e.context(format!(
                "Slurm refused to cancel some or all of run {}'s job(s) {}; \
                 `yolo-sched status {}` shows what is left",
                manifest.run_id,
                list.join(", "),
                manifest.run_id
            ))
        })?;
    }
    Ok(Cancelled {
        run_id: manifest.run_id.clone(),
        job_ids,
        stages,
        state: st.state.describe(),
        dry_run,
    })
}
