//! GRES strings as Slurm prints them.
//!
//! Forms seen from 22.05: `gpu:1g.5gb:4` (node config), `gpu:2g.10gb:1(IDX:4)`
//! and `gpu:1g.5gb:0(IDX:N/A)` (in use), `gpu:a100:2(S:0-1)` (socket
//! affinity), `gres:gpu:1g.5gb:1` (`tres_per_node` of a job), untyped
//! `gpu:2` and `gpu`. Commas separate items, but index lists inside
//! parentheses (`IDX:0,2-3`) contain commas too.

/// One GRES item: name, optional type, count, and the device indices when Slurm gave them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GresItem {
    pub name: String,
    pub kind: Option<String>,
    pub count: u64,
    pub indices: Option<Vec<u32>>,
}

impl GresItem {
    /// `gpu:1g.5gb` or `gpu` — the key reports group by.
    pub fn key(&self) -> String {
        match &self.kind {
            Some(k) => format!("{}:{}", self.name, k),
            None => self.name.clone(),
        }
    }
}

/// Split at commas that are not inside parentheses.
fn split_items(s: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                items.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&s[start..]);
    items
        .into_iter()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect()
}

/// Expand `0-1,4` into `[0, 1, 4]` by the one range rule
/// (`gres::hostlist::spans`), at most 100,001 indices of 32 bits.
pub fn parse_index_list(s: &str) -> Option<Vec<u32>> {
    crate::gres::hostlist::indices(s, 100_001)
        .ok()?
        .into_iter()
        .map(|i| u32::try_from(i).ok())
        .collect()
}

/// Parse one item such as `gpu:2g.10gb:1(IDX:4)`.
pub fn parse_item(raw: &str) -> Option<GresItem> {
    let raw = raw.trim();
    let raw = raw.strip_prefix("gres:").unwrap_or(raw);
    let raw = raw.strip_prefix("gres/").unwrap_or(raw);
    let (body, extra) = match raw.find('(') {
        Some(p) => (&raw[..p], Some(raw[p + 1..].trim_end_matches(')'))),
        None => (raw, None),
    };
    let parts: Vec<&str> = body.split(':').collect();
    let (name, kind, count) = match parts.as_slice() {
        [name] => (*name, None, 1),
        [name, last] => match last.parse::<u64>() {
            Ok(n) => (*name, None, n),
            // All digits past u64 is a count no one can hold, not a type.
            Err(_) if !last.is_empty() && last.bytes().all(|b| b.is_ascii_digit()) => return None,
            Err(_) => (*name, Some(*last), 1),
        },
        [name, kind, count] => (*name, Some(*kind), count.parse::<u64>().ok()?),
        _ => return None,
    };
    if name.is_empty() {
        return None;
    }
    let indices = extra.and_then(|e| {
        e.split_once("IDX:").and_then(|(_, list)| {
            if list.starts_with("N/A") {
                Some(Vec::new())
            } else {
                parse_index_list(list)
            }
        })
    });
    Some(GresItem {
        name: name.to_string(),
        kind: kind.map(str::to_string),
        count,
        indices,
    })
}

/// Parse a comma-separated list. Unparseable items are skipped: a newer Slurm
/// may print forms we do not know, and one odd item must not hide the others.
pub fn parse_list(s: &str) -> Vec<GresItem> {
    let s = s.trim();
    if super::value::is_null(s) {
        return Vec::new();
    }
    split_items(s).into_iter().filter_map(parse_item).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_all_digit_count_past_u64_is_no_item_not_a_type() {
        // Issue 32, item 7: `gres/gpu=18446744073709551616` was read as the type `18446744073709551616`.
        assert_eq!(parse_item("gpu:18446744073709551616"), None);
        assert_eq!(
            parse_item("gpu:18446744073709551615").map(|g| g.count),
            Some(u64::MAX)
        );
        assert_eq!(
            parse_item("gpu:a100").and_then(|g| g.kind),
            Some("a100".to_string())
        );
    }

    #[test]
    fn node_config_list() {
        let items = parse_list("gpu:1g.5gb:4,gpu:2g.10gb:2,gpu:a100:1,shard:1g.5gb:0,shard:a100:8");
        assert_eq!(items.len(), 5);
        assert_eq!(items[0].key(), "gpu:1g.5gb");
        assert_eq!(items[0].count, 4);
        assert_eq!(items[4].key(), "shard:a100");
        assert_eq!(items[4].count, 8);
    }

    #[test]
    fn used_list_with_indices() {
        let items = parse_list("gpu:1g.5gb:2(IDX:0,2),gpu:2g.10gb:0(IDX:N/A),gpu:a100:1(IDX:6)");
        assert_eq!(items.len(), 3);
        assert_eq!(items[0].indices, Some(vec![0, 2]));
        assert_eq!(items[1].indices, Some(vec![]));
        assert_eq!(items[2].indices, Some(vec![6]));
        let r = parse_item("gpu:1g.5gb:3(IDX:0-2)").unwrap();
        assert_eq!(r.indices, Some(vec![0, 1, 2]));
    }

    #[test]
    fn job_request_forms() {
        let it = parse_item("gres:gpu:1g.5gb:1").unwrap();
        assert_eq!(
            (it.name.as_str(), it.kind.as_deref(), it.count),
            ("gpu", Some("1g.5gb"), 1)
        );
        let it = parse_item("gpu:2").unwrap();
        assert_eq!((it.kind, it.count), (None, 2));
        let it = parse_item("shard:a100").unwrap();
        assert_eq!((it.kind.as_deref(), it.count), (Some("a100"), 1));
        let it = parse_item("gres/gpu:1g.5gb=1");
        assert!(it.is_none() || it.unwrap().name == "gpu");
    }

    #[test]
    fn socket_affinity_is_ignored() {
        let it = parse_item("gpu:a100:2(S:0-1)").unwrap();
        assert_eq!(it.count, 2);
        assert_eq!(it.indices, None);
    }

    #[test]
    fn empty_forms() {
        assert!(parse_list("").is_empty());
        assert!(parse_list("(null)").is_empty());
        assert!(parse_list("N/A").is_empty());
    }
}
