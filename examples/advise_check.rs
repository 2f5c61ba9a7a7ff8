//! The advisor's simulation against the real scheduler: for each set-up the
//! trace replay measured on the local Slurm cluster (`bench/replay/results/`),
//! the same jobs (each with the GRES it asked there, its trace arrival and
//! duration) are simulated on that set-up's instances by `advise::simulate`,
//! and the predicted mean wait, p95 wait and peak concurrency are printed
//! beside what the replay measured, as a Markdown table.
//!
//! cargo run --example advise_check -- bench/replay/results [bench/replay/yolo-trace.csv]

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, Result};
use serde_json::Value;
use yolo_sched::advise::simulate::simulate;
use yolo_sched::mig::{Demand, ProfileCounts};

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().unwrap_or_else(|| "bench/replay/results".into()));
    let trace = PathBuf::from(
        args.next()
            .unwrap_or_else(|| "bench/replay/yolo-trace.csv".into()),
    );
    let results: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("results.json")).context("results.json")?,
    )?;
    // The trace's jobs by line number: (submit_s, duration_s).
    let text = std::fs::read_to_string(&trace).with_context(|| trace.display().to_string())?;
    let mut header: Option<Vec<&str>> = None;
    let mut jobs: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let l = line.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        let cols: Vec<&str> = l.split(',').map(str::trim).collect();
        match &header {
            None => header = Some(cols),
            Some(h) => {
                let at = |name: &str| -> Option<f64> {
                    let k = h.iter().position(|c| *c == name)?;
                    cols.get(k)?.parse().ok()
                };
                let (Some(s), Some(d)) = (at("submit_s"), at("duration_s")) else {
                    continue;
                };
                jobs.insert(i as u64 + 1, (s as u64, d as u64));
            }
        }
    }
    println!("| set-up | jobs | mean wait (h) measured / predicted | p95 wait (h) measured / predicted | peak concurrent measured / predicted |");
    println!("|---|---|---|---|---|");
    for r in results["results"].as_array().context("results")? {
        let setup = r["setup"].as_str().unwrap_or("?");
        let recs: Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join(format!("{setup}.jobs.json")))
                .with_context(|| format!("{setup}.jobs.json"))?,
        )?;
        let mut demand = Demand::new();
        for rec in recs["records"].as_array().context("records")? {
            let line = rec["line"].as_u64().context("line")?;
            let (submit_s, duration_s) = jobs[&line];
            let gres = rec["gres"].as_str().context("gres")?;
            let mut parts = gres.split(':').skip(1);
            let kind = parts.next().context("type")?;
            let count: u32 = parts.next().and_then(|c| c.parse().ok()).unwrap_or(1);
            demand.add_arriving(kind, count, duration_s, submit_s);
        }
        let mut offered = ProfileCounts::new();
        for gres in r["gres_per_node"]
            .as_object()
            .context("gres_per_node")?
            .values()
        {
            for item in gres.as_str().unwrap_or("").split(',') {
                let mut p = item.split(':').skip(1);
                if let (Some(k), Some(n)) = (p.next(), p.next().and_then(|n| n.parse().ok())) {
                    offered.add(k, n);
                }
            }
        }
        let o = simulate(&demand, &offered);
        let h = |s: f64| s / 3600.0;
        println!(
            "| {setup} | {} | {:.2} / {:.2} | {:.2} / {:.2} | {} / {} |",
            o.jobs - o.never_run,
            r["mean_wait_h"].as_f64().unwrap_or(f64::NAN),
            h(o.mean_wait_s),
            r["p95_wait_h"].as_f64().unwrap_or(f64::NAN),
            h(o.p95_wait_s as f64),
            r["peak_concurrent"],
            o.peak_concurrent
        );
    }
    Ok(())
}
