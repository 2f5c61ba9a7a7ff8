//! What a training leaves in its run directory besides `results.csv`
//! (`results`) and the logs (`ultralytics`): Ultralytics' `args.yaml`, and
//! the dataset fingerprint the prepare stage recorded in
//! `prepare/summary.json`. `compare` and `registry publish` read them here.

use std::collections::BTreeMap;
use std::path::Path;

use super::results::{self, Epoch};

/// The largest `args.yaml` or `summary.json` read.
pub const SMALL_FILE_LIMIT: u64 = 1 << 20;

/// Ultralytics' `args.yaml`: a flat mapping of scalars (`yaml_save` of the
/// trainer's arguments). Only top-level `key: value` lines are read.
pub fn parse_args_yaml(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter(|l| !l.starts_with([' ', '\t', '-', '#']))
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            let v = v.trim();
            let v = v
                .strip_prefix('\'')
                .and_then(|x| x.strip_suffix('\''))
                .or_else(|| v.strip_prefix('"').and_then(|x| x.strip_suffix('"')))
                .unwrap_or(v);
            Some((k.trim().to_string(), v.to_string()))
        })
        .collect()
}

/// A trained variant's facts, read once for `compare` and `models publish`:
/// the arguments it trained with (`args.yaml`) and its epochs
/// (`results.csv`), and what both ask of them.
#[derive(Debug, Clone, Default)]
pub struct Trained {
    pub args: BTreeMap<String, String>,
    /// One entry per readable row of `results.csv` (`results::parse`).
    pub epochs: Vec<Epoch>,
}

impl Trained {
    /// From the texts of `args.yaml` and `results.csv` (a missing or
    /// unreadable file is an empty text).
    pub fn from_texts(args: &str, results_csv: &str) -> Trained {
        Trained {
            args: parse_args_yaml(args),
            epochs: results::parse(results_csv).unwrap_or_default(),
        }
    }

    /// From a training directory (`<workdir>/train[-N]`): both files read
    /// bounded, regular files only.
    pub fn read(train_dir: &Path) -> Trained {
        let text = |name: &str, limit: u64| {
            crate::fsutil::read_regular(&train_dir.join(name), limit).unwrap_or_default()
        };
        Trained::from_texts(
            &text(super::layout::ARGS, SMALL_FILE_LIMIT),
            &text(super::layout::RESULTS, results::RESULTS_LIMIT),
        )
    }

    /// The epoch with the best mAP50-95 (`results::best`).
    pub fn best(&self) -> Option<&Epoch> {
        results::best(&self.epochs)
    }

    /// The highest mAP50 of any epoch.
    pub fn best_map50(&self) -> Option<f64> {
        self.epochs.iter().filter_map(|e| e.map50).reduce(f64::max)
    }

    /// The last epoch done; 0 before the first.
    pub fn epochs_done(&self) -> u32 {
        results::last_epoch(&self.epochs).unwrap_or(0)
    }

    /// `epochs` of `args.yaml`: how many the training was to run.
    pub fn epochs_planned(&self) -> Option<u32> {
        self.args.get("epochs")?.parse().ok()
    }
}

/// The prepare stage's `prepare/summary.json` (the dataset check's summary:
/// the fingerprint, the class names, the versions), its one reader.
pub fn prepare_summary(workdir: &Path) -> Option<serde_json::Value> {
    let path = workdir.join(super::layout::PREPARE_SUMMARY);
    let text = crate::fsutil::read_regular(&path, SMALL_FILE_LIMIT).ok()?;
    serde_json::from_str(&text).ok()
}

/// The dataset fingerprint in a prepare summary.
pub fn fingerprint_in(summary: &serde_json::Value) -> Option<String> {
    summary
        .get("fingerprint")?
        .as_str()
        .filter(|f| !f.is_empty())
        .map(str::to_string)
}

/// The dataset fingerprint the prepare stage recorded.
pub fn recorded_fingerprint(workdir: &Path) -> Option<String> {
    fingerprint_in(&prepare_summary(workdir)?)
}
