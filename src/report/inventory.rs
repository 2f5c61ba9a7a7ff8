//! Slices per node and type, from the nodes `sinfo --json` describes.

use std::collections::BTreeMap;

use super::model::{GresCount, Inventory, NodeRow, TypeTotal};
use crate::slurm::node::Node;

/// A node state in words people use (`drained`, `draining`, …).
pub fn node_state(node: &Node) -> String {
    node.state_in_words()
}

pub use crate::slurm::node::accepts_jobs;

/// Build the inventory of these nodes; `partition` keeps only its nodes.
pub fn build(nodes: &[Node], partition: Option<&str>) -> Inventory {
    let mut rows = Vec::new();
    let mut totals: BTreeMap<String, TypeTotal> = BTreeMap::new();
    for node in nodes {
        if partition.is_some_and(|p| !node.partitions.iter().any(|x| x == p)) {
            continue;
        }
        let state = node_state(node);
        let usable = accepts_jobs(&state);
        let mut used: BTreeMap<String, u64> = BTreeMap::new();
        for item in &node.gres_used {
            let u = used.entry(item.key()).or_default();
            *u = u.saturating_add(item.count);
        }
        let mut gres = Vec::new();
        for item in &node.gres {
            // `shard:1g.5gb:0`: Slurm lists a zero for types without shards.
            if item.count == 0 {
                continue;
            }
            let key = item.key();
            let allocated = used.get(&key).copied().unwrap_or(0).min(item.count);
            let free = item.count - allocated;
            let t = totals.entry(key.clone()).or_insert_with(|| TypeTotal {
                kind: key.clone(),
                total: 0,
                allocated: 0,
                free: 0,
                free_usable: 0,
            });
            t.total = t.total.saturating_add(item.count);
            t.allocated = t.allocated.saturating_add(allocated);
            t.free = t.free.saturating_add(free);
            if usable {
                t.free_usable = t.free_usable.saturating_add(free);
            }
            gres.push(GresCount {
                kind: key,
                total: item.count,
                allocated,
                free,
            });
        }
        let reason = Some(node.reason.trim())
            .filter(|r| !r.is_empty())
            .map(str::to_string);
        rows.push(NodeRow {
            node: node.name.clone(),
            state,
            reason,
            partitions: node.partitions.clone(),
            gres,
        });
    }
    rows.sort_by_key(|r| natural_key(&r.node));
    Inventory {
        nodes: rows,
        totals: totals.into_values().collect(),
    }
}

/// `node2` before `node10`.
fn natural_key(name: &str) -> (String, u64) {
    let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let (head, tail) = name.split_at(name.len() - digits);
    (head.to_string(), tail.parse().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(state: &str, flags: &[&str]) -> Node {
        Node {
            name: "n1".into(),
            state: state.into(),
            state_flags: flags.iter().map(|f| f.to_string()).collect(),
            ..Node::default()
        }
    }

    #[test]
    fn states_in_words() {
        assert_eq!(node_state(&node("IDLE", &[])), "idle");
        assert_eq!(node_state(&node("idle", &["DRAIN"])), "drained");
        assert_eq!(node_state(&node("mixed", &["DRAIN"])), "draining");
        assert_eq!(node_state(&node("down", &["DRAIN"])), "down+drain");
        assert_eq!(
            node_state(&node("mixed", &["NOT_RESPONDING"])),
            "mixed+not_responding"
        );
        assert!(accepts_jobs("mixed"));
        assert!(!accepts_jobs("drained"));
        assert!(!accepts_jobs("mixed+not_responding"));
    }

    #[test]
    fn counts_and_partition_filter() {
        let mut a = node("mixed", &[]);
        a.partitions = vec!["gpu".into()];
        a.gres =
            crate::slurm::gres::parse_list("gpu:1g.5gb:4,gpu:a100:1,shard:1g.5gb:0,shard:a100:8");
        a.gres_used = crate::slurm::gres::parse_list(
            "gpu:1g.5gb:3(IDX:0-2),gpu:a100:0(IDX:N/A),shard:1g.5gb:0(IDX:N/A),shard:a100:2(IDX:6)",
        );
        let mut b = node("idle", &["DRAIN"]);
        b.name = "n2".into();
        b.partitions = vec!["gpu".into(), "cpu".into()];
        b.reason = "bad fan".into();
        b.gres = crate::slurm::gres::parse_list("gpu:1g.5gb:4");
        let inv = build(&[b.clone(), a.clone()], None);
        assert_eq!(inv.nodes[0].node, "n1");
        assert_eq!(
            inv.nodes[0].gres,
            vec![
                GresCount {
                    kind: "gpu:1g.5gb".into(),
                    total: 4,
                    allocated: 3,
                    free: 1
                },
                GresCount {
                    kind: "gpu:a100".into(),
                    total: 1,
                    allocated: 0,
                    free: 1
                },
                GresCount {
                    kind: "shard:a100".into(),
                    total: 8,
                    allocated: 2,
                    free: 6
                },
            ]
        );
        assert_eq!(inv.nodes[1].state, "drained");
        assert_eq!(inv.nodes[1].reason.as_deref(), Some("bad fan"));
        let t = &inv.totals[0];
        assert_eq!(
            (t.kind.as_str(), t.total, t.allocated, t.free, t.free_usable),
            ("gpu:1g.5gb", 8, 3, 5, 1)
        );
        let only_cpu = build(&[a, b], Some("cpu"));
        assert_eq!(only_cpu.nodes.len(), 1);
        assert_eq!(only_cpu.nodes[0].node, "n2");
    }

    #[test]
    fn natural_order() {
        let mut v = vec!["node10", "node2", "gpu1", "node1"];
        v.sort_by_key(|n| natural_key(n));
        assert_eq!(v, vec!["gpu1", "node1", "node2", "node10"]);
    }
}
