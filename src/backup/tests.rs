//! The backup loop and restore on object_store's in-memory store (the same
//! API as S3; the real server is tested in tests/integration/backup_s3.rs).

use std::time::{Duration, SystemTime};

use super::record::{Record, Remote, MANIFEST};
use super::*;
use crate::names::backup_url::BackupUrl;
use crate::objstore::store;
use crate::objstore::Store;

/// A stored zip with a `data.pkl` entry of `payload` bytes, as torch.save lays it out.
pub(crate) fn checkpoint(payload: usize) -> Vec<u8> {
    let name = b"last/data.pkl";
    let data: Vec<u8> = (0..payload).map(|i| (i % 253) as u8).collect();
    let mut out = Vec::new();
    out.extend_from_slice(&0x0403_4b50u32.to_le_bytes());
    out.extend_from_slice(&[20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out.extend_from_slice(&(name.len() as u16).to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(name);
    out.extend_from_slice(&data);
    let cd_off = out.len() as u32;
    let mut central = Vec::new();
    central.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
    central.extend_from_slice(&[20, 0, 20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    central.extend_from_slice(&(data.len() as u32).to_le_bytes());
    central.extend_from_slice(&(data.len() as u32).to_le_bytes());
    central.extend_from_slice(&(name.len() as u16).to_le_bytes());
    central.extend_from_slice(&[0; 12]);
    central.extend_from_slice(&0u32.to_le_bytes());
    central.extend_from_slice(name);
    out.extend_from_slice(&central);
    out.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
    out.extend_from_slice(&[0, 0, 0, 0, 1, 0, 1, 0]);
    out.extend_from_slice(&(central.len() as u32).to_le_bytes());
    out.extend_from_slice(&cd_off.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out
}

fn run_dir() -> (tempfile::TempDir, std::path::PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let save = d.path().join("train");
    std::fs::create_dir_all(save.join("weights")).unwrap();
    (d, save)
}

fn until_idle(b: &mut Backup) -> Vec<BackupEvent> {
    let mut events = b.tick(SystemTime::now());
    while b.busy() {
        events.extend(b.wait(Duration::from_secs(10)));
        events.extend(b.tick(SystemTime::now()));
    }
    events
}

fn remote(store: &Store, url: &BackupUrl) -> Remote {
    let bytes = store
        .get_bytes(&url.key(MANIFEST), 1 << 20)
        .unwrap()
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

#[test]
fn stable_complete_files_are_uploaded_once_and_recorded() {
    let (_d, save) = run_dir();
    let url = BackupUrl::parse("s3://ckpt/yolo/run-1/train").unwrap();
    let store = Store::memory().unwrap();
    let ckpt = checkpoint(4096);
    std::fs::write(save.join("weights/last.pt"), &ckpt).unwrap();
    std::fs::write(save.join("results.csv"), "epoch,time\n1,2\n").unwrap();
    let mut b = Backup::new(&save, url.clone(), store.clone());
    // First look: seen, not yet known to be stable.
    assert_eq!(b.tick(SystemTime::now()), vec![]);
    assert!(!b.busy());
    let events = until_idle(&mut b);
    let uploaded: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            BackupEvent::Uploaded { file, .. } => Some(file.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        uploaded,
        vec!["weights/last.pt", "results.csv"],
        "{events:?}"
    );
    let r = remote(&store, &url);
    assert_eq!(r.version, record::MANIFEST_VERSION);
    let key = r.files["weights/last.pt"].object_key("weights/last.pt");
    assert_eq!(
        key,
        record::version_key("weights/last.pt", &r.files["weights/last.pt"].sha256)
    );
    assert_eq!(
        store.get_bytes(&url.key(key), 1 << 20).unwrap().unwrap(),
        ckpt
    );
    assert_eq!(
        r.files["weights/last.pt"].sha256,
        store::sha256_file(&save.join("weights/last.pt")).unwrap()
    );
    // Recorded in the state directory, so status sees it and a new process does not upload again.
    let rec = Record::load(&record::record_path(&save).unwrap())
        .unwrap()
        .unwrap();
    assert!(rec.last_backup.is_some());
    assert_eq!(rec.files.len(), 2);
    assert_eq!(until_idle(&mut b), vec![]);
    let mut again = Backup::new(&save, url, store);
    again.tick(SystemTime::now());
    assert_eq!(until_idle(&mut again), vec![]);
    let view = record::view("train", &save, &rec, SystemTime::now());
    assert!(view.behind.is_empty() && view.lag_s == 0.0, "{view:?}");
}

#[test]
fn a_checkpoint_being_written_is_not_uploaded() {
    let (_d, save) = run_dir();
    let url = BackupUrl::parse("s3://ckpt/run-2/train").unwrap();
    let store = Store::memory().unwrap();
    let ckpt = checkpoint(4096);
    std::fs::write(save.join("weights/last.pt"), &ckpt[..ckpt.len() / 2]).unwrap();
    let mut b = Backup::new(&save, url.clone(), store.clone());
    b.tick(SystemTime::now());
    let events = until_idle(&mut b);
    assert!(
        matches!(events.as_slice(), [BackupEvent::Incomplete { file, .. }] if file == "weights/last.pt"),
        "{events:?}"
    );
    assert_eq!(
        store
            .get_bytes(&url.key("weights/last.pt"), 1 << 20)
            .unwrap(),
        None
    );
    // Said once per version of the file.
    assert_eq!(until_idle(&mut b), vec![]);
    let rec = b.record().clone();
    let view = record::view("train", &save, &rec, SystemTime::now());
    assert_eq!(view.behind, vec!["weights/last.pt".to_string()]);
}

#[test]
fn restore_brings_back_missing_weights_and_never_a_damaged_object() {
    let (_d, save) = run_dir();
    let url = BackupUrl::parse("s3://ckpt/run-3/train").unwrap();
    let store = Store::memory().unwrap();
    let ckpt = checkpoint(10_000);
    std::fs::write(save.join("weights/last.pt"), &ckpt).unwrap();
    std::fs::write(save.join("weights/best.pt"), &ckpt).unwrap();
    std::fs::write(save.join("results.csv"), "epoch\n1\n2\n").unwrap();
    std::fs::write(save.join("args.yaml"), "epochs: 5\n").unwrap();
    let mut b = Backup::new(&save, url.clone(), store.clone());
    b.tick(SystemTime::now());
    until_idle(&mut b);
    drop(b);

    // Scratch wiped: everything comes back, verified.
    std::fs::remove_dir_all(&save).unwrap();
    let out = restore::restore(&save, &url, &store).unwrap();
    assert_eq!(
        out.restored,
        vec![
            "weights/last.pt",
            "results.csv",
            "args.yaml",
            "weights/best.pt"
        ],
        "{out:?}"
    );
    assert_eq!(std::fs::read(save.join("weights/last.pt")).unwrap(), ckpt);
    assert_eq!(
        crate::rundir::checkpoint::state(&save).line(),
        "resumable: after epoch 2 of 5"
    );
    // Restored files are recorded as backed up: no second upload.
    let mut b = Backup::new(&save, url.clone(), store.clone());
    b.tick(SystemTime::now());
    assert_eq!(until_idle(&mut b), vec![]);
    drop(b);

    // Nothing missing: nothing written.
    let out = restore::restore(&save, &url, &store).unwrap();
    assert!(out.restored.is_empty() && out.refused.is_empty(), "{out:?}");

    // A damaged local checkpoint is replaced; a damaged object is refused,
    // and with it the results.csv that goes with it (all or nothing).
    std::fs::write(save.join("weights/last.pt"), &ckpt[..100]).unwrap();
    std::fs::write(save.join("results.csv"), "epoch\n1\n").unwrap();
    let mut bad = ckpt.clone();
    bad[200] ^= 0xff;
    let key = remote(&store, &url).files["weights/last.pt"]
        .object_key("weights/last.pt")
        .to_string();
    store.put_bytes(&url.key(&key), bad).unwrap();
    let out = restore::restore(&save, &url, &store).unwrap();
    assert_eq!(out.refused.len(), 2, "{out:?}");
    assert!(out.refused[0].1.contains("checksum mismatch"), "{out:?}");
    assert_eq!(out.refused[1].0, "results.csv", "{out:?}");
    assert!(out.restored.is_empty(), "{out:?}");
    assert_eq!(
        std::fs::read(save.join("weights/last.pt")).unwrap().len(),
        100
    );
    assert_eq!(
        std::fs::read_to_string(save.join("results.csv")).unwrap(),
        "epoch\n1\n",
        "results.csv is not restored without its checkpoint"
    );
    assert!(out
        .lines()
        .iter()
        .any(|l| l.starts_with("warning: weights/last.pt not restored")));
}

#[test]
fn an_empty_bucket_restores_nothing() {
    let (_d, save) = run_dir();
    let url = BackupUrl::parse("s3://ckpt/run-4/train").unwrap();
    let out = restore::restore(&save, &url, &Store::memory().unwrap()).unwrap();
    assert!(out.nothing_backed_up);
    assert!(out.lines()[0].contains("nothing backed up yet"));
}

#[test]
fn a_file_never_backed_up_lags_since_it_was_created_not_since_its_last_rewrite() {
    let dir = tempfile::tempdir().unwrap();
    let save = dir.path().join("train");
    std::fs::create_dir_all(save.join("weights")).unwrap();
    let last = save.join("weights/last.pt");
    std::fs::write(&last, b"epoch 1").unwrap();
    std::thread::sleep(Duration::from_millis(1200));
    // Rewritten in place, as torch.save does every epoch.
    std::fs::write(&last, b"epoch 2").unwrap();
    let view = record::view("train", &save, &Record::default(), SystemTime::now());
    assert_eq!(view.behind, ["weights/last.pt"]);
    if std::fs::metadata(&last).unwrap().created().is_ok() {
        assert!(view.lag_s >= 1.1, "{view:?}");
    } else {
        // No birth time on this file system: the latest write is all there is.
        assert!(view.lag_s < 1.1, "{view:?}");
    }
}

/// A size mismatch (the object is longer than the manifest says) refuses the
/// checkpoint and the results.csv and args.yaml that go with it.
#[test]
fn a_refused_checkpoint_restores_none_of_its_files() {
    let (_d, save) = run_dir();
    let url = BackupUrl::parse("s3://ckpt/run-7/train").unwrap();
    let store = Store::memory().unwrap();
    let ckpt = checkpoint(5_000);
    std::fs::write(save.join("weights/last.pt"), &ckpt).unwrap();
    std::fs::write(save.join("results.csv"), "epoch\n1\n2\n3\n").unwrap();
    std::fs::write(save.join("args.yaml"), "epochs: 5\n").unwrap();
    let mut b = Backup::new(&save, url.clone(), store.clone());
    b.tick(SystemTime::now());
    until_idle(&mut b);
    drop(b);
    let r = remote(&store, &url);
    let key = url.key(r.files["weights/last.pt"].object_key("weights/last.pt"));
    let mut longer = ckpt.clone();
    longer.extend_from_slice(b"tail");
    store.put_bytes(&key, longer).unwrap();
    std::fs::remove_dir_all(&save).unwrap();
    let out = restore::restore(&save, &url, &store).unwrap();
    assert!(out.restored.is_empty(), "{out:?}");
    let refused: Vec<&str> = out.refused.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(
        refused,
        ["weights/last.pt", "results.csv", "args.yaml"],
        "{out:?}"
    );
    for f in ["weights/last.pt", "results.csv", "args.yaml"] {
        assert!(!save.join(f).exists(), "{f} written without its checkpoint");
    }
}

/// Each pass stores a new version under a key of its own, and deletes the
/// version the manifest named before only after the new manifest is written:
/// the bucket keeps one version of each file.
#[test]
fn every_version_has_its_own_key_and_the_old_one_goes_after_the_manifest() {
    let (_d, save) = run_dir();
    let url = BackupUrl::parse("s3://ckpt/run-5/train").unwrap();
    let store = Store::memory().unwrap();
    let mut keys = Vec::new();
    for (i, size) in [3000usize, 4000].iter().enumerate() {
        std::fs::write(save.join("weights/last.pt"), checkpoint(*size)).unwrap();
        std::fs::write(save.join("results.csv"), format!("epoch\n{i}\n")).unwrap();
        let mut b = Backup::new(&save, url.clone(), store.clone());
        b.tick(SystemTime::now());
        std::thread::sleep(Duration::from_millis(20));
        b.sync_now(Duration::from_millis(10), Duration::from_secs(10));
        let r = remote(&store, &url);
        keys.push(url.key(r.files["weights/last.pt"].object_key("weights/last.pt")));
    }
    assert_ne!(keys[0], keys[1]);
    let listed = store.list(&url.key("versions/")).unwrap();
    assert_eq!(listed.len(), 2, "one version of each file: {listed:?}");
    assert!(
        listed.contains(&keys[1]) && !listed.contains(&keys[0]),
        "{listed:?}"
    );
}

/// A manifest of format 1 (objects at their plain key) still restores, and
/// the next pass moves the files to versioned keys and drops the plain ones.
#[test]
fn an_old_format_manifest_is_still_restored_and_then_replaced() {
    let (_d, save) = run_dir();
    let url = BackupUrl::parse("s3://ckpt/run-6/train").unwrap();
    let store = Store::memory().unwrap();
    let ckpt = checkpoint(2_000);
    let csv = b"epoch\n1\n".to_vec();
    let rec = |bytes: &[u8]| record::FileRecord {
        sha256: store::hex(&sha2::Digest::finalize(sha2::Digest::chain_update(
            sha2::Sha256::default(),
            bytes,
        ))),
        size: bytes.len() as u64,
        mtime_ns: 0,
        uploaded_at: chrono::Utc::now(),
        write_to_backup_s: 0.0,
        key: None,
    };
    store
        .put_bytes(&url.key("weights/last.pt"), ckpt.clone())
        .unwrap();
    store
        .put_bytes(&url.key("results.csv"), csv.clone())
        .unwrap();
    // Written as yolo-sched 0.1 wrote it: no `key`, format 1.
    let v1 = serde_json::json!({
        "version": 1,
        "files": {
            "weights/last.pt": serde_json::to_value(rec(&ckpt)).unwrap(),
            "results.csv": serde_json::to_value(rec(&csv)).unwrap(),
        }
    });
    assert!(!v1.to_string().contains("\"key\""));
    store
        .put_bytes(&url.key(MANIFEST), serde_json::to_vec(&v1).unwrap())
        .unwrap();
    let out = restore::restore(&save, &url, &store).unwrap();
    assert_eq!(out.restored, ["weights/last.pt", "results.csv"], "{out:?}");
    assert_eq!(std::fs::read(save.join("weights/last.pt")).unwrap(), ckpt);

    std::fs::write(save.join("weights/last.pt"), checkpoint(2_500)).unwrap();
    let mut b = Backup::new(&save, url.clone(), store.clone());
    b.tick(SystemTime::now());
    std::thread::sleep(Duration::from_millis(20));
    b.sync_now(Duration::from_millis(10), Duration::from_secs(10));
    let r = remote(&store, &url);
    assert_eq!(r.version, record::MANIFEST_VERSION);
    assert!(r.files["weights/last.pt"].key.is_some());
    // The unchanged results.csv keeps its plain key; last.pt's plain object is gone.
    assert_eq!(
        r.files["results.csv"].object_key("results.csv"),
        "results.csv"
    );
    assert_eq!(
        store
            .get_bytes(&url.key("weights/last.pt"), 1 << 20)
            .unwrap(),
        None
    );
    assert!(store
        .get_bytes(&url.key("results.csv"), 1 << 20)
        .unwrap()
        .is_some());

    // A manifest from a newer format is refused in words.
    store
        .put_bytes(
            &url.key(MANIFEST),
            br#"{"version": 9, "files": {}}"#.to_vec(),
        )
        .unwrap();
    let e = restore::restore(&save, &url, &store).unwrap_err();
    assert!(format!("{e:#}").contains("newer yolo-sched"), "{e:#}");
}
