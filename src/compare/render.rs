//! The leaderboard as cells: the columns the table and CSV share. Pure.

use super::{Board, Group, Row};

/// Columns of the table (human) form.
pub const TABLE_HEADERS: [&str; 14] = [
    "#", "run", "model", "dataset", "imgsz", "epochs", "mAP50-95", "mAP50", "P", "R", "wall",
    "slice", "GPU-h", "ms/img",
];

/// Columns of the CSV form: raw values, one per field of `Row`.
pub const CSV_HEADERS: [&str; 24] = [
    "rank",
    "id",
    "run_id",
    "variant",
    "name",
    "user",
    "submitted_at",
    "state",
    "model",
    "data",
    "fingerprint",
    "params",
    "imgsz",
    "epochs_done",
    "epochs",
    "best_map50_95",
    "best_map50",
    "precision",
    "recall",
    "train_seconds",
    "slice",
    "gpu_hours",
    "inference_ms",
    "inference_of",
];

fn opt<T: ToString>(v: &Option<T>) -> String {
    v.as_ref().map(T::to_string).unwrap_or_default()
}

fn fixed(v: Option<f64>, digits: usize) -> String {
    v.map(|x| format!("{x:.digits$}"))
        .unwrap_or_else(|| "-".into())
}

/// `1h02m`, `4m10s`, `12s`.
pub fn duration(seconds: f64) -> String {
    let s = seconds.max(0.0).round() as u64;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// `pcb/data.yaml 3f2a9c01` (the short fingerprint), `?` when unverified.
pub fn dataset_cell(g: &Group) -> String {
    match &g.fingerprint {
        Some(f) => {
            let hex = f.strip_prefix("fnv128:").unwrap_or(f);
            format!("{} {}", g.dataset, &hex[..hex.len().min(8)])
        }
        None => format!("{} (unverified)", g.dataset),
    }
}

fn params(r: &Row) -> String {
    r.params
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The run column: the id, and a sweep variant's parameters.
pub fn run_cell(r: &Row) -> String {
    let p = params(r);
    if p.is_empty() {
        r.id.clone()
    } else {
        format!("{} ({p})", r.id)
    }
}

/// One table row.
pub fn table_row(g: &Group, r: &Row) -> Vec<String> {
    let mut epochs = match r.epochs {
        Some(n) => format!("{}/{n}", r.epochs_done),
        None => r.epochs_done.to_string(),
    };
    // A search's trial stopped early by its rule.
    if r.train_state == "pruned" {
        epochs.push_str(" pruned");
    }
    let slice = r
        .slice
        .as_deref()
        .and_then(crate::slurm::gres::parse_item)
        .map(|i| i.kind.unwrap_or(i.name))
        .unwrap_or_else(|| "-".into());
    vec![
        r.rank.map_or("-".into(), |n| n.to_string()),
        run_cell(r),
        r.model.clone().unwrap_or_else(|| "-".into()),
        dataset_cell(g),
        r.imgsz.clone().unwrap_or_else(|| "-".into()),
        epochs,
        fixed(r.best_map50_95, 4),
        fixed(r.best_map50, 4),
        fixed(r.precision, 3),
        fixed(r.recall, 3),
        r.train_seconds.map_or("-".into(), duration),
        slice,
        fixed(r.gpu_hours, 3),
        fixed(r.inference_ms, 1),
    ]
}

/// One CSV row (raw values).
pub fn csv_row(r: &Row) -> Vec<String> {
    vec![
        opt(&r.rank),
        r.id.clone(),
        r.run_id.clone(),
        opt(&r.variant),
        r.name.clone(),
        r.user.clone(),
        r.submitted_at.to_rfc3339(),
        r.state.clone(),
        opt(&r.model),
        opt(&r.data),
        opt(&r.fingerprint),
        params(r),
        opt(&r.imgsz),
        r.epochs_done.to_string(),
        opt(&r.epochs),
        opt(&r.best_map50_95),
        opt(&r.best_map50),
        opt(&r.precision),
        opt(&r.recall),
        opt(&r.train_seconds),
        opt(&r.slice),
        opt(&r.gpu_hours),
        opt(&r.inference_ms),
        opt(&r.inference_of),
    ]
}

/// The whole board as RFC 4180 CSV (CRLF line ends), one header line.
pub fn csv(board: &Board) -> String {
    let line = |cells: Vec<String>| {
        let mut l = cells
            .iter()
            .map(|c| crate::csv::field(c))
            .collect::<Vec<_>>()
            .join(",");
        l.push_str("\r\n");
        l
    };
    let mut out = line(CSV_HEADERS.iter().map(|s| s.to_string()).collect());
    for (_, r) in board.rows() {
        out.push_str(&line(csv_row(r)));
    }
    out
}
