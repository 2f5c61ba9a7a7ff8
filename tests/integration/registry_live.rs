//! Training from the model registry on the live cluster (stand-in trainer):
//! `submit` resolves `model = "registry:NAME@TAG"` to one version (manifest,
//! scripts), the prepare stage copies it node-local checksum-verified and the
//! trainer gets that local path; after the tag moved, `resume` still uses the
//! original version; an unknown name is refused at submit with exit 2, the
//! names that exist, and nothing queued; a corrupted blob fails the prepare
//! stage, before any GPU is held. A sweep over registry versions and a weights
//! file: each array task trains from its own variant's verified copy, each
//! version pinned in the manifest; an unknown version in the sweep is refused
//! at its line.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::Value;

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
        std::fs::create_dir(dir.path().join("registry")).unwrap();
        std::fs::write(
            dir.path().join("site.toml"),
            format!(
                "[registry]\nurl = \"file://{}\"\n",
                dir.path().join("registry").display()
            ),
        )
        .unwrap();
        Fixture { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A spec; `model` empty: none (the site's `[defaults] model` applies).
    fn spec(&self, name: &str, model: &str, epochs: u32) -> PathBuf {
        let model_line = if model.is_empty() {
            String::new()
        } else {
            format!("model = \"{model}\"\n")
        };
        let text = format!(
            "version = 1\n[run]\nname = \"{name}\"\npartition = \"gpu\"\nworkdir = \"{}\"\n\
             [train]\n{model_line}data = \"{}\"\nepochs = {epochs}\nimgsz = 64\nbatch = 8\n\
             [stages.val]\nenabled = false\n[stages.export]\nenabled = false\n",
            self.path().join("runs").join(name).display(),
            self.path().join("dataset/data.yaml").display()
        );
        let p = self.path().join(format!("{name}.toml"));
        std::fs::write(&p, text).unwrap();
        p
    }

    /// A spec with a `[sweep]` of `models` (TOML strings, as written).
    fn sweep_spec(&self, name: &str, models: &[String]) -> PathBuf {
        let p = self.spec(name, "", 2);
        let mut text = read(&p).replace("[train]\n", "[train]\nmodel = \"yolov8n.yaml\"\n");
        text.push_str(&format!(
            "[sweep]\nmodel = [{}]\n",
            models
                .iter()
                .map(|m| format!("\"{m}\""))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        std::fs::write(&p, text).unwrap();
        p
    }

    fn cmd(&self) -> Command {
        let mut c = yolo();
        c.current_dir(self.path())
            .env("YOLO_SCHED_SITE", self.path().join("site.toml"))
            .env("XDG_STATE_HOME", self.path().join("state"))
            .env(
                "YOLO_SCHED_YOLO",
                Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/standin/yolo"),
            )
            .env("YOLO_SCHED_WATCH_INTERVAL", "0.5")
            .env("YOLO_SCHED_WATCH_MAX_INTERVAL", "2");
        c
    }

    /// yolo-sched with the real Ultralytics (CPU) as `yolo`.
    fn real_cmd(&self) -> Command {
        let mut c = self.cmd();
        crate::common::use_real_trainer(&mut c, self.path());
        c
    }

    /// A small checkpoint `<tag>.pt` in the fixture, its content `tag`'s own.
    #[track_caller]
    fn checkpoint(&self, tag: &str) -> PathBuf {
        let file = self.path().join(format!("{tag}.pt"));
        let ok = Command::new("python3")
            .args([
                "-c",
                "import zipfile,sys; z=zipfile.ZipFile(sys.argv[1],'w'); z.writestr('archive/data.pkl', sys.argv[2].encode()*1000); z.close()",
            ])
            .arg(&file)
            .arg(tag)
            .status()
            .unwrap();
        assert!(ok.success());
        file
    }

    /// Import a small checkpoint as NAME; its weights' SHA-256.
    #[track_caller]
    fn import(&self, name: &str, tag: &str) -> String {
        let file = self.checkpoint(tag);
        let out = run(self
            .cmd()
            .args(["models", "import", "--name", name, "--json"])
            .arg(&file));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["model"]["files"][0]["sha256"]
            .as_str()
            .unwrap()
            .to_string()
    }
}

#[track_caller]
fn submit(f: &Fixture, spec: &Path, env: &[(&str, &str)]) -> (String, Vec<u64>) {
    let mut c = f.cmd();
    for (k, v) in env {
        c.env(k, v);
    }
    let out = run(c.args(["submit", "--json"]).arg(spec));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    (v["run_id"].as_str().unwrap().to_string(), submitted_ids(&v))
}

#[track_caller]
fn watch(f: &Fixture, run_id: &str, limit: Duration) -> i32 {
    let out = run_bounded(f.cmd().args(["watch", run_id]), limit)
        .unwrap_or_else(|| panic!("watch {run_id} did not end within {limit:?}"));
    out.status.code().unwrap_or(-1)
}

fn sha256(path: &Path) -> String {
    let out = Command::new("sha256sum").arg(path).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// The `model:` the trainer was started with (the stand-in writes args.yaml).
fn trained_model(workdir: &Path) -> PathBuf {
    trained_model_in(&workdir.join("train"))
}

/// The `model:` of the training in `train` (`train`, `train-N`).
#[track_caller]
fn trained_model_in(train: &Path) -> PathBuf {
    let args = read(&train.join("args.yaml"));
    PathBuf::from(
        args.lines()
            .find_map(|l| l.strip_prefix("model: "))
            .unwrap_or_else(|| panic!("no model in {args}"))
            .trim(),
    )
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up)"]
fn a_registry_model_trains_from_a_verified_local_copy_and_resume_keeps_its_version() {
    let _cluster = cluster_shared(module_path!());
    let f = Fixture::new();
    let v1 = f.import("base", "one");
    let v2 = f.import("base", "two");
    let out = run(f.cmd().args(["models", "tag", "base@1", "production"]));
    assert!(out.status.success());
    let spec = f.spec("regrun", "registry:base@production", 40);
    let (run_id, jobs) = submit(&f, &spec, &[("YOLO_STANDIN_EPOCH_SECONDS", "0.5")]);
    let workdir = f.path().join("runs/regrun");
    let manifest: Value = serde_json::from_str(&read(&workdir.join("manifest.json"))).unwrap();
    assert_eq!(manifest["model_ref"], "registry:base@1");
    assert!(read(&workdir.join("scripts/train.sh")).contains("models pull base@1"));
    // Training runs from the node-local copy of base@1.
    let started = Instant::now();
    while !workdir.join("train/args.yaml").is_file() {
        assert!(
            started.elapsed() < crate::common::patience(Duration::from_secs(120)),
            "training did not start"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    let local = trained_model(&workdir);
    assert!(
        local.is_absolute() && !local.starts_with(f.path()),
        "{}",
        local.display()
    );
    assert_eq!(sha256(&local), v1);
    let prepare = read(&workdir.join("logs/prepare.out"));
    assert!(prepare.contains("copied base@1"), "{prepare}");

    // The tag moves; the run is cancelled, its weights and the local copy wiped.
    let out = run(f.cmd().args(["models", "tag", "base@2", "production"]));
    assert!(out.status.success());
    let out = run(f.cmd().args(["cancel", &run_id]));
    assert_eq!(out.status.code(), Some(0));
    wait_jobs(&jobs, Duration::from_secs(60));
    std::fs::remove_dir_all(workdir.join("train")).unwrap();
    std::fs::remove_file(&local).unwrap();
    let out = run(f.cmd().args(["resume", &run_id]));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(watch(&f, &run_id, Duration::from_secs(300)), 0);
    let local = trained_model(&workdir);
    assert_eq!(
        sha256(&local),
        v1,
        "resume trained from base@1, not the moved tag's"
    );
    assert_ne!(v1, v2);
    let manifest: Value = serde_json::from_str(&read(&workdir.join("manifest.json"))).unwrap();
    assert_eq!(manifest["model_ref"], "registry:base@1");
    // The HTML page ranks the registry's versions beside the runs.
    let page = f.path().join("report.html");
    let out = run(f
        .cmd()
        .args(["report", "--format", "html", "--registry", "--output"])
        .arg(&page));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let html = read(&page);
    assert!(
        html.contains("registry:base@2") && html.contains("regrun"),
        "the page ranks registry versions and runs"
    );
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up)"]
fn an_unknown_registry_model_is_refused_at_submit_and_nothing_is_queued() {
    let _cluster = cluster_shared(module_path!());
    let f = Fixture::new();
    f.import("base", "one");
    let spec = f.spec("regunknown", "registry:bsae@2", 2);
    let out = run(f.cmd().args(["validate", "--no-cluster"]).arg(&spec));
    assert_eq!(
        out.status.code(),
        Some(2),
        "validate refuses it as submit does"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("`base`"));
    let out = run(f.cmd().arg("submit").arg(&spec));
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(err.contains("regunknown.toml:"), "file:line: {err}");
    assert!(
        err.contains("train.model") || err.contains("model"),
        "{err}"
    );
    assert!(
        err.contains("`base`") && err.contains("did you mean"),
        "{err}"
    );
    assert!(!f.path().join("runs/regunknown/manifest.json").exists());
    let q = Command::new("squeue")
        .args(["-h", "-o", "%j"])
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&q.stdout).contains("regunknown"),
        "nothing queued"
    );
    // A spec without a model: the site's `[defaults] model` names a registry model.
    let bare = f.spec("regdefault", "", 2);
    let out = run(f.cmd().args(["validate", "--no-cluster"]).arg(&bare));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing key `model`"));
    let site = std::fs::read_to_string(f.path().join("site.toml")).unwrap();
    std::fs::write(
        f.path().join("site.toml"),
        format!("{site}[defaults]\nmodel = \"registry:base\"\n"),
    )
    .unwrap();
    let out = run(f.cmd().args(["submit", "--dry-run"]).arg(&bare));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let train = read(&f.path().join("runs/regdefault/scripts/train.sh"));
    assert!(train.contains("models pull base@1"), "{train}");
    std::fs::write(
        f.path().join("site.toml"),
        format!("{site}[defaults]\nmodel = \"registry:../x\"\n"),
    )
    .unwrap();
    let out = run(f.cmd().args(["validate", "--no-cluster"]).arg(&bare));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("defaults.model"));
    std::fs::write(f.path().join("site.toml"), &site).unwrap();
    // The offline refusal of a bare weights file points to the registry.
    let spec = f.spec("regoffline", "yolov8n.pt", 2);
    let out = run(f.cmd().arg("submit").arg(&spec));
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(err.contains("registry:yolov8n"), "{err}");
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up)"]
fn a_corrupted_blob_fails_the_prepare_stage_before_training() {
    let _cluster = cluster_shared(module_path!());
    let f = Fixture::new();
    let sha = f.import("base", "bad");
    let blob = f.path().join("registry/blobs/sha256").join(&sha);
    let spec = f.spec("regcorrupt", "registry:base", 2);
    // The same size, other content: submission checks sizes, the copy checksums.
    let mut bytes = std::fs::read(&blob).unwrap();
    let n = bytes.len();
    bytes[n / 2] ^= 0xff;
    std::fs::write(&blob, &bytes).unwrap();
    let (run_id, _jobs) = submit(&f, &spec, &[]);
    assert_ne!(watch(&f, &run_id, Duration::from_secs(180)), 0);
    let workdir = f.path().join("runs/regcorrupt");
    let prepare = read(&workdir.join("logs/prepare.out"));
    assert!(prepare.contains("damaged"), "{prepare}");
    assert!(
        !workdir.join("train/args.yaml").exists(),
        "training never started"
    );
}

#[test]
#[ignore = "needs the local Slurm cluster and the real trainer (slurm/cluster.sh up, slurm/trainer.sh install): cargo test -- --include-ignored"]
fn a_real_model_published_and_trained_from_the_registry_loads() {
    let _cluster = cluster_shared(module_path!());
    assert!(
        trainer_venv().join("bin/yolo").exists(),
        "the real trainer is needed but {} has none; run slurm/trainer.sh install",
        trainer_venv().display()
    );
    let f = Fixture::new();
    let real = |c: &mut Command| -> Value {
        let out = run(c);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
    };
    let base = f.spec("realbase", "yolov8n.yaml", 1);
    let sub = real(f.real_cmd().args(["submit", "--json"]).arg(&base));
    let run_id = sub["run_id"].as_str().unwrap().to_string();
    let out = run_bounded(
        f.real_cmd().args(["watch", &run_id]),
        Duration::from_secs(600),
    )
    .expect("watch ended");
    assert_eq!(out.status.code(), Some(0), "the base run trained");
    let v1 = real(
        f.real_cmd()
            .args(["models", "publish", "--name", "pcb-real", "--json"])
            .arg(f.path().join("runs/realbase")),
    );
    let sha = v1["model"]["files"][0]["sha256"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(v1["model"]["metrics"]["map50_95"].is_number(), "{v1}");
    // The versions the training ran with, as the train stage recorded them.
    assert_eq!(v1["model"]["ultralytics"], "8.4.190", "{v1}");
    assert!(
        v1["model"]["torch"]
            .as_str()
            .is_some_and(|t| t.starts_with(|c: char| c.is_ascii_digit())),
        "{v1}"
    );
    let out = run(f.real_cmd().args(["models", "show", "pcb-real@1"]));
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains("Ultralytics 8.4.190, torch "), "{shown}");
    assert!(
        v1["model"]["fingerprint"].is_string(),
        "the prepare stage's fingerprint: {v1}"
    );

    let child = f.spec("realchild", "registry:pcb-real", 1);
    let sub = real(f.real_cmd().args(["submit", "--json"]).arg(&child));
    let run_id = sub["run_id"].as_str().unwrap().to_string();
    let out = run_bounded(
        f.real_cmd().args(["watch", &run_id]),
        Duration::from_secs(600),
    )
    .expect("watch ended");
    let workdir = f.path().join("runs/realchild");
    let log = read(&workdir.join("logs/train.out"));
    assert_eq!(out.status.code(), Some(0), "the child run trained:\n{log}");
    let local = trained_model(&workdir);
    assert_eq!(sha256(&local), sha, "Ultralytics got the registry's bytes");
    assert!(
        log.contains("Transferred") && log.contains("pretrained weights"),
        "Ultralytics loaded the registry model's weights:\n{log}"
    );
    let v = real(
        f.real_cmd()
            .args(["models", "publish", "--name", "pcb-real", "--json"])
            .arg(&workdir),
    );
    assert_eq!(v["model"]["version"], 2);
    assert_eq!(v["model"]["parent"], "registry:pcb-real@1", "lineage: {v}");
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up)"]
fn a_sweep_of_registry_versions_trains_each_task_from_its_own_verified_copy() {
    let _cluster = cluster_shared(module_path!());
    let f = Fixture::new();
    let v1 = f.import("base", "one");
    let v2 = f.import("base", "two");
    let out = run(f.cmd().args(["models", "tag", "base@2", "production"]));
    assert!(out.status.success());
    let file = f.checkpoint("three");
    let spec = f.sweep_spec(
        "regsweep",
        &[
            "registry:base@1".into(),
            "registry:base@production".into(),
            file.display().to_string(),
        ],
    );
    let (run_id, _jobs) = submit(&f, &spec, &[]);
    let workdir = f.path().join("runs/regsweep");
    let manifest: Value = serde_json::from_str(&read(&workdir.join("manifest.json"))).unwrap();
    assert_eq!(
        manifest["model_refs"],
        serde_json::json!(["registry:base@1", "registry:base@2", null]),
        "each variant's version pinned: {manifest}"
    );
    let prepare = read(&workdir.join("scripts/prepare.sh"));
    assert!(
        prepare.contains("models pull base@1 ") && prepare.contains("models pull base@2 "),
        "{prepare}"
    );
    let train = read(&workdir.join("scripts/train.sh"));
    assert!(
        !train.contains("production"),
        "the tag is not in the scripts: {train}"
    );
    // The tag moves while the run waits or trains: nothing changes for it.
    let out = run(f.cmd().args(["models", "tag", "base@1", "production"]));
    assert!(out.status.success());
    assert_eq!(watch(&f, &run_id, Duration::from_secs(300)), 0);
    let prepare_log = read(&workdir.join("logs/prepare.out"));
    assert!(
        prepare_log.contains("copied base@1") && prepare_log.contains("copied base@2"),
        "{prepare_log}"
    );
    for (task, want) in [(0, &v1), (1, &v2)] {
        let local = trained_model_in(&workdir.join(format!("train-{task}")));
        assert!(
            local.is_absolute() && !local.starts_with(f.path()),
            "task {task} trains from a node-local copy: {}",
            local.display()
        );
        assert_eq!(&sha256(&local), want, "task {task}");
    }
    assert_eq!(trained_model_in(&workdir.join("train-2")), file);
    // Each variant's version is its published child's parent.
    for (variant, parent) in [
        ("1", serde_json::json!("registry:base@2")),
        ("2", serde_json::json!(file.display().to_string())),
    ] {
        let out = run(f
            .cmd()
            .args([
                "models",
                "publish",
                "--name",
                "swept",
                "--variant",
                variant,
                "--json",
            ])
            .arg(&workdir));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["model"]["parent"], parent, "variant {variant}: {v}");
        // The stand-in trainer has no Ultralytics or torch to report.
        assert!(
            v["model"]["ultralytics"].is_null() && v["model"]["torch"].is_null(),
            "{v}"
        );
    }
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up)"]
fn an_unknown_registry_model_in_a_sweep_is_refused_at_its_line_and_nothing_is_queued() {
    let _cluster = cluster_shared(module_path!());
    let f = Fixture::new();
    f.import("base", "one");
    let spec = f.sweep_spec(
        "regsweepbad",
        &["registry:base@1".into(), "registry:base@9".into()],
    );
    let line = read(&spec)
        .lines()
        .position(|l| l.starts_with("model = ["))
        .unwrap()
        + 1;
    for args in [
        &["validate", "--no-cluster"][..],
        &["submit"],
        &["submit", "--dry-run"],
    ] {
        let out = run(f.cmd().args(args).arg(&spec));
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(
            err.contains(&format!("regsweepbad.toml:{line}:")) && err.contains("sweep.model"),
            "{args:?}: {err}"
        );
    }
    assert!(!f.path().join("runs/regsweepbad/manifest.json").exists());
    assert!(!f.path().join("runs/regsweepbad/scripts").exists());
    let q = Command::new("squeue")
        .args(["-h", "-o", "%j"])
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&q.stdout).contains("regsweepbad"),
        "nothing queued"
    );
}
