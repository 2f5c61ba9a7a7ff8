//! The registry's JSON records: a model version (written once, never
//! rewritten), a tag's move and a version's removal. Each is one object put
//! in one request with create-if-absent semantics, so a reader sees all of
//! it or nothing; one that does not parse, or that names another key than
//! the one it is stored at, is never used.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The record format this build writes and reads.
pub const FORMAT: u32 = 1;
/// The largest record read.
pub const MAX_RECORD: u64 = 1 << 20;

/// One file of a model version, stored once under its SHA-256.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// `weights`, `onnx`, `args` or `results`.
    pub role: String,
    /// The file's name when pulled (`best.pt`).
    pub name: String,
    pub sha256: String,
    pub size: u64,
}

/// The final metrics of the run a version came from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    pub map50_95: Option<f64>,
    pub map50: Option<f64>,
    pub precision: Option<f64>,
    pub recall: Option<f64>,
    /// The best epoch (by mAP50-95) and the epochs trained.
    pub best_epoch: Option<u32>,
    pub epochs: Option<u32>,
    /// The export stage's `yolo val` of the exported ONNX model: its mAP50-95
    /// and milliseconds of inference per image, where it measured them.
    #[serde(default)]
    pub onnx_map50_95: Option<f64>,
    #[serde(default)]
    pub onnx_ms_per_image: Option<f64>,
}

/// Where a version came from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Source {
    /// `run` (published from a run) or `import` (base weights brought in).
    pub kind: String,
    pub run_id: Option<String>,
    /// The sweep variant (array task) of the run.
    pub variant: Option<u32>,
    pub spec_hash: Option<String>,
    /// The imported file's name.
    pub file: Option<String>,
}

/// One model version: immutable once written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelRecord {
    pub format: u32,
    pub name: String,
    pub version: u32,
    /// Random, this publication's own: the read-back after the write checks it.
    pub publish_id: String,
    pub created_at: DateTime<Utc>,
    pub user: String,
    /// The Slurm account it was published under; readers are its members,
    /// coordinators and operators unless `public`.
    pub account: Option<String>,
    pub public: bool,
    pub note: Option<String>,
    pub source: Source,
    /// The dataset's content fingerprint (from the prepare stage).
    pub fingerprint: Option<String>,
    /// The dataset YAML as the spec named it.
    pub data: Option<String>,
    #[serde(default)]
    pub class_names: Vec<String>,
    /// `n`, `s`, `m`, `l`, `x` where the base model's name says it.
    pub scale: Option<String>,
    pub imgsz: Option<String>,
    pub metrics: Metrics,
    pub ultralytics: Option<String>,
    pub torch: Option<String>,
    /// The model it was trained from: `registry:NAME@N`, or the spec's model.
    pub parent: Option<String>,
    pub files: Vec<FileEntry>,
}

impl ModelRecord {
    /// `NAME@VERSION`.
    pub fn id(&self) -> String {
        format!("{}@{}", self.name, self.version)
    }

    /// The weights file (every version has one).
    pub fn weights(&self) -> Option<&FileEntry> {
        self.files.iter().find(|f| f.role == "weights")
    }

    /// Parse a stored record and check that it is the one its key names and
    /// that its files are plain: `Err` says why it is not used.
    pub fn from_stored(bytes: &[u8], name: &str, version: u32) -> Result<ModelRecord, String> {
        let r: ModelRecord = serde_json::from_slice(bytes)
            .map_err(|e| format!("record {name}@{version} is not a valid record: {e}"))?;
        if r.format != FORMAT {
            return Err(format!(
                "record {name}@{version} has format {}; this yolo-sched reads format {FORMAT}",
                r.format
            ));
        }
        if r.name != name || r.version != version {
            return Err(format!(
                "record stored as {name}@{version} names {}@{}; it is not used",
                crate::text::echo(&r.name),
                r.version
            ));
        }
        if let Some(note) = &r.note {
            crate::names::model::check_note(note)
                .map_err(|e| format!("record {name}@{version}: {e}; it is not used"))?;
        }
        if r.weights().is_none() {
            return Err(format!("record {name}@{version} names no weights file"));
        }
        for f in &r.files {
            let plain_name = crate::names::model::check_name(&f.name).is_ok();
            let plain_sha = f.sha256.len() == 64
                && f.sha256.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f'));
            if !plain_name || !plain_sha {
                return Err(format!(
                    "record {name}@{version} names a file `{}` that is not plain; it is not used",
                    crate::text::echo(&f.name)
                ));
            }
        }
        Ok(r)
    }
}

/// A tag set (or moved) to a version: tags move by new records, the latest wins.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TagMove {
    pub format: u32,
    pub name: String,
    pub tag: String,
    pub version: u32,
    /// The move's number among this tag's moves (from 1).
    pub seq: u32,
    pub user: String,
    pub time: DateTime<Utc>,
}

/// A version removed: no longer listed nor chosen as the latest; still
/// readable by its exact number (runs that name it) until `gc`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Removal {
    pub format: u32,
    pub name: String,
    pub version: u32,
    pub user: String,
    pub time: DateTime<Utc>,
}
