//! Whole outputs that should change only on purpose, compared with files under
//! `tests/snapshots/` (`common::assert_snapshot`; `UPDATE_SNAPSHOTS=1 cargo
//! test --test integration snapshots` rewrites them). Each input is fixed here,
//! and what varies from run to run (times, waits) is masked before comparing.

use std::path::Path;

use crate::common::{assert_snapshot, run, yolo};
use yolo_sched::plan::{self, Policy};
use yolo_sched::render::scripts::{render_all, RenderInput};
use yolo_sched::render::Templates;
use yolo_sched::slurm::cluster::Cluster;

/// A spec with a sweep (so train and export are arrays) and every stage on.
const SPEC: &str = r#"version = 1

[run]
name = "snap"
workdir = "/srv/runs/snap"
account = "vision"
setup = ["module load cuda/12.4"]

[train]
model = "yolov8n.pt"
data = "data/pcb.yaml"
epochs = 20
imgsz = 640

[train.args]
cos_lr = true

[resources]
gpu = "1g.5gb"
time = "02:00:00"

[stages.val]
enabled = true

[stages.export]
formats = ["onnx"]

[sweep]
lr0 = [0.01, 0.001]
max_parallel = 1
"#;

/// Every stage script of `SPEC`, as `submit` would write them. Parsing,
/// planning and rendering are pure, so the paths are the made-up ones given.
#[test]
fn rendered_stage_scripts() {
    let spec = yolo_sched::spec::parse(SPEC, "/srv/specs/spec.toml").unwrap();
    let cluster = Cluster::uniform("node", 2, 16, 64000, "gpu:1g.5gb:4", &["gpu"]);
    let plan = plan::plan(
        &spec,
        Path::new("/srv/runs/snap"),
        &cluster,
        &Policy::default(),
    )
    .unwrap();
    let scripts = render_all(
        &Templates::new(None).unwrap(),
        &RenderInput {
            spec: &spec,
            plan: &plan,
            run_id: "snap-20261201T120000-abcd",
            yolo_sched: Path::new("/usr/local/bin/yolo-sched"),
            yolo: "yolo",
            base_dir: Path::new("/srv/specs"),
            font: None,
            models: &Default::default(),
            python: None,
        },
    )
    .unwrap();
    let mut all = String::new();
    for s in &scripts {
        all.push_str(&format!("### {}\n{}", s.file_name, s.text));
        if !s.text.ends_with('\n') {
            all.push('\n');
        }
    }
    // A release changes the version in every header, not what the scripts do.
    let all = all.replace(
        &format!("yolo-sched {}", env!("CARGO_PKG_VERSION")),
        "yolo-sched <version>",
    );
    assert_snapshot("stage-scripts.txt", &all);
}

/// A search (`[tune]`): prepare, ask, the trials' array, tell, and the
/// export of the best trial, with the Python named at submission (a path
/// that needs quoting) and a searched argument also in `[train.args]`.
const SEARCH: &str = r#"version = 1

[run]
name = "search"
workdir = "/srv/runs/search"

[train]
model = "yolov8n.pt"
data = "data/pcb.yaml"
epochs = 50
imgsz = 640

[train.args]
lr0 = 0.02
cos_lr = true

[stages.export]
formats = ["onnx"]

[tune]
trials = 6
parallel = 3
epochs = 10
[tune.space]
lr0 = { min = 1e-4, max = 1e-1, log = true }
mosaic = { choices = [0.0, 1.0] }
"#;

#[test]
fn rendered_search_scripts() {
    let spec = yolo_sched::spec::parse(SEARCH, "/srv/specs/search.toml").unwrap();
    let cluster = Cluster::uniform("node", 2, 16, 64000, "gpu:1g.5gb:4", &["gpu"]);
    let plan = plan::plan(
        &spec,
        Path::new("/srv/runs/search"),
        &cluster,
        &Policy::default(),
    )
    .unwrap();
    let scripts = render_all(
        &Templates::new(None).unwrap(),
        &RenderInput {
            spec: &spec,
            plan: &plan,
            run_id: "search-20261201T120000-abcd",
            yolo_sched: Path::new("/usr/local/bin/yolo-sched"),
            yolo: "yolo",
            base_dir: Path::new("/srv/specs"),
            font: None,
            models: &Default::default(),
            python: Some("/opt/my venv/bin/python"),
        },
    )
    .unwrap();
    let names: Vec<&str> = scripts.iter().map(|s| s.file_name.as_str()).collect();
    assert_eq!(
        names,
        ["prepare.sh", "ask.sh", "train.sh", "tell.sh", "export.sh"]
    );
    let mut all = String::new();
    for s in scripts.iter().filter(|s| s.file_name != "prepare.sh") {
        all.push_str(&format!("### {}\n{}", s.file_name, s.text));
        if !s.text.ends_with('\n') {
            all.push('\n');
        }
    }
    let all = all.replace(
        &format!("yolo-sched {}", env!("CARGO_PKG_VERSION")),
        "yolo-sched <version>",
    );
    assert_snapshot("search-scripts.txt", &all);
}

/// `validate`'s whole message for a spec with several mistakes at once.
#[test]
fn validate_error_text() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("spec.toml"),
        r#"version = 1

[run]
name = "bad name"

[train]
model = "yolov8n.pt"
epochs = "ten"
lr0 = 0.01

[resources]
gpu = "1g.5g"
time = 90
mem = 8

[stages.export]
formats = ["engine"]

[sweep]
batch = []
"#,
    )
    .unwrap();
    let out = run(yolo()
        .current_dir(dir.path())
        .args(["validate", "--no-cluster", "spec.toml"]));
    let text = format!(
        "exit: {:?}\n--- stdout\n{}--- stderr\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_snapshot("validate-errors.txt", &text);
}

/// `report --format prometheus` over the recorded queue and node listing
/// (`tests/data/report`), with stand-in Slurm clients on PATH. The report's
/// own time and the waits (which grow with the clock) are masked.
#[test]
fn report_prometheus() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/report");
    let bin = tempfile::tempdir().unwrap();
    let stand_in = |name: &str, body: String| {
        use std::os::unix::fs::PermissionsExt;
        let path = bin.path().join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    let cat = |file: &str| format!("cat '{}'", data.join(file).display());
    stand_in("sinfo", cat("sinfo-22.05-node2-drained.json"));
    stand_in("squeue", cat("squeue-22.05-compact.txt"));
    stand_in(
        "sacct",
        format!("{} >&2; exit 1", cat("sacct-22.05-no-accounting.stderr")),
    );
    let path = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = run(yolo()
        .args(["report", "--format", "prometheus"])
        .env("PATH", path)
        .env("TZ", "UTC")
        .env("YOLO_SCHED_RUNS_DIR", bin.path().join("no-runs")));
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    let masked: String = text
        .lines()
        .map(|line| match line.rsplit_once(' ') {
            Some((series, _))
                if !line.starts_with('#')
                    && (series.contains("_timestamp_seconds")
                        || series.contains("_wait_seconds")) =>
            {
                format!("{series} <varies>\n")
            }
            _ => format!("{line}\n"),
        })
        .collect();
    assert_snapshot("report.prom", &masked);
}
