//! Putting the block into a gres.conf text: only the node's own block is
//! replaced, lines outside it that claim the node's devices are reported.

use anyhow::Result;

use super::block::markers;
use crate::error::invalid;
use crate::gres::conf;

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
pub(super) fn block_range(text: &str, node: &str) -> Option<(usize, usize)> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::exit_code_for;
    use crate::gres::render::fixtures::{minors, node};

    use crate::gres::render::{check_written, render_block, RenderOptions};

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
}
