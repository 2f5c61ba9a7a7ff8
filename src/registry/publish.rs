//! What goes into a version: the files of a completed run (or an imported
//! checkpoint) copied to a private snapshot, hashed as they are copied, the
//! weights checked as a torch zip checkpoint (`rundir::checkpoint::check_archive`:
//! never unpickled), the facts for the record read from the snapshot; then
//! the blobs uploaded verified, and only then the record written.

use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};

use super::record::{FileEntry, Metrics, ModelRecord, Source, FORMAT};
use super::store::Registry;
use crate::error::invalid;
use crate::rundir::checkpoint::{self, CheckpointState};
use crate::rundir::layout;
use crate::rundir::manifest::Manifest;

/// Who publishes, and how the version is shown.
#[derive(Debug, Clone, Default)]
pub struct Publisher {
    pub name: String,
    pub note: Option<String>,
    pub public: bool,
    pub user: String,
    pub account: Option<String>,
}

impl Publisher {
    /// The publisher of `name` under `account` (else SLURM_JOB_ACCOUNT,
    /// SBATCH_ACCOUNT, else the caller's default account in accounting). The
    /// caller must be a member of it (a coordinator or an operator may too),
    /// or the account's members would read what an outsider put in their name.
    pub fn under_account(
        name: &str,
        note: Option<String>,
        public: bool,
        account: Option<String>,
        caller: &super::access::Caller,
    ) -> Result<Publisher> {
        let account = account
            .or_else(|| {
                ["SLURM_JOB_ACCOUNT", "SBATCH_ACCOUNT"]
                    .iter()
                    .find_map(|v| std::env::var(v).ok().filter(|a| !a.is_empty()))
            })
            .or_else(|| caller.default_account());
        if let Some(a) = &account {
            crate::names::model::check_account(a).map_err(invalid)?;
            caller.may_publish_under(a).map_err(|e| {
                crate::error::with_hint(
                    invalid(format!("{e}; nothing was published")),
                    "name an account of yours with --account, or ask its coordinator to add you",
                )
            })?;
        }
        Ok(Publisher {
            name: name.to_string(),
            note,
            public,
            user: caller.user.clone(),
            account,
        })
    }
}

impl Publisher {
    /// A draft version of this publisher's, from `source`, holding `files`:
    /// every fact of the model itself left empty, for the caller to fill.
    pub fn draft(&self, source: Source, files: Vec<FileEntry>) -> ModelRecord {
        ModelRecord {
            format: FORMAT,
            name: self.name.clone(),
            version: 0,
            publish_id: crate::id::random_hex(16),
            created_at: chrono::Utc::now(),
            user: self.user.clone(),
            account: self.account.clone(),
            public: self.public,
            note: self.note.clone(),
            source,
            fingerprint: None,
            data: None,
            class_names: vec![],
            scale: None,
            imgsz: None,
            metrics: Metrics::default(),
            ultralytics: None,
            torch: None,
            parent: None,
            files,
        }
    }
}

/// A private directory for the copies, removed when dropped.
pub struct Snapshot {
    dir: PathBuf,
}

/// The prefix of snapshot directories: `yolo-sched-publish-<pid>-<random>`.
const SNAPSHOT_PREFIX: &str = "yolo-sched-publish-";

/// Remove the snapshot directories under `tmp` that a killed publisher left:
/// ours (same owner), named for a process that no longer runs.
fn remove_stale(tmp: &Path) {
    use std::os::unix::fs::MetadataExt;
    let me = nix::unistd::geteuid().as_raw();
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(SNAPSHOT_PREFIX)
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let ours = e
            .metadata()
            .is_ok_and(|m| m.is_dir() && m.uid() == me && !m.file_type().is_symlink());
        if ours && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

impl Snapshot {
    /// A new private directory under `$TMPDIR`; those of killed publishers go first.
    pub fn new() -> Result<Snapshot> {
        remove_stale(&std::env::temp_dir());
        let dir = std::env::temp_dir().join(format!(
            "{SNAPSHOT_PREFIX}{}-{}",
            std::process::id(),
            crate::id::random_hex(6)
        ));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .with_context(|| format!("creating {}", dir.display()))?;
        Ok(Snapshot { dir })
    }

    /// Copy what `from` reads into the snapshot as `name`: its SHA-256 and size.
    fn take(&self, from: &mut dyn Read, name: &str) -> Result<(PathBuf, String, u64)> {
        let path = self.dir.join(name);
        let mut to = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| {
                crate::fsutil::io_error(e, format!("creating {}", path.display()), &self.dir)
            })?;
        let mut h = Sha256::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut total = 0u64;
        loop {
            let n = from.read(&mut buf)?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
            to.write_all(&buf[..n]).map_err(|e| {
                crate::fsutil::io_error(e, format!("writing {}", path.display()), &self.dir)
            })?;
            total += n as u64;
        }
        to.sync_all()?;
        Ok((path, crate::objstore::store::hex(&h.finalize()), total))
    }
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A file taken into the snapshot.
struct Taken {
    entry: FileEntry,
    path: PathBuf,
}

/// The files of a run's training directory that a version holds: role, path
/// below the training directory, the pulled name, whether it must be there.
const RUN_FILES: &[(&str, &str, &str, bool)] = &[
    ("weights", layout::WEIGHTS_BEST, "best.pt", true),
    ("onnx", "weights/best.onnx", "best.onnx", false),
    ("args", layout::ARGS, "args.yaml", true),
    ("results", layout::RESULTS, "results.csv", true),
];

/// A draft of the version `manifest`'s run (training directory `train`, or
/// `train-<variant>`) would become, with its files in `snap`. Refuses a run
/// whose training did not finish, whose weights fail the checkpoint check,
/// or whose files are links (never followed) or not regular files.
pub fn draft_from_run(
    manifest: &Manifest,
    variant: Option<u32>,
    who: &Publisher,
    snap: &Snapshot,
) -> Result<(ModelRecord, Vec<PathBuf>)> {
    let workdir = &manifest.workdir;
    let dir = match variant {
        Some(v) => crate::rundir::layout::train_dir(Some(v)),
        None if manifest.variants > 1 => {
            return Err(invalid(format!(
                "run {} is a sweep of {} variants: name one with --variant N (its training directory train-N)",
                manifest.run_id, manifest.variants
            )))
        }
        None => crate::rundir::layout::train_dir(None),
    };
    let train = workdir.join(&dir);
    crate::fsutil::within::check(workdir, &Path::new(&dir).join(layout::ARGS)).map_err(|e| {
        invalid(format!(
            "{e:#}; publish reads only files inside the run directory"
        ))
    })?;
    match checkpoint::state(&train) {
        CheckpointState::Finished { .. } => {}
        other => {
            return Err(invalid(format!(
                "run {} ({dir}) is not complete: {}; publish a run whose training finished",
                manifest.run_id,
                other.line()
            )))
        }
    }
    let mut taken = Vec::new();
    for (role, rel, name, required) in RUN_FILES {
        let rel = Path::new(&dir).join(rel);
        match std::fs::symlink_metadata(workdir.join(&rel)) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !required => continue,
            _ => {}
        }
        let mut f = crate::fsutil::within::open_read(workdir, &rel).map_err(|e| {
            if crate::fsutil::within::is_refused(&e) {
                invalid(format!(
                    "{e:#}; publish copies only regular files inside the run directory"
                ))
            } else {
                e
            }
        })?;
        let (path, sha256, size) = snap.take(&mut f, name)?;
        taken.push(Taken {
            entry: FileEntry {
                role: role.to_string(),
                name: name.to_string(),
                sha256,
                size,
            },
            path,
        });
    }
    let weights = &taken[0].path;
    checkpoint::check_archive(weights).map_err(|e| {
        invalid(format!(
            "run {}: {dir}/weights/best.pt fails the checkpoint check ({e}); it is not published",
            manifest.run_id
        ))
    })?;
    let read = |role: &str| {
        taken
            .iter()
            .find(|t| t.entry.role == role)
            .and_then(|t| crate::fsutil::read_regular(&t.path, 16 << 20).ok())
            .unwrap_or_default()
    };
    let facts = crate::rundir::trained::Trained::from_texts(&read("args"), &read("results"));
    let args = &facts.args;
    let best = facts.best();
    let prepare = crate::rundir::trained::prepare_summary(workdir);
    let trained = trainer_versions(workdir, variant);
    // The export stage's validation of the ONNX model, as its log says.
    // A search's one export job (of its best trial) logs without a task.
    let export_task = variant.filter(|_| !crate::rundir::search::is_search(manifest));
    let export_log = crate::rundir::layout::log_file("export", export_task);
    let onnx = crate::fsutil::read_tail(
        &workdir.join(crate::rundir::layout::LOGS).join(export_log),
        256 << 10,
    )
    .and_then(|l| crate::rundir::ultralytics::validation_summary(&l));
    let model = args.get("model").cloned();
    let source = Source {
        kind: "run".into(),
        run_id: Some(manifest.run_id.clone()),
        variant,
        spec_hash: Some(manifest.spec_hash.clone()),
        file: None,
    };
    let files = taken.iter().map(|t| t.entry.clone()).collect();
    let record = ModelRecord {
        fingerprint: prepare
            .as_ref()
            .and_then(crate::rundir::trained::fingerprint_in),
        data: args.get("data").cloned(),
        class_names: prepare
            .as_ref()
            .and_then(|p| p.get("names"))
            .and_then(|n| serde_json::from_value(n.clone()).ok())
            .unwrap_or_default(),
        scale: model.as_deref().and_then(scale_of),
        imgsz: args.get("imgsz").cloned(),
        metrics: Metrics {
            map50_95: best.and_then(|b| b.map50_95),
            map50: facts.best_map50(),
            precision: best.and_then(|b| b.precision),
            recall: best.and_then(|b| b.recall),
            best_epoch: best.map(|b| b.epoch),
            epochs: facts.epochs_planned(),
            onnx_map50_95: onnx.as_ref().map(|v| v.map50_95),
            onnx_ms_per_image: onnx.as_ref().and_then(|v| v.inference_ms_per_image),
        },
        ultralytics: trained
            .ultralytics
            .or_else(|| version_in(&prepare, "ultralytics")),
        torch: trained.torch.or_else(|| version_in(&prepare, "torch")),
        parent: parent_of(manifest, variant).or(model),
        ..who.draft(source, files)
    };
    Ok((record, taken.into_iter().map(|t| t.path).collect()))
}

/// A draft of the version the checkpoint file `file` would become (an
/// administrator's base weights): a regular file, not a link, that passes
/// the checkpoint check.
pub fn draft_from_file(
    file: &Path,
    who: &Publisher,
    snap: &Snapshot,
) -> Result<(ModelRecord, Vec<PathBuf>)> {
    use crate::fsutil::{Links, NotOpened};
    let shown = crate::text::echo_path(file);
    let mut f = crate::fsutil::open_regular(file, Links::Refuse).map_err(|e| match e.why {
        NotOpened::Link => invalid(format!("{shown}: is a symbolic link; name the file itself")),
        NotOpened::Io(e) => invalid(format!("{shown}: {e}")),
        _ => invalid(format!("{shown} is not a regular file")),
    })?;
    let base = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .filter(|n| crate::names::model::check_name(n).is_ok())
        .unwrap_or_else(|| "weights.pt".into());
    let (path, sha256, size) = snap.take(&mut f, &base)?;
    checkpoint::check_archive(&path).map_err(|e| {
        invalid(format!(
            "{} fails the checkpoint check ({e}); only an Ultralytics (torch zip) checkpoint can be imported",
            crate::text::echo_path(file)
        ))
    })?;
    let source = Source {
        kind: "import".into(),
        file: Some(base.clone()),
        ..Source::default()
    };
    let record = ModelRecord {
        scale: scale_of(&base),
        ..who.draft(
            source,
            vec![FileEntry {
                role: "weights".into(),
                name: base,
                sha256,
                size,
            }],
        )
    };
    Ok((record, vec![path]))
}

/// Upload the draft's files (verified), then write its record: no record
/// ever names a blob that is not fully there.
pub fn commit(reg: &Registry, draft: ModelRecord, paths: &[PathBuf]) -> Result<ModelRecord> {
    for (f, p) in draft.files.iter().zip(paths) {
        reg.put_blob(p, &f.sha256, f.size)
            .with_context(|| format!("uploading {}", f.name))?;
    }
    reg.add_version(draft)
}

fn version_in(summary: &Option<serde_json::Value>, key: &str) -> Option<String> {
    plain_version(summary.as_ref()?.get("versions")?.get(key)?)
}

/// The Ultralytics and torch versions a training ran with, as its train
/// stage recorded them (`rundir::layout::versions_record`).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct TrainerVersions {
    pub ultralytics: Option<String>,
    pub torch: Option<String>,
}

/// The versions record of `variant`'s training, read only inside the run
/// directory (no link followed, at most 64 KiB); missing, unreadable or odd
/// values are none: publishing never depends on it.
pub(crate) fn trainer_versions(workdir: &Path, variant: Option<u32>) -> TrainerVersions {
    let rel = crate::rundir::layout::versions_record(variant);
    let read = || -> Option<serde_json::Value> {
        let f = crate::fsutil::within::open_read(workdir, Path::new(&rel)).ok()?;
        let text = crate::fsutil::read_text(f, &workdir.join(&rel), 64 << 10).ok()?;
        serde_json::from_str(&text).ok()
    };
    let Some(v) = read() else {
        return TrainerVersions::default();
    };
    TrainerVersions {
        ultralytics: v.get("ultralytics").and_then(plain_version),
        torch: v.get("torch").and_then(plain_version),
    }
}

/// A version string as a record keeps it: plain text (letters, digits and
/// `. + - _`; anything else is none), clipped to 40 characters.
fn plain_version(v: &serde_json::Value) -> Option<String> {
    let s = v.as_str()?.trim();
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '+' | '-' | '_'));
    plain.then(|| crate::text::clip_to(s, 40))
}

/// The registry model the run (or its variant `variant`, in a sweep over
/// registry models) was trained from, as its manifest pinned it.
fn parent_of(manifest: &Manifest, variant: Option<u32>) -> Option<String> {
    manifest.model_ref_of(variant).map(str::to_string)
}

/// `n` of `yolov8n.pt`, `s` of `yolo11s.yaml`.
pub fn scale_of(model: &str) -> Option<String> {
    let file = model.rsplit('/').next()?;
    let stem = file.split('.').next()?;
    if !stem.starts_with("yolo") {
        return None;
    }
    let last = stem.chars().last()?;
    matches!(last, 'n' | 's' | 'm' | 'l' | 'x').then(|| last.to_string())
}
