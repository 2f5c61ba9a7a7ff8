//! What a command echoes of its input: control characters escaped, every
//! echo cut to a bounded excerpt, and nothing the user named silently
//! ignored (template directories, `--demand` without `auto`), run against the
//! built binary with stand-in Slurm clients. Spreadsheet formulas in CSV
//! cells are neutralised.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use crate::common;

/// The longest stderr a refused echo may make (the 100 kB inputs included).
const ECHO_LIMIT: usize = 2048;

/// A scratch directory with stand-in `scontrol` (the recorded cluster),
/// `squeue`, `sacct` and `sinfo` (nothing known), a dataset and a spec.
struct Scratch {
    t: common::Test,
}

impl Scratch {
    fn new() -> Scratch {
        let t = common::Test::new();
        let shape =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/scontrol-shape-22.05.txt");
        t.standin("scontrol", &format!("cat '{}'", shape.display()))
            .standin("squeue", "exit 0")
            .standin("sacct", "exit 0");
        std::fs::create_dir_all(t.path().join("images/train")).unwrap();
        std::fs::create_dir_all(t.path().join("images/val")).unwrap();
        t.file(
            "data.yaml",
            "path: .\ntrain: images/train\nval: images/val\nnames: [a]\n",
        );
        t.file(
            "spec.toml",
            "version = 1\n[run]\nname = \"echo\"\nworkdir = \"runs/e\"\n[train]\nmodel = \"yolov8n.yaml\"\ndata = \"data.yaml\"\n",
        );
        Scratch { t }
    }

    fn path(&self) -> &Path {
        self.t.path()
    }

    fn cmd(&self) -> Command {
        let mut c = self.t.cmd();
        c.current_dir(self.path());
        c
    }

    #[track_caller]
    fn run(&self, cmd: &mut Command) -> Output {
        common::run_bounded(cmd, Duration::from_secs(60))
            .unwrap_or_else(|| panic!("{cmd:?} did not end within 60 s"))
    }
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// No raw control character (ESC, CR, BEL, a newline inside a line) reaches
/// the terminal from an echo, and the echo is short.
#[track_caller]
fn assert_tame(what: &str, o: &Output) {
    let e = stderr(o);
    assert!(e.len() <= ECHO_LIMIT, "{what}: {} bytes of stderr", e.len());
    for bad in ['\u{1b}', '\r', '\u{7}'] {
        assert!(!e.contains(bad), "{what}: raw {bad:?} in {e:?}");
    }
    assert!(!e.contains("\nok:"), "{what}: a forged line in {e:?}");
    assert!(!e.contains("panicked"), "{what}: {e}");
}

// ---- item 8: template directories ----

#[test]
fn a_template_directory_that_overrides_nothing_is_refused_naming_its_source() {
    let s = Scratch::new();
    let submit = |dir: &str, by_env: bool| {
        let mut c = s.cmd();
        c.args(["submit", "--dry-run", "spec.toml", "--workdir"])
            .arg(s.path().join(format!("w-{}", dir.len())));
        if by_env {
            c.env("YOLO_SCHED_TEMPLATES", dir);
        } else {
            c.args(["--templates", dir]);
        }
        s.run(&mut c)
    };
    // The plain dry run works: the refusals below are the directory's.
    let ok = s.run(s.cmd().args(["submit", "--dry-run", "spec.toml"]));
    assert_eq!(ok.status.code(), Some(0), "{}", stderr(&ok));

    std::fs::create_dir_all(s.path().join("misnamed")).unwrap();
    std::fs::write(s.path().join("misnamed/train.sh"), "echo mine\n").unwrap();
    std::fs::create_dir_all(s.path().join("fifo")).unwrap();
    nix::unistd::mkfifo(
        &s.path().join("fifo/train.sh.j2"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    std::fs::write(s.path().join("a-file"), "x").unwrap();
    // Not `/nonexistent`: it is the home of `nobody`, and a process run as
    // nobody may have made it (a `.cache` in it).
    for (dir, says) in [
        ("no-such-dir", "does not exist"),
        ("a-file", "is not a directory"),
        ("misnamed", "overrides no template"),
        ("fifo", "not a regular file"),
    ] {
        for (by_env, source) in [
            (true, "(from YOLO_SCHED_TEMPLATES)"),
            (false, "(from --templates)"),
        ] {
            let out = submit(dir, by_env);
            let e = stderr(&out);
            assert_eq!(out.status.code(), Some(2), "{dir} {source}: {e}");
            assert!(e.contains(says) && e.contains(source), "{dir}: {e}");
            assert!(e.contains("hint: "), "{dir}: {e}");
        }
    }
    // The site file has no template setting: naming one is refused, not ignored.
    std::fs::write(
        s.path().join("site.toml"),
        "[paths]\ntemplates = \"/nonexistent\"\n",
    )
    .unwrap();
    let out = s.run(
        s.cmd()
            .args(["--site", "site.toml", "submit", "--dry-run", "spec.toml"]),
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("unknown field `templates`"));

    // Unreadable to the user who runs it (root reads everything: run as nobody).
    if common::as_root_and_nobody("a templates directory unreadable to its user") {
        let locked = s.path().join("locked");
        std::fs::create_dir_all(&locked).unwrap();
        std::fs::write(locked.join("train.sh.j2"), "echo mine\n").unwrap();
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o300)).unwrap();
        std::fs::set_permissions(s.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut c = Command::new("runuser");
        c.args(["-u", "nobody", "--"])
            .arg(common::bin_for_everyone())
            .args(["submit", "--dry-run", "spec.toml"])
            .current_dir(s.path())
            .env("YOLO_SCHED_TEMPLATES", &locked);
        let e = stderr(&s.run(&mut c));
        assert!(
            e.contains("(from YOLO_SCHED_TEMPLATES) cannot be read"),
            "{e}"
        );
    }
}

// ---- items 9 and 10: run ids and paths ----

#[test]
fn run_ids_with_control_characters_or_100_kb_are_echoed_escaped_and_cut() {
    let s = Scratch::new();
    let forged = "x\rok: run completed\u{1b}[2K\u{7}";
    let huge = "r".repeat(100_000);
    for args in [
        vec!["status"],
        vec!["cancel"],
        vec!["watch"],
        vec!["compare"],
        vec!["logs"],
        vec!["resume"],
        vec!["backup", "status"],
    ] {
        for id in [forged, huge.as_str()] {
            let out = s.run(s.cmd().args(&args).arg(id));
            let what = format!("{args:?} {}", &id[..id.len().min(12)]);
            assert_eq!(out.status.code(), Some(2), "{what}: {}", stderr(&out));
            assert_tame(&what, &out);
        }
        let out = s.run(s.cmd().args(&args).arg(forged));
        assert!(
            stderr(&out).contains("x\\rok: run completed\\u{1b}[2K"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn path_arguments_with_control_characters_or_10_kb_are_echoed_escaped_and_cut() {
    let s = Scratch::new();
    let forged = "/tmp/none\u{1b}]0;owned\u{7}\nok: restored";
    let long = format!("/tmp/{}/{}", "a".repeat(5000), "b".repeat(5000));
    for args in [
        vec!["checkpoint"],
        vec!["backup", "restore"],
        vec!["backup", "sync", "--once"],
    ] {
        for p in [forged, long.as_str()] {
            let out = s.run(s.cmd().args(&args).arg(p));
            let what = format!("{args:?} {}", &p[..12]);
            assert_eq!(out.status.code(), Some(2), "{what}: {}", stderr(&out));
            assert_tame(&what, &out);
        }
        let out = s.run(s.cmd().args(&args).arg(forged));
        assert!(
            stderr(&out).contains("\\u{1b}]0;owned\\u{7}\\nok: restored"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn a_layout_of_10000_profiles_or_with_escapes_is_echoed_cut() {
    let s = Scratch::new();
    let many = vec!["1g.5gb"; 10_000].join(",");
    let name = "x".repeat(100_000);
    for layout in [
        many.as_str(),
        name.as_str(),
        "bal\u{1b}[31m\nok: applied",
        "1g.5gb\u{1b}[2K*2",
    ] {
        let out = s.run(
            s.cmd()
                .args(["node-setup", "--dry-run", "--layout", layout]),
        );
        let what = format!("--layout {}", &layout[..layout.len().min(12)]);
        assert_eq!(out.status.code(), Some(2), "{what}: {}", stderr(&out));
        assert_tame(&what, &out);
    }
}

// ---- item 15: spreadsheet formulas in CSV ----

/// The recorded relabelled run (tests/data/compare) with formulas as its user,
/// name and a swept value, indexed in `s`'s state directory.
fn formula_run(s: &Scratch) -> PathBuf {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/compare/relabelled");
    let workdir = s.path().join("runs/formula");
    common::copy_dir(&data, &workdir);
    let mut m: serde_json::Value =
        serde_json::from_str(&common::read(&workdir.join("manifest.json"))).unwrap();
    m["user"] = "=HYPERLINK(\"http://evil.example/x\",\"click\")".into();
    m["name"] = "@SUM(1+1)".into();
    std::fs::write(workdir.join("manifest.json"), m.to_string()).unwrap();
    let index = s.path().join("index");
    std::fs::create_dir_all(&index).unwrap();
    let entry = serde_json::json!({
        "run_id": m["run_id"], "name": m["name"], "workdir": workdir,
        "submitted_at": m["submitted_at"],
    });
    std::fs::write(index.join("formula.json"), entry.to_string()).unwrap();
    let sinfo = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/sinfo-22.05-one-node.json");
    let p = s.path().join("bin/sinfo");
    std::fs::write(&p, format!("#!/bin/sh\ncat '{}'\n", sinfo.display())).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    index
}

/// Every cell of an RFC 4180 text (quoted fields may hold commas).
fn cells(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cell = String::new();
    let mut quoted = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                cell.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',' | '\n', false) => out.push(std::mem::take(&mut cell)),
            ('\r', false) => {}
            (c, _) => cell.push(c),
        }
    }
    out
}

#[test]
fn csv_cells_that_spreadsheets_would_run_as_formulas_are_neutralised() {
    let s = Scratch::new();
    let index = formula_run(&s);
    let out = s.run(
        s.cmd()
            .env("YOLO_SCHED_RUNS_DIR", &index)
            .args(["compare", "--format", "csv"]),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    let all = cells(&text);
    assert!(
        all.iter()
            .any(|c| c == "'=HYPERLINK(\"http://evil.example/x\",\"click\")"),
        "{text}"
    );
    assert!(all.iter().any(|c| c == "'@SUM(1+1)"), "{text}");
    for c in &all {
        assert!(
            !c.starts_with(['=', '+', '@', '\t', '\r']),
            "a live formula {c:?} in {text}"
        );
        if c.starts_with('-') && c != "-" {
            assert!(c.parse::<f64>().is_ok(), "{c:?} in {text}");
        }
    }
}

// ---- item 13: --demand is never silently ignored ----

#[test]
fn a_demand_file_without_layout_auto_is_refused() {
    let s = Scratch::new();
    std::fs::write(
        s.path().join("demand.csv"),
        "gres,time_limit_s,jobs\ngpu:1g.5gb:1,3600,40\n",
    )
    .unwrap();
    for args in [
        vec![
            "--dry-run",
            "--layout",
            "balanced",
            "--demand",
            "demand.csv",
        ],
        vec!["--check", "--layout", "1g.5gb*7", "--demand", "demand.csv"],
        vec!["--demand", "demand.csv"],
    ] {
        let out = s.run(s.cmd().arg("node-setup").args(&args));
        let e = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {e}");
        assert!(
            e.contains("--demand is only read") && e.contains("hint: "),
            "{args:?}: {e}"
        );
    }
}

// ---- a FIFO planted at a stage's log ----

/// A FIFO where a stage's log should be (`rm logs/train.out && mkfifo
/// logs/train.out` in a run directory) is no log: `status`, `compare` and
/// `models publish` answer without it instead of waiting for a writer for
/// ever (they did: `status` never ended).
#[test]
fn a_fifo_at_a_stage_log_hangs_no_reader() {
    let s = Scratch::new();
    let index = formula_run(&s);
    let workdir = s.path().join("runs/formula");
    let log = workdir.join("logs/train.out");
    std::fs::remove_file(&log).unwrap();
    nix::unistd::mkfifo(&log, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    let run_id =
        serde_json::from_str::<serde_json::Value>(&common::read(&workdir.join("manifest.json")))
            .unwrap()["run_id"]
            .as_str()
            .unwrap()
            .to_string();
    let cases: [(&str, Vec<&str>); 3] = [
        ("status", vec!["status", "--json", &run_id]),
        ("compare", vec!["compare", "--format", "csv"]),
        (
            "models publish",
            vec![
                "models",
                "publish",
                &run_id,
                "--name",
                "fifo",
                "--public",
                "--dry-run",
            ],
        ),
    ];
    for (what, args) in cases {
        // `Scratch::run` panics when a command does not end within its limit.
        let out = s.run(s.cmd().env("YOLO_SCHED_RUNS_DIR", &index).args(&args));
        assert_ne!(
            out.status.code(),
            None,
            "{what}: killed by a signal: {}",
            stderr(&out)
        );
        assert_tame(what, &out);
    }
}

// ---- issue 32, item 11: GPU values, accounts and pull targets of 10 kB ----

#[test]
fn gpu_values_of_10_kb_are_echoed_cut() {
    let s = Scratch::new();
    let digits = "9".repeat(10_000);
    let long = "h".repeat(10_000);
    for gpu in [
        format!("h100:{digits}"),
        format!("{long}:4"),
        format!("1g.{digits}gb"),
        format!("gpu:{long}"),
        format!("1g.5gb:{digits}"),
    ] {
        std::fs::write(
            s.path().join("gpu.toml"),
            format!(
                "version = 1\n[run]\nname = \"echo\"\nworkdir = \"runs/e\"\n[train]\nmodel = \"yolov8n.yaml\"\ndata = \"data.yaml\"\n[resources]\ngpu = \"{gpu}\"\n"
            ),
        )
        .unwrap();
        let out = s.run(s.cmd().args(["validate", "--no-cluster", "gpu.toml"]));
        let what = format!("gpu = {}…", &gpu[..12]);
        assert_eq!(out.status.code(), Some(2), "{what}: {}", stderr(&out));
        assert_tame(&what, &out);
        assert!(
            stderr(&out).contains("resources.gpu"),
            "{what}: {}",
            stderr(&out)
        );
    }
}

/// A published model in a `file://` registry of `s`'s, and the site file naming it.
#[track_caller]
fn registry_with_a_model(s: &Scratch) -> PathBuf {
    let registry = s.path().join("registry");
    std::fs::create_dir_all(&registry).unwrap();
    let site = crate::registry_s3::site(s.path(), &format!("file://{}", registry.display()));
    let run = crate::registry_s3::finished_run(s.path(), "pcb", 1000, "echo");
    let out = s.run(
        s.cmd()
            .arg("--site")
            .arg(&site)
            .args(["models", "import", "--name", "m"])
            .arg(run.join("train/weights/best.pt")),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    site
}

#[test]
fn pull_targets_and_accounts_of_10_kb_are_refused_and_echoed_cut() {
    let s = Scratch::new();
    let site = registry_with_a_model(&s);
    let to = format!("{}/{}", s.path().display(), "d".repeat(10_000));
    let out = s.run(
        s.cmd()
            .arg("--site")
            .arg(&site)
            .args(["models", "pull", "m@1", "--to", &to]),
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_tame("--to of 10 kB", &out);
    // An account that is no Slurm account name is refused, whoever asks
    // (root may publish under any account, not under any string).
    let weights = s.path().join("pcb/train/weights/best.pt");
    for account in [
        "a".repeat(10_000),
        "vision\u{1b}[31m".into(),
        "vi/sion".into(),
    ] {
        let out = s.run(
            s.cmd()
                .arg("--site")
                .arg(&site)
                .args(["models", "import", "--name", "m2", "--account", &account])
                .arg(&weights),
        );
        let what = format!("--account {}", &account[..account.len().min(10)]);
        assert_eq!(out.status.code(), Some(2), "{what}: {}", stderr(&out));
        assert_tame(&what, &out);
        assert!(
            stderr(&out).contains("Slurm account"),
            "{what}: {}",
            stderr(&out)
        );
    }
}
