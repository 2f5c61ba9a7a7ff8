//! Slurm's bracketed name lists: `node[01-04,7]`, `/dev/nvidia[0-3]`,
//! `a[1-2]b[3-4]`; and the one reader of Slurm's index ranges ([`spans`]:
//! `0-3,7`, `1-9:2`), which every list of indices Slurm prints or takes is
//! read by: host lists here, array task lists (`squeue::parse_task_list`,
//! `squeue::read::array_task_count`), GRES indices (`slurm::gres`) and the job's
//! GPU indices (`agent::devices`). On the floor below `slurm` because
//! gres.conf's host and device lists need it too.

/// The most names one list may expand to; more is certainly a typo.
pub const MAX_NAMES: usize = 65_536;

/// Expand a comma-separated list whose items may contain bracketed ranges.
/// Zero padding follows the lower bound as written (`[08-10]` → `08 09 10`).
/// The error is a sentence without location; callers add file and line.
pub fn expand(list: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for item in split_top_level(list)? {
        if item.is_empty() {
            return Err(format!("`{list}` has an empty item"));
        }
        let mut names = vec![String::new()];
        let mut rest = item;
        while let Some(open) = rest.find('[') {
            let close = rest[open..]
                .find(']')
                .map(|c| open + c)
                .ok_or_else(|| format!("`{item}` has `[` without `]`"))?;
            let prefix = &rest[..open];
            if prefix.contains(']') {
                return Err(format!("`{item}` has `]` without `[`"));
            }
            let values = expand_ranges(&rest[open + 1..close], item)?;
            let mut next = Vec::with_capacity(names.len() * values.len());
            for n in &names {
                for v in &values {
                    next.push(format!("{n}{prefix}{v}"));
                }
            }
            if out.len() + next.len() > MAX_NAMES {
                return Err(format!("`{list}` expands to more than {MAX_NAMES} names"));
            }
            names = next;
            rest = &rest[close + 1..];
        }
        if rest.contains(']') {
            return Err(format!("`{item}` has `]` without `[`"));
        }
        out.extend(names.into_iter().map(|n| n + rest));
        if out.len() > MAX_NAMES {
            return Err(format!("`{list}` expands to more than {MAX_NAMES} names"));
        }
    }
    Ok(out)
}

/// Split at commas outside brackets.
fn split_top_level(list: &str) -> Result<Vec<&str>, String> {
    let mut items = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in list.char_indices() {
        match c {
            '[' if depth > 0 => return Err(format!("`{list}` has nested `[`")),
            '[' => depth = 1,
            ']' => depth = 0,
            ',' if depth == 0 => {
                items.push(list[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(list[start..].trim());
    Ok(items)
}

/// One part of an index range list: `7`, `0-3`, `0-10:2` (every second).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub lo: u64,
    pub hi: u64,
    /// At least 1.
    pub step: u64,
    /// Digits of zero padding, from the lower bound as written (`08` → 2), else 0.
    pub width: usize,
}

impl Span {
    /// How many indices the part stands for.
    pub fn count(&self) -> u64 {
        ((self.hi - self.lo) / self.step).saturating_add(1)
    }

    /// The indices, in order.
    pub fn values(&self) -> impl Iterator<Item = u64> {
        let step = usize::try_from(self.step).unwrap_or(usize::MAX);
        (self.lo..=self.hi).step_by(step)
    }
}

/// Read an index range list (`0-3,7`, `08-10`, `0-10:2`; each part trimmed)
/// by the one rule: each part is a number or `lo-hi` with `lo <= hi`, both
/// digits that fit 64 bits, optionally `:step` with a step of at least 1.
/// Nothing is expanded here, so a huge range costs nothing; the error names
/// the part.
pub fn spans(list: &str) -> Result<Vec<Span>, String> {
    list.split(',')
        .map(|part| {
            let part = part.trim();
            let (range, step) = match part.split_once(':') {
                Some((r, s)) => (r, Some(s)),
                None => (part, None),
            };
            let (lo, hi) = range.split_once('-').unwrap_or((range, range));
            let number = |s: &str| -> Result<u64, String> {
                if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                    Err(format!("`{part}` is not a number or a range like `0-3`"))
                } else {
                    s.parse().map_err(|_| format!("`{part}` is out of range"))
                }
            };
            let (a, b) = (number(lo)?, number(hi)?);
            if b < a {
                return Err(format!("range `{part}` goes backwards"));
            }
            let step = match step {
                Some(s) => number(s)?,
                None => 1,
            };
            if step == 0 {
                return Err(format!("`{part}` has a step of 0"));
            }
            let width = if lo.len() > 1 && lo.starts_with('0') {
                lo.len()
            } else {
                0
            };
            Ok(Span {
                lo: a,
                hi: b,
                step,
                width,
            })
        })
        .collect()
}

/// Every index of a range list ([`spans`]), at most `limit` of them (more is
/// an error that says so).
pub fn indices(list: &str, limit: u64) -> Result<Vec<u64>, String> {
    let spans = spans(list)?;
    let total = spans.iter().fold(0u64, |t, s| t.saturating_add(s.count()));
    if total > limit {
        return Err(format!("`{list}` stands for more than {limit} indices"));
    }
    Ok(spans.iter().flat_map(Span::values).collect())
}

/// `0-3,7` → `["0","1","2","3","7"]`, keeping the lower bound's zero padding.
fn expand_ranges(inside: &str, item: &str) -> Result<Vec<String>, String> {
    let spans = spans(inside).map_err(|e| format!("`{item}`: {e}"))?;
    let total = spans.iter().fold(0u64, |t, s| t.saturating_add(s.count()));
    if total > MAX_NAMES as u64 {
        return Err(format!("`{item}` expands to more than {MAX_NAMES} names"));
    }
    Ok(spans
        .iter()
        .flat_map(|s| {
            let width = s.width;
            s.values().map(move |v| format!("{v:0width$}"))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_ranges() {
        assert_eq!(
            expand("/dev/nvidia[0-3]").unwrap(),
            [
                "/dev/nvidia0",
                "/dev/nvidia1",
                "/dev/nvidia2",
                "/dev/nvidia3"
            ]
        );
        assert_eq!(
            expand("/dev/nvidia0,/dev/nvidia-caps/nvidia-cap[21-22]").unwrap(),
            [
                "/dev/nvidia0",
                "/dev/nvidia-caps/nvidia-cap21",
                "/dev/nvidia-caps/nvidia-cap22"
            ]
        );
        assert_eq!(expand("/dev/nvidia7").unwrap(), ["/dev/nvidia7"]);
    }

    #[test]
    fn zero_padding_and_lists_inside_brackets() {
        assert_eq!(
            expand("node[08-10]").unwrap(),
            ["node08", "node09", "node10"]
        );
        assert_eq!(
            expand("node[1-2,05]").unwrap(),
            ["node1", "node2", "node05"]
        );
        assert_eq!(expand("n[9-10]").unwrap(), ["n9", "n10"]);
        assert_eq!(
            expand("a[1-2]b[0-1]").unwrap(),
            ["a1b0", "a1b1", "a2b0", "a2b1"]
        );
        assert_eq!(expand("gpu1, gpu2").unwrap(), ["gpu1", "gpu2"]);
    }

    #[test]
    fn mistakes_are_errors() {
        for bad in [
            "node[1-",
            "node1]",
            "node[3-1]",
            "node[a-b]",
            "n[[1]]",
            "a,,b",
            "n[0-99999999]",
            "n[]",
        ] {
            assert!(expand(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_one_range_rule() {
        let s = spans("0-3,5, 7-11:2,08").unwrap();
        let all: Vec<u64> = s.iter().flat_map(Span::values).collect();
        assert_eq!(all, [0, 1, 2, 3, 5, 7, 9, 11, 8]);
        assert_eq!(s.iter().map(Span::count).sum::<u64>(), 9);
        assert_eq!(s[3].width, 2);
        assert_eq!(
            spans("0-18446744073709551615").unwrap()[0].count(),
            u64::MAX,
            "counted, never expanded"
        );
        for bad in [
            "",
            "N/A",
            "(null)",
            "3-1",
            "x",
            "1-",
            "-1",
            "1,,2",
            "0-4:0",
            "1-2:x",
            "18446744073709551616",
        ] {
            assert!(spans(bad).is_err(), "{bad:?}");
        }
        assert_eq!(indices("0-3,5", 10).unwrap(), [0, 1, 2, 3, 5]);
        assert!(indices("0-3,5", 4).is_err());
        assert_eq!(
            expand("node[1-3,5]").unwrap(),
            ["node1", "node2", "node3", "node5"]
        );
    }
}
