//! `[tune]` on the live cluster with the stand-in trainer: a search of two
//! batches of two trials on slices, each batch asked and told by its own CPU
//! job, ranked, its best trial exported; and a `parallel` the cluster can
//! never run refused before anything is queued.
//!
//! The ask and tell jobs need Optuna 5.0.0: the trainer's venv has it
//! (`slurm/trainer.sh install`; `YOLO_TRAINER_VENV` names another).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::common::{self, *};

struct Fixture {
    dir: tempfile::TempDir,
}

/// The trainer venv's Python, which the search's jobs run (`submit --python`).
fn python() -> PathBuf {
    let py = trainer_venv().join("bin/python");
    let ok = Command::new(&py)
        .args(["-c", "import optuna; assert optuna.__version__ == '5.0.0'"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "{} has no optuna 5.0.0: run `bash slurm/trainer.sh install` (YOLO_TRAINER_VENV names the venv)",
        py.display()
    );
    py
}

impl Fixture {
    fn new() -> Fixture {
        let dir = shared_tempdir();
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/pcb");
        copy_dir(&src.join("dataset"), &dir.path().join("dataset"));
        // A model registry for `[tune] publish`, and the agent's samples
        // twice a second (early stopping looks at each).
        std::fs::create_dir(dir.path().join("registry")).unwrap();
        std::fs::write(
            dir.path().join("site.toml"),
            format!(
                "[registry]\nurl = \"file://{}\"\n[guard]\ninterval_s = 0.5\ngrace_s = 5\n",
                dir.path().join("registry").display()
            ),
        )
        .unwrap();
        Fixture { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn write_spec(&self, name: &str, tune: &str) -> PathBuf {
        let spec = format!(
            "version = 1\n[run]\nname = \"{name}\"\npartition = \"gpu\"\n\
             [train]\nmodel = \"yolov8n.yaml\"\ndata = \"{}\"\nepochs = 5\nimgsz = 64\nbatch = 8\nworkers = 1\n\
             [stages.prepare]\npartition = \"cpu\"\n[stages.export]\npartition = \"cpu\"\nformats = [\"onnx\"]\n{tune}",
            self.path().join("dataset/data.yaml").display()
        );
        let p = self.path().join(format!("{name}.toml"));
        std::fs::write(&p, spec).unwrap();
        p
    }

    fn cmd(&self) -> Command {
        let mut c = yolo();
        c.env("XDG_STATE_HOME", self.path().join("state"))
            .env("YOLO_SCHED_SITE", self.path().join("site.toml"))
            .env(
                "YOLO_SCHED_YOLO",
                Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/standin/yolo"),
            )
            .env("YOLO_SCHED_PYTHON", python())
            .env("YOLO_STANDIN_EPOCH_SECONDS", "0.1")
            .env("YOLO_SCHED_WATCH_INTERVAL", "0.5")
            .env("YOLO_SCHED_WATCH_MAX_INTERVAL", "2");
        c
    }

    fn json(&self, args: &[&str]) -> Value {
        let out = run(self.cmd().args(args));
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn record(workdir: &Path, key: &str, which: &str) -> Value {
    serde_json::from_str(&read(
        &workdir.join("state").join(format!("{key}.{which}.json")),
    ))
    .unwrap()
}

fn time_of(v: &Value, field: &str) -> chrono::DateTime<chrono::Utc> {
    v[field].as_str().unwrap().parse().unwrap()
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up): cargo test -- --include-ignored"]
fn a_search_of_two_batches_is_asked_trained_told_ranked_and_its_best_exported() {
    let _cluster = common::cluster_shared(module_path!());
    let f = Fixture::new();
    let spec = f.write_spec(
        "search",
        "[tune]\ntrials = 4\nparallel = 2\nepochs = 3\nsampler = \"tpe\"\nseed = 11\npublish = \"search-best\"\n\
         [tune.space]\nlr0 = { min = 1e-4, max = 1e-1, log = true }\nmomentum = { min = 0.6, max = 0.98 }\n\
         mosaic = { choices = [0.0, 0.5, 1.0] }\n",
    );
    let sub = f.json(&["submit", "--json", spec.to_str().unwrap()]);
    let run_id = sub["run_id"].as_str().unwrap().to_string();
    let jobs = sub["jobs"].as_array().unwrap();
    let shape: Vec<String> = jobs
        .iter()
        .map(|j| {
            format!(
                "{}[{}] {}",
                j["stage"].as_str().unwrap(),
                j["array"].as_str().unwrap_or("-"),
                j["dependency"]
                    .as_str()
                    .unwrap_or("-")
                    .split(':')
                    .next()
                    .unwrap()
            )
        })
        .collect();
    assert_eq!(
        shape,
        [
            "prepare[-] -",
            "ask[0] afterok",
            "train[0-1] afterok",
            "tell[0] afterany",
            "ask[1] afterok",
            "train[2-3] afterok",
            "tell[1] afterany",
            "export[-] afterok",
        ],
        "{sub:#}"
    );
    // Every job was submitted at once: the next batch's ask waits on the tell before it.
    let ids = submitted_ids(&sub);
    assert!(jobs[4]["dependency"]
        .as_str()
        .unwrap()
        .ends_with(&ids[3].to_string()));

    let mut watch = f.cmd();
    watch.args(["watch", &run_id]);
    let out = run_bounded(&mut watch, patience(Duration::from_secs(300)))
        .expect("watch ends when the search does");
    let st = f.json(&["status", "--json", &run_id]);
    assert_eq!(out.status.code(), Some(0), "{st:#}");
    assert_eq!(st["state"], "completed", "{st:#}");
    let workdir = PathBuf::from(st["workdir"].as_str().unwrap());

    // Every trial told, with an objective, its arguments the ones the trainer got.
    let trials = st["tune"]["trials"]
        .as_array()
        .expect("status shows the trials");
    assert_eq!(trials.len(), 4, "{st:#}");
    for (n, t) in trials.iter().enumerate() {
        assert_eq!(t["trial"], n as u64);
        assert_eq!(t["batch"], (n / 2) as u64);
        assert_eq!(t["state"], "complete", "{t}");
        assert_eq!(t["epochs"], 3, "{t}");
        let lr0 = num(&t["params"]["lr0"]);
        assert!((1e-4..=1e-1).contains(&lr0), "{t}");
        let args = read(&workdir.join(format!("train-{n}/args.yaml")));
        let trained: f64 = args
            .lines()
            .find_map(|l| l.strip_prefix("lr0: "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no lr0 in train-{n}/args.yaml: {args}"));
        assert!(
            (trained - lr0).abs() <= 1e-12 * lr0.max(1.0),
            "trial {n}: {trained} vs {lr0}"
        );
        assert!(args.contains("epochs: 3\n"), "{args}");
        // The objective is the best epoch's value of the column in results.csv.
        let results = read(&workdir.join(format!("train-{n}/results.csv")));
        let col = results
            .lines()
            .next()
            .unwrap()
            .split(',')
            .position(|c| c.trim() == "metrics/mAP50-95(B)")
            .unwrap();
        let best = results
            .lines()
            .skip(1)
            .filter_map(|l| l.split(',').nth(col)?.trim().parse::<f64>().ok())
            .fold(f64::MIN, f64::max);
        assert!((num(&t["value"]) - best).abs() < 1e-9, "{t} vs {best}");
    }
    // The second batch was asked after the first was told: one writer at a time.
    let told = time_of(&record(&workdir, "tell.0", "end"), "ended");
    let asked = time_of(&record(&workdir, "ask.1", "start"), "started");
    assert!(
        told <= asked,
        "ask[1] started {asked} before tell[0] ended {told}"
    );
    let trained = time_of(&record(&workdir, "train.1", "end"), "ended");
    assert!(trained <= time_of(&record(&workdir, "tell.0", "start"), "started"));

    // The best: by the summary, `tune best`, best_hyperparameters.yaml, the export.
    let values: Vec<f64> = trials.iter().map(|t| num(&t["value"])).collect();
    let best_n = (0..4)
        .max_by(|&a, &b| values[a].total_cmp(&values[b]).then(b.cmp(&a)))
        .unwrap();
    assert_eq!(st["tune"]["best"]["trial"], best_n as u64, "{st:#}");
    let best = f.json(&["tune", "best", "--json", &run_id]);
    assert_eq!(best["trial"], best_n as u64);
    assert_eq!(best["params"], trials[best_n]["params"]);
    let snippet = run(f.cmd().args(["tune", "best", &run_id]));
    let text = String::from_utf8_lossy(&snippet.stdout);
    assert!(
        text.contains("[train.args]\n") && text.contains("lr0 = "),
        "{text}"
    );
    let yaml = read(&workdir.join("tune/best_hyperparameters.yaml"));
    assert!(
        yaml.contains(&format!("trial {best_n} ")) && yaml.contains("lr0: "),
        "{yaml}"
    );
    assert!(workdir
        .join(format!("train-{best_n}/weights/best.onnx"))
        .exists());
    let exported: Vec<usize> = (0..4)
        .filter(|n| {
            workdir
                .join(format!("train-{n}/weights/best.onnx"))
                .exists()
        })
        .collect();
    assert_eq!(exported, [best_n], "only the best trial is exported");

    // [tune] publish: the best trial's model is in the registry, from this
    // run's trial, with its objective as the version's mAP50-95.
    let model = f.json(&["models", "show", "--json", "search-best"]);
    assert_eq!(model["source"]["run_id"], run_id.as_str(), "{model:#}");
    assert_eq!(model["source"]["variant"], best_n as u64, "{model:#}");
    assert!(
        (num(&model["metrics"]["map50_95"]) - values[best_n]).abs() < 1e-9,
        "{model:#}"
    );
    assert!(
        model["note"]
            .as_str()
            .is_some_and(|n| n.contains(&format!("best trial {best_n} of search {run_id}"))),
        "{model:#}"
    );
    let names: Vec<&str> = model["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"best.pt") && names.contains(&"best.onnx"),
        "{names:?}"
    );

    // Human status: the trials' table.
    let text = run(f.cmd().args(["status", &run_id]));
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("search: 4 of 4 trials asked")
            && text.contains(&format!("best: trial {best_n}")),
        "{text}"
    );

    // compare ranks the trials, best first.
    let board = f.json(&["compare", "--json", &run_id]);
    let rows: Vec<&Value> = board["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rows"].as_array().unwrap())
        .collect();
    assert_eq!(rows.len(), 4, "{board:#}");
    assert_eq!(
        rows[0]["id"].as_str().unwrap(),
        format!("{run_id}/train-{best_n}"),
        "{board:#}"
    );
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up): cargo test -- --include-ignored"]
fn more_trials_at_once_than_the_cluster_can_run_is_refused_before_anything_is_queued() {
    let _cluster = common::cluster_shared(module_path!());
    let f = Fixture::new();
    let spec = f.write_spec("too-wide", "[tune]\ntrials = 600\nparallel = 300\n");
    let out = run(f.cmd().arg("submit").arg(&spec));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("too-wide.toml:19")
            && err.contains("`tune.parallel`")
            && err.contains("room for at most"),
        "{err}"
    );
    assert!(
        !f.path().join("runs/too-wide/manifest.json").exists(),
        "nothing submitted"
    );
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up): cargo test -- --include-ignored"]
fn a_failed_ask_stops_the_chain_with_its_reason() {
    let _cluster = common::cluster_shared(module_path!());
    let f = Fixture::new();
    let spec = f.write_spec(
        "no-optuna",
        "[tune]\ntrials = 2\nparallel = 1\nepochs = 1\n",
    );
    // A Python without Optuna: the first ask fails, and nothing after it runs.
    let sub = {
        let out = run(f
            .cmd()
            .env("YOLO_SCHED_PYTHON", "/usr/bin/python3")
            .args(["submit", "--json"])
            .arg(&spec));
        assert_eq!(out.status.code(), Some(0));
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let run_id = sub["run_id"].as_str().unwrap().to_string();
    let mut watch = f.cmd();
    watch.args(["watch", &run_id]);
    let out = run_bounded(&mut watch, patience(Duration::from_secs(180))).expect("watch ends");
    assert_eq!(out.status.code(), Some(1), "the run failed");
    let st = f.json(&["status", "--json", &run_id]);
    assert_eq!(st["state"], "failed", "{st:#}");
    assert_eq!(st["stage"], "ask", "{st:#}");
    let why = st["why"].as_str().unwrap_or_default();
    assert!(
        why.contains("ask job of batch 0") && why.contains("Optuna is not installed"),
        "{st:#}"
    );
    let workdir = PathBuf::from(st["workdir"].as_str().unwrap());
    assert!(!workdir.join("train-0").exists(), "no trial trained");
    for s in ["train", "tell", "export"] {
        let stage = st["stages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["stage"] == s)
            .unwrap();
        assert_ne!(stage["state"], "completed", "{s}: {stage}");
    }
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up): cargo test -- --include-ignored"]
fn a_cancelled_search_resumes_from_its_study_without_rerunning_told_trials() {
    let _cluster = common::cluster_shared(module_path!());
    let f = Fixture::new();
    let spec = f.write_spec(
        "resumed",
        "[tune]\ntrials = 4\nparallel = 2\nepochs = 4\nsampler = \"random\"\nseed = 5\n\
         [tune.space]\nlr0 = { min = 1e-3, max = 1e-1, log = true }\n",
    );
    let sub = f.json(&["submit", "--json", spec.to_str().unwrap()]);
    let run_id = sub["run_id"].as_str().unwrap().to_string();
    // Batch 1's trials are held (they wait on their ask anyway, so this
    // races with nothing): the search stops between its ask and its trials.
    let ids = submitted_ids(&sub);
    assert_eq!(sub["jobs"][5]["array"], "2-3", "{sub:#}");
    let held = Command::new("scontrol")
        .args(["hold", &ids[5].to_string()])
        .status()
        .unwrap();
    assert!(held.success());
    let workdir = f.path().join("runs/resumed");
    wait_until(
        Duration::from_secs(240),
        "batch 0 told and batch 1 asked",
        || {
            workdir.join("state/tell.0.end.json").exists()
                && workdir.join("state/ask.1.end.json").exists()
        },
    );
    let before = f.json(&["status", "--json", &run_id]);
    let told: Vec<Value> = before["tune"]["trials"].as_array().unwrap()[..2].to_vec();
    assert!(told.iter().all(|t| t["state"] == "complete"), "{before:#}");
    let out = run(f.cmd().args(["cancel", &run_id]));
    assert_eq!(out.status.code(), Some(0));
    wait_until(Duration::from_secs(120), "the search cancelled", || {
        f.json(&["status", "--json", &run_id])["state"] == "cancelled"
    });
    let results0 = read(&workdir.join("train-0/results.csv"));

    let out = run(f.cmd().args(["resume", &run_id]));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut watch = f.cmd();
    watch.args(["watch", &run_id]);
    let out = run_bounded(&mut watch, patience(Duration::from_secs(300))).expect("watch ends");
    let st = f.json(&["status", "--json", &run_id]);
    assert_eq!(out.status.code(), Some(0), "{st:#}");
    let trials = st["tune"]["trials"].as_array().unwrap();
    assert_eq!(trials.len(), 4);
    // The told trials kept their study trial, value and training.
    assert_eq!(
        trials[..2]
            .to_vec()
            .iter()
            .map(|t| (&t["number"], &t["value"]))
            .collect::<Vec<_>>(),
        told.iter()
            .map(|t| (&t["number"], &t["value"]))
            .collect::<Vec<_>>()
    );
    assert_eq!(
        read(&workdir.join("train-0/results.csv")),
        results0,
        "trial 0 was not trained again"
    );
    // Batch 1's trials were asked again (new study trials) and completed.
    for t in &trials[2..] {
        assert_eq!(t["state"], "complete", "{t}");
        assert!(
            t["number"].as_u64().unwrap() >= 4,
            "asked again after the resume: {t}"
        );
    }
}

/// The real Ultralytics trainer (on CPU through tests/trainer/yolo-cpu), the
/// venv's own Python asking and telling: two batches of two trials on
/// slices, told with their real mAP50-95, ranked, the best exported.
#[test]
#[ignore = "needs the local Slurm cluster and the real trainer (slurm/cluster.sh up, slurm/trainer.sh install): cargo test -- --include-ignored"]
fn a_search_with_the_real_trainer_tells_real_objectives_and_exports_the_best() {
    let _cluster = common::cluster_shared(module_path!());
    assert!(
        trainer_venv().join("bin/yolo").exists(),
        "the real trainer is needed but {} has none; run slurm/trainer.sh install",
        trainer_venv().display()
    );
    let f = Fixture::new();
    let spec = f.path().join("real.toml");
    std::fs::write(
        &spec,
        format!(
            "version = 1\n[run]\nname = \"real\"\npartition = \"gpu\"\n\
             [train]\nmodel = \"yolov8n.yaml\"\ndata = \"{}\"\nimgsz = 64\nbatch = 8\n\
             args = {{ seed = 1, plots = false }}\n\
             [stages.prepare]\npartition = \"cpu\"\n[stages.export]\npartition = \"cpu\"\nformats = [\"onnx\"]\n\
             [tune]\ntrials = 4\nparallel = 2\nepochs = 2\nseed = 3\n\
             [tune.space]\nlr0 = {{ min = 1e-3, max = 1e-1, log = true }}\nmosaic = {{ choices = [0.0, 1.0] }}\n",
            f.path().join("dataset/data.yaml").display()
        ),
    )
    .unwrap();
    let mut c = f.cmd();
    use_real_trainer(&mut c, f.path());
    c.env("YOLO_SCHED_PYTHON", trainer_venv().join("bin/python"))
        .args(["submit", "--json"])
        .arg(&spec);
    let out = run(&mut c);
    assert_eq!(out.status.code(), Some(0));
    let run_id = serde_json::from_slice::<Value>(&out.stdout).unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    let mut watch = f.cmd();
    use_real_trainer(&mut watch, f.path());
    watch.args(["watch", &run_id]);
    let out = run_bounded(&mut watch, patience(Duration::from_secs(900))).expect("watch ends");
    let mut status = f.cmd();
    use_real_trainer(&mut status, f.path());
    let st: Value =
        serde_json::from_slice(&run(status.args(["status", "--json", &run_id])).stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{st:#}");
    let workdir = PathBuf::from(st["workdir"].as_str().unwrap());
    let trials = st["tune"]["trials"].as_array().unwrap();
    assert_eq!(trials.len(), 4, "{st:#}");
    for (n, t) in trials.iter().enumerate() {
        assert_eq!(t["state"], "complete", "{t}");
        assert!(t["value"].is_number(), "{t}");
        // Ultralytics itself recorded the trial's arguments.
        let args = read(&workdir.join(format!("train-{n}/args.yaml")));
        let mosaic = t["params"]["mosaic"].as_f64().unwrap();
        assert!(args.contains(&format!("mosaic: {mosaic:?}\n")), "{args}");
        assert!(args.contains("epochs: 2\n"), "{args}");
    }
    let best = st["tune"]["best"]["trial"].as_u64().unwrap();
    assert!(workdir
        .join(format!("train-{best}/weights/best.onnx"))
        .exists());
    let yaml = read(&workdir.join("tune/best_hyperparameters.yaml"));
    assert!(
        yaml.contains("lr0: ") && yaml.contains("mosaic: "),
        "{yaml}"
    );
    let mut compare = f.cmd();
    use_real_trainer(&mut compare, f.path());
    let board: Value =
        serde_json::from_slice(&run(compare.args(["compare", "--json", &run_id])).stdout).unwrap();
    let rows: usize = board["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["rows"].as_array().unwrap().len())
        .sum();
    assert_eq!(rows, 4, "{board:#}");
}

/// `[tune] early_stop`: a trial that falls behind the told trials is
/// stopped by its own job agent (the median rule), its job ends while its
/// sibling still trains (the slice freed), and it is told pruned with the
/// epochs it reached; status, compare and the HTML page show it so.
///
/// The stand-in's mAP rises with lr0; with `sampler = "random"` and seed 3
/// the trials' lr0 are 0.05, 0.05 (batch 0), then 0.0001 and 0.05: trial 2
/// is far below the median from its first epochs, trial 3 ties it.
#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up): cargo test -- --include-ignored"]
fn a_trial_that_falls_behind_is_stopped_early_through_its_agent_and_told_pruned() {
    let _cluster = common::cluster_shared(module_path!());
    let f = Fixture::new();
    let spec = f.write_spec(
        "pruned",
        "[tune]\ntrials = 4\nparallel = 2\nepochs = 8\nsampler = \"random\"\nseed = 3\n\
         early_stop = { rule = \"median\", min_epochs = 2, min_trials = 2 }\n\
         [tune.space]\nlr0 = { choices = [0.0001, 0.05] }\n",
    );
    let mut submit = f.cmd();
    submit
        .env("YOLO_STANDIN_EPOCH_SECONDS", "2")
        .args(["submit", "--json"])
        .arg(&spec);
    let out = run(&mut submit);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sub: Value = serde_json::from_slice(&out.stdout).unwrap();
    let run_id = sub["run_id"].as_str().unwrap().to_string();
    let ids = submitted_ids(&sub);
    assert_eq!(sub["jobs"][5]["array"], "2-3", "{sub:#}");
    let workdir = f.path().join("runs/pruned");

    // The moment trial 2's job has ended, trial 3 still trains on its slice.
    // The end record is written by the job's script just before it exits,
    // so Slurm lists the task a moment longer (RUNNING, then COMPLETING):
    // the job has ended when its task has left the queue.
    wait_until(Duration::from_secs(300), "trial 2 stopped early", || {
        workdir.join("state/train.2.end.json").exists()
    });
    let tasks = || {
        let out = Command::new("squeue")
            .args(["-h", "-r", "-j", &ids[5].to_string(), "-o", "%K %T"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let queue = wait_for_seen(
        Duration::from_secs(60),
        "trial 2's task to leave the queue",
        tasks,
        || {
            let q = tasks();
            (!q.lines().any(|l| l.starts_with("2 "))).then_some(q)
        },
    );
    assert!(
        !workdir.join("state/train.3.end.json").exists(),
        "trial 3 ended before trial 2 was stopped"
    );
    assert!(
        queue.lines().any(|l| l.trim() == "3 RUNNING"),
        "trial 2's task is gone, trial 3's runs: {queue}"
    );
    let end2 = record(&workdir, "train.2", "end");
    assert_eq!(
        end2["exit_code"], 0,
        "a pruned trial is no failed job: {end2}"
    );
    let prune: Value =
        serde_json::from_str(&read(&workdir.join("state/train.2.prune.json"))).unwrap();
    assert_eq!(prune["rule"], "median", "{prune}");
    let at = prune["epoch"].as_u64().unwrap();
    assert!((2..8).contains(&at), "{prune}");
    // The two told trials, and trial 3 when it had reached the epoch too.
    assert!(
        (2..=3).contains(&prune["compared"].as_u64().unwrap()),
        "{prune}"
    );
    assert!(num(&prune["value"]) < num(&prune["reference"]), "{prune}");
    let log = read(&workdir.join("logs/train-2.out"));
    assert!(
        log.contains("stopped early (median rule)") && log.contains("its slice is freed"),
        "{log}"
    );

    let mut watch = f.cmd();
    watch.args(["watch", &run_id]);
    let out = run_bounded(&mut watch, patience(Duration::from_secs(300))).expect("watch ends");
    let st = f.json(&["status", "--json", &run_id]);
    assert_eq!(out.status.code(), Some(0), "{st:#}");
    assert_eq!(st["state"], "completed", "{st:#}");
    let trials = st["tune"]["trials"].as_array().unwrap();
    let states: Vec<&str> = trials
        .iter()
        .map(|t| t["state"].as_str().unwrap())
        .collect();
    assert_eq!(
        states,
        ["complete", "complete", "pruned", "complete"],
        "{st:#}"
    );
    let reached = trials[2]["epochs"].as_u64().unwrap();
    assert!(
        reached >= at && reached < 8,
        "told with the epochs it reached: {st:#}"
    );
    assert_eq!(trials[3]["epochs"], 8, "{st:#}");
    for (n, lr0) in [(0, 0.05), (1, 0.05), (2, 0.0001), (3, 0.05)] {
        assert_eq!(
            num(&trials[n]["params"]["lr0"]),
            lr0,
            "the seed's draw changed: {st:#}"
        );
    }
    let text = run(f.cmd().args(["status", &run_id]));
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("pruned"), "{text}");

    let board = f.json(&["compare", "--json", &run_id]);
    let row = board["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rows"].as_array().unwrap())
        .find(|r| r["id"] == format!("{run_id}/train-2"))
        .expect("trial 2's row")
        .clone();
    assert_eq!(row["train_state"], "pruned", "{row:#}");

    // The HTML page plots the search: a dot per completed trial.
    let page = f.path().join("report.html");
    let out = run(f
        .cmd()
        .args(["report", "--format", "html", "--output"])
        .arg(&page));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let html = read(&page);
    let section = &html[html
        .find("<section id=\"searches\">")
        .expect("the searches section")..];
    let section = &section[..section.find("</section>").unwrap()];
    assert!(section.contains(&run_id), "{section}");
    assert_eq!(
        section.matches("<circle class=\"dot\"").count(),
        3,
        "{section}"
    );
    assert!(section.contains("<td>pruned</td>"), "{section}");
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up): cargo test -- --include-ignored"]
fn publishing_a_search_without_a_registry_is_refused_before_anything_is_queued() {
    let _cluster = common::cluster_shared(module_path!());
    let f = Fixture::new();
    let spec = f.write_spec(
        "no-registry",
        "[tune]\ntrials = 2\nparallel = 1\npublish = \"best\"\n",
    );
    std::fs::write(f.path().join("bare.toml"), "").unwrap();
    let out = run(f
        .cmd()
        .env("YOLO_SCHED_SITE", f.path().join("bare.toml"))
        .arg("submit")
        .arg(&spec));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("no-registry.toml:20")
            && err.contains("`tune.publish`")
            && err.contains("no model registry"),
        "{err}"
    );
    assert!(!f.path().join("runs/no-registry/manifest.json").exists());
}

/// `sampler = "gp"`: Optuna's GPSampler proposes from a fitted Gaussian
/// process only after its random start (10 trials), and only then needs
/// scipy and torch in the ask job's Python. Three batches of five: the third
/// is asked by the fitted process, which (the stand-in's mAP rising with
/// lr0) proposes larger lr0 than the random start drew.
#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up): cargo test -- --include-ignored"]
fn a_gp_search_asks_its_third_batch_from_the_fitted_process() {
    let _cluster = common::cluster_shared(module_path!());
    let f = Fixture::new();
    let spec = f.write_spec(
        "gp",
        "[tune]\ntrials = 15\nparallel = 5\nepochs = 2\nsampler = \"gp\"\nseed = 7\n\
         [tune.space]\nlr0 = { min = 1e-4, max = 1e-1, log = true }\n",
    );
    let sub = f.json(&["submit", "--json", spec.to_str().unwrap()]);
    let run_id = sub["run_id"].as_str().unwrap().to_string();
    let mut watch = f.cmd();
    watch.args(["watch", &run_id]);
    let out = run_bounded(&mut watch, patience(Duration::from_secs(600))).expect("watch ends");
    let st = f.json(&["status", "--json", &run_id]);
    assert_eq!(out.status.code(), Some(0), "{st:#}");
    assert_eq!(st["state"], "completed", "{st:#}");
    assert_eq!(st["tune"]["sampler"], "gp", "{st:#}");
    let trials = st["tune"]["trials"].as_array().unwrap();
    assert_eq!(trials.len(), 15, "{st:#}");
    assert!(trials.iter().all(|t| t["state"] == "complete"), "{st:#}");
    let log_lr = |t: &Value| num(&t["params"]["lr0"]).ln();
    let mean = |ts: &[Value]| ts.iter().map(log_lr).sum::<f64>() / ts.len() as f64;
    let (start, fitted) = (mean(&trials[..10]), mean(&trials[10..]));
    assert!(
        fitted > start,
        "the fitted GP's batch (mean ln lr0 {fitted}) should lean to larger lr0 than the random start ({start}): {st:#}"
    );
    let workdir = f.path().join("runs/gp");
    let ask = read(&workdir.join("logs/ask-2.out"));
    assert!(!ask.contains("tune: error"), "{ask}");
}

/// The train stage's attempts in the run's manifest: (job, array, gres).
fn train_attempts(workdir: &Path) -> Vec<(u64, String, Option<String>)> {
    let m: Value = serde_json::from_str(&read(&workdir.join("manifest.json"))).unwrap();
    m["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["stage"] == "train")
        .unwrap()["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["job_id"].as_u64().unwrap(),
                a["array"].as_str().unwrap_or_default().to_string(),
                a["gres"].as_str().map(String::from),
            )
        })
        .collect()
}

/// `on_oom = "resume-bigger"` in a search: every trial runs out of GPU
/// memory on its 1g.5gb slice (the stand-in on devices 0-3), moves to a
/// 2g.10gb slice within its batch, resumes there and is told its objective;
/// the batch's tell waited for the moved jobs, the next batch started on the
/// planned slice again.
#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up): cargo test -- --include-ignored"]
fn a_trial_out_of_gpu_memory_moves_to_a_bigger_slice_within_its_batch() {
    let _cluster = common::cluster_shared(module_path!());
    let f = Fixture::new();
    let spec = f.write_spec(
        "oom-bigger",
        "[tune]\ntrials = 4\nparallel = 2\nepochs = 3\nsampler = \"random\"\nseed = 1\n\
         [tune.space]\nlr0 = { min = 1e-3, max = 1e-1, log = true }\n\
         [resources]\non_oom = \"resume-bigger\"\non_oom_steps = 1\n",
    );
    let mut submit = f.cmd();
    submit
        .env("YOLO_STANDIN_OOM_DEVICES", "0,1,2,3")
        .args(["submit", "--json"])
        .arg(&spec);
    let out = run(&mut submit);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run_id = serde_json::from_slice::<Value>(&out.stdout).unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    let workdir = f.path().join("runs/oom-bigger");
    let mut watch = f.cmd();
    watch.args(["watch", &run_id]);
    let out = run_bounded(&mut watch, patience(Duration::from_secs(420))).expect("watch ends");
    let st = f.json(&["status", "--json", &run_id]);
    assert_eq!(out.status.code(), Some(0), "{st:#}");
    assert_eq!(st["state"], "completed", "{st:#}");
    let trials = st["tune"]["trials"].as_array().expect("the trials");
    assert_eq!(trials.len(), 4, "{st:#}");
    for t in trials {
        assert_eq!(t["state"], "complete", "{t}");
        assert_eq!(t["epochs"], 3, "{t}");
        assert!(t["value"].is_number(), "{t}");
    }
    // Two batch arrays on the planned slice, and one move per trial.
    let attempts = train_attempts(&workdir);
    let arrays: Vec<&str> = attempts
        .iter()
        .filter(|a| a.2.is_none())
        .map(|a| a.1.as_str())
        .collect();
    assert_eq!(arrays, ["0-1", "2-3"], "{attempts:?}");
    for n in 0..4 {
        let moved: Vec<_> = attempts.iter().filter(|a| a.1 == n.to_string()).collect();
        assert_eq!(moved.len(), 1, "trial {n}: {attempts:?}");
        assert_eq!(moved[0].2.as_deref(), Some("gpu:2g.10gb:1"), "{attempts:?}");
        let log = read(&workdir.join(format!("logs/train-{n}.out")));
        assert!(
            log.contains(&format!(
                "trial {n} ran out of GPU memory (CUDA out of memory"
            )) && log.contains(&format!(
                "trial {n} moves from gpu:1g.5gb:1 to gpu:2g.10gb:1 as job {}",
                moved[0].0
            )) && log.contains("resuming from"),
            "{log}"
        );
        // The moved job removed the record when it started.
        assert!(!workdir.join(format!("state/train.{n}.oom.json")).exists());
    }
    // Each tell started after its trials' moved jobs ended, and told them.
    for b in 0..2u32 {
        let told = time_of(&record(&workdir, &format!("tell.{b}"), "start"), "started");
        for n in [2 * b, 2 * b + 1] {
            let ended = time_of(&record(&workdir, &format!("train.{n}"), "end"), "ended");
            assert!(
                ended <= told,
                "trial {n} ended {ended} after tell {b} started {told}"
            );
            let end = record(&workdir, &format!("train.{n}"), "end");
            assert_eq!(end["exit_code"], 0, "{end}");
        }
        let log = read(&workdir.join(format!("logs/tell-{b}.out")));
        assert!(!log.contains("told failed"), "{log}");
    }
}

/// With `on_oom_steps = 1`, a trial that runs out of memory on the bigger
/// slice too is told `fail`, and status says it moved once and stayed.
#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up): cargo test -- --include-ignored"]
fn a_trial_out_of_memory_after_its_last_move_is_told_fail_with_why() {
    let _cluster = common::cluster_shared(module_path!());
    let f = Fixture::new();
    let spec = f.write_spec(
        "oom-steps",
        "[tune]\ntrials = 1\nparallel = 1\nepochs = 3\nsampler = \"random\"\nseed = 1\n\
         [tune.space]\nlr0 = { min = 1e-3, max = 1e-1, log = true }\n\
         [resources]\non_oom = \"resume-bigger\"\non_oom_steps = 1\n",
    );
    let mut submit = f.cmd();
    submit
        .env("YOLO_STANDIN_OOM_DEVICES", "0,1,2,3,4,5")
        .args(["submit", "--json"])
        .arg(&spec);
    let out = run(&mut submit);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run_id = serde_json::from_slice::<Value>(&out.stdout).unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    let workdir = f.path().join("runs/oom-steps");
    let mut watch = f.cmd();
    watch.args(["watch", &run_id]);
    run_bounded(&mut watch, patience(Duration::from_secs(300))).expect("watch ends");
    let st = f.json(&["status", "--json", &run_id]);
    let t = &st["tune"]["trials"][0];
    assert_eq!(t["state"], "fail", "{st:#}");
    let why = t["why"].as_str().unwrap_or_default();
    assert!(
        why.starts_with("ran out of GPU memory on 2g.10gb (CUDA out of memory); told fail after 1 move(s) to a bigger slice, not moved again: trial 0 has moved to a bigger slice 1 time(s) already ([resources] on_oom_steps = 1)")
            && why.contains("set `gpu` in [resources] to a bigger slice"),
        "{st:#}"
    );
    let attempts = train_attempts(&workdir);
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    assert_eq!(attempts[1].2.as_deref(), Some("gpu:2g.10gb:1"));
    let log = read(&workdir.join("logs/tell-0.out"));
    assert!(
        log.contains("trial 0: told failed (out of GPU memory (CUDA out of memory); not moved to a bigger slice: trial 0 has moved"),
        "{log}"
    );
}

/// With the default `on_oom = "stop"` a trial that runs out of GPU memory is
/// told `fail` with its reason, and status says so and what to change.
#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up): cargo test -- --include-ignored"]
fn a_trial_out_of_gpu_memory_is_told_fail_and_status_says_what_to_change() {
    let _cluster = common::cluster_shared(module_path!());
    let f = Fixture::new();
    let spec = f.write_spec(
        "oom",
        "[tune]\ntrials = 2\nparallel = 2\nepochs = 3\nsampler = \"random\"\nseed = 1\n\
         [tune.space]\nlr0 = { min = 1e-3, max = 1e-1, log = true }\n",
    );
    let every: Vec<String> = (0..64).map(|d| d.to_string()).collect();
    let mut submit = f.cmd();
    submit
        .env("YOLO_STANDIN_OOM_DEVICES", every.join(","))
        .args(["submit", "--json"])
        .arg(&spec);
    let out = run(&mut submit);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run_id = serde_json::from_slice::<Value>(&out.stdout).unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    let mut watch = f.cmd();
    watch.args(["watch", &run_id]);
    run_bounded(&mut watch, patience(Duration::from_secs(300))).expect("watch ends");
    let st = f.json(&["status", "--json", &run_id]);
    let trials = st["tune"]["trials"].as_array().expect("the trials");
    assert_eq!(trials.len(), 2, "{st:#}");
    for t in trials {
        assert_eq!(t["state"], "fail", "{t}");
        let why = t["why"].as_str().unwrap_or_default();
        assert!(
            why.contains("ran out of GPU memory on 1g.5gb (CUDA out of memory); told fail")
                && why.contains("on_oom = \"resume-bigger\"")
                && why.contains("set `gpu` in [resources] to a bigger slice"),
            "{t}"
        );
    }
    let workdir = f.path().join("runs/oom");
    let tell = read(&workdir.join("logs/tell-0.out"));
    assert!(
        tell.contains("trial 0: told failed (out of GPU memory (CUDA out of memory);")
            && tell.contains("trial 1: told failed (out of GPU memory (CUDA out of memory);"),
        "{tell}"
    );
    // No move: one array, on the planned slice.
    assert_eq!(train_attempts(&workdir).len(), 1);
    let text = run(f.cmd().args(["status", &run_id]));
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("fail (out of GPU memory)")
            && text.contains("trial 1: ran out of GPU memory"),
        "{text}"
    );
}
