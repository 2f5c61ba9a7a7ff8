//! The leaderboard (pure): filter, group by dataset fingerprint, rank under a key.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::Row;

/// Version of `compare --json`. Adding a field keeps it; renaming, removing
/// or changing the meaning of one raises it.
pub const SCHEMA_VERSION: u32 = 1;

/// What to rank by. Higher is better for the metrics; lower for time and cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SortKey {
    /// Best mAP50-95 over the epochs (default).
    #[value(name = "map50-95")]
    #[serde(rename = "map50-95")]
    Map5095,
    /// Best mAP50 over the epochs.
    Map50,
    /// Precision at the best epoch.
    Precision,
    /// Recall at the best epoch.
    Recall,
    /// Inference milliseconds per image (fastest first).
    Inference,
    /// Training wall time (shortest first).
    WallTime,
    /// GPU-hours (cheapest first).
    GpuHours,
    /// Epochs done (most first).
    Epochs,
    /// Submission time (newest first).
    Submitted,
}

impl SortKey {
    pub fn name(self) -> &'static str {
        match self {
            SortKey::Map5095 => "map50-95",
            SortKey::Map50 => "map50",
            SortKey::Precision => "precision",
            SortKey::Recall => "recall",
            SortKey::Inference => "inference",
            SortKey::WallTime => "wall-time",
            SortKey::GpuHours => "gpu-hours",
            SortKey::Epochs => "epochs",
            SortKey::Submitted => "submitted",
        }
    }

    /// The row's value for this key, oriented so that larger ranks first.
    fn score(self, r: &Row) -> Option<f64> {
        match self {
            SortKey::Map5095 => r.best_map50_95,
            SortKey::Map50 => r.best_map50,
            SortKey::Precision => r.precision,
            SortKey::Recall => r.recall,
            SortKey::Inference => r.inference_ms.map(|v| -v),
            SortKey::WallTime => r.train_seconds.map(|v| -v),
            SortKey::GpuHours => r.gpu_hours.map(|v| -v),
            SortKey::Epochs => Some(f64::from(r.epochs_done)),
            SortKey::Submitted => Some(r.submitted_at.timestamp() as f64),
        }
    }
}

/// Which runs and rows to show.
#[derive(Debug, Clone)]
pub struct Options {
    /// Only runs of this user (the manifest's `user`).
    pub user: Option<String>,
    /// Only rows on this dataset: its path as the spec gives it, the file or
    /// directory name, or a prefix of the fingerprint.
    pub data: Option<String>,
    /// Only runs submitted at or after this time.
    pub since: Option<DateTime<Utc>>,
    pub sort: SortKey,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            user: None,
            data: None,
            since: None,
            sort: SortKey::Map5095,
        }
    }
}

/// Rows on one dataset, ranked among themselves.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Group {
    /// A short name: the dataset YAML's directory and file name.
    pub dataset: String,
    pub fingerprint: Option<String>,
    /// False when no row of the group has a fingerprint (grouped by path only).
    pub verified: bool,
    pub rows: Vec<Row>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Board {
    pub schema_version: u32,
    pub sort: SortKey,
    /// Best group first (by its best row).
    pub groups: Vec<Group>,
    /// Things the reader should know (several datasets, unverified groups).
    pub notes: Vec<String>,
}

impl Board {
    pub fn rows(&self) -> impl Iterator<Item = (&Group, &Row)> {
        self.groups
            .iter()
            .flat_map(|g| g.rows.iter().map(move |r| (g, r)))
    }
}

/// The short name of a dataset path: `pcb/data.yaml`.
pub fn dataset_name(data: &str) -> String {
    let p = std::path::Path::new(data);
    let file = p.file_name().map(|f| f.to_string_lossy().into_owned());
    let dir = p
        .parent()
        .and_then(|d| d.file_name())
        .map(|f| f.to_string_lossy().into_owned());
    match (dir, file) {
        (Some(d), Some(f)) => format!("{d}/{f}"),
        (None, Some(f)) => f,
        _ => data.to_string(),
    }
}

/// The names `--data` accepts for a row, for matching and suggestions.
fn data_names(r: &Row) -> Vec<String> {
    let mut names = Vec::new();
    if let Some(d) = &r.data {
        names.push(d.clone());
        names.push(dataset_name(d));
        let p = std::path::Path::new(d);
        if let Some(f) = p.file_name() {
            names.push(f.to_string_lossy().into_owned());
        }
        if let Some(dir) = p.parent().and_then(|d| d.file_name()) {
            names.push(dir.to_string_lossy().into_owned());
        }
    }
    names
}

fn matches_data(r: &Row, want: &str) -> bool {
    data_names(r).iter().any(|n| n == want)
        || r.fingerprint.as_deref().is_some_and(|f| {
            let hex = f.strip_prefix("fnv128:").unwrap_or(f);
            want.len() >= 6 && (f.starts_with(want) || hex.starts_with(want))
        })
}

/// Filter, group by dataset and rank. Fails (invalid input) when `--data`
/// names no dataset any row has, with the close names.
pub fn board(rows: Vec<Row>, opts: &Options) -> anyhow::Result<Board> {
    let rows: Vec<Row> = rows
        .into_iter()
        .filter(|r| opts.user.as_deref().is_none_or(|u| r.user == u))
        .filter(|r| opts.since.is_none_or(|s| r.submitted_at >= s))
        .collect();
    let rows = match &opts.data {
        None => rows,
        Some(want) => {
            let (kept, rest): (Vec<Row>, Vec<Row>) =
                rows.into_iter().partition(|r| matches_data(r, want));
            if kept.is_empty() {
                let mut known: Vec<String> = rest
                    .iter()
                    .filter_map(|r| r.data.as_deref().map(dataset_name))
                    .collect();
                known.sort();
                known.dedup();
                let all: Vec<String> = rest.iter().flat_map(data_names).collect();
                let close = crate::suggest::close_ones(want, all.iter().map(String::as_str), 3);
                let hint = if !close.is_empty() {
                    format!("did you mean {}?", crate::suggest::ticked_list(close))
                } else if known.is_empty() {
                    "no run has a dataset recorded".to_string()
                } else {
                    format!(
                        "the runs shown were trained on {}",
                        crate::suggest::ticked_list(known.iter().map(String::as_str))
                    )
                };
                return Err(crate::error::invalid(format!(
                    "--data `{}`: no run was trained on that dataset (give its YAML path, its \
                     file or directory name, or 6+ characters of its fingerprint); {hint}",
                    crate::text::echo(want)
                )));
            }
            kept
        }
    };

    // Group: by fingerprint when known; else by the dataset path.
    let mut groups: Vec<Group> = Vec::new();
    for r in rows {
        let key_fp = r.fingerprint.clone();
        let name = r
            .data
            .as_deref()
            .map(dataset_name)
            .unwrap_or_else(|| "(unknown dataset)".into());
        let slot = groups.iter_mut().find(|g| match (&g.fingerprint, &key_fp) {
            (Some(a), Some(b)) => a == b,
            (None, None) => g.dataset == name,
            _ => false,
        });
        match slot {
            Some(g) => g.rows.push(r),
            None => groups.push(Group {
                dataset: name,
                verified: key_fp.is_some(),
                fingerprint: key_fp,
                rows: vec![r],
            }),
        }
    }
    for g in &mut groups {
        rank(&mut g.rows, opts.sort);
    }
    let best = |g: &Group| g.rows.first().and_then(|r| opts.sort.score(r));
    groups.sort_by(|a, b| cmp_desc(best(a), best(b)).then_with(|| a.dataset.cmp(&b.dataset)));

    let mut notes = Vec::new();
    if groups.len() > 1 {
        notes.push(format!(
            "{} different datasets: rows are ranked only against rows on the same data",
            groups.len()
        ));
    }
    // Two groups with the same name hold different data under one path.
    let mut names: BTreeMap<&str, usize> = BTreeMap::new();
    for g in &groups {
        *names.entry(g.dataset.as_str()).or_default() += 1;
    }
    for (name, n) in names.iter().filter(|(_, n)| **n > 1) {
        notes.push(format!(
            "{name} held {n} different contents (different fingerprints) across these runs"
        ));
    }
    for g in groups.iter().filter(|g| !g.verified) {
        notes.push(format!(
            "{}: no content fingerprint recorded (the prepare stage has not finished), grouped by path only",
            g.dataset
        ));
    }
    Ok(Board {
        schema_version: SCHEMA_VERSION,
        sort: opts.sort,
        groups,
        notes,
    })
}

/// Larger first; a missing value after every present one.
fn cmp_desc(a: Option<f64>, b: Option<f64>) -> std::cmp::Ordering {
    match (a, b) {
        (Some(x), Some(y)) => y.total_cmp(&x),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => std::cmp::Ordering::Equal,
    }
}

/// Sort rows best first and number them; equal scores share a rank.
fn rank(rows: &mut [Row], key: SortKey) {
    rows.sort_by(|a, b| {
        cmp_desc(key.score(a), key.score(b))
            .then_with(|| b.submitted_at.cmp(&a.submitted_at))
            .then_with(|| a.id.cmp(&b.id))
    });
    let mut last: Option<(f64, usize)> = None;
    for (i, r) in rows.iter_mut().enumerate() {
        r.rank = key.score(r).map(|s| match last {
            Some((prev, at)) if prev == s => at,
            _ => {
                last = Some((s, i + 1));
                i + 1
            }
        });
    }
}

#[cfg(test)]
mod tests;
