//! `yolo-sched advise`: how the GPU nodes should be cut, from the window's
//! accounting, and what it would change.
//!
//! One `sacct` call for the window's jobs (`history`), one `scontrol` for the
//! nodes (`fleet`), then pure steps: the jobs become a demand arriving over
//! time, each set-up is simulated on it (`simulate`), and `auto` is rolled out
//! node by node (`advice`).

pub mod advice;
pub mod fleet;
pub mod history;
pub mod need;
pub mod simulate;

use std::path::PathBuf;

use anyhow::{Context, Result};
use chrono::NaiveDateTime;
use serde::Serialize;

pub use advice::{advise, Advice, SetUp, Step};
pub use fleet::GpuNode;
pub use history::{Counted, History, Measured, Skipped, Trace};

use crate::mig::{Demand, GpuGeometry};
use crate::slurm::squeue::Filter;
use crate::slurm::Slurm;

/// What to advise on.
#[derive(Debug, Clone)]
pub struct Options {
    /// The window, cluster local time.
    pub since: NaiveDateTime,
    pub until: NaiveDateTime,
    pub partition: Option<String>,
    pub account: Option<String>,
    /// Only these nodes (default: every GPU node of the partition).
    pub nodes: Vec<String>,
    /// The GPU model of nodes whose GRES types do not name it.
    pub gpu_model: Option<GpuGeometry>,
    /// A saved `sacct` output (the `history::FIELDS` columns) instead of asking sacct.
    pub sacct_file: Option<PathBuf>,
    /// Keep the window's jobs as the replay's trace (`--trace-out`, [`trace_file`]).
    pub trace: bool,
}

/// The advice and what it was made from.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub since: NaiveDateTime,
    pub until: NaiveDateTime,
    pub partition: Option<String>,
    pub counted: Counted,
    /// The window's waits as accounting recorded them.
    pub measured: Measured,
    pub skipped: Skipped,
    pub nodes: Vec<GpuNode>,
    pub advice: Advice,
    /// Where each job's need came from (`need`): jobs and GPU-hours
    /// planned from a measurement, from gpumem, from the type asked; and the
    /// measurements refused.
    pub needs: need::Needs,
    /// Per user and per account, the jobs that asked for more than they
    /// used, what would have fitted, and the wait it would have saved.
    pub rightsizing: Vec<need::Oversized>,
    /// Things the reader should know (untyped requests, a type no node offers).
    pub warnings: Vec<String>,
    /// The window's demand as jobs need it (each job of the type that
    /// fits it), what the set-ups are simulated on and `--demand-out` writes.
    #[serde(skip)]
    pub demand: Demand,
    /// The window's jobs for the replay, with [`Options::trace`].
    #[serde(skip)]
    pub trace: Option<Trace>,
}

/// The largest saved sacct output read (`--sacct-file`): 1 GiB, read line by
/// line (`history::read`), never whole.
pub const SACCT_FILE_LIMIT: u64 = 1 << 30;

/// The longest window advised on: 366 days, the latest arrival a demand file
/// for node-setup holds.
pub const MAX_WINDOW_S: u64 = crate::mig::demand::MAX_SECONDS;

/// Read `--sacct-file` line by line: a regular file of at most
/// [`SACCT_FILE_LIMIT`] bytes (a FIFO or a device is refused without
/// blocking), each line as `history::read` takes it. A line that is not
/// sacct's is invalid input, at its `file:line`.
fn read_sacct_file(path: &std::path::Path, window: &history::Window<'_>) -> Result<History> {
    use std::io::Read as _;
    let shown = crate::text::echo_path(path);
    let file =
        crate::fsutil::open_regular_bounded(path, crate::fsutil::Links::Follow, SACCT_FILE_LIMIT)
            .map_err(|e| crate::error::invalid(format!("--sacct-file: {e:#}")))?;
    let mut input = std::io::BufReader::with_capacity(64 << 10, file.take(SACCT_FILE_LIMIT));
    let history = history::read(&mut input, window).map_err(|e| match e {
        history::ReadError::Line(u) => {
            crate::error::invalid(format!("--sacct-file {shown}:{}: {}", u.line, u.why))
        }
        history::ReadError::Io(e) => anyhow::Error::new(e).context(format!("reading {shown}")),
    })?;
    let mut more = [0u8; 1];
    if input.into_inner().into_inner().read(&mut more).unwrap_or(0) > 0 {
        return Err(crate::error::invalid(format!(
            "--sacct-file {shown} grew past {SACCT_FILE_LIMIT} bytes while being read"
        )));
    }
    Ok(history)
}

/// Read the window and the nodes, and advise.
pub fn run(slurm: &Slurm, opts: &Options) -> Result<Report> {
    check_window(opts)?;
    let partitions: Vec<String> = opts.partition.iter().cloned().collect();
    let window = history::Window {
        since: opts.since,
        until: opts.until,
        partitions: &partitions,
        trace: opts.trace,
    };
    let history = match &opts.sacct_file {
        Some(path) => read_sacct_file(path, &window)?,
        None => ask_sacct(slurm, opts, &window)?,
    };
    // The nodes, and the carrier of measured needs (job comments kept by
    // slurmdbd: the controller's settings, asked in the same scontrol call),
    // which only counts for a live cluster (a saved output says for itself).
    let cluster = crate::slurm::cluster::fetch(slurm).context("reading the nodes (scontrol)")?;
    let comments_kept = opts
        .sacct_file
        .is_none()
        .then_some(cluster.job_comments_kept);
    let known: Vec<String> = cluster.partitions.iter().map(|p| p.name.clone()).collect();
    let nodes = Nodes {
        nodes: &cluster.nodes,
        partitions: &known,
    };
    from_history(opts, history, nodes, comments_kept)
}

/// The nodes advised on, as the caller read them (`scontrol` for `advise`,
/// the report's `sinfo`), and the partitions the cluster has.
#[derive(Debug, Clone, Copy)]
pub struct Nodes<'a> {
    pub nodes: &'a [crate::slurm::node::Node],
    pub partitions: &'a [String],
}

/// Advise from a window's history already read, on nodes already read: no
/// Slurm call (the report hands over its own `sacct` and `sinfo`).
/// `comments_kept`: whether slurmdbd keeps job comments, when known.
pub fn from_history(
    opts: &Options,
    history: History,
    nodes: Nodes<'_>,
    comments_kept: Option<bool>,
) -> Result<Report> {
    let partitions: Vec<String> = opts.partition.iter().cloned().collect();
    let nodes = read_nodes(opts, nodes, &partitions)?;
    let History {
        counted,
        measured,
        skipped,
        trace,
        jobs,
        mut needs,
        ..
    } = history;
    let mut models: Vec<&GpuGeometry> = nodes.iter().filter_map(|n| n.geometry.as_ref()).collect();
    models.sort_by(|a, b| a.model().cmp(b.model()));
    models.dedup_by(|a, b| a.model() == b.model());
    let (demand, fits) = need::plan(&jobs, &models, &mut needs);
    let mut warnings = history_warnings(&counted, &skipped, &needs, comments_kept);
    if nodes.is_empty() {
        return Err(crate::error::invalid(
            "no GPU node with typed GRES in the partitions asked about; give --partition or --node",
        ));
    }
    let advice = advise(&demand, &nodes)?;
    let advised = advised_outcome(&advice);
    let rightsizing = need::oversized(&jobs, &fits, &|kind| {
        advised.and_then(|o| o.mean_wait_of(kind))
    });
    for s in &advice.setups {
        if s.name == "current" && s.outcome.never_run > 0 {
            warnings.push(format!(
                "{} job(s) of the window ask for more than any instance offered now holds \
                 (they would never start as the nodes are cut now)",
                s.outcome.never_run
            ));
        }
    }
    Ok(Report {
        since: opts.since,
        until: opts.until,
        partition: opts.partition.clone(),
        counted,
        measured,
        skipped,
        nodes,
        advice,
        needs,
        rightsizing,
        warnings,
        demand,
        trace,
    })
}

/// Refuse a window longer than a demand file for node-setup holds.
fn check_window(opts: &Options) -> Result<()> {
    let window_s = (opts.until - opts.since).num_seconds();
    if u64::try_from(window_s).is_ok_and(|s| s > MAX_WINDOW_S) {
        return Err(crate::error::invalid(format!(
            "the window is {} days; advise reads at most 366 (the most a demand file for \
             node-setup holds): give a later --since or an earlier --until",
            window_s / 86_400
        )));
    }
    Ok(())
}

/// The window's jobs from one `sacct` call; its failure with a hint, its
/// output that is not what was asked as sacct's failure.
fn ask_sacct(slurm: &Slurm, opts: &Options, window: &history::Window<'_>) -> Result<History> {
    let filter = Filter {
        user: None,
        partition: opts.partition.clone(),
        account: opts.account.clone(),
    };
    let query = crate::slurm::sacct::Window {
        since: opts.since,
        until: Some(opts.until),
        filter: &filter,
    };
    let out =
        crate::slurm::sacct::window(slurm, &query).context("asking sacct for the window's jobs")?;
    if !out.status.success() {
        let err = out.stderr_str();
        let hint = if crate::slurm::states::accounting_off(&err) {
            "advise reads the jobs from Slurm's accounting (slurmdbd); this cluster has \
             none, so there is no history to advise from"
        } else {
            "is slurmdbd up? `sacct -X -S now-1hours` should answer"
        };
        anyhow::bail!(
            "sacct failed: {}\nhint: {hint}",
            crate::text::head(err.trim_end(), 400)
        );
    }
    history_of_sacct(&out.stdout, window)
}

/// The window's history from the output of a window query
/// (`slurm::sacct::window`) that answered: sacct's own output that is not
/// what was asked is sacct failing (exit 1), not the user's input.
pub fn history_of_sacct(stdout: &[u8], window: &history::Window<'_>) -> Result<History> {
    history::read(stdout, window).map_err(|e| {
        anyhow::anyhow!(
            "sacct's output, {e}\nhint: advise asks `sacct -X --parsable2 --noheader \
             --format={}`; is the `sacct` on PATH Slurm's?",
            history::FIELDS
        )
    })
}

/// The GPU nodes advised on: `--partition` and each `--node` must name one
/// the cluster has.
fn read_nodes(opts: &Options, cluster: Nodes<'_>, partitions: &[String]) -> Result<Vec<GpuNode>> {
    if let Some(p) = &opts.partition {
        if !cluster.partitions.iter().any(|q| q == p) {
            return Err(crate::error::invalid(format!(
                "--partition {}: no such partition{}",
                crate::text::echo(p),
                crate::suggest::did_you_mean(p, cluster.partitions.iter().map(String::as_str))
            )));
        }
    }
    for n in &opts.nodes {
        if !cluster.nodes.iter().any(|m| &m.name == n) {
            let names: Vec<&str> = cluster.nodes.iter().map(|m| m.name.as_str()).collect();
            return Err(crate::error::invalid(format!(
                "--node {}: no such node{}",
                crate::text::echo(n),
                crate::suggest::did_you_mean(n, names.iter().copied())
            )));
        }
    }
    fleet::read(
        cluster.nodes,
        partitions,
        &opts.nodes,
        opts.gpu_model.as_ref(),
    )
    .map_err(|e| crate::error::invalid(format!("{e:#}")))
}

/// What the reader should know of the window's jobs: no measured need (and
/// why), refused measurements, lines not read, jobs clamped or left out.
fn history_warnings(
    counted: &Counted,
    skipped: &Skipped,
    needs: &need::Needs,
    comments_kept: Option<bool>,
) -> Vec<String> {
    let mut warnings = Vec::new();
    if counted.jobs > 0 && needs.measured.jobs + needs.gpumem.jobs == 0 {
        warnings.push(if comments_kept == Some(false) {
            "accounting does not keep job comments (slurm.conf has no \
             AccountingStoreFlags=job_comment), so the GPU memory yolo-sched's job agent \
             measured never reaches advise: every job is planned from the type it asked for; \
             add AccountingStoreFlags=job_comment (`yolo-sched doctor` checks it)"
                .to_string()
        } else {
            format!(
                "no job of the window carries a measured GPU memory{}: every job is planned \
                 from the type it asked for, which is at most what it needed",
                if needs.tagged_unmeasured > 0 {
                    format!(
                        " ({} yolo-sched job(s) without one: their agent could not write it, \
                         or they ran before it did)",
                        needs.tagged_unmeasured
                    )
                } else {
                    String::new()
                }
            )
        });
    }
    if needs.refused.total() > 0 {
        let r = &needs.refused;
        warnings.push(format!(
            "{} measurement(s) in job comments were refused and not planned from ({} naming \
             another job, {} with numbers out of bounds or over what their type holds, {} \
             malformed): those jobs are planned from what they asked",
            r.total(),
            r.other_job,
            r.bad_number,
            r.malformed
        ));
    }
    if skipped.past_limit > 0 {
        warnings.push(format!(
            "{} line(s) of sacct's output after the first {} were not read, and their jobs \
             are left out: give a shorter window (--since, --until) or --partition",
            skipped.past_limit,
            history::MAX_LINES
        ));
    }
    if counted.clamped > 0 {
        warnings.push(format!(
            "{} job(s) ran or were limited to more than 366 days, or asked for more than {} \
             instances: counted as 366 days and {} instances, the most node-setup plans for",
            counted.clamped,
            crate::mig::demand::MAX_COUNT,
            crate::mig::demand::MAX_COUNT
        ));
    }
    if counted.bad_type > 0 {
        warnings.push(format!(
            "{} job(s) asked for a GPU type no node can offer (not letters, digits, `.`, `_`, \
             `+`, `-`, or longer than {}): left out",
            counted.bad_type,
            crate::mig::demand::MAX_TYPE_CHARS
        ));
    }
    if counted.after_window > 0 {
        warnings.push(format!(
            "{} job(s) were submitted after the window's end: left out",
            counted.after_window
        ));
    }
    if counted.untyped > 0 && counted.jobs == 0 {
        warnings.push(format!(
            "{} GPU job(s) recorded without a GPU type: either they asked `gpu:N`, or \
             accounting does not record types (slurm.conf's AccountingStorageTRES needs \
             `gres/gpu:<type>` for each type, e.g. gres/gpu:1g.5gb); untyped jobs fit any \
             instance and are left out",
            counted.untyped
        ));
    }
    warnings
}

/// Each job's predicted wait on the advised layout: the mean of its type's
/// jobs there (the last step of `auto`, else the nodes as they are).
fn advised_outcome(advice: &Advice) -> Option<&simulate::Outcome> {
    if advice.changes {
        advice.steps.last().map(|s| &s.after)
    } else {
        None
    }
    .or_else(|| {
        advice
            .setups
            .iter()
            .find(|s| s.name == "current")
            .map(|s| &s.outcome)
    })
}

/// The demand file for `node-setup --layout auto --demand FILE`: the window's
/// jobs as each MIG model's nodes plan them (one model: its types; several:
/// the types asked), arriving at `submit_s`; consecutive equal jobs of a type
/// share a line. What it writes node-setup reads (`Demand::parse_file`): the
/// demand is within its limits by construction (`history::read` clamps), and a
/// window of more jobs than node-setup plans from is refused, with the reason.
pub fn demand_file(report: &Report) -> Result<String, String> {
    let mut models: Vec<&GpuGeometry> = report
        .nodes
        .iter()
        .filter_map(|n| n.geometry.as_ref())
        .collect();
    models.dedup_by(|a, b| a.model() == b.model());
    let demand = match models.as_slice() {
        [one] => advice::demand_for(&report.demand, one),
        _ => report.demand.clone(),
    };
    demand_csv(&demand, report.since, report.until)
}

/// [`demand_file`] of one demand.
fn demand_csv(
    demand: &Demand,
    since: NaiveDateTime,
    until: NaiveDateTime,
) -> Result<String, String> {
    use crate::mig::demand::{is_type_name, MAX_COUNT, MAX_JOBS, MAX_SECONDS};
    let total = demand.total();
    if total > MAX_JOBS {
        return Err(format!(
            "--demand-out: the window has {total} typed GPU jobs; node-setup plans from at most \
             {MAX_JOBS} (a queue that long plans the same layout as a part of it): give a shorter \
             window (--since, --until) or --partition"
        ));
    }
    let mut out = format!(
        "# demand of {} to {} from sacct (yolo-sched advise)\ngres,time_limit_s,jobs,submit_s\n",
        since.format("%Y-%m-%dT%H:%M:%S"),
        until.format("%Y-%m-%dT%H:%M:%S")
    );
    for (kind, _) in demand.iter() {
        if !is_type_name(kind) {
            return Err(format!(
                "--demand-out: the GPU type `{}` is not one node-setup reads",
                crate::text::echo(kind)
            ));
        }
        let queue = demand.queue(kind);
        let mut at = 0;
        while at < queue.len() {
            let r = queue[at];
            let same = queue[at..].iter().take_while(|q| **q == r).count();
            let (count, seconds, arrival) = (
                r.count.clamp(1, MAX_COUNT),
                r.seconds.clamp(1, MAX_SECONDS),
                r.arrival_s.min(MAX_SECONDS),
            );
            out.push_str(&format!("gpu:{kind}:{count},{seconds},{same},{arrival}\n"));
            at += same;
        }
    }
    Ok(out)
}

/// The window's jobs as a trace for the replay on the real scheduler
/// (`bench/replay/`, its CSV format; `history::trace_row` says which jobs it
/// holds), with the number of jobs left out. Empty without [`Options::trace`].
pub fn trace_file(report: &Report) -> (String, u64) {
    let mut out = format!(
        "# jobs of {} to {} from sacct (yolo-sched advise --trace-out)\nsubmit_s,duration_s,gpu_mem_gib,gpu_fraction,user\n",
        report.since.format("%Y-%m-%dT%H:%M:%S"),
        report.until.format("%Y-%m-%dT%H:%M:%S")
    );
    let Some(trace) = &report.trace else {
        return (out, 0);
    };
    out.push_str(&trace.rows);
    (out, trace.left_out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slurm::time::parse_time;

    /// Issue 32, item 7: every demand file advise writes is one node-setup
    /// reads, from a window of jobs past every limit of the format.
    #[test]
    fn the_demand_file_of_hostile_jobs_is_one_node_setup_reads() {
        let since = parse_time("2026-01-01T00:00:00").unwrap();
        let until = parse_time("2026-12-31T00:00:00").unwrap();
        let job = |elapsed: &str, limit: &str, submit: &str, tres: &str| {
            format!(
                "9|gpu|a|u|COMPLETED|{submit}|2026-06-01T10:00:00|2026-06-01T11:00:00|{elapsed}|{limit}|{tres}|\n"
            )
        };
        let ok = "2026-06-01T10:00:00";
        let mut text = [
            job("34560000", "60", ok, "gres/gpu:1g.5gb=1"),
            job("60", "99999999999999999999", ok, "gres/gpu:1g.5gb=65"),
            job("60", "60", ok, "gres/gpu:1g.5gb=4294967296"),
            job("60", "60", "9999-12-31T23:59:59", "gres/gpu:a100=1"),
            job("60", "60", "1970-01-01T00:00:00", "gres/gpu:a100=2"),
            job("60", "60", ok, "gres/gpu:1g\u{1b}[31m.5gb=1"),
            job("60", "60", ok, "gres/gpu=18446744073709551616"),
            job("60", "60", ok, &format!("gres/gpu:{}=1", "x".repeat(65))),
        ]
        .concat();
        // 1,000 equal jobs share one line.
        for _ in 0..1000 {
            text.push_str(&job("600", "60", ok, "gres/gpu:2g.10gb=1"));
        }
        let window = history::Window {
            since,
            until,
            partitions: &[],
            trace: false,
        };
        let h = history::parse(&text, &window).unwrap();
        let csv = demand_csv(&h.demand, since, until).unwrap();
        let read = Demand::parse_file(&csv, "advise.csv").unwrap_or_else(|e| panic!("{e}\n{csv}"));
        assert_eq!(read, h.demand, "{csv}");
        assert_eq!(read.total(), 1004, "{csv}");
        assert!(csv.contains("gpu:2g.10gb:1,600,1000,"), "{csv}");
        assert!(csv.lines().count() < 12, "{csv}");
        assert!(!csv.contains('\u{1b}'), "{csv}");
    }

    #[test]
    fn a_demand_of_more_jobs_than_node_setup_plans_from_is_refused_with_the_reason() {
        let since = parse_time("2026-12-01T00:00:00").unwrap();
        let mut d = Demand::new();
        for i in 0..=crate::mig::demand::MAX_JOBS {
            d.add_arriving("1g.5gb", 1, 60, i / 1000);
        }
        let e = demand_csv(&d, since, since).unwrap_err();
        assert!(
            e.contains("200001 typed GPU jobs") && e.contains("at most 200000"),
            "{e}"
        );
    }
}
