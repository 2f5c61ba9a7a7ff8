//! The rendered train script with its job agent, rendered in-process and run
//! by bash outside Slurm (as render_hostile runs scripts), with the stand-in trainer and the fake
//! NVML: an agent that cannot start leaves the training to finish; a leak
//! makes the agent stop the trainer, and the script's end record and the
//! guard record say so; the agent is gone when the script is.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

use yolo_sched::plan::{self, Policy};
use yolo_sched::render::scripts::{render_all, RenderInput};
use yolo_sched::render::Templates;
use yolo_sched::slurm::cluster::Cluster;

use crate::common::*;
use crate::fake_nvml::FakeNode;

struct Rendered {
    dir: tempfile::TempDir,
    node: FakeNode,
}

impl Rendered {
    /// Render the scripts of a 1-stage training with `submit --dry-run`; the
    /// fake GPU 0 holds `processes`.
    fn new(processes: Value, epochs: u32) -> Rendered {
        let dir = tempfile::tempdir().unwrap();
        copy_dir(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/pcb/dataset"),
            &dir.path().join("dataset"),
        );
        let spec_text = format!(
            "version = 1\n[run]\nname = \"scripted\"\nworkdir = \"{}\"\n[train]\nmodel = \"yolov8n.yaml\"\n\
             data = \"{}\"\nepochs = {epochs}\n[stages.prepare]\nenabled = false\n[stages.val]\nenabled = false\n\
             [stages.export]\nenabled = false\n",
            dir.path().join("run").display(),
            dir.path().join("dataset/data.yaml").display()
        );
        // Rendered in-process, as render_hostile does: no Slurm is asked.
        let spec = yolo_sched::spec::parse(&spec_text, "s.toml").unwrap();
        let workdir = dir.path().join("run");
        let cluster = Cluster::uniform("node", 1, 16, 64000, "gpu:1g.5gb:4", &["gpu"]);
        let plan = plan::plan(&spec, &workdir, &cluster, &Policy::default()).unwrap();
        let scripts = render_all(
            &Templates::new(None).unwrap(),
            &RenderInput {
                spec: &spec,
                plan: &plan,
                run_id: "leaky-0001",
                yolo_sched: &bin(),
                yolo: "yolo",
                base_dir: dir.path(),
                font: None,
                models: &Default::default(),
                python: None,
            },
        )
        .unwrap();
        std::fs::create_dir_all(workdir.join("scripts")).unwrap();
        for script in &scripts {
            std::fs::write(
                workdir.join("scripts").join(&script.file_name),
                &script.text,
            )
            .unwrap();
        }
        // The manifest a real submission writes; the agent reads its run id.
        crate::agent_fake::write_manifest(&dir.path().join("run"), "");
        let node = FakeNode::with_fixture("a100-sxm4-40gb.json", |f| {
            f["gpus"][0]["processes"] = processes;
        });
        std::fs::create_dir(dir.path().join("textfile")).unwrap();
        // Two epochs of warm-up: a leak is stopped only once epoch 1's last.pt
        // is surely on disk, however slowly a loaded machine starts the trainer.
        std::fs::write(
            dir.path().join("site.toml"),
            format!(
                "[guard]\ninterval_s = 0.2\nwindow_s = 2\nwarmup_epochs = 2\ngrace_s = 5\ntextfile_dir = \"{}\"\n",
                dir.path().join("textfile").display()
            ),
        )
        .unwrap();
        Rendered { dir, node }
    }

    fn workdir(&self) -> PathBuf {
        self.dir.path().join("run")
    }

    /// Run scripts/train.sh as Slurm would, without Slurm.
    fn run_train(&self, nvml_lib: Option<&str>) -> (i32, String) {
        let mut cmd = Command::new("bash");
        cmd.arg(self.workdir().join("scripts/train.sh"))
            .current_dir(self.workdir())
            .env("YOLO_SCHED_SITE", self.dir.path().join("site.toml"))
            .env("FAKE_NVML_FIXTURE", &self.node.fixture)
            .env(
                "YOLO_SCHED_NVML_LIB",
                nvml_lib.map_or(self.node.lib.clone(), PathBuf::from),
            )
            .env("CUDA_VISIBLE_DEVICES", "0")
            .env("SLURM_JOB_ID", "4711")
            .env_remove("SLURM_ARRAY_TASK_ID")
            .env_remove("SLURM_ARRAY_JOB_ID")
            .env("XDG_STATE_HOME", self.dir.path().join("xdg"))
            .env(
                "YOLO_SCHED_RUN_YOLO",
                Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/standin/yolo"),
            )
            .env("YOLO_STANDIN_EPOCH_SECONDS", "0.4");
        let out = run_bounded(&mut cmd, Duration::from_secs(120)).expect("train.sh hung");
        let log = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.code().unwrap_or(-1), log)
    }

    fn end_record(&self) -> Value {
        serde_json::from_str(&read(&self.workdir().join("state/train.end.json"))).unwrap()
    }
}

#[test]
fn an_agent_that_cannot_open_nvml_leaves_the_training_to_finish() {
    let r = Rendered::new(json!([{"pid": 1, "used_memory_mib": 3000}]), 3);
    let (rc, log) = r.run_train(Some("/nonexistent/libnvidia-ml.so.1"));
    assert_eq!(rc, 0, "{log}");
    assert!(
        log.contains("the job agent could not start; the job runs on without it"),
        "{log}"
    );
    assert!(log.contains("stand-in train: 3 epochs completed"), "{log}");
    assert_eq!(r.end_record()["exit_code"], 0);
    assert!(r.workdir().join("train/.yolo-sched-train-done").exists());
}

#[test]
fn with_steady_memory_the_script_runs_through_and_the_agent_cleans_up() {
    let r = Rendered::new(json!([{"pid": 1, "used_memory_mib": 3000}]), 3);
    let (rc, log) = r.run_train(None);
    assert_eq!(rc, 0, "{log}");
    assert!(
        log.contains("yolo-sched agent: watching 0 (NVIDIA A100-SXM4-40GB, whole GPU)"),
        "{log}"
    );
    let series = read(&r.workdir().join("state/train.memory.csv"));
    assert!(series.lines().count() >= 3, "{series}");
    assert!(series
        .lines()
        .nth(1)
        .unwrap()
        .contains(&format!(",{},", 3000u64 << 20)));
    assert_eq!(
        std::fs::read_dir(r.dir.path().join("textfile"))
            .unwrap()
            .count(),
        0,
        "the metrics file outlived the job"
    );
    assert!(!r.workdir().join("state/train.guard.json").exists());
}

#[test]
fn a_leak_makes_the_agent_stop_the_trainer_and_the_script_records_it() {
    // 1200 MB/min from the first second, over a 2 s window.
    let rate = 1200.0 * 1e6 / 60.0 / (1024.0 * 1024.0);
    let r = Rendered::new(
        json!([{"pid": 1, "memory_curve": [[0, 2000], [3600, 2000.0 + 3600.0 * rate]]}]),
        200,
    );
    let (rc, log) = r.run_train(None);
    assert_eq!(rc, 143, "the trainer's TERM ends the script: {log}");
    assert_eq!(r.end_record()["exit_code"], 143);
    let record: Value =
        serde_json::from_str(&read(&r.workdir().join("state/train.guard.json"))).unwrap();
    assert_eq!(record["action"], "stopped");
    assert_eq!(record["array_job_id"], "4711");
    assert_eq!(record["stopped"], "terminated");
    let msg = record["message"].as_str().unwrap();
    assert!(log.contains(msg), "{log}");
    assert!(!r.workdir().join("train/.yolo-sched-train-done").exists());
    // The stand-in trained some epochs before the stop: resumable from last.pt.
    let out = run(yolo().arg("checkpoint").arg(r.workdir().join("train")));
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("resumable"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
