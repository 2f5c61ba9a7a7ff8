//! The run manifest: what was submitted, written atomically under the run's
//! workdir, plus a small index entry under `$XDG_STATE_HOME/yolo-sched/runs/`
//! so later commands find a run by its id.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::fsutil;

pub const SCHEMA_VERSION: u32 = 1;
pub const MANIFEST_FILE: &str = "manifest.json";

/// One submission of a stage (the first, or a resume).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Attempt {
    pub attempt: u32,
    pub job_id: u64,
    /// `--array` value when the stage is an array (`0-3%2`, or `1,3` on resume).
    pub array: Option<String>,
    /// Job ids this attempt depends on, with the dependency kind (`afterok:12`).
    pub dependency: Option<String>,
    pub submitted_at: DateTime<Utc>,
    /// The `--gres` this attempt asked for, when it differs from the stage's
    /// first (`resume --gpu`, escalation after out-of-memory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gres: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StageRecord {
    pub stage: String,
    pub job_name: String,
    pub partition: Option<String>,
    pub gres: Option<String>,
    pub time: String,
    pub cpus: u32,
    pub mem: String,
    /// Number of array tasks (1 when not an array).
    pub tasks: usize,
    pub depends_on: Vec<String>,
    /// The script, relative to the workdir.
    pub script: String,
    pub attempts: Vec<Attempt>,
}

impl StageRecord {
    pub fn latest(&self) -> Option<&Attempt> {
        self.attempts.last()
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    pub schema_version: u32,
    pub run_id: String,
    pub name: String,
    pub user: String,
    pub host: String,
    pub submitted_at: DateTime<Utc>,
    pub workdir: PathBuf,
    pub spec_file: PathBuf,
    pub spec_hash: String,
    /// The spec as it was at submission.
    pub spec_text: String,
    pub variants: usize,
    pub gpu_explanation: Vec<String>,
    pub estimate_gib: Option<f64>,
    /// The registry version the spec's `model = "registry:…"` resolved to at
    /// submission (`registry:NAME@N`): `resume` uses it even after a tag moved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_ref: Option<String>,
    /// A sweep over `model` that names registry models: one entry per variant
    /// (the array task's index), its version as resolved at submission
    /// (`registry:NAME@N`), or `None` for a weights file. Empty otherwise
    /// (and in manifests written before sweeps could name registry models).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub model_refs: Vec<Option<String>>,
    pub stages: Vec<StageRecord>,
}

impl Manifest {
    pub fn path_in(workdir: &Path) -> PathBuf {
        workdir.join(MANIFEST_FILE)
    }

    /// Write the manifest under its workdir (atomically) and its index entry.
    pub fn save(&self) -> Result<()> {
        let text = serde_json::to_vec_pretty(self)?;
        fsutil::write_atomic(&Manifest::path_in(&self.workdir), &text, 0o644)
            .with_context(|| format!("writing the manifest of run {}", self.run_id))?;
        let index = IndexEntry {
            run_id: self.run_id.clone(),
            name: self.name.clone(),
            workdir: self.workdir.clone(),
            submitted_at: self.submitted_at,
        };
        let dir = index_dir()?;
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        fsutil::write_atomic(
            &dir.join(format!("{}.json", self.run_id)),
            &serde_json::to_vec_pretty(&index)?,
            0o644,
        )
        .context("writing the run index")?;
        Ok(())
    }

    /// Forget a submission whose jobs were all taken back: remove the manifest
    /// and its index entry, so the workdir is free for the next submission.
    pub fn discard(&self) -> Result<()> {
        let _ = std::fs::remove_file(index_dir()?.join(format!("{}.json", self.run_id)));
        match std::fs::remove_file(Manifest::path_in(&self.workdir)) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => {
                Err(e).with_context(|| format!("removing the manifest of run {}", self.run_id))
            }
        }
    }

    /// Read a manifest; a corrupt file is an error naming it, never rewritten.
    pub fn load(path: &Path) -> Result<Manifest> {
        // The manifest holds the spec (at most 16 MiB) and its job ids.
        let text = fsutil::read_regular(path, 64 << 20)
            .with_context(|| format!("reading manifest {}", path.display()))?;
        serde_json::from_str(&text)
            .with_context(|| format!("manifest {} is corrupt", path.display()))
    }

    /// The registry version variant `variant` (or the single training) was
    /// trained from, as pinned at submission: `registry:NAME@N`.
    pub fn model_ref_of(&self, variant: Option<u32>) -> Option<&str> {
        match variant.and_then(|v| self.model_refs.get(v as usize)) {
            Some(r) => r.as_deref(),
            None if self.model_refs.is_empty() => self.model_ref.as_deref(),
            None => None,
        }
    }

    /// Every job id of every attempt.
    pub fn all_job_ids(&self) -> Vec<u64> {
        self.stages
            .iter()
            .flat_map(|s| s.attempts.iter().map(|a| a.job_id))
            .collect()
    }
}

/// The largest index entry read: an entry is a few hundred bytes.
pub const INDEX_ENTRY_LIMIT: u64 = 64 << 10;

/// The index entry that maps a run id to its workdir.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IndexEntry {
    pub run_id: String,
    pub name: String,
    pub workdir: PathBuf,
    pub submitted_at: DateTime<Utc>,
}

/// `$XDG_STATE_HOME/yolo-sched`, else `~/.local/state/yolo-sched`.
pub fn state_dir() -> Result<PathBuf> {
    if let Some(x) = std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(x).join("yolo-sched"));
    }
    let home = std::env::var_os("HOME")
        .filter(|v| !v.is_empty())
        .context("neither XDG_STATE_HOME nor HOME is set: cannot place the run index")?;
    Ok(state_dir_in_home(Path::new(&home)))
}

/// The state directory of a user who has no XDG_STATE_HOME of their own:
/// where another user's (an administrator's) commands look for their runs.
pub fn state_dir_in_home(home: &Path) -> PathBuf {
    home.join(".local/state/yolo-sched")
}

pub fn index_dir() -> Result<PathBuf> {
    Ok(state_dir()?.join("runs"))
}

/// A new run id: `<name>-<UTC time>-<4 hex>`; sortable, and unique per submission.
pub fn new_run_id(name: &str, now: DateTime<Utc>) -> String {
    format!(
        "{name}-{}-{}",
        now.format("%Y%m%dT%H%M%S"),
        crate::id::random_hex(2)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_sort_by_time_and_carry_the_name() {
        let t1 = "2026-11-30T15:00:00Z".parse::<DateTime<Utc>>().unwrap();
        let t2 = "2026-11-30T15:00:01Z".parse::<DateTime<Utc>>().unwrap();
        let a = new_run_id("pcb", t1);
        let b = new_run_id("pcb", t2);
        assert!(a.starts_with("pcb-20261130T150000-"), "{a}");
        assert!(a < b);
    }

    #[test]
    fn corrupt_manifest_is_named_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(MANIFEST_FILE);
        std::fs::write(&p, b"{ not json").unwrap();
        let err = Manifest::load(&p).unwrap_err();
        assert!(format!("{err:#}").contains("is corrupt"));
        assert_eq!(std::fs::read(&p).unwrap(), b"{ not json");
    }
}
