//! The memory guard's record of one task, `state/<stage>[.<task>].guard.json`,
//! written by the job agent (`agent::run`) and read by the run model
//! (`run::status`): a stop by the guard is why that task failed.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// What the guard did to one task, in `state/<key>.guard.json`. `status`
/// reads it (`run::status`): a stop is why the stage failed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GuardRecord {
    pub array_job_id: String,
    pub job_id: String,
    /// `warned` or `stopped` (or `would_stop` where the site lets it only warn).
    pub action: String,
    /// "stopped by the memory guard: grew 640 MB/min for 3 min, 4.4 of 4.75 GiB".
    pub message: String,
    /// Every warning, in order.
    pub warnings: Vec<String>,
    pub device: String,
    pub used_bytes: u64,
    pub total_bytes: u64,
    pub time: Option<DateTime<Utc>>,
    /// How the trainer went: `terminated` (within the grace), `killed`, `gone`.
    pub stopped: Option<String>,
}

/// Write a record atomically.
pub fn write_record(path: &Path, record: &GuardRecord) -> Result<()> {
    let mut text = serde_json::to_vec(record)?;
    text.push(b'\n');
    crate::fsutil::write_atomic(path, &text, 0o644)
}

/// The guard records under `<workdir>/state`, by `(stage, task)`. Unreadable
/// ones are skipped, as the job files are.
pub fn read_records(workdir: &Path) -> BTreeMap<(String, Option<u32>), GuardRecord> {
    let mut out = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(workdir.join(super::layout::STATE)) else {
        return out;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(key) = name.strip_suffix(super::layout::GUARD) else {
            continue;
        };
        let (stage, task) = match key.split_once('.') {
            Some((s, t)) => match t.parse::<u32>() {
                Ok(t) => (s.to_string(), Some(t)),
                Err(_) => continue,
            },
            None => (key.to_string(), None),
        };
        let Ok(text) = crate::fsutil::read_regular(&e.path(), 1 << 20) else {
            continue;
        };
        if let Ok(r) = serde_json::from_str::<GuardRecord>(&text) {
            out.insert((stage, task), r);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guard_records_are_read_by_stage_and_task() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("state")).unwrap();
        let r = GuardRecord {
            job_id: "7".into(),
            action: "stopped".into(),
            ..GuardRecord::default()
        };
        write_record(&dir.path().join("state/train.2.guard.json"), &r).unwrap();
        write_record(&dir.path().join("state/train.guard.json"), &r).unwrap();
        std::fs::write(dir.path().join("state/val.guard.json"), "{broken").unwrap();
        let got = read_records(dir.path());
        assert_eq!(got.len(), 2);
        assert_eq!(got[&("train".to_string(), Some(2))], r);
    }
}
