//! The slurm.conf lines that match the block: the node's `Gres=`, `GresTypes=`
//! and `AccountingStorageTRES=`.

use serde::Serialize;

use super::block::{in_gi_order, GpuUsage, NodeGres};

/// GRES units per `name[:type]` the node declares, in first-appearance order:
/// `gpu:1g.5gb` → 7, `gpu:a100` → 1, `shard` → 8.
pub fn gres_counts(node: &NodeGres) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = Vec::new();
    let mut add = |key: String, n: u64| match out.iter_mut().find(|(k, _)| *k == key) {
        Some((_, c)) => *c += n,
        None => out.push((key, n)),
    };
    for gpu in &node.gpus {
        match &gpu.usage {
            GpuUsage::Whole { gpu_type, shards } => {
                add(format!("gpu:{gpu_type}"), 1);
                if let Some(n) = shards {
                    add("shard".to_string(), u64::from(*n));
                }
            }
            GpuUsage::Mig { slices } => {
                for s in in_gi_order(slices) {
                    add(format!("gpu:{}", s.profile), 1);
                }
            }
        }
    }
    out
}

/// The slurm.conf settings that match a node's gres.conf block.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SlurmConfLines {
    pub node: String,
    /// `(gpu:1g.5gb, 7)`, `(shard, 8)`, …
    pub gres: Vec<(String, u64)>,
}

impl SlurmConfLines {
    /// `gpu:1g.5gb:7,gpu:a100:1,shard:8`.
    pub fn gres_value(&self) -> String {
        self.gres
            .iter()
            .map(|(k, n)| format!("{k}:{n}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `NodeName=<node> Gres=…`: the `Gres=` to put on the node's line.
    pub fn node_line(&self) -> String {
        format!("NodeName={} Gres={}", self.node, self.gres_value())
    }

    /// `GresTypes=gpu[,shard]` (cluster-wide: merge with other nodes' types).
    pub fn gres_types_line(&self) -> String {
        let mut types = vec!["gpu"];
        if self.gres.iter().any(|(k, _)| k == "shard") {
            types.push("shard");
        }
        format!("GresTypes={}", types.join(","))
    }

    /// `AccountingStorageTRES=gres/gpu,gres/gpu:<type>…[,gres/shard]`, so sacct
    /// and sreport can tell profiles apart.
    pub fn accounting_line(&self) -> String {
        let mut tres = vec!["gres/gpu".to_string()];
        for (k, _) in &self.gres {
            if k != "shard" {
                tres.push(format!("gres/{k}"));
            }
        }
        if self.gres.iter().any(|(k, _)| k == "shard") {
            tres.push("gres/shard".to_string());
        }
        format!("AccountingStorageTRES={}", tres.join(","))
    }
}

impl std::fmt::Display for SlurmConfLines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "{}", self.gres_types_line())?;
        writeln!(f, "{}", self.accounting_line())?;
        writeln!(f, "{}", self.node_line())
    }
}

/// The slurm.conf lines for `node`.
pub fn slurm_conf_lines(node: &NodeGres) -> SlurmConfLines {
    SlurmConfLines {
        node: node.node.clone(),
        gres: gres_counts(node),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gres::render::fixtures::node;

    #[test]
    fn slurm_conf_lines_match_the_block() {
        let lines = slurm_conf_lines(&node());
        assert_eq!(
            lines.node_line(),
            "NodeName=gpu2 Gres=gpu:3g.20gb:1,gpu:1g.5gb:2,gpu:a100:1,shard:8"
        );
        assert_eq!(lines.gres_types_line(), "GresTypes=gpu,shard");
        assert_eq!(
            lines.accounting_line(),
            "AccountingStorageTRES=gres/gpu,gres/gpu:3g.20gb,gres/gpu:1g.5gb,gres/gpu:a100,gres/shard"
        );
        assert_eq!(lines.to_string().lines().count(), 3);
    }
}
