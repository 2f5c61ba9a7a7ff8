//! A hyperparameter search's files in its run directory: `tune/trials.json`,
//! the summary the last ask or tell job wrote, and what marks a run as a
//! search. Below `run` (which writes the search's jobs) so that the agent
//! (early stopping reads its peers), the registry (a search's export log)
//! and `status` read them without reaching up.

use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::layout;
use super::manifest::Manifest;

/// One trial in `tune/trials.json`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Trial {
    /// The array task and `train-<trial>/`.
    pub trial: u32,
    pub batch: Option<u32>,
    /// Optuna's trial number in the study.
    pub number: Option<u64>,
    pub params: serde_json::Map<String, serde_json::Value>,
    /// Optuna's state, lower case: `running`, `complete`, `fail`, …
    pub state: String,
    pub value: Option<f64>,
    /// Epochs in its `results.csv` when the summary was written.
    #[serde(default)]
    pub epochs: u32,
    pub best_so_far: Option<f64>,
    /// Why a failed trial failed, when its files say (`status` adds it:
    /// out of GPU memory, and what to change).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Best {
    pub trial: u32,
    pub value: f64,
}

/// `tune/trials.json`, as the last ask or tell job wrote it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Summary {
    pub objective: String,
    pub direction: String,
    pub sampler: String,
    pub trials_planned: u32,
    pub parallel: u32,
    pub trials: Vec<Trial>,
    pub best: Option<Best>,
}

impl Summary {
    /// The trials that gave an objective, best first (ties: the earlier trial).
    pub fn ranked(&self) -> Vec<&Trial> {
        let mut done: Vec<&Trial> = self.trials.iter().filter(|t| t.value.is_some()).collect();
        let sign = if self.direction == "minimize" {
            -1.0
        } else {
            1.0
        };
        done.sort_by(|a, b| {
            let (x, y) = (sign * a.value.unwrap_or(0.0), sign * b.value.unwrap_or(0.0));
            y.total_cmp(&x).then(a.trial.cmp(&b.trial))
        });
        done
    }

    /// The best trial's arguments as a spec snippet: `[train.args]` lines.
    pub fn best_snippet(&self) -> Option<String> {
        let best = self.ranked().into_iter().next()?;
        let mut out = format!(
            "# the best trial of the search: trial {} ({} = {})\n[train.args]\n",
            best.trial,
            self.objective,
            best.value.unwrap_or(f64::NAN)
        );
        for (k, v) in &best.params {
            out.push_str(&format!("{k} = {}\n", toml_value(v)));
        }
        Some(out)
    }
}

pub(crate) fn toml_value(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => format!("{s:?}"),
        serde_json::Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() && f.fract() == 0.0 && f.abs() < 1e15 => format!("{f:.1}"),
            _ => n.to_string(),
        },
        other => other.to_string(),
    }
}

/// A `[tune]` search: its manifest has the ask stage.
pub fn is_search(manifest: &Manifest) -> bool {
    manifest.stages.iter().any(|s| s.stage == "ask")
}

/// A run's search summary; `Ok(None)` before the first ask wrote one.
pub fn read_summary(workdir: &Path) -> Result<Option<Summary>> {
    let path = workdir.join(layout::TUNE).join("trials.json");
    if std::fs::symlink_metadata(&path).is_err() {
        return Ok(None);
    }
    let text = crate::fsutil::read_regular(&path, 16 << 20)?;
    serde_json::from_str(&text)
        .map(Some)
        .with_context(|| format!("{} is not a search summary", path.display()))
}
