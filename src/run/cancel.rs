//! `cancel` as a library workflow: every job of a run still queued or
//! running, in one `scancel`, with a truthful outcome.

use anyhow::{anyhow, Result};

use super::query;
use super::status::{Source, TaskState};
use crate::audit::AuditRecord;
use crate::rundir::manifest::Manifest;
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
/// error). Beside the result comes the audit record of a real cancel,
/// whatever its outcome (none for a dry run, nothing to cancel, or no answer
/// from Slurm). Slurm decides who may cancel (the owner, a coordinator of the
/// job's account, an operator or administrator); a refusal is an error that
/// says so in plain words and names what was and was not cancelled.
pub fn cancel(
    slurm: &Slurm,
    manifest: &Manifest,
    dry_run: bool,
) -> (Result<Cancelled>, Option<AuditRecord>) {
    let mut record = None;
    let result = cancel_into(slurm, manifest, dry_run, &mut record);
    (result, record)
}

/// `cancel`, its audit record put in `record`.
fn cancel_into(
    slurm: &Slurm,
    manifest: &Manifest,
    dry_run: bool,
    record: &mut Option<AuditRecord>,
) -> Result<Cancelled> {
    // The jobs of the manifest as it is now (an escalation may have resubmitted them).
    let mut current = manifest.clone();
    let (st, error) = query::run_status(slurm, &mut current);
    let manifest = &current;
    if let Some(e) = error {
        return Err(anyhow!(
            "cannot cancel run {}: Slurm did not answer: {e}",
            manifest.run_id
        ));
    }
    let mut job_ids = query::active_job_ids(&st);
    let mut stages: Vec<String> = st
        .stages
        .iter()
        .filter(|s| s.tasks.iter().any(|t| t.state.is_active()))
        .map(|s| s.stage.clone())
        .collect();
    // Another user's run whose jobs Slurm does not show the caller
    // (PrivateData): "nothing to cancel" would be a guess. Ask Slurm to
    // cancel the latest jobs not known to be over and let it say no.
    let hidden = manifest.user != crate::identity::current_user()
        && st.stages.iter().all(|s| {
            s.tasks
                .iter()
                .all(|t| !matches!(t.source, Source::Squeue | Source::Sacct))
        });
    if hidden && job_ids.is_empty() {
        for s in &st.stages {
            if s.tasks.iter().any(|t| {
                matches!(
                    t.state,
                    TaskState::Unknown | TaskState::Pending | TaskState::Running
                )
            }) {
                if let Some(id) = s.job_id {
                    job_ids.push(id);
                    stages.push(s.stage.clone());
                }
            }
        }
    }
    if !job_ids.is_empty() && !dry_run {
        // Jobs Slurm showed are cancelled quietly if they just ended; hidden
        // ones are asked loudly, so a job already gone is told from a refusal.
        let result = crate::slurm::control::cancel_answer(slurm, &job_ids, !hidden);
        let mut refusal = match &result {
            Ok(None) => None,
            Ok(Some(said)) => Some(Refusal::of(said, &job_ids)),
            Err(e) => Some(Refusal {
                refused: job_ids.clone(),
                gone: vec![],
                why: format!("{e:#}"),
                denied: false,
            }),
        };
        if let Some(r) = &refusal {
            // Every job it named had already ended: nothing was left to cancel.
            if r.refused.is_empty() {
                job_ids.retain(|id| !r.gone.contains(id));
                refusal = None;
            }
        }
        let outcome = match &refusal {
            None => "ok".to_string(),
            Some(r) => format!("refused: {}", r.why),
        };
        *record = Some(AuditRecord::new(
            "cancel",
            Some(&manifest.run_id),
            job_ids.clone(),
            &outcome,
        ));
        if let Some(r) = refusal {
            return Err(r.into_error(manifest, &job_ids));
        }
    }
    Ok(Cancelled {
        run_id: manifest.run_id.clone(),
        job_ids,
        stages,
        state: st.state.describe(),
        dry_run,
    })
}

/// What `scancel` refused.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Refusal {
    refused: Vec<u64>,
    /// Jobs Slurm no longer has (ended): not refused, nothing to cancel.
    gone: Vec<u64>,
    /// Slurm's words (`Access/permission denied`).
    why: String,
    /// Slurm said the caller may not (rather than a passing failure).
    denied: bool,
}

impl Refusal {
    /// Read `scancel: error: Kill job error on job id 12: Access/permission denied`
    /// lines; a failure naming no job refuses them all.
    fn of(stderr: &str, asked: &[u64]) -> Refusal {
        let mut refused = Vec::new();
        let mut why = String::new();
        let mut gone = Vec::new();
        for line in stderr.lines() {
            let Some((_, rest)) = line.split_once("job id ") else {
                continue;
            };
            let (id, reason) = rest.split_once(':').unwrap_or((rest, ""));
            let id = id.trim().split('_').next().unwrap_or("");
            if let Ok(id) = id.parse::<u64>() {
                if reason.contains("Invalid job id") || reason.contains("already completed") {
                    gone.push(id);
                } else if asked.contains(&id) && !refused.contains(&id) {
                    refused.push(id);
                    if why.is_empty() {
                        why = reason.trim().to_string();
                    }
                }
            }
        }
        if refused.is_empty() && gone.is_empty() {
            refused = asked.to_vec();
            why = crate::text::clip_to(stderr.trim(), 300);
        }
        let denied = why.to_lowercase().contains("permission denied")
            || why.to_lowercase().contains("access denied");
        Refusal {
            refused,
            gone,
            why,
            denied,
        }
    }

    fn into_error(self, manifest: &Manifest, asked: &[u64]) -> anyhow::Error {
        let ids = |v: &[u64]| v.iter().map(u64::to_string).collect::<Vec<_>>().join(", ");
        let done: Vec<u64> = asked
            .iter()
            .copied()
            .filter(|id| !self.refused.contains(id) && !self.gone.contains(id))
            .collect();
        let what = if done.is_empty() {
            format!("nothing of run {} was cancelled", manifest.run_id)
        } else {
            format!(
                "job(s) {} were cancelled, job(s) {} were not",
                ids(&done),
                ids(&self.refused)
            )
        };
        let who = if self.denied {
            format!(
                ": only its owner ({}), a coordinator of its Slurm account, or a Slurm operator or administrator may cancel it",
                manifest.user
            )
        } else {
            String::new()
        };
        let err = anyhow!(
            "Slurm refused to cancel run {}'s job(s) {} ({}){who}; {what}",
            manifest.run_id,
            ids(&self.refused),
            self.why
        );
        crate::error::with_hint(
            err,
            format!(
                "`yolo-sched status {}` shows what is left; `sacctmgr show user $USER withcoord` shows the accounts you coordinate",
                manifest.run_id
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_the_jobs_slurm_refused_and_the_rest_were_cancelled() {
        let r = Refusal::of(
            "scancel: error: Kill job error on job id 6423: Access/permission denied\n",
            &[6422, 6423],
        );
        assert_eq!(r.refused, vec![6423]);
        assert_eq!(r.why, "Access/permission denied");
        assert!(r.denied);
        let any = Refusal::of("scancel: error: Socket timed out\n", &[1, 2]);
        assert_eq!(any.refused, vec![1, 2]);
        assert!(!any.denied);
        let over = Refusal::of(
            "scancel: error: Kill job error on job id 7: Invalid job id specified\n",
            &[7],
        );
        assert_eq!((over.refused.len(), over.gone.clone()), (0, vec![7]));
    }
}
