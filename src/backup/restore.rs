//! Bring back missing or damaged files of a training directory from its
//! backup, before training starts (the train script, after a requeue, a
//! `resume`, or a lost node). Only what the manifest lists is restored, and
//! only when its SHA-256 matches the manifest: a damaged object is never
//! written to the run directory.

use std::path::Path;

use anyhow::{anyhow, Result};
use serde::Serialize;

use super::record::{FileRecord, Record, Remote, MANIFEST};
use super::store::{Stamp, Store, MAX_OBJECT};
use super::url::BackupUrl;

/// What a restore did.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RestoreOutcome {
    /// The training directory's backup place.
    pub url: String,
    /// The bucket has no backup of this directory yet.
    pub nothing_backed_up: bool,
    /// Files written from the backup (verified).
    pub restored: Vec<String>,
    /// Files that were fine here and were kept.
    pub kept: Vec<String>,
    /// Files that needed restoring but whose object failed its check, with why.
    pub refused: Vec<(String, String)>,
}

impl RestoreOutcome {
    /// Lines for the job log.
    pub fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.nothing_backed_up {
            out.push(format!("nothing backed up yet at {}", self.url));
        }
        for f in &self.restored {
            out.push(format!(
                "restored {f} from {} (checksum verified)",
                self.url
            ));
        }
        for (f, why) in &self.refused {
            out.push(format!("warning: {f} not restored: {why}"));
        }
        if out.is_empty() {
            out.push(format!(
                "nothing to restore: {} here already",
                if self.kept.is_empty() {
                    "no backed-up file is missing".to_string()
                } else {
                    self.kept.join(", ")
                }
            ));
        }
        out
    }
}

/// Whether the local copy of `rel` must come from the backup.
fn needs_restore(save_dir: &Path, rel: &str) -> bool {
    let path = save_dir.join(rel);
    if !path.is_file() {
        return true;
    }
    rel.ends_with(".pt") && crate::run::checkpoint::check_archive(&path).is_err()
}

/// Restore into `save_dir` from `url` in `store`: `weights/last.pt` and
/// `weights/best.pt` when missing or not a complete checkpoint; with a
/// restored `last.pt` also its `results.csv` (so the epoch count agrees with
/// the checkpoint) and a missing `args.yaml`. The state record is updated so
/// the restored files are not uploaded again.
#[cfg(test)]
pub fn restore(save_dir: &Path, url: &BackupUrl, store: &Store) -> Result<RestoreOutcome> {
    restore_with(save_dir, url, store, false)
}

/// `restore`, or with `dry_run` only what it would restore (`restored` lists
/// what would be written; nothing is fetched but the manifest).
pub fn restore_with(
    save_dir: &Path,
    url: &BackupUrl,
    store: &Store,
    dry_run: bool,
) -> Result<RestoreOutcome> {
    let mut out = RestoreOutcome {
        url: url.to_string(),
        ..RestoreOutcome::default()
    };
    let Some(bytes) = store.get_bytes(&url.key(MANIFEST), 1 << 20)? else {
        out.nothing_backed_up = true;
        return Ok(out);
    };
    let remote: Remote = serde_json::from_slice(&bytes).map_err(|e| {
        anyhow!(
            "{}: the backup manifest is unreadable: {e}",
            url.key(MANIFEST)
        )
    })?;
    let mut wanted: Vec<&str> = Vec::new();
    let last_missing = needs_restore(save_dir, "weights/last.pt");
    for rel in ["weights/last.pt", "weights/best.pt"] {
        if remote.files.contains_key(rel) {
            if needs_restore(save_dir, rel) {
                wanted.push(rel);
            } else {
                out.kept.push(rel.to_string());
            }
        }
    }
    if last_missing && remote.files.contains_key("weights/last.pt") {
        if remote.files.contains_key("results.csv") {
            wanted.push("results.csv");
        }
        if remote.files.contains_key("args.yaml") && !save_dir.join("args.yaml").is_file() {
            wanted.push("args.yaml");
        }
    }
    let record_path = super::record::record_path(save_dir);
    let mut record = record_path
        .as_deref()
        .and_then(|p| Record::load(p).ok().flatten())
        .filter(|r| r.url == url.to_string())
        .unwrap_or_else(|| Record {
            url: url.to_string(),
            ..Record::default()
        });
    if dry_run {
        out.restored = wanted.iter().map(|s| s.to_string()).collect();
        return Ok(out);
    }
    for rel in wanted {
        let expected = &remote.files[rel];
        match fetch_checked(store, url, rel, expected) {
            Ok(data) => {
                let path = save_dir.join(rel);
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir)
                        .map_err(|e| anyhow!("creating {}: {e}", dir.display()))?;
                }
                crate::fsutil::write_atomic(&path, &data, 0o644)?;
                if rel.ends_with(".pt") {
                    if let Err(why) = crate::run::checkpoint::check_archive(&path) {
                        // The manifest only lists complete checkpoints; be safe anyway.
                        let _ = std::fs::remove_file(&path);
                        out.refused.push((rel.to_string(), why));
                        continue;
                    }
                }
                if let Some(stamp) = Stamp::of(&path) {
                    record.files.insert(
                        rel.to_string(),
                        FileRecord {
                            mtime_ns: stamp.mtime_ns,
                            ..expected.clone()
                        },
                    );
                }
                out.restored.push(rel.to_string());
            }
            Err(why) => out.refused.push((rel.to_string(), why)),
        }
    }
    if !out.restored.is_empty() {
        if let Some(p) = &record_path {
            record.save(p)?;
        }
    }
    Ok(out)
}

/// Restore `save_dir` from its run's backup (or with `dry_run` say what would
/// be restored); `None` when the run has no backup.
pub fn restore_run(save_dir: &Path, dry_run: bool) -> Result<Option<RestoreOutcome>> {
    let Some((_, url)) = super::sync::settings_for(save_dir)? else {
        return Ok(None);
    };
    let store = Store::s3(&url, &super::store::Credentials::from_process())?;
    restore_with(save_dir, &url, &store, dry_run).map(Some)
}

/// The object of `rel`, only if its size and SHA-256 are the manifest's.
fn fetch_checked(
    store: &Store,
    url: &BackupUrl,
    rel: &str,
    expected: &FileRecord,
) -> Result<Vec<u8>, String> {
    let data = store
        .get_bytes(&url.key(rel), expected.size.min(MAX_OBJECT))
        .map_err(|e| format!("{e:#}"))?
        .ok_or_else(|| "the manifest lists it but the object is gone".to_string())?;
    let sha = {
        use sha2::Digest;
        super::store::hex(&sha2::Sha256::digest(&data))
    };
    if data.len() as u64 != expected.size || sha != expected.sha256 {
        return Err(format!(
            "checksum mismatch: the object is {} bytes with SHA-256 {}…, the backup recorded {} bytes with {}… (damaged in the store; the local file is left as it is)",
            data.len(),
            &sha[..12],
            expected.size,
            &expected.sha256[..expected.sha256.len().min(12)]
        ));
    }
    Ok(data)
}
