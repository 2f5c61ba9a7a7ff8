//! Argument parsing, dispatch and output; the work is done by library modules.

pub mod agent;
pub mod args;
pub mod backup;
pub mod checkpoint;
pub mod compare;
pub mod dataset;
pub mod doctor;
pub mod gc;
pub mod generate;
pub mod node_setup;
pub mod report;
pub mod runs;
pub mod status;
pub mod submit;
pub mod validate;
pub mod watch;

use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, Parser, Subcommand};

use crate::config::Site;
use crate::error::{self, exit};
use crate::printer::Printer;
use crate::slurm::Slurm;

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

/// Options every subcommand accepts.
#[derive(Debug, Clone, Args)]
pub struct GlobalArgs {
    /// Site file to read instead of /etc/yolo-sched/site.toml.
    #[arg(long, global = true, env = "YOLO_SCHED_SITE", value_name = "FILE")]
    pub site: Option<PathBuf>,

    /// When to colour output: auto (a terminal without NO_COLOR), always or never.
    #[arg(
        long,
        global = true,
        value_name = "WHEN",
        default_value = "auto",
        env = "YOLO_SCHED_COLOR"
    )]
    pub color: crate::printer::ColorChoice,
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
    /// Check the Slurm, accounting and NVML environment.
    Doctor(doctor::DoctorArgs),
    /// Shell completions and the man page.
    Generate(generate::GenerateArgs),
    /// The job agent beside a GPU stage's trainer: memory guard and metrics (started by the stage script).
    Agent(agent::AgentArgs),
    /// Back up checkpoints to S3-compatible storage, restore them, show the last backup.
    Backup(backup::BackupArgs),
}

/// What every subcommand gets: resolved settings, the terminal and the Slurm runner.
pub struct Context {
    pub global: GlobalArgs,
    pub printer: Printer,
    pub slurm: Slurm,
    site: Option<Site>,
}

impl Context {
    /// The site file, read on first use so that `--help` and commands that do
    /// not need it work even when it is broken.
    pub fn site(&mut self) -> Result<&Site> {
        if self.site.is_none() {
            self.site = Some(Site::load(self.global.site.as_deref())?);
        }
        Ok(self.site.as_ref().expect("just loaded"))
    }

    pub fn color(&self) -> bool {
        self.printer.color()
    }
}

/// Run the parsed command; the returned number is the exit status.
pub fn execute(cli: Cli) -> Result<i32> {
    crate::slurm::runner::timeout_from_env().map_err(|e| {
        error::invalid(format!(
            "{e}; set it to the seconds a Slurm command may take, e.g. 30"
        ))
    })?;
    let mut ctx = Context {
        printer: Printer::new(cli.global.color),
        global: cli.global,
        slurm: Slurm::from_env(),
        site: None,
    };
    // What an interrupted submission left: undone before the commands that
    // change runs, pointed out by those that only look.
    match &cli.command {
        Command::Cancel(a) if !a.dry_run => gc::recover_before(&mut ctx, true),
        Command::Resume(a) if !a.dry_run => gc::recover_before(&mut ctx, true),
        Command::Status(_) | Command::Watch(_) | Command::List(_) => {
            gc::recover_before(&mut ctx, false)
        }
        _ => {}
    }
    match cli.command {
        Command::Gc(args) => gc::run(&mut ctx, &args),
        Command::Doctor(args) => doctor::run(&mut ctx, &args),
        Command::Generate(args) => generate::run(&args),
        Command::Submit(args) => submit::run(&mut ctx, &args),
        Command::Validate(args) => validate::run(&mut ctx, &args),
        Command::Dataset(args) => dataset::run(&mut ctx, &args),
        Command::Checkpoint(args) => checkpoint::run(&ctx, &args),
        Command::Status(args) => status::run(&mut ctx, &args),
        Command::Watch(args) => watch::run(&mut ctx, &args),
        Command::List(args) => status::list(&mut ctx, &args),
        Command::Cancel(args) => runs::cancel(&mut ctx, &args),
        Command::Resume(args) => runs::resume_run(&mut ctx, &args),
        Command::Logs(args) => runs::logs(&mut ctx, &args),
        Command::Audit(args) => runs::audit_cmd(&mut ctx, &args),
        Command::NodeSetup(args) => node_setup::run(&mut ctx, &args),
        Command::Report(args) => report::run(&mut ctx, &args),
        Command::Compare(args) => compare::run(&mut ctx, &args),
        Command::Agent(args) => agent::run(&mut ctx, &args),
        Command::Backup(args) => backup::run(&mut ctx, &args),
    }
}

/// The binary's entry point: parse, run, print the error, exit with its status.
pub fn run_main() {
    // clap's `help` subcommand takes no flags; `yolo-sched help --help` is a
    // reasonable thing to type, so it prints the top-level help.
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if argv.get(1).is_some_and(|a| a == "help")
        && argv[2..].iter().any(|a| a == "--help" || a == "-h")
    {
        use clap::CommandFactory;
        let _ = Cli::command().print_long_help();
        std::process::exit(exit::OK);
    }
    // An empty YOLO_SCHED_* variable means "not set" (`YOLO_SCHED_SITE=` in a
    // job script), not "the empty value", which clap would refuse as a
    // missing flag value. Still one thread here, so changing the environment
    // is sound.
    for (key, value) in std::env::vars_os() {
        if value.is_empty() && key.to_string_lossy().starts_with("YOLO_SCHED_") {
            std::env::remove_var(&key);
        }
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() {
                exit::INVALID_INPUT
            } else {
                exit::OK
            };
            let _ = e.print();
            std::process::exit(code);
        }
    };
    let printer = Printer::new(cli.global.color);
    let code = match execute(cli) {
        Ok(code) => code,
        Err(err) if error::is_broken_pipe(&err) => exit::OK,
        Err(err) => {
            printer.error(&err);
            error::exit_code_for(&err)
        }
    };
    std::process::exit(code);
}
