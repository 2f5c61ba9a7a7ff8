//! A hyperparameter search's files in its run directory: `tune/trials.json`,
//! the summary the last ask or tell job wrote, and what marks a run as a
//! search. Below `run` (which writes the search's jobs) so that the agent
//! (early stopping reads its peers), the registry (a search's export log)
//! and `status` read them without reaching up.

use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::layout;
use super::manifest::{Attempt, Manifest, StageRecord};

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

/// A trial's out-of-GPU-memory record (`layout::oom_record`): its train
/// script writes it when this attempt ended out of GPU memory; with
/// `on_oom = "resume-bigger"`, `tune escalate` adds where the trial moved,
/// or why it did not. The trial's next job removes it when it starts.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct OomRecord {
    /// `CUDA out of memory` or `a stop by the memory guard`.
    pub cause: String,
    /// The job that ran out (`<array job>_<trial>`).
    #[serde(default)]
    pub job: String,
    /// The slice it ran out on (`gpu:1g.5gb:1`), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gres: Option<String>,
    /// The slice it moved to, and the job that trains it there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moved_to: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moved_job: Option<u64>,
    /// Why it was not moved (the step limit, no bigger slice, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_moved: Option<String>,
}

/// A trial's out-of-GPU-memory record, when there is a readable one.
pub fn read_oom(workdir: &Path, trial: u32) -> Option<OomRecord> {
    let path = workdir.join(layout::oom_record(Some(trial)));
    let text = crate::fsutil::read_regular(&path, 64 << 10).ok()?;
    serde_json::from_str(&text).ok()
}

/// Write a trial's out-of-GPU-memory record (atomically).
pub fn write_oom(workdir: &Path, trial: u32, record: &OomRecord) -> Result<()> {
    let path = workdir.join(layout::oom_record(Some(trial)));
    let text = serde_json::to_string_pretty(record)? + "\n";
    crate::fsutil::write_atomic(&path, text.as_bytes(), 0o644)
        .with_context(|| format!("writing {}", path.display()))
}

/// The tasks an attempt of a stage ran: its `--array`, else all of the stage's.
pub fn task_list(stage: &StageRecord, attempt: &Attempt) -> Vec<u32> {
    match &attempt.array {
        Some(a) => crate::slurm::squeue::parse_task_list(a),
        None => (0..stage.tasks.max(1) as u32).collect(),
    }
}

/// The attempts of a search's train stage that ran trial `n`, oldest
/// first: its batch's array (again after a resume) and the jobs it moved
/// to (`on_oom = "resume-bigger"`).
pub fn trial_attempts(train: &StageRecord, n: u32) -> Vec<&Attempt> {
    train
        .attempts
        .iter()
        .filter(|a| task_list(train, a).contains(&n))
        .collect()
}

fn train_stage(manifest: &Manifest) -> Option<&StageRecord> {
    manifest.stages.iter().find(|s| s.stage == "train")
}

/// The `--gres` trial `n` trains on now: its latest move's (a move is a
/// one-task job with its own `--gres`), else the stage's (a batch's array).
pub fn trial_gres(manifest: &Manifest, n: u32) -> Option<String> {
    let train = train_stage(manifest)?;
    trial_attempts(train, n)
        .last()
        .and_then(|a| a.gres.clone())
        .or_else(|| train.gres.clone())
}

/// How many times trial `n` moved to a bigger slice since a batch's array
/// last ran it (a resume asks a trial again, on the planned slice).
pub fn trial_moves(manifest: &Manifest, n: u32) -> usize {
    let Some(train) = train_stage(manifest) else {
        return 0;
    };
    trial_attempts(train, n)
        .iter()
        .rev()
        .take_while(|a| a.gres.is_some())
        .count()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rundir::manifest::SCHEMA_VERSION;
    use chrono::Utc;

    fn attempt(job_id: u64, array: &str, gres: Option<&str>) -> Attempt {
        Attempt {
            attempt: 1,
            job_id,
            array: Some(array.into()),
            dependency: None,
            submitted_at: Utc::now(),
            gres: gres.map(String::from),
        }
    }

    fn search(attempts: Vec<Attempt>) -> Manifest {
        Manifest {
            schema_version: SCHEMA_VERSION,
            run_id: "s-1".into(),
            name: "s".into(),
            user: "u".into(),
            host: "h".into(),
            submitted_at: Utc::now(),
            workdir: "/nonexistent".into(),
            spec_file: "/s.toml".into(),
            spec_hash: "0".into(),
            spec_text: String::new(),
            variants: 1,
            gpu_explanation: vec![],
            estimate_gib: None,
            model_ref: None,
            model_refs: Vec::new(),
            stages: vec![StageRecord {
                stage: "train".into(),
                job_name: "s-train".into(),
                partition: Some("gpu".into()),
                gres: Some("gpu:1g.5gb:1".into()),
                time: "1:00:00".into(),
                cpus: 1,
                mem: "1000M".into(),
                tasks: 4,
                depends_on: vec![],
                script: "scripts/train.sh".into(),
                attempts,
            }],
        }
    }

    #[test]
    fn a_trial_has_its_own_slice_and_count_of_moves() {
        // Batch 0 (trials 0-1) is array 10, batch 1 (2-3) array 20; trial 1
        // moved twice, trial 2 once, then a resume asked batch 1 again.
        let m = search(vec![
            attempt(10, "0-1", None),
            attempt(11, "1", Some("gpu:2g.10gb:1")),
            attempt(20, "2-3", None),
            attempt(12, "1", Some("gpu:a100:1")),
            attempt(21, "2", Some("gpu:2g.10gb:1")),
            attempt(30, "2-3", None),
        ]);
        assert_eq!(trial_gres(&m, 0).as_deref(), Some("gpu:1g.5gb:1"));
        assert_eq!(trial_moves(&m, 0), 0);
        assert_eq!(trial_gres(&m, 1).as_deref(), Some("gpu:a100:1"));
        assert_eq!(trial_moves(&m, 1), 2);
        // Asked again by the resume's array: back on the planned slice.
        assert_eq!(trial_gres(&m, 2).as_deref(), Some("gpu:1g.5gb:1"));
        assert_eq!(trial_moves(&m, 2), 0);
        assert_eq!(
            trial_attempts(&m.stages[0], 1)
                .iter()
                .map(|a| a.job_id)
                .collect::<Vec<_>>(),
            vec![10, 11, 12]
        );
    }
}
