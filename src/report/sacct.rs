//! Slice-hours per user, account and type in a time window, from the rows of
//! one `sacct` call (`slurm::sacct::window_row`, allocations only).

use std::collections::{BTreeMap, HashMap};

use chrono::NaiveDateTime;

use super::model::{AccountingState, AccountingStatus};
use crate::slurm::squeue::read::gres_in_tres;
use crate::slurm::squeue::Filter;
use crate::slurm::squeue::SEPARATOR;

/// What a failed `sacct` means for the report.
pub fn failure_state(stderr: &str, status: &str) -> AccountingState {
    let text = stderr.trim();
    if crate::slurm::states::accounting_off(text) {
        return AccountingState {
            status: AccountingStatus::Disabled,
            message: Some(format!(
                "this cluster keeps no job accounting (sacct: \"{text}\"); slice-hours need slurmdbd \
                 (AccountingStorageType=accounting_storage/slurmdbd), and per-profile figures need \
                 typed GRES in AccountingStorageTRES"
            )),
        };
    }
    let detail = if text.is_empty() { status } else { text };
    AccountingState {
        status: AccountingStatus::Failed,
        message: Some(format!("sacct failed: {detail}")),
    }
}

/// Slice-hours keyed by (user, account, type).
pub type SliceHours = BTreeMap<(String, String, String), f64>;

/// What `parse` found.
#[derive(Debug, Clone, Default)]
pub struct Parsed {
    pub hours: SliceHours,
    pub unparsed_lines: u64,
    /// Per type: slice-seconds in each of `SERIES_BUCKETS` equal buckets of the window.
    pub series: BTreeMap<String, Vec<f64>>,
    pub bucket_seconds: i64,
}

/// How many buckets the window's usage series has (the HTML chart's points).
pub const SERIES_BUCKETS: usize = 48;

/// Add `count` slices held over [from, end] to the per-bucket slice-seconds.
fn add_to_series(
    series: &mut [f64],
    since: NaiveDateTime,
    bucket: i64,
    from: NaiveDateTime,
    end: NaiveDateTime,
    count: u64,
) {
    let (a, b) = ((from - since).num_seconds(), (end - since).num_seconds());
    let first = (a / bucket).max(0) as usize;
    let last = ((b - 1).max(0) / bucket) as usize;
    for (i, slot) in series.iter_mut().enumerate().take(last + 1).skip(first) {
        let (lo, hi) = (i as i64 * bucket, (i as i64 + 1) * bucket);
        let overlap = (b.min(hi) - a.max(lo)).max(0);
        *slot += overlap as f64 * count as f64;
    }
}

/// Sum slice-hours inside [since, now] from `--parsable2` lines. Jobs still
/// running (`End=Unknown`) count up to `now`; jobs that never started count
/// nothing. A job allocated `gres/gpu=1` only (no typed accounting) counts as
/// type `gpu`.
pub fn parse(text: &str, since: NaiveDateTime, now: NaiveDateTime, filter: &Filter) -> Parsed {
    let mut out = Parsed::default();
    let window = (now - since).num_seconds().max(1);
    out.bucket_seconds = (window + SERIES_BUCKETS as i64 - 1) / SERIES_BUCKETS as i64;
    // A day of accounting repeats the same few TRES strings and users; both
    // are resolved once (the key is user, account and type joined by 0x1F).
    let mut types_of: HashMap<&str, Vec<(String, u64)>> = HashMap::new();
    let mut hours_by_key: HashMap<String, f64> = HashMap::new();
    let mut key = String::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let Ok(row) = crate::slurm::sacct::window_row(line) else {
            out.unparsed_lines += 1;
            continue;
        };
        let (user, account, tres) = (row.user, row.account, row.alloc_tres);
        if filter.user.as_deref().is_some_and(|u| u != user)
            || filter.account.as_deref().is_some_and(|a| a != account)
            || filter
                .partition
                .as_deref()
                .is_some_and(|p| !row.partition.split(',').any(|x| x == p))
        {
            continue;
        }
        let Some(start) = row.start else {
            continue;
        };
        let end = row.end.unwrap_or(now).min(now);
        let from = start.max(since);
        if end <= from {
            continue;
        }
        let hours = (end - from).num_seconds() as f64 / 3600.0;
        let types = types_of.entry(tres).or_insert_with(|| slice_types(tres));
        for (kind, count) in types.iter() {
            let series = out
                .series
                .entry(kind.clone())
                .or_insert_with(|| vec![0.0; SERIES_BUCKETS]);
            add_to_series(series, since, out.bucket_seconds, from, end, *count);
            key.clear();
            for part in [user, account, kind.as_str()] {
                key.push_str(part);
                key.push(SEPARATOR);
            }
            let add = hours * *count as f64;
            match hours_by_key.get_mut(key.as_str()) {
                Some(h) => *h += add,
                None => {
                    hours_by_key.insert(key.clone(), add);
                }
            }
        }
    }
    // Collected and sorted once: `from_iter` bulk-builds the tree.
    out.hours = hours_by_key
        .into_iter()
        .map(|(key, hours)| {
            let mut parts = key.split(SEPARATOR);
            let mut next = || parts.next().unwrap_or("").to_string();
            ((next(), next(), next()), hours)
        })
        .collect();
    out
}

/// GRES types and counts of one AllocTRES string; only the untyped total
/// when the site does not account typed GRES.
fn slice_types(tres: &str) -> Vec<(String, u64)> {
    let items = gres_in_tres(tres);
    let typed = items.iter().any(|g| g.kind.is_some());
    items
        .into_iter()
        .filter(|g| g.kind.is_some() || !typed)
        .map(|g| (g.key(), g.count))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> NaiveDateTime {
        crate::slurm::time::parse_time(s).unwrap()
    }

    #[test]
    fn disabled_accounting_is_recognised() {
        let s = failure_state("Slurm accounting storage is disabled\n", "exit status 1");
        assert_eq!(s.status, AccountingStatus::Disabled);
        assert!(s.message.unwrap().contains("slurmdbd"));
        let s = failure_state(
            "sacct: error: Problem talking to the database: Connection refused",
            "exit status 1",
        );
        assert_eq!(s.status, AccountingStatus::Failed);
        assert!(s.message.unwrap().contains("Connection refused"));
    }

    #[test]
    fn hours_are_clipped_to_the_window() {
        let since = t("2026-11-30T00:00:00");
        let now = t("2026-11-30T12:00:00");
        let text = "\
1|gpu|proj|alice|COMPLETED|2026-11-29T22:00:00|2026-11-29T23:00:00|2026-11-30T02:00:00|10800|60||billing=1,cpu=1,gres/gpu:1g.5gb=1,gres/gpu=1,node=1||
2|gpu|proj|alice|RUNNING|2026-11-30T10:00:00|2026-11-30T10:00:00|Unknown|0|60||cpu=1,gres/gpu:2g.10gb=2,gres/gpu=2,node=1||
3|gpu||bob|COMPLETED|2026-11-30T01:00:00|2026-11-30T01:00:00|2026-11-30T01:30:00|1800|60||cpu=1,gres/gpu=1,node=1||
4|cpu||bob|PENDING|2026-11-30T01:00:00|Unknown|Unknown|0|60||||
5|gpu|x|carol|COMPLETED|2026-11-28T00:00:00|2026-11-28T01:00:00|2026-11-28T02:00:00|3600|60||gres/gpu:1g.5gb=1||
garbage line
";
        let p = parse(text, since, now, &Filter::default());
        assert_eq!(p.unparsed_lines, 1);
        let key = |u: &str, a: &str, k: &str| (u.to_string(), a.to_string(), k.to_string());
        assert_eq!(p.hours[&key("alice", "proj", "gpu:1g.5gb")], 2.0);
        assert_eq!(p.hours[&key("alice", "proj", "gpu:2g.10gb")], 4.0);
        assert_eq!(p.hours[&key("bob", "", "gpu")], 0.5);
        assert_eq!(p.hours.len(), 3);
        let only_bob = parse(
            text,
            since,
            now,
            &Filter {
                user: Some("bob".into()),
                ..Filter::default()
            },
        );
        assert_eq!(only_bob.hours.len(), 1);
        // 12 h in 48 buckets of 15 min: the 2g.10gb pair from 10:00 fills the last 8.
        assert_eq!(p.bucket_seconds, 900);
        let s = &p.series["gpu:2g.10gb"];
        assert_eq!(s.iter().filter(|v| **v > 0.0).count(), 8);
        assert_eq!(s[47], 2.0 * 900.0);
        // 1g.5gb from the window's start to 02:00: 8 buckets of one slice.
        let s = &p.series["gpu:1g.5gb"];
        assert_eq!(s[..8], [900.0; 8]);
        assert_eq!(s[8], 0.0);
        let total: f64 = p.series.values().flatten().sum();
        let hours: f64 = p.hours.values().sum();
        assert!((total / 3600.0 - hours).abs() < 1e-9);
    }
}
