//! Bring back missing or damaged files of a training directory from its
//! backup, before training starts (the train script, after a requeue, a
//! `resume`, or a lost node). Only what the manifest lists is restored, and
//! only when its SHA-256 matches the manifest: a damaged object is never
//! written to the run directory.

use std::path::Path;

use anyhow::{anyhow, Result};
use serde::Serialize;

use super::record::{FileRecord, Record, Remote, MANIFEST, MANIFEST_VERSION};
use super::store::Stamp;
use crate::names::backup_url::BackupUrl;
use crate::objstore::store::{Store, MAX_OBJECT};
use crate::rundir::layout;

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

/// Whether the local copy of `rel` must come from the backup (it is known
/// not to be a link: `fsutil::within::check` passed).
fn needs_restore(save_dir: &Path, rel: &str) -> bool {
    let path = save_dir.join(rel);
    if !path.is_file() {
        return true;
    }
    rel.ends_with(".pt") && crate::rundir::checkpoint::check_archive(&path).is_err()
}

/// The files restored together: a checkpoint and what must agree with it.
/// All or nothing: when one member cannot be restored, none is written.
struct Group {
    members: Vec<&'static str>,
}

/// Refuse every member of `group`: `culprit` for `why`, the others because of it.
fn refuse_group(out: &mut RestoreOutcome, group: &Group, culprit: &str, why: String) {
    for m in &group.members {
        if *m == culprit {
            out.refused.push((m.to_string(), why.clone()));
        } else {
            out.refused.push((
                m.to_string(),
                format!(
                    "not restored because {culprit} was not (a checkpoint and its files are restored all together or not at all); the local file is left as it is"
                ),
            ));
        }
    }
}

/// Restore into `save_dir` from `url` in `store`: `weights/last.pt` and
/// `weights/best.pt` when missing or not a complete checkpoint; with a
/// restored `last.pt` also its `results.csv` (so the epoch count agrees with
/// the checkpoint) and a missing `args.yaml`, all together or none of them.
/// Nothing is written or read through a symbolic link inside the run
/// directory: a link where a file or directory would be written is refused
/// and left alone (`fsutil::within`). The state record is updated so the
/// restored files are not uploaded again.
#[cfg(test)]
pub fn restore(save_dir: &Path, url: &BackupUrl, store: &Store) -> Result<RestoreOutcome> {
    restore_with(save_dir, url, store, false)
}

/// The backup's manifest, if there is one; an unreadable one, or one of a
/// newer format, is an error.
fn read_manifest(store: &Store, url: &BackupUrl) -> Result<Option<Remote>> {
    let Some(bytes) = store.get_bytes(&url.key(MANIFEST), 1 << 20)? else {
        return Ok(None);
    };
    let remote: Remote = serde_json::from_slice(&bytes).map_err(|e| {
        anyhow!(
            "{}: the backup manifest is unreadable: {e}",
            url.key(MANIFEST)
        )
    })?;
    if remote.version > MANIFEST_VERSION {
        return Err(anyhow!(
            "{}: manifest format {} was written by a newer yolo-sched (this one reads formats 1 to {MANIFEST_VERSION}); restore with that version",
            url.key(MANIFEST),
            remote.version
        ));
    }
    Ok(Some(remote))
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
    let Some(remote) = read_manifest(store, url)? else {
        out.nothing_backed_up = true;
        return Ok(out);
    };
    let root = save_dir
        .parent()
        .ok_or_else(|| anyhow!("{} has no parent directory", save_dir.display()))?;
    let name = Path::new(
        save_dir
            .file_name()
            .ok_or_else(|| anyhow!("{} has no name", save_dir.display()))?,
    );
    let inside = |rel: &str| name.join(rel);
    let mut groups: Vec<Group> = Vec::new();
    for rel in [layout::WEIGHTS_LAST, layout::WEIGHTS_BEST] {
        if !remote.files.contains_key(rel) {
            continue;
        }
        if let Err(e) = crate::fsutil::within::check(root, &inside(rel)) {
            out.refused.push((rel.to_string(), format!("{e:#}")));
            continue;
        }
        if !needs_restore(save_dir, rel) {
            out.kept.push(rel.to_string());
            continue;
        }
        let mut members = vec![rel];
        if rel == layout::WEIGHTS_LAST {
            if remote.files.contains_key(layout::RESULTS) {
                members.push(layout::RESULTS);
            }
            let args_missing = crate::fsutil::within::check(root, &inside(layout::ARGS)).is_ok()
                && !save_dir.join(layout::ARGS).is_file();
            if remote.files.contains_key(layout::ARGS) && args_missing {
                members.push(layout::ARGS);
            }
        }
        groups.push(Group { members });
    }
    // A link in the way of any member refuses the whole group.
    let mut ready: Vec<Group> = Vec::new();
    for g in groups {
        let blocked = g.members.iter().find_map(|m| {
            crate::fsutil::within::check(root, &inside(m))
                .err()
                .map(|e| (*m, e))
        });
        match blocked {
            Some((m, e)) => refuse_group(&mut out, &g, m, format!("{e:#}")),
            None => ready.push(g),
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
        out.restored = ready
            .iter()
            .flat_map(|g| g.members.iter().map(|s| s.to_string()))
            .collect();
        return Ok(out);
    }
    for g in ready {
        // Every member fetched and verified before anything is written.
        let mut fetched: Vec<(&str, Vec<u8>)> = Vec::new();
        let mut failed = None;
        for m in &g.members {
            match fetch_checked(store, url, m, &remote.files[*m]) {
                Ok(data) => fetched.push((m, data)),
                Err(why) => {
                    failed = Some((*m, why));
                    break;
                }
            }
        }
        if let Some((m, why)) = failed {
            refuse_group(&mut out, &g, m, why);
            continue;
        }
        // The checkpoint first: only once it is in place and complete do
        // the files that go with it follow.
        let mut written: Vec<&str> = Vec::new();
        let mut refused = None;
        for (m, data) in &fetched {
            match crate::fsutil::within::write(root, &inside(m), data, 0o644) {
                Ok(()) => written.push(m),
                Err(e) if crate::fsutil::within::is_refused(&e) => {
                    refused = Some((*m, format!("{e:#}")));
                    break;
                }
                Err(e) => return Err(e),
            }
            if m.ends_with(".pt") {
                if let Err(why) = crate::rundir::checkpoint::check_archive(&save_dir.join(m)) {
                    // The manifest only lists complete checkpoints; be safe anyway.
                    let _ = crate::fsutil::within::remove(root, &inside(m));
                    written.pop();
                    refused = Some((*m, why));
                    break;
                }
            }
        }
        if let Some((m, why)) = refused {
            // Only the checkpoint can have been written before a refusal of
            // a later member: take it back, so none of the group is there.
            for w in written {
                let _ = crate::fsutil::within::remove(root, &inside(w));
            }
            refuse_group(&mut out, &g, m, why);
            continue;
        }
        for m in &g.members {
            let expected = &remote.files[*m];
            if let Some(stamp) = Stamp::within(root, &inside(m)) {
                record.files.insert(
                    m.to_string(),
                    FileRecord {
                        mtime_ns: stamp.mtime_ns,
                        ..expected.clone()
                    },
                );
            }
            out.restored.push(m.to_string());
        }
    }
    if !out.restored.is_empty() && record_path.is_some() {
        record.save(save_dir)?;
    }
    Ok(out)
}

/// Restore `save_dir` from its run's backup (or with `dry_run` say what would
/// be restored); `None` when the run has no backup.
pub fn restore_run(save_dir: &Path, dry_run: bool) -> Result<Option<RestoreOutcome>> {
    let Some((_, url)) = super::sync::settings_for(save_dir)? else {
        return Ok(None);
    };
    let store = Store::s3(&url, &crate::objstore::Credentials::from_process())?;
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
        .get_bytes(
            &url.key(expected.object_key(rel)),
            expected.size.min(MAX_OBJECT),
        )
        .map_err(|e| format!("{e:#}"))?
        .ok_or_else(|| "the manifest lists it but the object is gone".to_string())?;
    let sha = {
        use sha2::Digest;
        crate::objstore::store::hex(&sha2::Sha256::digest(&data))
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
