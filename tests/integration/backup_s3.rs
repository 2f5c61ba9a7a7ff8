//! Checkpoint backup against the real S3-compatible server (SeaweedFS from
//! `slurm/s3.sh`), without Slurm: `backup sync` uploads verified copies,
//! `backup restore` brings wiped weights back and never a damaged object,
//! refused and unreachable stores, and the watch loop riding out an outage
//! while a writer keeps writing checkpoints.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use crate::common::*;
use crate::s3::{s3, Relay, S3};
use yolo_sched::backup::RunBackup;
use yolo_sched::names::backup_url::BackupUrl;

/// A run directory as submission leaves it for the backup: a manifest beside
/// `train/`, and the backup settings in `state/backup/settings.json`.
fn workdir(url: &str) -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("manifest.json"), "{}").unwrap();
    std::fs::create_dir_all(d.path().join("train/weights")).unwrap();
    RunBackup {
        url: BackupUrl::parse(url).unwrap(),
        interval: 1,
    }
    .save(d.path())
    .unwrap();
    let save = d.path().join("train");
    (d, save)
}

/// A torch-style checkpoint (a zip with `…/data.pkl`) of about `bytes`, written by Python's zipfile.
#[track_caller]
fn write_checkpoint(path: &Path, bytes: usize, tag: &str) {
    let ok = Command::new("python3")
        .args([
            "-c",
            "import zipfile,sys,os; z=zipfile.ZipFile(sys.argv[1],'w'); z.writestr('ckpt/data.pkl', sys.argv[3].encode()+os.urandom(int(sys.argv[2]))); z.close()",
        ])
        .arg(path)
        .arg(bytes.to_string())
        .arg(tag)
        .status()
        .unwrap();
    assert!(ok.success());
}

fn training_files(save: &Path) {
    write_checkpoint(&save.join("weights/last.pt"), 300_000, "last");
    write_checkpoint(&save.join("weights/best.pt"), 300_000, "best");
    std::fs::write(save.join("args.yaml"), "epochs: 5\n").unwrap();
    std::fs::write(save.join("results.csv"), "epoch,time\n1,1.0\n2,2.0\n").unwrap();
}

fn backup(s: &S3, args: &[&str]) -> std::process::Output {
    let mut c = yolo();
    s.apply(&mut c).arg("backup").args(args);
    run(&mut c)
}

fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The key of `rel`'s object as the bucket's manifest names it (each
/// version has a key of its own); the plain key when there is no manifest.
fn key_of(url: &str, rel: &str) -> String {
    let u = BackupUrl::parse(url).unwrap().join("train").unwrap();
    let manifest = S3_STORE
        .with(|s| {
            s.get_or_init(|| s3().store())
                .get_bytes(&u.key("yolo-sched-backup.json"), 1 << 20)
        })
        .ok()
        .flatten()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok());
    let named = manifest
        .as_ref()
        .and_then(|m| m["files"][rel]["key"].as_str())
        .map(str::to_string);
    u.key(named.as_deref().unwrap_or(rel))
}

thread_local! {
    static S3_STORE: std::cell::OnceCell<yolo_sched::objstore::Store> = const { std::cell::OnceCell::new() };
}

#[test]
#[ignore = "needs the local S3 server (slurm/s3.sh up)"]
fn checkpoints_go_up_verified_and_come_back_after_the_scratch_is_wiped() {
    let s = s3();
    let url = s.url("roundtrip");
    let (_d, save) = workdir(&url);
    training_files(&save);
    let out = backup(&s, &["sync", save.to_str().unwrap(), "--once"]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    for f in [
        "weights/last.pt",
        "weights/best.pt",
        "results.csv",
        "args.yaml",
    ] {
        assert!(t.contains(&format!("backed up {f}")), "{t}");
        let stored = s.store().get_bytes(&key_of(&url, f), 1 << 30).unwrap();
        assert_eq!(
            stored.as_deref(),
            Some(read_bytes(&save.join(f)).as_slice()),
            "{f}"
        );
    }
    // Nothing changed: nothing goes up again.
    let again = backup(&s, &["sync", save.to_str().unwrap(), "--once"]);
    assert!(text(&again).contains("in sync"), "{}", text(&again));
    // The secret never reaches output or the run's files.
    let secret = s.get("AWS_SECRET_ACCESS_KEY");
    assert!(!t.contains(&secret));
    assert_no_secret(save.parent().unwrap(), &secret);

    // Scratch wiped: the weights, their results.csv and args.yaml come back.
    let before = read_bytes(&save.join("weights/last.pt"));
    std::fs::remove_dir_all(&save).unwrap();
    let dry = backup(
        &s,
        &["restore", save.to_str().unwrap(), "--dry-run", "--json"],
    );
    let plan: serde_json::Value = serde_json::from_slice(&dry.stdout).unwrap();
    assert_eq!(plan["restored"][0], "weights/last.pt", "{plan}");
    assert!(
        !save.join("weights/last.pt").exists(),
        "--dry-run wrote nothing"
    );
    let out = backup(&s, &["restore", save.to_str().unwrap()]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    assert!(t.contains("restored weights/last.pt"), "{t}");
    assert_eq!(read_bytes(&save.join("weights/last.pt")), before);
    let state = run(yolo().arg("checkpoint").arg(&save));
    assert_eq!(
        String::from_utf8_lossy(&state.stdout).trim(),
        "resumable: after epoch 2 of 5"
    );
}

#[test]
#[ignore = "needs the local S3 server (slurm/s3.sh up)"]
fn a_damaged_object_is_never_restored() {
    let s = s3();
    let url = s.url("damaged");
    let (_d, save) = workdir(&url);
    training_files(&save);
    assert_eq!(
        backup(&s, &["sync", save.to_str().unwrap(), "--once"])
            .status
            .code(),
        Some(0)
    );
    // The bucket's copy is damaged behind yolo-sched's back.
    let key = key_of(&url, "weights/last.pt");
    let mut bytes = s.store().get_bytes(&key, 1 << 30).unwrap().unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x5a;
    s.store().put_bytes(&key, bytes).unwrap();
    std::fs::remove_file(save.join("weights/last.pt")).unwrap();
    let out = backup(&s, &["restore", save.to_str().unwrap()]);
    let t = text(&out);
    assert_eq!(
        out.status.code(),
        Some(0),
        "a damaged backup is a warning: {t}"
    );
    assert!(
        t.contains("weights/last.pt not restored: checksum mismatch"),
        "{t}"
    );
    assert!(
        !save.join("weights/last.pt").exists(),
        "nothing damaged was written"
    );
    let state = run(yolo().arg("checkpoint").arg(&save));
    assert!(String::from_utf8_lossy(&state.stdout).starts_with("missing"));
}

#[test]
#[ignore = "needs the local S3 server (slurm/s3.sh up)"]
fn refused_credentials_are_invalid_input_and_an_unreachable_store_a_runtime_failure() {
    let s = s3();
    let url = BackupUrl::parse(&s.url("preflight")).unwrap();
    assert!(yolo_sched::backup::check_store(&url, &s.credentials()).is_ok());

    let mut bad = s.clone();
    for (k, v) in bad.vars.iter_mut() {
        if k == "AWS_SECRET_ACCESS_KEY" {
            *v = "wrong-secret-for-the-test".into();
        }
    }
    let e = yolo_sched::backup::check_store(&url, &bad.credentials()).unwrap_err();
    assert_eq!(yolo_sched::error::exit_code_for(&e), 2, "{e:#}");
    assert!(format!("{e:#}").contains("refused"), "{e:#}");
    assert!(!format!("{e:#}").contains("wrong-secret-for-the-test"));

    let start = Instant::now();
    let gone = s.via("http://127.0.0.1:1");
    let e = yolo_sched::backup::check_store(&url, &gone.credentials()).unwrap_err();
    assert_eq!(yolo_sched::error::exit_code_for(&e), 1, "{e:#}");
    assert!(
        !format!("{e:#}").contains("127.0.0.1:1"),
        "the endpoint stays out: {e:#}"
    );
    assert!(
        start.elapsed() < crate::common::patience(Duration::from_secs(30)),
        "bounded: {:?}",
        start.elapsed()
    );

    let mut none = s.clone();
    none.vars
        .retain(|(k, _)| !k.starts_with("AWS_ACCESS") && !k.starts_with("AWS_SECRET"));
    let e = yolo_sched::backup::check_store(&url, &none.credentials()).unwrap_err();
    assert_eq!(yolo_sched::error::exit_code_for(&e), 2, "{e:#}");
    assert!(format!("{e:#}").contains("no S3 credentials"), "{e:#}");

    // By hand, `backup sync --once` against a refusing store fails (1) and says why.
    let (_d, save) = workdir(&url.to_string());
    training_files(&save);
    let out = backup(&bad, &["sync", save.to_str().unwrap(), "--once"]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(t.contains("warning: backup"), "{t}");
    assert!(!t.contains("wrong-secret-for-the-test"), "{t}");
}

/// A writer like Ultralytics: every `period` a new last.pt, written in place
/// in two halves (not atomically), results.csv grown by a row; `epochs` times.
fn writer(save: &Path, epochs: u32, period: f64) -> std::process::Child {
    let script = r#"
import os, sys, time, zipfile, io
save, epochs, period = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
os.makedirs(os.path.join(save, "weights"), exist_ok=True)
open(os.path.join(save, "args.yaml"), "w").write("epochs: %d\n" % epochs)
rows = "epoch,time\n"
for e in range(1, epochs + 1):
    time.sleep(period)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("ckpt/data.pkl", ("epoch %d " % e).encode() + os.urandom(200000))
    data = buf.getvalue()
    rows += "%d,%d\n" % (e, e)
    open(os.path.join(save, "results.csv"), "w").write(rows)
    with open(os.path.join(save, "weights", "last.pt"), "wb") as f:
        f.write(data[: len(data) // 2]); f.flush(); time.sleep(0.3); f.write(data[len(data) // 2 :])
    print("epoch", e, flush=True)
"#;
    Command::new("python3")
        .args(["-c", script])
        .arg(save)
        .arg(epochs.to_string())
        .arg(period.to_string())
        .stdout(Stdio::null())
        .spawn()
        .unwrap()
}

fn epochs_backed_up(s: &S3, url: &str) -> Option<u32> {
    let bytes = s
        .store()
        .get_bytes(&key_of(url, "results.csv"), 1 << 20)
        .ok()??;
    let text = String::from_utf8(bytes).ok()?;
    text.lines().last()?.split(',').next()?.parse().ok()
}

#[test]
#[ignore = "needs the local S3 server (slurm/s3.sh up)"]
fn the_watch_loop_uploads_during_training_and_rides_out_a_store_outage() {
    let s = s3();
    let relay = Relay::start(&s.get("AWS_ENDPOINT_URL"));
    let through = s.via(&relay.endpoint());
    let url = s.url("outage");
    let (_d, save) = workdir(&url);
    let mut trainer = writer(&save, 12, 1.5);
    let mut watch = yolo();
    through
        .apply(&mut watch)
        .args(["backup", "sync"])
        .arg(&save)
        .args(["--watch", "--interval", "1", "--pid"])
        .arg(trainer.id().to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let watcher = watch.spawn().unwrap();

    // Checkpoints appear in the bucket while the writer writes.
    wait_until(Duration::from_secs(30), "a first backup", || {
        epochs_backed_up(&s, &url).is_some_and(|e| e >= 1)
    });
    relay.down();
    let cut_at = epochs_backed_up(&s, &url).unwrap();
    // The watcher's next passes fail and record it: poll for the record
    // rather than sleep and hope a loaded machine has made them by then.
    wait_until(
        Duration::from_secs(60),
        "the outage and its lag recorded",
        || {
            let views = yolo_sched::backup::views(save.parent().unwrap(), SystemTime::now());
            views
                .first()
                .is_some_and(|v| v.last_error.is_some() && !v.behind.is_empty() && v.lag_s >= 2.0)
        },
    );
    assert!(trainer.try_wait().unwrap().is_none(), "training goes on");
    let during = epochs_backed_up(&s, &url).unwrap();
    assert!(during <= cut_at + 1, "nothing went up during the outage");
    relay.up();

    assert!(trainer.wait().unwrap().success());
    let out = run_bounded_child(watcher, Duration::from_secs(120));
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    assert!(
        t.contains("warning: backup: backup store unavailable, training goes on"),
        "{t}"
    );
    assert!(t.contains("backup store reachable again"), "{t}");
    assert!(t.contains("the trainer has exited; last pass done"), "{t}");
    // A checkpoint caught mid-write was never uploaded as it was; the last one is.
    assert_eq!(epochs_backed_up(&s, &url), Some(12), "{t}");
    let stored = s
        .store()
        .get_bytes(&key_of(&url, "weights/last.pt"), 1 << 30)
        .unwrap()
        .unwrap();
    assert_eq!(stored, read_bytes(&save.join("weights/last.pt")));
    let views = yolo_sched::backup::views(save.parent().unwrap(), SystemTime::now());
    assert!(
        views[0].behind.is_empty() && views[0].last_error.is_none(),
        "{:?}",
        views[0]
    );
    assert!(!t.contains(&s.get("AWS_SECRET_ACCESS_KEY")));
    assert!(
        !t.contains(&relay.endpoint()[7..]),
        "the endpoint stays out of the log: {t}"
    );
}

#[track_caller]
fn run_bounded_child(child: std::process::Child, limit: Duration) -> std::process::Output {
    let start = Instant::now();
    let id = child.id();
    let waiter = std::thread::spawn(move || child.wait_with_output().unwrap());
    while !waiter.is_finished() {
        if start.elapsed() > crate::common::patience(limit) {
            let _ = Command::new("kill").arg(id.to_string()).status();
            panic!("the watch loop did not exit within {limit:?} of the trainer");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    waiter.join().unwrap()
}

#[track_caller]
fn read_bytes(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// No file under `dir` contains `secret`.
#[track_caller]
pub fn assert_no_secret(dir: &Path, secret: &str) {
    for entry in walk(dir) {
        if let Ok(bytes) = std::fs::read(&entry) {
            assert!(
                !String::from_utf8_lossy(&bytes).contains(secret),
                "{} holds the secret key",
                entry.display()
            );
        }
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// The manifest the job agent reads (its run id and spec), for a run named `name`.
fn write_agent_manifest(dir: &Path, name: &str) {
    let manifest = yolo_sched::rundir::manifest::Manifest {
        schema_version: yolo_sched::rundir::manifest::SCHEMA_VERSION,
        run_id: format!("{name}-1"),
        name: name.into(),
        user: "u".into(),
        host: "h".into(),
        submitted_at: chrono::Utc::now(),
        workdir: dir.to_path_buf(),
        spec_file: dir.join("s.toml"),
        spec_hash: "0".into(),
        spec_text: format!(
            "version = 1\n[run]\nname = \"{name}\"\n[train]\nmodel = \"yolov8n.yaml\"\ndata = \"d.yaml\"\n"
        ),
        variants: 1,
        gpu_explanation: vec![],
        estimate_gib: None,
        model_ref: None,
        model_refs: Vec::new(),
        stages: vec![],
    };
    std::fs::write(
        dir.join("manifest.json"),
        serde_json::to_vec(&manifest).unwrap(),
    )
    .unwrap();
}

/// A trainer that ended before its agent started (a short resume, a loaded
/// node): the agent refuses to watch a dead pid, but the backup's last pass
/// still runs, so the checkpoint it left is not lost.
#[test]
#[ignore = "needs the local S3 server (slurm/s3.sh up)"]
fn a_trainer_gone_before_its_agent_starts_still_gets_the_last_backup() {
    let s = s3();
    let url = s.url("agent-late");
    let (d, save) = workdir(&url);
    write_agent_manifest(d.path(), "agent-late");
    let mut trainer = writer(&save, 2, 0.1);
    assert!(trainer.wait().unwrap().success());
    let pid = trainer.id();
    let mut c = yolo();
    s.apply(&mut c)
        .env("YOLO_SCHED_NVML_LIB", "/nonexistent/libnvidia-ml.so.1")
        .args(["agent", "--workdir"])
        .arg(d.path())
        .args(["--stage", "train", "--devices", "0", "--pid"])
        .arg(pid.to_string());
    let out = run_bounded(&mut c, Duration::from_secs(120)).expect("the agent ended");
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    assert!(
        t.contains(&format!("the trainer (pid {pid}) is not running"))
            && t.contains("the memory guard has nothing to watch, backup run(s) once"),
        "{t}"
    );
    assert_eq!(epochs_backed_up(&s, &url), Some(2), "{t}");
}

/// The job agent hosts the backup: with no NVML (so no memory guard) it
/// still uploads the checkpoints a writer produces, and makes a last pass
/// when the writer ends: one helper process per job, not two.
#[test]
#[ignore = "needs the local S3 server (slurm/s3.sh up)"]
fn the_job_agent_backs_up_checkpoints_even_without_nvml() {
    let s = s3();
    let url = s.url("agent");
    let (d, save) = workdir(&url);
    write_agent_manifest(d.path(), "agent-backup");
    let mut trainer = writer(&save, 4, 0.5);
    let mut c = yolo();
    s.apply(&mut c)
        .env("YOLO_SCHED_NVML_LIB", "/nonexistent/libnvidia-ml.so.1")
        .args(["agent", "--workdir"])
        .arg(d.path())
        .args(["--stage", "train", "--devices", "0", "--pid"])
        .arg(trainer.id().to_string());
    let out = run_bounded(&mut c, Duration::from_secs(120)).expect("the agent ended");
    let _ = trainer.wait();
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    assert!(
        t.contains("the memory guard is off, backup still run(s)"),
        "{t}"
    );
    assert_eq!(epochs_backed_up(&s, &url), Some(4), "{t}");
    let stored = s
        .store()
        .get_bytes(&key_of(&url, "weights/last.pt"), 1 << 30)
        .unwrap();
    assert_eq!(
        stored.as_deref(),
        Some(read_bytes(&save.join("weights/last.pt")).as_slice()),
        "the last checkpoint went up whole: {t}"
    );
}

/// A torch-style checkpoint of about `len` bytes: a stored zip whose one entry
/// is `ckpt/data.pkl` (what `check_archive` asks for), its bytes drawn from
/// `seed`. Written here rather than by Python so a multi-MB version costs
/// milliseconds.
fn zip_checkpoint(len: usize, seed: u64) -> Vec<u8> {
    let name = b"ckpt/data.pkl";
    let mut data = vec![0u8; len];
    let mut x = seed | 1;
    for chunk in data.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
    let (n, l) = (name.len() as u16, len as u32);
    let mut out = Vec::with_capacity(len + 256);
    let u16s = |out: &mut Vec<u8>, v: &[u16]| v.iter().for_each(|x| out.extend(x.to_le_bytes()));
    let u32s = |out: &mut Vec<u8>, v: &[u32]| v.iter().for_each(|x| out.extend(x.to_le_bytes()));
    // Local header: version, flags, method (stored), time, date; crc, sizes; name, extra.
    u32s(&mut out, &[0x0403_4b50]);
    u16s(&mut out, &[20, 0, 0, 0, 0]);
    u32s(&mut out, &[0, l, l]);
    u16s(&mut out, &[n, 0]);
    out.extend(name);
    out.extend(&data);
    let cd_offset = out.len() as u32;
    // Central directory entry.
    u32s(&mut out, &[0x0201_4b50]);
    u16s(&mut out, &[20, 20, 0, 0, 0, 0]);
    u32s(&mut out, &[0, l, l]);
    u16s(&mut out, &[n, 0, 0, 0, 0]);
    u32s(&mut out, &[0, 0]);
    out.extend(name);
    let cd_size = out.len() as u32 - cd_offset;
    // End record.
    u32s(&mut out, &[0x0605_4b50]);
    u16s(&mut out, &[0, 0, 1, 1]);
    u32s(&mut out, &[cd_size, cd_offset]);
    u16s(&mut out, &[0]);
    out
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Write `bytes` to `path` with a modification time 5 s ago, so the sync
/// takes it as stable at its first look (no wait for quiet).
fn write_quiet(path: &Path, bytes: &[u8]) {
    std::fs::write(path, bytes).unwrap();
    std::fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(SystemTime::now() - Duration::from_secs(5))
        .unwrap();
}

/// A fresh run directory with the same backup settings, restored from the
/// bucket: the SHA-256 of the `last.pt` it got, or the restore's output.
fn fresh_restore(s: &S3, url: &str) -> Result<String, String> {
    let (_fresh, save) = workdir(url);
    let out = backup(s, &["restore", save.to_str().unwrap()]);
    let t = text(&out);
    if out.status.code() != Some(0) {
        return Err(format!("restore exited {:?}: {t}", out.status.code()));
    }
    match std::fs::read(save.join("weights/last.pt")) {
        Ok(bytes) => Ok(sha256_hex(&bytes)),
        Err(_) => Err(format!("no last.pt restored: {t}")),
    }
}

/// SIGKILL `backup sync` at random moments of its pass, over many passes of
/// a multi-MB `last.pt` that changes every pass: after every kill a fresh
/// restore must give a verified `last.pt`, one of the versions written, and
/// never nothing (the bucket always holds one complete checkpoint).
#[test]
#[ignore = "needs the local S3 server (slurm/s3.sh up)"]
fn a_sync_killed_at_any_moment_always_leaves_a_verified_checkpoint() {
    let s = s3();
    let url = s.url("kill-anywhere");
    let (_d, save) = workdir(&url);
    let started = Instant::now();
    let seed = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    eprintln!("kill-anywhere: seed {seed}");
    let mut rng = seed | 1;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut versions: Vec<String> = Vec::new();
    let put_version = |i: usize, versions: &mut Vec<String>| {
        // 10 MB and a little more each time: two multipart parts.
        let ckpt = zip_checkpoint((10 << 20) + i * 4099, seed.wrapping_add(i as u64));
        versions.push(sha256_hex(&ckpt));
        write_quiet(&save.join("weights/last.pt"), &ckpt);
        let rows: String = (1..=i + 1).map(|e| format!("{e},{e}.0\n")).collect();
        write_quiet(
            &save.join("results.csv"),
            format!("epoch,time\n{rows}").as_bytes(),
        );
    };
    let sync = || {
        let mut c = yolo();
        s.apply(&mut c)
            .args(["backup", "sync"])
            .arg(&save)
            .arg("--once")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        c.spawn().unwrap()
    };

    // The first pass runs whole; how long it takes until its checkpoint can
    // be restored is the window the kills are spread over.
    put_version(0, &mut versions);
    let t0 = Instant::now();
    let mut first = sync();
    let manifest = key_of(&url, "yolo-sched-backup.json");
    wait_until(Duration::from_secs(60), "the first pass's manifest", || {
        s.store()
            .get_bytes(&manifest, 1 << 20)
            .ok()
            .flatten()
            .is_some()
    });
    let window = t0.elapsed().max(Duration::from_millis(300));
    assert!(first.wait().unwrap().success());
    assert_eq!(fresh_restore(&s, &url).as_ref(), Ok(&versions[0]));

    let (mut kills, mut newest, mut older) = (0, 0, 0);
    for i in 1..=40 {
        if kills >= 12 && started.elapsed() > Duration::from_secs(25) {
            break;
        }
        put_version(i, &mut versions);
        let mut child = sync();
        // Anywhere from the start to a little past the pass's end.
        let at = window.mul_f64((next() % 1300) as f64 / 1000.0);
        std::thread::sleep(at);
        child.kill().unwrap();
        let _ = child.wait();
        kills += 1;
        match fresh_restore(&s, &url) {
            Ok(sha) if sha == versions[i] => newest += 1,
            Ok(sha) if versions.contains(&sha) => older += 1,
            Ok(sha) => {
                panic!("kill {kills} at {at:?}: restored a last.pt of no version written ({sha})")
            }
            Err(why) => panic!(
                "kill {kills} at {at:?} (pass window {window:?}): no verified last.pt: {why}"
            ),
        }
    }
    // A last pass runs whole: the newest version comes back, and the bucket
    // keeps one version of each file, whatever the kills left behind.
    let n = versions.len();
    put_version(n, &mut versions);
    assert!(sync().wait().unwrap().success());
    assert_eq!(fresh_restore(&s, &url).as_ref(), Ok(&versions[n]));
    let prefix = BackupUrl::parse(&url).unwrap().join("train").unwrap();
    let left: Vec<String> = s
        .store()
        .list(&prefix.key(""))
        .unwrap()
        .into_iter()
        .filter(|k| k.contains("last.pt"))
        .collect();
    assert_eq!(left.len(), 1, "one version of last.pt is kept: {left:?}");
    eprintln!(
        "kill-anywhere: {kills} kills over a {window:?} pass, {} verified restores ({newest} of the new version, {older} of an older one), {:.1} s",
        kills,
        started.elapsed().as_secs_f64()
    );
}

/// A file outside the run directory that a planted link points at, and
/// whether it is still exactly as it was.
struct Victim {
    _dir: tempfile::TempDir,
    file: PathBuf,
}

impl Victim {
    fn new() -> Victim {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("victim.txt");
        std::fs::write(&file, "the owner's file\n").unwrap();
        Victim { _dir: dir, file }
    }

    fn dir(&self) -> &Path {
        self.file.parent().unwrap()
    }

    #[track_caller]
    fn untouched(&self) {
        assert_eq!(
            read(&self.file),
            "the owner's file\n",
            "written through a link"
        );
        let names: Vec<_> = std::fs::read_dir(self.dir())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            names,
            ["victim.txt"],
            "files made through a link: {names:?}"
        );
    }
}

fn is_link(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink())
}

/// `backup restore` never writes through a symbolic link in the run
/// directory: a link at `weights/last.pt`, at `weights/` or at `results.csv`
/// is refused with a warning naming it and left as it is (with all of its
/// checkpoint's files: nothing of that checkpoint is written), and the file
/// it points to is untouched. `backup sync` never writes through a link in
/// `state/` (its record, its upload snapshots) nor reads a linked file to
/// upload it.
#[test]
#[ignore = "needs the local S3 server (slurm/s3.sh up)"]
fn no_backup_command_writes_or_reads_through_a_link_in_the_run_directory() {
    let s = s3();
    let url = s.url("links");
    let (_d, save) = workdir(&url);
    training_files(&save);
    assert_eq!(
        backup(&s, &["sync", save.to_str().unwrap(), "--once"])
            .status
            .code(),
        Some(0)
    );
    let restore_into = |plant: &dyn Fn(&Path, &Victim)| {
        let victim = Victim::new();
        let (fresh, save) = workdir(&url);
        plant(&save, &victim);
        let out = backup(&s, &["restore", save.to_str().unwrap()]);
        (fresh, save, victim, out)
    };

    // 1. weights/last.pt is a link to the owner's file.
    let (_f, fresh, victim, out) = restore_into(&|save, v| {
        std::os::unix::fs::symlink(&v.file, save.join("weights/last.pt")).unwrap();
    });
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    assert!(
        t.contains("weights/last.pt not restored") && t.contains("is a symbolic link"),
        "{t}"
    );
    victim.untouched();
    assert!(
        is_link(&fresh.join("weights/last.pt")),
        "the link is left alone"
    );
    assert!(!fresh.join("results.csv").exists(), "{t}");
    // best.pt is a checkpoint of its own: it still comes back.
    assert!(t.contains("restored weights/best.pt"), "{t}");

    // 2. weights/ is a link to the owner's directory.
    let (_f, fresh, victim, out) = restore_into(&|save, v| {
        std::fs::remove_dir(save.join("weights")).unwrap();
        std::os::unix::fs::symlink(v.dir(), save.join("weights")).unwrap();
    });
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    assert!(t.contains("is a symbolic link"), "{t}");
    victim.untouched();
    assert!(is_link(&fresh.join("weights")));
    assert!(!fresh.join("results.csv").exists(), "all or nothing: {t}");

    // 3. results.csv is a link: the whole last.pt checkpoint is refused.
    let (_f, fresh, victim, out) = restore_into(&|save, v| {
        std::os::unix::fs::symlink(&v.file, save.join("results.csv")).unwrap();
    });
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    assert!(t.contains("results.csv not restored"), "{t}");
    victim.untouched();
    assert!(is_link(&fresh.join("results.csv")));
    assert!(
        !fresh.join("weights/last.pt").exists(),
        "all or nothing: {t}"
    );

    // 4. Links inside state/: the record restore writes, and for sync the
    // record, the snapshots' directory, and a linked file to upload.
    let (_f, fresh, victim, out) = restore_into(&|save, v| {
        let state = save.parent().unwrap().join("state/backup");
        std::os::unix::fs::symlink(&v.file, state.join("train.json")).unwrap();
    });
    let t = text(&out);
    assert_ne!(
        out.status.code(),
        Some(0),
        "the record cannot be written: {t}"
    );
    assert!(t.contains("is a symbolic link"), "{t}");
    victim.untouched();
    assert!(is_link(
        &fresh.parent().unwrap().join("state/backup/train.json")
    ));

    let victim = Victim::new();
    let (_w, save) = workdir(&s.url("links-sync"));
    training_files(&save);
    std::fs::remove_file(save.join("args.yaml")).unwrap();
    std::os::unix::fs::symlink(&victim.file, save.join("args.yaml")).unwrap();
    let state = save.parent().unwrap().join("state/backup");
    std::os::unix::fs::symlink(&victim.file, state.join("train.json")).unwrap();
    std::os::unix::fs::symlink(victim.dir(), state.join(".snapshots")).unwrap();
    let out = backup(&s, &["sync", save.to_str().unwrap(), "--once"]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "a snapshot cannot be made: {t}");
    assert!(t.contains("is a symbolic link"), "{t}");
    victim.untouched();
    assert!(
        !t.contains("backed up args.yaml"),
        "a linked file is not read: {t}"
    );
    // With the snapshots' link gone, the files go up; the record stays refused.
    std::fs::remove_file(state.join(".snapshots")).unwrap();
    let out = backup(&s, &["sync", save.to_str().unwrap(), "--once"]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    assert!(t.contains("backed up weights/last.pt"), "{t}");
    assert!(!t.contains("backed up args.yaml"), "{t}");
    victim.untouched();
    assert!(is_link(&state.join("train.json")) && is_link(&save.join("args.yaml")));
}

/// A tampered `state/backup/settings.json` is invalid input (exit 2) naming
/// the file, for every backup command that reads it; no store is asked.
#[test]
fn a_tampered_settings_file_is_invalid_input() {
    let (d, save) = workdir("s3://ckpt/x/run-1");
    let settings = d.path().join("state/backup/settings.json");
    for content in [
        "{ not json",
        r#"{"url": {"bucket": "ckpt", "prefix": "a/../../etc"}, "interval": 30}"#,
        r#"{"url": {"bucket": "ckpt", "prefix": "x"}, "interval": 0}"#,
    ] {
        std::fs::write(&settings, content).unwrap();
        for args in [
            &["restore", save.to_str().unwrap()][..],
            &["sync", save.to_str().unwrap(), "--once"][..],
        ] {
            let out = run(yolo().arg("backup").args(args));
            let t = text(&out);
            assert_eq!(out.status.code(), Some(2), "{content} {args:?}: {t}");
            assert!(t.contains("settings.json") && t.contains("damaged"), "{t}");
        }
    }
}
