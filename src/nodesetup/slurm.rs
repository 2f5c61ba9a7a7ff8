//! node-setup's Slurm calls: job demand for `auto`, drain, wait for the node's
//! jobs, resume, and the reason a previous run left. Parsing is pure and tested.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use crate::mig::Demand;
use crate::slurm::gres::parse_list;
use crate::slurm::Slurm;

/// Every drain reason node-setup writes starts with this.
pub const REASON_PREFIX: &str = "yolo-sched node-setup";

/// MIG demand from `squeue -O tres-per-node` lines: one job per line counts
/// once for each typed `gpu` item it asks for.
pub fn parse_demand(squeue_out: &str) -> Demand {
    let mut demand = Demand::new();
    for line in squeue_out.lines() {
        for item in parse_list(line.trim()) {
            if item.name == "gpu" {
                if let Some(kind) = &item.kind {
                    demand.add(kind, 1);
                }
            }
        }
    }
    demand
}

/// The GRES types requested by pending and running jobs: one `squeue` call.
pub fn demand(slurm: &Slurm) -> Result<Demand> {
    let out = slurm.stdout("squeue", &["-h", "-a", "-t", "PD,R", "-O", "tres-per-node"])?;
    Ok(parse_demand(&out))
}

/// Drain `node` with `reason`.
pub fn drain(slurm: &Slurm, node: &str, reason: &str) -> Result<()> {
    let name = format!("NodeName={node}");
    let reason = format!("Reason={reason}");
    slurm.run_retrying("scontrol", &["update", &name, "State=DRAIN", &reason])?;
    Ok(())
}

/// Change the reason of a drained node (after a failure part-way).
pub fn set_reason(slurm: &Slurm, node: &str, reason: &str) -> Result<()> {
    drain(slurm, node, reason)
}

/// Resume `node`.
pub fn resume(slurm: &Slurm, node: &str) -> Result<()> {
    let name = format!("NodeName={node}");
    slurm.run_retrying("scontrol", &["update", &name, "State=RESUME"])?;
    Ok(())
}

/// Job ids running or completing on `node`.
pub fn jobs_on(slurm: &Slurm, node: &str) -> Result<Vec<String>> {
    let out = slurm.stdout("squeue", &["-h", "-w", node, "-t", "R,CG", "-o", "%A"])?;
    Ok(out
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect())
}

/// Poll until no job runs on `node`, backing off from 1 s to 10 s. On timeout
/// the error lists the jobs still there.
pub fn wait_for_jobs(slurm: &Slurm, node: &str, limit: Duration) -> Result<()> {
    let start = Instant::now();
    let mut pause = Duration::from_millis(500);
    loop {
        let jobs = jobs_on(slurm, node)?;
        if jobs.is_empty() {
            return Ok(());
        }
        if start.elapsed() >= limit {
            bail!(
                "jobs {} still run on {node} after {} s (--drain-timeout)",
                jobs.join(", "),
                limit.as_secs()
            );
        }
        eprintln!(
            "node-setup:   waiting for {} job(s) on {node}: {}",
            jobs.len(),
            jobs.join(", ")
        );
        let left = limit.saturating_sub(start.elapsed());
        std::thread::sleep(pause.min(left).max(Duration::from_millis(100)));
        pause = (pause * 2).min(Duration::from_secs(10));
    }
}

/// The node's state and reason (`sinfo -h -N -n <node> -o '%T|%E'`), e.g.
/// `("drained", "yolo-sched node-setup: …")`; `None` when Slurm does not know it.
pub fn state_and_reason(slurm: &Slurm, node: &str) -> Result<Option<(String, String)>> {
    let out = slurm.stdout("sinfo", &["-h", "-N", "-n", node, "-o", "%T|%E"])?;
    Ok(parse_state_line(&out))
}

fn parse_state_line(out: &str) -> Option<(String, String)> {
    let line = out.lines().find(|l| !l.trim().is_empty())?;
    let (state, reason) = line.split_once('|')?;
    Some((state.trim().to_string(), reason.trim().to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demand_counts_typed_gpu_requests_per_job() {
        let out = "gres:gpu:1g.5gb:1\nN/A\ngres:gpu:1g.5gb:2\ngres:gpu:3g.20gb:1,gres:shard:2\ngres:gpu:2\n";
        let d = parse_demand(out);
        assert_eq!(d.jobs("1g.5gb"), 2);
        assert_eq!(d.jobs("3g.20gb"), 1);
        assert_eq!(d.total(), 3);
    }

    #[test]
    fn state_line_splits_state_and_reason() {
        assert_eq!(
            parse_state_line("drained|yolo-sched node-setup: failed\n"),
            Some(("drained".into(), "yolo-sched node-setup: failed".into()))
        );
        assert_eq!(parse_state_line(""), None);
    }
}
