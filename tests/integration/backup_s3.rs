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
use yolo_sched::backup::{BackupUrl, RunBackup};

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

fn key_of(url: &str, rel: &str) -> String {
    let u = BackupUrl::parse(url).unwrap();
    u.join("train").unwrap().key(rel)
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
        start.elapsed() < Duration::from_secs(30),
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

fn wait_until(limit: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < limit, "{what} not within {limit:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
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
    std::thread::sleep(Duration::from_secs(5));
    let views = yolo_sched::backup::views(save.parent().unwrap(), SystemTime::now());
    let v = &views[0];
    assert!(v.last_error.is_some(), "the outage is recorded: {v:?}");
    assert!(
        !v.behind.is_empty() && v.lag_s >= 2.0,
        "the lag shows: {v:?}"
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

fn run_bounded_child(child: std::process::Child, limit: Duration) -> std::process::Output {
    let start = Instant::now();
    let id = child.id();
    let waiter = std::thread::spawn(move || child.wait_with_output().unwrap());
    while !waiter.is_finished() {
        if start.elapsed() > limit {
            let _ = Command::new("kill").arg(id.to_string()).status();
            panic!("the watch loop did not exit within {limit:?} of the trainer");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    waiter.join().unwrap()
}

fn read_bytes(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// No file under `dir` contains `secret`.
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

/// The job agent hosts the backup: with no NVML (so no memory guard) it
/// still uploads the checkpoints a writer produces, and makes a last pass
/// when the writer ends: one helper process per job, not two.
#[test]
#[ignore = "needs the local S3 server (slurm/s3.sh up)"]
fn the_job_agent_backs_up_checkpoints_even_without_nvml() {
    let s = s3();
    let url = s.url("agent");
    let (d, save) = workdir(&url);
    let manifest = yolo_sched::run::Manifest {
        schema_version: yolo_sched::run::manifest::SCHEMA_VERSION,
        run_id: "agent-backup-1".into(),
        name: "agent-backup".into(),
        user: "u".into(),
        host: "h".into(),
        submitted_at: chrono::Utc::now(),
        workdir: d.path().to_path_buf(),
        spec_file: d.path().join("s.toml"),
        spec_hash: "0".into(),
        spec_text: "version = 1\n[run]\nname = \"agent-backup\"\n[train]\nmodel = \"yolov8n.yaml\"\ndata = \"d.yaml\"\n".into(),
        variants: 1,
        gpu_explanation: vec![],
        estimate_gib: None,
        stages: vec![],
    };
    std::fs::write(
        d.path().join("manifest.json"),
        serde_json::to_vec(&manifest).unwrap(),
    )
    .unwrap();
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
