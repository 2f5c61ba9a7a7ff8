//! The loop-friendly backup of one training directory: `Backup::tick` looks
//! at the tracked files, hands what is stable and complete to a worker thread
//! that uploads and verifies it, and returns at once with what happened since
//! the last tick. The job agent calls `tick` from its loop; until it does,
//! `yolo-sched backup sync --watch` runs the same loop.
//!
//! A file is uploaded when it differs from what was backed up AND it is
//! stable (the same size and mtime as at the last tick, or not written for
//! `QUIET`: Ultralytics writes `last.pt` with a plain `write_bytes`) AND, for
//! a checkpoint, it is a complete zip archive
//! (`rundir::checkpoint::check_archive`). The upload itself checks the file did
//! not change while it was read (`store::put_file`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{anyhow, Result};
use chrono::{DateTime, Utc};

use super::config::RunBackup;
use super::record::{
    version_key, FileRecord, Record, Remote, MANIFEST, MANIFEST_VERSION, TRACKED, VERSIONS,
};
use super::store::{put_file, Stamp, Uploaded};
use crate::names::backup_url::BackupUrl;
use crate::objstore::store::{PutError, Store};

/// A file not written for this long counts as stable.
pub const QUIET: Duration = Duration::from_secs(1);

/// Something a tick did, for the job log and the state record.
#[derive(Debug, Clone, PartialEq)]
pub enum BackupEvent {
    /// A file was uploaded and verified.
    Uploaded {
        file: String,
        size: u64,
        seconds: f64,
        /// From the local write to the verified object.
        write_to_backup_s: f64,
    },
    /// A checkpoint is not complete yet (being written): not uploaded.
    Incomplete { file: String, why: String },
    /// The file changed while it was uploaded: tried again once stable.
    Changed { file: String },
    /// What the store holds differs from what was sent: not recorded.
    Mismatch { file: String },
    /// The store cannot be reached or refuses: a warning, training goes on.
    StoreFailed { error: String },
    /// The store works again after a failure.
    Recovered,
}

impl std::fmt::Display for BackupEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BackupEvent::Uploaded {
                file,
                size,
                seconds,
                write_to_backup_s,
            } => write!(
                f,
                "backed up {file} ({:.1} MB in {seconds:.2} s, {:.1} s after it was written)",
                *size as f64 / 1e6,
                write_to_backup_s
            ),
            BackupEvent::Incomplete { file, why } => {
                write!(f, "{file} is not a complete checkpoint yet ({why}); waiting")
            }
            BackupEvent::Changed { file } => {
                write!(f, "{file} changed while it was uploaded; trying again when it is stable")
            }
            BackupEvent::Mismatch { file } => write!(
                f,
                "warning: the store returned other bytes for {file} than were sent; the upload is not used"
            ),
            BackupEvent::StoreFailed { error } => write!(
                f,
                "warning: backup store unavailable, training goes on: {error}"
            ),
            BackupEvent::Recovered => write!(f, "backup store reachable again"),
        }
    }
}

struct Job {
    files: Vec<(String, PathBuf, Stamp)>,
    remote: Remote,
}

struct Done {
    results: Vec<(String, Stamp, Result<Uploaded, PutError>)>,
    /// The manifest as written, or why it could not be.
    remote: Result<Remote>,
    finished_at: SystemTime,
}

/// The backup of one training directory.
pub struct Backup {
    save_dir: PathBuf,
    url: BackupUrl,
    record_path: Option<PathBuf>,
    record: Record,
    remote: Remote,
    /// Stamp seen at the previous tick, per file: stable means seen twice.
    seen: BTreeMap<String, Stamp>,
    /// Incomplete checkpoints already reported, so each is said once.
    reported: BTreeMap<String, Stamp>,
    jobs: mpsc::Sender<Job>,
    done: mpsc::Receiver<Done>,
    in_flight: bool,
    failing: Option<String>,
    /// The last finished upload job met a store failure.
    last_failed: bool,
}

impl Backup {
    /// The backup of `save_dir` (`<workdir>/train`) as saved for its run at
    /// submission; `None` when the run has no backup.
    pub fn from_config(save_dir: &Path) -> Result<Option<Backup>> {
        let Some((settings, url)) = settings_for(save_dir)? else {
            return Ok(None);
        };
        let _ = settings;
        let store = Store::s3(&url, &crate::objstore::Credentials::from_process())?;
        Ok(Some(Backup::new(save_dir, url, store)))
    }

    /// The backup of `save_dir` to `url` in `store`; the record goes to the
    /// run's state directory.
    pub fn new(save_dir: &Path, url: BackupUrl, store: Store) -> Backup {
        let record_path = super::record::record_path(save_dir);
        let record = record_path
            .as_deref()
            .and_then(|p| Record::load(p).ok().flatten())
            .filter(|r| r.url == url.to_string())
            .unwrap_or_else(|| Record {
                url: url.to_string(),
                ..Record::default()
            });
        let remote = Remote {
            version: MANIFEST_VERSION,
            files: record.files.clone(),
        };
        let (jobs, job_rx) = mpsc::channel::<Job>();
        let (done_tx, done) = mpsc::channel::<Done>();
        let worker_url = url.clone();
        // Local copies of what is being uploaded, beside the record in the
        // run directory; every file is opened below the run directory
        // without following a link (`fsutil::within`).
        let root = save_dir.parent().unwrap_or(save_dir).to_path_buf();
        let name = save_dir
            .file_name()
            .map_or_else(|| PathBuf::from("."), PathBuf::from);
        std::thread::spawn(move || {
            let dirs = Dirs {
                snapshots: super::config::state_rel().join(".snapshots"),
                root,
                name,
            };
            while let Ok(job) = job_rx.recv() {
                let d = run_job(&store, &worker_url, &dirs, job);
                if done_tx.send(d).is_err() {
                    break;
                }
            }
        });
        Backup {
            save_dir: save_dir.to_path_buf(),
            url,
            record_path,
            record,
            remote,
            seen: BTreeMap::new(),
            reported: BTreeMap::new(),
            jobs,
            done,
            in_flight: false,
            failing: None,
            last_failed: false,
        }
    }

    pub fn url(&self) -> &BackupUrl {
        &self.url
    }

    pub fn record(&self) -> &Record {
        &self.record
    }

    /// Whether an upload is under way.
    pub fn busy(&self) -> bool {
        self.in_flight
    }

    /// Look once: take in what the worker finished, start uploading what is
    /// ready. Never waits for the network.
    pub fn tick(&mut self, now: SystemTime) -> Vec<BackupEvent> {
        let mut events = Vec::new();
        if self.in_flight {
            match self.done.try_recv() {
                Ok(d) => self.apply(d, &mut events),
                Err(mpsc::TryRecvError::Empty) => {}
                Err(mpsc::TryRecvError::Disconnected) => {
                    self.in_flight = false;
                    events.push(self.failed("the upload worker stopped".into(), now));
                }
            }
        }
        let mut ready = Vec::new();
        let root = self.save_dir.parent().unwrap_or(&self.save_dir);
        let name = self
            .save_dir
            .file_name()
            .map(Path::new)
            .unwrap_or(Path::new("."));
        for rel in TRACKED {
            let path = self.save_dir.join(rel);
            // A link (to a file or a directory) is not a file of this run:
            // it is never read, so never uploaded.
            let Some(stamp) = Stamp::within(root, &name.join(rel)) else {
                self.seen.remove(*rel);
                continue;
            };
            if self.record.files.get(*rel).map(FileRecord::stamp) == Some(stamp) {
                continue;
            }
            // Stable: unchanged since the last look, or quiet for `QUIET` now.
            let unchanged = self.seen.insert(rel.to_string(), stamp) == Some(stamp);
            let quiet = now
                .duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| d.as_secs_f64() - stamp.mtime_secs() >= QUIET.as_secs_f64())
                .unwrap_or(false);
            if !unchanged && !quiet {
                continue;
            }
            if rel.ends_with(".pt") {
                if let Err(why) = crate::rundir::checkpoint::check_archive(&path) {
                    if self.reported.insert(rel.to_string(), stamp) != Some(stamp) {
                        events.push(BackupEvent::Incomplete {
                            file: rel.to_string(),
                            why,
                        });
                    }
                    continue;
                }
            }
            ready.push((rel.to_string(), path, stamp));
        }
        if !self.in_flight && !ready.is_empty() {
            let job = Job {
                files: ready,
                remote: self.remote.clone(),
            };
            if self.jobs.send(job).is_ok() {
                self.in_flight = true;
            } else {
                events.push(self.failed("the upload worker stopped".into(), now));
            }
        }
        events
    }

    /// Wait up to `timeout` for the upload under way, then tick.
    pub fn wait(&mut self, timeout: Duration) -> Vec<BackupEvent> {
        let mut events = Vec::new();
        if self.in_flight {
            match self.done.recv_timeout(timeout) {
                Ok(d) => self.apply(d, &mut events),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    self.in_flight = false;
                    events.push(self.failed("the upload worker stopped".into(), SystemTime::now()));
                }
            }
        }
        events
    }

    /// Back up everything that is ready now and wait for it: two looks
    /// `settle` apart (a file must be stable), then the uploads, at most
    /// `timeout` in all. For `backup sync --once` and the last pass at the
    /// end of training.
    pub fn sync_now(&mut self, settle: Duration, timeout: Duration) -> Vec<BackupEvent> {
        let deadline = Instant::now() + timeout;
        let mut events = self.wait(timeout);
        events.extend(self.tick(SystemTime::now()));
        std::thread::sleep(settle.min(deadline.saturating_duration_since(Instant::now())));
        loop {
            events.extend(self.tick(SystemTime::now()));
            if !self.in_flight {
                break;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            events.extend(self.wait(left));
            // The store failed: one try is enough here (the watch loop tries
            // again at its next look).
            if !self.in_flight && self.last_failed {
                break;
            }
        }
        events
    }

    fn failed(&mut self, error: String, at: SystemTime) -> BackupEvent {
        self.record.last_error = Some(error.clone());
        self.record.last_error_at = Some(DateTime::<Utc>::from(at));
        self.save_record();
        self.failing = Some(error.clone());
        BackupEvent::StoreFailed { error }
    }

    fn apply(&mut self, d: Done, events: &mut Vec<BackupEvent>) {
        self.in_flight = false;
        let mut error: Option<String> = None;
        let mut uploaded_any = false;
        for (rel, stamp, result) in d.results {
            match result {
                Ok(up) => {
                    uploaded_any = true;
                    let uploaded_at = DateTime::<Utc>::from(d.finished_at);
                    let written = stamp.mtime_secs();
                    let done_s = d
                        .finished_at
                        .duration_since(SystemTime::UNIX_EPOCH)
                        .map(|x| x.as_secs_f64())
                        .unwrap_or(written);
                    let rec = FileRecord {
                        key: Some(version_key(&rel, &up.sha256)),
                        sha256: up.sha256,
                        size: up.size,
                        mtime_ns: stamp.mtime_ns,
                        uploaded_at,
                        write_to_backup_s: (done_s - written).max(0.0),
                    };
                    events.push(BackupEvent::Uploaded {
                        file: rel.clone(),
                        size: up.size,
                        seconds: up.seconds,
                        write_to_backup_s: rec.write_to_backup_s,
                    });
                    self.record.files.insert(rel, rec);
                }
                Err(PutError::Changed) => events.push(BackupEvent::Changed { file: rel }),
                Err(PutError::Mismatch { .. }) => events.push(BackupEvent::Mismatch { file: rel }),
                Err(PutError::Store(e)) => {
                    error.get_or_insert_with(|| format!("{e:#}"));
                }
            }
        }
        match d.remote {
            Ok(remote) => self.remote = remote,
            Err(e) => {
                error.get_or_insert_with(|| format!("{e:#}"));
                // The manifest was not written: what it lacks is not backed up.
                self.record.files = self.remote.files.clone();
                uploaded_any = false;
                events.retain(|e| !matches!(e, BackupEvent::Uploaded { .. }));
            }
        }
        self.last_failed = error.is_some();
        match error {
            Some(e) => {
                let again = self.failing.as_deref() == Some(e.as_str());
                let ev = self.failed(e, d.finished_at);
                if !again {
                    events.push(ev);
                }
            }
            None => {
                if self.failing.take().is_some() {
                    events.push(BackupEvent::Recovered);
                }
                self.record.last_error = None;
                self.record.last_error_at = None;
                if uploaded_any {
                    self.record.last_backup = Some(DateTime::<Utc>::from(d.finished_at));
                }
                self.save_record();
            }
        }
    }

    fn save_record(&self) {
        // The record is for `status`; failing to write it (a link in the way
        // is refused, never followed) never stops the backup.
        if self.record_path.is_some() {
            let _ = self.record.save(&self.save_dir);
        }
    }
}

/// Where a job's files are: the run directory, the training directory's
/// name in it, and the snapshots' directory (relative to the run directory).
struct Dirs {
    root: PathBuf,
    name: PathBuf,
    snapshots: PathBuf,
}

/// One pass: each ready file goes to a key of its own (`versions/<file>/<sha256>`),
/// verified; then the manifest naming those keys replaces the old one in one
/// PUT; only then are the versions it no longer names deleted. So at every
/// moment the manifest in the bucket names complete, verified objects: a
/// pass killed anywhere leaves the last consistent checkpoint restorable.
fn run_job(store: &Store, url: &BackupUrl, dirs: &Dirs, job: Job) -> Done {
    let before = job.remote.clone();
    let mut remote = job.remote;
    let mut results = Vec::new();
    let mut store_down = false;
    for (rel, _path, stamp) in job.files {
        if store_down {
            break;
        }
        let snapshot = dirs.snapshots.join(rel.replace('/', "_"));
        let current = remote
            .files
            .get(&rel)
            .and_then(|f| f.key.as_deref().map(|k| (f.sha256.as_str(), url.key(k))));
        let key_for = |sha: &str| url.key(&version_key(&rel, sha));
        let result = put_file(
            store,
            &dirs.root,
            &dirs.name.join(&rel),
            stamp,
            &snapshot,
            current.as_ref().map(|(sha, key)| (*sha, key.as_str())),
            &key_for,
        );
        if let Ok(up) = &result {
            let now = SystemTime::now();
            remote.files.insert(
                rel.clone(),
                FileRecord {
                    sha256: up.sha256.clone(),
                    size: up.size,
                    mtime_ns: stamp.mtime_ns,
                    uploaded_at: DateTime::<Utc>::from(now),
                    write_to_backup_s: 0.0,
                    key: Some(version_key(&rel, &up.sha256)),
                },
            );
        }
        store_down = matches!(result, Err(PutError::Store(_)));
        results.push((rel, stamp, result));
    }
    let any = results.iter().any(|(_, _, r)| r.is_ok());
    let remote = if any {
        remote.version = MANIFEST_VERSION;
        serde_json::to_vec_pretty(&remote)
            .map_err(|e| anyhow!(e))
            .and_then(|bytes| store.put_bytes(&url.key(MANIFEST), bytes))
            .map(|()| {
                // The new manifest is in the bucket: what it no longer names
                // can go. A failure here only leaves garbage, never a gap.
                collect_garbage(store, url, &before, &remote);
                remote
            })
    } else {
        Ok(remote)
    };
    Done {
        results,
        remote,
        finished_at: SystemTime::now(),
    }
}

/// Delete the objects of this training directory that `now` (the manifest
/// just written) does not name: older versions, versions a killed pass left
/// behind, and the plain-key objects of a format-1 manifest once replaced.
/// One writer per training directory is assumed (the job's helper).
fn collect_garbage(store: &Store, url: &BackupUrl, before: &Remote, now: &Remote) {
    let named: std::collections::BTreeSet<String> = now
        .files
        .iter()
        .map(|(rel, f)| url.key(f.object_key(rel)))
        .collect();
    if let Ok(keys) = store.list(&url.key(&format!("{VERSIONS}/"))) {
        for key in keys.iter().filter(|k| !named.contains(*k)) {
            let _ = store.delete(key);
        }
    }
    for (rel, old) in &before.files {
        let key = url.key(old.object_key(rel));
        if old.key.is_none() && !named.contains(&key) {
            let _ = store.delete(&key);
        }
    }
}

/// The run's saved settings and the URL of `save_dir` under them; `None`
/// when the run has no backup. `save_dir` must be `<workdir>/<name>`.
pub fn settings_for(save_dir: &Path) -> Result<Option<(RunBackup, BackupUrl)>> {
    let workdir = save_dir
        .parent()
        .ok_or_else(|| anyhow!("{} has no parent directory", save_dir.display()))?;
    let name = save_dir
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| anyhow!("{} has no usable name", save_dir.display()))?;
    let Some(settings) = RunBackup::load(workdir)? else {
        return Ok(None);
    };
    let url = settings
        .url
        .join(name)
        .map_err(|e| crate::error::invalid(format!("training directory {name:?}: {e}")))?;
    Ok(Some((settings, url)))
}
