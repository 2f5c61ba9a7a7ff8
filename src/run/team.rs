//! Runs found through Slurm rather than the caller's own index: the runs
//! of an account or a user, as far as Slurm lets the caller see them.
//!
//! There is no second permission system here. Every job of a run carries
//! `yolo-sched:<run>:…` in its `--comment` and the run directory as its
//! WorkDir (`--chdir`). One `squeue` and one `sacct` (by account or user,
//! `PrivateData` applied by Slurm) give the jobs; they are grouped by the run
//! id in the comment. Where the caller can read the run's manifest, the run
//! is the manifest's; where not (a private home directory), it is made from
//! what Slurm said: stages from the comments and job names, states, times
//! and slices. Either way its state comes from the one run model,
//! `status::compute`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use anyhow::Result;
use chrono::{DateTime, Utc};
use serde::Serialize;

use super::status::{self, AcctRow, RunStatus};
use crate::rundir::manifest::{Attempt, Manifest, StageRecord, SCHEMA_VERSION};
use crate::slurm::comment::parse_comment;
use crate::slurm::sacct;
use crate::slurm::squeue::{self, parse_task_list, JobFacts, QueueRow, Who};
use crate::slurm::Slurm;
use crate::spec::StageKind;

/// Where a run found through Slurm got its facts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Facts {
    /// The run's manifest, read in its run directory.
    Manifest,
    /// Slurm's data only: the manifest could not be read (`why`).
    Slurm { why: String },
}

/// One run found through Slurm.
#[derive(Debug, Clone)]
pub struct TeamRun {
    /// The run's manifest, or one made from Slurm's data (`facts`).
    pub manifest: Manifest,
    pub status: RunStatus,
    pub user: String,
    pub account: String,
    /// The first job's submission.
    pub submitted_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    /// The last job's end, once no job is left in the queue.
    pub ended_at: Option<DateTime<Utc>>,
    pub facts: Facts,
}

/// What Slurm showed the caller.
#[derive(Debug, Default)]
pub struct Team {
    /// Newest first.
    pub runs: Vec<TeamRun>,
    /// No accounting: only runs with a job still in the queue were found.
    pub accounting_off: bool,
}

/// The runs of `who` (one `squeue`, one `sacct` since `since`, whatever
/// the number of runs). `Err` when Slurm does not answer.
pub fn find(slurm: &Slurm, who: &Who, since: DateTime<Utc>) -> Result<Team> {
    let queued = squeue::by_who(slurm, who)?;
    let found = sacct::by_who(slurm, who, since)?;
    Ok(assemble(queued, found.rows, found.accounting_off, since))
}

/// Pure: group the jobs by run and build each run (reads manifests where
/// the caller can).
pub fn assemble(
    queued: Vec<(QueueRow, JobFacts)>,
    accounted: Vec<(AcctRow, JobFacts)>,
    accounting_off: bool,
    since: DateTime<Utc>,
) -> Team {
    let in_queue: BTreeSet<u64> = queued.iter().map(|(r, _)| r.array_job_id).collect();
    let mut rows = Vec::new();
    let mut acct = Vec::new();
    let mut by_run: BTreeMap<String, Vec<JobFacts>> = BTreeMap::new();
    // A yolo-sched job joins its run (named in its comment); others are not ours.
    let mut join = |facts: JobFacts| -> bool {
        let Some(run_id) = parse_comment(&facts.comment).map(|t| t.run_id.to_string()) else {
            return false;
        };
        by_run.entry(run_id).or_default().push(facts);
        true
    };
    for (row, facts) in queued {
        if join(facts) {
            rows.push(row);
        }
    }
    for (row, facts) in accounted {
        // squeue speaks for the jobs it still has.
        if !in_queue.contains(&facts.array_job_id) && join(facts) {
            acct.push(row);
        }
    }
    let mut runs: Vec<TeamRun> = by_run
        .into_iter()
        .filter_map(|(run_id, jobs)| build(&run_id, &jobs, &rows, &acct))
        .filter(|r| r.submitted_at >= since || !r.status.state.is_finished())
        .collect();
    runs.sort_by(|a, b| {
        b.submitted_at
            .cmp(&a.submitted_at)
            .then(b.manifest.run_id.cmp(&a.manifest.run_id))
    });
    Team {
        runs,
        accounting_off,
    }
}

/// The stage a job is: its comment's stage, else its job name's suffix
/// (`<run name>.<stage>`).
fn stage_of(j: &JobFacts) -> Option<StageKind> {
    let tag = parse_comment(&j.comment)?;
    tag.stage
        .and_then(StageKind::from_name)
        .or_else(|| StageKind::from_name(j.name.rsplit('.').next()?))
}

fn build(run_id: &str, jobs: &[JobFacts], rows: &[QueueRow], acct: &[AcctRow]) -> Option<TeamRun> {
    let first = jobs.first()?;
    let submitted_at = jobs.iter().filter_map(|j| j.submitted).min()?;
    let started_at = jobs.iter().filter_map(|j| j.started).min();
    let all_ended = jobs.iter().all(|j| j.ended.is_some());
    let ended_at = all_ended
        .then(|| jobs.iter().filter_map(|j| j.ended).max())
        .flatten();
    // The run directory: the WorkDir its jobs agree on.
    let dirs: BTreeSet<&str> = jobs.iter().map(|j| j.workdir.as_str()).collect();
    let workdir = match dirs.len() {
        1 => PathBuf::from(dirs.into_iter().next().unwrap_or_default()),
        _ => PathBuf::new(),
    };
    let (manifest, facts) = match read_manifest(run_id, &workdir) {
        Ok(m) => (m, Facts::Manifest),
        Err(why) => (
            from_slurm(run_id, jobs, &workdir, submitted_at),
            Facts::Slurm { why },
        ),
    };
    let status = status::of_run(&manifest, rows, acct, true);
    Some(TeamRun {
        user: first.user.clone(),
        account: first.account.clone(),
        manifest,
        status,
        submitted_at,
        started_at,
        ended_at,
        facts,
    })
}

/// The manifest in `workdir` when the caller can read it and it is this run's.
fn read_manifest(run_id: &str, workdir: &std::path::Path) -> Result<Manifest, String> {
    if workdir.as_os_str().is_empty() {
        return Err("its jobs name no one run directory".into());
    }
    let path = Manifest::path_in(workdir);
    let mut m = Manifest::load(&path).map_err(|e| format!("{:#}", e.root_cause()))?;
    if m.run_id != run_id {
        return Err(format!("{} holds run {} now", path.display(), m.run_id));
    }
    m.workdir = workdir.to_path_buf();
    Ok(m)
}

/// A manifest made of what Slurm said about a run's jobs: each stage with
/// its attempts (job ids in order), tasks and slice.
fn from_slurm(
    run_id: &str,
    jobs: &[JobFacts],
    workdir: &std::path::Path,
    submitted_at: DateTime<Utc>,
) -> Manifest {
    let name = jobs
        .iter()
        .find_map(|j| j.name.rsplit_once('.').map(|(n, _)| n.to_string()))
        .unwrap_or_else(|| run_id.to_string());
    let mut stages = Vec::new();
    for kind in StageKind::ALL {
        let of_stage: Vec<&JobFacts> = jobs.iter().filter(|j| stage_of(j) == Some(kind)).collect();
        if of_stage.is_empty() {
            continue;
        }
        let ids: BTreeSet<u64> = of_stage.iter().map(|j| j.array_job_id).collect();
        let mut max_task: Option<u32> = None;
        let attempts: Vec<Attempt> = ids
            .iter()
            .enumerate()
            .map(|(i, &id)| {
                let of_job: Vec<&&JobFacts> =
                    of_stage.iter().filter(|j| j.array_job_id == id).collect();
                let tasks: BTreeSet<u32> = of_job
                    .iter()
                    .filter_map(|j| j.job_id.split_once('_'))
                    .flat_map(|(_, t)| parse_task_list(t))
                    .collect();
                if let Some(m) = tasks.iter().max() {
                    max_task = Some(max_task.map_or(*m, |x| x.max(*m)));
                }
                let array = (!tasks.is_empty()).then(|| {
                    tasks
                        .iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                });
                Attempt {
                    attempt: i as u32 + 1,
                    job_id: id,
                    array,
                    dependency: None,
                    submitted_at: of_job
                        .iter()
                        .filter_map(|j| j.submitted)
                        .min()
                        .unwrap_or(submitted_at),
                    gres: of_job
                        .iter()
                        .map(|j| j.gres.clone())
                        .find(|g| !g.is_empty()),
                }
            })
            .collect();
        let gres = attempts.last().and_then(|a| a.gres.clone());
        stages.push(StageRecord {
            stage: kind.name().to_string(),
            job_name: of_stage[0].name.clone(),
            partition: None,
            gres,
            time: String::new(),
            cpus: 0,
            mem: String::new(),
            tasks: max_task.map_or(1, |m| m as usize + 1),
            depends_on: vec![],
            script: String::new(),
            attempts,
        });
    }
    let variants = stages
        .iter()
        .find(|s| s.stage == "train")
        .map_or(1, |s| s.tasks);
    Manifest {
        schema_version: SCHEMA_VERSION,
        run_id: run_id.to_string(),
        name,
        user: jobs[0].user.clone(),
        host: String::new(),
        submitted_at,
        workdir: workdir.to_path_buf(),
        spec_file: PathBuf::new(),
        spec_hash: String::new(),
        spec_text: String::new(),
        variants,
        gpu_explanation: vec![],
        estimate_gib: None,
        model_ref: None,
        model_refs: Vec::new(),
        stages,
    }
}

/// The runs whose id is `id` or starts with it.
pub fn matching<'a>(team: &'a Team, id: &str) -> Vec<&'a TeamRun> {
    if let Some(exact) = team.runs.iter().find(|r| r.manifest.run_id == id) {
        return vec![exact];
    }
    team.runs
        .iter()
        .filter(|r| r.manifest.run_id.starts_with(id))
        .collect()
}

/// A run named on the command line: the caller's own (index or run
/// directory), or one of someone else's that Slurm shows them.
#[derive(Debug)]
pub enum Located {
    Own(Box<Manifest>),
    /// Found through Slurm (a team member's run, for a coordinator).
    Team(Box<TeamRun>),
}

/// How far back a run named by id is looked for in accounting.
pub const LOOKUP_DAYS: i64 = 30;

/// Find a run by id: in the caller's index first; a run id the index does
/// not have is looked for among the jobs Slurm shows the caller (one
/// `squeue`, one `sacct` over the last `LOOKUP_DAYS` days). When neither
/// has it, the index's error (with its suggestions) is the answer.
pub fn locate(slurm: &Slurm, id: &str) -> Result<Located> {
    let own = super::query::find_run(id);
    let err = match own {
        Ok(m) => return Ok(Located::Own(Box::new(m))),
        Err(e) => e,
    };
    let by_id = crate::error::kind_of(&err) == Some(crate::error::Kind::InvalidInput)
        && !id.trim().is_empty()
        && !id.contains('/')
        && !err.to_string().contains("matches several runs");
    if !by_id {
        return Err(err);
    }
    let since = Utc::now() - chrono::Duration::days(LOOKUP_DAYS);
    // Slurm not answering leaves the index's answer standing.
    let Ok(team) = find(slurm, &Who::default(), since) else {
        return Err(err);
    };
    match matching(&team, id).as_slice() {
        [one] => Ok(Located::Team(Box::new((*one).clone()))),
        [] => Err(err),
        many => Err(crate::error::invalid(format!(
            "`{}` matches several runs Slurm shows you: {}",
            crate::text::echo(id),
            many.iter()
                .take(5)
                .map(|r| r.manifest.run_id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn facts(job_id: &str, state: &str, comment: &str, name: &str, workdir: &str) -> JobFacts {
        JobFacts {
            job_id: job_id.into(),
            array_job_id: job_id.split('_').next().unwrap().parse().unwrap(),
            state: state.into(),
            name: name.into(),
            user: "ys-bob".into(),
            account: "vision".into(),
            workdir: workdir.into(),
            comment: comment.into(),
            submitted: Some(Utc.with_ymd_and_hms(2026, 12, 1, 10, 0, 0).unwrap()),
            started: None,
            ended: None,
            gres: if name.ends_with(".train") {
                "gpu:1g.5gb:1".into()
            } else {
                String::new()
            },
        }
    }

    fn queue_row(job_id: &str, state: &str, reason: &str) -> QueueRow {
        let (id, tasks) = match job_id.split_once('_') {
            Some((id, t)) => (id, parse_task_list(t)),
            None => (job_id, vec![]),
        };
        QueueRow {
            job_id: job_id.into(),
            array_job_id: id.parse().unwrap(),
            tasks,
            state: state.into(),
            reason: reason.into(),
            time_used: String::new(),
            time_limit: String::new(),
            nodes: String::new(),
            gres: String::new(),
            exit_code: None,
            name: String::new(),
        }
    }

    fn acct_row(job_id: &str, state: &str) -> AcctRow {
        AcctRow {
            job_id: job_id.into(),
            state: state.into(),
            exit_code: Some(0),
            node: "node1".into(),
        }
    }

    #[test]
    fn jobs_group_into_runs_by_comment_and_an_unreadable_run_is_made_of_slurm_data() {
        let dir = "/nonexistent/ys-bob/runs/pcb";
        let queued = vec![
            (
                queue_row("41_[2-3]", "PENDING", "JobArrayTaskLimit"),
                facts(
                    "41_[2-3]",
                    "PENDING",
                    "yolo-sched:pcb-1:ab:train",
                    "pcb.train",
                    dir,
                ),
            ),
            (
                queue_row("41_1", "RUNNING", "None"),
                facts(
                    "41_1",
                    "RUNNING",
                    "yolo-sched:pcb-1:ab:train",
                    "pcb.train",
                    dir,
                ),
            ),
            (
                queue_row("42", "PENDING", "Dependency"),
                facts(
                    "42",
                    "PENDING",
                    "yolo-sched:pcb-1:ab:export",
                    "pcb.export",
                    dir,
                ),
            ),
            // Not a yolo-sched job: ignored.
            (
                queue_row("50", "RUNNING", "None"),
                facts("50", "RUNNING", "", "bash", "/tmp"),
            ),
        ];
        let accounted = vec![
            (
                acct_row("40", "COMPLETED"),
                facts(
                    "40",
                    "COMPLETED",
                    "yolo-sched:pcb-1:ab:prepare",
                    "pcb.prepare",
                    dir,
                ),
            ),
            (
                acct_row("41_0", "COMPLETED"),
                facts(
                    "41_0",
                    "COMPLETED",
                    "yolo-sched:pcb-1:ab:train",
                    "pcb.train",
                    dir,
                ),
            ),
            // squeue has job 42: sacct's row for it is not used.
            (
                acct_row("42", "PENDING"),
                facts(
                    "42",
                    "PENDING",
                    "yolo-sched:pcb-1:ab:export",
                    "pcb.export",
                    dir,
                ),
            ),
            (
                acct_row("60", "FAILED"),
                facts("60", "FAILED", "yolo-sched:old-2", "old.prepare", "/x"),
            ),
        ];
        let since = Utc.with_ymd_and_hms(2026, 11, 1, 0, 0, 0).unwrap();
        let team = assemble(queued, accounted, false, since);
        assert_eq!(team.runs.len(), 2, "{:?}", team.runs);
        let run = team
            .runs
            .iter()
            .find(|r| r.manifest.run_id == "pcb-1")
            .unwrap();
        assert!(matches!(run.facts, Facts::Slurm { .. }), "{:?}", run.facts);
        assert_eq!(
            (run.user.as_str(), run.account.as_str()),
            ("ys-bob", "vision")
        );
        assert_eq!(run.manifest.name, "pcb");
        let names: Vec<&str> = run.status.stages.iter().map(|s| s.stage.as_str()).collect();
        assert_eq!(names, ["prepare", "train", "export"]);
        let train = run.status.stage("train").unwrap();
        assert_eq!(train.tasks.len(), 4, "tasks 0..=3 of the sweep");
        assert_eq!(train.gres.as_deref(), Some("gpu:1g.5gb:1"));
        assert_eq!(run.status.state.word(), "running");
        assert_eq!(
            run.status.stage("prepare").unwrap().state.word(),
            "completed"
        );
        // A comment without a stage names it through the job name.
        let old = team
            .runs
            .iter()
            .find(|r| r.manifest.run_id == "old-2")
            .unwrap();
        assert_eq!(old.status.stages[0].stage, "prepare");
        assert_eq!(old.status.state.word(), "failed");
        assert_eq!(matching(&team, "pcb").len(), 1);
        assert_eq!(matching(&team, "nope").len(), 0);
    }
}
