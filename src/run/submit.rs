//! Submitting a chain of stage scripts: all or nothing.
//!
//! Every job is submitted held (`--hold`), each depending on the ids of its
//! predecessors in this submission. If any `sbatch` fails, the jobs already
//! submitted are cancelled in one `scancel`, so nothing is left in the queue.
//! Only when every stage was accepted is the chain released in one
//! `scontrol release`. The caller records the ids (manifest) before releasing,
//! so even a crash between the two leaves a run that `cancel` can clean up.

use std::path::PathBuf;

use anyhow::{anyhow, Result};
use serde::Serialize;

use crate::plan::DepKind;
use crate::slurm::{sbatch, Slurm};
use crate::spec::StageKind;

/// One job to submit.
#[derive(Debug, Clone)]
pub struct JobRequest {
    pub kind: StageKind,
    pub script: PathBuf,
    /// `--array` value, overriding the script's own.
    pub array: Option<String>,
    /// Stages of this same submission it waits for.
    pub after: Vec<(StageKind, DepKind)>,
    /// Variables to give the job besides the submitter's environment
    /// (`--export=ALL,K=V`); values must not contain commas.
    pub export: Vec<(String, String)>,
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

/// The exact `sbatch` arguments of a request, given the ids of the stages before it.
pub fn sbatch_args(
    req: &JobRequest,
    earlier: &[SubmittedJob],
) -> Result<(Vec<String>, Option<String>, Vec<u64>)> {
    let mut args = vec!["--hold".to_string()];
    let mut deps = Vec::new();
    let mut ids = Vec::new();
    for (stage, kind) in &req.after {
        let job = earlier.iter().find(|j| j.stage == *stage).ok_or_else(|| {
            anyhow!("stage {stage:?} must be submitted before the stages that wait for it")
        })?;
        deps.push(format!("{}:{}", kind.slurm_word(), job.job_id));
        ids.push(job.job_id);
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
    args.push(req.script.display().to_string());
    Ok((args, dependency, ids))
}

/// Cancel jobs in one call; says truthfully what happened, for the error
/// message (submit and resume take their jobs back through this one place).
pub fn roll_back(slurm: &Slurm, jobs: &[SubmittedJob]) -> String {
    if jobs.is_empty() {
        return "nothing had been submitted".to_string();
    }
    let ids: Vec<String> = jobs.iter().map(|j| j.job_id.to_string()).collect();
    let mut args = vec!["--quiet"];
    args.extend(ids.iter().map(String::as_str));
    match slurm.run_retrying("scancel", &args) {
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

/// Submit every request held. On failure, what was submitted is cancelled.
pub fn submit_held(slurm: &Slurm, requests: &[JobRequest]) -> Result<Vec<SubmittedJob>> {
    let mut submitted: Vec<SubmittedJob> = Vec::new();
    for req in requests {
        let (args, dependency, depends_on) = sbatch_args(req, &submitted)?;
        let arg_refs: Vec<&str> = args.iter().map(String::as_str).collect();
        match sbatch::submit(slurm, &arg_refs) {
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
                    crate::plan::stage_name(req.kind)
                )));
            }
        }
    }
    Ok(submitted)
}

/// Release a held chain in one call; on failure cancel it.
pub fn release(slurm: &Slurm, jobs: &[SubmittedJob]) -> Result<()> {
    let ids: Vec<String> = jobs.iter().map(|j| j.job_id.to_string()).collect();
    if ids.is_empty() {
        return Ok(());
    }
    let list = ids.join(",");
    if let Err(e) = slurm.run_retrying("scontrol", &["release", &list]) {
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
            array: Some("0-3%2".into()),
            after: vec![(StageKind::Train, DepKind::AfterCorr)],
            export: vec![],
        };
        let (args, dep, ids) = sbatch_args(&req, &earlier).unwrap();
        assert_eq!(
            args,
            vec![
                "--hold",
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
            array: None,
            after: vec![(StageKind::Prepare, DepKind::AfterOk)],
            export: vec![],
        };
        assert!(sbatch_args(&req, &[]).is_err());
    }
}
