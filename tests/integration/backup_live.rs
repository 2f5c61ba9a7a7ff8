//! Checkpoint backup in whole runs on the live cluster, against the real
//! S3-compatible server (`slurm/s3.sh up`): the real Ultralytics trainer's
//! checkpoints reach the bucket during training, and after a cancel and a
//! wiped `weights/`, `resume` restores them and continues from the epoch
//! reached; with the stand-in trainer (fixed epoch times), a store outage
//! mid-run is a warning in the log and a lag in `status` while training goes
//! on; bad credentials are refused at submission, before anything runs; no
//! secret reaches a script, a log or the state.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::common::*;
use crate::s3::{s3, Relay, S3};
use serde_json::Value;

struct Fixture {
    dir: tempfile::TempDir,
    /// What the jobs and commands use (maybe through a relay).
    s3: S3,
    /// The server itself, for checking what it holds.
    direct: S3,
    url: String,
}

impl Fixture {
    fn new(test: &str, s3: S3) -> Fixture {
        let direct = crate::s3::s3();
        let dir = shared_tempdir();
        copy_dir(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/pcb/dataset"),
            &dir.path().join("dataset"),
        );
        let url = s3.url(test);
        std::fs::write(
            dir.path().join("site.toml"),
            // The job agent hosts the backup: it looks every second, as
            // `backup sync --watch` does in the CPU stages.
            format!("[backup]\nurl = \"{url}\"\ninterval = 1\n[guard]\ninterval_s = 1\n"),
        )
        .unwrap();
        Fixture {
            dir,
            s3,
            direct,
            url,
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn spec(&self, name: &str, epochs: u32) -> PathBuf {
        let text = format!(
            "version = 1\n[run]\nname = \"{name}\"\npartition = \"gpu\"\nworkdir = \"{}\"\n\
             [train]\nmodel = \"yolov8n.yaml\"\ndata = \"{}\"\nepochs = {epochs}\nimgsz = 64\nbatch = 8\n\
             args = {{ seed = 1, plots = false }}\n\
             [stages.prepare]\nenabled = false\n[stages.val]\nenabled = false\n[stages.export]\nenabled = false\n",
            self.path().join("runs").join(name).display(),
            self.path().join("dataset/data.yaml").display()
        );
        let p = self.path().join(format!("{name}.toml"));
        std::fs::write(&p, text).unwrap();
        p
    }

    /// yolo-sched with this fixture's site file, run index and S3 settings.
    fn cmd(&self, yolo_cmd: &Path) -> Command {
        let mut c = yolo();
        self.s3.apply(&mut c);
        c.current_dir(self.path())
            .env("YOLO_SCHED_SITE", self.path().join("site.toml"))
            .env("XDG_STATE_HOME", self.path().join("state"))
            .env("YOLO_SCHED_YOLO", yolo_cmd)
            .env("YOLO_SCHED_WATCH_INTERVAL", "0.5")
            .env("YOLO_SCHED_WATCH_MAX_INTERVAL", "2");
        c
    }

    fn status(&self, yolo_cmd: &Path, run_id: &str) -> Value {
        let out = run(self.cmd(yolo_cmd).args(["status", "--json", run_id]));
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// The files the bucket's manifest of `train` lists.
    fn backed_up(&self, run_id: &str) -> Vec<String> {
        let url = yolo_sched::names::backup_url::BackupUrl::parse(&self.url).unwrap();
        let key = url
            .join(run_id)
            .and_then(|u| u.join("train"))
            .unwrap()
            .key("yolo-sched-backup.json");
        let Ok(Some(bytes)) = self.direct.store().get_bytes(&key, 1 << 20) else {
            return Vec::new();
        };
        let v: Value = serde_json::from_slice(&bytes).unwrap_or_default();
        v["files"]
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// The last epoch of the backed-up results.csv of `train`.
    fn epochs_backed_up(&self, run_id: &str) -> Option<u32> {
        let url = yolo_sched::names::backup_url::BackupUrl::parse(&self.url).unwrap();
        let train = url.join(run_id).ok()?.join("train").ok()?;
        // The manifest names the object of each file's version.
        let manifest = self
            .direct
            .store()
            .get_bytes(&train.key("yolo-sched-backup.json"), 1 << 20)
            .ok()??;
        let v: Value = serde_json::from_slice(&manifest).ok()?;
        let key = train.key(
            v["files"]["results.csv"]["key"]
                .as_str()
                .unwrap_or("results.csv"),
        );
        let bytes = self.direct.store().get_bytes(&key, 1 << 20).ok()??;
        let text = String::from_utf8(bytes).ok()?;
        let e: f64 = text
            .lines()
            .last()?
            .split(',')
            .next()?
            .trim()
            .parse()
            .ok()?;
        Some(e as u32)
    }
}

fn standin() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/standin/yolo")
}

fn real_trainer() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/trainer/yolo-cpu")
}

#[track_caller]
fn submit(f: &Fixture, yolo_cmd: &Path, spec: &Path, extra: &[(&str, &str)]) -> (String, Vec<u64>) {
    let mut c = f.cmd(yolo_cmd);
    for (k, v) in extra {
        c.env(k, v);
    }
    let out = run(c.args(["submit", "--json"]).arg(spec));
    assert_eq!(
        out.status.code(),
        Some(0),
        "submit failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let jobs = v["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["job_id"].as_u64().unwrap())
        .collect();
    (v["run_id"].as_str().unwrap().to_string(), jobs)
}

#[track_caller]
fn watch(f: &Fixture, yolo_cmd: &Path, run_id: &str, limit: Duration) -> i32 {
    let out = run_bounded(f.cmd(yolo_cmd).args(["watch", run_id]), limit)
        .unwrap_or_else(|| panic!("watch {run_id} did not end within {limit:?}"));
    out.status.code().unwrap_or(-1)
}

/// No file of the run holds the secret key (scripts, logs, manifest, state).
#[track_caller]
fn assert_no_secret(workdir: &Path, secret: &str) {
    let mut stack = vec![workdir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_none_or(|x| x != "pt") {
                let text = String::from_utf8_lossy(&std::fs::read(&p).unwrap()).to_string();
                assert!(
                    !text.contains(secret),
                    "{} holds the secret key",
                    p.display()
                );
            }
        }
    }
}

#[test]
#[ignore = "needs the local Slurm cluster and the local S3 server (slurm/cluster.sh up, slurm/s3.sh up)"]
fn a_store_outage_mid_run_is_a_warning_and_a_lag_and_training_goes_on() {
    let _cluster = cluster_shared(module_path!());
    let s = s3();
    let relay = Relay::start(&s.get("AWS_ENDPOINT_URL"));
    let f = Fixture::new("outage", s.via(&relay.endpoint()));
    // Long enough that the store comes back while training still runs, even
    // when a loaded machine makes the first backup late.
    let spec = f.spec("outage", 40);
    let (run_id, jobs) = submit(
        &f,
        &standin(),
        &spec,
        &[("YOLO_STANDIN_EPOCH_SECONDS", "1.5")],
    );
    let workdir = f.path().join("runs/outage");
    wait_until(Duration::from_secs(90), "a first backup", || {
        f.epochs_backed_up(&run_id).is_some_and(|e| e >= 1)
    });
    relay.down();
    let cut_at = f.epochs_backed_up(&run_id).unwrap();
    let epoch_at_cut = epochs_in(&workdir.join("train/results.csv")).len();
    // The outage shows in status once the agent has tried the store (its
    // next look after a new checkpoint); on a loaded machine that can take
    // a while, so look until it does rather than after a fixed sleep.
    let mut st = serde_json::Value::Null;
    wait_until(Duration::from_secs(90), "the outage in status", || {
        st = f.status(&standin(), &run_id);
        let b = &st["backup"][0];
        b["last_error"].is_string() && b["lag_s"].as_f64().is_some_and(|l| l >= 3.0)
    });
    let b = &st["backup"][0];
    assert_eq!(b["dir"], "train", "{st}");
    let text = run(f.cmd(&standin()).args(["status", &run_id]));
    let text = String::from_utf8_lossy(&text.stdout).to_string();
    assert!(
        text.contains("backup train: ") && text.contains("lag "),
        "{text}"
    );
    // The lag can show before the next epoch ends (the file that is behind
    // may be the one written just before the cut): look for the training
    // going on rather than expect it by now on a loaded machine.
    wait_until(
        Duration::from_secs(90),
        "training to go on during the outage",
        || epochs_in(&workdir.join("train/results.csv")).len() > epoch_at_cut,
    );
    assert!(f.epochs_backed_up(&run_id).unwrap() <= cut_at + 1);
    let epoch_at_up = epochs_in(&workdir.join("train/results.csv")).len();
    assert!(
        epoch_at_up < 40,
        "training ended during the outage ({epoch_at_up} epochs), so recovery is not tested"
    );
    relay.up();

    assert_eq!(
        watch(&f, &standin(), &run_id, Duration::from_secs(180)),
        0,
        "the run completed"
    );
    let log = read(&workdir.join("logs/train.out"));
    assert!(
        log.contains("backup store unavailable, training goes on"),
        "{log}"
    );
    assert!(log.contains("backup store reachable again"), "{log}");
    assert!(
        log.contains("the trainer has exited; last pass done"),
        "{log}"
    );
    assert_eq!(f.epochs_backed_up(&run_id), Some(40), "{log}");
    let st = f.status(&standin(), &run_id);
    assert_eq!(st["backup"][0]["behind"], serde_json::json!([]), "{st}");
    assert!(st["backup"][0]["last_error"].is_null(), "{st}");
    assert_no_secret(&workdir, &s.get("AWS_SECRET_ACCESS_KEY"));
    // The endpoint stays out of the scripts, the state and the log (also in errors).
    assert_no_secret(&workdir, &relay.endpoint()[7..]);
    let _ = jobs;
}

#[test]
#[ignore = "needs the local Slurm cluster and the local S3 server (slurm/cluster.sh up, slurm/s3.sh up)"]
fn bad_credentials_are_refused_at_submission_and_nothing_runs() {
    let _cluster = cluster_shared(module_path!());
    let s = s3();
    let mut bad = s.clone();
    for (k, v) in bad.vars.iter_mut() {
        if k == "AWS_SECRET_ACCESS_KEY" {
            *v = "not-the-secret-key".into();
        }
    }
    let f = Fixture::new("badcreds", bad);
    let spec = f.spec("badcreds", 1);
    let out = run(f.cmd(&standin()).arg("submit").arg(&spec));
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("refused") && err.contains("hint:"), "{err}");
    assert!(!err.contains("not-the-secret-key"), "{err}");
    assert!(!f.path().join("runs/badcreds/manifest.json").exists());
    assert!(
        !f.path().join("runs/badcreds/scripts").exists(),
        "nothing written"
    );

    // Unreachable: a runtime failure (1), nothing submitted either.
    let f = Fixture::new("unreachable", s.via("http://127.0.0.1:1"));
    let spec = f.spec("unreachable", 1);
    let out = run(f.cmd(&standin()).arg("submit").arg(&spec));
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!f.path().join("runs/unreachable/manifest.json").exists());

    // --dry-run checks the settings but does not touch the store.
    let out = run(f.cmd(&standin()).args(["submit", "--dry-run"]).arg(&spec));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
#[ignore = "needs the local Slurm cluster, the real trainer and the local S3 server (slurm/cluster.sh up, slurm/trainer.sh install, slurm/s3.sh up)"]
fn real_checkpoints_reach_the_bucket_and_resume_restores_wiped_weights() {
    let _cluster = cluster_shared(module_path!());
    assert!(
        crate::common::trainer_venv().join("bin/yolo").exists(),
        "the real trainer is needed; run slurm/trainer.sh install"
    );
    let s = s3();
    let f = Fixture::new("real", s.clone());
    // imgsz 160: epochs of a few seconds, so last.pt is quiet long enough
    // between two writes to go up while training still has epochs to go.
    // Five of them: the first backup comes after epoch 1 or 2, and the
    // resume still has epochs to train.
    const EPOCHS: u32 = 5;
    let spec = f.spec("real", EPOCHS);
    std::fs::write(&spec, read(&spec).replace("imgsz = 64", "imgsz = 160")).unwrap();
    let (run_id, jobs) = submit(
        &f,
        &real_trainer(),
        &spec,
        &[(
            "YOLO_TRAINER_VENV",
            crate::common::trainer_venv().to_str().unwrap(),
        )],
    );
    let workdir = f.path().join("runs/real");
    // A checkpoint in the bucket while the real trainer trains.
    wait_until(
        Duration::from_secs(300),
        "a backed-up last.pt during training",
        || {
            f.backed_up(&run_id)
                .contains(&"weights/last.pt".to_string())
        },
    );
    let mut job_state = String::new();
    let running = jobs.iter().any(|j| {
        job_state = crate::common::job_state(*j).unwrap_or_default();
        job_state == "RUNNING"
    });
    assert!(running, "the backup came during training ({job_state})");
    let cancel = run(f.cmd(&real_trainer()).args(["cancel", &run_id]));
    assert_eq!(cancel.status.code(), Some(0));
    wait_jobs(&jobs, Duration::from_secs(60));
    let reached = epochs_in(&workdir.join("train/results.csv"));
    assert!(
        reached.len() < EPOCHS as usize,
        "cancelled midway: {reached:?}"
    );

    // Node lost / scratch wiped: the weights are gone.
    std::fs::remove_dir_all(workdir.join("train/weights")).unwrap();
    let resume = run(f
        .cmd(&real_trainer())
        .env("YOLO_TRAINER_VENV", crate::common::trainer_venv())
        .args(["resume", &run_id]));
    assert_eq!(
        resume.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&resume.stderr)
    );
    assert_eq!(
        watch(&f, &real_trainer(), &run_id, Duration::from_secs(600)),
        0
    );
    let log = read(&workdir.join("logs/train.out"));
    assert!(log.contains("restored weights/last.pt from s3://"), "{log}");
    assert!(log.contains("yolo-sched: checkpoint: resumable"), "{log}");
    assert!(
        log.contains("Resuming training"),
        "the real trainer resumed:\n{log}"
    );
    // Ultralytics: "Resuming training <last.pt> from epoch N to 5 total epochs".
    let from: u32 = log
        .split("from epoch ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no 'from epoch N' in the log:\n{log}"));
    assert!(
        from > 1,
        "resumed from the restored epoch, not the start: {from}"
    );
    let all = epochs_in(&workdir.join("train/results.csv"));
    assert_eq!(all.last(), Some(&EPOCHS), "{all:?}");
    assert_eq!(
        all.iter().filter(|e| **e == 1).count(),
        1,
        "never started over: {all:?}"
    );
    assert_eq!(f.epochs_backed_up(&run_id), Some(EPOCHS));
    assert_no_secret(&workdir, &s.get("AWS_SECRET_ACCESS_KEY"));
}

#[test]
#[ignore = "needs the local Slurm cluster and the local S3 server (slurm/cluster.sh up, slurm/s3.sh up)"]
fn each_task_of_a_sweep_is_backed_up_under_its_own_prefix() {
    let _cluster = cluster_shared(module_path!());
    let f = Fixture::new("sweep", s3());
    let spec = f.spec("sweep", 3);
    let mut text = read(&spec);
    text.push_str("[sweep]\nlr0 = [0.01, 0.02]\n");
    std::fs::write(&spec, text).unwrap();
    let (run_id, _) = submit(
        &f,
        &standin(),
        &spec,
        &[("YOLO_STANDIN_EPOCH_SECONDS", "0.5")],
    );
    assert_eq!(watch(&f, &standin(), &run_id, Duration::from_secs(180)), 0);
    let st = f.status(&standin(), &run_id);
    let dirs: Vec<&str> = st["backup"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["dir"].as_str().unwrap())
        .collect();
    assert_eq!(dirs, ["train-0", "train-1"], "{st}");
    for b in st["backup"].as_array().unwrap() {
        assert_eq!(b["behind"], serde_json::json!([]), "{b}");
        assert!(
            b["url"]
                .as_str()
                .unwrap()
                .ends_with(b["dir"].as_str().unwrap()),
            "{b}"
        );
    }
    let out = run(f
        .cmd(&standin())
        .args(["backup", "status", &run_id, "--json"]));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["dirs"].as_array().unwrap().len(), 2, "{v}");
}
