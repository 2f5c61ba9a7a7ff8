//! Ultralytics detection datasets: the dataset YAML, a check of every image and
//! label file (as Ultralytics would read them), and a cached copy on local storage.
//!
//! Semantics follow Ultralytics (`ultralytics/data/utils.py`): an image without a
//! label file, or with an empty one, is a background image (counted, not an
//! error); an unreadable image or a malformed label line makes Ultralytics drop the
//! image, which is an error here so that training never starts on a broken dataset.

pub mod cache;
pub mod check;
pub mod config;
pub mod fingerprint;
pub mod image;
pub mod labels;

use std::path::{Path, PathBuf};

use anyhow::Result;

pub use check::{CacheInfo, ClassCount, Finding, Report, Severity, SplitStats, MAX_FINDINGS};
pub use config::{label_path, ConfigErrors, DataConfig, Source};

/// How to check.
#[derive(Debug, Clone, Default)]
pub struct CheckOptions {
    /// Parallel readers (0 = one per CPU, at most 16).
    pub threads: usize,
    /// Copy the dataset under this directory when it has no error.
    pub cache: Option<PathBuf>,
}

/// Check the dataset described by `data_yaml` and, when asked and it is usable,
/// cache it. A YAML that cannot be read or is wrong is `crate::error::invalid`
/// (exit 2); problems in images and labels are in the report.
pub fn run_check(data_yaml: &Path, opts: &CheckOptions) -> Result<Report> {
    let cwd = std::env::current_dir()?;
    let cfg = config::load(data_yaml, &cwd).map_err(|e| crate::error::invalid(e.to_string()))?;
    let listing = check::list(&cfg);
    let threads = match opts.threads {
        0 => std::thread::available_parallelism().map_or(4, |n| n.get().min(16)),
        n => n,
    };
    let mut report = check::check(&cfg, &listing, threads);
    if let (true, Some(dir)) = (report.ok, &opts.cache) {
        report.cache = Some(cache::cache(&cfg, &listing.items, dir)?);
    }
    Ok(report)
}

/// Bytes in the largest binary unit that keeps the number ≥ 1 ("1.5 KiB").
pub fn human_bytes(n: u64) -> String {
    const UNITS: &[&str] = &["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}
