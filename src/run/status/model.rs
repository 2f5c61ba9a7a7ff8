//! The one model of a run's status and its wording: tasks, stages, the run
//! state, what `status`, `watch`, `list` and `report` show.

use super::*;
use crate::rundir::ultralytics::{FinalValidation, TrainProgress};

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
pub(super) fn attempt_slices(stage: &StageRecord) -> Vec<AttemptSlice> {
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
    /// `[tune]`: the search's trials as its last ask or tell job recorded them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tune: Option<crate::rundir::search::Summary>,
}

impl RunStatus {
    pub fn stage(&self, name: &str) -> Option<&StageStatus> {
        self.stages.iter().find(|s| s.stage == name)
    }
}
