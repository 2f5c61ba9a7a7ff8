//! A unified diff of two texts, for `--dry-run` ("what would change in gres.conf").

/// Lines of context around each change.
const CONTEXT: usize = 3;

/// Above this many cells in the comparison table the changed middle is shown
/// as one replacement instead of a minimal diff (files this big are not gres.conf).
const MAX_CELLS: usize = 4_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Same,
    Del,
    Add,
}

/// `--- old_name` / `+++ new_name` and `@@ -a,b +c,d @@` hunks; empty when the texts are equal.
pub fn unified_diff(old: &str, new: &str, old_name: &str, new_name: &str) -> String {
    if old == new {
        return String::new();
    }
    let a: Vec<&str> = old.lines().collect();
    let b: Vec<&str> = new.lines().collect();
    let ops = edit_script(&a, &b);

    let mut out = format!("--- {old_name}\n+++ {new_name}\n");
    // Positions (in a and b) at the start of each op.
    let mut pos = Vec::with_capacity(ops.len());
    let (mut i, mut j) = (0usize, 0usize);
    for op in &ops {
        pos.push((i, j));
        match op {
            Op::Same => {
                i += 1;
                j += 1;
            }
            Op::Del => i += 1,
            Op::Add => j += 1,
        }
    }
    let changed: Vec<usize> = (0..ops.len()).filter(|&k| ops[k] != Op::Same).collect();
    let mut k = 0;
    while k < changed.len() {
        let start = changed[k].saturating_sub(CONTEXT);
        let mut end = changed[k];
        while k + 1 < changed.len() && changed[k + 1] <= end + 2 * CONTEXT + 1 {
            k += 1;
            end = changed[k];
        }
        let stop = (end + CONTEXT + 1).min(ops.len());
        let (a0, b0) = pos[start];
        let a_len = ops[start..stop].iter().filter(|o| **o != Op::Add).count();
        let b_len = ops[start..stop].iter().filter(|o| **o != Op::Del).count();
        out.push_str(&format!(
            "@@ -{} +{} @@\n",
            range(a0, a_len),
            range(b0, b_len)
        ));
        for (op, &(ai, bj)) in ops[start..stop].iter().zip(&pos[start..stop]) {
            match op {
                Op::Same => out.push_str(&format!(" {}\n", a[ai])),
                Op::Del => out.push_str(&format!("-{}\n", a[ai])),
                Op::Add => out.push_str(&format!("+{}\n", b[bj])),
            }
        }
        k += 1;
    }
    out
}

/// `start,len` in unified-diff form (1-based; an empty range names the line before).
fn range(start: usize, len: usize) -> String {
    if len == 0 {
        format!("{start},0")
    } else {
        format!("{},{len}", start + 1)
    }
}

/// Shortest edit script: common prefix and suffix, then a longest-common-
/// subsequence table over the changed middle.
fn edit_script(a: &[&str], b: &[&str]) -> Vec<Op> {
    let prefix = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let suffix = a[prefix..]
        .iter()
        .rev()
        .zip(b[prefix..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let am = &a[prefix..a.len() - suffix];
    let bm = &b[prefix..b.len() - suffix];
    let mut ops = vec![Op::Same; prefix];
    if (am.len() + 1).saturating_mul(bm.len() + 1) > MAX_CELLS {
        ops.extend(std::iter::repeat_n(Op::Del, am.len()));
        ops.extend(std::iter::repeat_n(Op::Add, bm.len()));
    } else {
        // lcs[i][j] = LCS length of am[i..] and bm[j..].
        let w = bm.len() + 1;
        let mut lcs = vec![0u32; (am.len() + 1) * w];
        for i in (0..am.len()).rev() {
            for j in (0..bm.len()).rev() {
                lcs[i * w + j] = if am[i] == bm[j] {
                    lcs[(i + 1) * w + j + 1] + 1
                } else {
                    lcs[(i + 1) * w + j].max(lcs[i * w + j + 1])
                };
            }
        }
        let (mut i, mut j) = (0, 0);
        while i < am.len() || j < bm.len() {
            if i < am.len() && j < bm.len() && am[i] == bm[j] {
                ops.push(Op::Same);
                i += 1;
                j += 1;
            } else if i < am.len() && (j == bm.len() || lcs[(i + 1) * w + j] >= lcs[i * w + j + 1])
            {
                // Deletions before additions, as diff(1) prints them.
                ops.push(Op::Del);
                i += 1;
            } else {
                ops.push(Op::Add);
                j += 1;
            }
        }
    }
    ops.extend(std::iter::repeat_n(Op::Same, suffix));
    ops
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_texts_have_no_diff() {
        assert_eq!(unified_diff("a\nb\n", "a\nb\n", "old", "new"), "");
    }

    #[test]
    fn a_changed_line_in_the_middle() {
        let old = "1\n2\n3\n4\n5\n6\n7\n8\n9\n";
        let new = "1\n2\n3\n4\nFIVE\n6\n7\n8\n9\n";
        assert_eq!(
            unified_diff(old, new, "gres.conf", "gres.conf (new)"),
            "--- gres.conf\n+++ gres.conf (new)\n@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+FIVE\n 6\n 7\n 8\n"
        );
    }

    #[test]
    fn appending_to_an_empty_file() {
        assert_eq!(
            unified_diff("", "a\nb\n", "o", "n"),
            "--- o\n+++ n\n@@ -0,0 +1,2 @@\n+a\n+b\n"
        );
    }

    #[test]
    fn far_apart_changes_make_two_hunks() {
        let old: String = (1..=30).map(|i| format!("{i}\n")).collect();
        let new: String = (1..=30)
            .map(|i| match i {
                3 => "three\n".to_string(),
                27 => "twenty-seven\n".to_string(),
                _ => format!("{i}\n"),
            })
            .collect();
        let d = unified_diff(&old, &new, "o", "n");
        assert_eq!(d.matches("@@ -").count(), 2, "{d}");
        assert!(d.contains("-3\n+three\n"));
        assert!(d.contains("-27\n+twenty-seven\n"));
    }

    #[test]
    fn applying_the_script_rebuilds_the_new_text() {
        let old = ["a", "b", "c", "d", "e"];
        let new = ["b", "x", "c", "e", "f"];
        let ops = edit_script(&old, &new);
        let (mut i, mut j) = (0, 0);
        let mut rebuilt = Vec::new();
        for op in ops {
            match op {
                Op::Same => {
                    assert_eq!(old[i], new[j]);
                    rebuilt.push(old[i]);
                    i += 1;
                    j += 1;
                }
                Op::Del => i += 1,
                Op::Add => {
                    rebuilt.push(new[j]);
                    j += 1;
                }
            }
        }
        assert_eq!(rebuilt, new);
        assert_eq!((i, j), (5, 5));
    }
}
