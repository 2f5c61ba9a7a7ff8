//! The typed readers of squeue's fields ([`super::Field`]), one per kind of
//! value, so a field means the same in every query: text through
//! `slurm::value::present`, time stamps through `slurm::time::parse_time`,
//! durations through `slurm::time::parse_duration`, task lists and ranges
//! through `gres::hostlist`, GRES through `slurm::gres`. Pure.

use chrono::{DateTime, NaiveDateTime, Utc};

use crate::slurm::gres::{self, GresItem};
use crate::slurm::time::{parse_duration, parse_time, to_utc};
use crate::slurm::value::present;

/// A text field (`UserName`, `Account`, `NodeList`, `WorkDir`, `Reason`,
/// `Comment`, TRES, …): trimmed, and `""` for Slurm's placeholders
/// (`(null)`, `N/A`, `None`).
pub fn text(col: &str) -> &str {
    present(col)
}

/// A field printed as Slurm's own word or id (`State`, `JobID`, `Name`,
/// `TimeUsed`): trimmed, placeholders kept.
pub fn word(col: &str) -> &str {
    col.trim()
}

/// A time stamp (`SubmitTime`, `StartTime`, `EndTime`): the cluster's local
/// wall clock; none for `N/A` and anything else.
pub fn stamp(col: &str) -> Option<NaiveDateTime> {
    parse_time(col)
}

/// A time stamp as an instant (`slurm::time::to_utc`).
pub fn instant(col: &str) -> Option<DateTime<Utc>> {
    parse_time(col).and_then(to_utc)
}

/// A duration (`TimeLimit`, `TimeLeft`) in seconds; none for `UNLIMITED`,
/// `NOT_SET`, zero and anything else.
pub fn seconds(col: &str) -> Option<u64> {
    parse_duration(col.trim()).ok()
}

/// Slurm's NO_VAL for 32-bit counts (printed for unset values).
const NO_VAL32: u64 = 0xffff_fffe;

/// A count (`NumNodes`, `NumTasks`): its leading digits; none when absent or
/// Slurm's NO_VAL or INFINITE.
pub fn count(col: &str) -> Option<u64> {
    let end = col.find(|c: char| !c.is_ascii_digit()).unwrap_or(col.len());
    col[..end].parse().ok().filter(|n| *n < NO_VAL32)
}

/// An id (`ArrayJobID`, or the leading job id of `JobArrayID`: `15`, `15_3`,
/// `15_[0-9%2]` → 15).
pub fn leading_id(col: &str) -> Option<u64> {
    let col = col.trim();
    let end = col.find(|c: char| !c.is_ascii_digit()).unwrap_or(col.len());
    col[..end].parse().ok()
}

/// `exit_code`: the exit code of the job's script, when it has one. Slurm
/// prints the raw wait status, the exit code in the high byte.
pub fn exit_code(col: &str) -> Option<i32> {
    col.trim()
        .parse::<i32>()
        .ok()
        .map(|raw| if raw > 255 { raw >> 8 } else { raw })
}

/// The most task ids one list expands to (Slurm's largest `MaxArraySize`
/// is 4,000,001).
pub const MAX_TASKS: u64 = 4_000_001;

/// Expand `4-9%2`, `[1,3,5-6]`, `0-10:2`, `7` (`ArrayTaskID`, or what
/// follows `_` in a `JobArrayID`) into task ids (throttle suffix dropped) by
/// the one range rule (`gres::hostlist::spans`); empty for anything else
/// (`N/A`, a list past [`MAX_TASKS`] or past 32-bit ids).
pub fn parse_task_list(s: &str) -> Vec<u32> {
    let s = s.trim().trim_start_matches('[').trim_end_matches(']');
    let s = s.split('%').next().unwrap_or("");
    crate::gres::hostlist::indices(s, MAX_TASKS)
        .ok()
        .and_then(|ids| ids.into_iter().map(|i| u32::try_from(i).ok()).collect())
        .unwrap_or_default()
}

/// How many array tasks a `JobArrayID` such as `15_[0-9%2]` or
/// `15_[1,3,5-7]` stands for; 1 for a plain job id or a single task. The
/// ranges are read by the one rule (`gres::hostlist::spans`): counted, never
/// expanded, saturating.
pub fn array_task_count(job_id: &str) -> Option<u64> {
    let Some(open) = job_id.find("_[") else {
        return Some(1);
    };
    let inner = job_id[open + 2..].strip_suffix(']')?;
    // `%N` is the throttle (tasks allowed to run at once), not part of the set.
    let inner = inner.split('%').next()?;
    let spans = crate::gres::hostlist::spans(inner).ok()?;
    Some(
        spans
            .iter()
            .fold(0u64, |total, s| total.saturating_add(s.count())),
    )
}

/// GRES out of a TRES field (`tres-per-node`, `tres-per-job`,
/// `tres-per-task`, `tres-alloc`) in any of the forms Slurm versions print:
/// `gres:gpu:1g.5gb:1` (22.05 tres-per-*), `gres/gpu:1g.5gb:1` and
/// `gres/gpu:1g.5gb=1` (newer, and tres-alloc). Other TRES (`cpu=1`,
/// `mem=4G`, `license/…`) are skipped.
pub fn gres_in_tres(tres: &str) -> Vec<GresItem> {
    let mut items = Vec::new();
    for raw in tres.split(',') {
        let raw = raw.trim();
        let Some(body) = raw
            .strip_prefix("gres:")
            .or_else(|| raw.strip_prefix("gres/"))
        else {
            continue;
        };
        let item = match body.split_once('=') {
            Some((key, count)) => gres::parse_item(&format!("{key}:{count}")),
            None => gres::parse_item(body),
        };
        items.extend(item);
    }
    items
}

/// The typed `gpu` requests of a `tres-per-node` field, as (type, count):
/// an untyped `gpu:N` and other GRES are left out.
pub fn typed_gpus(tres: &str) -> Vec<(String, u32)> {
    gres::parse_list(tres)
        .into_iter()
        .filter(|i| i.name == "gpu")
        .filter_map(|i| {
            let kind = i.kind?;
            let count = u32::try_from(i.count).ok()?;
            Some((kind, count))
        })
        .collect()
}

/// The nodes of a `NodeList` (host list expanded); none when it does not
/// read.
pub fn node_names(col: &str) -> Vec<String> {
    crate::gres::hostlist::expand(col.trim()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_lists() {
        assert_eq!(parse_task_list("4-6%2"), vec![4, 5, 6]);
        assert_eq!(parse_task_list("[1,3,7-8]"), vec![1, 3, 7, 8]);
        assert_eq!(parse_task_list("N/A"), Vec::<u32>::new());
        assert_eq!(parse_task_list("0-3,5"), vec![0, 1, 2, 3, 5]);
        assert_eq!(parse_task_list("1-7:3%1"), vec![1, 4, 7], "a step");
        assert_eq!(parse_task_list("(null)"), Vec::<u32>::new());
        assert_eq!(parse_task_list(""), Vec::<u32>::new());
        assert_eq!(parse_task_list("0-4294967296"), Vec::<u32>::new());
    }

    #[test]
    fn array_ranges() {
        assert_eq!(array_task_count("42"), Some(1));
        // Counts saturate instead of wrapping (a hostile or corrupt listing).
        assert_eq!(
            array_task_count("7_[0-18446744073709551615,1-18446744073709551615]"),
            Some(u64::MAX)
        );
        assert_eq!(array_task_count("42_7"), Some(1));
        assert_eq!(array_task_count("42_[1,3,5-7]"), Some(5));
        assert_eq!(array_task_count("42_[0-10:2]"), Some(6));
        assert_eq!(array_task_count("42_[0-999%10]"), Some(1000));
        assert_eq!(array_task_count("42_[9-1]"), None);
        assert_eq!(array_task_count("42_[x]"), None);
    }

    #[test]
    fn exit_codes_counts_and_ids() {
        assert_eq!(exit_code("768"), Some(3), "the high byte");
        assert_eq!(exit_code("1"), Some(1));
        assert_eq!(exit_code("(null)"), None);
        assert_eq!(count("4294967294"), None, "NO_VAL");
        assert_eq!(count("2"), Some(2));
        assert_eq!(count("N/A"), None);
        assert_eq!(leading_id("15_[0-9%2]"), Some(15));
        assert_eq!(leading_id("abc"), None);
    }

    #[test]
    fn times_and_durations() {
        let t = stamp("2026-11-30T15:09:06").unwrap();
        assert_eq!(t.to_string(), "2026-11-30 15:09:06");
        assert_eq!(stamp("N/A"), None);
        assert_eq!(stamp("2026-13-30T15:09:06"), None);
        assert_eq!(stamp("2026-11-30 15:09:06"), None);
        assert_eq!(stamp("2026-11-3xT15:09:06"), None);
        assert_eq!(seconds("1:00:00"), Some(3600));
        assert_eq!(seconds("UNLIMITED"), None);
    }

    #[test]
    fn gres_of_every_tres_form() {
        let keys = |t: &str| -> Vec<String> { gres_in_tres(t).iter().map(GresItem::key).collect() };
        assert_eq!(keys("gres:gpu:1g.5gb:1"), ["gpu:1g.5gb"]);
        assert_eq!(
            keys("cpu=1,mem=4G,gres/gpu:1g.5gb=1,gres/gpu=1"),
            ["gpu:1g.5gb", "gpu"]
        );
        assert_eq!(
            typed_gpus("gres:gpu:3g.20gb:2,gres:shard:2"),
            [("3g.20gb".to_string(), 2)]
        );
        assert_eq!(typed_gpus("gres:gpu:2"), []);
        assert_eq!(node_names("node[2-3]"), ["node2", "node3"]);
    }
}
