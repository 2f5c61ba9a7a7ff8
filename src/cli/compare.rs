//! `yolo-sched compare`: the leaderboard (`crate::compare`).

use std::path::PathBuf;

use anyhow::Result;
use chrono::Utc;
use clap::Args;

use super::Context;
use crate::compare::{self, render, SortKey};
use crate::run::query;

/// Output formats of `compare`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CompareFormat {
    Table,
    Json,
    Csv,
}

#[derive(Debug, Args)]
#[command(after_help = "\
One row per run, and per variant for a sweep (`<run>/train-N`): model, dataset, imgsz,
epochs done, best mAP50-95 and mAP50 (from results.csv), precision and recall at the best
epoch, training wall time, the slice and its GPU-hours (a MIG profile Ng.* is N/7 of a GPU),
and milliseconds of inference per image as Ultralytics' own `yolo val` printed it (of the
exported ONNX model when the export stage validated it, else of best.pt).

Runs are grouped by the content fingerprint of their dataset, which the prepare stage
records; rows are ranked only within a group, so runs on different data are never ranked
together. Without RUN, the runs in your run index; with --user or --account, the runs
Slurm shows you (your own, your coordinated accounts', or everyone's for operators),
of which those whose run directory you can read are compared.
One squeue call and at most one sacct call, whatever the number of runs.

Examples:
  yolo-sched compare
  yolo-sched compare --data pcb --sort map50 --since 7d
  yolo-sched compare pcb-20261130T150000-1a2b --json | jq '.groups[0].rows[0]'
  yolo-sched compare --user alice --format csv > board.csv
  yolo-sched compare --account vision --since 30d")]
pub struct CompareArgs {
    /// Runs to compare (ids, unique prefixes or run directories; default: all in the index).
    #[arg(value_name = "RUN")]
    pub runs: Vec<String>,

    /// Only this user's runs: found through Slurm (the runs of their jobs
    /// that Slurm shows you), read where you can read their run directory.
    #[arg(long, value_name = "NAME")]
    pub user: Option<String>,

    /// Only runs of this Slurm account's jobs (a coordinator sees the
    /// account's runs), found through Slurm like --user.
    #[arg(long, value_name = "NAME")]
    pub account: Option<String>,

    /// Only runs on this dataset: its YAML path, file or directory name, or a fingerprint prefix.
    #[arg(long, value_name = "DATASET")]
    pub data: Option<String>,

    /// Only runs submitted since: a length back from now (90m, 24h, 7d) or a local date/time.
    #[arg(long, value_name = "WHEN")]
    pub since: Option<String>,

    /// The metric to rank by.
    #[arg(long, value_enum, default_value = "map50-95")]
    pub sort: SortKey,

    /// Output format (`--json` is the same as `--format json`).
    #[arg(long, value_enum, default_value = "table", conflicts_with = "json")]
    pub format: CompareFormat,

    #[command(flatten)]
    pub json: super::args::JsonArg,

    /// Also rank the versions of the site's model registry (`[registry] url`):
    /// rows `registry:NAME@N`, grouped with runs on the same dataset fingerprint.
    #[arg(long)]
    pub registry: bool,

    /// Run index to read instead of yours ($XDG_STATE_HOME/yolo-sched/runs).
    #[arg(
        long,
        value_name = "DIR",
        env = "YOLO_SCHED_RUNS_DIR",
        conflicts_with = "runs"
    )]
    pub runs_dir: Option<PathBuf>,
}

pub fn run(ctx: &mut Context, args: &CompareArgs) -> Result<i32> {
    let format = if args.json.json {
        CompareFormat::Json
    } else {
        args.format
    };
    let since = args
        .since
        .as_deref()
        .map(|s| crate::report::window::since_utc(s, Utc::now()))
        .transpose()
        .map_err(crate::error::invalid)?;
    let user = super::args::check_name("--user", &args.user)?;
    let account = super::args::check_name("--account", &args.account)?;
    let through_slurm =
        args.runs.is_empty() && args.runs_dir.is_none() && (user.is_some() || account.is_some());
    let manifests = if !args.runs.is_empty() {
        let mut out = Vec::new();
        for id in &args.runs {
            out.push(match crate::run::team::locate(&ctx.slurm, id)? {
                crate::run::team::Located::Own(m) => *m,
                crate::run::team::Located::Team(r) => r.manifest,
            });
        }
        out
    } else if through_slurm {
        let who = crate::slurm::squeue::Who { account, user };
        let from = since
            .unwrap_or_else(|| Utc::now() - chrono::Duration::days(crate::run::team::LOOKUP_DAYS));
        let team = crate::run::team::find(&ctx.slurm, &who, from)?;
        let (readable, unreadable): (Vec<_>, Vec<_>) = team
            .runs
            .into_iter()
            .partition(|r| r.facts == crate::run::team::Facts::Manifest);
        if !unreadable.is_empty() {
            ctx.printer.note(format!(
                "{} run(s) whose run directory you cannot read are left out (their metrics are there): {}",
                unreadable.len(),
                unreadable
                    .iter()
                    .take(5)
                    .map(|r| r.manifest.run_id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        readable.into_iter().map(|r| r.manifest).collect()
    } else {
        let (manifests, unreadable) = match &args.runs_dir {
            Some(dir) => {
                let (m, bad) = crate::report::runs::load(dir);
                let bad = bad
                    .into_iter()
                    .map(|u| format!("skipping {}: {}", u.path, u.error))
                    .collect();
                (m, bad)
            }
            None => {
                let index = query::index_entries()?;
                let (m, mut bad) = compare::facts::load_manifests(&index.entries);
                bad.extend(index.unreadable);
                (m, bad)
            }
        };
        for w in &unreadable {
            ctx.printer.warn(w);
        }
        manifests
    };
    let refs: Vec<&crate::rundir::manifest::Manifest> = manifests.iter().collect();
    let view = query::ask_slurm(&ctx.slurm, &refs);
    if let Some(e) = &view.error {
        ctx.printer.warn(format!(
            "Slurm did not answer ({e}); states come from the runs' own records"
        ));
    }
    let now = Utc::now();
    let mut rows: Vec<compare::Row> = manifests
        .iter()
        .flat_map(|m| {
            let st = crate::run::status::of_run(m, &view.rows, &view.acct, view.reachable);
            compare::facts(m, &st, now).into_iter().map(|f| f.row)
        })
        .collect();
    if args.registry {
        let (models, problems) = registry_rows(ctx)?;
        for p in problems {
            ctx.printer.warn(format!("registry: not ranked: {p}"));
        }
        rows.extend(models);
    }
    let options = compare::Options {
        user: args.user.clone(),
        data: args.data.clone(),
        since,
        sort: args.sort,
    };
    let board = compare::board(rows, &options)?;
    match format {
        CompareFormat::Json => ctx.printer.json(&board)?,
        CompareFormat::Csv => {
            let text = render::csv(&board);
            ctx.printer.text(&text)?;
        }
        CompareFormat::Table => {
            if board.groups.is_empty() {
                ctx.printer.note("no training runs to compare");
                return Ok(0);
            }
            // One table per dataset: rows are ranked only within one.
            for (i, g) in board.groups.iter().enumerate() {
                if i > 0 {
                    ctx.printer.line("")?;
                }
                ctx.printer
                    .line(format!("dataset {}", render::dataset_cell(g)))?;
                let mut table = ctx.printer.table(&render::TABLE_HEADERS);
                for r in &g.rows {
                    table.add_row(render::table_row(g, r));
                }
                ctx.printer.line(table)?;
            }
            for n in &board.notes {
                ctx.printer.note(n);
            }
            ctx.printer.note(format!(
                "ranked by {} within each dataset",
                board.sort.name()
            ));
        }
    }
    Ok(0)
}

/// The registry's versions as leaderboard rows (`--registry`).
pub(super) fn registry_rows(ctx: &mut Context) -> Result<(Vec<compare::Row>, Vec<String>)> {
    let site = crate::registry::SiteRegistry::from_site(ctx.site()?)?;
    let reg = crate::registry::Registry::open(site.require()?)?;
    compare::registry::rows(&reg, &crate::registry::Caller::current())
}
