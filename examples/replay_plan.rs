//! What yolo-sched's planner asks of Slurm for each job of a replay trace
//! (bench/replay/README.md): the smallest slice the cluster offers that holds
//! the job's memory need (`plan::gpu::choose_auto`), and the slice's share of
//! the node's CPUs and memory (`plan::resources::shape`).
//!
//!   replay_plan plan TRACE PARTITION GPU_MODEL
//!       one line per job, tab-separated: trace line, then either
//!       `ok  GRES  CPUS  MEM_MIB  UNITS` (GPU compute units, 7 for a whole GPU)
//!       or `unrunnable  WHY`. The cluster is the live
//!       one (`scontrol`, as `submit` reads it).
//!   replay_plan demand TRACE GPU_MODEL WHOLE_TYPE
//!       `node-setup --demand` CSV: per job the smallest profile of GPU_MODEL
//!       (an NVML name such as `NVIDIA A100-SXM4-40GB`) that holds it, or the
//!       whole GPU (`gpu:WHOLE_TYPE:1`) when only the full-GPU profile does,
//!       with the job's duration as time limit; identical rows are counted.
//!   replay_plan runs-on OFFERED TYPE...
//!       for each TYPE (a job's type as `advise --demand-out` writes it), the
//!       type it runs on in a set-up offering OFFERED (`gpu:1g.5gb:14,gpu:a100:2`,
//!       the sum of the nodes' Gres) by the advisor's rule
//!       (`advise::simulate::runs_on`): `TYPE<TAB>RUNS_ON`, `-` when none holds it.
//!
//! The trace is expected to be valid (bench/replay/tracefile.py checks it first);
//! this program only reads the columns it needs and stops at the first bad one.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::process::ExitCode;

use yolo_sched::mig::builtin;
use yolo_sched::plan::estimate::{Estimate, HEADROOM};
use yolo_sched::plan::gpu::{choose_auto, Offer};
use yolo_sched::plan::resources::{shape, units_of, GpuAsk, Stage, Wants};
use yolo_sched::plan::Policy;
use yolo_sched::slurm::cluster;
use yolo_sched::slurm::Slurm;

/// Warn above 80 % of the slice (the seed's default); warnings are not printed.
const WARN_FRACTION: f64 = 0.8;

struct Job {
    line: usize,
    /// Seconds from the trace's start.
    submit_s: u64,
    duration_s: u64,
    /// What the slice must hold, GiB (headroom included for `gpu_mem_gib`).
    need_gib: f64,
}

fn read_trace(path: &str, whole_gib: f64) -> Result<Vec<Job>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    let mut header: Option<Vec<String>> = None;
    let mut jobs = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        let Some(cols) = &header else {
            header = Some(fields.iter().map(|s| s.to_string()).collect());
            continue;
        };
        let get = |name: &str| -> &str {
            cols.iter()
                .position(|c| c == name)
                .and_then(|k| fields.get(k).copied())
                .unwrap_or("")
        };
        let bad = |what: &str| format!("{path}:{}: bad {what}", i + 1);
        let duration_s: f64 = get("duration_s").parse().map_err(|_| bad("duration_s"))?;
        let submit_s: f64 = get("submit_s").parse().map_err(|_| bad("submit_s"))?;
        let need_gib = match (get("gpu_mem_gib"), get("gpu_fraction")) {
            (m, "") => m.parse::<f64>().map_err(|_| bad("gpu_mem_gib"))? * (1.0 + HEADROOM),
            ("", f) => f.parse::<f64>().map_err(|_| bad("gpu_fraction"))? * whole_gib,
            _ => return Err(bad("row: gpu_mem_gib and gpu_fraction both set")),
        };
        jobs.push(Job {
            line: i + 1,
            submit_s: submit_s.round().max(0.0) as u64,
            duration_s: duration_s.round() as u64,
            need_gib,
        });
    }
    Ok(jobs)
}

/// An estimate that needs exactly `need_gib` (the trace gives the memory, not the model).
fn estimate(need_gib: f64) -> Estimate {
    Estimate {
        model: "trace job".into(),
        scale: None,
        imgsz: 640,
        batch: 16,
        autobatch: false,
        gib: need_gib / (1.0 + HEADROOM),
        needed_gib: need_gib,
    }
}

fn geometry(model: &str) -> Result<yolo_sched::mig::GpuGeometry, String> {
    builtin::lookup(model).ok_or_else(|| format!("no built-in MIG geometry for `{model}`"))
}

/// Usable memory of the whole GPU: its full-GPU profile.
fn whole_gib(model: &str) -> Result<f64, String> {
    let g = geometry(model)?;
    let mib = g.profiles().iter().map(|p| p.memory_mib).max().unwrap_or(0);
    Ok(mib as f64 / 1024.0)
}

fn plan(trace: &str, partition: &str, model: &str) -> Result<String, String> {
    let mut out = String::new();
    let jobs = read_trace(trace, whole_gib(model)?)?;
    let cluster = cluster::fetch(&Slurm::from_env()).map_err(|e| format!("{e:#}"))?;
    let policy = Policy::default();
    let offer = Offer::from_cluster(&cluster, Some(partition), &policy);
    for job in &jobs {
        let choice = match choose_auto(&estimate(job.need_gib), &offer, None, WARN_FRACTION) {
            Ok(c) => c,
            Err(no) => {
                out += &format!("{}\tunrunnable\t{}\n", job.line, no.message);
                continue;
            }
        };
        let gres = choice.gres.unwrap_or_default();
        let Some(ask) = GpuAsk::parse(&gres) else {
            out += &format!("{}\tunrunnable\tunreadable GRES {gres}\n", job.line);
            continue;
        };
        let time_text = format!("{}s", job.duration_s);
        let stage = Stage {
            name: "train",
            table: "[resources]",
            partition: Some(partition),
            gpu: Some(&ask),
            wants: Wants::default(),
            time_secs: job.duration_s,
            time_text: &time_text,
        };
        match shape(&cluster, &stage) {
            Ok(s) => {
                out += &format!(
                    "{}\tok\t{gres}\t{}\t{}\t{}\n",
                    job.line,
                    s.cpus,
                    s.mem_mib,
                    units_of(ask.kind.as_deref()) * ask.count
                )
            }
            Err(u) => out += &format!("{}\tunrunnable\t{}\n", job.line, u.message),
        }
    }
    Ok(out)
}

fn demand(trace: &str, model: &str, whole: &str) -> Result<String, String> {
    let mut out = String::new();
    let geo = geometry(model)?;
    let full = geo.profiles().iter().map(|p| p.compute_slices).max();
    let mut offer = Offer::default();
    for p in geo.profiles() {
        // The full-GPU profile is the whole GPU: the demand asks for that by its type.
        if Some(p.compute_slices) != full && !p.name.contains('+') {
            offer.gpu_types.insert(p.name.clone(), 1);
        }
    }
    offer.gpu_types.insert(whole.to_string(), 1);
    offer
        .memory_overrides
        .insert(whole.to_string(), whole_gib(model)?);
    // The trace as a queue that arrives over time: each job pending from its
    // submit time (`submit_s`), so auto weighs the trace, not a pile of jobs at once.
    let mut rows: BTreeMap<(u64, String, u64), u64> = BTreeMap::new();
    let mut unfit = 0;
    for job in read_trace(trace, whole_gib(model)?)? {
        match choose_auto(&estimate(job.need_gib), &offer, None, WARN_FRACTION) {
            Ok(c) => {
                *rows
                    .entry((job.submit_s, c.gres.unwrap_or_default(), job.duration_s))
                    .or_insert(0) += 1
            }
            Err(_) => unfit += 1,
        }
    }
    out += &format!("# demand of {trace} on {model}; {unfit} job(s) fit no GPU and are left out\n");
    out += "gres,time_limit_s,jobs,submit_s\n";
    for ((submit, gres, t), n) in rows {
        out += &format!("{gres},{t},{n},{submit}\n");
    }
    Ok(out)
}

/// The type each of `types` runs on in a set-up offering `offered`, by the
/// advisor's own rule: what the replay of advise's plan must ask for.
fn runs_on(offered: &str, types: &[&str]) -> Result<String, String> {
    let mut counts = yolo_sched::mig::ProfileCounts::new();
    for item in offered.split(',').filter(|s| !s.is_empty()) {
        let mut p = item.split(':');
        let (Some("gpu"), Some(kind), Some(n), None) = (p.next(), p.next(), p.next(), p.next())
        else {
            return Err(format!(
                "OFFERED: expected gpu:TYPE:COUNT items, got `{item}`"
            ));
        };
        let n: u32 = n
            .parse()
            .map_err(|_| format!("OFFERED: bad count in `{item}`"))?;
        counts.add(kind, n);
    }
    let mut out = String::new();
    for t in types {
        let on = yolo_sched::advise::simulate::runs_on(t, &counts).unwrap_or("-");
        out += &format!("{t}\t{on}\n");
    }
    Ok(out)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = match argv.as_slice() {
        ["plan", trace, partition, model] => plan(trace, partition, model),
        ["demand", trace, model, whole] => demand(trace, model, whole),
        ["runs-on", offered, types @ ..] if !types.is_empty() => runs_on(offered, types),
        _ => Err(
            "usage: replay_plan plan TRACE PARTITION GPU_MODEL | demand TRACE GPU_MODEL WHOLE_TYPE | runs-on OFFERED TYPE..."
                .into(),
        ),
    };
    match result {
        Ok(text) => {
            // A closed pipe (`| head`) is not an error of this program.
            let _ = std::io::stdout().lock().write_all(text.as_bytes());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("replay_plan: {e}");
            ExitCode::from(2)
        }
    }
}
