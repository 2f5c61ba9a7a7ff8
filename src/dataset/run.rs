//! `dataset check` as a whole: read the YAML, check every file, cache when asked.

use std::path::{Path, PathBuf};

use anyhow::Result;

use super::{cache, check, config, Report};

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
