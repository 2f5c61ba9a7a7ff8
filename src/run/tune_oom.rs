//! A search's trial that ran out of GPU memory, per `[resources] on_oom`:
//! with `"resume-bigger"` it goes on from its checkpoint on the next larger
//! slice as a new job of its own (`tune escalate`, called by the trial's
//! train script before it exits), which its batch's tell job then waits for
//! too; with `"stop"` (or once `on_oom_steps` moves are made) its tell job
//! tells it `fail`, and `status` says why (`run::tune::gpu_oom_why`).
//!
//! The batch stays one batch: the tell job's `afterany` is extended to the
//! new job with `scontrol update` while the trial's old job still runs (so
//! the tell cannot have started), the new job waits for the old one, and no
//! trial is ever left running when the tell records the batch. Only the tell
//! writes the study, as before. Two trials of one batch moving at once take
//! the run's lock in turn, and each sets the tell's whole dependency from the
//! manifest and the queue, so neither undoes the other's.

use anyhow::{anyhow, Context, Result};
use chrono::Utc;
use serde::Serialize;

use super::chain::{self, JobRequest};
use super::escalate::{gpu_change_from, GpuWanted};
use super::journal::{Journal, Phase, Purpose};
use crate::error::invalid;
use crate::rundir::manifest::{Attempt, Manifest, StageRecord};
use crate::rundir::search::{
    read_oom, task_list, trial_attempts, trial_gres, trial_moves, write_oom, OomRecord,
};
use crate::slurm::cluster::Cluster;
use crate::slurm::states::{classify, Class};
use crate::slurm::Slurm;
use crate::spec::StageKind;

fn stage<'a>(manifest: &'a Manifest, name: &str) -> Option<&'a StageRecord> {
    manifest.stages.iter().find(|s| s.stage == name)
}

/// What `tune escalate` did.
#[derive(Debug, Clone, Serialize)]
pub struct TrialMove {
    pub trial: u32,
    pub batch: u32,
    pub from: Option<String>,
    pub gres: String,
    pub job_id: u64,
    /// The batch's tell job and the dependency it has now.
    pub tell_job: u64,
    pub tell_dependency: String,
    /// Moves of this trial so far, this one included.
    pub moves: usize,
}

/// Move trial `trial`, whose job (array) `job` is ending out of GPU memory,
/// to the next larger slice: submit its new job (after `job`'s task),
/// extend its batch's tell job to wait for it, record it in the manifest
/// (the caller holds the run's lock and read the manifest under it).
/// Refused, with nothing changed, when the trial has moved `max_moves`
/// times, `job` is not its latest job, no larger slice exists, or the tell
/// no longer waits. The refusal also goes into the trial's record, for the
/// tell job and `status`.
pub fn move_trial(
    slurm: &Slurm,
    manifest: &mut Manifest,
    cluster: &Cluster,
    policy: &crate::plan::Policy,
    trial: u32,
    job: u64,
    max_moves: u32,
) -> Result<TrialMove> {
    let result = plan_and_move(slurm, manifest, cluster, policy, trial, job, max_moves);
    let mut record = read_oom(&manifest.workdir, trial).unwrap_or_else(|| OomRecord {
        cause: "out of GPU memory".into(),
        job: format!("{job}_{trial}"),
        ..OomRecord::default()
    });
    match &result {
        Ok(m) => {
            record.gres = record.gres.take().or(m.from.clone());
            record.moved_to = Some(m.gres.clone());
            record.moved_job = Some(m.job_id);
            record.not_moved = None;
        }
        Err(e) => record.not_moved = Some(format!("{e:#}")),
    }
    // The record only explains; a failure to write it changes no outcome.
    let _ = write_oom(&manifest.workdir, trial, &record);
    result
}

fn plan_and_move(
    slurm: &Slurm,
    manifest: &mut Manifest,
    cluster: &Cluster,
    policy: &crate::plan::Policy,
    trial: u32,
    job: u64,
    max_moves: u32,
) -> Result<TrialMove> {
    let (tune, moves) = allowed_move(manifest, trial, job, max_moves)?;
    let from = trial_gres(manifest, trial);
    let change = gpu_change_from(manifest, from.clone(), cluster, policy, &GpuWanted::Bigger)?;
    let batch = trial / tune.parallel.max(1);
    let (tell, waits) = what_the_tell_waits_for(slurm, manifest, &tune, batch, trial, job)?;
    let (new_job, dependency) =
        submit_the_move(slurm, manifest, &change, trial, job, (batch, tell), waits)?;
    Ok(TrialMove {
        trial,
        batch,
        from,
        gres: change.gres,
        job_id: new_job,
        tell_job: tell,
        tell_dependency: dependency,
        moves: moves + 1,
    })
}

/// The search's `[tune]` and the trial's moves so far, when job `job` is the
/// trial's latest and it may move again.
fn allowed_move(
    manifest: &Manifest,
    trial: u32,
    job: u64,
    max_moves: u32,
) -> Result<(crate::spec::Tune, usize)> {
    let tune = crate::spec::parse(
        &manifest.spec_text,
        &manifest.spec_file.display().to_string(),
    )
    .ok()
    .and_then(|s| s.tune)
    .ok_or_else(|| {
        invalid(format!(
            "run {} is not a search (its spec has no readable [tune])",
            manifest.run_id
        ))
    })?;
    if trial >= tune.trials {
        return Err(invalid(format!(
            "run {}: no trial {trial} (the search has {} trials)",
            manifest.run_id, tune.trials
        )));
    }
    let train = stage(manifest, "train")
        .ok_or_else(|| invalid(format!("run {} has no train stage", manifest.run_id)))?;
    let latest = trial_attempts(train, trial).last().map(|a| a.job_id);
    if latest != Some(job) {
        return Err(invalid(format!(
            "job {job} is not the latest job of trial {trial} of run {} ({})",
            manifest.run_id,
            latest.map_or("it has none".into(), |j| format!("that is {j}"))
        )));
    }
    let moves = trial_moves(manifest, trial);
    if moves >= max_moves as usize {
        return Err(invalid(format!(
            "trial {trial} has moved to a bigger slice {moves} time(s) already \
             ([resources] on_oom_steps = {max_moves}); not moving again: its tell job tells it fail"
        )));
    }
    Ok((tune, moves))
}

/// The batch's tell job, when it still waits, and the jobs that may still
/// run a trial of the batch (this job among them).
fn what_the_tell_waits_for(
    slurm: &Slurm,
    manifest: &Manifest,
    tune: &crate::spec::Tune,
    batch: u32,
    trial: u32,
    job: u64,
) -> Result<(u64, Vec<u64>)> {
    let tell = stage(manifest, "tell")
        .and_then(|s| {
            s.attempts
                .iter()
                .rev()
                .find(|a| task_list(s, a).contains(&batch))
        })
        .map(|a| a.job_id)
        .ok_or_else(|| anyhow!("run {}: batch {batch} has no tell job", manifest.run_id))?;
    // The jobs that may still run a trial of this batch: its array (this
    // job's task among them) and the trials' moves since.
    let mut batch_jobs: Vec<u64> = tune
        .batch_trials(batch)
        .flat_map(|n| {
            let train = stage(manifest, "train").expect("checked above");
            trial_attempts(train, n)
                .into_iter()
                .map(|a| a.job_id)
                .collect::<Vec<_>>()
        })
        .collect();
    batch_jobs.sort_unstable();
    batch_jobs.dedup();
    let mut asked = batch_jobs.clone();
    asked.push(tell);
    let rows =
        crate::slurm::squeue::jobs(slurm, &asked).context("asking Slurm for the batch's jobs")?;
    let tell_state = rows
        .iter()
        .find(|r| r.array_job_id == tell && r.tasks.iter().all(|t| *t == batch))
        .map(|r| r.state.clone());
    if tell_state.as_deref() != Some("PENDING") {
        return Err(invalid(format!(
            "the tell job {tell} of batch {batch} no longer waits ({}): trial {trial} is told as it ended",
            tell_state.as_deref().unwrap_or("not in the queue")
        )));
    }
    // Jobs that ended need no waiting for (and may be purged from Slurm's
    // memory, where a dependency on them would be refused).
    let waits: Vec<u64> = batch_jobs
        .iter()
        .copied()
        .filter(|id| {
            *id == job
                || rows.iter().any(|r| {
                    r.array_job_id == *id
                        && matches!(classify(&r.state), Class::Waiting | Class::Running)
                })
        })
        .collect();

    Ok((tell, waits))
}

/// Submits the trial again on `change`'s slice after `job`, makes the tell
/// wait for it too and records both: the new job and the tell's dependency.
fn submit_the_move(
    slurm: &Slurm,
    manifest: &mut Manifest,
    change: &super::escalate::GpuChange,
    trial: u32,
    job: u64,
    (batch, tell): (u32, u64),
    mut waits: Vec<u64>,
) -> Result<(u64, String)> {
    let train = stage(manifest, "train").expect("checked above");
    let mut overrides = change.sbatch_overrides();
    overrides.push(format!("--dependency=afterany:{job}_{trial}"));
    let request = JobRequest {
        kind: StageKind::Train,
        script: manifest.workdir.join(&train.script),
        workdir: manifest.workdir.clone(),
        array: Some(trial.to_string()),
        after: vec![],
        export: vec![],
        overrides,
    };
    let mut journal = Journal::begin(Purpose::Resume, &manifest.run_id, &manifest.workdir)?;
    let submitted = match chain::submit_held(slurm, std::slice::from_ref(&request), &mut journal) {
        Ok(s) => s,
        Err(e) => {
            super::submit::finish_if_clean(slurm, journal);
            return Err(e);
        }
    };
    let new_job = submitted[0].job_id;
    waits.push(new_job);
    let dependency = format!(
        "afterany:{}",
        waits
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(":")
    );
    if let Err(e) = crate::slurm::control::set_dependency(slurm, &tell.to_string(), &dependency) {
        let undo = chain::roll_back(slurm, &submitted);
        super::submit::finish_if_clean(slurm, journal);
        return Err(e.context(format!(
            "the tell job {tell} of batch {batch} could not be made to wait for the trial's new job; {undo}"
        )));
    }
    let train = manifest
        .stages
        .iter_mut()
        .find(|s| s.stage == "train")
        .expect("checked above");
    let attempt = train.attempts.len() as u32 + 1;
    train.attempts.push(Attempt {
        attempt,
        job_id: new_job,
        array: Some(trial.to_string()),
        dependency: Some(format!("afterany:{job}_{trial}")),
        submitted_at: Utc::now(),
        gres: Some(change.gres.clone()),
    });
    if let Some(a) = manifest
        .stages
        .iter_mut()
        .find(|s| s.stage == "tell")
        .and_then(|s| s.attempts.iter_mut().rev().find(|a| a.job_id == tell))
    {
        a.dependency = Some(dependency.clone());
    }
    if let Err(e) = manifest
        .save()
        .and_then(|()| journal.set_phase(Phase::Recorded))
    {
        // The tell's dependency on a cancelled job is met at once.
        let undo = chain::roll_back(slurm, &submitted);
        super::submit::finish_if_clean(slurm, journal);
        return Err(e.context(undo));
    }
    if let Err(e) = chain::release(slurm, &submitted) {
        super::submit::finish_if_clean(slurm, journal);
        return Err(e);
    }
    let _ = journal.set_phase(Phase::Released);
    journal.finish();
    Ok((new_job, dependency))
}
