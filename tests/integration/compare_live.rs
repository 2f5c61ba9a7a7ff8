//! `compare` and `report --format html` on REAL training runs on the live
//! cluster: a two-variant sweep and a run on a second dataset (a copy of the
//! first with one label changed: same path layout, different content), all
//! with the real Ultralytics trainer on CPU (`tests/trainer/yolo-cpu`).
//! The sweep's variants are ranked against each other; the run on the other
//! data is in a group of its own. The HTML page of the same runs loads in a
//! real headless Chromium (`crate::chromium`).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::*;
use serde_json::Value;

struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = shared_tempdir();
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/pcb/dataset");
        copy_dir(&src, &dir.path().join("pcb"));
        // The second dataset: the same files, one label with a box more.
        copy_dir(&src, &dir.path().join("pcb-relabelled"));
        let label = dir
            .path()
            .join("pcb-relabelled/labels/train/board_train_000.txt");
        let text = read(&label);
        let first = text.lines().next().expect("a label line").to_string();
        std::fs::write(&label, format!("{text}{first}\n")).unwrap();
        Fixture { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn spec(&self, name: &str, data: &str, extra: &str) -> PathBuf {
        let text = format!(
            "version = 1\n[run]\nname = \"{name}\"\npartition = \"gpu\"\nworkdir = \"{}\"\n\
             [train]\nmodel = \"yolov8n.yaml\"\ndata = \"{}\"\nepochs = 2\nimgsz = 64\nbatch = 8\n\
             args = {{ seed = 1, plots = false }}\n\
             [stages.prepare]\npartition = \"cpu\"\n[stages.export]\npartition = \"cpu\"\nformats = [\"onnx\"]\n{extra}",
            self.path().join("runs").join(name).display(),
            self.path().join(data).join("data.yaml").display()
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
    fn submit(&self, spec: &Path) -> String {
        let out = run(self.cmd().args(["submit", "--json"]).arg(spec));
        assert_eq!(out.status.code(), Some(0), "submit failed");
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["run_id"].as_str().unwrap().to_string()
    }

    #[track_caller]
    fn json(&self, args: &[&str]) -> Value {
        let out = run(self.cmd().args(args));
        assert_eq!(out.status.code(), Some(0), "{args:?} failed");
        serde_json::from_slice(&out.stdout).expect("JSON")
    }
}

#[track_caller]
fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
#[ignore = "needs the local Slurm cluster and the real trainer (slurm/cluster.sh up, slurm/trainer.sh install): cargo test -- --include-ignored"]
fn compare_ranks_a_real_sweep_and_keeps_other_data_apart_and_the_html_page_loads() {
    let _cluster = cluster_shared(module_path!());
    assert!(
        crate::common::trainer_venv().join("bin/yolo").exists(),
        "the real trainer is needed but {} has none; run slurm/trainer.sh install",
        crate::common::trainer_venv().display()
    );
    let f = Fixture::new();
    let sweep = f.submit(&f.spec("sweep", "pcb", "[sweep]\nlr0 = [0.01, 0.02]\n"));
    let other = f.submit(&f.spec("relabelled", "pcb-relabelled", ""));
    for id in [&sweep, &other] {
        let out = run(f.cmd().args(["watch", id]));
        assert_eq!(out.status.code(), Some(0), "run {id} completed");
    }
    if let Some(keep) = std::env::var_os("YOLO_SCHED_TEST_KEEP") {
        copy_dir(&f.path().join("runs"), Path::new(&keep));
    }

    let board = f.json(&["compare", "--json"]);
    assert_eq!(board["schema_version"], 1);
    let groups = board["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 2, "two datasets, two groups: {board:#}");
    let fps: Vec<&str> = groups
        .iter()
        .map(|g| g["fingerprint"].as_str().unwrap())
        .collect();
    assert_ne!(fps[0], fps[1], "a changed label changes the fingerprint");
    assert!(groups.iter().all(|g| g["verified"] == true));
    let sweep_group = groups
        .iter()
        .find(|g| g["rows"].as_array().unwrap().len() == 2)
        .expect("the sweep's group");
    let rows = sweep_group["rows"].as_array().unwrap();
    let ids: Vec<&str> = rows.iter().map(|r| r["id"].as_str().unwrap()).collect();
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        [format!("{sweep}/train-0"), format!("{sweep}/train-1")]
    );
    let lrs: Vec<&str> = rows
        .iter()
        .map(|r| r["params"]["lr0"].as_str().unwrap())
        .collect();
    assert!(lrs.contains(&"0.01") && lrs.contains(&"0.02"), "{lrs:?}");
    // Ranked by mAP50-95, best first.
    assert!(num(&rows[0]["best_map50_95"]) >= num(&rows[1]["best_map50_95"]));
    assert_eq!(rows[0]["rank"], 1);
    for r in rows
        .iter()
        .chain(groups.iter().flat_map(|g| g["rows"].as_array().unwrap()))
    {
        assert_eq!(r["epochs_done"], 2, "{r}");
        assert_eq!(r["imgsz"], "64");
        assert_eq!(r["model"], "yolov8n.yaml");
        assert_eq!(r["slice"], "gpu:1g.5gb:1");
        assert!(num(&r["train_seconds"]) > 0.0, "{r}");
        // A 1g.5gb slice is a seventh of a GPU.
        let (sh, gh) = (num(&r["slice_hours"]), num(&r["gpu_hours"]));
        assert!((gh * 7.0 - sh).abs() < 1e-9, "{r}");
        // Ultralytics' own `yolo val` of the exported ONNX model.
        assert_eq!(r["inference_of"], "onnx", "{r}");
        assert!(num(&r["inference_ms"]) > 0.0, "{r}");
        assert!(r["precision"].is_number() && r["recall"].is_number(), "{r}");
    }
    assert!(board["notes"][0]
        .as_str()
        .unwrap()
        .contains("2 different datasets"));

    // --data picks one group; a typo is refused with the name it meant.
    let only = f.json(&["compare", "--json", "--data", "pcb-relabelled"]);
    assert_eq!(only["groups"].as_array().unwrap().len(), 1);
    assert_eq!(only["groups"][0]["rows"][0]["run_id"], other.as_str());
    let typo = run(f.cmd().args(["compare", "--data", "pcb-relabeled"]));
    assert_eq!(typo.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&typo.stderr).contains("did you mean `pcb-relabelled`"),
        "{}",
        String::from_utf8_lossy(&typo.stderr)
    );
    // CSV: a header and one line per row.
    let csv = run(f
        .cmd()
        .args(["compare", "--format", "csv", "--sort", "inference"]));
    assert_eq!(csv.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&csv.stdout).lines().count(), 4);
    // The table names both groups.
    let table = run(f.cmd().args(["compare", &sweep, &other]));
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(
        text.contains("pcb/data.yaml") && text.contains("pcb-relabelled/data.yaml"),
        "{text}"
    );

    // The HTML report of the same runs, from the live cluster, in Chromium.
    let page = f.path().join("report.html");
    let out = run(f
        .cmd()
        .args(["report", "--format", "html", "--since", "2h", "--output"])
        .arg(&page));
    assert_eq!(out.status.code(), Some(0));
    let got = crate::chromium::load(&page);
    assert!(got.console.is_empty(), "console: {:?}", got.console);
    assert!(got.requests.is_empty(), "requests: {:?}", got.requests);
    for id in [
        format!("{sweep}/train-0"),
        format!("{sweep}/train-1"),
        other.clone(),
    ] {
        assert!(
            got.dom
                .contains(&format!("<div class=\"curve\"><h3>{id}</h3>")),
            "the curve of {id}"
        );
    }
    assert!(got.dom.contains("id=\"leaderboard\""));
    // The cluster's slice types are drawn (inventory now; usage over time with accounting).
    assert!(got.dom.contains("gpu:1g.5gb"));
    assert_eq!(
        crate::chromium::png_size(&got.png),
        (crate::chromium::WIDTH, crate::chromium::HEIGHT)
    );
}
