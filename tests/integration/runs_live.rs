//! Whole runs on the live cluster: submit, watch, status, cancel, resume,
//! with the stand-in trainer (`tests/standin/yolo`) and the demo dataset.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use crate::common::*;
use serde_json::Value;

/// A run directory with a copy of the demo dataset and a spec.
struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = shared_tempdir();
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/pcb");
        copy_dir(&src.join("dataset"), &dir.path().join("dataset"));
        Fixture { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn data_yaml(&self) -> PathBuf {
        self.path().join("dataset/data.yaml")
    }

    fn write_spec(&self, name: &str, extra: &str) -> PathBuf {
        let spec = format!(
            "version = 1\n[run]\nname = \"{name}\"\npartition = \"gpu\"\n\
             [train]\nmodel = \"yolov8n.yaml\"\ndata = \"{}\"\nepochs = 3\nimgsz = 64\nbatch = 8\nworkers = 1\n\
             [stages.prepare]\npartition = \"cpu\"\n[stages.export]\npartition = \"cpu\"\nformats = [\"onnx\"]\n{extra}",
            self.data_yaml().display()
        );
        let p = self.path().join(format!("{name}.toml"));
        std::fs::write(&p, spec).unwrap();
        p
    }

    /// yolo-sched with this fixture's own run index, audit log and the stand-in trainer.
    fn cmd(&self) -> Command {
        let mut c = yolo();
        c.env("XDG_STATE_HOME", self.path().join("state"))
            .env(
                "YOLO_SCHED_YOLO",
                Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/standin/yolo"),
            )
            .env("YOLO_STANDIN_EPOCH_SECONDS", "0.1")
            .env("YOLO_SCHED_WATCH_INTERVAL", "0.3")
            .env("YOLO_SCHED_WATCH_MAX_INTERVAL", "1");
        c
    }

    #[track_caller]
    fn submit(&self, spec: &Path) -> (String, Value) {
        let out = run(self.cmd().args(["submit", "--json"]).arg(spec));
        assert_eq!(out.status.code(), Some(0), "submit failed");
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        (v["run_id"].as_str().unwrap().to_string(), v)
    }

    #[track_caller]
    fn status(&self, run_id: &str) -> Value {
        let out = run(self.cmd().args(["status", "--json", run_id]));
        assert_eq!(out.status.code(), Some(0));
        serde_json::from_slice(&out.stdout).unwrap()
    }

    fn watch(&self, run_id: &str) -> Output {
        let mut c = self.cmd();
        c.args(["watch", run_id]);
        run_with_limit(c, Duration::from_secs(240))
    }
}

#[track_caller]
fn run_with_limit(mut cmd: Command, limit: Duration) -> Output {
    let out = run_bounded(&mut cmd, limit)
        .unwrap_or_else(|| panic!("{cmd:?} did not end within {limit:?}"));
    eprintln!(
        "--- {:?}: {}\n{}\n{}",
        cmd,
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[track_caller]
fn stage<'a>(status: &'a Value, name: &str) -> &'a Value {
    status["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["stage"] == name)
        .unwrap_or_else(|| panic!("no stage {name} in {status}"))
}

fn record(workdir: &Path, key: &str, which: &str) -> Value {
    let p = workdir.join("state").join(format!("{key}.{which}.json"));
    serde_json::from_str(&read(&p)).unwrap()
}

fn time_of(v: &Value, field: &str) -> chrono::DateTime<chrono::Utc> {
    v[field].as_str().unwrap().parse().unwrap()
}

/// Break the dataset: a label line whose class is out of range.
fn break_dataset(f: &Fixture) -> PathBuf {
    let first = first_label(&f.path().join("dataset/labels/train"));
    let good = read(&first);
    std::fs::write(&first, "99 0.5 0.5 0.2 0.2\n").unwrap();
    std::fs::write(f.path().join("good-label"), good).unwrap();
    first
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up): cargo test -- --include-ignored"]
fn a_chain_runs_in_order_with_training_on_a_1g5gb_slice() {
    let _cluster = common::cluster(module_path!());
    let f = Fixture::new();
    let canary = f.path().join("pwned");
    let spec = f.write_spec(
        "chain",
        &format!(
            "[train.args]\npretrained = \"$(touch {c})`touch {c}`\"\n",
            c = canary.display()
        ),
    );
    let (run_id, sub) = f.submit(&spec);
    let jobs = sub["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 3);
    assert_eq!(jobs[1]["gres"], "gpu:1g.5gb:1");
    assert_eq!(jobs[1]["depends_on"][0], jobs[0]["job_id"]);
    assert_eq!(jobs[2]["depends_on"][0], jobs[1]["job_id"]);

    let w = f.watch(&run_id);
    assert_eq!(w.status.code(), Some(0), "watch of a completed run exits 0");
    let st = f.status(&run_id);
    assert_eq!(st["state"], "completed");
    let workdir = PathBuf::from(st["workdir"].as_str().unwrap());
    // In order: each stage started after the one before it ended.
    let prep_end = time_of(&record(&workdir, "prepare", "end"), "ended");
    let train_start = time_of(&record(&workdir, "train", "start"), "started");
    let train_end = time_of(&record(&workdir, "train", "end"), "ended");
    let export_start = time_of(&record(&workdir, "export", "start"), "started");
    assert!(
        prep_end <= train_start && train_end <= export_start,
        "{prep_end} {train_start} {train_end} {export_start}"
    );
    // Training got one 1g.5gb slice (indices 0-3 on this cluster's nodes).
    let slice: u32 = record(&workdir, "train", "start")["gpus"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(slice <= 3, "slice {slice}");
    assert_eq!(stage(&st, "train")["tasks"][0]["slice"], slice.to_string());
    assert!(workdir.join("train/weights/best.onnx").exists());
    assert!(workdir.join("prepare/summary.json").exists());
    assert_eq!(stage(&st, "train")["progress"][0][1]["epoch"], 3);
    assert!(!canary.exists(), "a spec value was executed");
    let args = read(&workdir.join("train/args.yaml"));
    assert!(args.contains("pretrained: $(touch"), "{args}");

    // Logs of a stage, and the run in the list.
    let logs = run(f.cmd().args(["logs", &run_id, "train"]));
    assert_eq!(logs.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&logs.stdout).contains("epoch 3/3"));
    let list = run(f.cmd().args(["list", "--json"]));
    let list: Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(list[0]["run_id"], run_id.as_str());
    assert_eq!(list[0]["state"], "completed");

    // Slurm unreachable: the last state the jobs recorded, marked stale, exit 1.
    let bin = f.path().join("broken-slurm");
    std::fs::create_dir_all(&bin).unwrap();
    for cmd in ["squeue", "sacct"] {
        let p = bin.join(cmd);
        std::fs::write(&p, "#!/bin/sh\necho 'slurm_load_jobs error: Unable to contact slurm controller (connect failure)' >&2\nexit 1\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let stale = run(f
        .cmd()
        .env("PATH", path)
        .args(["status", "--json", &run_id]));
    assert_eq!(stale.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&stale.stderr).contains("Unable to contact slurm controller"));
    let stale: Value = serde_json::from_slice(&stale.stdout).unwrap();
    assert_eq!(stale["stale"], true);
    assert_eq!(stale["state"], "completed");
    assert_eq!(stage(&stale, "train")["tasks"][0]["source"], "job_files");

    // The audit log has the submission.
    let audit = run(f.cmd().args(["audit", "--json", "--run", &run_id]));
    let records: Value = serde_json::from_slice(&audit.stdout).unwrap();
    assert_eq!(records[0]["command"], "submit");
    assert_eq!(records[0]["outcome"], "ok");
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up): cargo test -- --include-ignored"]
fn a_failing_prepare_cancels_the_rest_and_resume_completes_after_the_fix() {
    let _cluster = common::cluster(module_path!());
    let f = Fixture::new();
    let broken = break_dataset(&f);
    let spec = f.write_spec("broken", "");
    let (run_id, sub) = f.submit(&spec);
    let train_id = sub["jobs"][1]["job_id"].as_u64().unwrap();
    let export_id = sub["jobs"][2]["job_id"].as_u64().unwrap();

    let w = f.watch(&run_id);
    assert_eq!(w.status.code(), Some(1), "watch of a failed run exits 1");
    // Slurm cancels the dependants (never left pending).
    let states = wait_jobs(&[train_id, export_id], Duration::from_secs(60));
    assert_eq!(states, vec!["CANCELLED", "CANCELLED"]);
    let st = f.status(&run_id);
    assert_eq!(st["state"], "failed");
    assert_eq!(st["stage"], "prepare");
    assert_eq!(
        stage(&st, "prepare")["tasks"][0]["exit_code"]
            .as_i64()
            .map(|c| c != 0),
        Some(true)
    );

    // Nothing to resume while it is broken? It resumes, and fails again: fix first.
    std::fs::write(&broken, read(&f.path().join("good-label"))).unwrap();
    let out = run(f.cmd().args(["resume", "--json", &run_id]));
    assert_eq!(out.status.code(), Some(0));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        r["stages"],
        serde_json::json!(["prepare", "train", "export"])
    );
    assert_eq!(f.watch(&run_id).status.code(), Some(0));
    let st = f.status(&run_id);
    assert_eq!(st["state"], "completed");
    assert_eq!(stage(&st, "prepare")["attempt"], 2);
    assert_eq!(stage(&st, "export")["attempt"], 2);

    // A completed run has nothing to resume.
    let again = run(f.cmd().args(["resume", &run_id]));
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("nothing to resume"));
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up): cargo test -- --include-ignored"]
fn a_run_cancelled_mid_training_resumes_from_last_pt() {
    let _cluster = common::cluster(module_path!());
    let f = Fixture::new();
    let spec = f.write_spec("cancelled", "");
    let text = read(&spec).replace("epochs = 3", "epochs = 40");
    std::fs::write(&spec, text).unwrap();
    let mut cmd = f.cmd();
    cmd.env("YOLO_STANDIN_EPOCH_SECONDS", "0.4");
    let out = run(cmd.args(["submit", "--json"]).arg(&spec));
    assert_eq!(out.status.code(), Some(0));
    let run_id = serde_json::from_slice::<Value>(&out.stdout).unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    let st = f.status(&run_id);
    let workdir = PathBuf::from(st["workdir"].as_str().unwrap());
    let results = workdir.join("train/results.csv");
    crate::common::wait_until(Duration::from_secs(120), "three epochs of training", || {
        std::fs::read_to_string(&results).map_or(0, |t| t.lines().count()) >= 4
    });
    let c = run(f.cmd().args(["cancel", "--json", &run_id]));
    assert_eq!(c.status.code(), Some(0));
    let cancelled: Value = serde_json::from_slice(&c.stdout).unwrap();
    assert_eq!(
        cancelled["cancelled"].as_array().unwrap().len(),
        2,
        "train and export: {cancelled}"
    );
    assert_eq!(f.watch(&run_id).status.code(), Some(1));
    let st = f.status(&run_id);
    assert_eq!(st["state"], "cancelled");
    // Cancelling again is a no-op.
    let again = run(f.cmd().args(["cancel", "--json", &run_id]));
    assert_eq!(again.status.code(), Some(0));
    assert_eq!(
        serde_json::from_slice::<Value>(&again.stdout).unwrap()["cancelled"],
        serde_json::json!([])
    );

    let done_epochs = read(&results).lines().count() - 1;
    // The resume names another `yolo` (as a user would after installing one):
    // the resubmitted stages run it, not the one fixed at submit time.
    std::fs::create_dir_all(f.path().join("now")).unwrap();
    let yolo_now = copy_for_everyone(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/standin/yolo"),
        &f.path().join("now"),
    );
    // Two resumes at once: one submits, the other is refused (lock, or the run is already active again).
    let spawn = || {
        let mut c = f.cmd();
        c.env("YOLO_STANDIN_EPOCH_SECONDS", "0.02")
            .args(["resume", &run_id, "--yolo"])
            .arg(&yolo_now)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        c.spawn().unwrap()
    };
    let (a, b) = (spawn(), spawn());
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    let codes = [a.status.code(), b.status.code()];
    eprintln!(
        "resume A: {:?} {}\nresume B: {:?} {}",
        codes[0],
        String::from_utf8_lossy(&a.stderr),
        codes[1],
        String::from_utf8_lossy(&b.stderr)
    );
    assert_eq!(
        codes.iter().filter(|c| **c == Some(0)).count(),
        1,
        "exactly one resume wins: {codes:?}"
    );

    assert_eq!(f.watch(&run_id).status.code(), Some(0));
    let resumed = read(&workdir.join("train/resumed.txt"));
    let from: usize = resumed
        .trim()
        .strip_prefix("resumed_from_epoch=")
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        from >= 3 && from <= done_epochs + 1,
        "resumed from epoch {from}, {done_epochs} were done"
    );
    let st = f.status(&run_id);
    assert_eq!(st["state"], "completed");
    assert_eq!(stage(&st, "train")["attempt"], 2);
    assert_eq!(stage(&st, "train")["progress"][0][1]["epoch"], 40);
    let log = read(&workdir.join("logs/train.out"));
    assert!(
        log.contains(&format!("yolo-sched: {} train resume", yolo_now.display())),
        "the resumed stage ran the yolo named at resume:\n{log}"
    );
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up): cargo test -- --include-ignored"]
fn a_sweep_runs_as_arrays_with_per_task_dependencies() {
    let _cluster = common::cluster(module_path!());
    let f = Fixture::new();
    let spec = f.write_spec(
        "sweep",
        "[sweep]\nlr0 = [0.01, 0.001]\nbatch = [4, 8]\nmax_parallel = 2\n",
    );
    let (run_id, sub) = f.submit(&spec);
    let jobs = sub["jobs"].as_array().unwrap();
    assert_eq!(jobs[0]["array"], Value::Null, "prepare runs once");
    assert_eq!(jobs[1]["array"], "0-3%2");
    assert_eq!(jobs[2]["array"], "0-3%2");
    assert!(jobs[2]["dependency"]
        .as_str()
        .unwrap()
        .starts_with("aftercorr:"));
    assert!(jobs[1]["dependency"]
        .as_str()
        .unwrap()
        .starts_with("afterok:"));
    assert_eq!(f.watch(&run_id).status.code(), Some(0));
    // On a terminal, watch draws progress bars (one per stage) instead of lines.
    let mut on_tty = f.cmd();
    on_tty.env_remove("NO_COLOR");
    let mut tty = Command::new("script");
    tty.args([
        "-qec",
        &format!("{} watch {run_id}", bin().display()),
        "/dev/null",
    ]);
    for (k, v) in on_tty.get_envs() {
        match v {
            Some(v) => tty.env(k, v),
            None => tty.env_remove(k),
        };
    }
    // A terminal that draws: the caller's TERM may be `dumb` (CI systems,
    // editors' shells), where progress bars are rightly not drawn.
    tty.env("TERM", "xterm-256color");
    let drawn = run(&mut tty);
    assert_eq!(drawn.status.code(), Some(0));
    let screen = String::from_utf8_lossy(&drawn.stdout);
    assert!(
        screen.contains("4/4") && screen.contains("[===="),
        "no progress bars: {screen}"
    );
    let st = f.status(&run_id);
    let workdir = PathBuf::from(st["workdir"].as_str().unwrap());
    assert_eq!(stage(&st, "train")["tasks"].as_array().unwrap().len(), 4);
    // Each variant got its own arguments, in the documented order (first key slowest).
    let expected = [("0.01", "4"), ("0.01", "8"), ("0.001", "4"), ("0.001", "8")];
    for (i, (lr, batch)) in expected.iter().enumerate() {
        let args = read(&workdir.join(format!("train-{i}/args.yaml")));
        assert!(
            args.contains(&format!("lr0: {lr}\n")) && args.contains(&format!("batch: {batch}\n")),
            "variant {i}: {args}"
        );
        assert!(workdir
            .join(format!("train-{i}/weights/best.onnx"))
            .exists());
        // Variant i's export started after variant i's training ended.
        let trained = time_of(&record(&workdir, &format!("train.{i}"), "end"), "ended");
        let exported = time_of(
            &record(&workdir, &format!("export.{i}"), "start"),
            "started",
        );
        assert!(trained <= exported);
    }
}

/// The job ids the rollback's `scancel` named in a Slurm trace; each must
/// have left the queue.
#[track_caller]
fn cancelled_by_rollback(calls: &str) -> Vec<u64> {
    let cancelled: Vec<u64> = calls
        .lines()
        .find(|l| l.starts_with("scancel"))
        .expect("scancel was called")
        .split_whitespace()
        .filter_map(|w| w.parse::<u64>().ok())
        .collect();
    for id in &cancelled {
        let state = job_state(*id).unwrap_or_else(|| "PURGED".into());
        assert!(
            !matches!(state.as_str(), "PENDING" | "RUNNING"),
            "job {id} left in the queue: {state}"
        );
    }
    cancelled
}

/// Submit a spec whose export script carries the `#SBATCH` line `directive`
/// (through a template override: yolo-sched itself refuses such requests
/// before any sbatch), expecting Slurm to refuse the chain; return stderr and
/// the ids the rollback cancelled.
fn submit_refused(f: &Fixture, name: &str, directive: &str) -> (String, Vec<u64>) {
    let spec = f.write_spec(name, "");
    let templates = f.path().join(format!("{name}-templates"));
    std::fs::create_dir_all(&templates).unwrap();
    let export = read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("templates/export.sh.j2"));
    let export = export.replacen(
        "{% include \"_header.sh.j2\" %}\n",
        &format!("{{% include \"_header.sh.j2\" %}}\n#SBATCH {directive}\n"),
        1,
    );
    std::fs::write(templates.join("export.sh.j2"), export).unwrap();
    let trace = f.path().join(format!("{name}.trace"));
    let out = run(f
        .cmd()
        .env("YOLO_SCHED_SLURM_TRACE", &trace)
        .arg("submit")
        .arg("--templates")
        .arg(&templates)
        .arg(&spec));
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let calls = read(&trace);
    assert_eq!(
        calls.lines().filter(|l| l.starts_with("sbatch")).count(),
        3,
        "{calls}"
    );
    let cancelled = cancelled_by_rollback(&calls);
    assert!(
        !f.path().join(format!("runs/{name}/manifest.json")).exists(),
        "no manifest for a refused submission"
    );
    (err, cancelled)
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up): cargo test -- --include-ignored"]
fn a_stage_slurm_refuses_leaves_nothing_in_the_queue() {
    let _cluster = common::cluster(module_path!());
    let f = Fixture::new();
    // sbatch itself refuses the third stage: the two accepted ones are cancelled.
    let (err, cancelled) = submit_refused(&f, "refused", "--partition=nosuch");
    assert!(err.contains("Slurm refused the export stage"), "{err}");
    assert!(err.contains("Invalid partition name specified"), "{err}");
    assert!(
        err.contains("cancelled the 2 job(s) already submitted"),
        "{err}"
    );
    assert_eq!(cancelled.len(), 2);

    // A held job that can never run (64 CPUs on 16-CPU nodes) is accepted by
    // sbatch and refused only on release: the whole chain is cancelled.
    let (err, cancelled) = submit_refused(&f, "unrunnable", "--cpus-per-task=64");
    assert!(err.contains("releasing the held jobs failed"), "{err}");
    assert!(
        err.contains("cancelled the 3 job(s) already submitted"),
        "{err}"
    );
    assert_eq!(cancelled.len(), 3);
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up): cargo test -- --include-ignored"]
fn status_of_a_100_task_sweep_costs_a_constant_number_of_slurm_calls() {
    let _cluster = common::cluster(module_path!());
    let f = Fixture::new();
    let values: Vec<String> = (1..=100)
        .map(|i| format!("{:.4}", f64::from(i) / 10000.0))
        .collect();
    let spec = f.write_spec(
        "big-sweep",
        &format!("[sweep]\nlr0 = [{}]\nmax_parallel = 2\n", values.join(", ")),
    );
    let (run_id, sub) = f.submit(&spec);
    assert_eq!(sub["jobs"][1]["array"], "0-99%2");
    let trace = f.path().join("status-trace");
    let out = run(f
        .cmd()
        .env("YOLO_SCHED_SLURM_TRACE", &trace)
        .args(["status", "--json", "--tasks", &run_id]));
    assert_eq!(out.status.code(), Some(0));
    let st: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(stage(&st, "train")["tasks"].as_array().unwrap().len(), 100);
    let calls = read(&trace);
    assert!(
        calls.lines().count() <= 2,
        "status ran {} Slurm commands:\n{calls}",
        calls.lines().count()
    );
    assert_eq!(calls.lines().filter(|l| l.starts_with("squeue")).count(), 1);
    let c = run(f.cmd().args(["cancel", &run_id]));
    assert_eq!(c.status.code(), Some(0));
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up): cargo test -- --include-ignored"]
fn an_ordinary_user_submits_and_the_jobs_run_as_that_user() {
    let _cluster = common::cluster(module_path!());
    let f = Fixture::new();
    let spec = f.write_spec("as-researcher", "");
    let state = f.path().join("researcher-state");
    // The checkout may be unreadable to other users: run copies from the shared dir.
    let standin = copy_for_everyone(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/standin/yolo"),
        f.path(),
    );
    let yolo_sched = bin_for_everyone();
    let as_researcher = |args: &[&str]| {
        let mut c = Command::new("runuser");
        c.args(["-u", "researcher", "--", "env"])
            .arg(format!("XDG_STATE_HOME={}", state.display()))
            .arg(format!("YOLO_SCHED_YOLO={}", standin.display()))
            .arg("YOLO_STANDIN_EPOCH_SECONDS=0.1")
            .arg("YOLO_SCHED_WATCH_INTERVAL=0.3")
            .arg("NO_COLOR=1")
            .arg(&yolo_sched)
            .args(args);
        run(&mut c)
    };
    let out = as_researcher(&["submit", "--json", spec.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    let run_id = serde_json::from_slice::<Value>(&out.stdout).unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(as_researcher(&["watch", &run_id]).status.code(), Some(0));
    let st: Value =
        serde_json::from_slice(&as_researcher(&["status", "--json", &run_id]).stdout).unwrap();
    assert_eq!(st["state"], "completed");
    let workdir = PathBuf::from(st["workdir"].as_str().unwrap());
    use std::os::unix::fs::MetadataExt;
    let owner = std::fs::metadata(workdir.join("train/weights/best.pt"))
        .unwrap()
        .uid();
    let researcher: u32 = String::from_utf8(
        Command::new("id")
            .args(["-u", "researcher"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap()
    .trim()
    .parse()
    .unwrap();
    assert_eq!(
        owner, researcher,
        "the training job ran as the submitting user"
    );
    let manifest: Value = serde_json::from_str(&read(&workdir.join("manifest.json"))).unwrap();
    assert_eq!(manifest["user"], "researcher");
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up): cargo test -- --include-ignored"]
fn logs_follow_prints_until_the_stage_ends() {
    let _cluster = common::cluster(module_path!());
    let f = Fixture::new();
    let spec = f.write_spec("follow", "");
    let text = read(&spec).replace("epochs = 3", "epochs = 12");
    std::fs::write(&spec, text).unwrap();
    let mut submit = f.cmd();
    submit.env("YOLO_STANDIN_EPOCH_SECONDS", "0.3");
    let out = run(submit.args(["submit", "--json"]).arg(&spec));
    assert_eq!(out.status.code(), Some(0));
    let run_id = serde_json::from_slice::<Value>(&out.stdout).unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    // Started while the chain is queued or training: it must print the whole
    // output and return by itself once training has ended.
    let mut follow = f.cmd();
    follow.args(["logs", &run_id, "train", "--follow"]);
    let out = run_with_limit(follow, Duration::from_secs(120));
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("epoch 1/12") && text.contains("epoch 12/12"),
        "{text}"
    );
    let st = f.status(&run_id);
    assert_ne!(stage(&st, "train")["state"], "running");
    assert_eq!(f.watch(&run_id).status.code(), Some(0));
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up): cargo test -- --include-ignored"]
fn a_cached_dataset_is_copied_by_prepare_and_trained_from() {
    let _cluster = common::cluster(module_path!());
    let f = Fixture::new();
    let cache = f.path().join("node-cache");
    let spec = f.write_spec("cached", "");
    let text = read(&spec).replace(
        "[stages.prepare]\npartition = \"cpu\"",
        &format!(
            "[stages.prepare]\npartition = \"cpu\"\ncache = \"{}/$SLURM_JOB_PARTITION\"",
            cache.display()
        ),
    );
    std::fs::write(&spec, text).unwrap();
    let (run_id, _) = f.submit(&spec);
    assert_eq!(f.watch(&run_id).status.code(), Some(0));
    let st = f.status(&run_id);
    let workdir = PathBuf::from(st["workdir"].as_str().unwrap());
    // The prepare job expanded the variable on the node and recorded the copy.
    let cached_yaml = read(&workdir.join("prepare/data-path")).trim().to_string();
    assert!(
        cached_yaml.starts_with(&format!("{}/cpu/", cache.display())),
        "{cached_yaml}"
    );
    assert!(Path::new(&cached_yaml).is_file());
    let args = read(&workdir.join("train/args.yaml"));
    assert!(
        args.contains(&format!("data: {cached_yaml}")),
        "training read the cached copy: {args}"
    );
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up): cargo test -- --include-ignored"]
fn a_run_index_that_cannot_be_written_takes_the_jobs_back_and_leaves_the_workdir_free() {
    let _cluster = common::cluster(module_path!());
    let f = Fixture::new();
    let spec = f.write_spec("noindex", "");
    // The index directory is a file: the manifest is written, its index entry is not.
    let state = f.path().join("broken-state");
    std::fs::create_dir_all(state.join("yolo-sched")).unwrap();
    std::fs::write(state.join("yolo-sched/runs"), "not a directory").unwrap();
    let trace = f.path().join("noindex.trace");
    let out = run(f
        .cmd()
        .env("XDG_STATE_HOME", &state)
        .env("YOLO_SCHED_SLURM_TRACE", &trace)
        .arg("submit")
        .arg(&spec));
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cancelled the 3 job(s) already submitted"),
        "{err}"
    );
    assert_eq!(cancelled_by_rollback(&read(&trace)).len(), 3);
    let workdir = f.path().join("runs/noindex");
    assert!(
        !workdir.join("manifest.json").exists(),
        "no manifest of a run that never ran"
    );
    // The same workdir can be submitted again.
    let (run_id, _) = f.submit(&spec);
    assert_eq!(f.watch(&run_id).status.code(), Some(0));
}
