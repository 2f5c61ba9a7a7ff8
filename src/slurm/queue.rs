//! The queue as node-setup's `auto` layout reads it: what each pending and
//! running job asks per node and for how long. One `squeue`; parsing is pure.

use anyhow::Result;

use super::gres::parse_list;
use super::Slurm;

/// One `squeue` line per job (arrays expanded), highest priority first.
pub const FORMAT: &str = "State:|,NodeList:|,tres-per-node:|,TimeLimit:|,TimeLeft:|";

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

/// Parse [`fetch`]'s output, at most `max_jobs` of it. Jobs without a typed
/// `gpu` request are left out; an untyped `gpu:N` fits any type and so leaves
/// the choice of layout alone.
pub fn parse(out: &str, max_jobs: u64) -> Vec<QueuedJob> {
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
        let time = |t: &str| super::time::parse_duration(t).ok();
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
        if jobs.len() as u64 >= max_jobs {
            break;
        }
    }
    jobs
}

/// The pending and running jobs, arrays expanded, highest priority first, in
/// [`FORMAT`].
pub fn fetch(slurm: &Slurm) -> Result<String> {
    slurm.stdout(
        "squeue",
        &["-h", "-a", "-r", "-t", "PD,R", "--sort=-p,i", "-O", FORMAT],
    )
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
        let q = parse(out, 1000);
        assert_eq!(q.len(), 3, "{q:?}");
        assert_eq!(q[0].gpus, [("1g.5gb".to_string(), 1)]);
        assert_eq!(q[0].limit_s, 3600);
        assert_eq!(q[1].gpus, [("3g.20gb".to_string(), 2)]);
        assert_eq!(q[1].limit_s, UNLIMITED_S);
        assert!(q[2].running);
        assert_eq!(q[2].nodes, ["node2", "node3"]);
        assert_eq!(q[2].left_s, 1800);
    }
}
