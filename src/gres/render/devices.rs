//! gres.conf lines for a node whose GPUs are plain device files under a
//! directory of its own (`<dir>/nvidia<minor>`), without markers: the local
//! test cluster's fake devices (`slurm/cluster.sh`, `localcluster`). Whole
//! GPUs of one type on consecutive minors share a line
//! (`File=<dir>/nvidia[0-3]`); a GPU with shards has its own line, followed by
//! its `Name=shard` line. MIG slices have no such form: they are refused.

use anyhow::Result;

use super::block::{check_names, GpuUsage, NodeGres};
use crate::error::invalid;

/// The lines for `node`, each ending in `\n`, its devices under `dir`.
pub fn render_device_lines(node: &NodeGres, dir: &str) -> Result<String> {
    check_names(node)?;
    if dir.is_empty()
        || dir
            .contains(|c: char| c.is_whitespace() || matches!(c, ',' | '#' | '"' | '[' | ']' | '='))
    {
        return Err(invalid(format!(
            "device directory {dir:?} must be a path without spaces, commas, `#`, quotes, brackets or `=` \
             (it is written into gres.conf)"
        )));
    }
    let prefix = format!("NodeName={} AutoDetect=off", node.node);
    let mut out = String::new();
    let mut i = 0;
    while i < node.gpus.len() {
        let gpu = &node.gpus[i];
        let (gpu_type, shards) = match &gpu.usage {
            GpuUsage::Whole { gpu_type, shards } => (gpu_type, *shards),
            GpuUsage::Mig { .. } => {
                return Err(invalid(format!(
                    "/dev/nvidia{} of {}: MIG slices have no device-file line; describe them as whole GPUs of their type",
                    gpu.minor, node.node
                )))
            }
        };
        // The run of GPUs this line covers: same type, consecutive minors, no shards.
        let mut last = i;
        if shards.is_none() {
            while let Some(next) = node.gpus.get(last + 1) {
                let same = matches!(&next.usage, GpuUsage::Whole { gpu_type: t, shards: None } if t == gpu_type);
                if !same || next.minor != node.gpus[last].minor + 1 || next.cores != gpu.cores {
                    break;
                }
                last += 1;
            }
        }
        let (first, end) = (gpu.minor, node.gpus[last].minor);
        let file = if first == end {
            format!("{dir}/nvidia{first}")
        } else {
            format!("{dir}/nvidia[{first}-{end}]")
        };
        let cores = gpu
            .cores
            .as_ref()
            .map(|c| format!(" Cores={c}"))
            .unwrap_or_default();
        out.push_str(&format!(
            "{prefix} Name=gpu Type={gpu_type} File={file}{cores}\n"
        ));
        if let Some(n) = shards {
            out.push_str(&format!(
                "{prefix} Name=shard Count={n} File={file}{cores}\n"
            ));
        }
        i = last + 1;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::exit_code_for;
    use crate::gres::render::{slurm_conf_lines, GpuGres};

    fn whole(minor: u32, t: &str, shards: Option<u32>) -> GpuGres {
        GpuGres {
            minor,
            cores: None,
            usage: GpuUsage::Whole {
                gpu_type: t.into(),
                shards,
            },
        }
    }

    #[test]
    fn runs_of_one_type_share_a_line_and_shards_follow_their_gpu() {
        let mut gpus: Vec<GpuGres> = (0..4).map(|m| whole(m, "1g.5gb", None)).collect();
        gpus.extend((4..6).map(|m| whole(m, "2g.10gb", None)));
        gpus.push(whole(6, "a100", Some(8)));
        let node = NodeGres {
            node: "node1".into(),
            gpus,
        };
        assert_eq!(
            render_device_lines(&node, "/dev/fake/node1").unwrap(),
            "NodeName=node1 AutoDetect=off Name=gpu Type=1g.5gb File=/dev/fake/node1/nvidia[0-3]\n\
             NodeName=node1 AutoDetect=off Name=gpu Type=2g.10gb File=/dev/fake/node1/nvidia[4-5]\n\
             NodeName=node1 AutoDetect=off Name=gpu Type=a100 File=/dev/fake/node1/nvidia6\n\
             NodeName=node1 AutoDetect=off Name=shard Count=8 File=/dev/fake/node1/nvidia6\n"
        );
        assert_eq!(
            slurm_conf_lines(&node).gres_value(),
            "gpu:1g.5gb:4,gpu:2g.10gb:2,gpu:a100:1,shard:8"
        );
    }

    #[test]
    fn a_gap_or_another_type_starts_a_new_line() {
        let node = NodeGres {
            node: "n".into(),
            gpus: vec![
                whole(0, "a", None),
                whole(2, "a", None),
                whole(3, "b", None),
                whole(4, "a", None),
            ],
        };
        let text = render_device_lines(&node, "/d").unwrap();
        assert_eq!(text.lines().count(), 4, "{text}");
        assert!(text.ends_with("Type=a File=/d/nvidia4\n"), "{text}");
    }

    #[test]
    fn unsafe_directories_and_names_are_refused() {
        let node = NodeGres {
            node: "n".into(),
            gpus: vec![whole(0, "a", None)],
        };
        for dir in ["", "/a b", "/a,b", "/a[0]"] {
            let err = render_device_lines(&node, dir).unwrap_err();
            assert_eq!(exit_code_for(&err), 2, "{dir:?}");
        }
        let bad = NodeGres {
            node: "n x".into(),
            gpus: vec![],
        };
        assert_eq!(
            exit_code_for(&render_device_lines(&bad, "/d").unwrap_err()),
            2
        );
    }
}
