//! `yolo-sched advise`: the layout advisor (`crate::advise`).

use std::path::PathBuf;

use anyhow::{Context as _, Result};
use chrono::Local;
use clap::Args;

use super::Context;
use crate::advise::{self, Report};
use crate::error::invalid;
use crate::report::window;

/// Output formats of `advise`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AdviseFormat {
    Table,
    Json,
    /// One self-contained page: the waits of each set-up as bars, the plan as a table.
    Html,
    /// Gauges for node_exporter's textfile collector: each node advised or
    /// not, the mean waits, where the needs came from, and per user and
    /// account the jobs that asked for more than they used.
    Prometheus,
}

#[derive(Debug, Args)]
#[command(after_help = "\
Reads the window's jobs from Slurm's accounting (one sacct call), turns the ones that asked
for a typed GPU (gres/gpu:1g.5gb=1, gres/gpu:a100=1) into demand arriving at their
submission and running as long as they really ran, and simulates it on the GPU nodes as they
are cut now, with every MIG GPU whole, all-1g and balanced, and with `auto` rolled out node by
node. It prints, per set-up, the jobs that could not have run, the mean and p95 wait, peak
and mean concurrent jobs and the GPU-hours used of those offered; then the plan: for each
node the node-setup command, in the order to apply them, and what each step is predicted to
give. Read only: nothing is changed. A job that asked for one type would, on another layout,
ask for the smallest type there that holds as much (what gpu = \"auto\" does).
Untyped requests (gpu:1) fit any instance and are left out; so are shard requests.

Each node's GPU model comes from its GRES types where they name one (1g.5gb exists only on
the A100-40GB); a node offering only a whole-GPU type (a100: 40 or 80 GB) needs --gpu-model.

Examples:
  yolo-sched advise
  yolo-sched advise --since 14d --partition gpu --json | jq '.advice.setups[] | {name, outcome}'
  yolo-sched advise --demand-out demand.csv     # then, node by node: node-setup --apply --layout auto --demand demand.csv
  yolo-sched advise --node gpu01,gpu02 --gpu-model a100-80gb
  yolo-sched advise --sacct-file week.txt       # sacct -X -P -n -a -o <the fields below> saved elsewhere
  yolo-sched advise --format html -o advice.html
  yolo-sched advise --since 1d --trace-out day.csv && sudo bash bench/replay/run.sh day.csv   # replay it for real
  yolo-sched advise --check || mail -s 'GPU layout advice' admins < /dev/null   # cron: exit 1 when a re-cut is advised

Exit status: 0 with the advice; with --check, 1 when a re-cut is advised and 0 when nothing
would change; 2 for invalid input (a --sacct-file line that is not sacct's, a window over 366
days, a --demand-out of more than 200,000 jobs); 1 when sacct or scontrol fail (or sacct
answers lines that are not what was asked).

Each job is planned from what it needed where that is known: the GPU memory yolo-sched's job
agent measured (carried in the job's comment; slurm.conf needs AccountingStoreFlags=job_comment)
plus 10 % headroom, else Slurm's TRESUsageInMax gres/gpumem, else the type it asked for. A job
that asked a whole GPU and used 6 GiB is simulated, and written by --demand-out, as the smallest
type that holds 6.6 GiB. Per user and account, the jobs that asked for more than they used are
listed, with what would have fitted and the wait it would have saved.

--sacct-file columns: JobIDRaw,Partition,Account,User,State,Submit,Start,End,ElapsedRaw,
TimelimitRaw,ReqTRES,AllocTRES,TRESUsageInMax,Comment (or the first twelve: every job as asked)")]
pub struct AdviseArgs {
    /// The window's start: a length back from now (90m, 24h, 7d) or a local date/time.
    #[arg(long, value_name = "WHEN", default_value = "7d")]
    pub since: String,

    /// The window's end (default: now), in the same forms.
    #[arg(long, value_name = "WHEN")]
    pub until: Option<String>,

    /// Only this partition's jobs and GPU nodes.
    #[arg(long, value_name = "NAME")]
    pub partition: Option<String>,

    /// Only this Slurm account's jobs.
    #[arg(long, value_name = "NAME")]
    pub account: Option<String>,

    /// Only these nodes (comma-separated or repeated).
    #[arg(long = "node", value_name = "NODE", value_delimiter = ',')]
    pub nodes: Vec<String>,

    /// The GPU model of nodes whose GRES types do not name it: a100-40gb, a100-80gb, h100-80gb, h200.
    #[arg(long, value_name = "MODEL")]
    pub gpu_model: Option<String>,

    /// Read the jobs from a saved sacct output instead of asking sacct.
    #[arg(long, value_name = "FILE")]
    pub sacct_file: Option<PathBuf>,

    /// Write the window's demand for `node-setup --layout auto --demand FILE`.
    #[arg(long, value_name = "FILE")]
    pub demand_out: Option<PathBuf>,

    /// Write the window's jobs as a trace for the replay on the real scheduler (bench/replay).
    #[arg(long, value_name = "FILE")]
    pub trace_out: Option<PathBuf>,

    /// Output format (`--json` is the same as `--format json`).
    #[arg(long, value_enum, default_value = "table", conflicts_with = "json")]
    pub format: AdviseFormat,

    #[command(flatten)]
    pub json: super::args::JsonArg,

    /// Write to FILE (replaced atomically) instead of stdout.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Exit 1 when a re-cut is advised, 0 when nothing would change (for cron).
    #[arg(long)]
    pub check: bool,
}

pub fn run(ctx: &mut Context, args: &AdviseArgs) -> Result<i32> {
    let now = Local::now().naive_local();
    let since = window::since(&args.since, now).map_err(|e| invalid(format!("--since: {e}")))?;
    let until = match &args.until {
        Some(u) => window::since(u, now).map_err(|e| invalid(format!("--until: {e}")))?,
        None => now,
    };
    if until <= since {
        return Err(invalid(format!(
            "the window is empty: --until ({}) is not after --since ({})",
            until.format("%Y-%m-%d %H:%M"),
            since.format("%Y-%m-%d %H:%M")
        )));
    }
    let partition = super::args::check_name("--partition", &args.partition)?;
    let account = super::args::check_name("--account", &args.account)?;
    for n in &args.nodes {
        super::args::check_name("--node", &Some(n.clone()))?;
    }
    let gpu_model = match &args.gpu_model {
        Some(m) => Some(crate::mig::builtin::lookup(m).ok_or_else(|| {
            invalid(format!(
                "--gpu-model {}: not a model yolo-sched knows (expected a100-40gb, a100-80gb, \
                 h100-80gb or h200)",
                crate::text::echo(m)
            ))
        })?),
        None => None,
    };
    if let Some(out) = &args.demand_out {
        crate::fsutil::check_target(out, "--demand-out").map_err(invalid)?;
    }
    if let Some(out) = &args.output {
        crate::fsutil::check_target(out, "--output").map_err(invalid)?;
    }
    if let Some(out) = &args.trace_out {
        crate::fsutil::check_target(out, "--trace-out").map_err(invalid)?;
    }
    let format = if args.json.json {
        AdviseFormat::Json
    } else {
        args.format
    };
    let opts = advise::Options {
        since,
        until,
        partition,
        account,
        nodes: args.nodes.clone(),
        gpu_model,
        sacct_file: args.sacct_file.clone(),
        trace: args.trace_out.is_some(),
    };
    let report = advise::run(&ctx.slurm, &opts)?;
    if let Some(out) = &args.demand_out {
        let demand = advise::demand_file(&report).map_err(invalid)?;
        crate::fsutil::write_atomic(out, demand.as_bytes(), 0o644)?;
    }
    if let Some(out) = &args.trace_out {
        let (trace, left_out) = advise::trace_file(&report);
        crate::fsutil::write_atomic(out, trace.as_bytes(), 0o644)?;
        if left_out > 0 {
            ctx.printer.note(format!(
                "--trace-out: {left_out} job(s) the replay's trace cannot hold were left out \
                 (several instances, untyped, never started, or a type no built-in model has)"
            ));
        }
    }
    for w in &report.warnings {
        ctx.printer.warn(w);
    }
    let status = if args.check && report.advice.changes {
        crate::error::exit::FAILURE
    } else {
        crate::error::exit::OK
    };
    let text = match format {
        AdviseFormat::Json => {
            let mut t = serde_json::to_string_pretty(&report)?;
            t.push('\n');
            t
        }
        AdviseFormat::Html => crate::report::render::html::advice_page(&report),
        AdviseFormat::Prometheus => crate::report::render::prometheus::advice(
            &crate::report::model::LayoutAdvice::from_advice(
                &report,
                (report.until - report.since).num_seconds(),
            ),
        ),
        AdviseFormat::Table => {
            let mut t = text_lines(&ctx.printer, &report, args.demand_out.as_deref()).join("\n");
            t.push('\n');
            t
        }
    };
    match &args.output {
        Some(path) => crate::fsutil::write_atomic_keep_mode(path, text.as_bytes(), 0o644)
            .with_context(|| format!("writing the advice to {}", path.display()))?,
        None => ctx.printer.text(&text)?,
    }
    Ok(status)
}

fn hours(s: f64) -> String {
    format!("{:.2} h", s / 3600.0)
}

/// The advice for people, line by line (tables styled for `printer`'s stdout).
fn text_lines(
    printer: &crate::printer::Printer,
    r: &Report,
    demand_out: Option<&std::path::Path>,
) -> Vec<String> {
    let mut out = vec![window_line(r)];
    let nodes = nodes_table(printer, r);
    out.extend(left_out_lines(r));
    out.push(crate::report::render::tables::need_note(&r.needs));
    out.push(nodes);
    out.push("".to_string());
    out.push(setups_table(printer, r));
    out.push("".to_string());
    out.extend(rightsizing_lines(printer, r));
    out.extend(advice_lines(r, demand_out));
    out
}

/// What the window held: its GPU jobs, and those still running, pending or left out.
fn window_line(r: &Report) -> String {
    let c = &r.counted;
    format!(
        "{} GPU job(s) from {} to {}{} ({} still running, {} still pending; left out: {} \
     cancelled before they started, {} untyped, {} shard)",
        c.jobs,
        r.since.format("%Y-%m-%d %H:%M"),
        r.until.format("%Y-%m-%d %H:%M"),
        r.partition
            .as_deref()
            .map(|p| format!(" in partition {p}"))
            .unwrap_or_default(),
        c.running,
        c.pending,
        c.cancelled_pending,
        c.untyped,
        c.shards
    )
    .to_string()
}

/// The nodes advised on: each one's model, where the model came from, its GPUs now.
fn nodes_table(printer: &crate::printer::Printer, r: &Report) -> String {
    let mut nodes = printer.table(&["node", "model", "from", "GPUs now"]);
    for n in &r.nodes {
        let now: Vec<String> = n
            .layout_words()
            .into_iter()
            .chain(n.fixed.iter().map(|(k, c)| format!("{k}*{c} (no MIG)")))
            .collect();
        nodes.add_row(vec![
            n.name.clone(),
            n.model.clone().unwrap_or_else(|| "-".into()),
            n.model_from.clone(),
            now.join("; "),
        ]);
    }
    nodes.to_string()
}

/// The jobs not read, clamped or left out, when there are any.
fn left_out_lines(r: &Report) -> Vec<String> {
    let mut out = Vec::new();
    let c = &r.counted;
    if r.skipped.past_limit > 0 {
        out.push(format!(
            "{} line(s) of sacct's output after the first {} were not read; their jobs are left out",
            r.skipped.past_limit,
            advise::history::MAX_LINES
        ));
    }
    if c.clamped + c.bad_type + c.after_window > 0 {
        out.push(format!(
            "past what node-setup plans for: {} job(s) counted as 366 days or {} instances; left out: {} of a type no node can offer, {} submitted after the window",
            c.clamped,
            crate::mig::demand::MAX_COUNT,
            c.bad_type,
            c.after_window
        ));
    }
    out
}

/// Each set-up simulated on the window's demand: the jobs run, the waits,
/// the GPUs held and the memory needed.
fn setups_table(printer: &crate::printer::Printer, r: &Report) -> String {
    let mut table = printer.table(&[
        "set-up",
        "jobs run",
        "never run",
        "mean wait",
        "p95 wait",
        "peak jobs",
        "mean jobs",
        "GPU-h held / offered",
        "memory needed",
    ]);
    for s in &r.advice.setups {
        let o = &s.outcome;
        table.add_row(vec![
            s.name.clone(),
            (o.jobs - o.never_run).to_string(),
            o.never_run.to_string(),
            hours(o.mean_wait_s),
            hours(o.p95_wait_s as f64),
            o.peak_concurrent.to_string(),
            format!("{:.1}", o.mean_concurrent),
            format!("{:.1} / {:.1}", o.gpu_hours_used, o.gpu_hours_offered),
            format!("{:.0} %", o.memory_needed_share * 100.0),
        ]);
    }
    table.to_string()
}

/// The jobs that asked for more than they used, per user and account, and
/// the wait asking what fits would have saved; nothing when there are none.
fn rightsizing_lines(printer: &crate::printer::Printer, r: &Report) -> Vec<String> {
    let mut out = Vec::new();
    if !r.rightsizing.is_empty() {
        out.push(
            "jobs that asked for more than they used (measured GPU memory + 10 %), with the wait \
             they would have saved asking what fits, on the advised layout:"
                .to_string(),
        );
        let mut t = printer.table(&[
            "by",
            "name",
            "jobs",
            "GPU-h asked → fit",
            "asked → fits",
            "waited → predicted",
            "saved",
        ]);
        for o in &r.rightsizing {
            t.add_row(vec![
                o.by.to_string(),
                crate::text::shown(&o.name, 40),
                format!("{} of {}", o.jobs, o.measured_jobs),
                format!("{:.1} → {:.1}", o.gpu_hours_asked, o.gpu_hours_fit),
                o.moves
                    .iter()
                    .map(|(m, n)| format!("{m} ×{n}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                format!("{:.2} h → {:.2} h", o.waited_h, o.predicted_wait_h),
                format!("{:.2} h", o.wait_saved_h),
            ]);
        }
        out.push(t.to_string());
        out.push("".to_string());
    }
    out
}

/// The advice: nothing to change, or `auto` node by node with the command
/// for each and what it is predicted to bring.
fn advice_lines(r: &Report, demand_out: Option<&std::path::Path>) -> Vec<String> {
    let mut out = Vec::new();
    if !r.advice.changes {
        out.push("advice: no change of layout would run more of these jobs or shorten their mean wait by a minute or more; nothing to change".to_string());
        return out;
    }
    let demand = demand_out.map_or_else(
        || "FILE".to_string(),
        |p| crate::shell::quote(&p.display().to_string()),
    );
    out.push(
        format!(
            "advice: apply `auto` node by node, in this order (each drains its node; {}):",
            if demand_out.is_some() {
                "the demand file was written"
            } else {
                "write the demand file with --demand-out FILE"
            }
        )
        .to_string(),
    );
    for (i, s) in r.advice.steps.iter().filter(|s| s.changes).enumerate() {
        out.push(
            format!(
                "  {}. on {}: yolo-sched node-setup --apply --layout auto --demand {demand}",
                i + 1,
                s.node
            )
            .to_string(),
        );
        out.push(
            format!(
                "     GPUs become {}; then predicted: mean wait {}, p95 {}, {} never run",
                s.gpus.join("; "),
                hours(s.after.mean_wait_s),
                hours(s.after.p95_wait_s as f64),
                s.after.never_run
            )
            .to_string(),
        );
    }
    out
}
