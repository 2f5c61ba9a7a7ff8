//! This node's block of gres.conf: the lines for its GPUs and MIG slices,
//! between the markers, and the GRES type of a whole GPU.

use std::path::PathBuf;

use anyhow::{anyhow, Result};
use serde::Serialize;

use crate::error::invalid;
use crate::gres::minors::MigMinors;

/// First words of the marker lines around a node's block.
pub const BEGIN_MARKER: &str = "# BEGIN yolo-sched node-setup";
pub const END_MARKER: &str = "# END yolo-sched node-setup";

/// Everything one node offers to Slurm.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeGres {
    /// Slurm node name (`NodeName=`).
    pub node: String,
    pub gpus: Vec<GpuGres>,
}

/// One physical GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuGres {
    /// Device minor: `/dev/nvidia<minor>` (NVML `nvmlDeviceGetMinorNumber`, not the index).
    pub minor: u32,
    /// `Cores=` (CPU affinity), e.g. `0-15`.
    pub cores: Option<String>,
    pub usage: GpuUsage,
}

/// How a GPU is offered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum GpuUsage {
    /// The whole GPU as `gpu:<gpu_type>`, and `shards` shares of it as `shard` when set.
    Whole {
        gpu_type: String,
        shards: Option<u32>,
    },
    /// MIG instances, each one `gpu:<profile>`.
    Mig { slices: Vec<MigSlice> },
}

/// One MIG instance: its profile and the GPU-/compute-instance ids NVML gave it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MigSlice {
    pub profile: String,
    pub gi_id: u32,
    pub ci_id: u32,
}

/// Choices about the text written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RenderOptions {
    /// Prefix for the device paths *written* into gres.conf. `None` (the real
    /// node): `/dev/nvidia0`. Tests that lay out fake device nodes under a
    /// sysroot set it to that sysroot, so slurmd finds the files it is told
    /// about. (Paths *read*, such as `mig-minors`, are the caller's business.)
    pub device_root: Option<PathBuf>,
}

/// The marker lines of `node`'s block.
pub fn markers(node: &str) -> (String, String) {
    (
        format!("{BEGIN_MARKER} {node}"),
        format!("{END_MARKER} {node}"),
    )
}

/// Render `node`'s block, markers included, each line ending in `\n`.
/// Capability minors come from `minors`; a slice without an entry there is a
/// runtime error (the instance does not exist, or the file is stale).
pub fn render_block(node: &NodeGres, minors: &MigMinors, opts: &RenderOptions) -> Result<String> {
    check_names(node)?;
    let root = device_root(opts)?;
    let dev = |rel: &str| format!("{root}/dev/{rel}");
    let (begin, end) = markers(&node.node);
    let mut out = format!(
        "{begin}\n# Written by `yolo-sched node-setup`; this block is replaced on every run.\n"
    );
    let prefix = format!("NodeName={} AutoDetect=off", node.node);
    for gpu in &node.gpus {
        let cores = gpu
            .cores
            .as_ref()
            .map(|c| format!(" Cores={c}"))
            .unwrap_or_default();
        let parent = dev(&format!("nvidia{}", gpu.minor));
        match &gpu.usage {
            GpuUsage::Whole { gpu_type, shards } => {
                out.push_str(&format!(
                    "{prefix} Name=gpu Type={gpu_type} File={parent}{cores}\n"
                ));
                if let Some(n) = shards {
                    out.push_str(&format!(
                        "{prefix} Name=shard Count={n} File={parent}{cores}\n"
                    ));
                }
            }
            GpuUsage::Mig { slices } => {
                for s in in_gi_order(slices) {
                    let gi = minors.gi(gpu.minor, s.gi_id).ok_or_else(|| {
                        anyhow!(
                            "mig-minors has no gpu{}/gi{}/access: MIG instance {} of /dev/nvidia{} is unknown to the driver",
                            gpu.minor,
                            s.gi_id,
                            s.gi_id,
                            gpu.minor
                        )
                    })?;
                    let ci = minors.ci(gpu.minor, s.gi_id, s.ci_id).ok_or_else(|| {
                        anyhow!(
                            "mig-minors has no gpu{}/gi{}/ci{}/access: compute instance {} of MIG instance {} is unknown to the driver",
                            gpu.minor,
                            s.gi_id,
                            s.ci_id,
                            s.ci_id,
                            s.gi_id
                        )
                    })?;
                    out.push_str(&format!(
                        "{prefix} Name=gpu Type={} MultipleFiles={parent},{},{}{cores}\n",
                        s.profile,
                        dev(&format!("nvidia-caps/nvidia-cap{gi}")),
                        dev(&format!("nvidia-caps/nvidia-cap{ci}")),
                    ));
                }
            }
        }
    }
    out.push_str(&end);
    out.push('\n');
    Ok(out)
}

/// MIG slices in the order their lines are written: by GPU-instance id.
pub(super) fn in_gi_order(slices: &[MigSlice]) -> Vec<&MigSlice> {
    let mut ordered: Vec<&MigSlice> = slices.iter().collect();
    ordered.sort_by_key(|s| (s.gi_id, s.ci_id));
    ordered
}

fn device_root(opts: &RenderOptions) -> Result<String> {
    let Some(root) = &opts.device_root else {
        return Ok(String::new());
    };
    let text = root
        .to_str()
        .ok_or_else(|| invalid(format!("device root {} is not UTF-8", root.display())))?;
    if !root.is_absolute()
        || text
            .contains(|c: char| c.is_whitespace() || matches!(c, ',' | '#' | '"' | '[' | ']' | '='))
    {
        return Err(invalid(format!(
            "device root {text:?} must be an absolute path without spaces, commas, `#`, quotes, brackets or `=` \
             (it is written into gres.conf)"
        )));
    }
    Ok(text.trim_end_matches('/').to_string())
}

/// Names that end up in gres.conf and slurm.conf must be plain tokens.
pub(super) fn check_names(node: &NodeGres) -> Result<()> {
    let token = |s: &str, extra: &[char]| {
        !s.is_empty()
            && s.chars().all(|c| {
                c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') || extra.contains(&c)
            })
    };
    if !token(&node.node, &[]) {
        return Err(invalid(format!(
            "node name {:?}: use letters, digits, `.`, `_` and `-` only",
            node.node
        )));
    }
    for gpu in &node.gpus {
        if let Some(c) = &gpu.cores {
            if c.is_empty()
                || !c
                    .chars()
                    .all(|c| c.is_ascii_digit() || c == ',' || c == '-')
            {
                return Err(invalid(format!(
                    "Cores={c:?} for /dev/nvidia{}: expected CPU ids such as 0-15 or 0-7,16-23",
                    gpu.minor
                )));
            }
        }
        let types: Vec<&str> = match &gpu.usage {
            GpuUsage::Whole { gpu_type, shards } => {
                if *shards == Some(0) {
                    return Err(invalid(format!(
                        "/dev/nvidia{}: a shard count must be at least 1",
                        gpu.minor
                    )));
                }
                vec![gpu_type.as_str()]
            }
            GpuUsage::Mig { slices } => slices.iter().map(|s| s.profile.as_str()).collect(),
        };
        for t in types {
            if !token(t, &['+']) {
                return Err(invalid(format!(
                    "GRES type {t:?} for /dev/nvidia{}: use letters, digits, `.`, `_`, `-` and `+` only",
                    gpu.minor
                )));
            }
        }
    }
    Ok(())
}

/// A short Slurm GRES type for a whole GPU from its NVML name:
/// `NVIDIA A100-SXM4-40GB` → `a100`, `Tesla V100-SXM2-16GB` → `v100`,
/// `NVIDIA H200 141GB HBM3e` → `h200`.
pub fn gpu_type_name(nvml_name: &str) -> String {
    let word = nvml_name
        .split_whitespace()
        .find(|w| !w.eq_ignore_ascii_case("nvidia") && !w.eq_ignore_ascii_case("tesla"))
        .unwrap_or("gpu");
    let base = word.split('-').next().unwrap_or(word);
    let cleaned: String = base
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_'))
        .map(|c| c.to_ascii_lowercase())
        .collect();
    if cleaned.is_empty() {
        "gpu".to_string()
    } else {
        cleaned
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::exit_code_for;
    use crate::gres::render::check_written;
    use crate::gres::render::fixtures::{minors, node};

    const BLOCK: &str = "\
# BEGIN yolo-sched node-setup gpu2
# Written by `yolo-sched node-setup`; this block is replaced on every run.
NodeName=gpu2 AutoDetect=off Name=gpu Type=3g.20gb MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap12,/dev/nvidia-caps/nvidia-cap13
NodeName=gpu2 AutoDetect=off Name=gpu Type=1g.5gb MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap21,/dev/nvidia-caps/nvidia-cap22
NodeName=gpu2 AutoDetect=off Name=gpu Type=1g.5gb MultipleFiles=/dev/nvidia4,/dev/nvidia-caps/nvidia-cap606,/dev/nvidia-caps/nvidia-cap607 Cores=40-47
NodeName=gpu2 AutoDetect=off Name=gpu Type=a100 File=/dev/nvidia2 Cores=8-15
NodeName=gpu2 AutoDetect=off Name=shard Count=8 File=/dev/nvidia2 Cores=8-15
# END yolo-sched node-setup gpu2
";

    #[test]
    fn renders_one_line_per_slice_with_both_capabilities() {
        let block = render_block(&node(), &minors(), &RenderOptions::default()).unwrap();
        assert_eq!(block, BLOCK);
        check_written(block.as_bytes(), &node(), &block).unwrap();
    }

    #[test]
    fn device_root_prefixes_written_paths() {
        let opts = RenderOptions {
            device_root: Some("/tmp/sysroot/".into()),
        };
        let block = render_block(&node(), &minors(), &opts).unwrap();
        assert!(block.contains(
            "MultipleFiles=/tmp/sysroot/dev/nvidia0,/tmp/sysroot/dev/nvidia-caps/nvidia-cap12,"
        ));
        assert!(block.contains("File=/tmp/sysroot/dev/nvidia2 "));
        let bad = RenderOptions {
            device_root: Some("/tmp/my root".into()),
        };
        assert_eq!(
            exit_code_for(&render_block(&node(), &minors(), &bad).unwrap_err()),
            2
        );
    }

    #[test]
    fn a_slice_missing_from_mig_minors_is_a_runtime_error() {
        let mut n = node();
        n.gpus[0].usage = GpuUsage::Mig {
            slices: vec![MigSlice {
                profile: "1g.5gb".into(),
                gi_id: 9,
                ci_id: 0,
            }],
        };
        let err = render_block(&n, &minors(), &RenderOptions::default()).unwrap_err();
        assert_eq!(exit_code_for(&err), 1);
        assert!(err.to_string().contains("gpu0/gi9/access"), "{err}");
    }

    #[test]
    fn unsafe_names_are_refused() {
        let mut n = node();
        n.node = "gpu2 Name=evil".into();
        assert_eq!(
            exit_code_for(&render_block(&n, &minors(), &RenderOptions::default()).unwrap_err()),
            2
        );
        let mut n = node();
        n.gpus[2].usage = GpuUsage::Whole {
            gpu_type: "a100:x".into(),
            shards: None,
        };
        assert_eq!(
            exit_code_for(&render_block(&n, &minors(), &RenderOptions::default()).unwrap_err()),
            2
        );
        let mut n = node();
        n.gpus[1].cores = Some("0-3 Name=x".into());
        assert_eq!(
            exit_code_for(&render_block(&n, &minors(), &RenderOptions::default()).unwrap_err()),
            2
        );
    }

    #[test]
    fn type_names_from_nvml() {
        assert_eq!(gpu_type_name("NVIDIA A100-SXM4-40GB"), "a100");
        assert_eq!(gpu_type_name("Tesla V100-SXM2-16GB"), "v100");
        assert_eq!(gpu_type_name("NVIDIA H200 141GB HBM3e"), "h200");
        assert_eq!(gpu_type_name("NVIDIA"), "gpu");
    }
}
