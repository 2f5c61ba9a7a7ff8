//! Writing this node's block of gres.conf, and the slurm.conf lines that match it.
//!
//! One explicit line per MIG instance, the way Slurm's NVML autodetect
//! describes it (`gpu_nvml.c`): the parent `/dev/nvidia<minor>` plus the GPU-
//! and compute-instance capability files, as one GRES through
//! `MultipleFiles=`. Whole GPUs get `File=/dev/nvidia<minor>` and a type, and
//! optionally `Name=shard Count=N` on the same file. Every line carries
//! `NodeName=<node> AutoDetect=off`. Only the block between
//! `# BEGIN yolo-sched node-setup <node>` and `# END …` is ever rewritten.

use std::path::PathBuf;

use anyhow::{anyhow, bail, Result};
use serde::Serialize;

use super::conf;
use super::minors::MigMinors;
use crate::error::invalid;

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
fn in_gi_order(slices: &[MigSlice]) -> Vec<&MigSlice> {
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
fn check_names(node: &NodeGres) -> Result<()> {
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

/// The result of putting a block into a gres.conf text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockEdit {
    pub text: String,
    /// Lines outside the block that also configure `gpu` or `shard` for this
    /// node (hand-written, or a generic line without `NodeName=`): Slurm would
    /// count them too. `(line number in the new text, line)`.
    pub conflicts: Vec<(usize, String)>,
}

/// Replace `node`'s block in `existing` with `block` (from `render_block`), or
/// append it when the file has none. Everything outside the block is kept
/// byte for byte. A damaged block (a marker without its partner, twice) is
/// refused rather than guessed at.
pub fn replace_block(existing: &str, node: &str, block: &str) -> Result<BlockEdit> {
    let (begin, end) = markers(node);
    let lines: Vec<&str> = existing.split_inclusive('\n').collect();
    let find = |marker: &str| -> Vec<usize> {
        lines
            .iter()
            .enumerate()
            .filter(|(_, l)| l.trim_end() == marker)
            .map(|(i, _)| i)
            .collect()
    };
    let (starts, ends) = (find(&begin), find(&end));
    let text = match (starts.as_slice(), ends.as_slice()) {
        ([], []) => {
            let mut t = existing.to_string();
            if !t.is_empty() && !t.ends_with('\n') {
                t.push('\n');
            }
            if !t.is_empty() && !t.ends_with("\n\n") {
                t.push('\n');
            }
            t.push_str(block);
            t
        }
        ([s], [e]) if s < e => {
            let mut t: String = lines[..*s].concat();
            t.push_str(block);
            t.push_str(&lines[e + 1..].concat());
            t
        }
        _ => {
            let at: Vec<String> = starts
                .iter()
                .chain(&ends)
                .map(|i| (i + 1).to_string())
                .collect();
            return Err(invalid(format!(
                "gres.conf has a damaged yolo-sched block for {node} (marker lines {}): expected one \
                 `{begin}` line followed by one `{end}` line; repair or remove them by hand",
                at.join(", ")
            )));
        }
    };
    let conflicts = conflicts_outside_block(&text, node)?;
    Ok(BlockEdit { text, conflicts })
}

/// 1-based line range of `node`'s block in `text`, markers included.
fn block_range(text: &str, node: &str) -> Option<(usize, usize)> {
    let (begin, end) = markers(node);
    let mut start = None;
    for (i, l) in text.lines().enumerate() {
        if l.trim_end() == begin {
            start = Some(i + 1);
        } else if l.trim_end() == end {
            return start.map(|s| (s, i + 1));
        }
    }
    None
}

fn conflicts_outside_block(text: &str, node: &str) -> Result<Vec<(usize, String)>> {
    let Some((s, e)) = block_range(text, node) else {
        return Ok(Vec::new());
    };
    // Hand-written lines may use forms we cannot read; then we cannot tell.
    let Ok(parsed) = conf::parse(text, "gres.conf") else {
        return Ok(Vec::new());
    };
    let all: Vec<&str> = text.lines().collect();
    Ok(parsed
        .lines
        .iter()
        .filter(|l| (l.line < s || l.line > e) && l.applies_to(node))
        .filter(|l| matches!(l.name.as_deref(), Some("gpu" | "shard")))
        .map(|l| (l.line, all[l.line - 1].to_string()))
        .collect())
}

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

/// The parse-back check for a new gres.conf (`fsutil::write_with_backup`):
/// the whole file must parse, the node's block must be exactly `block`, and
/// the records inside it must declare exactly the node's GRES.
pub fn check_written(bytes: &[u8], node: &NodeGres, block: &str) -> Result<()> {
    let text = std::str::from_utf8(bytes).map_err(|_| anyhow!("the new gres.conf is not UTF-8"))?;
    let parsed = conf::parse(text, "new gres.conf")?;
    let Some((s, e)) = block_range(text, &node.node) else {
        bail!("the new gres.conf has no block for {}", node.node);
    };
    let found: String = text
        .lines()
        .skip(s - 1)
        .take(e - s + 1)
        .map(|l| format!("{l}\n"))
        .collect();
    if found != block {
        bail!(
            "the block for {} in the new gres.conf differs from the rendered one",
            node.node
        );
    }
    let mut declared: Vec<(String, u64)> = Vec::new();
    for l in parsed.lines.iter().filter(|l| l.line > s && l.line < e) {
        if !l.applies_to(&node.node) || l.auto_detect.as_deref() != Some("off") {
            bail!(
                "new gres.conf line {}: not an AutoDetect=off line for {}",
                l.line,
                node.node
            );
        }
        let name = l.name.as_deref().unwrap_or_default();
        let key = match (name, &l.kind) {
            ("gpu", Some(t)) => format!("gpu:{t}"),
            ("shard", _) => "shard".to_string(),
            _ => bail!("new gres.conf line {}: unexpected record", l.line),
        };
        let want_files = if l.multiple_files { 3 } else { 1 };
        if l.files.len() != want_files {
            bail!(
                "new gres.conf line {}: expected {want_files} device file(s)",
                l.line
            );
        }
        match declared.iter_mut().find(|(k, _)| *k == key) {
            Some((_, n)) => *n += l.units(),
            None => declared.push((key, l.units())),
        }
    }
    let expected = gres_counts(node);
    if declared != expected {
        bail!(
            "the new gres.conf declares {declared:?} for {}, expected {expected:?}",
            node.node
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::exit_code_for;

    fn minors() -> MigMinors {
        MigMinors::parse(
            "config 1\nmonitor 2\ngpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\ngpu0/gi2/access 21\n\
             gpu0/gi2/ci0/access 22\ngpu4/gi7/access 606\ngpu4/gi7/ci0/access 607\n",
            "mig-minors",
        )
        .unwrap()
    }

    fn node() -> NodeGres {
        NodeGres {
            node: "gpu2".into(),
            gpus: vec![
                GpuGres {
                    minor: 0,
                    cores: None,
                    usage: GpuUsage::Mig {
                        slices: vec![
                            MigSlice {
                                profile: "1g.5gb".into(),
                                gi_id: 2,
                                ci_id: 0,
                            },
                            MigSlice {
                                profile: "3g.20gb".into(),
                                gi_id: 1,
                                ci_id: 0,
                            },
                        ],
                    },
                },
                GpuGres {
                    minor: 4,
                    cores: Some("40-47".into()),
                    usage: GpuUsage::Mig {
                        slices: vec![MigSlice {
                            profile: "1g.5gb".into(),
                            gi_id: 7,
                            ci_id: 0,
                        }],
                    },
                },
                GpuGres {
                    minor: 2,
                    cores: Some("8-15".into()),
                    usage: GpuUsage::Whole {
                        gpu_type: "a100".into(),
                        shards: Some(8),
                    },
                },
            ],
        }
    }

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

    #[test]
    fn replacing_keeps_hand_written_lines_and_reports_conflicts() {
        let block = render_block(&node(), &minors(), &RenderOptions::default()).unwrap();
        let hand = "# hand-written\nNodeName=other Name=gpu File=/dev/nvidia0\nName=gpu Type=x File=/dev/nvidia9\n";
        let first = replace_block(hand, "gpu2", &block).unwrap();
        assert!(first.text.starts_with(hand));
        assert!(first.text.ends_with(&block));
        assert_eq!(
            first.conflicts,
            [(3, "Name=gpu Type=x File=/dev/nvidia9".to_string())]
        );

        // A second run with a different block replaces only the block.
        let mut smaller = node();
        smaller.gpus.truncate(1);
        let block2 = render_block(&smaller, &minors(), &RenderOptions::default()).unwrap();
        let edited = format!(
            "{}# after\nNodeName=other Name=gpu File=/dev/nvidia1\n",
            first.text
        );
        let second = replace_block(&edited, "gpu2", &block2).unwrap();
        assert_eq!(
            second.text,
            format!("{hand}\n{block2}# after\nNodeName=other Name=gpu File=/dev/nvidia1\n")
        );
        check_written(second.text.as_bytes(), &smaller, &block2).unwrap();
        // Same block again: same text (idempotent).
        assert_eq!(
            replace_block(&second.text, "gpu2", &block2).unwrap().text,
            second.text
        );
    }

    #[test]
    fn damaged_blocks_are_refused() {
        let block = render_block(&node(), &minors(), &RenderOptions::default()).unwrap();
        let (begin, end) = markers("gpu2");
        for text in [
            format!("{begin}\nx\n"),
            format!("{end}\n{begin}\n"),
            format!("{block}{block}"),
        ] {
            let err = replace_block(&text, "gpu2", &block).unwrap_err();
            assert_eq!(exit_code_for(&err), 2);
            assert!(err.to_string().contains("damaged"), "{err}");
        }
        // Another node's block is not ours.
        let other = replace_block(
            &block,
            "gpu3",
            "# BEGIN yolo-sched node-setup gpu3\n# END yolo-sched node-setup gpu3\n",
        )
        .unwrap();
        assert!(other.text.starts_with(&block));
    }

    #[test]
    fn check_written_catches_a_wrong_file() {
        let block = render_block(&node(), &minors(), &RenderOptions::default()).unwrap();
        let tampered = block.replace("Count=8", "Count=9");
        assert!(check_written(tampered.as_bytes(), &node(), &tampered).is_err());
        assert!(check_written(b"Name=gpu Fiel=x\n", &node(), &block).is_err());
        assert!(check_written(b"", &node(), &block).is_err());
    }

    #[test]
    fn type_names_from_nvml() {
        assert_eq!(gpu_type_name("NVIDIA A100-SXM4-40GB"), "a100");
        assert_eq!(gpu_type_name("Tesla V100-SXM2-16GB"), "v100");
        assert_eq!(gpu_type_name("NVIDIA H200 141GB HBM3e"), "h200");
        assert_eq!(gpu_type_name("NVIDIA"), "gpu");
    }
}
