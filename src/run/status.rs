//! Where a run is: every stage and array task, from Slurm and from the records
//! the stage scripts write themselves.
//!
//! Sources, in order of trust: `squeue` (live, and finished jobs for
//! MinJobAge), `sacct` (only for jobs that left the queue, only with
//! accounting), and the job-written `state/<stage>[.<task>].{start,end}.json`
//! files, so status never depends on a database being up.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::manifest::{Attempt, Manifest, StageRecord};
use crate::slurm::squeue::{parse_task_list, QueueRow};
use crate::slurm::states::{self, Class};

/// Where a task's state came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    Squeue,
    Sacct,
    JobFiles,
    None,
}

/// A task's state in yolo-sched's words (Slurm's long state names, simplified).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskState {
    Pending,
    Running,
    Completed,
    Failed,
    Cancelled,
    /// Known to have started, no end record, and Slurm no longer knows it.
    Lost,
    Unknown,
}

impl TaskState {
    /// A Slurm state in these words; what each state means is decided once,
    /// in `slurm::states::classify` (SUSPENDED is running, DEADLINE failed, …).
    pub fn from_slurm(state: &str) -> TaskState {
        match states::classify(state) {
            Class::Waiting => TaskState::Pending,
            Class::Running => TaskState::Running,
            Class::Completed => TaskState::Completed,
            Class::Failed => TaskState::Failed,
            Class::Cancelled => TaskState::Cancelled,
            Class::Unknown => TaskState::Unknown,
        }
    }

    pub fn is_active(self) -> bool {
        matches!(self, TaskState::Pending | TaskState::Running)
    }

    pub fn word(self) -> &'static str {
        match self {
            TaskState::Pending => "pending",
            TaskState::Running => "running",
            TaskState::Completed => "completed",
            TaskState::Failed => "failed",
            TaskState::Cancelled => "cancelled",
            TaskState::Lost => "lost",
            TaskState::Unknown => "unknown",
        }
    }
}

/// A record a stage script wrote (`start.json` or `end.json`).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct JobFileRecord {
    pub array_job_id: String,
    pub job_id: String,
    pub array_task: String,
    pub node: String,
    pub gpus: String,
    pub cuda_visible_devices: String,
    pub started: String,
    pub ended: String,
    pub exit_code: Option<i32>,
}

/// Start and end records of one task, keyed by `(stage, task)`.
pub type JobFiles = BTreeMap<(String, Option<u32>), (Option<JobFileRecord>, Option<JobFileRecord>)>;

/// Read every record under `<workdir>/state`. Unreadable files are skipped:
/// a record being written right now is simply not there yet.
pub fn read_job_files(workdir: &Path) -> JobFiles {
    let mut out: JobFiles = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(workdir.join("state")) else {
        return out;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let (key, is_end) = if let Some(k) = name.strip_suffix(".start.json") {
            (k.to_string(), false)
        } else if let Some(k) = name.strip_suffix(".end.json") {
            (k.to_string(), true)
        } else {
            continue;
        };
        let (stage, task) = match key.split_once('.') {
            Some((s, t)) => match t.parse::<u32>() {
                Ok(t) => (s.to_string(), Some(t)),
                Err(_) => continue,
            },
            None => (key.clone(), None),
        };
        // Records the jobs write: a few hundred bytes each.
        let Ok(text) = crate::fsutil::read_regular(&entry.path(), 1 << 20) else {
            continue;
        };
        let Ok(rec) = serde_json::from_str::<JobFileRecord>(&text) else {
            continue;
        };
        let slot = out.entry((stage, task)).or_default();
        if is_end {
            slot.1 = Some(rec);
        } else {
            slot.0 = Some(rec);
        }
    }
    out
}

/// A finished job as `sacct` describes it.
pub use crate::slurm::sacct::AcctRow;

/// One task (or the single job) of a stage.
#[derive(Debug, Clone, Serialize)]
pub struct TaskStatus {
    pub task: Option<u32>,
    /// `12` or `12_3`.
    pub job_id: String,
    pub state: TaskState,
    /// Slurm's state word when Slurm gave one (`TIMEOUT`, `OUT_OF_MEMORY`, …).
    pub slurm_state: Option<String>,
    pub reason: Option<String>,
    /// The reason in plain words.
    pub reason_text: Option<String>,
    pub elapsed: Option<String>,
    pub time_limit: Option<String>,
    pub node: Option<String>,
    /// The slice index Slurm gave the job (`SLURM_JOB_GPUS`), from the job's own record.
    pub slice: Option<String>,
    pub exit_code: Option<i32>,
    pub source: Source,
    /// What the job agent's memory guard did to this task (this attempt's
    /// `state/<key>.guard.json`): a warning, or the stop that ended it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guard: Option<GuardOutcome>,
}

/// The memory guard's word on one task, from its guard record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GuardOutcome {
    /// `warned`, `stopped` or `would_stop`.
    pub action: String,
    /// "stopped by the memory guard: grew 640 MB/min for 3 min, 4.4 of 4.75 GiB".
    pub message: String,
    pub warnings: Vec<String>,
}

impl GuardOutcome {
    pub fn stopped(&self) -> bool {
        self.action == "stopped"
    }
}

impl TaskStatus {
    /// The guard's stop message, when the guard ended this task.
    pub fn guard_stop(&self) -> Option<&str> {
        self.guard
            .as_ref()
            .filter(|g| g.stopped())
            .map(|g| g.message.as_str())
    }
}

/// Progress of training, from a `results.csv`.
#[derive(Debug, Clone, Serialize)]
pub struct TrainProgress {
    pub epoch: u32,
    pub epochs: Option<u32>,
    pub best_map50_95: Option<f64>,
    pub best_map50: Option<f64>,
    /// Ultralytics' validation of `best.pt` at the end of training, from the job log.
    pub final_validation: Option<FinalValidation>,
}

/// What Ultralytics prints when it validates `best.pt` after the last epoch:
/// the `all` row (images, instances, P, R, mAP50, mAP50-95) and the speed line.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FinalValidation {
    pub images: u64,
    pub instances: u64,
    pub precision: f64,
    pub recall: f64,
    pub map50: f64,
    pub map50_95: f64,
    /// `Speed: … X ms inference … per image`.
    pub inference_ms_per_image: Option<f64>,
}

/// Parse the final validation out of a training log (only the part after the
/// last `Validating …best.pt` line counts; per-epoch validations come before).
pub fn final_validation(log: &str) -> Option<FinalValidation> {
    let start = log.rfind("Validating ")?;
    let tail = &log[start..];
    if !tail.lines().next()?.contains("best.pt") {
        return None;
    }
    validation_summary(tail)
}

/// The last `all` row and `Speed:` line of a `yolo val` run (the export
/// stage's validation of the exported ONNX model).
pub fn validation_summary(text: &str) -> Option<FinalValidation> {
    let row = text.lines().rev().find_map(|l| {
        let w: Vec<&str> = l.split_whitespace().collect();
        (w.len() == 7 && w[0] == "all").then_some(w)
    })?;
    let num = |i: usize| row[i].parse::<f64>().ok();
    let inference = text.lines().rev().find_map(|l| {
        let rest = l.trim().strip_prefix("Speed:")?;
        rest.split(',').find_map(|part| {
            let v = part
                .trim()
                .strip_suffix("inference")?
                .trim()
                .strip_suffix("ms")?;
            v.trim().parse::<f64>().ok()
        })
    });
    Some(FinalValidation {
        images: row[1].parse().ok()?,
        instances: row[2].parse().ok()?,
        precision: num(3)?,
        recall: num(4)?,
        map50: num(5)?,
        map50_95: num(6)?,
        inference_ms_per_image: inference,
    })
}

/// The last `limit` bytes of a file, as text (job logs can be large).
pub fn read_tail(path: &Path, limit: u64) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path).ok()?;
    let len = f.metadata().ok()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(limit))).ok()?;
    let mut buf = Vec::new();
    f.take(limit).read_to_end(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf).into_owned())
}

#[derive(Debug, Clone, Serialize)]
pub struct StageStatus {
    pub stage: String,
    pub state: TaskState,
    pub attempt: u32,
    pub job_id: Option<u64>,
    pub gres: Option<String>,
    /// Every attempt with the slice it asked for: a training moved to a
    /// bigger slice after running out of memory shows both.
    pub attempts: Vec<AttemptSlice>,
    pub time_limit: String,
    pub tasks: Vec<TaskStatus>,
    /// Count of tasks per state.
    pub counts: BTreeMap<String, usize>,
    pub progress: Vec<(Option<u32>, TrainProgress)>,
    /// Export stage: `yolo val` of each exported ONNX model (per task), from its log.
    pub exported_validation: Vec<(Option<u32>, FinalValidation)>,
}

/// One attempt of a stage and its slice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AttemptSlice {
    pub attempt: u32,
    pub job_id: u64,
    pub gres: Option<String>,
}

/// The attempts of a stage record with the `--gres` each asked for (an
/// attempt without its own asked for the stage's).
fn attempt_slices(stage: &StageRecord) -> Vec<AttemptSlice> {
    stage
        .attempts
        .iter()
        .map(|a| AttemptSlice {
            attempt: a.attempt,
            job_id: a.job_id,
            gres: a.gres.clone().or_else(|| stage.gres.clone()),
        })
        .collect()
}

/// The run as a whole.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum RunState {
    Pending,
    Running {
        stage: String,
    },
    Completed,
    Failed {
        stage: String,
        /// Why, when yolo-sched knows better than an exit code (the memory guard stopped it).
        #[serde(skip_serializing_if = "Option::is_none")]
        why: Option<String>,
    },
    Cancelled {
        stage: String,
    },
    /// A stage waits for ever: Slurm holds it with a reason that never clears
    /// (`BadConstraints`, `PartitionTimeLimit`, …). It must be cancelled.
    NeverRuns {
        stage: String,
        reason: String,
    },
    Unknown,
}

impl RunState {
    /// The state's name, as `--json` spells it: `pending`, `running`,
    /// `completed`, `failed`, `cancelled`, `never_runs`, `unknown`.
    pub fn word(&self) -> &'static str {
        match self {
            RunState::Pending => "pending",
            RunState::Running { .. } => "running",
            RunState::Completed => "completed",
            RunState::Failed { .. } => "failed",
            RunState::Cancelled { .. } => "cancelled",
            RunState::NeverRuns { .. } => "never_runs",
            RunState::Unknown => "unknown",
        }
    }

    /// The stage the state names (`failed (prepare)`), when it names one.
    pub fn stage(&self) -> Option<&str> {
        match self {
            RunState::Running { stage }
            | RunState::Failed { stage, .. }
            | RunState::Cancelled { stage }
            | RunState::NeverRuns { stage, .. } => Some(stage),
            RunState::Pending | RunState::Completed | RunState::Unknown => None,
        }
    }

    /// Why a run will never run, in words.
    pub fn reason(&self) -> Option<&str> {
        match self {
            RunState::NeverRuns { reason, .. } => Some(reason),
            _ => None,
        }
    }

    pub fn describe(&self) -> String {
        match self {
            RunState::Pending => "pending".into(),
            RunState::Running { stage } => format!("running ({stage})"),
            RunState::Completed => "completed".into(),
            RunState::Failed { stage, why: None } => format!("failed ({stage})"),
            RunState::Failed {
                stage,
                why: Some(why),
            } => format!("failed ({stage}): {why}"),
            RunState::Cancelled { stage } => format!("cancelled ({stage})"),
            RunState::NeverRuns { stage, reason } => {
                format!(
                    "will never run ({stage}): {}",
                    reason.trim_start_matches(NEVER_RUNS)
                )
            }
            RunState::Unknown => "unknown".into(),
        }
    }

    pub fn is_finished(&self) -> bool {
        matches!(
            self,
            RunState::Completed
                | RunState::Failed { .. }
                | RunState::Cancelled { .. }
                | RunState::NeverRuns { .. }
        )
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct RunStatus {
    pub run_id: String,
    pub name: String,
    pub workdir: String,
    /// Flat in JSON, as `list --json` has it: `"state": "failed", "stage": "prepare"`.
    #[serde(flatten)]
    pub state: RunState,
    pub stages: Vec<StageStatus>,
    /// True when Slurm could not be asked and everything comes from job files.
    pub stale: bool,
    /// The checkpoint backup of each training directory: last backup and lag (docs/backup.md).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub backup: Vec<crate::backup::BackupView>,
}

impl RunStatus {
    pub fn stage(&self, name: &str) -> Option<&StageStatus> {
        self.stages.iter().find(|s| s.stage == name)
    }
}

/// How a pending reason that never clears is shown.
pub const NEVER_RUNS: &str = "will never run: ";

/// A pending reason in plain words.
pub fn reason_in_words(reason: &str, gres: Option<&str>, upstream: Option<&str>) -> Option<String> {
    let slice = gres
        .and_then(crate::slurm::gres::parse_item)
        .map(|i| match i.kind {
            Some(k) if i.name == "gpu" => format!("a free {k} slice"),
            Some(k) => format!("free {} {k}", i.name),
            None => format!("a free {}", i.name),
        });
    let code = crate::slurm::reasons::code(reason);
    if crate::slurm::reasons::never_runnable(code) && code != "DependencyNeverSatisfied" {
        let words = match code {
            "BadConstraints" => "the request does not fit any node".to_string(),
            "PartitionTimeLimit" => {
                "its time limit is longer than the partition allows".to_string()
            }
            other => crate::slurm::reasons::describe(other),
        };
        return Some(format!("{NEVER_RUNS}{words} ({code})"));
    }
    let text = match reason {
        "" | "None" => return None,
        "Resources" => format!(
            "waiting for {}",
            slice.unwrap_or_else(|| "free resources".into())
        ),
        "Priority" => "waiting behind jobs of higher priority".into(),
        "Dependency" => match upstream {
            Some(u) => format!("waiting for {u} to finish"),
            None => "waiting for the stage before it".into(),
        },
        "DependencyNeverSatisfied" => match upstream {
            Some(u) => format!("will never run: {u} failed"),
            None => "will never run: the stage before it failed".into(),
        },
        "JobHeldUser" | "JobHeldAdmin" => "held; `scontrol release` it".into(),
        "BeginTime" => "waiting for its start time".into(),
        "JobArrayTaskLimit" => "waiting: the sweep's max_parallel tasks are running".into(),
        "ReqNodeNotAvail" => "a node it needs is down, drained or reserved".into(),
        "QOSMaxJobsPerUserLimit" | "AssocMaxJobsLimit" => {
            "you have as many jobs running as your limit allows".into()
        }
        "QOSMaxGRESPerUser" | "AssocGrpGRES" => {
            "your group holds as many GPUs as its limit allows".into()
        }
        "NonZeroExitCode" => "the script exited with an error".into(),
        "TimeLimit" => "ran out of time".into(),
        "OutOfMemory" => "ran out of memory".into(),
        other if other.starts_with("Nodes required for job are DOWN") => {
            "a node it needs is down, drained or reserved".into()
        }
        other => other.to_string(),
    };
    Some(text)
}

/// Read `results.csv` (through `run::results`): the last epoch and the best mAP so far.
#[cfg(test)]
pub fn train_progress(results_csv: &Path, epochs: Option<u32>) -> Option<TrainProgress> {
    progress_of(&super::results::read(results_csv)?, epochs)
}

/// The last epoch and the best mAP so far of a training's epochs.
pub fn progress_of(rows: &[super::results::Epoch], epochs: Option<u32>) -> Option<TrainProgress> {
    let best_of =
        |f: fn(&super::results::Epoch) -> Option<f64>| rows.iter().filter_map(f).reduce(f64::max);
    Some(TrainProgress {
        epoch: rows.iter().map(|e| e.epoch).max().unwrap_or(0),
        epochs,
        best_map50_95: best_of(|e| e.map50_95),
        best_map50: best_of(|e| e.map50),
        final_validation: None,
    })
}

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

/// What `compute` reads of a run directory besides the job records: the
/// training's `results.csv`, the tail of a stage's log, the memory guard's
/// records. One seam, so the state logic is pure: `of_run` reads the disk
/// (`OnDisk`), tests give what they want (`Nothing`, or their own).
pub trait RunDir {
    /// `<dir>/results.csv` (`dir` is `train` or `train-<task>`), parsed.
    fn results(&self, dir: &str) -> Option<Vec<super::results::Epoch>>;
    /// The last 256 KiB of `logs/<log>`.
    fn log_tail(&self, log: &str) -> Option<String>;
    /// The memory guard's records (`state/<key>.guard.json`).
    fn guards(&self) -> BTreeMap<(String, Option<u32>), super::guard::GuardRecord>;
}

/// A run directory on disk.
pub struct OnDisk<'a>(pub &'a Path);

impl RunDir for OnDisk<'_> {
    fn results(&self, dir: &str) -> Option<Vec<super::results::Epoch>> {
        super::results::read(&self.0.join(dir).join("results.csv"))
    }
    fn log_tail(&self, log: &str) -> Option<String> {
        read_tail(&self.0.join("logs").join(log), 256 << 10)
    }
    fn guards(&self) -> BTreeMap<(String, Option<u32>), super::guard::GuardRecord> {
        super::guard::read_records(self.0)
    }
}

/// A run directory with nothing in it (or none that can be read).
#[cfg(test)]
pub struct Nothing;

#[cfg(test)]
impl RunDir for Nothing {
    fn results(&self, _: &str) -> Option<Vec<super::results::Epoch>> {
        None
    }
    fn log_tail(&self, _: &str) -> Option<String> {
        None
    }
    fn guards(&self) -> BTreeMap<(String, Option<u32>), super::guard::GuardRecord> {
        BTreeMap::new()
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
                    && deps_done(&stages, &deps, taskwise, task)
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
            tasks.push(status);
        }
        let attempt = latest;
        let mut counts = BTreeMap::new();
        for t in &tasks {
            *counts.entry(t.state.word().to_string()).or_insert(0) += 1;
        }
        let state = aggregate(&tasks);
        let progress = if stage.stage == "train" {
            let epochs = epochs_of(manifest);
            tasks
                .iter()
                .filter_map(|t| {
                    let train_dir = match t.task {
                        Some(i) => format!("train-{i}"),
                        None => "train".to_string(),
                    };
                    let log = match t.task {
                        Some(i) => format!("train-{i}.out"),
                        None => "train.out".to_string(),
                    };
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
    let state = run_state(&stages);
    RunStatus {
        run_id: manifest.run_id.clone(),
        name: manifest.name.clone(),
        workdir: manifest.workdir.display().to_string(),
        state,
        stages,
        stale: !slurm_reachable,
        backup: Vec::new(),
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

pub fn epochs_of(manifest: &Manifest) -> Option<u32> {
    let table: toml::Table = manifest.spec_text.parse().ok()?;
    table
        .get("train")?
        .get("epochs")?
        .as_integer()
        .and_then(|e| u32::try_from(e).ok())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::manifest::SCHEMA_VERSION;
    use chrono::Utc;

    fn stage(name: &str, tasks: usize, job: u64) -> StageRecord {
        StageRecord {
            stage: name.into(),
            job_name: format!("r.{name}"),
            partition: None,
            gres: (name == "train").then(|| "gpu:1g.5gb:1".into()),
            time: "01:00:00".into(),
            cpus: 1,
            mem: "1G".into(),
            tasks,
            depends_on: vec![],
            script: format!("scripts/{name}.sh"),
            attempts: vec![Attempt {
                attempt: 1,
                job_id: job,
                array: (tasks > 1).then(|| format!("0-{}", tasks - 1)),
                dependency: None,
                submitted_at: Utc::now(),
                gres: None,
            }],
        }
    }

    fn manifest(stages: Vec<StageRecord>) -> Manifest {
        Manifest {
            schema_version: SCHEMA_VERSION,
            run_id: "r-1".into(),
            name: "r".into(),
            user: "u".into(),
            host: "h".into(),
            submitted_at: Utc::now(),
            workdir: "/nonexistent/run".into(),
            spec_file: "/s.toml".into(),
            spec_hash: "0".into(),
            spec_text: "[train]\nepochs = 5\n".into(),
            variants: 1,
            gpu_explanation: vec![],
            estimate_gib: None,
            model_ref: None,
            stages,
        }
    }

    fn row(job: &str, array: u64, tasks: &str, state: &str, reason: &str) -> QueueRow {
        QueueRow {
            job_id: job.into(),
            array_job_id: array,
            tasks: parse_task_list(tasks),
            state: state.into(),
            reason: reason.into(),
            time_used: "0:01".into(),
            time_limit: "1:00:00".into(),
            nodes: String::new(),
            gres: "gres:gpu:1g.5gb:1".into(),
            exit_code: None,
            name: String::new(),
        }
    }

    #[test]
    fn failed_prepare_names_the_run_failure_and_explains_the_rest() {
        let m = manifest(vec![
            stage("prepare", 1, 10),
            stage("train", 1, 11),
            stage("export", 1, 12),
        ]);
        let rows = vec![
            row("10", 10, "", "FAILED", "NonZeroExitCode"),
            row("11", 11, "", "PENDING", "DependencyNeverSatisfied"),
            row("12", 12, "", "PENDING", "Dependency"),
        ];
        let s = compute(&m, &rows, &[], &JobFiles::new(), &Nothing, true);
        assert_eq!(
            s.state,
            RunState::Failed {
                stage: "prepare".into(),
                why: None,
            }
        );
        let train = s.stage("train").unwrap();
        assert_eq!(
            train.tasks[0].reason_text.as_deref(),
            Some("will never run: prepare failed")
        );
        assert_eq!(
            s.stage("export").unwrap().tasks[0].reason_text.as_deref(),
            Some("waiting for train to finish")
        );
    }

    #[test]
    fn a_stage_held_for_ever_makes_the_run_never_run() {
        let m = manifest(vec![
            stage("prepare", 1, 10),
            stage("train", 1, 11),
            stage("export", 1, 12),
        ]);
        let rows = vec![
            row("10", 10, "", "COMPLETED", ""),
            row("11", 11, "", "PENDING", "BadConstraints"),
            row("12", 12, "", "PENDING", "Dependency"),
        ];
        let s = compute(&m, &rows, &[], &JobFiles::new(), &Nothing, true);
        assert_eq!(
            s.state,
            RunState::NeverRuns {
                stage: "train".into(),
                reason: "will never run: the request does not fit any node (BadConstraints)".into()
            }
        );
        assert!(s.state.is_finished(), "watch stops on it");
        assert_eq!(
            s.state.describe(),
            "will never run (train): the request does not fit any node (BadConstraints)"
        );
        // A reason that clears (a node comes back) is only waiting.
        let rows = vec![
            row("10", 10, "", "COMPLETED", ""),
            row(
                "11",
                11,
                "",
                "PENDING",
                "ReqNodeNotAvail, UnavailableNodes:node2",
            ),
            row("12", 12, "", "PENDING", "Dependency"),
        ];
        let s = compute(&m, &rows, &[], &JobFiles::new(), &Nothing, true);
        assert_eq!(s.state, RunState::Pending);
        let rows = vec![
            row("10", 10, "", "COMPLETED", ""),
            row("11", 11, "", "PENDING", "MaxMemPerLimit"),
            row("12", 12, "", "PENDING", "Dependency"),
        ];
        let s = compute(&m, &rows, &[], &JobFiles::new(), &Nothing, true);
        assert!(
            matches!(s.state, RunState::NeverRuns { .. }),
            "{:?}",
            s.state
        );
    }

    /// A run directory in memory: `compute` reads only through `RunDir`.
    struct InMemory {
        epochs: Vec<crate::run::results::Epoch>,
        logs: BTreeMap<String, String>,
    }

    impl RunDir for InMemory {
        fn results(&self, dir: &str) -> Option<Vec<crate::run::results::Epoch>> {
            (dir == "train").then(|| self.epochs.clone())
        }
        fn log_tail(&self, log: &str) -> Option<String> {
            self.logs.get(log).cloned()
        }
        fn guards(&self) -> BTreeMap<(String, Option<u32>), crate::run::guard::GuardRecord> {
            BTreeMap::new()
        }
    }

    #[test]
    fn progress_and_the_exported_validation_come_through_the_run_dir_without_a_disk() {
        let m = manifest(vec![stage("train", 1, 60), stage("export", 1, 61)]);
        let epoch = |e: u32, map: f64| crate::run::results::Epoch {
            epoch: e,
            map50_95: Some(map),
            ..Default::default()
        };
        let val = "Validating /w/export/best.onnx...\n\
                   Class     Images  Instances      Box(P          R      mAP50  mAP50-95)\n\
                   all         12         19      0.25      0.5     0.375    0.125\n\
                   Speed: 0.1ms preprocess, 7.5ms inference, 0.0ms loss, 0.2ms postprocess per image\n";
        let dir = InMemory {
            epochs: vec![epoch(1, 0.1), epoch(2, 0.3), epoch(3, 0.2)],
            logs: BTreeMap::from([("export.out".to_string(), val.to_string())]),
        };
        let rows = vec![
            row("60", 60, "", "COMPLETED", ""),
            row("61", 61, "", "COMPLETED", ""),
        ];
        let s = compute(&m, &rows, &[], &JobFiles::new(), &dir, true);
        let train = s.stage("train").unwrap();
        let (_, p) = &train.progress[0];
        assert_eq!((p.epoch, p.best_map50_95), (3, Some(0.3)));
        let export = s.stage("export").unwrap();
        let (_, v) = &export.exported_validation[0];
        assert_eq!(v.inference_ms_per_image, Some(7.5));
        // The same run with nothing in its directory: states only.
        let s = compute(&m, &rows, &[], &JobFiles::new(), &Nothing, true);
        assert!(s.stage("train").unwrap().progress.is_empty());
        assert_eq!(s.state, RunState::Completed);
    }

    #[test]
    fn the_final_validation_is_read_from_the_training_log() {
        let log = "      1/3   0G  3.1  4.2  1.1  19  64: 100%\n\
                   Class     Images  Instances      Box(P          R      mAP50  mAP50-95)\n\
                   all         12         19      0.001      0.05     0.0004    0.0001\n\
                   3 epochs completed in 0.001 hours.\n\
                   Validating /w/train/weights/best.pt...\n\
                   Model summary (fused): 72 layers\n\
                   Class     Images  Instances      Box(P          R      mAP50  mAP50-95): 100%\n\
                   all         12         19      0.25      0.5     0.375    0.125\n\
                   Speed: 0.0ms preprocess, 3.0ms inference, 0.0ms loss, 0.2ms postprocess per image\n";
        assert_eq!(
            final_validation(log),
            Some(FinalValidation {
                images: 12,
                instances: 19,
                precision: 0.25,
                recall: 0.5,
                map50: 0.375,
                map50_95: 0.125,
                inference_ms_per_image: Some(3.0),
            })
        );
        assert_eq!(
            final_validation("epoch 1/3\nall 12 19 0 0 0 0\n"),
            None,
            "no final validation yet"
        );
    }

    #[test]
    fn resources_reason_names_the_slice() {
        assert_eq!(
            reason_in_words("Resources", Some("gres:gpu:1g.5gb:1"), None).as_deref(),
            Some("waiting for a free 1g.5gb slice")
        );
    }

    #[test]
    fn array_tasks_are_matched_to_their_rows() {
        let m = manifest(vec![stage("train", 4, 20)]);
        let rows = vec![
            row("20_0", 20, "0", "COMPLETED", ""),
            row("20_1", 20, "1", "RUNNING", ""),
            row("20", 20, "2-3%2", "PENDING", "JobArrayTaskLimit"),
        ];
        let s = compute(&m, &rows, &[], &JobFiles::new(), &Nothing, true);
        let t = s.stage("train").unwrap();
        assert_eq!(t.tasks.len(), 4);
        assert_eq!(t.counts.get("pending"), Some(&2));
        assert_eq!(t.state, TaskState::Running);
        assert_eq!(
            s.state,
            RunState::Running {
                stage: "train".into()
            }
        );
        assert_eq!(t.tasks[3].job_id, "20_3");
    }

    #[test]
    fn job_files_stand_in_when_slurm_forgot_and_only_for_this_attempt() {
        let m = manifest(vec![stage("prepare", 1, 30), stage("train", 1, 31)]);
        let mut files = JobFiles::new();
        let rec = |array: &str, code: Option<i32>| JobFileRecord {
            array_job_id: array.into(),
            exit_code: code,
            ..Default::default()
        };
        files.insert(
            ("prepare".into(), None),
            (Some(rec("30", None)), Some(rec("30", Some(0)))),
        );
        // An end record of an older attempt (job 5) must not count.
        files.insert(
            ("train".into(), None),
            (Some(rec("5", None)), Some(rec("5", Some(1)))),
        );
        let s = compute(&m, &[], &[], &files, &Nothing, false);
        assert_eq!(s.stage("prepare").unwrap().state, TaskState::Completed);
        assert_eq!(
            s.stage("prepare").unwrap().tasks[0].source,
            Source::JobFiles
        );
        assert_eq!(s.stage("train").unwrap().tasks[0].state, TaskState::Unknown);
        assert!(s.stale);
    }

    #[test]
    fn a_started_task_is_running_not_lost_when_slurm_could_not_be_asked() {
        let m = manifest(vec![stage("prepare", 1, 30), stage("train", 1, 31)]);
        let mut files = JobFiles::new();
        let rec = |code: Option<i32>| JobFileRecord {
            array_job_id: "31".into(),
            exit_code: code,
            ..Default::default()
        };
        files.insert(("train".into(), None), (Some(rec(None)), None));
        // slurmctld down: the last known state, marked stale.
        let s = compute(&m, &[], &[], &files, &Nothing, false);
        assert_eq!(s.stage("train").unwrap().state, TaskState::Running);
        assert!(s.stale);
        assert!(!matches!(s.state, RunState::Failed { .. }), "{:?}", s.state);
        // Slurm answered and no longer knows the job: lost, the run failed.
        let s = compute(&m, &[], &[], &files, &Nothing, true);
        assert_eq!(s.stage("train").unwrap().tasks[0].state, TaskState::Lost);
        assert!(matches!(s.state, RunState::Failed { .. }), "{:?}", s.state);
    }

    #[test]
    fn a_stop_by_the_memory_guard_is_why_the_run_failed_and_only_for_its_attempt() {
        let dir = tempfile::tempdir().unwrap();
        let mut m = manifest(vec![stage("prepare", 1, 50), stage("train", 1, 51)]);
        m.workdir = dir.path().to_path_buf();
        std::fs::create_dir(dir.path().join("state")).unwrap();
        let msg = "stopped by the memory guard: grew 640 MB/min for 3 min, 4.4 of 4.75 GiB";
        let record = |job: &str| crate::run::guard::GuardRecord {
            array_job_id: job.into(),
            job_id: job.into(),
            action: "stopped".into(),
            message: msg.into(),
            ..Default::default()
        };
        let path = dir.path().join("state/train.guard.json");
        crate::run::guard::write_record(&path, &record("51")).unwrap();
        let rows = vec![
            row("50", 50, "", "COMPLETED", ""),
            row("51", 51, "", "FAILED", "NonZeroExitCode"),
        ];
        let s = compute(&m, &rows, &[], &JobFiles::new(), &OnDisk(dir.path()), true);
        assert_eq!(
            s.state,
            RunState::Failed {
                stage: "train".into(),
                why: Some(msg.into())
            }
        );
        assert_eq!(s.state.describe(), format!("failed (train): {msg}"));
        let t = &s.stage("train").unwrap().tasks[0];
        assert_eq!(t.reason_text.as_deref(), Some(msg));
        assert_eq!(t.guard_stop(), Some(msg));
        // A record of an earlier attempt says nothing about this one.
        crate::run::guard::write_record(&path, &record("7")).unwrap();
        let s = compute(&m, &rows, &[], &JobFiles::new(), &OnDisk(dir.path()), true);
        assert_eq!(s.state.describe(), "failed (train)");
    }

    #[test]
    fn all_completed_is_completed_and_cancel_is_cancelled() {
        let m = manifest(vec![stage("prepare", 1, 40), stage("train", 1, 41)]);
        let done = vec![
            row("40", 40, "", "COMPLETED", ""),
            row("41", 41, "", "COMPLETED", ""),
        ];
        assert_eq!(
            compute(&m, &done, &[], &JobFiles::new(), &Nothing, true).state,
            RunState::Completed
        );
        let cancelled = vec![
            row("40", 40, "", "COMPLETED", ""),
            row("41", 41, "", "CANCELLED", ""),
        ];
        assert_eq!(
            compute(&m, &cancelled, &[], &JobFiles::new(), &Nothing, true).state,
            RunState::Cancelled {
                stage: "train".into()
            }
        );
    }

    #[test]
    fn a_met_dependency_reads_as_met_and_suspended_is_running() {
        let m = manifest(vec![
            stage("prepare", 1, 50),
            stage("train", 1, 51),
            stage("export", 1, 52),
        ]);
        // Prepare just ended; slurmctld has not re-tested train's dependency yet.
        let rows = vec![
            row("50", 50, "", "COMPLETED", ""),
            row("51", 51, "", "PENDING", "Dependency"),
            row("52", 52, "", "PENDING", "Dependency"),
        ];
        let s = compute(&m, &rows, &[], &JobFiles::new(), &Nothing, true);
        assert_eq!(s.state, RunState::Pending);
        assert_eq!(
            s.stage("train").unwrap().tasks[0].reason_text.as_deref(),
            Some("prepare finished; waiting for Slurm to schedule it")
        );
        assert_eq!(
            s.stage("export").unwrap().tasks[0].reason_text.as_deref(),
            Some("waiting for train to finish")
        );
        let rows = vec![
            row("50", 50, "", "COMPLETED", ""),
            row("51", 51, "", "SUSPENDED", ""),
            row("52", 52, "", "PENDING", "Dependency"),
        ];
        let s = compute(&m, &rows, &[], &JobFiles::new(), &Nothing, true);
        assert_eq!(
            s.state,
            RunState::Running {
                stage: "train".into()
            }
        );
        assert!(!s.state.is_finished());
        let rows = vec![
            row("50", 50, "", "COMPLETED", ""),
            row("51", 51, "", "DEADLINE", ""),
            row("52", 52, "", "CANCELLED", "Dependency"),
        ];
        let s = compute(&m, &rows, &[], &JobFiles::new(), &Nothing, true);
        assert_eq!((s.state.word(), s.state.stage()), ("failed", Some("train")));
    }

    #[test]
    fn results_csv_gives_epoch_and_best_map() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("results.csv");
        std::fs::write(
            &p,
            "epoch,metrics/mAP50(B),metrics/mAP50-95(B)\n1,0.2,0.1\n2,0.5,0.3\n3,0.4,0.25\n",
        )
        .unwrap();
        let pr = train_progress(&p, Some(10)).unwrap();
        assert_eq!(pr.epoch, 3);
        assert_eq!(pr.best_map50_95, Some(0.3));
        assert_eq!(pr.best_map50, Some(0.5));
    }
}
