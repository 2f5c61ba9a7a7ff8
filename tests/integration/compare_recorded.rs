//! `compare` and `report --format html` on runs the REAL trainer recorded
//! (`tests/data/compare/`: a two-variant sweep on the demo dataset and a run
//! on a relabelled copy, from `compare_live` with Ultralytics 8.4 on CPU;
//! weights left out). Slurm has forgotten the jobs (stand-in `squeue` and
//! `sacct` that know nothing; `sinfo` answers with a recorded document), so
//! every state comes from the jobs' own records, as after MinJobAge.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::chromium;
use crate::common::*;
use serde_json::Value;

const HOSTILE: &str = "evil<script>alert(1)</script>\"'&<img src=x>";

struct Recorded {
    dir: tempfile::TempDir,
}

impl Recorded {
    /// The recorded runs under a temp dir, an index entry for each, and
    /// stand-in Slurm clients. With `hostile`, a third run whose id, name
    /// and user are markup.
    fn new(hostile: bool) -> Recorded {
        let dir = tempfile::tempdir().unwrap();
        let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/compare");
        let index = dir.path().join("index");
        std::fs::create_dir_all(&index).unwrap();
        let mut runs = vec![
            ("sweep", "sweep".to_string()),
            ("relabelled", "relabelled".to_string()),
        ];
        if hostile {
            runs.push(("relabelled", "evil".to_string()));
        }
        for (from, to) in runs {
            let workdir = dir.path().join("runs").join(&to);
            copy_dir(&data.join(from), &workdir);
            let mut m: Value = serde_json::from_str(&read(&workdir.join("manifest.json"))).unwrap();
            if to == "evil" {
                m["run_id"] = HOSTILE.into();
                m["name"] = HOSTILE.into();
                m["user"] = HOSTILE.into();
                std::fs::write(workdir.join("manifest.json"), m.to_string()).unwrap();
            }
            let entry = serde_json::json!({
                "run_id": m["run_id"], "name": m["name"], "workdir": workdir,
                "submitted_at": m["submitted_at"],
            });
            std::fs::write(index.join(format!("{to}.json")), entry.to_string()).unwrap();
        }
        let bin = dir.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let sinfo =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/sinfo-22.05-one-node.json");
        for (name, body) in [
            ("squeue", "exit 0".to_string()),
            ("sacct", "exit 0".to_string()),
            ("sinfo", format!("cat '{}'", sinfo.display())),
        ] {
            let p = bin.join(name);
            std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        Recorded { dir }
    }

    fn index(&self) -> PathBuf {
        self.dir.path().join("index")
    }

    fn cmd(&self) -> Command {
        let mut c = yolo();
        let path = format!(
            "{}:{}",
            self.dir.path().join("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        c.env("PATH", path)
            .env("XDG_STATE_HOME", self.dir.path().join("state"))
            .env("YOLO_SCHED_RUNS_DIR", self.index());
        c
    }

    #[track_caller]
    fn compare(&self, args: &[&str]) -> Value {
        let out = run(self.cmd().arg("compare").arg("--json").args(args));
        assert_eq!(out.status.code(), Some(0));
        serde_json::from_slice(&out.stdout).unwrap()
    }

    fn recorded(&self, rel: &str) -> String {
        read(&self.dir.path().join("runs").join(rel))
    }
}

/// The `N ms inference` figure of a recorded log's `Speed:` line, read here
/// independently of the code under test.
fn speed_in(log: &str) -> f64 {
    let line = log
        .lines()
        .rev()
        .find(|l| l.starts_with("Speed:"))
        .expect("a Speed line");
    let before = line.split("ms inference").next().unwrap();
    before.rsplit(' ').next().unwrap().parse().unwrap()
}

fn seconds_between(start: &str, end: &str) -> f64 {
    let s: Value = serde_json::from_str(start).unwrap();
    let e: Value = serde_json::from_str(end).unwrap();
    let t =
        |v: &Value, k: &str| chrono::DateTime::parse_from_rfc3339(v[k].as_str().unwrap()).unwrap();
    (t(&e, "ended") - t(&s, "started")).num_milliseconds() as f64 / 1000.0
}

fn rows(board: &Value) -> Vec<&Value> {
    board["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rows"].as_array().unwrap())
        .collect()
}

#[test]
fn a_recorded_sweep_and_a_run_on_other_data_make_two_groups_with_the_recorded_figures() {
    let r = Recorded::new(false);
    let board = r.compare(&[]);
    let groups = board["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 2, "{board:#}");
    let names: Vec<&str> = groups
        .iter()
        .map(|g| g["dataset"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"pcb/data.yaml") && names.contains(&"pcb-relabelled/data.yaml"));
    // The fingerprints are the ones the prepare stages recorded.
    let summary: Value = serde_json::from_str(&r.recorded("sweep/prepare/summary.json")).unwrap();
    let sweep_group = groups
        .iter()
        .find(|g| g["dataset"] == "pcb/data.yaml")
        .unwrap();
    assert_eq!(sweep_group["fingerprint"], summary["fingerprint"]);
    assert_eq!(sweep_group["rows"].as_array().unwrap().len(), 2);

    for row in rows(&board) {
        let (suffix, dir, key) = match row["variant"].as_u64() {
            Some(t) => (format!("-{t}"), format!("train-{t}"), format!("train.{t}")),
            None => (String::new(), "train".to_string(), "train".to_string()),
        };
        let run = if row["name"] == "sweep" {
            "sweep"
        } else {
            "relabelled"
        };
        // Ultralytics' own `yolo val` of the exported ONNX model.
        let log = r.recorded(&format!("{run}/logs/export{suffix}.out"));
        assert_eq!(row["inference_ms"].as_f64(), Some(speed_in(&log)), "{row}");
        assert_eq!(row["inference_of"], "onnx");
        let wall = seconds_between(
            &r.recorded(&format!("{run}/state/{key}.start.json")),
            &r.recorded(&format!("{run}/state/{key}.end.json")),
        );
        assert_eq!(row["train_seconds"].as_f64(), Some(wall), "{row}");
        assert!((row["gpu_hours"].as_f64().unwrap() - wall / 3600.0 / 7.0).abs() < 1e-12);
        let args = r.recorded(&format!("{run}/{dir}/args.yaml"));
        assert!(args.contains(&format!("imgsz: {}", row["imgsz"].as_str().unwrap())));
        let epochs = r
            .recorded(&format!("{run}/{dir}/results.csv"))
            .lines()
            .count()
            - 1;
        assert_eq!(row["epochs_done"].as_u64(), Some(epochs as u64));
        assert_eq!(row["state"], "completed");
        // The slice Slurm gave the task, from its start record.
        let start: Value =
            serde_json::from_str(&r.recorded(&format!("{run}/state/{key}.start.json"))).unwrap();
        assert_eq!(row["slice_index"], start["gpus"]);
        if run == "sweep" {
            assert!(args.contains(&format!("lr0: {}", row["params"]["lr0"].as_str().unwrap())));
        }
    }

    // Filters: --data by directory name, --user, --since.
    let one = r.compare(&["--data", "pcb-relabelled"]);
    assert_eq!(rows(&one).len(), 1);
    let nobody = r.compare(&["--user", "nobody-at-all"]);
    assert!(nobody["groups"].as_array().unwrap().is_empty());
    let recent = r.compare(&["--since", "1h"]);
    assert!(rows(&recent).len() <= 3);
    let sorted = r.compare(&["--sort", "inference"]);
    let g = sorted["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["rows"].as_array().unwrap().len() == 2)
        .unwrap();
    let ms: Vec<f64> = g["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["inference_ms"].as_f64().unwrap())
        .collect();
    assert!(ms[0] <= ms[1], "fastest first: {ms:?}");
}

#[test]
fn bad_compare_input_is_refused_with_a_suggestion() {
    let r = Recorded::new(false);
    let out = run(r.cmd().args(["compare", "--data", "pcb-relabeled"]));
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("did you mean `pcb-relabelled`"), "{err}");
    let out = run(r.cmd().args(["compare", "--sort", "mAP"]));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("map50-95"));
    let out = run(r.cmd().args(["compare", "--since", "yesterday"]));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("expected a length back from now"));
    let out = run(r
        .cmd()
        .env_remove("YOLO_SCHED_RUNS_DIR")
        .args(["compare", "sweeep"]));
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn csv_and_table_carry_every_row() {
    let r = Recorded::new(true);
    let out = run(r.cmd().args(["compare", "--format", "csv"]));
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("rank,id,run_id,variant,"));
    assert!(text.ends_with("\r\n"));
    // The hostile name holds a quote: the field is quoted and the quote doubled.
    assert!(
        text.contains("\"evil<script>alert(1)</script>\"\"'&<img src=x>\""),
        "{text}"
    );
    assert_eq!(text.matches("\r\n").count(), 5, "{text}");
    let out = run(r.cmd().arg("compare"));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("sweep-") && table.contains("(lr0=0.01)"),
        "{table}"
    );
}

/// The HTML page of the recorded runs, with a hostile run among them.
#[track_caller]
fn page(r: &Recorded) -> (PathBuf, String) {
    let path = r.dir.path().join("report.html");
    let out = run(r
        .cmd()
        .args(["report", "--format", "html", "--since", "7d", "--output"])
        .arg(&path));
    assert_eq!(out.status.code(), Some(0));
    let text = read(&path);
    (path, text)
}

#[test]
fn the_html_page_escapes_hostile_names_and_holds_every_section() {
    let r = Recorded::new(true);
    let (_, text) = page(&r);
    assert!(
        !text.contains("<script") && !text.contains("<img"),
        "raw markup from a run"
    );
    assert!(
        text.contains("evil&lt;script&gt;alert(1)&lt;/script&gt;&quot;&#39;&amp;&lt;img src=x&gt;")
    );
    for id in [
        "slices",
        "queue-wait",
        "runs-by-state",
        "leaderboard",
        "curves",
    ] {
        assert!(text.contains(&format!("<section id=\"{id}\">")), "{id}");
    }
    // Four curves: the sweep's two variants, the relabelled run and its hostile copy.
    assert_eq!(text.matches("<div class=\"curve\">").count(), 4);
}

#[test]
#[ignore = "needs a headless Chromium (Debian package chromium; slurm/deps.sh installs it)"]
fn chromium_loads_the_page_with_no_console_error_no_request_and_draws_it() {
    let r = Recorded::new(true);
    let (path, _) = page(&r);
    let got = chromium::load(&path);
    assert!(
        got.console.is_empty(),
        "console messages: {:?}",
        got.console
    );
    assert!(
        got.requests.is_empty(),
        "the page asked for {:?}",
        got.requests
    );
    // The DOM after load: every section, the charts, the leaderboard rows,
    // and the hostile run as text, not as an element.
    for id in [
        "slices",
        "queue-wait",
        "runs-by-state",
        "leaderboard",
        "curves",
    ] {
        assert!(got.dom.contains(&format!("id=\"{id}\"")), "{id}");
    }
    assert!(got.dom.matches("<svg").count() >= 8, "charts in the DOM");
    assert!(got.dom.contains("sweep-20261201T144828-26f0/train-1"));
    assert!(!got.dom.contains("<script") && got.dom.contains("evil&lt;script&gt;"));
    assert_eq!(
        chromium::png_size(&got.png),
        (chromium::WIDTH, chromium::HEIGHT)
    );

    // Against a blank page of the same size: the report's screenshot has far
    // more in it (the PNG of an empty page compresses to almost nothing).
    let blank = r.dir.path().join("blank.html");
    std::fs::write(&blank, "<!DOCTYPE html><html><body></body></html>").unwrap();
    let empty = chromium::load(&blank);
    assert_eq!(
        chromium::png_size(&empty.png),
        (chromium::WIDTH, chromium::HEIGHT)
    );
    assert!(
        got.png.len() > 5 * empty.png.len(),
        "the report's screenshot ({} bytes) is not much more than a blank page's ({} bytes)",
        got.png.len(),
        empty.png.len()
    );
}

#[test]
#[ignore = "needs a headless Chromium (Debian package chromium; slurm/deps.sh installs it)"]
fn detectors_see_a_bad_page() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.html");
    std::fs::write(
        &bad,
        "<!DOCTYPE html><html><body><img src=\"http://127.0.0.1:9/x.png\">\
         <script>console.error('control-error'); missing();</script></body></html>",
    )
    .unwrap();
    let got = chromium::load(&bad);
    assert!(
        got.console.iter().any(|m| m.contains("control-error")),
        "{:?}",
        got.console
    );
    assert!(
        got.console
            .iter()
            .any(|m| m.contains("missing is not defined")),
        "{:?}",
        got.console
    );
    assert_eq!(got.requests, ["http://127.0.0.1:9/x.png"]);
}

#[test]
#[ignore = "needs a headless Chromium (Debian package chromium; slurm/deps.sh installs it)"]
fn printing_shows_the_numbers_behind_every_chart() {
    // The print style opens every `<details>`: the page prints as it would
    // with each one opened by hand, and clearly more than with them closed.
    let r = Recorded::new(false);
    let (path, text) = page(&r);
    let opened = r.dir.path().join("opened.html");
    std::fs::write(&opened, text.replace("<details>", "<details open>")).unwrap();
    let closed = r.dir.path().join("closed.html");
    let rule = "details::details-content { content-visibility: visible; display: block; }";
    assert!(text.contains(rule));
    std::fs::write(&closed, text.replace(rule, "")).unwrap();
    let (as_is, open, shut) = (
        chromium::print_pdf(&path).len() as f64,
        chromium::print_pdf(&opened).len() as f64,
        chromium::print_pdf(&closed).len() as f64,
    );
    assert!(
        (as_is - open).abs() / open < 0.02,
        "printed {as_is} bytes, opened by hand {open}"
    );
    assert!(
        as_is > shut * 1.2,
        "printed {as_is} bytes, with the tables closed {shut}"
    );
}

/// Replace a stand-in Slurm client of `r` with a shell script.
fn stand_in(r: &Recorded, name: &str, body: &str) {
    let p = r.dir.path().join("bin").join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn the_page_draws_usage_over_the_window_and_waits_from_slurms_output() {
    let r = Recorded::new(false);
    // squeue: a listing recorded on the 22.05 cluster (pending jobs from
    // 2026-11-30, so they have waited more than a day). sacct: two
    // allocations in the window, in sacct's --parsable2 form of the window
    // query (`slurm::sacct::WINDOW_FIELDS`), times made now.
    let listing =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/report/squeue-22.05-compact.txt");
    stand_in(&r, "squeue", &format!("cat '{}'", listing.display()));
    stand_in(
        &r,
        "sacct",
        "case \" $* \" in *\" -j \"*) exit 0 ;; esac\n\
         t() { date -d \"$1\" +%Y-%m-%dT%H:%M:%S; }\n\
         echo \"101|gpu|proj|alice|COMPLETED|$(t '-3 hours')|$(t '-3 hours')|$(t '-1 hours')|7200|600||billing=1,cpu=1,gres/gpu:1g.5gb=2,gres/gpu=2,node=1||\"\n\
         echo \"102|gpu|proj|bob|RUNNING|$(t '-30 minutes')|$(t '-30 minutes')|Unknown|1800|600||cpu=1,gres/gpu:2g.10gb=1,gres/gpu=1,node=1||\"",
    );
    let out = run(r.cmd().args(["report", "--json", "--since", "6h"]));
    assert_eq!(out.status.code(), Some(0));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let series = &doc["usage"]["series"];
    assert_eq!(series["buckets"], 48);
    let bucket = series["bucket_seconds"].as_f64().unwrap();
    let of = |kind: &str| -> f64 {
        let t = series["by_type"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["type"] == kind)
            .unwrap_or_else(|| panic!("no {kind} in {series}"));
        t["slices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .sum::<f64>()
            * bucket
            / 3600.0
    };
    // Two slices for two hours; one slice for half an hour (to now).
    assert!((of("gpu:1g.5gb") - 4.0).abs() < 0.3, "{}", of("gpu:1g.5gb"));
    assert!(
        (of("gpu:2g.10gb") - 0.5).abs() < 0.1,
        "{}",
        of("gpu:2g.10gb")
    );
    let waits = doc["queue"]["by_type"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["type"] == "gpu:1g.5gb")
        .unwrap();
    let buckets: Vec<u64> = waits["wait_buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert_eq!(
        buckets.iter().sum::<u64>(),
        waits["pending_jobs"].as_u64().unwrap()
    );
    assert!(
        buckets[5] > 0,
        "jobs pending since 2026-11-30 waited >= 24 h: {buckets:?}"
    );

    let path = r.dir.path().join("page.html");
    let out = run(r
        .cmd()
        .args(["report", "--format", "html", "--since", "6h", "-o"])
        .arg(&path));
    assert_eq!(out.status.code(), Some(0));
    let page = read(&path);
    assert!(
        page.contains("Average slices in use per 7m30s"),
        "48 buckets of 6 h"
    );
    assert!(page.contains("<title>gpu:1g.5gb</title></polyline>"));
    assert!(page.contains("aria-label=\"pending jobs by wait and type\""));
    // Prometheus gets the same wait distribution, cumulative.
    let out = run(r
        .cmd()
        .args(["report", "--format", "prometheus", "--section", "queue"]));
    let text = String::from_utf8_lossy(&out.stdout);
    let inf = format!(
        "yolo_sched_queue_pending_wait_jobs{{type=\"gpu:1g.5gb\",below_seconds=\"+Inf\"}} {}",
        waits["pending_jobs"]
    );
    assert!(text.contains(&inf), "{text}");
}
