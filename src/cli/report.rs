//! `yolo-sched report`.

use std::path::PathBuf;

use anyhow::{Context as _, Result};
use chrono::Local;
use clap::Args;

use super::args::JsonArg;
use super::Context;
use crate::error::invalid;
use crate::report::{self, render::Selection, window, Filter, Format};

#[derive(Debug, Args)]
#[command(after_help = "\
Sections: inventory (slices per node and type), queue (running and pending jobs per type
and partition, why jobs wait, jobs that can never run), usage (slices held per user, and
slice-hours since --since where Slurm accounting works), runs (yolo-sched runs by state),
right-sizing (runs whose memory would fit a smaller MIG profile). --section also takes
table names: inventory-totals, queue-types, queue-reasons, queue-never-runnable,
runs-failing-stages.

Each report runs one sinfo, one squeue and at most one sacct, whatever the cluster size.
With --output the file is replaced atomically, and left alone when Slurm cannot be reached
(exit status 1). Schema of --format json and the metric names: docs/report.md.

Examples:
  yolo-sched report
  yolo-sched report --section queue --partition gpu
  yolo-sched report --format json | jq '.queue.pending_reasons'
  yolo-sched report --format csv --section usage --since 7d > usage.csv
  yolo-sched report --format prometheus --output /var/lib/prometheus/node-exporter/yolo-sched.prom
  yolo-sched report --format html --since 7d --output report.html

--format html writes one self-contained page (inline SVG, no scripts, fonts or network):
slices in use by type over the window, queue wait by type, runs by state, the leaderboard
(`yolo-sched compare`) and each run's training curves; every chart has its numbers in a table.")]
pub struct ReportArgs {
    /// Output format (`--json` is the same as `--format json`).
    #[arg(long, value_enum, default_value = "table", conflicts_with = "json")]
    pub format: Format,

    #[command(flatten)]
    pub json: JsonArg,

    /// Write to FILE (replaced atomically) instead of stdout.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Start of the slice-hours window: a length back from now (90m, 24h, 7d) or a local date/time.
    #[arg(long, value_name = "WHEN", default_value = "24h")]
    pub since: String,

    /// Only this partition.
    #[arg(long, value_name = "NAME")]
    pub partition: Option<String>,

    /// Only this user's jobs.
    #[arg(long, value_name = "NAME")]
    pub user: Option<String>,

    /// Only this account's jobs.
    #[arg(long, value_name = "NAME")]
    pub account: Option<String>,

    /// Sections or tables to print (repeat or separate with commas; default: all).
    #[arg(long = "section", value_name = "NAME")]
    pub sections: Vec<String>,

    /// Run manifests to read (default: $XDG_STATE_HOME/yolo-sched/runs; with
    /// --account or --user, the runs Slurm shows you, found by the run id in
    /// each job's comment).
    #[arg(long, value_name = "DIR", env = "YOLO_SCHED_RUNS_DIR")]
    pub runs_dir: Option<PathBuf>,

    /// With --format html: also rank the model registry's versions on the leaderboard.
    #[arg(long)]
    pub registry: bool,
}

use super::args::check_name;

pub fn run(ctx: &mut Context, args: &ReportArgs) -> Result<i32> {
    let format = if args.json.json {
        Format::Json
    } else {
        args.format
    };
    let selection = Selection::parse(&args.sections).map_err(invalid)?;
    let since = window::since(&args.since, Local::now().naive_local()).map_err(invalid)?;
    if let Some(path) = &args.output {
        crate::fsutil::check_target(path, "--output").map_err(invalid)?;
    }
    let filter = Filter {
        user: check_name("--user", &args.user)?,
        partition: check_name("--partition", &args.partition)?,
        account: check_name("--account", &args.account)?,
    };
    let extra_rows = if args.registry && format == Format::Html {
        let (rows, problems) = super::compare::registry_rows(ctx)?;
        for p in problems {
            ctx.printer.warn(format!("registry: not ranked: {p}"));
        }
        rows
    } else {
        Vec::new()
    };
    let options = report::Options {
        selection: selection.clone(),
        filter,
        since,
        runs_dir: args
            .runs_dir
            .clone()
            .or_else(|| crate::rundir::manifest::index_dir().ok()),
        leaderboard: format == Format::Html,
        runs_through_slurm: args.runs_dir.is_none()
            && (args.user.is_some() || args.account.is_some()),
        extra_rows,
    };
    let data = report::gather(&ctx.slurm, &options).with_context(|| match &args.output {
        Some(path) => format!("no report written; {} was left as it was", path.display()),
        None => "no report made".to_string(),
    })?;

    match &args.output {
        Some(path) => {
            let text = report::render(&data, format, &selection, false, false)?;
            crate::fsutil::write_atomic_keep_mode(path, text.as_bytes(), 0o644)
                .with_context(|| format!("writing the report to {}", path.display()))?;
        }
        None => {
            let terminal = ctx.printer.out_is_terminal();
            let text = report::render(&data, format, &selection, terminal, ctx.color())?;
            ctx.printer.text(&text)?;
        }
    }
    Ok(0)
}
