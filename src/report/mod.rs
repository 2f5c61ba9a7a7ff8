//! `yolo-sched report`: queue and MIG-slice usage from one `sinfo`, one
//! `squeue` and at most one `sacct` call, plus run manifests.
//!
//! `gather` is the only part with effects (Slurm commands, the manifest
//! directory, the clock); parsing and aggregation (`squeue`, `queue`,
//! `inventory`, `sacct`, `runs`, `rightsizing`) and rendering (`render`) are
//! pure functions tested on recorded and synthetic output.

pub mod inventory;
pub mod model;
pub mod queue;
pub use crate::slurm::reasons;
pub mod render;
pub mod rightsizing;
pub mod runs;
pub mod sacct;
pub mod squeue;
pub mod window;

use std::path::PathBuf;

use anyhow::{Context, Result};
use chrono::{Local, NaiveDateTime, TimeZone};

use crate::slurm::{sinfo, Slurm};
use model::{AccountingState, AccountingStatus, Report, Section, Usage, UsageRow};
use render::Selection;
use squeue::Filter;

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Json,
    Csv,
    Prometheus,
    /// One self-contained HTML page with charts (`render::html`).
    Html,
}

/// What to report on.
#[derive(Debug, Clone)]
pub struct Options {
    pub selection: Selection,
    pub filter: Filter,
    /// Start of the usage window, cluster local time.
    pub since: NaiveDateTime,
    /// Where run manifests are; `None`: there is no state directory.
    pub runs_dir: Option<PathBuf>,
    /// Also build the runs' leaderboard and training curves (`--format html`);
    /// needs the runs section.
    pub leaderboard: bool,
    /// Find the runs through Slurm (`--account`/`--user` without
    /// `--runs-dir`): every run of the filter's account or user that Slurm
    /// shows the caller, not only the caller's own index.
    pub runs_through_slurm: bool,
}

/// A local time as RFC 3339 with the offset in force then.
fn rfc3339(local: NaiveDateTime) -> String {
    Local
        .from_local_datetime(&local)
        .earliest()
        .map(|t| t.to_rfc3339())
        .unwrap_or_else(|| local.format("%Y-%m-%dT%H:%M:%S").to_string())
}

/// Run the Slurm commands the selection needs and build the report. Fails
/// (without side effects) when `sinfo` or `squeue` cannot be run; a failing
/// `sacct` only makes slice-hours unavailable.
pub fn gather(slurm: &Slurm, opts: &Options) -> Result<Report> {
    let started = Local::now();
    let now = started.naive_local();
    let sel = &opts.selection;

    // The three commands run side by side: each waits on a daemon (slurmctld,
    // slurmdbd), and the report takes as long as the slowest instead of the sum.
    // No retries: a report runs every few minutes, and a busy controller is
    // better served by the next run than by repeated queries now.
    let squeue_args = squeue::args(&opts.filter);
    let squeue_args: Vec<&str> = squeue_args.iter().map(String::as_str).collect();
    let (nodes, listing, accounting) = std::thread::scope(|scope| {
        let accounting = sel
            .has(Section::Usage)
            .then(|| scope.spawn(|| slice_hours(slurm, opts, now)));
        let listing = scope.spawn(|| slurm.run("squeue", &squeue_args));
        let nodes = read_nodes(slurm);
        let listing = listing.join();
        let accounting = accounting.map(|h| h.join());
        (nodes, listing, accounting)
    });
    let nodes = nodes.context("cannot read the nodes from Slurm")?;
    let listing = listing
        .map_err(|_| anyhow::anyhow!("the squeue reader panicked"))?
        .context("cannot read the job queue from Slurm")?;
    let listing = into_text(listing);
    let accounting = accounting
        .transpose()
        .map_err(|_| anyhow::anyhow!("the sacct reader panicked"))?;

    // The runs and their jobs' lines, picked out before the listing is dropped.
    let manifests_needed = sel.has(Section::Runs) || sel.has(Section::RightSizing);
    // Runs through Slurm: one more squeue and one sacct, whatever their number.
    let team = if opts.runs_through_slurm && manifests_needed {
        let who = crate::slurm::squeue::Who {
            account: opts.filter.account.clone(),
            user: opts.filter.user.clone(),
        };
        let since = Local
            .from_local_datetime(&opts.since)
            .earliest()
            .map(|t| t.with_timezone(&chrono::Utc))
            .unwrap_or_else(chrono::Utc::now);
        Some(
            crate::run::team::find(slurm, &who, since)
                .context("cannot find the runs through Slurm")?,
        )
    } else {
        None
    };
    let (run_manifests, unreadable) = match (&team, &opts.runs_dir, manifests_needed) {
        (Some(t), _, true) => (t.runs.iter().map(|r| r.manifest.clone()).collect(), vec![]),
        (None, Some(dir), true) => runs::load(dir),
        _ => (Vec::new(), Vec::new()),
    };
    let run_ids = runs::job_ids(&run_manifests);
    let run_rows = runs::queue_rows(&listing, &run_ids);

    let mut aggregator = queue::QueueAggregator::new(now, opts.filter.clone());
    aggregator.add_text(&listing);
    drop(listing);
    let (queue, held, _) = aggregator.finish();

    let inventory = inventory::build(&nodes, opts.filter.partition.as_deref());

    let usage = accounting.map(|(accounting, parsed)| {
        let series = parsed.as_ref().map(|p| model::UsageSeries {
            bucket_seconds: p.bucket_seconds,
            buckets: sacct::SERIES_BUCKETS,
            by_type: p
                .series
                .iter()
                .map(|(kind, secs)| model::TypeSeries {
                    kind: kind.clone(),
                    slices: secs
                        .iter()
                        .map(|s| (s / p.bucket_seconds as f64 * 100.0).round() / 100.0)
                        .collect(),
                })
                .collect(),
        });
        let mut u = usage_rows(
            accounting,
            parsed.map(|p| p.hours),
            held,
            (now - opts.since).num_seconds(),
        );
        u.series = series;
        u
    });

    // Run jobs that left the queue: one `sacct -j`, as `status` asks it,
    // unless the usage query just found that there is no accounting.
    if usage
        .as_ref()
        .is_some_and(|u| u.accounting.status == AccountingStatus::Disabled)
    {
        crate::run::query::note_accounting_off();
    }
    let gone = runs::missing(&run_ids, &run_rows);
    let statuses = match &team {
        Some(t) => t.runs.iter().map(|r| r.status.clone()).collect(),
        None => {
            let acct = if gone.is_empty() || !sel.has(Section::Runs) {
                Vec::new()
            } else {
                crate::run::query::sacct_rows(slurm, &gone)
            };
            runs::statuses(&run_manifests, &run_rows, &acct)
        }
    };
    let manifests: Vec<runs::Manifest> = run_manifests
        .iter()
        .zip(&statuses)
        .map(|(m, st)| runs::view(m, st))
        .collect();
    let (leaderboard, curves, curves_omitted) = if opts.leaderboard && sel.has(Section::Runs) {
        leaderboard(&run_manifests, &statuses)?
    } else {
        (None, Vec::new(), 0)
    };
    let runs = sel.has(Section::Runs).then(|| {
        let dir = match &team {
            Some(_) => PathBuf::from("slurm"),
            None => opts.runs_dir.clone().unwrap_or_default(),
        };
        runs::summarise(&dir, &manifests, unreadable)
    });
    let right_sizing = sel.has(Section::RightSizing).then(|| {
        let types: Vec<String> = inventory
            .totals
            .iter()
            .filter_map(|t| t.kind.strip_prefix("gpu:").map(str::to_string))
            .collect();
        rightsizing::hints(&manifests, &types)
    });

    Ok(Report {
        schema_version: model::SCHEMA_VERSION,
        generated_at: started.to_rfc3339(),
        generated_unix: started.timestamp(),
        filters: model::Filters {
            partition: opts.filter.partition.clone(),
            user: opts.filter.user.clone(),
            account: opts.filter.account.clone(),
            since: rfc3339(opts.since),
            window_seconds: (now - opts.since).num_seconds(),
        },
        inventory: sel.has(Section::Inventory).then_some(inventory),
        queue: sel.has(Section::Queue).then_some(queue),
        usage,
        runs,
        right_sizing,
        leaderboard,
        curves,
        curves_omitted,
    })
}

/// The leaderboard of these runs (`compare`'s board, every run, default
/// sort) and the curve of each of its rows.
fn leaderboard(
    manifests: &[crate::run::Manifest],
    statuses: &[crate::run::status::RunStatus],
) -> Result<(Option<crate::compare::Board>, Vec<model::Curve>, u64)> {
    let now = chrono::Utc::now();
    let mut rows = Vec::new();
    let mut curves = Vec::new();
    for (m, st) in manifests.iter().zip(statuses) {
        for f in crate::compare::facts(m, st, now) {
            if !f.curve.is_empty() {
                curves.push(model::Curve {
                    id: f.row.id.clone(),
                    epochs: f.curve,
                });
            }
            rows.push(f.row);
        }
    }
    let board = crate::compare::board(rows, &crate::compare::Options::default())?;
    // The curves of the best rows of each group, in the board's order: a page
    // of hundreds of charts is read by nobody (`compare --json` has every row).
    let order: Vec<&str> = board
        .groups
        .iter()
        .flat_map(|g| g.rows.iter().take(CURVES_PER_DATASET))
        .map(|r| r.id.as_str())
        .take(CURVES_MAX)
        .collect();
    let all = curves.len();
    curves.retain(|c| order.contains(&c.id.as_str()));
    curves.sort_by_key(|c| order.iter().position(|id| *id == c.id));
    let omitted = (all - curves.len()) as u64;
    Ok((Some(board), curves, omitted))
}

/// Curves drawn per dataset group, and in all, on the HTML page.
pub const CURVES_PER_DATASET: usize = 6;
pub const CURVES_MAX: usize = 36;

/// A command's stdout as text without copying it (a lossy copy only when it
/// is not UTF-8).
fn into_text(out: crate::process::Captured) -> String {
    String::from_utf8(out.stdout)
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Errors `sinfo --json` reports inside the document. Without a controller
/// 22.05 exits 0 with `"errors": [{"error": "Unspecified error", "errno": -1}]`
/// and no nodes, which must not pass for an empty cluster.
#[derive(serde::Deserialize)]
struct JsonErrors {
    #[serde(default)]
    errors: Vec<serde_json::Value>,
}

/// The nodes from one `sinfo --json`, failing on errors inside the document.
pub fn read_nodes(slurm: &Slurm) -> Result<Vec<sinfo::Node>> {
    let text = into_text(slurm.run("sinfo", &["--json"])?);
    check_json_errors(&text, "sinfo --json")?;
    sinfo::parse_nodes(&text)
}

/// Fail when a Slurm JSON document carries errors.
pub fn check_json_errors(text: &str, command: &str) -> Result<()> {
    let doc: JsonErrors =
        serde_json::from_str(text).with_context(|| format!("parsing `{command}` output"))?;
    if doc.errors.is_empty() {
        return Ok(());
    }
    let described: Vec<String> = doc
        .errors
        .iter()
        .map(|e| {
            let what = e.get("error").and_then(|v| v.as_str()).unwrap_or("error");
            match e.get("errno") {
                Some(n) => format!("{what} (errno {n})"),
                None => what.to_string(),
            }
        })
        .collect();
    anyhow::bail!(
        "`{command}` reported: {} (is slurmctld up? try `scontrol ping`)",
        described.join("; ")
    )
}

/// The one `sacct` call; its failure is reported, not raised.
fn slice_hours(
    slurm: &Slurm,
    opts: &Options,
    now: NaiveDateTime,
) -> (AccountingState, Option<sacct::Parsed>) {
    let args = sacct::args(opts.since, &opts.filter);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match slurm.run_raw("sacct", &args) {
        Ok(out) if out.status.success() => {
            let parsed = sacct::parse(&into_text(out), opts.since, now, &opts.filter);
            let message = (parsed.unparsed_lines > 0)
                .then(|| format!("{} sacct line(s) could not be read", parsed.unparsed_lines));
            let state = AccountingState {
                status: AccountingStatus::Ok,
                message,
            };
            (state, Some(parsed))
        }
        Ok(out) => (
            sacct::failure_state(
                &out.stderr_str(),
                &crate::process::describe_status(&out.status),
            ),
            None,
        ),
        Err(err) => (
            AccountingState {
                status: AccountingStatus::Failed,
                message: Some(format!("{err:#}")),
            },
            None,
        ),
    }
}

/// Merge slices held now with slice-hours into one row per (user, account, type).
pub fn usage_rows(
    accounting: AccountingState,
    hours: Option<sacct::SliceHours>,
    held: Vec<queue::Held>,
    window_seconds: i64,
) -> Usage {
    let mut merged: std::collections::HashMap<(String, String, String), (u64, f64)> =
        std::collections::HashMap::with_capacity(
            held.len() + hours.as_ref().map_or(0, |h| h.len()),
        );
    for h in held {
        merged.entry((h.user, h.account, h.kind)).or_default().0 += h.slices;
    }
    let have_hours = hours.is_some();
    for (key, value) in hours.unwrap_or_default() {
        merged.entry(key).or_default().1 += value;
    }
    let mut rows: Vec<UsageRow> = merged
        .into_iter()
        .map(|((user, account, kind), (slices_held, h))| UsageRow {
            user,
            account,
            kind,
            slices_held,
            // To 0.36 s: a short job's hours are not rounded away; tables
            // show two decimals.
            slice_hours: have_hours.then_some((h * 10_000.0).round() / 10_000.0),
        })
        .collect();
    rows.sort_unstable_by(|a, b| {
        (&a.user, &a.account, &a.kind).cmp(&(&b.user, &b.account, &b.kind))
    });
    Usage {
        accounting,
        window_seconds,
        rows,
        series: None,
    }
}

/// The report as text in one format.
pub fn render(
    report: &Report,
    format: Format,
    selection: &Selection,
    for_terminal: bool,
    color: bool,
) -> Result<String> {
    Ok(match format {
        Format::Json => {
            let mut s = serde_json::to_string_pretty(report)?;
            s.push('\n');
            s
        }
        Format::Table => render::text::render(
            &render::tables(report, selection, render::Style::Human),
            for_terminal,
            color,
        ),
        Format::Csv => render::csv::render(&render::tables(report, selection, render::Style::Raw)),
        Format::Prometheus => render::prometheus::render(report, selection, report.generated_unix),
        Format::Html => render::html::render(report),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_inside_sinfo_json_fail() {
        let unreachable =
            r#"{"meta":{},"errors":[{"error":"Unspecified error","errno":-1}],"nodes":[]}"#;
        let err = check_json_errors(unreachable, "sinfo --json").unwrap_err();
        assert!(
            err.to_string().contains("Unspecified error (errno -1)"),
            "{err}"
        );
        assert!(check_json_errors(r#"{"errors":[],"nodes":[]}"#, "sinfo --json").is_ok());
        assert!(check_json_errors(r#"{"nodes":[]}"#, "sinfo --json").is_ok());
    }
}
