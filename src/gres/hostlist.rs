//! Slurm's bracketed name lists: `node[01-04,7]`, `/dev/nvidia[0-3]`, `a[1-2]b[3-4]`.

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

/// `0-3,7` → `["0","1","2","3","7"]`, keeping the lower bound's zero padding.
fn expand_ranges(inside: &str, item: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for part in inside.split(',') {
        let part = part.trim();
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        let number = |s: &str| -> Result<u64, String> {
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) || s.len() > 18 {
                Err(format!(
                    "`{item}`: `{part}` is not a number or a range like `0-3`"
                ))
            } else {
                s.parse()
                    .map_err(|_| format!("`{item}`: `{part}` is out of range"))
            }
        };
        let (a, b) = (number(lo)?, number(hi)?);
        if b < a {
            return Err(format!("`{item}`: range `{part}` goes backwards"));
        }
        if (b - a) as usize >= MAX_NAMES || out.len() + ((b - a) as usize) >= MAX_NAMES {
            return Err(format!("`{item}` expands to more than {MAX_NAMES} names"));
        }
        let width = if lo.len() > 1 && lo.starts_with('0') {
            lo.len()
        } else {
            0
        };
        out.extend((a..=b).map(|v| format!("{v:0width$}")));
    }
    Ok(out)
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
}
