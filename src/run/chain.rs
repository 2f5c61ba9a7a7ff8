//! Submitting a chain of stage scripts: all or nothing.
//!
//! Every job is submitted held (`--hold`), each depending on the ids of its
//! predecessors in this submission and carrying the submission's token in
//! `--comment` (see [`super::journal`]). If any `sbatch` fails, the jobs
//! already submitted are cancelled in one `scancel`, so nothing is left in
//! the queue. An `sbatch` whose answer is lost (a timeout, a dropped
//! connection) may still have queued its job: the job is looked up by its
//! token and adopted before anything is retried, so a retry never makes a
//! duplicate. Only when every stage was accepted is the chain released in one
//! `scontrol release`. The caller records the ids (manifest) before releasing.

use std::path::PathBuf;

use anyhow::{anyhow, Result};
use serde::Serialize;

use super::journal::Journal;
use crate::plan::DepKind;
use crate::slurm::comment::COMMENT_PREFIX;
use crate::slurm::sbatch::{self, Answer};
use crate::slurm::{squeue, Slurm};
use crate::spec::StageKind;

/// One job to submit.
#[derive(Debug, Clone)]
pub struct JobRequest {
    pub kind: StageKind,
    pub script: PathBuf,
    /// The run directory: the job's `--chdir`, so Slurm's WorkDir (in
    /// `squeue` and `sacct`) says where the run's manifest is, for those
    /// who find the run through Slurm (`list --account`).
    pub workdir: PathBuf,
    /// `--array` value, overriding the script's own.
    pub array: Option<String>,
    /// Stages of this same submission it waits for.
    pub after: Vec<(StageKind, DepKind)>,
    /// Variables to give the job besides the submitter's environment
    /// (`--export=ALL,K=V`); values must not contain commas.
    pub export: Vec<(String, String)>,
    /// Options that override the script's own `#SBATCH` lines (a resume on
    /// another slice: `--gres`, `--cpus-per-task`, `--mem`, `--partition`).
    pub overrides: Vec<String>,
}

fn stage_word(kind: StageKind) -> &'static str {
    crate::plan::stage_name(kind)
}

/// A job Slurm accepted.
#[derive(Debug, Clone, Serialize)]
pub struct SubmittedJob {
    pub stage: StageKind,
    pub job_id: u64,
    pub array: Option<String>,
    /// `afterok:12` or `aftercorr:13`, as given to `--dependency`.
    pub dependency: Option<String>,
    pub depends_on: Vec<u64>,
}

/// The exact `sbatch` arguments of a request (after `--parsable`), given the
/// ids of the stages before it and the job's comment.
pub fn sbatch_args(
    req: &JobRequest,
    earlier: &[SubmittedJob],
    comment: &str,
) -> Result<(Vec<String>, Option<String>, Vec<u64>)> {
    let mut ids = Vec::new();
    let (args, dependency) = sbatch_args_with(req, comment, |stage| {
        // The latest job of that stage: a search submits one ask, trial
        // array and tell per batch, each waiting for the one just before.
        let job = earlier.iter().rev().find(|j| j.stage == stage)?;
        ids.push(job.job_id);
        Some(job.job_id.to_string())
    })?;
    Ok((args, dependency, ids))
}

/// `sbatch_args` with the predecessors' ids from `id_of`: the real ids, or
/// the placeholders a dry run prints (`<prepare>`), through the same code.
pub fn sbatch_args_with(
    req: &JobRequest,
    comment: &str,
    mut id_of: impl FnMut(StageKind) -> Option<String>,
) -> Result<(Vec<String>, Option<String>)> {
    let mut args = vec![
        "--hold".to_string(),
        format!("--comment={comment}"),
        format!("--chdir={}", req.workdir.display()),
    ];
    let mut deps = Vec::new();
    for (stage, kind) in &req.after {
        let id = id_of(*stage).ok_or_else(|| {
            anyhow!("stage {stage:?} must be submitted before the stages that wait for it")
        })?;
        deps.push(format!("{}:{id}", kind.slurm_word()));
    }
    let dependency = (!deps.is_empty()).then(|| deps.join(","));
    if let Some(d) = &dependency {
        args.push(format!("--dependency={d}"));
    }
    if let Some(a) = &req.array {
        args.push(format!("--array={a}"));
    }
    if !req.export.is_empty() {
        let vars: Vec<String> = req.export.iter().map(|(k, v)| format!("{k}={v}")).collect();
        args.push(format!("--export=ALL,{}", vars.join(",")));
    }
    args.extend(req.overrides.iter().cloned());
    args.push(req.script.display().to_string());
    Ok((args, dependency))
}

/// Cancel jobs in one call; says truthfully what happened, for the error
/// message (submit and resume take their jobs back through this one place).
pub fn roll_back(slurm: &Slurm, jobs: &[SubmittedJob]) -> String {
    if jobs.is_empty() {
        return "nothing had been submitted".to_string();
    }
    let ids: Vec<String> = jobs.iter().map(|j| j.job_id.to_string()).collect();
    let numbers: Vec<u64> = jobs.iter().map(|j| j.job_id).collect();
    match crate::slurm::control::cancel(slurm, &numbers) {
        Ok(_) => format!(
            "cancelled the {} job(s) already submitted ({})",
            ids.len(),
            ids.join(", ")
        ),
        Err(e) => format!(
            "could NOT cancel the jobs already submitted ({}): {e:#}",
            ids.join(", ")
        ),
    }
}

/// Submit every request held, each tagged with the journal's token. On
/// failure, what was submitted is cancelled; the journal is finished only when
/// nothing of this submission is left in the queue (else the next command's
/// recovery finds what a lost answer may still have queued).
pub fn submit_held(
    slurm: &Slurm,
    requests: &[JobRequest],
    journal: &mut Journal,
) -> Result<Vec<SubmittedJob>> {
    let mut submitted: Vec<SubmittedJob> = Vec::new();
    for req in requests {
        let comment = journal.comment(stage_word(req.kind));
        let (args, dependency, depends_on) = sbatch_args(req, &submitted, &comment)?;
        let result = submit_one(slurm, &args, &comment).and_then(|id| {
            journal.add_job(id)?;
            Ok(id)
        });
        match result {
            Ok(job_id) => submitted.push(SubmittedJob {
                stage: req.kind,
                job_id,
                array: req.array.clone(),
                dependency,
                depends_on,
            }),
            Err(e) => {
                let undo = roll_back(slurm, &submitted);
                return Err(e.context(format!(
                    "Slurm refused the {} stage; {undo}",
                    stage_word(req.kind)
                )));
            }
        }
    }
    Ok(submitted)
}

/// One stage's `sbatch`, with lost answers resolved by the token: adopt the
/// job it made, or retry (with back-off) when it made none.
fn submit_one(slurm: &Slurm, args: &[String], comment: &str) -> Result<u64> {
    let mut pause = slurm.retry_pause;
    let mut attempt = 0;
    loop {
        let lost = match sbatch::try_submit(slurm, args) {
            Answer::Accepted(id) => return Ok(id),
            Answer::Refused(e) => return Err(e),
            Answer::Unknown(e) => e,
        };
        let found = match squeue::tagged_mine(slurm, COMMENT_PREFIX) {
            Ok(f) => f,
            Err(q) => {
                return Err(lost.context(format!(
                    "and the queue could not be searched for its job: {q:#}"
                )))
            }
        };
        if let Some(job) = found.iter().find(|j| j.comment == comment) {
            return Ok(job.job_id);
        }
        if attempt >= slurm.retries {
            return Err(lost.context("no job of this submission appeared in the queue"));
        }
        attempt += 1;
        std::thread::sleep(pause);
        pause *= 2;
    }
}

/// Whether any job of this journal's submission is still in the queue.
pub fn any_left(slurm: &Slurm, journal: &Journal) -> Result<bool> {
    let prefix = format!(
        "{COMMENT_PREFIX}{}:{}:",
        journal.entry.run_id,
        journal.token()
    );
    Ok(!squeue::tagged_mine(slurm, &prefix)?.is_empty())
}

/// Release a held chain in one call; on failure cancel it.
pub fn release(slurm: &Slurm, jobs: &[SubmittedJob]) -> Result<()> {
    let ids: Vec<u64> = jobs.iter().map(|j| j.job_id).collect();
    if let Err(e) = crate::slurm::control::release(slurm, &ids) {
        let undo = roll_back(slurm, jobs);
        return Err(e.context(format!("releasing the held jobs failed; {undo}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dependencies_name_the_earlier_ids() {
        let earlier = vec![
            SubmittedJob {
                stage: StageKind::Prepare,
                job_id: 10,
                array: None,
                dependency: None,
                depends_on: vec![],
            },
            SubmittedJob {
                stage: StageKind::Train,
                job_id: 11,
                array: Some("0-3%2".into()),
                dependency: None,
                depends_on: vec![],
            },
        ];
        let req = JobRequest {
            kind: StageKind::Export,
            script: PathBuf::from("/w/scripts/export.sh"),
            workdir: PathBuf::from("/w"),
            array: Some("0-3%2".into()),
            after: vec![(StageKind::Train, DepKind::AfterCorr)],
            export: vec![],
            overrides: vec![],
        };
        let (args, dep, ids) = sbatch_args(&req, &earlier, "yolo-sched:r:t:export").unwrap();
        assert_eq!(
            args,
            vec![
                "--hold",
                "--comment=yolo-sched:r:t:export",
                "--chdir=/w",
                "--dependency=aftercorr:11",
                "--array=0-3%2",
                "/w/scripts/export.sh"
            ]
        );
        assert_eq!(dep.as_deref(), Some("aftercorr:11"));
        assert_eq!(ids, vec![11]);
    }

    #[test]
    fn a_missing_predecessor_is_an_error_not_a_free_pass() {
        let req = JobRequest {
            kind: StageKind::Train,
            script: "/t.sh".into(),
            workdir: "/".into(),
            array: None,
            after: vec![(StageKind::Prepare, DepKind::AfterOk)],
            export: vec![],
            overrides: vec![],
        };
        assert!(sbatch_args(&req, &[], "c").is_err());
    }
}
