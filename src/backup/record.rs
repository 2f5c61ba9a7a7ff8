//! What was backed up: the manifest object beside the files in the bucket
//! (the only list a restore trusts) and the record in the run's state
//! directory (`state/backup/<train dir>.json`) that `status` reads.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::store::Stamp;
use crate::rundir::layout;

/// The files of an Ultralytics run directory that are backed up, relative to it.
pub const TRACKED: &[&str] = &[
    layout::WEIGHTS_LAST,
    layout::WEIGHTS_BEST,
    layout::RESULTS,
    layout::ARGS,
];

/// The manifest object's name under a training directory's prefix.
pub const MANIFEST: &str = "yolo-sched-backup.json";
/// Where each version of a file lives, under a training directory's prefix:
/// `versions/<file>/<SHA-256>`. The manifest names the exact key.
pub const VERSIONS: &str = "versions";
/// The manifest format written now: each file names its versioned key. Format 1
/// (files at their plain key, `weights/last.pt`) is still read.
pub const MANIFEST_VERSION: u32 = 2;

/// The key, relative to a training directory's prefix, of the version of
/// `rel` whose SHA-256 is `sha256`.
pub fn version_key(rel: &str, sha256: &str) -> String {
    format!("{VERSIONS}/{rel}/{sha256}")
}

/// One backed-up file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileRecord {
    pub sha256: String,
    pub size: u64,
    /// Modification time of the local file that was uploaded (ns since the epoch).
    pub mtime_ns: i64,
    pub uploaded_at: DateTime<Utc>,
    /// Seconds from the local write (its mtime) to the verified object.
    pub write_to_backup_s: f64,
    /// The object's key relative to the training directory's prefix
    /// (`versions/weights/last.pt/<sha256>`); absent in format-1 manifests,
    /// whose objects sit at the file's own name (`weights/last.pt`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

impl FileRecord {
    /// Where the object of `rel` is, relative to the training directory's prefix.
    pub fn object_key<'a>(&'a self, rel: &'a str) -> &'a str {
        self.key.as_deref().unwrap_or(rel)
    }

    pub fn stamp(&self) -> Stamp {
        Stamp {
            size: self.size,
            mtime_ns: self.mtime_ns,
        }
    }
}

/// The manifest object: what the bucket holds for one training directory.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Remote {
    pub version: u32,
    pub files: BTreeMap<String, FileRecord>,
}

/// The record in the state directory.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// `s3://bucket/prefix` of this training directory.
    pub url: String,
    pub files: BTreeMap<String, FileRecord>,
    /// The last time every file that was ready had been backed up.
    pub last_backup: Option<DateTime<Utc>>,
    /// The store's last failure, cleared by the next success.
    pub last_error: Option<String>,
    pub last_error_at: Option<DateTime<Utc>>,
}

/// `state/backup/<name>.json` for the training directory `save_dir`.
pub fn record_path(save_dir: &Path) -> Option<PathBuf> {
    let workdir = save_dir.parent()?;
    let name = save_dir.file_name()?.to_str()?;
    Some(super::config::state_dir(workdir).join(format!("{name}.json")))
}

/// The run directory of `save_dir` and its record's path relative to it.
pub fn record_rel(save_dir: &Path) -> Option<(&Path, PathBuf)> {
    let workdir = save_dir.parent()?;
    let name = save_dir.file_name()?.to_str()?;
    Some((
        workdir,
        super::config::state_rel().join(format!("{name}.json")),
    ))
}

impl Record {
    pub fn load(path: &Path) -> Result<Option<Record>> {
        if !path.exists() {
            return Ok(None);
        }
        let text = crate::fsutil::read_regular(path, 1 << 20)?;
        let r =
            serde_json::from_str(&text).with_context(|| format!("reading {}", path.display()))?;
        Ok(Some(r))
    }

    /// Save the record of the training directory `save_dir` in its run's
    /// state directory, never through a link (`fsutil::within`).
    pub fn save(&self, save_dir: &Path) -> Result<()> {
        let (workdir, rel) = record_rel(save_dir)
            .with_context(|| format!("{} is not a training directory", save_dir.display()))?;
        let text = serde_json::to_string_pretty(self)?;
        crate::fsutil::within::write(workdir, &rel, text.as_bytes(), 0o644)
    }
}

/// One training directory's backup as `status` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BackupView {
    /// `train`, `train-3`.
    pub dir: String,
    pub url: String,
    pub last_backup: Option<DateTime<Utc>>,
    /// How far the backup is behind the local files: 0 when every tracked file
    /// is backed up as it is now; else seconds since the oldest backed-up
    /// version of a file that has changed since (or since the creation of
    /// one never backed up, where the file system records it; else its
    /// latest write).
    pub lag_s: f64,
    /// Tracked files whose local version is not in the backup.
    pub behind: Vec<String>,
    pub last_error: Option<String>,
    pub last_error_at: Option<DateTime<Utc>>,
}

/// The backup of each training directory of the run in `workdir` that has a
/// record, as of `now`.
pub fn views(workdir: &Path, now: SystemTime) -> Vec<BackupView> {
    let dir = super::config::state_dir(workdir);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter_map(|n| n.strip_suffix(".json").map(str::to_string))
        .filter(|n| n != "settings")
        .collect();
    names.sort();
    names
        .into_iter()
        .filter_map(|name| {
            let record = Record::load(&dir.join(format!("{name}.json"))).ok()??;
            Some(view(&name, &workdir.join(&name), &record, now))
        })
        .collect()
}

/// When the file was created (its birth time), in seconds since the epoch,
/// where the file system records one.
fn first_written(path: &Path) -> Option<f64> {
    let created = std::fs::metadata(path).ok()?.created().ok()?;
    Some(
        created
            .duration_since(SystemTime::UNIX_EPOCH)
            .ok()?
            .as_secs_f64(),
    )
}

/// The view of one record against the files in `save_dir`.
pub fn view(name: &str, save_dir: &Path, record: &Record, now: SystemTime) -> BackupView {
    let now_s = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    let mut behind = Vec::new();
    let mut since: Option<f64> = None;
    for rel in TRACKED {
        let Some(stamp) = Stamp::of(&save_dir.join(rel)) else {
            continue;
        };
        let backed = record.files.get(*rel);
        if backed.map(FileRecord::stamp) == Some(stamp) {
            continue;
        }
        behind.push(rel.to_string());
        let from = match backed {
            Some(b) => b.stamp().mtime_secs(),
            // Never backed up: at risk since it was first written, not since
            // its latest rewrite (a last.pt rewritten every epoch would
            // otherwise never look more than one epoch behind).
            None => first_written(&save_dir.join(rel))
                .map_or(stamp.mtime_secs(), |c| c.min(stamp.mtime_secs())),
        };
        since = Some(since.map_or(from, |s: f64| s.min(from)));
    }
    BackupView {
        dir: name.to_string(),
        url: record.url.clone(),
        last_backup: record.last_backup,
        lag_s: since.map_or(0.0, |s| (now_s - s).max(0.0)),
        behind,
        last_error: record.last_error.clone(),
        last_error_at: record.last_error_at,
    }
}

impl BackupView {
    /// One line for `status`: "train: s3://b/p/run/train, last backup 12:00:03Z, in sync".
    pub fn line(&self, now: DateTime<Utc>) -> String {
        let last = match self.last_backup {
            Some(t) => format!(
                "last backup {} ({} ago)",
                t.format("%Y-%m-%d %H:%M:%SZ"),
                words((now - t).num_seconds().max(0) as f64)
            ),
            None => "nothing backed up yet".to_string(),
        };
        let lag = if self.behind.is_empty() {
            "in sync".to_string()
        } else {
            format!(
                "lag {} ({} not backed up)",
                words(self.lag_s),
                self.behind.join(", ")
            )
        };
        let mut line = format!("{}: {}, {last}, {lag}", self.dir, self.url);
        if let Some(e) = &self.last_error {
            line.push_str(&format!("; warning: {e}"));
        }
        line
    }
}

/// "45 s", "3 min 20 s", "2 h 5 min".
pub fn words(secs: f64) -> String {
    let s = secs.round() as u64;
    match s {
        0..=59 => format!("{s} s"),
        60..=3599 => format!("{} min {} s", s / 60, s % 60),
        _ => format!("{} h {} min", s / 3600, s % 3600 / 60),
    }
}
