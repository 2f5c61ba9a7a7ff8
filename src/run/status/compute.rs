//! Putting a run's status together (pure over `RunDir`): each task from
//! Slurm's row or the job files, each stage, the run state.

use super::*;
use crate::rundir::search::is_search;
use crate::rundir::ultralytics::{epochs_of, final_validation, progress_of, validation_summary};

/// The task ids of an attempt: all of `0..tasks`, or the subset it was submitted with.
pub fn attempt_tasks(stage: &StageRecord, attempt: &Attempt) -> Option<Vec<u32>> {
    if stage.tasks <= 1 && attempt.array.is_none() {
        return None;
    }
    Some(match &attempt.array {
        Some(a) => parse_task_list(a),
        None => (0..stage.tasks as u32).collect(),
    })
}

fn task_from_row(
    row: &QueueRow,
    task: Option<u32>,
    upstream: Option<&str>,
    files: Option<&(Option<JobFileRecord>, Option<JobFileRecord>)>,
) -> TaskStatus {
    let state = TaskState::from_slurm(&row.state);
    let slice = files
        .and_then(|f| f.0.as_ref())
        .map(|s| s.gpus.clone())
        .filter(|g| !g.is_empty());
    let reason_text = reason_in_words(&row.reason, Some(&row.gres), upstream);
    TaskStatus {
        task,
        job_id: match task {
            Some(t) => format!("{}_{t}", row.array_job_id),
            None => row.job_id.clone(),
        },
        state,
        slurm_state: Some(row.state.clone()),
        reason: (!row.reason.is_empty()).then(|| row.reason.clone()),
        reason_text,
        elapsed: Some(row.time_used.clone()),
        time_limit: Some(row.time_limit.clone()),
        node: (!row.nodes.is_empty()).then(|| row.nodes.clone()),
        slice,
        exit_code: if state == TaskState::Completed || state == TaskState::Failed {
            row.exit_code
        } else {
            None
        },
        source: Source::Squeue,
        guard: None,
    }
}

fn task_from_files(
    job_id: String,
    task: Option<u32>,
    attempt_id: u64,
    files: Option<&(Option<JobFileRecord>, Option<JobFileRecord>)>,
) -> TaskStatus {
    let mine = |r: &&JobFileRecord| r.array_job_id == attempt_id.to_string();
    let start = files.and_then(|f| f.0.as_ref()).filter(mine);
    let end = files.and_then(|f| f.1.as_ref()).filter(mine);
    let (state, exit_code) = match (start, end) {
        (_, Some(e)) => match e.exit_code {
            Some(0) => (TaskState::Completed, Some(0)),
            other => (TaskState::Failed, other),
        },
        (Some(_), None) => (TaskState::Lost, None),
        (None, None) => (TaskState::Unknown, None),
    };
    TaskStatus {
        task,
        job_id,
        state,
        slurm_state: None,
        reason: None,
        reason_text: None,
        elapsed: None,
        time_limit: None,
        node: start.map(|s| s.node.clone()),
        slice: start.map(|s| s.gpus.clone()).filter(|g| !g.is_empty()),
        exit_code,
        source: if start.is_some() || end.is_some() {
            Source::JobFiles
        } else {
            Source::None
        },
        guard: None,
    }
}

/// The status of one run from what Slurm said (`rows`, `acct`) and the job
/// files in its workdir: what `status`, `watch`, `list` and `report` all use.
pub fn of_run(
    manifest: &Manifest,
    rows: &[QueueRow],
    acct: &[AcctRow],
    slurm_reachable: bool,
) -> RunStatus {
    let mut status = compute(
        manifest,
        rows,
        acct,
        &read_job_files(&manifest.workdir),
        &OnDisk(&manifest.workdir),
        slurm_reachable,
    );
    status.backup = crate::backup::views(&manifest.workdir, std::time::SystemTime::now());
    if is_search(manifest) {
        // An unreadable summary is no status of its own: the stages say it.
        status.tune = crate::rundir::search::read_summary(&manifest.workdir)
            .ok()
            .flatten();
        if let Some(summary) = status.tune.as_mut() {
            crate::run::tune::explain_failures(summary, &OnDisk(&manifest.workdir), manifest);
        }
    }
    status
}

/// Put everything together. `rows` come from one squeue call over every
/// latest-attempt job id; `acct` from at most one sacct call.
pub fn compute(
    manifest: &Manifest,
    rows: &[QueueRow],
    acct: &[AcctRow],
    files: &JobFiles,
    dir: &dyn RunDir,
    slurm_reachable: bool,
) -> RunStatus {
    let mut stages = Vec::new();
    // The memory guard's records (state/<key>.guard.json), read like results.csv.
    let guards = dir.guards();
    let inputs = Inputs {
        rows,
        acct,
        files,
        guards: &guards,
        slurm_reachable,
    };
    let stage_names: Vec<&str> = manifest.stages.iter().map(|s| s.stage.as_str()).collect();
    for (si, stage) in manifest.stages.iter().enumerate() {
        // The stages this one waits for: its recorded dependencies, else the one before it.
        let deps: Vec<&str> = if stage.depends_on.is_empty() {
            stage_names[..si].last().copied().into_iter().collect()
        } else {
            stage.depends_on.iter().map(String::as_str).collect()
        };
        let upstream = (!deps.is_empty()).then(|| deps.join(" and "));
        let upstream = upstream.as_deref();
        let Some(latest) = stage.latest() else {
            stages.push(StageStatus {
                stage: stage.stage.clone(),
                state: TaskState::Unknown,
                attempt: 0,
                job_id: None,
                gres: stage.gres.clone(),
                attempts: attempt_slices(stage),
                time_limit: stage.time.clone(),
                tasks: vec![],
                counts: BTreeMap::new(),
                progress: vec![],
                exported_validation: vec![],
            });
            continue;
        };
        // Each task's state comes from the latest attempt that ran it: a
        // resume may resubmit only some variants of a sweep.
        let universe: Vec<Option<u32>> = if stage.tasks > 1 || latest.array.is_some() {
            (0..stage.tasks.max(1) as u32).map(Some).collect()
        } else {
            vec![None]
        };
        let mut tasks = Vec::new();
        for task in universe {
            tasks.push(task_status(
                &inputs, stage, latest, task, &stages, &deps, upstream,
            ));
        }
        let attempt = latest;
        let mut counts = BTreeMap::new();
        for t in &tasks {
            *counts.entry(t.state.word().to_string()).or_insert(0) += 1;
        }
        let mut state = aggregate(&tasks);
        if stage.stage == "train" && is_search(manifest) && state == TaskState::Failed {
            // A search's failed trial is an outcome its tell job records
            // (`fail`), not the run's failure: the trials as a stage are over.
            let ended: Vec<TaskStatus> = tasks
                .iter()
                .cloned()
                .map(|mut t| {
                    if matches!(t.state, TaskState::Failed | TaskState::Lost) {
                        t.state = TaskState::Completed;
                    }
                    t
                })
                .collect();
            state = aggregate(&ended);
        }
        let progress = if stage.stage == "train" {
            let epochs = epochs_of(manifest);
            tasks
                .iter()
                .filter_map(|t| {
                    let train_dir = crate::rundir::layout::train_dir(t.task);
                    let log = crate::rundir::layout::log_file("train", t.task);
                    progress_of(&dir.results(&train_dir)?, epochs).map(|mut p| {
                        p.final_validation = dir.log_tail(&log).and_then(|l| final_validation(&l));
                        (t.task, p)
                    })
                })
                .collect()
        } else {
            vec![]
        };
        let exported_validation = if stage.stage == "export" && state == TaskState::Completed {
            tasks
                .iter()
                .filter_map(|t| {
                    let log = match t.task {
                        Some(i) => format!("export-{i}.out"),
                        None => "export.out".to_string(),
                    };
                    dir.log_tail(&log)
                        .and_then(|l| validation_summary(&l))
                        .map(|v| (t.task, v))
                })
                .collect()
        } else {
            vec![]
        };
        stages.push(StageStatus {
            stage: stage.stage.clone(),
            state,
            attempt: attempt.attempt,
            job_id: Some(attempt.job_id),
            gres: stage.gres.clone(),
            attempts: attempt_slices(stage),
            time_limit: stage.time.clone(),
            tasks,
            counts,
            progress,
            exported_validation,
        });
    }
    let mut state = run_state(&stages);
    if let RunState::Failed {
        stage,
        why: why @ None,
    } = &mut state
    {
        *why = host_oom_why(manifest, &stages, stage, dir)
            .or_else(|| search_job_why(&stages, stage, dir));
    }
    RunStatus {
        run_id: manifest.run_id.clone(),
        name: manifest.name.clone(),
        workdir: manifest.workdir.display().to_string(),
        state,
        stages,
        stale: !slurm_reachable,
        backup: Vec::new(),
        tune: None,
    }
}

/// True when every stage in `deps` completed, as computed above (for a
/// task-wise `aftercorr` dependency: the same task of each).
fn deps_done(stages: &[StageStatus], deps: &[&str], taskwise: bool, task: Option<u32>) -> bool {
    !deps.is_empty()
        && deps.iter().all(|d| {
            let Some(up) = stages.iter().find(|s| s.stage == *d) else {
                return false;
            };
            match (taskwise, task) {
                (true, Some(t)) => up
                    .tasks
                    .iter()
                    .find(|u| u.task == Some(t))
                    .is_some_and(|u| u.state == TaskState::Completed),
                _ => up.state == TaskState::Completed,
            }
        })
}

/// A stage's state from its tasks: running beats pending; failed beats cancelled.
pub fn aggregate(tasks: &[TaskStatus]) -> TaskState {
    let has = |s: TaskState| tasks.iter().any(|t| t.state == s);
    if tasks.is_empty() {
        TaskState::Unknown
    } else if has(TaskState::Running) {
        TaskState::Running
    } else if has(TaskState::Pending) {
        TaskState::Pending
    } else if tasks.iter().all(|t| t.state == TaskState::Completed) {
        TaskState::Completed
    } else if has(TaskState::Failed) || has(TaskState::Lost) {
        TaskState::Failed
    } else if has(TaskState::Cancelled) {
        TaskState::Cancelled
    } else {
        TaskState::Unknown
    }
}

/// What the job's log says when the task cgroup's OOM killer ended it
/// (slurmstepd writes it to the job's stderr under `ConstrainRAMSpace=yes`).
pub const OOM_KILL_LOG: &str = "oom-kill event";

/// Why a failed stage failed when its job ran out of host memory: Slurm's
/// `OUT_OF_MEMORY` (the job's cgroup limit, `ConstrainRAMSpace=yes`) or
/// slurmstepd's oom-kill line in the log. Host memory, not GPU memory (the
/// GPU's runs out inside CUDA, and the job agent's guard or the trainer say
/// so): the figure it had, and what to change in the spec.
fn host_oom_why(
    manifest: &Manifest,
    stages: &[StageStatus],
    stage: &str,
    dir: &dyn RunDir,
) -> Option<String> {
    let status = stages.iter().find(|s| s.stage == stage)?;
    let record = manifest.stages.iter().find(|s| s.stage == stage)?;
    let oom = status.tasks.iter().any(|t| {
        t.state == TaskState::Failed
            && (t.slurm_state.as_deref() == Some("OUT_OF_MEMORY")
                || dir
                    .log_tail(&crate::rundir::layout::log_file(stage, t.task))
                    .is_some_and(|l| l.contains(OOM_KILL_LOG)))
    });
    oom.then(|| {
        format!(
            "ran out of host memory: the node's kernel killed it inside the job's cgroup at the {} of RAM it was given \
             (--mem; this is not GPU memory); set `mem` higher in the spec's [resources] (or [stages.{stage}]), \
             or lower `workers`/`batch`",
            record.mem
        )
    })
}

/// Why a search's ask or tell job failed: the error `tune.py` printed last
/// (`tune: error: …`), else the log's last line. The chain stops there.
fn search_job_why(stages: &[StageStatus], stage: &str, dir: &dyn RunDir) -> Option<String> {
    if stage != "ask" && stage != "tell" {
        return None;
    }
    let status = stages.iter().find(|s| s.stage == stage)?;
    let task = status
        .tasks
        .iter()
        .find(|t| matches!(t.state, TaskState::Failed | TaskState::Lost))?;
    let log = dir.log_tail(&crate::rundir::layout::log_file(stage, task.task))?;
    let line = log
        .lines()
        .rev()
        .find(|l| l.contains("tune: error:"))
        .or_else(|| log.lines().rev().find(|l| !l.trim().is_empty()))?;
    let batch = task
        .task
        .map(|b| format!(" of batch {b}"))
        .unwrap_or_default();
    Some(format!(
        "the search's {stage} job{batch} failed, so the batches after it never ran: {}",
        crate::text::clip_to(line.trim(), 300)
    ))
}

/// The memory guard's stop message of a stage's first task it stopped.
fn guard_why(stage: &StageStatus) -> Option<String> {
    stage
        .tasks
        .iter()
        .find_map(|t| t.guard_stop().map(str::to_string))
}

/// The run's state: the first failed stage names it; else cancelled; else
/// active; else completed.
pub fn run_state(stages: &[StageStatus]) -> RunState {
    if let Some(s) = stages.iter().find(|s| s.state == TaskState::Failed) {
        if !stages.iter().any(|s| s.state.is_active()) {
            return RunState::Failed {
                stage: s.stage.clone(),
                why: guard_why(s),
            };
        }
    }
    if let Some(s) = stages.iter().find(|s| s.state == TaskState::Running) {
        return RunState::Running {
            stage: s.stage.clone(),
        };
    }
    // Nothing runs, nothing failed, and a stage waits with a reason that never clears.
    let none_failed = !stages.iter().any(|s| s.state == TaskState::Failed);
    for s in stages
        .iter()
        .filter(|s| none_failed && s.state == TaskState::Pending)
    {
        if let Some(text) = s
            .tasks
            .iter()
            .filter(|t| t.state == TaskState::Pending)
            .filter_map(|t| t.reason_text.as_deref())
            .find(|r| r.starts_with(NEVER_RUNS))
        {
            return RunState::NeverRuns {
                stage: s.stage.clone(),
                reason: text.to_string(),
            };
        }
    }
    if stages.iter().any(|s| s.state == TaskState::Pending) {
        return match stages.iter().find(|s| s.state == TaskState::Failed) {
            // A failure upstream with stages still queued: they will be cancelled.
            Some(f) => RunState::Failed {
                stage: f.stage.clone(),
                why: guard_why(f),
            },
            None => RunState::Pending,
        };
    }
    if stages.iter().all(|s| s.state == TaskState::Completed) && !stages.is_empty() {
        return RunState::Completed;
    }
    if let Some(s) = stages.iter().find(|s| s.state == TaskState::Cancelled) {
        return RunState::Cancelled {
            stage: s.stage.clone(),
        };
    }
    RunState::Unknown
}

/// What every task's status is made of: Slurm's answers, the job files and
/// the guard's records.
struct Inputs<'a> {
    rows: &'a [QueueRow],
    acct: &'a [AcctRow],
    files: &'a JobFiles,
    guards: &'a BTreeMap<(String, Option<u32>), crate::rundir::guard::GuardRecord>,
    slurm_reachable: bool,
}

/// One task of one stage: from the latest attempt that ran it, its queue row,
/// else accounting, else the job files; with the guard's record.
fn task_status(
    inputs: &Inputs<'_>,
    stage: &StageRecord,
    latest: &Attempt,
    task: Option<u32>,
    stages: &[StageStatus],
    deps: &[&str],
    upstream: Option<&str>,
) -> TaskStatus {
    let Inputs {
        rows,
        acct,
        files,
        guards,
        slurm_reachable,
    } = *inputs;
    let attempt = stage
        .attempts
        .iter()
        .rev()
        .find(|a| match (task, attempt_tasks(stage, a)) {
            (Some(t), Some(list)) => list.contains(&t),
            (None, _) => true,
            (Some(_), None) => true,
        })
        .unwrap_or(latest);
    let file = files.get(&(stage.stage.clone(), task));
    let row = rows.iter().find(|r| {
        r.array_job_id == attempt.job_id
            && match task {
                Some(t) => r.tasks.contains(&t),
                None => r.tasks.is_empty() || r.job_id == attempt.job_id.to_string(),
            }
    });
    let job_id = match task {
        Some(t) => format!("{}_{t}", attempt.job_id),
        None => attempt.job_id.to_string(),
    };
    let mut status = if let Some(row) = row {
        let mut t = task_from_row(row, task, upstream, file);
        let taskwise = attempt
            .dependency
            .as_deref()
            .is_some_and(|d| d.contains("aftercorr"));
        if t.state == TaskState::Pending
            && crate::slurm::reasons::code(&row.reason) == "Dependency"
            && deps_done(stages, deps, taskwise, task)
        {
            // slurmctld re-tests dependencies only at its next scheduling
            // pass, so for a second or two after the stage before ended the
            // reason still says Dependency. The stages above are what
            // counts: the wait is over.
            t.reason_text =
                upstream.map(|u| format!("{u} finished; waiting for Slurm to schedule it"));
        }
        t
    } else if let Some(a) = acct.iter().find(|a| a.job_id == job_id) {
        let mut t = task_from_files(job_id.clone(), task, attempt.job_id, file);
        t.state = TaskState::from_slurm(a.state.split_whitespace().next().unwrap_or(""));
        t.slurm_state = Some(a.state.clone());
        t.exit_code = a.exit_code.or(t.exit_code);
        if !a.node.is_empty() && a.node != "None assigned" {
            t.node = Some(a.node.clone());
        }
        t.source = Source::Sacct;
        t
    } else {
        let mut t = task_from_files(job_id, task, attempt.job_id, file);
        if !slurm_reachable && t.state == TaskState::Lost {
            // Slurm was not asked, so it did not say it forgot the job:
            // started with no end record is running as last known (the
            // status is marked stale), not lost and so not failed.
            t.state = TaskState::Running;
        }
        t
    };
    if let Some(r) = guards
        .get(&(stage.stage.clone(), task))
        .filter(|r| r.array_job_id == attempt.job_id.to_string())
    {
        if r.action == "stopped" && !status.state.is_active() {
            status.reason_text = Some(r.message.clone());
        }
        status.guard = Some(GuardOutcome {
            action: r.action.clone(),
            message: r.message.clone(),
            warnings: r.warnings.clone(),
        });
    }
    status
}
