//! Whole outputs that should change only on purpose, compared with files under
//! `tests/snapshots/` (`common::assert_snapshot`; `UPDATE_SNAPSHOTS=1 cargo
//! test --test integration snapshots` rewrites them). Each input is fixed here,
//! and what varies from run to run (times, waits) is masked before comparing.

use std::path::Path;

use crate::common::{assert_snapshot, run, yolo, Test};
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

/// Stand-in Slurm clients answering with the recorded queue and node listing
/// (`tests/data/report`), accounting off, no runs, times in UTC.
fn recorded_report() -> Test {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/report");
    let cat = |file: &str| format!("cat '{}'", data.join(file).display());
    let t = Test::new();
    t.standin("sinfo", &cat("sinfo-22.05-node2-drained.json"))
        .standin("squeue", &cat("squeue-22.05-compact.txt"))
        .standin(
            "sacct",
            &format!("{} >&2; exit 1", cat("sacct-22.05-no-accounting.stderr")),
        )
        .env("TZ", "UTC")
        .env("YOLO_SCHED_RUNS_DIR", t.path().join("no-runs"));
    t
}

/// `report --format prometheus` over the recorded queue and node listing
/// (`tests/data/report`), with stand-in Slurm clients on PATH. The report's
/// own time and the waits (which grow with the clock) are masked.
#[test]
fn report_prometheus() {
    let t = recorded_report();
    let out = t.run(&["report", "--format", "prometheus"]);
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

// ---- the human tables: where a wording change shows ----

/// The text `report` over the recorded queue and node listing.
#[test]
fn report_tables() {
    let t = recorded_report();
    // The waits count from now: the recorded submissions are moved so that
    // now is 2026-12-03T23:30:00 for them, and the submission times shown
    // are masked.
    let recorded = crate::common::read(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/report/squeue-22.05-compact.txt"),
    );
    let reference = chrono::NaiveDate::from_ymd_opt(2026, 12, 3)
        .unwrap()
        .and_hms_opt(23, 30, 0)
        .unwrap();
    let shift = chrono::Utc::now().naive_utc() - reference;
    let moved: String = recorded
        .split('\u{1f}')
        .map(
            |field| match chrono::NaiveDateTime::parse_from_str(field, "%Y-%m-%dT%H:%M:%S") {
                Ok(at) => (at + shift).format("%Y-%m-%dT%H:%M:%S").to_string(),
                Err(_) => field.to_string(),
            },
        )
        .collect::<Vec<_>>()
        .join("\u{1f}");
    let queue = t.file("squeue.txt", &moved);
    t.standin("squeue", &format!("cat '{}'", queue.display()));
    let text = t.stdout(&["report"]);
    assert_snapshot("report.txt", &mask_times(&t.masked(&text)));
}

/// The recorded cluster's shape (`scontrol`), no queue and no accounting.
fn recorded_cluster() -> Test {
    let shape = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/scontrol-shape-22.05.txt");
    let t = Test::new();
    t.standin("scontrol", &format!("cat '{}'", shape.display()))
        .standin("squeue", "exit 0")
        .standin("sacct", "exit 0")
        .env("TZ", "UTC");
    t
}

/// `advise`'s tables over a fixed saved day of sacct output: twelve
/// one-hour `1g.5gb` jobs submitted at once, two `2g.10gb` of two hours.
#[test]
fn advise_tables() {
    let t = recorded_cluster();
    let mut lines = String::new();
    for i in 0..14u32 {
        let (gres, hours) = if i < 12 {
            ("1g.5gb", 1)
        } else {
            ("2g.10gb", 2)
        };
        let start = 8 * 60 + i;
        let end = start + 60 * hours;
        let tres = format!("billing=1,cpu=1,gres/gpu:{gres}=1,gres/gpu=1,mem=4G,node=1");
        lines.push_str(&format!(
            "{}|gpu|vision|alice|COMPLETED|2026-11-30T08:00:00|2026-11-30T{:02}:{:02}:00|\
             2026-11-30T{:02}:{:02}:00|{}|{}|{tres}|{tres}\n",
            100 + i,
            start / 60,
            start % 60,
            end / 60,
            end % 60,
            3600 * hours,
            120,
        ));
    }
    let file = t.file("day.txt", &lines);
    let text = t.stdout(&[
        "advise",
        "--since",
        "2026-11-30T00:00:00",
        "--until",
        "2026-12-01T00:00:00",
        "--partition",
        "gpu",
        "--sacct-file",
        file.to_str().unwrap(),
    ]);
    assert_snapshot("advise.txt", &t.masked(&text));
}

/// `submit --dry-run --explain`: the plan of a sweep on the recorded cluster.
#[test]
fn explain_text() {
    let t = recorded_cluster();
    t.file(
        "data.yaml",
        "path: .\ntrain: images/train\nval: images/val\nnames: [a]\n",
    );
    std::fs::create_dir_all(t.path().join("images/train")).unwrap();
    std::fs::create_dir_all(t.path().join("images/val")).unwrap();
    t.file(
        "spec.toml",
        "version = 1\n[run]\nname = \"explain\"\nworkdir = \"runs/e\"\n\
         [train]\nmodel = \"yolov8n.yaml\"\ndata = \"data.yaml\"\nepochs = 10\nimgsz = 640\n\
         [resources]\ngpu = \"auto\"\n[sweep]\nlr0 = [0.01, 0.001]\n",
    );
    let out =
        run(t
            .cmd()
            .current_dir(t.path())
            .args(["submit", "--dry-run", "--explain", "spec.toml"]));
    let text = format!(
        "exit: {:?}\n--- stdout\n{}--- stderr\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = text.replace(
        &format!("yolo-sched {}", env!("CARGO_PKG_VERSION")),
        "yolo-sched <version>",
    );
    assert_snapshot("explain.txt", &mask_run_stamps(&t.masked(&text)));
}

/// `models list` and `models show` over a `file://` registry holding two
/// versions of one model and one of another, published from runs with fixed
/// weights and metrics. The publication times are masked.
#[test]
fn models_tables() {
    let t = Test::new();
    // No Slurm accounts (as where slurmdbd does not answer): the versions
    // belong to no account, whatever cluster the machine runs.
    t.standin(
        "sacctmgr",
        "echo 'sacctmgr: error: Problem talking to the database: Connection refused' >&2; exit 1",
    );
    let registry = t.path().join("registry");
    std::fs::create_dir_all(&registry).unwrap();
    let site = crate::registry_s3::site(t.path(), &format!("file://{}", registry.display()));
    let publish = |name: &str, tag: &str, extra: &[&str]| {
        let w = t.path().join(name);
        // A torch-style zip with fixed content and a fixed date.
        for (file, content) in [("best.pt", tag), ("last.pt", "last")] {
            let ok = std::process::Command::new("python3")
                .args([
                    "-c",
                    "import zipfile,sys; z=zipfile.ZipFile(sys.argv[1],'w'); \
                     z.writestr(zipfile.ZipInfo('archive/data.pkl',(2026,1,1,0,0,0)),sys.argv[2]*1000); z.close()",
                ])
                .arg(t.file(&format!("{name}/train/weights/{file}"), ""))
                .arg(content)
                .status()
                .unwrap();
            assert!(ok.success());
        }
        t.file(
            &format!("{name}/train/args.yaml"),
            "model: yolov8n.pt\ndata: pcb.yaml\nepochs: 2\nimgsz: 320\n",
        );
        t.file(
            &format!("{name}/train/results.csv"),
            "epoch,metrics/precision(B),metrics/recall(B),metrics/mAP50(B),metrics/mAP50-95(B)\n\
             1,0.5,0.4,0.6,0.30\n2,0.6,0.5,0.7,0.42\n",
        );
        let manifest = serde_json::json!({
            "schema_version": 1, "run_id": format!("{name}-20261202T000000-0001"), "name": name,
            "user": "alice", "host": "h", "submitted_at": "2026-12-02T00:00:00Z",
            "workdir": w, "spec_file": w.join("s.toml"), "spec_hash": "feed", "spec_text": "",
            "variants": 1, "gpu_explanation": [], "estimate_gib": null, "stages": []
        });
        t.file(&format!("{name}/manifest.json"), &manifest.to_string());
        let out = run(t
            .cmd()
            .arg("--site")
            .arg(&site)
            .args(["models", "publish", w.to_str().unwrap()])
            .args(extra));
        assert_eq!(out.status.code(), Some(0), "{out:?}");
    };
    publish("first", "one", &["--name", "pcb-detector"]);
    publish(
        "second",
        "two",
        &["--name", "pcb-detector", "--note", "March images"],
    );
    publish("third", "three", &["--name", "crack-finder"]);
    let shown = |args: &[&str]| {
        let out = run(t.cmd().arg("--site").arg(&site).arg("models").args(args));
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        format!(
            "$ yolo-sched models {}\n{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout)
        )
    };
    let text = shown(&["list"]) + &shown(&["list", "--all"]) + &shown(&["show", "pcb-detector"]);
    assert_snapshot("models.txt", &mask_user(&mask_times(&t.masked(&text))));
}

/// Every `YYYY-MM-DD?HH:MM[:SS[.f]][Z|+HH:MM]` stamp written `<time>`.
fn mask_times(text: &str) -> String {
    let b = text.as_bytes();
    let digits =
        |at: usize, n: usize| at + n <= b.len() && b[at..at + n].iter().all(u8::is_ascii_digit);
    let mut out = String::new();
    let mut i = 0;
    while i < b.len() {
        let stamp = digits(i, 4)
            && b.get(i + 4) == Some(&b'-')
            && digits(i + 5, 2)
            && b.get(i + 7) == Some(&b'-')
            && digits(i + 8, 2)
            && matches!(b.get(i + 10), Some(b'T' | b' '))
            && digits(i + 11, 2)
            && b.get(i + 13) == Some(&b':')
            && digits(i + 14, 2);
        if stamp {
            let mut j = i + 16;
            if b.get(j) == Some(&b':') && digits(j + 1, 2) {
                j += 3;
            }
            // Fractions of a second, and the zone.
            if b.get(j) == Some(&b'.') && digits(j + 1, 1) {
                j += 1;
                while digits(j, 1) {
                    j += 1;
                }
            }
            if b.get(j) == Some(&b'Z') {
                j += 1;
            } else if matches!(b.get(j), Some(b'+' | b'-'))
                && digits(j + 1, 2)
                && b.get(j + 3) == Some(&b':')
                && digits(j + 4, 2)
            {
                j += 6;
            }
            out.push_str("<time>");
            i = j;
        } else {
            let c = text[i..].chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// The user running the tests (the publisher, the owner) written `<user>`.
fn mask_user(text: &str) -> String {
    let uid = nix::unistd::geteuid();
    let name = nix::unistd::User::from_uid(uid)
        .ok()
        .flatten()
        .map_or_else(|| uid.to_string(), |u| u.name);
    let mut out = text.to_string();
    for end in [" ", ",", "\n", ")"] {
        out = out.replace(&format!(" {name}{end}"), &format!(" <user>{end}"));
    }
    out
}

/// A run id's submission stamp (`-20261203T235512-3cff`) written `-<stamp>`.
fn mask_run_stamps(text: &str) -> String {
    let b = text.as_bytes();
    let is =
        |at: usize, n: usize, f: fn(&u8) -> bool| at + n <= b.len() && b[at..at + n].iter().all(f);
    let mut out = String::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'-'
            && is(i + 1, 8, u8::is_ascii_digit)
            && b.get(i + 9) == Some(&b'T')
            && is(i + 10, 6, u8::is_ascii_digit)
            && b.get(i + 16) == Some(&b'-')
            && is(i + 17, 4, u8::is_ascii_hexdigit)
        {
            out.push_str("-<stamp>");
            i += 21;
        } else {
            let c = text[i..].chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}
