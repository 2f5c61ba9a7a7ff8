//! `resume`: resubmit the first stage that did not complete and everything
//! after it, for the sweep variants that need it, as a new attempt.
//!
//! Completed stages are not rerun and no new job depends on their old ids
//! (an `afterok` on a purged id passes silently). Training continues from
//! `weights/last.pt`; a variant whose training had finished is skipped by the
//! train script itself (its done marker), because resuming a finished
//! Ultralytics run fails.

use std::fs::OpenOptions;
use std::path::PathBuf;

use anyhow::{anyhow, Context, Result};
use chrono::Utc;
use nix::fcntl::{Flock, FlockArg};
use serde::Serialize;

use super::chain::{self as submitter, JobRequest, SubmittedJob};
use super::escalate::GpuChange;
use super::journal::{Journal, Phase, Purpose};
use super::status::{RunState, RunStatus, TaskState};
use crate::error::invalid;
use crate::plan::DepKind;
use crate::rundir::manifest::{Attempt, Manifest};
use crate::slurm::Slurm;
use crate::spec::StageKind;

/// What a resume will submit.
#[derive(Debug, Clone, Serialize)]
pub struct ResumePlan {
    /// Index into the manifest's stages of the first stage to resubmit.
    pub from: usize,
    pub stages: Vec<String>,
    /// Sweep variants (array tasks) to rerun; `None` for a run without arrays.
    pub tasks: Option<Vec<u32>>,
    /// A search (`[tune]`): the batches to run again, from the first whose
    /// tell did not complete (`None` otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batches: Option<std::ops::Range<u32>>,
}

/// The stage a manifest names (`StageKind::from_name`, the one mapping).
pub fn stage_kind(name: &str) -> Option<StageKind> {
    StageKind::from_name(name)
}

/// Decide what to resubmit, or say why not.
pub fn plan_resume(manifest: &Manifest, status: &RunStatus) -> Result<ResumePlan> {
    if super::query::is_active(status) {
        return Err(invalid(format!(
            "run {} is still active ({}): wait for it, or `yolo-sched cancel {}` first",
            manifest.run_id,
            status.state.describe(),
            manifest.run_id
        )));
    }
    if status.state == RunState::Completed {
        return Err(invalid(format!(
            "run {} completed: nothing to resume",
            manifest.run_id
        )));
    }
    if crate::rundir::search::is_search(manifest) {
        return plan_search(manifest, status);
    }
    let from = status
        .stages
        .iter()
        .position(|s| s.state != TaskState::Completed)
        .ok_or_else(|| {
            invalid(format!(
                "run {}: every stage completed; nothing to resume",
                manifest.run_id
            ))
        })?;
    let is_array = manifest.stages.iter().any(|s| s.tasks > 1);
    let tasks = if is_array {
        let mut set: Vec<u32> = status.stages[from..]
            .iter()
            .flat_map(|s| {
                s.tasks
                    .iter()
                    .filter(|t| t.state != TaskState::Completed)
                    .filter_map(|t| t.task)
            })
            .collect();
        set.sort_unstable();
        set.dedup();
        if set.is_empty() && manifest.stages[from].tasks <= 1 {
            None
        } else if set.is_empty() {
            (0..manifest.variants as u32).collect::<Vec<_>>().into()
        } else {
            Some(set)
        }
    } else {
        None
    };
    // The outputs the resubmitted stages read must still be there.
    let upstream_done: Vec<&str> = manifest.stages[..from]
        .iter()
        .map(|s| s.stage.as_str())
        .collect();
    if upstream_done.contains(&"train") {
        let variants: Vec<Option<u32>> = match &tasks {
            Some(t) => t.iter().copied().map(Some).collect(),
            None => vec![None],
        };
        for v in variants {
            // A task exists only for a sweep of several variants (layout's one rule).
            let dir = crate::rundir::layout::train_dir(v.filter(|_| manifest.variants > 1));
            let best = manifest.workdir.join(&dir).join("weights").join("best.pt");
            if !best.exists() {
                return Err(anyhow!(
                    "cannot resume run {}: the completed train stage's output {} is gone; \
                     submit the spec again to retrain",
                    manifest.run_id,
                    best.display()
                ));
            }
        }
    }
    for s in &manifest.stages[from..] {
        let script = manifest.workdir.join(&s.script);
        if !script.exists() {
            return Err(anyhow!(
                "cannot resume run {}: its script {} is gone",
                manifest.run_id,
                script.display()
            ));
        }
    }
    Ok(ResumePlan {
        from,
        stages: manifest.stages[from..]
            .iter()
            .map(|s| s.stage.clone())
            .collect(),
        tasks,
        batches: None,
    })
}

/// The spec's `[tune]` as it was submitted.
fn search_of(manifest: &Manifest) -> Result<crate::spec::Tune> {
    crate::spec::parse(
        &manifest.spec_text,
        &manifest.spec_file.display().to_string(),
    )
    .ok()
    .and_then(|s| s.tune)
    .ok_or_else(|| {
        anyhow!(
            "cannot resume run {}: the spec in its manifest has no readable [tune]",
            manifest.run_id
        )
    })
}

/// A stopped search continues from its study: the batches from the first
/// whose tell did not complete (its ask keeps the trials already told and
/// asks again for the rest), then the export; prepare first if it did not
/// complete.
fn plan_search(manifest: &Manifest, status: &RunStatus) -> Result<ResumePlan> {
    let tune = search_of(manifest)?;
    let done = |name: &str| {
        status
            .stage(name)
            .is_none_or(|s| s.state == TaskState::Completed)
    };
    let told: Vec<u32> = status
        .stage("tell")
        .map(|s| {
            s.tasks
                .iter()
                .filter(|t| t.state == TaskState::Completed)
                .filter_map(|t| t.task)
                .collect()
        })
        .unwrap_or_default();
    let first = (0..tune.batches()).find(|b| !told.contains(b));
    let mut stages: Vec<String> = Vec::new();
    if !done("prepare") {
        stages.push("prepare".into());
    }
    if first.is_some() {
        stages.extend(["ask", "train", "tell"].map(String::from));
    }
    if (!done("export") || first.is_some()) && manifest.stages.iter().any(|s| s.stage == "export") {
        stages.push("export".into());
    }
    if stages.is_empty() {
        return Err(invalid(format!(
            "run {}: every stage completed; nothing to resume",
            manifest.run_id
        )));
    }
    for s in manifest.stages.iter().filter(|s| stages.contains(&s.stage)) {
        let script = manifest.workdir.join(&s.script);
        if !script.exists() {
            return Err(anyhow!(
                "cannot resume run {}: its script {} is gone",
                manifest.run_id,
                script.display()
            ));
        }
    }
    let from = manifest
        .stages
        .iter()
        .position(|s| stages.contains(&s.stage))
        .unwrap_or(0);
    Ok(ResumePlan {
        from,
        stages,
        tasks: None,
        batches: first.map(|b| b..tune.batches()),
    })
}

/// The job requests of a search's resume: the stages' scripts, one ask,
/// trial array and tell per batch left (`tune::expand_batches`).
fn search_requests(
    manifest: &Manifest,
    plan: &ResumePlan,
    export: &[(String, String)],
) -> Result<Vec<JobRequest>> {
    let tune = search_of(manifest)?;
    let again = |name: &str| plan.stages.iter().any(|s| s == name);
    let mut base = Vec::new();
    for s in manifest.stages.iter().filter(|s| again(&s.stage)) {
        let kind = stage_kind(&s.stage)
            .ok_or_else(|| anyhow!("manifest has an unknown stage `{}`", s.stage))?;
        let after = match kind {
            StageKind::Ask if again("prepare") => vec![(StageKind::Prepare, DepKind::AfterOk)],
            StageKind::Train => vec![(StageKind::Ask, DepKind::AfterOk)],
            StageKind::Tell => vec![(StageKind::Train, DepKind::AfterAny)],
            StageKind::Export if again("tell") => vec![(StageKind::Tell, DepKind::AfterOk)],
            StageKind::Export if again("prepare") => vec![(StageKind::Prepare, DepKind::AfterOk)],
            _ => vec![],
        };
        base.push(JobRequest {
            kind,
            script: manifest.workdir.join(&s.script),
            workdir: manifest.workdir.clone(),
            array: None,
            after,
            export: export.to_vec(),
            overrides: vec![],
        });
    }
    Ok(match &plan.batches {
        Some(b) => super::tune::expand_batches(&tune, base, b.clone()),
        None => base,
    })
}

/// Check the stages a resume would resubmit against the cluster as it is
/// now: nodes may have shrunk, drained or left the partition since submit.
/// A stage no node can ever run is refused (exit 2) before anything is
/// submitted, with what it asks and what the partition offers.
pub fn check_fit(
    manifest: &Manifest,
    plan: &ResumePlan,
    cluster: &crate::slurm::cluster::Cluster,
) -> Result<()> {
    use crate::plan::resources::{self, GpuAsk, Source, Stage, Wants};
    let mut problems = Vec::new();
    for s in &manifest.stages[plan.from..] {
        let gpu = s.gres.as_deref().and_then(GpuAsk::parse);
        let mem = crate::spec::values::parse_mem(&s.mem)
            .ok()
            .map(|m| m.mebibytes);
        let table = if s.stage == "train" {
            "[resources]".to_string()
        } else {
            format!("[stages.{}]", s.stage)
        };
        let request = Stage {
            name: &s.stage,
            table: &table,
            partition: s.partition.as_deref(),
            gpu: gpu.as_ref(),
            wants: Wants {
                cpus: Some((s.cpus, Source::Spec)),
                mem_mib: mem.map(|m| (m, Source::Spec)),
            },
            time_secs: crate::slurm::time::parse_duration(&s.time)
                .ok()
                .unwrap_or(0),
            time_text: &s.time,
        };
        if let Err(unfit) = resources::shape(cluster, &request) {
            problems.push(format!("{} ({})", unfit.message, unfit.help));
        }
    }
    if problems.is_empty() {
        return Ok(());
    }
    Err(invalid(format!(
        "cannot resume run {}: the cluster can no longer run what it asked for, so nothing was resubmitted:\n  {}\n\
         change the spec and submit it again (with another `[run] workdir`), or ask an administrator to bring the nodes back",
        manifest.run_id,
        problems.join("\n  ")
    )))
}

/// Held exclusively while a resume runs, so two resumes of one run cannot both submit.
pub struct RunLock {
    _lock: Flock<std::fs::File>,
}

/// `lock_run`, waiting up to `patience` for another holder to finish: two
/// trials of one batch that run out of memory together move one after the
/// other (`tune escalate`).
pub fn lock_run_waiting(manifest: &Manifest, patience: std::time::Duration) -> Result<RunLock> {
    let deadline = std::time::Instant::now() + patience;
    loop {
        match lock_run(manifest) {
            Ok(lock) => return Ok(lock),
            Err(e) if std::time::Instant::now() >= deadline => return Err(e),
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(200)),
        }
    }
}

pub fn lock_run(manifest: &Manifest) -> Result<RunLock> {
    let path: PathBuf = manifest.workdir.join(".yolo-sched.lock");
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => Ok(RunLock { _lock: lock }),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Err(anyhow!(
            "another yolo-sched command is changing run {} right now (lock {}); try again when it has finished",
            manifest.run_id,
            path.display()
        )),
        Err((_, e)) => Err(anyhow!("locking {}: {e}", path.display())),
    }
}

/// The job requests of a resume plan: the stages' existing scripts, arrays
/// limited to the variants to rerun, dependencies only inside this submission.
pub fn requests(
    manifest: &Manifest,
    plan: &ResumePlan,
    yolo: Option<&str>,
    gpu: Option<&GpuChange>,
) -> Result<Vec<JobRequest>> {
    let export: Vec<(String, String)> = yolo
        .map(|y| vec![("YOLO_SCHED_RUN_YOLO".to_string(), y.to_string())])
        .unwrap_or_default();
    if plan.batches.is_some() || crate::rundir::search::is_search(manifest) {
        if gpu.is_some() {
            return Err(invalid(format!(
                "run {} is a search: `--gpu` does not apply (every trial trains on the slice planned for the search)",
                manifest.run_id
            )));
        }
        return search_requests(manifest, plan, &export);
    }
    let mut out = Vec::new();
    let mut previous: Option<(StageKind, bool)> = None;
    for s in &manifest.stages[plan.from..] {
        let kind = stage_kind(&s.stage)
            .ok_or_else(|| anyhow!("manifest has an unknown stage `{}`", s.stage))?;
        let is_array = s.tasks > 1;
        let array = match (&plan.tasks, is_array) {
            (Some(t), true) => {
                let throttle = s
                    .attempts
                    .first()
                    .and_then(|a| a.array.as_ref())
                    .and_then(|a| a.split_once('%').map(|(_, p)| p.to_string()));
                let list: Vec<String> = t.iter().map(u32::to_string).collect();
                Some(match throttle {
                    Some(p) => format!("{}%{p}", list.join(",")),
                    None => list.join(","),
                })
            }
            _ => None,
        };
        let after = match previous {
            Some((prev, prev_array)) => vec![(
                prev,
                if prev_array && is_array {
                    DepKind::AfterCorr
                } else {
                    DepKind::AfterOk
                },
            )],
            None => vec![],
        };
        out.push(JobRequest {
            kind,
            script: manifest.workdir.join(&s.script),
            workdir: manifest.workdir.clone(),
            array,
            after,
            export: export.clone(),
            overrides: match gpu {
                Some(change) if kind == StageKind::Train => change.sbatch_overrides(),
                _ => vec![],
            },
        });
        previous = Some((kind, is_array));
    }
    Ok(out)
}

/// Submit the resume, record the new attempt in the manifest, release.
pub fn execute(
    slurm: &Slurm,
    manifest: &mut Manifest,
    plan: &ResumePlan,
    yolo: Option<&str>,
    gpu: Option<&GpuChange>,
) -> Result<Vec<SubmittedJob>> {
    if gpu.is_some() && !plan.stages.iter().any(|s| s == "train") {
        return Err(invalid(format!(
            "run {}: training completed, so --gpu would change nothing; resume without it",
            manifest.run_id
        )));
    }
    let reqs = requests(manifest, plan, yolo, gpu)?;
    let mut journal = Journal::begin(Purpose::Resume, &manifest.run_id, &manifest.workdir)?;
    let submitted = match submitter::submit_held(slurm, &reqs, &mut journal) {
        Ok(s) => s,
        Err(e) => {
            super::submit::finish_if_clean(slurm, journal);
            return Err(e);
        }
    };
    let now = Utc::now();
    // `submit_held` answers in the requests' order (a search has several
    // jobs of one stage: one per batch).
    for (job, req) in submitted.iter().zip(&reqs) {
        let name = crate::plan::stage_name(job.stage);
        let stage = manifest
            .stages
            .iter_mut()
            .find(|s| s.stage == name)
            .expect("resubmitted stages come from the manifest");
        let attempt = stage.attempts.len() as u32 + 1;
        stage.attempts.push(Attempt {
            attempt,
            job_id: job.job_id,
            array: req
                .array
                .clone()
                .or_else(|| (stage.tasks > 1).then(|| format!("0-{}", stage.tasks - 1))),
            dependency: job.dependency.clone(),
            submitted_at: now,
            gres: gpu
                .filter(|_| job.stage == StageKind::Train)
                .map(|c| c.gres.clone()),
        });
        if let (Some(change), StageKind::Train) = (gpu, job.stage) {
            // The earlier attempts keep the slice they had; the stage asks
            // for the new one from now on (a later resume keeps it).
            let before = stage.gres.clone();
            for a in stage.attempts.iter_mut().filter(|a| a.gres.is_none()) {
                a.gres = before.clone();
            }
            stage.gres = Some(change.gres.clone());
            stage.cpus = change.cpus;
            stage.mem = change.mem.clone();
            stage.partition = Some(change.partition.clone());
        }
    }
    if let Err(e) = manifest
        .save()
        .and_then(|()| journal.set_phase(Phase::Recorded))
    {
        let undo = submitter::roll_back(slurm, &submitted);
        super::submit::finish_if_clean(slurm, journal);
        return Err(e.context(undo));
    }
    if let Err(e) = submitter::release(slurm, &submitted) {
        super::submit::finish_if_clean(slurm, journal);
        return Err(e);
    }
    let _ = journal.set_phase(Phase::Released);
    journal.finish();
    Ok(submitted)
}
