//! The built `yolo-sched report` binary end to end, with Slurm's recorded
//! output replayed by stand-in `sinfo`/`squeue`/`sacct` scripts first on
//! PATH (tests/data/report/README.md lists the recorded jobs): every format,
//! the number of Slurm calls, `--output`, and bad input.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::common::{run, yolo};
use serde_json::Value;

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/report")
        .join(name)
}

/// A directory of stand-in Slurm clients that print recorded output.
struct Replay {
    dir: tempfile::TempDir,
}

impl Replay {
    fn new(sinfo: &str) -> Replay {
        let dir = tempfile::tempdir().unwrap();
        let r = Replay { dir };
        r.script("sinfo", &format!("cat '{}'", data(sinfo).display()));
        r.script(
            "squeue",
            &format!("cat '{}'", data("squeue-22.05-compact.txt").display()),
        );
        r.script(
            "sacct",
            &format!(
                "cat '{}' >&2; exit 1",
                data("sacct-22.05-no-accounting.stderr").display()
            ),
        );
        r
    }

    fn script(&self, name: &str, body: &str) {
        use std::os::unix::fs::PermissionsExt;
        let path = self.dir.path().join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn trace(&self) -> PathBuf {
        self.dir.path().join("trace")
    }

    /// `yolo-sched report ARGS` with the stand-ins first on PATH.
    fn report(&self, args: &[&str]) -> Command {
        let path = format!(
            "{}:{}",
            self.dir.path().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut cmd = yolo();
        cmd.arg("report")
            .args(args)
            .env("PATH", path)
            .env("YOLO_SCHED_SLURM_TRACE", self.trace())
            .env("YOLO_SCHED_RUNS_DIR", self.dir.path().join("no-runs"));
        cmd
    }

    /// The Slurm commands run, sorted (they run side by side).
    fn calls(&self) -> Vec<String> {
        let mut calls: Vec<String> = std::fs::read_to_string(self.trace())
            .unwrap_or_default()
            .lines()
            .map(|l| l.split_whitespace().next().unwrap_or("").to_string())
            .collect();
        calls.sort();
        calls
    }
}

#[track_caller]
fn stdout(cmd: &mut Command) -> String {
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(0));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn json_has_the_recorded_figures_from_one_call_each() {
    let r = Replay::new("sinfo-22.05-two-nodes.json");
    let v: Value = serde_json::from_str(&stdout(&mut r.report(&["--format", "json"]))).unwrap();
    assert_eq!(r.calls(), vec!["sacct", "sinfo", "squeue"]);
    assert_eq!(v["schema_version"], 1);
    let q = &v["queue"];
    assert_eq!(q["running_jobs"], 8);
    assert_eq!(q["pending_jobs"], 15);
    assert_eq!(q["never_runnable_jobs"], 1);
    assert_eq!(q["never_runnable"][0]["job_id"], "16");
    assert_eq!(q["oldest_pending"]["job_id"], "13");
    let resources = q["pending_reasons"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["reason"] == "Resources")
        .unwrap();
    assert_eq!(resources["description"], "waiting for free resources");
    assert_eq!(resources["jobs"], 1);
    let inv = &v["inventory"];
    assert_eq!(inv["nodes"].as_array().unwrap().len(), 2);
    let t = inv["totals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["type"] == "gpu:1g.5gb")
        .unwrap();
    assert_eq!(
        (t["total"].as_u64(), t["allocated"].as_u64()),
        (Some(8), Some(3))
    );
    let u = &v["usage"];
    assert_eq!(u["accounting"]["status"], "disabled");
    let row = u["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["user"] == "researcher" && r["type"] == "gpu:2g.10gb")
        .unwrap();
    assert_eq!(row["slices_held"], 2);
    assert_eq!(row["account"], "yrep");
    assert!(row["slice_hours"].is_null());
    assert_eq!(v["runs"]["runs"], 0);
    assert!(v["right_sizing"]["note"]
        .as_str()
        .unwrap()
        .starts_with("no data"));

    // --json is the same as --format json (waits grow with the clock; counts do not).
    let again: Value = serde_json::from_str(&stdout(&mut r.report(&["--json"]))).unwrap();
    assert_eq!(again["queue"]["by_partition_type"], q["by_partition_type"]);
    assert_eq!(again["queue"]["pending_reasons"], q["pending_reasons"]);
}

/// Where accounting answers, a default `report` (every section, the layout
/// advice among them) still makes three Slurm calls: one `sinfo` (the nodes,
/// for the inventory and the advisor), one `squeue`, and one `sacct` whose
/// rows give both the usage section's slice-hours and the advisor's week of
/// jobs.
#[test]
fn a_default_report_where_accounting_answers_makes_three_slurm_calls() {
    let r = Replay::new("sinfo-22.05-two-nodes.json");
    // Accounting answers: no allocation in the window.
    r.script("sacct", "exit 0");
    // What the advisor asked before: the nodes again, and the controller's settings.
    r.script(
        "scontrol",
        &format!(
            "cat '{}'",
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/data/scontrol-shape-22.05.txt")
                .display()
        ),
    );
    let v: Value = serde_json::from_str(&stdout(&mut r.report(&["--format", "json"]))).unwrap();
    assert_eq!(v["usage"]["accounting"]["status"], "ok", "{}", v["usage"]);
    assert!(v["advice"].is_object(), "the advice section is there: {v}");
    assert_eq!(r.calls(), vec!["sacct", "sinfo", "squeue"]);
}

#[test]
fn only_what_the_sections_need_is_asked() {
    let r = Replay::new("sinfo-22.05-two-nodes.json");
    stdout(&mut r.report(&["--section", "inventory,queue", "--format", "csv"]));
    assert_eq!(
        r.calls(),
        vec!["sinfo", "squeue"],
        "no sacct without the usage section"
    );
}

/// Minimal RFC 4180 reader for checking the output.
fn parse_csv(text: &str) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    let mut row = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            ('"', true) => quoted = false,
            ('"', false) if field.is_empty() => quoted = true,
            (',', false) => row.push(std::mem::take(&mut field)),
            ('\r', false) => {}
            ('\n', false) => {
                row.push(std::mem::take(&mut field));
                rows.push(std::mem::take(&mut row));
            }
            (c, _) => field.push(c),
        }
    }
    rows
}

#[test]
fn csv_tables() {
    let r = Replay::new("sinfo-22.05-node2-drained.json");
    let text = stdout(&mut r.report(&["--format", "csv", "--section", "queue-never-runnable"]));
    let rows = parse_csv(&text);
    assert_eq!(rows[0][0], "job_id");
    assert_eq!(rows.len(), 2, "{rows:?}");
    let col = |name: &str| rows[0].iter().position(|h| h == name).unwrap();
    assert_eq!(rows[1][col("job_id")], "16");
    assert_eq!(rows[1][col("reason")], "DependencyNeverSatisfied");
    assert_eq!(
        rows[1][col("description")],
        "can never run: dependency failed"
    );
    assert_eq!(rows[1][col("dependency")], "afterok:14(failed)");

    let text = stdout(&mut r.report(&["--format", "csv", "--section", "inventory"]));
    assert!(text.starts_with("# inventory\r\n"), "{text}");
    let rows = parse_csv(&text);
    let drained = rows
        .iter()
        .find(|r| r.first().map(String::as_str) == Some("node2"))
        .unwrap();
    assert_eq!(drained[1], "draining");
    assert_eq!(drained[2], "yrep report test: bad fan");

    let text = stdout(&mut r.report(&["--format", "csv", "--section", "queue"]));
    let rows = parse_csv(&text);
    let pending_2g = rows
        .iter()
        .find(|r| r.len() == 6 && r[0] == "gpu" && r[1] == "gpu:2g.10gb")
        .unwrap();
    assert_eq!(pending_2g[2..], ["4", "2", "4", "2"]);
}

#[test]
fn table_is_plain_when_piped() {
    let r = Replay::new("sinfo-22.05-two-nodes.json");
    let text = stdout(&mut r.report(&[]));
    for heading in [
        "== inventory ==",
        "== queue ==",
        "== usage ==",
        "== runs ==",
        "== right-sizing ==",
    ] {
        assert!(text.contains(heading), "{heading} missing");
    }
    assert!(
        text.contains("| Resources                | waiting for free resources"),
        "{text}"
    );
    assert!(text.contains("can never run: dependency failed"));
    assert!(text.contains("8 running, 15 pending"));
    assert!(text.contains("Slurm accounting storage is disabled"));
    assert!(!text.contains('\x1b'), "no colour when piped");
    // --color always paints even when piped.
    let coloured = stdout(r.report(&["--section", "runs"]).args(["--color", "always"]));
    assert!(coloured.contains("\x1b[1m== runs ==\x1b[0m"));
}

#[track_caller]
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| {
            l.strip_prefix(series)
                .and_then(|rest| rest.strip_prefix(' '))
        })
        .unwrap_or_else(|| panic!("{series} not in\n{text}"))
        .parse()
        .unwrap()
}

#[test]
fn prometheus_samples() {
    let r = Replay::new("sinfo-22.05-node2-drained.json");
    let text = stdout(&mut r.report(&["--format", "prometheus"]));
    assert_eq!(
        sample(
            &text,
            r#"yolo_sched_queue_jobs{partition="gpu",type="gpu:2g.10gb",state="pending"}"#
        ),
        2.0
    );
    assert_eq!(
        sample(
            &text,
            r#"yolo_sched_queue_jobs{partition="gpu",type="gpu:1g.5gb",state="pending"}"#
        ),
        13.0
    );
    assert_eq!(
        sample(
            &text,
            r#"yolo_sched_queue_pending_reason_jobs{reason="Dependency"}"#
        ),
        11.0
    );
    assert_eq!(sample(&text, "yolo_sched_queue_never_runnable_jobs"), 1.0);
    assert_eq!(
        sample(
            &text,
            r#"yolo_sched_node_info{node="node2",state="draining",reason="yrep report test: bad fan"}"#
        ),
        1.0
    );
    assert_eq!(
        sample(
            &text,
            r#"yolo_sched_node_slices{node="node1",type="gpu:1g.5gb",state="allocated"}"#
        ),
        3.0
    );
    assert_eq!(
        sample(&text, r#"yolo_sched_slices_free_usable{type="gpu:1g.5gb"}"#),
        1.0
    );
    assert_eq!(
        sample(
            &text,
            r#"yolo_sched_user_slices_held{user="root",account="yrep",type="gpu:2g.10gb"}"#
        ),
        2.0
    );
    assert_eq!(sample(&text, "yolo_sched_accounting_available"), 0.0);
    assert!(
        !text.contains("yolo_sched_user_slice_hours"),
        "no slice-hours without accounting"
    );
    let types: Vec<&str> = text.lines().filter(|l| l.starts_with("# TYPE ")).collect();
    assert!(types.len() > 10);
    assert!(types.iter().all(|l| l.ends_with(" gauge")));
}

#[test]
fn output_file_is_replaced_and_left_alone_when_slurm_fails() {
    let r = Replay::new("sinfo-22.05-two-nodes.json");
    let target = r.dir.path().join("yolo.prom");
    std::fs::write(&target, "old\n").unwrap();
    let out = run(&mut r.report(&[
        "--format",
        "prometheus",
        "--output",
        target.to_str().unwrap(),
    ]));
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stdout.is_empty());
    let written = std::fs::read_to_string(&target).unwrap();
    assert!(written.starts_with("# HELP yolo_sched_"));

    // squeue fails the way it does when the controller drops the connection.
    r.script(
        "squeue",
        "echo 'slurm_load_jobs error: Zero Bytes were transmitted or received' >&2; exit 1",
    );
    let out = run(&mut r.report(&[
        "--format",
        "prometheus",
        "--output",
        target.to_str().unwrap(),
    ]));
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no report written"), "{err}");
    assert!(
        err.contains("cannot read the job queue from Slurm"),
        "{err}"
    );
    assert!(err.contains("Zero Bytes were transmitted"), "{err}");
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        written,
        "file unchanged"
    );
    let names: Vec<_> = std::fs::read_dir(r.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("tmp"))
        .collect();
    assert!(names.is_empty(), "temporary files left: {names:?}");
}

#[test]
fn sinfo_without_a_controller_is_a_failure_not_an_empty_cluster() {
    // Recorded: 22.05 exits 0 with an `errors` array and no nodes.
    let r = Replay::new("sinfo-22.05-no-controller.json");
    let out = run(&mut r.report(&["--format", "json"]));
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Unspecified error (errno -1)"), "{err}");
    assert!(err.contains("scontrol ping"), "{err}");
    // squeue and sacct ran alongside; nothing was retried.
    assert_eq!(r.calls(), vec!["sacct", "sinfo", "squeue"]);
}

#[test]
fn no_slurm_on_path_is_exit_1() {
    let out = run(yolo()
        .args(["report", "--format", "json"])
        .env("PATH", "/nonexistent"));
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("sinfo"), "{err}");
}

#[test]
fn bad_input_is_exit_2_before_any_slurm_call() {
    let r = Replay::new("sinfo-22.05-two-nodes.json");
    for (args, expect) in [
        (vec!["--since", "yesterday"], "expected a length"),
        (vec!["--since", "2099-01-01"], "not in the past"),
        (vec!["--section", "queues"], "not a section or table"),
        (vec!["--user", "a,b"], "one name"),
        (vec!["--partition", ""], "one name"),
        (
            vec!["--output", "/nonexistent/dir/r.prom"],
            "does not exist",
        ),
        (vec!["--format", "yaml"], "invalid value"),
    ] {
        let out = run(&mut r.report(&args));
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(expect), "{args:?}: {err}");
    }
    assert!(r.calls().is_empty(), "{:?}", r.calls());
}

/// A tool the Prometheus checks need: its path, or `None` to skip. When the
/// suite is run with the cluster expected (CI), a missing tool fails.
#[track_caller]
pub fn tool(names: &[&str], package: &str) -> Option<PathBuf> {
    if let Some(p) = names.iter().find_map(|n| which::which(n).ok()) {
        return Some(p);
    }
    if std::env::var(common::EXPECT_CLUSTER_ENV).is_ok_and(|v| v == "1") {
        panic!("{names:?} not found: install the Debian package `{package}` (slurm/deps.sh)");
    }
    eprintln!("skipping: {names:?} not found (Debian package `{package}`)");
    None
}

/// Kills the exporter however the test ends.
pub struct Exporter(pub std::process::Child);

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn http_get(port: u16, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.0 200")
        .then(|| body.to_string())
        .or_else(|| head.starts_with("HTTP/1.1 200").then(|| body.to_string()))
}

#[test]
fn prometheus_output_passes_promtool_and_a_real_node_exporter_scrape() {
    let (Some(promtool), Some(exporter)) = (
        tool(&["promtool"], "prometheus"),
        tool(
            &["prometheus-node-exporter", "node_exporter"],
            "prometheus-node-exporter",
        ),
    ) else {
        return;
    };
    // node2's drain reason with every character the format must escape.
    let hostile = "fan \"3\" \\ broken\nnext line";
    let mut sinfo: Value = serde_json::from_str(
        &std::fs::read_to_string(data("sinfo-22.05-node2-drained.json")).unwrap(),
    )
    .unwrap();
    sinfo["nodes"][1]["reason"] = Value::String(hostile.into());
    let r = Replay::new("sinfo-22.05-two-nodes.json");
    let sinfo_path = r.dir.path().join("sinfo-hostile.json");
    std::fs::write(&sinfo_path, sinfo.to_string()).unwrap();
    r.script("sinfo", &format!("cat '{}'", sinfo_path.display()));

    let textdir = r.dir.path().join("textfile");
    std::fs::create_dir(&textdir).unwrap();
    let prom = textdir.join("yolo_sched.prom");
    let out = run(&mut r.report(&["--format", "prometheus", "--output", prom.to_str().unwrap()]));
    assert_eq!(out.status.code(), Some(0));
    let text = std::fs::read_to_string(&prom).unwrap();
    assert!(
        text.contains(r#"reason="fan \"3\" \\ broken\nnext line""#),
        "{text}"
    );

    let check = run(Command::new(&promtool)
        .args(["check", "metrics"])
        .stdin(std::fs::File::open(&prom).unwrap()));
    assert!(check.status.success(), "promtool rejected the output");
    assert!(
        check.stdout.is_empty() && check.stderr.is_empty(),
        "promtool lint findings"
    );

    let scraped = scrape_textfiles(&exporter, &textdir, "", Duration::from_secs(20));
    // node_exporter re-exposes our families with labels sorted by name.
    assert!(
        scraped.contains("node_textfile_scrape_error 0"),
        "{scraped}"
    );
    for series in [
        r#"yolo_sched_queue_jobs{partition="gpu",state="pending",type="gpu:2g.10gb"} 2"#,
        r#"yolo_sched_queue_pending_reason_jobs{reason="Dependency"} 11"#,
        r#"yolo_sched_node_info{node="node2",reason="fan \"3\" \\ broken\nnext line",state="draining"} 1"#,
        r#"yolo_sched_user_slices_held{account="yrep",type="gpu:2g.10gb",user="researcher"} 2"#,
        "# TYPE yolo_sched_node_slices gauge",
    ] {
        assert!(scraped.contains(series), "{series} not scraped:\n{scraped}");
    }
}

/// Start a real node_exporter on a free loopback port with only the textfile
/// collector over `textdir`, and return its first `/metrics` body that holds
/// `until` (within `limit`). The exporter is stopped on return.
pub fn scrape_textfiles(exporter: &Path, textdir: &Path, until: &str, limit: Duration) -> String {
    // A free loopback port: bind, note it, release it for the exporter.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let _exporter = Exporter(
        Command::new(exporter)
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--collector.disable-defaults")
            .arg("--collector.textfile")
            .arg(format!(
                "--collector.textfile.directory={}",
                textdir.display()
            ))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let start = std::time::Instant::now();
    loop {
        if let Some(body) = http_get(port, "/metrics") {
            if body.contains(until) {
                return body;
            }
        }
        assert!(
            start.elapsed() < crate::common::patience(limit),
            "node_exporter did not serve {until:?} on port {port}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
