//! The usage section: slices held now merged with slice-hours (pure).

use super::model::{AccountingState, Usage, UsageRow};
use super::{queue, sacct};

/// Merge slices held now with slice-hours into one row per (user, account, type).
pub fn usage_rows(
    accounting: AccountingState,
    hours: Option<sacct::SliceHours>,
    held: Vec<queue::Held>,
    window_seconds: i64,
) -> Usage {
    let mut merged: std::collections::HashMap<(String, String, String), (u64, f64)> =
        std::collections::HashMap::with_capacity(
            held.len() + hours.as_ref().map_or(0, |h| h.len()),
        );
    for h in held {
        merged.entry((h.user, h.account, h.kind)).or_default().0 += h.slices;
    }
    let have_hours = hours.is_some();
    for (key, value) in hours.unwrap_or_default() {
        merged.entry(key).or_default().1 += value;
    }
    let mut rows: Vec<UsageRow> = merged
        .into_iter()
        .map(|((user, account, kind), (slices_held, h))| UsageRow {
            user,
            account,
            kind,
            slices_held,
            // To 0.36 s: a short job's hours are not rounded away; tables
            // show two decimals.
            slice_hours: have_hours.then_some((h * 10_000.0).round() / 10_000.0),
        })
        .collect();
    rows.sort_unstable_by(|a, b| {
        (&a.user, &a.account, &a.kind).cmp(&(&b.user, &b.account, &b.kind))
    });
    Usage {
        accounting,
        window_seconds,
        rows,
        series: None,
    }
}
