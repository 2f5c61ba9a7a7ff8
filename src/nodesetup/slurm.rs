//! node-setup's Slurm calls: job demand for `auto`, drain, wait for the node's
//! jobs, resume, and the reason a previous run left. Parsing is pure and tested.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use std::collections::BTreeMap;

use crate::mig::demand::MAX_JOBS;
use crate::mig::Demand;
use crate::slurm::cluster::Cluster;
use crate::slurm::squeue::queue::QueuedJob;
use crate::slurm::Slurm;

/// Every drain reason node-setup writes starts with this.
pub const REASON_PREFIX: &str = "yolo-sched node-setup";

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
///
/// The two calls run at once: each mostly waits on slurmctld, and the
/// queue is parsed while `scontrol` answers.
pub fn demand(slurm: &Slurm, node: &str, pending: Option<Demand>) -> Result<Demand> {
    let (queue, cluster) = std::thread::scope(|scope| {
        let cluster = scope.spawn(|| crate::slurm::cluster::fetch(slurm));
        let queue = crate::slurm::squeue::queue::fetch(slurm)
            .map(|out| crate::slurm::squeue::queue::parse(&out, MAX_JOBS));
        // A panic there is a bug here: pass it on.
        let cluster = cluster
            .join()
            .unwrap_or_else(|e| std::panic::resume_unwind(e));
        (queue, cluster)
    });
    Ok(demand_for(node, &queue?, pending, Some(&cluster?)))
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
    fn demand_counts_pending_here_and_offers_of_other_nodes() {
        use crate::slurm::cluster::Cluster;
        let out = "PENDING|(null)|gres:gpu:1g.5gb:1|1:00:00|1:00:00|\n\
                   PENDING|(null)|gres:gpu:1g.5gb:1|1:00:00|1:00:00|\n\
                   RUNNING|node2|gres:gpu:1g.5gb:1|2:00:00|30:00|\n\
                   RUNNING|node1|gres:gpu:1g.5gb:1|2:00:00|30:00|\n\
                   RUNNING|down1|gres:gpu:1g.5gb:1|2:00:00|30:00|\n";
        // The queue's lines, `|` standing for squeue's separator.
        let out = out.replace('|', &crate::slurm::squeue::SEPARATOR.to_string());
        let q = crate::slurm::squeue::queue::parse(&out, MAX_JOBS);
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
