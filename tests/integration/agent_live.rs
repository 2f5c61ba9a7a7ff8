//! The job agent in real Slurm jobs under the REAL Ultralytics trainer (CPU,
//! through `tests/trainer/yolo-cpu`), with the fake NVML as the GPU: the job
//! inherits `YOLO_SCHED_NVML_LIB`, `FAKE_NVML_FIXTURE` and `YOLO_SCHED_SITE`
//! from the submitter, as any job inherits its environment. Slurm's
//! `CUDA_VISIBLE_DEVICES` is an index (0..6 on this cluster), so the fake node
//! has eight GPUs with the same process on each.
//!
//! * a steady training publishes promtool-clean gauges during the job, which
//!   a real node_exporter textfile scrape serves, and removes them after;
//! * a leak after the first epoch is stopped by the guard, `status`, `watch`
//!   and the audit log say why, and `resume` (with the leak gone) finishes the
//!   training from its checkpoint.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::*;
use crate::fake_nvml::FakeNode;

static SERIAL: Mutex<()> = Mutex::new(());

struct Live {
    dir: tempfile::TempDir,
    node: FakeNode,
}

/// The same process on each of the eight GPUs.
fn on_every_gpu(f: &mut Value, process: Value) {
    for g in f["gpus"].as_array_mut().unwrap() {
        g["processes"] = json!([process.clone()]);
    }
}

impl Live {
    fn new(process: Value, guard: &str) -> Live {
        let node = FakeNode::with_fixture("8xh200.json", |f| on_every_gpu(f, process));
        let dir = shared_tempdir();
        copy_dir(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/pcb/dataset"),
            &dir.path().join("dataset"),
        );
        std::fs::create_dir(dir.path().join("textfile")).unwrap();
        std::fs::write(
            dir.path().join("site.toml"),
            format!(
                "[guard]\ninterval_s = 0.5\ntextfile_dir = \"{}\"\n{guard}\n",
                dir.path().join("textfile").display()
            ),
        )
        .unwrap();
        Live { dir, node }
    }

    fn spec(&self, name: &str, epochs: u32) -> PathBuf {
        let text = format!(
            "version = 1\n[run]\nname = \"{name}\"\npartition = \"gpu\"\nworkdir = \"{}\"\n\
             [train]\nmodel = \"yolov8n.yaml\"\ndata = \"{}\"\nepochs = {epochs}\nimgsz = 64\nbatch = 8\n\
             args = {{ seed = 1, plots = false }}\n\
             [stages.prepare]\nenabled = false\n[stages.val]\nenabled = false\n[stages.export]\nenabled = false\n",
            self.workdir(name).display(),
            self.dir.path().join("dataset/data.yaml").display()
        );
        let p = self.dir.path().join(format!("{name}.toml"));
        std::fs::write(&p, text).unwrap();
        p
    }

    fn workdir(&self, name: &str) -> PathBuf {
        self.dir.path().join("runs").join(name)
    }

    fn cmd(&self) -> Command {
        let mut c = yolo();
        self.node.apply_env(&mut c);
        c.current_dir(self.dir.path())
            .env("YOLO_SCHED_SITE", self.dir.path().join("site.toml"));
        crate::common::use_real_trainer(&mut c, self.dir.path());
        c
    }

    #[track_caller]
    fn submit(&self, spec: &Path) -> String {
        let out = run(self.cmd().args(["submit", "--json"]).arg(spec));
        assert_eq!(out.status.code(), Some(0), "submit failed");
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["run_id"].as_str().unwrap().to_string()
    }

    fn status(&self, run_id: &str) -> Value {
        let out = run(self.cmd().args(["status", "--json", run_id]));
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

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

#[test]
#[ignore = "needs the local Slurm cluster and the real trainer (slurm/cluster.sh up, slurm/trainer.sh install): cargo test -- --include-ignored"]
fn a_real_training_publishes_clean_gauges_a_node_exporter_serves_and_removes_them() {
    let _cluster = ready();
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let live = Live::new(json!({"pid": 1, "used_memory_mib": 3000}), "");
    let run_id = live.submit(&live.spec("gauges", 4));
    let textdir = live.dir.path().join("textfile");
    let prom = textdir.join(format!("yolo_sched_{run_id}_train.prom"));
    crate::common::wait_until(
        Duration::from_secs(180),
        &format!("{} while the job runs", prom.display()),
        || prom.exists(),
    );
    let text = read(&prom);
    assert!(
        text.contains(&format!(
            "yolo_sched_job_gpu_memory_used_bytes{{run=\"{run_id}\",stage=\"train\",task=\"\""
        )) && text.contains(&format!("}} {}\n", 3000u64 << 20)),
        "{text}"
    );
    assert!(text.contains("slice=\"NVIDIA H200\""), "{text}");
    let promtool = crate::report_replay::tool(&["promtool"], "prometheus");
    let exporter = crate::report_replay::tool(
        &["prometheus-node-exporter", "node_exporter"],
        "prometheus-node-exporter",
    );
    if let Some(promtool) = promtool {
        let check = run(Command::new(promtool)
            .args(["check", "metrics"])
            .stdin(std::fs::File::open(&prom).unwrap()));
        assert!(
            check.status.success() && check.stdout.is_empty() && check.stderr.is_empty(),
            "promtool findings"
        );
    }
    if let Some(exporter) = exporter {
        let scraped = crate::report_replay::scrape_textfiles(
            &exporter,
            &textdir,
            "yolo_sched_job_gpu_memory_used_bytes",
            Duration::from_secs(30),
        );
        assert!(
            scraped.contains("node_textfile_scrape_error 0"),
            "{scraped}"
        );
        assert!(
            scraped.contains(&format!("run=\"{run_id}\""))
                && scraped.contains("# TYPE yolo_sched_job_gpu_memory_total_bytes gauge"),
            "{scraped}"
        );
    }
    let watch = run(live.cmd().args(["watch", &run_id]));
    assert_eq!(watch.status.code(), Some(0), "the run completed");
    assert!(!prom.exists(), "the gauges outlived the job");
    let workdir = live.workdir("gauges");
    assert_eq!(epochs_in(&workdir.join("train/results.csv")), [1, 2, 3, 4]);
    let series = read(&workdir.join("state/train.memory.csv"));
    assert!(series.lines().count() > 3, "{series}");
    let log = read(&workdir.join("logs/train.out"));
    assert!(log.contains("yolo-sched agent: watching "), "{log}");
    assert!(!workdir.join("state/train.guard.json").exists());
}

#[test]
#[ignore = "needs the local Slurm cluster and the real trainer (slurm/cluster.sh up, slurm/trainer.sh install): cargo test -- --include-ignored"]
fn a_leak_after_the_first_epoch_is_stopped_shown_everywhere_and_resume_finishes() {
    let _cluster = ready();
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // 1200 MB/min from the clock start on: the guard judges it once epoch 1 is done.
    let rate = 1200.0 * 1e6 / 60.0 / (1024.0 * 1024.0);
    let live = Live::new(
        json!({"pid": 1, "memory_curve": [[0, 2000], [7200, 2000.0 + 7200.0 * rate]]}),
        "window_s = 4\nwarmup_epochs = 1\ngrace_s = 30\n",
    );
    let run_id = live.submit(&live.spec("leak", 8));
    let watch = run(live.cmd().args(["watch", &run_id]));
    assert_eq!(watch.status.code(), Some(1), "the run failed");
    let watched = String::from_utf8_lossy(&watch.stdout);
    assert!(
        watched.contains("stopped by the memory guard: grew "),
        "watch does not say why:\n{watched}"
    );
    let st = live.status(&run_id);
    assert_eq!(st["state"], "failed", "{st}");
    let why = st["why"].as_str().unwrap_or_default().to_string();
    assert!(
        why.starts_with("stopped by the memory guard: grew ") && why.ends_with(" of 140 GiB"),
        "{st}"
    );
    let text = run(live.cmd().args(["status", &run_id]));
    assert!(
        String::from_utf8_lossy(&text.stdout).contains(&why),
        "{}",
        String::from_utf8_lossy(&text.stdout)
    );
    let workdir = live.workdir("leak");
    let log = read(&workdir.join("logs/train.out"));
    assert!(log.contains("warm-up over after"), "{log}");
    assert!(
        log.contains(&why) && log.contains("stopped by TERM"),
        "{log}"
    );
    let audit = read(&live.dir.path().join("state/yolo-sched/audit.log"));
    assert!(
        audit
            .lines()
            .any(|l| l.contains("\"guard-stop\"") && l.contains(&why)),
        "{audit}"
    );
    let report = run(live
        .cmd()
        .args(["report", "--section", "runs", "--json", "--runs-dir"])
        .arg(live.dir.path().join("state/yolo-sched/runs")));
    assert!(
        String::from_utf8_lossy(&report.stdout).contains(&why),
        "report: {}",
        String::from_utf8_lossy(&report.stdout)
    );
    let done = epochs_in(&workdir.join("train/results.csv"));
    assert!(!done.is_empty() && done.len() < 8, "{done:?}");

    // The leak is fixed (the fixture now says steady): resume finishes the run.
    let fixture: Value = serde_json::from_str(&read(&live.node.fixture)).unwrap();
    let mut fixture = fixture;
    on_every_gpu(&mut fixture, json!({"pid": 1, "used_memory_mib": 2500}));
    std::fs::write(&live.node.fixture, fixture.to_string()).unwrap();
    let resume = run(live.cmd().args(["resume", &run_id]));
    assert_eq!(resume.status.code(), Some(0));
    let watch = run(live.cmd().args(["watch", &run_id]));
    assert_eq!(watch.status.code(), Some(0), "the resumed run completed");
    let all = epochs_in(&workdir.join("train/results.csv"));
    assert_eq!(all.last(), Some(&8), "{all:?}");
    assert_eq!(
        all[..done.len()],
        done[..],
        "resumed, not restarted: {all:?}"
    );
    assert_eq!(live.status(&run_id)["state"], "completed");
}
