//! node-setup's Slurm calls: job demand for `auto`, drain, wait for the node's
//! jobs, resume, and the reason a previous run left. Parsing is pure and tested.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use std::collections::BTreeMap;

use crate::mig::demand::MAX_JOBS;
use crate::mig::Demand;
use crate::slurm::cluster::Cluster;
use crate::slurm::gres::parse_list;
use crate::slurm::Slurm;

/// Every drain reason node-setup writes starts with this.
pub const REASON_PREFIX: &str = "yolo-sched node-setup";

/// The queue as `auto` reads it: one `squeue` line per job (arrays expanded),
/// highest priority first.
pub const QUEUE_FORMAT: &str = "State:|,NodeList:|,tres-per-node:|,TimeLimit:|,TimeLeft:|";

/// A job without a usable time limit (`UNLIMITED`) counts as this long.
pub const UNLIMITED_S: u64 = 86_400;

/// One job of the queue: what it asks per node and for how long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedJob {
    pub running: bool,
    /// Nodes of a running job (hostlist expanded).
    pub nodes: Vec<String>,
    /// Typed `gpu` requests per node: (type, count).
    pub gpus: Vec<(String, u32)>,
    pub limit_s: u64,
    /// Seconds left of a running job's time limit.
    pub left_s: u64,
}

/// Parse `squeue -h -O QUEUE_FORMAT` output. Jobs without a typed `gpu`
/// request are left out; an untyped `gpu:N` fits any type and so leaves the
/// choice of layout alone.
pub fn parse_queue(out: &str) -> Vec<QueuedJob> {
    let mut jobs = Vec::new();
    for line in out.lines().filter(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split('|').map(str::trim).collect();
        if f.len() < 5 {
            continue;
        }
        let gpus: Vec<(String, u32)> = parse_list(f[2])
            .into_iter()
            .filter(|i| i.name == "gpu")
            .filter_map(|i| {
                let kind = i.kind?;
                let count = u32::try_from(i.count).ok()?;
                Some((kind, count))
            })
            .collect();
        if gpus.is_empty() {
            continue;
        }
        let time = |t: &str| crate::plan::policy::parse_slurm_time(t);
        let running = f[0] == "RUNNING";
        jobs.push(QueuedJob {
            running,
            nodes: if running {
                crate::gres::hostlist::expand(f[1]).unwrap_or_default()
            } else {
                Vec::new()
            },
            gpus,
            limit_s: time(f[3]).filter(|&s| s > 0).unwrap_or(UNLIMITED_S),
            left_s: time(f[4]).unwrap_or(UNLIMITED_S),
        });
        if jobs.len() as u64 >= MAX_JOBS {
            break;
        }
    }
    jobs
}

/// The demand `auto` plans `node` for: the pending jobs of `queue` (or
/// `pending`, from a demand file, instead), and every typed GPU instance of the
/// other usable nodes of `cluster`, free when its running job's time is up.
/// This node's own running jobs are left out: it is drained before it changes.
pub fn demand_for(
    node: &str,
    queue: &[QueuedJob],
    pending: Option<Demand>,
    cluster: Option<&Cluster>,
) -> Demand {
    let from_file = pending.is_some();
    let mut demand = pending.unwrap_or_default();
    if !from_file {
        for job in queue.iter().filter(|j| !j.running) {
            for (kind, count) in &job.gpus {
                demand.add(kind, *count, job.limit_s);
            }
        }
    }
    let Some(cluster) = cluster else {
        return demand;
    };
    // Only nodes that share a partition with this one serve the same jobs (a
    // node Slurm does not know yet shares with every node).
    let mine: Option<&[String]> = cluster
        .nodes
        .iter()
        .find(|n| n.name == node)
        .map(|n| n.partitions.as_slice());
    let shares = |other: &crate::slurm::node::Node| {
        mine.is_none_or(|parts| other.partitions.iter().any(|p| parts.contains(p)))
    };
    for other in cluster
        .nodes
        .iter()
        .filter(|n| n.name != node && n.is_available() && shares(n))
    {
        // Instances held by running jobs, free when their time is up.
        let mut busy: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
        for job in queue
            .iter()
            .filter(|j| j.running && j.nodes.contains(&other.name))
        {
            for (kind, count) in &job.gpus {
                busy.entry(kind)
                    .or_default()
                    .extend(std::iter::repeat_n(job.left_s, *count as usize));
            }
        }
        for item in other.gres.iter().filter(|i| i.name == "gpu") {
            let Some(kind) = item.kind.as_deref() else {
                continue;
            };
            let mut held = busy.remove(kind).unwrap_or_default();
            let total = usize::try_from(item.count).unwrap_or(usize::MAX).min(4096);
            held.truncate(total);
            for _ in held.len()..total {
                demand.offer_elsewhere(kind, 0);
            }
            for left in held {
                demand.offer_elsewhere(kind, left);
            }
        }
    }
    demand
}

/// Read the queue (one `squeue` call) and, unless `no_others`, the other
/// nodes (one `scontrol` call); `pending` replaces the queue's pending jobs.
pub fn demand(slurm: &Slurm, node: &str, pending: Option<Demand>) -> Result<Demand> {
    let out = crate::slurm::control::queue_for_demand(slurm, QUEUE_FORMAT)?;
    let queue = parse_queue(&out);
    let cluster = crate::slurm::cluster::fetch(slurm)?;
    Ok(demand_for(node, &queue, pending, Some(&cluster)))
}

// The node's Slurm commands live in `slurm::control`; node-setup names them here.
pub use crate::slurm::control::{
    drain_node as drain, drain_node as set_reason, jobs_on,
    node_state_and_reason as state_and_reason, resume_node as resume,
};

/// Poll until no job runs on `node`, backing off from 1 s to 10 s. On timeout
/// the error lists the jobs still there.
pub fn wait_for_jobs(
    printer: &crate::printer::Printer,
    slurm: &Slurm,
    node: &str,
    limit: Duration,
) -> Result<()> {
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
        printer.note(format!(
            "node-setup:   waiting for {} job(s) on {node}: {}",
            jobs.len(),
            jobs.join(", ")
        ));
        let left = limit.saturating_sub(start.elapsed());
        std::thread::sleep(pause.min(left).max(Duration::from_millis(100)));
        pause = (pause * 2).min(Duration::from_secs(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_lines_keep_typed_gpu_requests_with_their_times() {
        let out = "PENDING|(null)|gres:gpu:1g.5gb:1|1:00:00|1:00:00|\n\
                   PENDING|(null)|N/A|10:00|10:00|\n\
                   PENDING|(null)|gres:gpu:3g.20gb:2,gres:shard:2|UNLIMITED|UNLIMITED|\n\
                   PENDING|(null)|gres:gpu:2|1:00|1:00|\n\
                   RUNNING|node[2-3]|gres:gpu:a100:1|2:00:00|30:00|\n";
        let q = parse_queue(out);
        assert_eq!(q.len(), 3, "{q:?}");
        assert_eq!(q[0].gpus, [("1g.5gb".to_string(), 1)]);
        assert_eq!(q[0].limit_s, 3600);
        assert_eq!(q[1].gpus, [("3g.20gb".to_string(), 2)]);
        assert_eq!(q[1].limit_s, UNLIMITED_S);
        assert!(q[2].running);
        assert_eq!(q[2].nodes, ["node2", "node3"]);
        assert_eq!(q[2].left_s, 1800);
    }

    #[test]
    fn demand_counts_pending_here_and_offers_of_other_nodes() {
        use crate::slurm::cluster::Cluster;
        let out = "PENDING|(null)|gres:gpu:1g.5gb:1|1:00:00|1:00:00|\n\
                   PENDING|(null)|gres:gpu:1g.5gb:1|1:00:00|1:00:00|\n\
                   RUNNING|node2|gres:gpu:1g.5gb:1|2:00:00|30:00|\n\
                   RUNNING|node1|gres:gpu:1g.5gb:1|2:00:00|30:00|\n\
                   RUNNING|down1|gres:gpu:1g.5gb:1|2:00:00|30:00|\n";
        let q = parse_queue(out);
        let mut cluster =
            Cluster::uniform("node", 3, 16, 64000, "gpu:1g.5gb:4,gpu:a100:1", &["gpu"]);
        cluster.nodes[2].name = "down1".into();
        cluster.nodes[2].state = "DOWN".into();
        let d = demand_for("node1", &q, None, Some(&cluster));
        assert_eq!(d.jobs("1g.5gb"), 2);
        // node2: four 1g.5gb (one busy for 30 minutes) and an a100; node1 is the
        // node being planned and down1 is down.
        let mut offered = d.elsewhere("1g.5gb").to_vec();
        offered.sort();
        assert_eq!(offered, [0, 0, 0, 1800]);
        assert_eq!(d.elsewhere("a100"), [0]);
        // A demand file replaces the pending jobs, not the offers.
        let mut file = Demand::new();
        file.add("3g.20gb", 1, 600);
        let d = demand_for("node1", &q, Some(file), Some(&cluster));
        assert_eq!(d.jobs("1g.5gb"), 0);
        assert_eq!(d.jobs("3g.20gb"), 1);
        assert_eq!(d.elsewhere("1g.5gb").len(), 4);
    }
}
