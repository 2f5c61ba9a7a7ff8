//! The one place that names what lives in a run directory (pure): the
//! scripts, each stage's Slurm output, the job-written records, each
//! variant's training directory, the guard's and the backup's files. The
//! stage scripts receive these names as template variables
//! (`render::scripts`), so a name changes here and nowhere else.
//!
//! One rule for variants: a stage runs as a Slurm array exactly when the run
//! sweeps more than one variant (`plan::build`), and then each array task `i`
//! has `train-i/` and `<stage>-i.out`; otherwise there is no task and the
//! names carry no suffix.

/// The directory of the rendered stage scripts.
pub const SCRIPTS: &str = "scripts";
/// The directory of the stages' Slurm output.
pub const LOGS: &str = "logs";
/// The directory of the job-written records (`<key>.start.json`, …).
pub const STATE: &str = "state";
/// The training directory's name without a variant.
pub const TRAIN: &str = "train";
/// The checkpoint backup's state, below `STATE`.
pub const BACKUP: &str = "backup";
/// `[tune]`: the search's directory: `study.journal` (Optuna's journal, written
/// by one job at a time), `trial-<n>.json` and `.args` (each trial's
/// arguments, written by its ask job), `trials.json` (every trial's state and
/// objective, written by the tell jobs), `best-trial`, `best_hyperparameters.yaml`.
pub const TUNE: &str = "tune";
/// `[tune]`: the program the ask and tell jobs run, and the search's
/// settings, written beside the scripts at submission.
pub const TUNE_PROGRAM: &str = "scripts/tune.py";
pub const TUNE_SETTINGS: &str = "scripts/tune.json";
/// What follows a task's key (`state_key`) in `STATE`: the records the stage
/// script writes when the job starts and ends, the guard's record, the agent's
/// memory series, the trainer's Ultralytics and torch versions (written by
/// the train stage after a training, read by `models publish`).
pub const START: &str = ".start.json";
pub const END: &str = ".end.json";
pub const GUARD: &str = ".guard.json";
pub const MEMORY: &str = ".memory.csv";
pub const VERSIONS: &str = ".versions.json";
/// A search's trial stopped early by its agent (`[tune] early_stop`): the
/// rule's numbers (`agent::prune::Prune`), read by the tell job.
pub const PRUNE: &str = ".prune.json";
/// A search's trial that ran out of GPU memory: the cause, and whether it
/// moved to a bigger slice (`rundir::search::OomRecord`), written by its
/// train script and `tune escalate`, read by the tell job and `status`.
pub const OOM: &str = ".oom.json";

/// In a training directory (`train_dir`), what Ultralytics writes: the
/// checkpoint a training resumes from, the best weights (val, export and
/// `models publish` take them), one row per finished epoch, and the
/// arguments it trained with.
pub const WEIGHTS_LAST: &str = "weights/last.pt";
pub const WEIGHTS_BEST: &str = "weights/best.pt";
pub const RESULTS: &str = "results.csv";
pub const ARGS: &str = "args.yaml";
/// What the prepare stage writes: the dataset check's summary (with the
/// dataset's fingerprint) and, when the dataset was cached on the node, the
/// cached copy's path, which the train and val stages read.
pub const PREPARE_SUMMARY: &str = "prepare/summary.json";
pub const PREPARE_DATA_PATH: &str = "prepare/data-path";

/// The training directory of a variant: `train`, or `train-<task>`.
pub fn train_dir(task: Option<u32>) -> String {
    match task {
        Some(t) => format!("{TRAIN}-{t}"),
        None => TRAIN.to_string(),
    }
}

/// A stage's Slurm output of one task: `<stage>.out`, or `<stage>-<task>.out`.
pub fn log_file(stage: &str, task: Option<u32>) -> String {
    match task {
        Some(t) => format!("{stage}-{t}.out"),
        None => format!("{stage}.out"),
    }
}

/// The `--output` pattern of a stage: `<stage>.out`, or `<stage>-%a.out` for an array.
pub fn log_pattern(stage: &str, array: bool) -> String {
    if array {
        format!("{stage}-%a.out")
    } else {
        format!("{stage}.out")
    }
}

/// The key of a task's records in `STATE`: `<stage>`, or `<stage>.<task>`.
pub fn state_key(stage: &str, task: Option<u32>) -> String {
    match task {
        Some(t) => format!("{stage}.{t}"),
        None => stage.to_string(),
    }
}

/// The memory guard's record of a task, relative to the run directory.
pub fn guard_record(stage: &str, task: Option<u32>) -> String {
    format!("{STATE}/{}{GUARD}", state_key(stage, task))
}

/// A trial's early-stopping record, relative to the run directory.
pub fn prune_record(task: Option<u32>) -> String {
    format!("{STATE}/{}{PRUNE}", state_key("train", task))
}

/// A trial's out-of-GPU-memory record, relative to the run directory.
pub fn oom_record(task: Option<u32>) -> String {
    format!("{STATE}/{}{OOM}", state_key("train", task))
}

/// The job agent's memory series of a task, relative to the run directory.
pub fn memory_series(stage: &str, task: Option<u32>) -> String {
    format!("{STATE}/{}{MEMORY}", state_key(stage, task))
}

/// The trainer's versions record of a train task, relative to the run directory.
pub fn versions_record(task: Option<u32>) -> String {
    format!("{STATE}/{}{VERSIONS}", state_key("train", task))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_with_and_without_a_variant() {
        assert_eq!(train_dir(None), "train");
        assert_eq!(train_dir(Some(3)), "train-3");
        assert_eq!(log_file("train", Some(3)), "train-3.out");
        assert_eq!(log_file("export", None), "export.out");
        assert_eq!(log_pattern("val", true), "val-%a.out");
        assert_eq!(state_key("train", Some(2)), "train.2");
        assert_eq!(guard_record("train", None), "state/train.guard.json");
        assert_eq!(memory_series("train", Some(1)), "state/train.1.memory.csv");
        assert_eq!(versions_record(Some(2)), "state/train.2.versions.json");
        assert_eq!(versions_record(None), "state/train.versions.json");
        // The names Ultralytics and the prepare stage write.
        assert_eq!(
            [WEIGHTS_LAST, WEIGHTS_BEST, RESULTS, ARGS],
            [
                "weights/last.pt",
                "weights/best.pt",
                "results.csv",
                "args.yaml"
            ]
        );
        assert_eq!(
            [PREPARE_SUMMARY, PREPARE_DATA_PATH],
            ["prepare/summary.json", "prepare/data-path"]
        );
    }
}
