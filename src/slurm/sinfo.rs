//! Nodes ([`Node`]), partitions and GRES from `sinfo --json`.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use serde::Deserialize;

use super::gres;
use super::node::Node;
use super::Slurm;

/// One node as `sinfo --json` spells it (22.05 field names; unknown fields
/// ignored), before it becomes a [`Node`].
#[derive(Debug, Deserialize, Default)]
#[serde(default)]
struct SinfoNode {
    name: String,
    state: String,
    state_flags: Vec<String>,
    partitions: Vec<String>,
    gres: String,
    gres_used: String,
    reason: String,
    cpus: u32,
    alloc_cpus: u32,
    real_memory: u64,
}

impl From<SinfoNode> for Node {
    fn from(n: SinfoNode) -> Node {
        Node {
            name: n.name,
            state: n.state,
            state_flags: n.state_flags,
            partitions: n.partitions,
            gres: gres::parse_list(&n.gres),
            gres_used: gres::parse_list(&n.gres_used),
            cpus: n.cpus,
            alloc_cpus: n.alloc_cpus,
            real_memory_mib: n.real_memory,
            // sinfo gives no MemSpecLimit: all of it counts as usable.
            memory_mib: n.real_memory,
            reason: n.reason,
        }
    }
}

#[derive(Debug, Deserialize)]
struct SinfoJson {
    #[serde(default)]
    nodes: Vec<SinfoNode>,
    #[serde(default)]
    errors: Vec<serde_json::Value>,
}

/// Parse the whole `sinfo --json` document. Without a controller, 22.05's
/// `sinfo --json` exits 0 with an `errors` array and no nodes: that is an error.
pub fn parse_nodes(json: &str) -> Result<Vec<Node>> {
    let doc: SinfoJson = serde_json::from_str(json).context("parsing `sinfo --json` output")?;
    if doc.nodes.is_empty() && !doc.errors.is_empty() {
        let messages: Vec<String> = doc
            .errors
            .iter()
            .map(|e| match e.get("error").and_then(|m| m.as_str()) {
                Some(m) => m.to_string(),
                None => e.to_string(),
            })
            .collect();
        anyhow::bail!(
            "`sinfo --json` reported errors and no nodes: {}",
            messages.join("; ")
        );
    }
    Ok(doc.nodes.into_iter().map(Node::from).collect())
}

/// Ask Slurm for every node (retried while the controller is busy).
pub fn nodes(slurm: &Slurm) -> Result<Vec<Node>> {
    let out = slurm.stdout("sinfo", &["--json"])?;
    parse_nodes(&out)
}

/// Every node from one `sinfo --json`, not retried (a report runs again
/// soon), failing on any error inside the document, even beside nodes.
pub fn nodes_once(slurm: &Slurm) -> Result<Vec<Node>> {
    let text = slurm.run("sinfo", &["--json"])?.into_text();
    check_json_errors(&text, "sinfo --json")?;
    parse_nodes(&text)
}

/// Errors a Slurm JSON document reports inside itself. Without a controller
/// 22.05 exits 0 with `"errors": [{"error": "Unspecified error", "errno": -1}]`
/// and no nodes, which must not pass for an empty cluster.
#[derive(Deserialize)]
struct JsonErrors {
    #[serde(default)]
    errors: Vec<serde_json::Value>,
}

/// Fail when a Slurm JSON document carries errors.
pub fn check_json_errors(text: &str, command: &str) -> Result<()> {
    let doc: JsonErrors =
        serde_json::from_str(text).with_context(|| format!("parsing `{command}` output"))?;
    if doc.errors.is_empty() {
        return Ok(());
    }
    let described: Vec<String> = doc
        .errors
        .iter()
        .map(|e| {
            let what = e.get("error").and_then(|v| v.as_str()).unwrap_or("error");
            match e.get("errno") {
                Some(n) => format!("{what} (errno {n})"),
                None => what.to_string(),
            }
        })
        .collect();
    anyhow::bail!(
        "`{command}` reported: {} (is slurmctld up? try `scontrol ping`)",
        described.join("; ")
    )
}

/// The partitions of these nodes, sorted.
pub fn partitions(nodes: &[Node]) -> Vec<String> {
    let mut p: Vec<String> = nodes
        .iter()
        .flat_map(|n| n.partitions.iter().cloned())
        .collect();
    p.sort();
    p.dedup();
    p
}

/// Total count per GRES key (`gpu:1g.5gb` → 4) over these nodes; zero counts left out.
pub fn gres_totals(nodes: &[Node]) -> BTreeMap<String, u64> {
    let mut totals = BTreeMap::new();
    for node in nodes {
        for item in &node.gres {
            if item.count > 0 {
                *totals.entry(item.key()).or_insert(0) += item.count;
            }
        }
    }
    totals
}

/// The GPU types (`1g.5gb`, `a100`) that exist, with their total counts.
pub fn gpu_types(nodes: &[Node]) -> BTreeMap<String, u64> {
    gres_totals(nodes)
        .into_iter()
        .filter_map(|(k, n)| k.strip_prefix("gpu:").map(|t| (t.to_string(), n)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    pub const RECORDED: &str = include_str!("../../tests/data/sinfo-22.05-one-node.json");

    #[test]
    fn recorded_output_parses() {
        let nodes = parse_nodes(RECORDED).unwrap();
        assert_eq!(nodes.len(), 1);
        assert_eq!(nodes[0].name, "node1");
        assert_eq!(partitions(&nodes), vec!["cpu", "gpu"]);
        let types = gpu_types(&nodes);
        assert_eq!(types.get("1g.5gb"), Some(&4));
        assert_eq!(types.get("2g.10gb"), Some(&2));
        assert_eq!(types.get("a100"), Some(&1));
        assert_eq!(gres_totals(&nodes).get("shard:a100"), Some(&8));
        assert!(!gres_totals(&nodes).contains_key("shard:1g.5gb"));
    }

    #[test]
    fn unknown_fields_are_ignored_and_missing_ones_default() {
        let nodes =
            parse_nodes(r#"{"nodes":[{"name":"n","future_field":{"x":1}}],"extra":1}"#).unwrap();
        assert_eq!(nodes[0].name, "n");
        assert!(nodes[0].gres.is_empty());
    }

    #[test]
    fn errors_without_nodes_are_an_error() {
        let err = parse_nodes(r#"{"errors":[{"error":"Unable to contact slurm controller (connect failure)","error_number":1}],"nodes":[]}"#)
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("Unable to contact slurm controller"),
            "{err}"
        );
    }

    #[test]
    fn drained_flag_is_shown() {
        let n = Node {
            state: "IDLE".into(),
            state_flags: vec!["DRAIN".into()],
            ..Node::default()
        };
        assert_eq!(n.display_state(), "idle+drain");
    }

    #[test]
    fn errors_inside_sinfo_json_fail() {
        let unreachable =
            r#"{"meta":{},"errors":[{"error":"Unspecified error","errno":-1}],"nodes":[]}"#;
        let err = check_json_errors(unreachable, "sinfo --json").unwrap_err();
        assert!(
            err.to_string().contains("Unspecified error (errno -1)"),
            "{err}"
        );
        assert!(check_json_errors(r#"{"errors":[],"nodes":[]}"#, "sinfo --json").is_ok());
        assert!(check_json_errors(r#"{"nodes":[]}"#, "sinfo --json").is_ok());
    }
}
