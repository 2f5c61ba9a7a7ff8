//! The `NODE_GRES` file: `<node> <Gres>` lines that give some of
//! `node1..nodeN` a shape of their own (`node3 gpu:3g.20gb:2,gpu:1g.5gb:4`,
//! `node4 -` for no GPU), each GPU or slice one fake device file.

use anyhow::Result;

use crate::error::invalid;
use crate::gres::render::{GpuGres, GpuUsage, NodeGres};

/// The file, read: per node, its `Gres=` as written and its GPUs in order
/// (`None`: `-`, no GPU).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeGresFile {
    pub nodes: Vec<(String, Option<String>)>,
}

impl NodeGresFile {
    /// The `Gres=` text the file gives `node` (`-` for none), if it names it.
    pub fn text_of(&self, node: &str) -> Option<&str> {
        self.nodes
            .iter()
            .find(|(n, _)| n == node)
            .map(|(_, g)| g.as_deref().unwrap_or("-"))
    }

    /// `node`'s GPUs as whole devices on minors 0, 1, …, one per unit of
    /// each item, in the file's order: `Some(empty)` for `-`, `None` when the
    /// file does not name the node.
    pub fn gres_of(&self, node: &str) -> Option<NodeGres> {
        let (_, gres) = self.nodes.iter().find(|(n, _)| n == node)?;
        let mut gpus = Vec::new();
        for (gpu_type, count) in gres.as_deref().map(items).unwrap_or_default() {
            for _ in 0..count {
                gpus.push(GpuGres {
                    minor: gpus.len() as u32,
                    cores: None,
                    usage: GpuUsage::Whole {
                        gpu_type: gpu_type.to_string(),
                        shards: None,
                    },
                });
            }
        }
        Some(NodeGres {
            node: node.to_string(),
            gpus,
        })
    }
}

/// `gpu:<type>:<count>` items of a checked `Gres=` text.
fn items(gres: &str) -> Vec<(&str, u32)> {
    gres.split(',')
        .filter_map(|item| {
            let rest = item.strip_prefix("gpu:")?;
            let (t, n) = rest.rsplit_once(':')?;
            Some((t, n.parse().ok()?))
        })
        .collect()
}

fn node_name_ok(n: &str) -> bool {
    let Some(k) = n.strip_prefix("node") else {
        return false;
    };
    let b = k.as_bytes();
    matches!(b.len(), 1 | 2)
        && (b'1'..=b'9').contains(&b[0])
        && b[1..].iter().all(u8::is_ascii_digit)
}

/// One `gpu:<type>:<count>` item: type of letters, digits and `._+-`, count
/// from 1 without leading zeros (at most a million).
fn item_ok(item: &str) -> Option<(&str, u32)> {
    let (t, n) = item.strip_prefix("gpu:")?.split_once(':')?;
    let type_ok = !t.is_empty()
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._+-".contains(&b));
    let count_ok = !n.is_empty()
        && n.len() <= 6
        && n.as_bytes()[0] != b'0'
        && n.bytes().all(|b| b.is_ascii_digit());
    (type_ok && count_ok).then(|| (t, n.parse().unwrap_or(0)))
}

/// Reads the file's text (`path` for messages). Blank lines and lines
/// starting with `#` are skipped; every other line is `<nodeK> <Gres>` or
/// `<nodeK> -`, words split on blanks, each node at most once, each type at
/// most once on a line (Slurm adds them up; the devices would not).
pub fn parse_node_gres(text: &str, path: &str) -> Result<NodeGresFile> {
    let mut out = NodeGresFile::default();
    for (i, line) in text.split('\n').enumerate() {
        let mut words = line.split([' ', '\t']).filter(|w| !w.is_empty());
        let n = words.next().unwrap_or("");
        if n.is_empty() || n.starts_with('#') {
            continue;
        }
        let gres = words.next().unwrap_or("");
        let rest: Vec<&str> = words.collect();
        let bad = || {
            invalid(format!(
                "NODE_GRES {path} line {}: expected '<nodeK> gpu:<type>:<count>[,...]' or '<nodeK> -', got '{n} {gres} {}'",
                i + 1,
                rest.join(" ")
            ))
        };
        if !node_name_ok(n) || !rest.is_empty() {
            return Err(bad());
        }
        let value = if gres == "-" {
            None
        } else {
            let mut seen: Vec<&str> = Vec::new();
            for item in gres.split(',') {
                let (t, _) = item_ok(item).ok_or_else(bad)?;
                if seen.contains(&t) {
                    return Err(invalid(format!(
                        "NODE_GRES {path} line {}: gpu:{t} twice; give each type once with its total count",
                        i + 1
                    )));
                }
                seen.push(t);
            }
            Some(gres.to_string())
        };
        if out.nodes.iter().any(|(m, _)| m == n) {
            return Err(invalid(format!(
                "NODE_GRES {path} line {}: {n} is named twice",
                i + 1
            )));
        }
        out.nodes.push((n.to_string(), value));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::exit_code_for;
    use crate::gres::render::slurm_conf_lines;

    #[test]
    fn lines_give_nodes_their_gpus_in_order() {
        let f = parse_node_gres(
            "# shapes\n\nnode3 gpu:3g.20gb:2,gpu:1g.5gb:4\n\tnode2  -  \nnode1 gpu:h100:9",
            "f",
        )
        .unwrap();
        assert_eq!(f.text_of("node2"), Some("-"));
        assert_eq!(f.text_of("node4"), None);
        let n3 = f.gres_of("node3").unwrap();
        assert_eq!(n3.gpus.len(), 6);
        assert_eq!(n3.gpus[5].minor, 5);
        assert_eq!(
            slurm_conf_lines(&n3).gres_value(),
            "gpu:3g.20gb:2,gpu:1g.5gb:4"
        );
        assert!(f.gres_of("node2").unwrap().gpus.is_empty());
        assert_eq!(f.gres_of("node1").unwrap().gpus.len(), 9);
    }

    #[test]
    fn bad_lines_are_refused_with_the_line() {
        for (text, want) in [
            ("node1 gpu:a:1 x\n", "line 1: expected"),
            ("\nnode0 gpu:a:1\n", "line 2: expected"),
            ("node1 gpu:a:0\n", "got 'node1 gpu:a:0 '"),
            ("node1 gpu:a:01\n", "expected"),
            ("node1\n", "expected"),
            ("node1 shard:8\n", "expected"),
            ("node1 gpu:a b:1\n", "expected"),
            ("node1 gpu:a:1\r\n", "expected"),
            ("node1 gpu:a:1,gpu:a:2\n", "gpu:a twice"),
            ("node1 -\nnode1 gpu:a:1\n", "node1 is named twice"),
        ] {
            let err = parse_node_gres(text, "f").unwrap_err();
            assert_eq!(exit_code_for(&err), 2);
            assert!(err.to_string().contains(want), "{text:?}: {err}");
        }
    }
}
