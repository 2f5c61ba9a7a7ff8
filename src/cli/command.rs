//! The clap definitions: the top-level command and the subcommands (the global
//! options are `global.rs`).

use clap::{Parser, Subcommand};

use super::global::GlobalArgs;
use super::{
    advise, agent, backup, checkpoint, compare, dataset, doctor, gc, generate, models, node_setup,
    report, runs, status, submit, tune, validate, watch,
};

const AFTER_HELP: &str = "\
Exit status: 0 success, 1 runtime failure, 2 invalid input (nothing was changed).
See docs/exit-codes.md.

Settings: flags > YOLO_SCHED_* environment > site file (/etc/yolo-sched/site.toml) > defaults.";

/// Turn one YOLO training spec into a graph of Slurm jobs on the smallest MIG
/// slice that fits, and set up MIG GPU nodes for Slurm.
#[derive(Debug, Parser)]
#[command(name = "yolo-sched", version, about, after_help = AFTER_HELP)]
#[command(propagate_version = true, max_term_width = 100)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Submit a training spec as a chain of Slurm jobs.
    Submit(submit::SubmitArgs),
    /// Check a training spec without submitting anything.
    Validate(validate::ValidateArgs),
    /// Check an Ultralytics dataset (images, labels) and copy it to local storage.
    Dataset(dataset::DatasetArgs),
    /// Say whether an Ultralytics run directory can be resumed.
    Checkpoint(checkpoint::CheckpointArgs),
    /// Show the stages of a run.
    Status(status::StatusArgs),
    /// Follow a run until it ends.
    Watch(watch::WatchArgs),
    /// List your runs.
    List(status::ListArgs),
    /// Cancel every job of a run.
    Cancel(runs::CancelArgs),
    /// Resubmit a run from its first failed stage.
    Resume(runs::ResumeArgs),
    /// Print a stage's Slurm output.
    Logs(runs::LogsArgs),
    /// Print the audit trail.
    Audit(runs::AuditArgs),
    /// Undo submissions that were interrupted half-way (held jobs, manifests).
    Gc(gc::GcArgs),
    /// Read GPUs through NVML, apply a MIG layout, write gres.conf (admins, as root).
    NodeSetup(node_setup::NodeSetupArgs),
    /// Queue and MIG-slice usage reports (table, JSON, CSV, Prometheus).
    Report(report::ReportArgs),
    /// A leaderboard of training runs: mAP, precision, recall, time, GPU-hours, ms per image.
    Compare(compare::CompareArgs),
    /// How the GPU nodes should be cut, from last week's accounting, and the waits it predicts.
    Advise(advise::AdviseArgs),
    /// Check the Slurm, accounting and NVML environment.
    Doctor(doctor::DoctorArgs),
    /// Shell completions and the man page.
    Generate(generate::GenerateArgs),
    /// The job agent beside a GPU stage's trainer: memory guard and metrics (started by the stage script).
    Agent(agent::AgentArgs),
    /// Back up checkpoints to S3-compatible storage, restore them, show the last backup.
    Backup(backup::BackupArgs),
    /// The shared library of validated models: publish, import, list, show, pull, tag, remove.
    Models(models::ModelsArgs),
    /// A hyperparameter search's results: `tune best RUN` (spec `[tune]`).
    Tune(tune::TuneArgs),
}
