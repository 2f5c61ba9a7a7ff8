//! The REAL Ultralytics trainer inside Slurm jobs on the live cluster:
//! prepare → train (yolov8n.yaml from scratch, imgsz 64, on a 1g.5gb slice)
//! → ONNX export; cancel and resume from the epoch reached; a finished run
//! never restarted; a truncated last.pt; a sweep as arrays.
//!
//! The trainer is the venv `slurm/trainer.sh install` makes, reached through
//! `tests/trainer/yolo-cpu`, which only turns `device=…` into `device=cpu`
//! (the cluster's slices are character devices). Without the venv these
//! tests fail; like every live test they are ignored unless asked for
//! (`-- --include-ignored`, as the README's test command does). They run one
//! at a time: each training takes the machine's CPUs.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::Value;

static SERIAL: Mutex<()> = Mutex::new(());

/// The cluster's turn for this module, with the real trainer there (or the
/// test fails: it is ignored unless asked for).
#[track_caller]
fn ready() -> ClusterGuard {
    let guard = cluster_shared(module_path!());
    assert!(
        crate::common::trainer_venv().join("bin/yolo").exists(),
        "the real trainer is needed but {} has none; run slurm/trainer.sh install",
        crate::common::trainer_venv().display()
    );
    guard
}

struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = shared_tempdir();
        copy_dir(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/pcb/dataset"),
            &dir.path().join("dataset"),
        );
        Fixture { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn spec(&self, name: &str, epochs: u32, extra: &str) -> PathBuf {
        let text = format!(
            "version = 1\n[run]\nname = \"{name}\"\npartition = \"gpu\"\nworkdir = \"{}\"\n\
             [train]\nmodel = \"yolov8n.yaml\"\ndata = \"{}\"\nepochs = {epochs}\nimgsz = 64\nbatch = 8\n\
             args = {{ seed = 1, plots = false }}\n\
             [stages.prepare]\npartition = \"cpu\"\n[stages.export]\npartition = \"cpu\"\nformats = [\"onnx\"]\n{extra}",
            self.path().join("runs").join(name).display(),
            self.path().join("dataset/data.yaml").display()
        );
        let p = self.path().join(format!("{name}.toml"));
        std::fs::write(&p, text).unwrap();
        p
    }

    fn cmd(&self) -> Command {
        let mut c = yolo();
        c.current_dir(self.path());
        crate::common::use_real_trainer(&mut c, self.path());
        c
    }

    #[track_caller]
    fn submit(&self, spec: &Path) -> Value {
        let out = run(self.cmd().args(["submit", "--json"]).arg(spec));
        assert_eq!(out.status.code(), Some(0), "submit failed");
        serde_json::from_slice(&out.stdout).unwrap()
    }

    fn watch(&self, run_id: &str) -> i32 {
        let out = run(self.cmd().args(["watch", run_id]));
        out.status.code().unwrap_or(-1)
    }

    fn status(&self, run_id: &str) -> Value {
        let out = run(self.cmd().args(["status", "--json", run_id]));
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

fn stage<'a>(status: &'a Value, name: &str) -> &'a Value {
    status["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["stage"] == name)
        .unwrap()
}

/// Nothing of the traps: no default training on coco8, no ./runs/detect.
#[track_caller]
fn assert_no_stray_training(f: &Fixture, workdir: &Path) {
    assert!(
        !f.path().join("runs/detect").exists(),
        "something trained in ./runs/detect"
    );
    assert!(
        !workdir.join("runs/detect").exists(),
        "something trained in <workdir>/runs/detect"
    );
    let logs = std::fs::read_dir(workdir.join("logs"))
        .unwrap()
        .flatten()
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect::<String>();
    assert!(!logs.contains("coco8"), "a log mentions coco8:\n{logs}");
}

#[test]
#[ignore = "needs the local Slurm cluster and the real trainer (slurm/cluster.sh up, slurm/trainer.sh install): cargo test -- --include-ignored"]
fn a_real_chain_trains_on_a_slice_and_exports_an_onnx_model_that_loads() {
    let _cluster = ready();
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let f = Fixture::new();
    let canary = f.path().join("pwned");
    // A hostile value in an argument the real trainer accepts and ignores
    // while training (`tracker` is a string of the predict settings).
    let spec = f.spec(
        "chain",
        2,
        &format!(
            "[train.args]\ntracker = \"$(touch {c})`touch {c}`;touch {c}\"\n",
            c = canary.display()
        ),
    );
    let text = read(&spec).replace("args = { seed = 1, plots = false }\n", "");
    std::fs::write(
        &spec,
        text.replace("[train.args]\n", "[train.args]\nseed = 1\nplots = false\n"),
    )
    .unwrap();
    let sub = f.submit(&spec);
    let run_id = sub["run_id"].as_str().unwrap().to_string();
    assert_eq!(sub["jobs"][1]["gres"], "gpu:1g.5gb:1");
    let start = Instant::now();
    assert_eq!(f.watch(&run_id), 0, "the real chain completed");
    eprintln!("real chain: {:?}", start.elapsed());
    let workdir = f.path().join("runs/chain");
    assert_eq!(epochs_in(&workdir.join("train/results.csv")), [1, 2]);
    let onnx = workdir.join("train/weights/best.onnx");
    assert!(onnx.exists(), "no ONNX export");
    let load = Command::new(crate::common::trainer_venv().join("bin/python"))
        .args(["-c", "import onnxruntime,sys; s=onnxruntime.InferenceSession(sys.argv[1]); print(s.get_inputs()[0].shape)"])
        .arg(&onnx)
        .output()
        .unwrap();
    assert!(
        load.status.success(),
        "onnxruntime: {}",
        String::from_utf8_lossy(&load.stderr)
    );
    let st = f.status(&run_id);
    assert_eq!(st["state"], "completed");
    let progress = &stage(&st, "train")["progress"][0][1];
    assert_eq!(progress["epoch"], 2);
    assert_eq!(progress["epochs"], 2);
    assert!(progress["best_map50_95"].is_number(), "{progress}");
    // Ultralytics' own validation of best.pt after the last epoch, from its log.
    let fin = &progress["final_validation"];
    assert_eq!(
        fin["images"], 12,
        "the demo set's 12 validation images: {progress}"
    );
    assert!(
        fin["map50_95"].is_number() && fin["inference_ms_per_image"].as_f64().unwrap() > 0.0,
        "{fin}"
    );
    // The exported ONNX model, validated by Ultralytics as deployed.
    let exported = &stage(&st, "export")["exported_validation"][0][1];
    assert_eq!(exported["images"], 12, "{exported}");
    assert!(
        exported["inference_ms_per_image"].as_f64().unwrap() > 0.0,
        "{exported}"
    );
    assert!(read(&workdir.join("logs/export.out")).contains("best.onnx"));
    assert!(!canary.exists(), "a spec value was executed");
    // Offline and per run: the settings went to the run's own config dir.
    assert!(workdir.join(".ultralytics").exists());
    assert_no_stray_training(&f, &workdir);

    // A finished run is never restarted: resume refuses, a resubmission to
    // the same workdir refuses, and the train script itself, run again without
    // its done marker, sees a finished checkpoint and trains nothing.
    let resume = run(f.cmd().args(["resume", &run_id]));
    assert_eq!(resume.status.code(), Some(2));
    let again = run(f.cmd().arg("submit").arg(&spec));
    assert_eq!(again.status.code(), Some(2));
    std::fs::remove_file(workdir.join("train/.yolo-sched-train-done")).unwrap();
    let rerun = Command::new("bash")
        .arg(workdir.join("scripts/train.sh"))
        .current_dir(f.path())
        .env("YOLO_TRAINER_VENV", crate::common::trainer_venv())
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&rerun.stdout);
    assert!(
        rerun.status.success(),
        "{log}{}",
        String::from_utf8_lossy(&rerun.stderr)
    );
    assert!(
        log.contains("reached its last epoch; nothing to resume"),
        "{log}"
    );
    assert_eq!(epochs_in(&workdir.join("train/results.csv")), [1, 2]);
    assert_no_stray_training(&f, &workdir);
}

/// Wait until the run directory holds a complete checkpoint of epoch 1 or
/// later (Ultralytics writes the results.csv row just before last.pt).
#[track_caller]
fn wait_for_checkpoint(run_dir: &Path, limit: Duration) {
    use yolo_sched::rundir::checkpoint::{state, CheckpointState};
    crate::common::wait_until(
        limit,
        &format!("a checkpoint of epoch 1 or later in {}", run_dir.display()),
        || matches!(state(run_dir), CheckpointState::Resumable { epoch: Some(e), .. } if e >= 1),
    );
}

/// Submit `name` for `epochs`, cancel it once a checkpoint of epoch ≥ 1 is
/// on disk, and wait for its jobs to end. Returns the run id and workdir.
#[track_caller]
fn submit_and_cancel_midway(f: &Fixture, name: &str, epochs: u32) -> (String, PathBuf) {
    let sub = f.submit(&f.spec(name, epochs, ""));
    let run_id = sub["run_id"].as_str().unwrap().to_string();
    let workdir = f.path().join("runs").join(name);
    wait_for_checkpoint(&workdir.join("train"), Duration::from_secs(240));
    let cancel = run(f.cmd().args(["cancel", &run_id]));
    assert_eq!(cancel.status.code(), Some(0));
    let jobs: Vec<u64> = sub["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["job_id"].as_u64().unwrap())
        .collect();
    wait_jobs(&jobs, Duration::from_secs(60));
    (run_id, workdir)
}

#[test]
#[ignore = "needs the local Slurm cluster and the real trainer (slurm/cluster.sh up, slurm/trainer.sh install): cargo test -- --include-ignored"]
fn a_cancelled_real_training_resumes_from_its_epoch_and_a_truncated_checkpoint_restarts() {
    let _cluster = ready();
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let f = Fixture::new();
    let (run_id, workdir) = submit_and_cancel_midway(&f, "resume", 6);
    let results = workdir.join("train/results.csv");
    let reached = epochs_in(&results);
    assert!(
        !reached.is_empty() && reached.len() < 6,
        "cancelled mid-training: {reached:?}"
    );

    let resume = run(f.cmd().args(["resume", &run_id]));
    assert_eq!(resume.status.code(), Some(0));
    assert_eq!(f.watch(&run_id), 0);
    let log = read(&workdir.join("logs/train.out"));
    assert!(
        log.contains("Resuming training"),
        "the real trainer resumed:\n{log}"
    );
    assert!(log.contains("yolo-sched: checkpoint: resumable"), "{log}");
    let all = epochs_in(&results);
    assert_eq!(all.last(), Some(&6), "{all:?}");
    assert!(
        !all[reached.len()..].contains(&1),
        "did not start over: {all:?}"
    );
    assert_no_stray_training(&f, &workdir);

    // A truncated last.pt: training restarts from epoch 1, never hands
    // Ultralytics a broken file.
    let (run_id, workdir) = submit_and_cancel_midway(&f, "truncated", 3);
    let results = workdir.join("train/results.csv");
    let last = workdir.join("train/weights/last.pt");
    let bytes = std::fs::read(&last).unwrap();
    std::fs::write(&last, &bytes[..bytes.len() / 2]).unwrap();
    let resume = run(f.cmd().args(["resume", &run_id]));
    assert_eq!(resume.status.code(), Some(0));
    assert_eq!(f.watch(&run_id), 0);
    let log = read(&workdir.join("logs/train.out"));
    assert!(
        log.contains("last.pt is not a complete checkpoint; training restarts from epoch 1"),
        "{log}"
    );
    assert_eq!(epochs_in(&results), [1, 2, 3]);
    assert!(workdir.join("train/weights/last.pt.incomplete").exists());
    assert_no_stray_training(&f, &workdir);
}

#[test]
#[ignore = "needs the local Slurm cluster and the real trainer (slurm/cluster.sh up, slurm/trainer.sh install): cargo test -- --include-ignored"]
fn a_real_two_variant_sweep_runs_as_arrays() {
    let _cluster = ready();
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let f = Fixture::new();
    // The export's ONNX validation is the chain test's; here each task exports.
    let spec = f.spec(
        "sweep",
        1,
        "validate = false\n[sweep]\nlr0 = [0.01, 0.02]\n",
    );
    let sub = f.submit(&spec);
    let run_id = sub["run_id"].as_str().unwrap().to_string();
    assert_eq!(sub["jobs"][1]["array"], "0-1");
    assert_eq!(f.watch(&run_id), 0);
    let workdir = f.path().join("runs/sweep");
    for (task, lr) in [(0, "0.01"), (1, "0.02")] {
        let dir = workdir.join(format!("train-{task}"));
        assert_eq!(epochs_in(&dir.join("results.csv")), [1]);
        let args = read(&dir.join("args.yaml"));
        assert!(args.contains(&format!("lr0: {lr}")), "{args}");
        assert!(dir.join("weights/best.onnx").exists());
    }
    assert_no_stray_training(&f, &workdir);
}
