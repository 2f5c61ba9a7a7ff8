//! The queue as node-setup's `auto` layout reads it: what each pending and
//! running job asks per node and for how long. One `squeue`; parsing is pure.

use std::collections::HashMap;

use anyhow::Result;

use super::fields::{format_arg, free_text_last, split, Field};
use super::read;
use crate::slurm::Slurm;

/// The fields `auto` plans by, in the order [`parse`] reads them, and no
/// more: the queue comes with arrays expanded (`-r`), often 10^4 lines read
/// within a whole-process budget of about 50 ms (issue 34), so each line
/// carries five short fields and no free text.
pub const FIELDS: [Field; 5] = [
    Field::State,
    Field::NodeList,
    Field::TresPerNode,
    Field::TimeLimit,
    Field::TimeLeft,
];

const _: () = assert!(free_text_last(&FIELDS));

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
/// the choice of layout alone. Lines that are not lines of [`FIELDS`] are
/// skipped.
pub fn parse(out: &str, max_jobs: u64) -> Vec<QueuedJob> {
    let mut jobs = Vec::new();
    // A queue repeats itself (array tasks, sweeps, a user's batch): each
    // distinct line is read once.
    let mut read_before: HashMap<&str, Option<QueuedJob>> = HashMap::new();
    for line in out.lines() {
        let job = match read_before.get(line) {
            Some(job) => job.clone(),
            None => {
                let job = job_of(line);
                read_before.insert(line, job.clone());
                job
            }
        };
        if let Some(job) = job {
            jobs.push(job);
            if jobs.len() as u64 >= max_jobs {
                break;
            }
        }
    }
    jobs
}

/// The job of one line, if it is a line of [`FIELDS`] with a typed `gpu` request.
fn job_of(line: &str) -> Option<QueuedJob> {
    let [state, nodes, per_node, limit, left] = split(line, &FIELDS).ok()?;
    let gpus = read::typed_gpus(per_node);
    if gpus.is_empty() {
        return None;
    }
    let running = read::word(state) == "RUNNING";
    Some(QueuedJob {
        running,
        nodes: if running {
            read::node_names(nodes)
        } else {
            Vec::new()
        },
        gpus,
        limit_s: read::seconds(limit)
            .filter(|&s| s > 0)
            .unwrap_or(UNLIMITED_S),
        left_s: read::seconds(left).unwrap_or(UNLIMITED_S),
    })
}

/// The pending and running jobs, arrays expanded, highest priority first, in
/// [`FIELDS`].
pub fn fetch(slurm: &Slurm) -> Result<String> {
    let format = format_arg(&FIELDS);
    slurm.stdout(
        "squeue",
        &["-h", "-a", "-r", "-t", "PD,R", "--sort=-p,i", &format],
    )
}

#[cfg(test)]
mod tests {
    use super::super::fields::SEPARATOR;
    use super::*;

    /// Lines of [`FIELDS`], written with `|` for the separator.
    fn lines(text: &str) -> String {
        text.replace('|', &SEPARATOR.to_string())
    }

    #[test]
    fn queue_lines_keep_typed_gpu_requests_with_their_times() {
        let out = lines(
            "PENDING|(null)|gres:gpu:1g.5gb:1|1:00:00|1:00:00|\n\
             PENDING|(null)|N/A|10:00|10:00|\n\
             PENDING|(null)|gres:gpu:3g.20gb:2,gres:shard:2|UNLIMITED|UNLIMITED|\n\
             PENDING|(null)|gres:gpu:2|1:00|1:00|\n\
             \n\
             RUNNING|node[2-3]|gres:gpu:a100:1|2:00:00|30:00|\n",
        );
        let q = parse(&out, 1000);
        assert_eq!(q.len(), 3, "{q:?}");
        assert_eq!(q[0].gpus, [("1g.5gb".to_string(), 1)]);
        assert_eq!(q[0].limit_s, 3600);
        assert_eq!(q[1].gpus, [("3g.20gb".to_string(), 2)]);
        assert_eq!(q[1].limit_s, UNLIMITED_S);
        assert!(q[2].running);
        assert_eq!(q[2].nodes, ["node2", "node3"]);
        assert_eq!(q[2].left_s, 1800);
        assert_eq!(parse(&out, 2).len(), 2, "at most max_jobs");
    }

    #[test]
    fn a_line_read_before_gives_the_same_job_in_its_place() {
        let out = lines(
            "PENDING|(null)|gres:gpu:1g.5gb:1|1:00:00|1:00:00|\n\
             RUNNING|node2|gres:gpu:a100:2|2:00:00|30:00|\n\
             PENDING|(null)|N/A|10:00|10:00|\n\
             PENDING|(null)|gres:gpu:1g.5gb:1|1:00:00|1:00:00|\n\
             PENDING|(null)|N/A|10:00|10:00|\n\
             RUNNING|node2|gres:gpu:a100:2|2:00:00|30:00|\n",
        );
        let q = parse(&out, 1000);
        let each: Vec<QueuedJob> = out.lines().filter_map(job_of).collect();
        assert_eq!(q, each);
        assert_eq!(q.len(), 4);
        assert_eq!((q[0].clone(), q[1].clone()), (q[2].clone(), q[3].clone()));
        assert_eq!(q[3].nodes, ["node2"]);
        assert_eq!(q[3].gpus, [("a100".to_string(), 2)]);
    }

    #[test]
    fn lines_of_another_format_are_skipped() {
        // node-setup's old `|` lines, and a line with a sixth column.
        let out = "PENDING|(null)|gres:gpu:1g.5gb:1|1:00:00|1:00:00|\n";
        assert_eq!(parse(out, 1000), []);
        let six = lines("PENDING|(null)|gres:gpu:1g.5gb:1|1:00:00|1:00:00|x|\n");
        assert_eq!(parse(&six, 1000), []);
    }
}
