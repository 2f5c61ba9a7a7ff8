//! The blocks node-setup wrote into the current gres.conf (between
//! `gres::render`'s markers), kept when the script rewrites the file.

use crate::gres::render::{BEGIN_MARKER, END_MARKER};

/// Every node-setup block of `existing`, markers included, in file order,
/// except those of nodes `drop` refuses. A block runs from a line starting
/// with the begin marker and a blank to the next line starting with the end
/// marker and a blank; a block without its end runs to the end of the file.
/// Each kept line ends in `\n`.
pub fn node_setup_blocks(existing: &str, keep: impl Fn(&str) -> bool) -> String {
    let begin = format!("{BEGIN_MARKER} ");
    let end = format!("{END_MARKER} ");
    let mut out = String::new();
    let (mut inside, mut skip) = (false, false);
    let body = existing.strip_suffix('\n').unwrap_or(existing);
    if existing.is_empty() {
        return out;
    }
    for line in body.split('\n') {
        if let Some(rest) = line.strip_prefix(&begin) {
            inside = true;
            let node = rest
                .split([' ', '\t'])
                .find(|w| !w.is_empty())
                .unwrap_or("");
            skip = !keep(node);
        }
        if inside && !skip {
            out.push_str(line);
            out.push('\n');
        }
        if line.starts_with(&end) {
            inside = false;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXISTING: &str = "\
# managed by yolo-sched slurm/cluster.sh
NodeName=node1 AutoDetect=off Name=gpu Type=a100 File=/dev/x/nvidia6
# BEGIN yolo-sched node-setup mig1
# Written by `yolo-sched node-setup`; this block is replaced on every run.
NodeName=mig1 AutoDetect=off Name=gpu Type=1g.5gb MultipleFiles=/a,/b,/c
# END yolo-sched node-setup mig1
# between
# BEGIN yolo-sched node-setup\tgpu7
NodeName=gpu7 AutoDetect=off Name=gpu Type=a100 File=/dev/nvidia0
# END yolo-sched node-setup gpu7
";

    #[test]
    fn blocks_are_kept_as_they_are_and_dropped_by_node() {
        let all = node_setup_blocks(EXISTING, |_| true);
        assert!(
            all.starts_with("# BEGIN yolo-sched node-setup mig1\n"),
            "{all}"
        );
        assert!(!all.contains("# between"));
        // A tab is not the marker's blank: that block's begin line is not one.
        assert_eq!(all.lines().count(), 4);
        let no_mig = node_setup_blocks(EXISTING, |n| n != "mig1");
        assert_eq!(no_mig, "");
        let text = EXISTING.replace("setup\tgpu7", "setup gpu7");
        let no_mig = node_setup_blocks(&text, |n| n != "mig1");
        assert!(no_mig.starts_with("# BEGIN yolo-sched node-setup gpu7\n"));
        assert_eq!(no_mig.lines().count(), 3);
    }

    #[test]
    fn an_unterminated_block_runs_to_the_end_and_gets_its_newline() {
        let text = "x\n# BEGIN yolo-sched node-setup n\nline";
        assert_eq!(
            node_setup_blocks(text, |_| true),
            "# BEGIN yolo-sched node-setup n\nline\n"
        );
        assert_eq!(node_setup_blocks("", |_| true), "");
    }
}
