//! The parse-back check of a written gres.conf.

use anyhow::{anyhow, bail, Result};

use super::block::NodeGres;
use super::slurm_conf::gres_counts;
use super::splice::block_range;
use crate::gres::conf;

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
    use crate::gres::render::fixtures::{minors, node};

    use crate::gres::render::{render_block, RenderOptions};

    #[test]
    fn check_written_catches_a_wrong_file() {
        let block = render_block(&node(), &minors(), &RenderOptions::default()).unwrap();
        let tampered = block.replace("Count=8", "Count=9");
        assert!(check_written(tampered.as_bytes(), &node(), &tampered).is_err());
        assert!(check_written(b"Name=gpu Fiel=x\n", &node(), &block).is_err());
        assert!(check_written(b"", &node(), &block).is_err());
    }
}
