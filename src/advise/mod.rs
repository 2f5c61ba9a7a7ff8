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
pub mod simulate;

use std::path::PathBuf;

use anyhow::{Context, Result};
use chrono::NaiveDateTime;
use serde::Serialize;

pub use advice::{advise, Advice, SetUp, Step};
pub use fleet::GpuNode;
pub use history::{Counted, History, Measured, Skipped};

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
    /// Things the reader should know (untyped requests, a type no node offers).
    pub warnings: Vec<String>,
    #[serde(skip)]
    pub demand: Demand,
    /// The window's GPU jobs as read (`--trace-out`).
    #[serde(skip)]
    pub history: History,
}

/// The largest saved sacct output read (`--sacct-file`): 1 GiB.
const SACCT_FILE_LIMIT: u64 = 1 << 30;

/// Read the window and the nodes, and advise.
pub fn run(slurm: &Slurm, opts: &Options) -> Result<Report> {
    let text = match &opts.sacct_file {
        Some(path) => crate::fsutil::read_regular(path, SACCT_FILE_LIMIT)
            .map_err(|e| crate::error::invalid(format!("--sacct-file: {e:#}")))?,
        None => {
            let filter = Filter {
                user: None,
                partition: opts.partition.clone(),
                account: opts.account.clone(),
            };
            let out = crate::slurm::sacct::history(
                slurm,
                opts.since,
                opts.until,
                history::FIELDS,
                &filter,
            )
            .context("asking sacct for the window's jobs")?;
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
                    crate::text::head(&err, 400)
                );
            }
            out.into_text()
        }
    };
    let history = history::parse(&text);
    drop(text);
    let cluster = crate::slurm::cluster::fetch(slurm).context("reading the nodes (scontrol)")?;
    let partitions: Vec<String> = opts.partition.iter().cloned().collect();
    if let Some(p) = &opts.partition {
        if !cluster.partitions.iter().any(|q| &q.name == p) {
            let names: Vec<&str> = cluster.partitions.iter().map(|q| q.name.as_str()).collect();
            return Err(crate::error::invalid(format!(
                "--partition {}: no such partition{}",
                crate::text::echo(p),
                crate::suggest::did_you_mean(p, names.iter().copied())
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
    let nodes = fleet::read(&cluster, &partitions, &opts.nodes, opts.gpu_model.as_ref())
        .map_err(|e| crate::error::invalid(format!("{e:#}")))?;
    let (demand, counted) = history::demand(&history, opts.since, opts.until, &partitions);
    let measured = history::measured(&history, &partitions);
    let mut warnings = Vec::new();
    if counted.untyped > 0 && counted.jobs == 0 {
        warnings.push(format!(
            "{} GPU job(s) recorded without a GPU type: either they asked `gpu:N`, or \
             accounting does not record types (slurm.conf's AccountingStorageTRES needs \
             `gres/gpu:<type>` for each type, e.g. gres/gpu:1g.5gb); untyped jobs fit any \
             instance and are left out",
            counted.untyped
        ));
    }
    if nodes.is_empty() {
        return Err(crate::error::invalid(
            "no GPU node with typed GRES in the partitions asked about; give --partition or --node",
        ));
    }
    let advice = advise(&demand, &nodes)?;
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
        skipped: history.skipped.clone(),
        nodes,
        advice,
        warnings,
        demand,
        history,
    })
}

/// The demand file for `node-setup --layout auto --demand FILE`: the window's
/// jobs as each MIG model's nodes plan them (one model: its types; several:
/// the types asked), arriving at `submit_s`.
pub fn demand_file(report: &Report) -> String {
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
    let mut out = format!(
        "# demand of {} to {} from sacct (yolo-sched advise)\ngres,time_limit_s,jobs,submit_s\n",
        report.since.format("%Y-%m-%dT%H:%M:%S"),
        report.until.format("%Y-%m-%dT%H:%M:%S")
    );
    for (kind, _) in demand.iter() {
        for r in demand.queue(kind) {
            out.push_str(&format!(
                "gpu:{kind}:{},{},1,{}\n",
                r.count, r.seconds, r.arrival_s
            ));
        }
    }
    out
}

/// The window's jobs as a trace for the replay on the real scheduler
/// (`bench/replay/`, its CSV format): each typed job of one instance at its
/// submission, running as long as it ran, needing what its type holds less
/// the planner's 10 % headroom (so the replay's planner asks the same type), a
/// whole GPU as `gpu_fraction` 1. Jobs the trace format cannot hold (several
/// instances, untyped, never started, a type no built-in model has) are left
/// out and counted in the returned number.
pub fn trace_file(report: &Report) -> (String, u64) {
    let mut out = format!(
        "# jobs of {} to {} from sacct (yolo-sched advise --trace-out)\nsubmit_s,duration_s,gpu_mem_gib,gpu_fraction,user\n",
        report.since.format("%Y-%m-%dT%H:%M:%S"),
        report.until.format("%Y-%m-%dT%H:%M:%S")
    );
    let partitions: Vec<String> = report.partition.iter().cloned().collect();
    let mut left_out = 0;
    for job in &report.history.jobs {
        if !job.in_partitions(&partitions) {
            continue;
        }
        let history::GpuAsk::Typed { kind, count: 1 } = &job.ask else {
            left_out += 1;
            continue;
        };
        let (Some(_), Some(memory_mib)) = (job.start, simulate::memory_of(kind)) else {
            left_out += 1;
            continue;
        };
        let submit_s = (job.submit - report.since).num_seconds().max(0);
        let duration_s = job.elapsed_s.max(1);
        let whole = !kind.contains("g.");
        let (mem, fraction) = if whole {
            (String::new(), "1".to_string())
        } else {
            // Hundredths of a GiB, rounded down, under the type's usable memory / 1.1.
            let gib = (memory_mib as f64 / 1024.0 / 1.1 * 100.0).floor() / 100.0;
            (format!("{gib:.2}"), String::new())
        };
        let user: String = job
            .user
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '@' | '-'))
            .take(64)
            .collect();
        out.push_str(&format!(
            "{submit_s},{duration_s},{mem},{fraction},{}\n",
            if user.is_empty() { "unknown" } else { &user }
        ));
    }
    (out, left_out)
}
