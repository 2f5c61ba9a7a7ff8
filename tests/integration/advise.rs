//! `yolo-sched advise`: bad input refused before Slurm is asked (no
//! cluster), and, live, a saved week of accounting simulated on the local
//! cluster's two node shapes (`small`: one A100 cut `1g.5gb*7`; `gpu`: nodes
//! of three A100s, one whole), whose figures follow from the queue rule.

use std::process::Command;

use crate::common::{self, *};
use serde_json::Value;

fn no_slurm(args: &[&str]) -> std::process::Output {
    let mut cmd = yolo();
    cmd.env("PATH", "/nonexistent").arg("advise").args(args);
    run(&mut cmd)
}

#[test]
fn bad_windows_flags_and_files_are_invalid_input_before_slurm_is_asked() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let fifo = fifo.to_str().unwrap();
    let missing = dir.path().join("missing.txt");
    let missing = missing.to_str().unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--since", "yesterdayish"], "--since"),
        (
            vec!["--since", "1h", "--until", "2h"],
            "the window is empty",
        ),
        (vec!["--gpu-model", "v100"], "not a model yolo-sched knows"),
        (vec!["--sacct-file", fifo], "not a regular file"),
        (vec!["--sacct-file", "/dev/zero"], "not a regular file"),
        (vec!["--sacct-file", missing], "--sacct-file"),
        (vec!["--partition", "a\x1b[31mb"], "--partition"),
    ];
    for (args, said) in cases {
        let out = no_slurm(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(said), "{args:?}: {err}");
        assert!(!err.contains('\x1b'), "{args:?} echoed a raw escape: {err}");
    }
}

/// 30 one-hour `1g.5gb` jobs submitted at once, 7 hours before `until`.
fn week(dir: &std::path::Path) -> (std::path::PathBuf, String, String) {
    let t0 = chrono::Local::now().naive_local() - chrono::Duration::hours(12);
    let f = |t: chrono::NaiveDateTime| t.format("%Y-%m-%dT%H:%M:%S").to_string();
    let mut text = String::new();
    for i in 0..30 {
        let start = t0 + chrono::Duration::minutes(i);
        let end = start + chrono::Duration::hours(1);
        let tres = "billing=1,cpu=1,gres/gpu:1g.5gb=1,gres/gpu=1,mem=4G,node=1";
        text.push_str(&format!(
            "{}|small,gpu|vision|alice|COMPLETED|{}|{}|{}|3600|90|{tres}|{tres}\n",
            100 + i,
            f(t0),
            f(start),
            f(end)
        ));
    }
    let path = dir.join("week.txt");
    std::fs::write(&path, text).unwrap();
    (
        path,
        f(t0 - chrono::Duration::hours(1)),
        f(t0 + chrono::Duration::hours(11)),
    )
}

/// `advise` over the saved week in `partition`, with `extra` arguments.
fn week_cmd(file: &std::path::Path, since: &str, until: &str, partition: &str) -> Command {
    let mut cmd = yolo();
    cmd.args([
        "advise",
        "--since",
        since,
        "--until",
        until,
        "--partition",
        partition,
    ])
    .arg("--sacct-file")
    .arg(file);
    cmd
}

#[track_caller]
fn advise(file: &std::path::Path, since: &str, until: &str, partition: &str) -> Value {
    let out = run(week_cmd(file, since, until, partition).arg("--json"));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

#[track_caller]
fn outcome(v: &Value, setup: &str) -> Value {
    v["advice"]["setups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == setup)
        .unwrap_or_else(|| panic!("no {setup}: {v}"))["outcome"]
        .clone()
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up)"]
fn a_saved_week_is_simulated_on_both_node_shapes() {
    let _cluster = common::cluster_shared(module_path!());
    let dir = tempfile::tempdir().unwrap();
    let (file, since, until) = week(dir.path());

    // One A100 cut into seven 1g.5gb: 30 jobs run 7 at a time, so 7 wait 0,
    // 7 wait 1 h, 7 wait 2 h, 7 wait 3 h and 2 wait 4 h: 50 h over 30 jobs.
    let v = advise(&file, &since, &until, "small");
    let nodes = v["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 1, "{v}");
    assert_eq!(nodes[0]["gpus"].as_array().unwrap().len(), 1);
    let now = outcome(&v, "current");
    assert_eq!(now["peak_concurrent"], 7);
    assert!(
        (now["mean_wait_s"].as_f64().unwrap() - 50.0 * 3600.0 / 30.0).abs() < 1.0,
        "{now}"
    );
    assert_eq!(now["p95_wait_s"], 4 * 3600);
    // Whole, the GPU runs one at a time: waits 0..29 h, mean 14.5 h.
    let whole = outcome(&v, "whole");
    assert_eq!(whole["peak_concurrent"], 1);
    assert!((whole["mean_wait_s"].as_f64().unwrap() - 14.5 * 3600.0).abs() < 1.0);
    // Already cut as well as it can be: nothing to change.
    assert_eq!(v["advice"]["changes"], false, "{v}");

    // The gpu partition's nodes: 2 × (4 × 1g.5gb + 2 × 2g.10gb + a100) now, 8
    // small slices, so fewer wait than on small1; cutting every GPU 1g.5gb*7
    // (3 GPUs a node) runs them all at once, and the advice says so.
    let v = advise(&file, &since, &until, "gpu");
    let now = outcome(&v, "current");
    let all = outcome(&v, "all-1g");
    assert!(now["peak_concurrent"].as_u64().unwrap() >= 8, "{now}");
    assert_eq!(all["mean_wait_s"].as_f64(), Some(0.0), "{all}");
    assert_eq!(v["advice"]["changes"], true, "{v}");
    let auto = outcome(&v, "auto");
    assert!(auto["mean_wait_s"].as_f64().unwrap() < now["mean_wait_s"].as_f64().unwrap());
    let steps = v["advice"]["steps"].as_array().unwrap();
    assert!(!steps.is_empty());
    // Cron: --check says whether a re-cut is advised, in its exit status.
    let check = |partition: &str| {
        run(week_cmd(&file, &since, &until, partition).arg("--check"))
            .status
            .code()
    };
    assert_eq!(check("gpu"), Some(1));
    assert_eq!(check("small"), Some(0));
    // The page: the set-ups as bars, the plan as a table, nothing fetched.
    let page = dir.path().join("advice.html");
    let out = run(week_cmd(&file, &since, &until, "gpu")
        .args(["--format", "html", "-o"])
        .arg(&page));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let html = std::fs::read_to_string(&page).unwrap();
    for want in [
        "<svg",
        "balanced",
        "The plan",
        "node-setup --apply --layout auto",
        "default-src 'none'",
    ] {
        assert!(html.contains(want), "{want} missing");
    }
    assert!(!html.contains("http://") && !html.contains("https://"));
    // The window as a trace for the replay, accepted by the replay's own parser.
    let trace = dir.path().join("trace.csv");
    let out = run(week_cmd(&file, &since, &until, "gpu")
        .arg("--trace-out")
        .arg(&trace));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let replay = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/replay");
    let parsed = run(Command::new("python3")
        .current_dir(&replay)
        .args([
            "-c",
            "import sys, tracefile; jobs = tracefile.load(sys.argv[1]); \
             print(len(jobs), sorted({round(j['gpu_mem_gib'], 2) for j in jobs}))",
        ])
        .arg(&trace));
    assert_eq!(parsed.status.code(), Some(0), "{parsed:?}");
    // 30 jobs, each needing what a 1g.5gb holds less the planner's headroom.
    assert_eq!(String::from_utf8_lossy(&parsed.stdout).trim(), "30 [4.31]");
    // Each step's prediction is no worse than the one before.
    let waits: Vec<f64> = steps
        .iter()
        .map(|s| s["after"]["mean_wait_s"].as_f64().unwrap())
        .collect();
    assert!(waits.windows(2).all(|w| w[1] <= w[0]), "{waits:?}");
}

// ---- issue 32, items 7–10: what advise reads and what it writes, on
// stand-in Slurm clients (no cluster) ----

/// A scratch directory with stand-in `scontrol` (the recorded cluster: two
/// A100-40GB nodes cut `1g.5gb*4,2g.10gb*2,a100` in partitions cpu and gpu)
/// and `sacct` running `sacct` (a shell command).
pub struct Standins {
    pub dir: tempfile::TempDir,
}

impl Standins {
    pub fn new(sacct: &str) -> Standins {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let shape = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/scontrol-shape-22.05.txt");
        for (name, body) in [
            ("scontrol", format!("cat '{}'", shape.display())),
            ("sacct", sacct.to_string()),
        ] {
            let p = bin.join(name);
            std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        Standins { dir }
    }

    /// `yolo-sched advise` with the stand-ins first on PATH.
    pub fn advise(&self) -> Command {
        let mut cmd = yolo();
        cmd.env(
            "PATH",
            format!(
                "{}:{}",
                self.dir.path().join("bin").display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .arg("advise");
        cmd
    }
}

/// `advise` asks Slurm twice: one `sacct` for the window, one `scontrol`
/// for the nodes and the controller's settings (whether job comments are
/// kept), not a second `scontrol show config`.
#[test]
fn advise_makes_two_slurm_calls() {
    let s = Standins::new("exit 0");
    let trace = s.dir.path().join("trace");
    let out = run(s.advise().env("YOLO_SCHED_SLURM_TRACE", &trace).args([
        "--partition",
        "gpu",
        "--json",
    ]));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let mut calls: Vec<String> = std::fs::read_to_string(&trace)
        .unwrap()
        .lines()
        .map(|l| l.split_whitespace().next().unwrap_or("").to_string())
        .collect();
    calls.sort();
    assert_eq!(calls, ["sacct", "scontrol"]);
}

fn stamp(t: chrono::NaiveDateTime) -> String {
    t.format("%Y-%m-%dT%H:%M:%S").to_string()
}

/// A window of 300 days whose saved sacct output holds a job past every
/// limit of node-setup's demand files: a run of 400 days, a limit past u64
/// seconds, 65 and 2^32 instances, a submission in year 9999, a type with ESC
/// and one of 65 characters, an untyped count past u64; and ten plain jobs.
/// Returns the file, `--since` and `--until`.
pub fn hostile_window(dir: &std::path::Path) -> (std::path::PathBuf, String, String) {
    let now = chrono::Local::now().naive_local();
    let since = now - chrono::Duration::days(300);
    let until = now - chrono::Duration::hours(1);
    let submit = stamp(now - chrono::Duration::days(10));
    let start = stamp(now - chrono::Duration::days(10) + chrono::Duration::minutes(5));
    let end = stamp(now - chrono::Duration::days(9));
    let job = |id: u32, state: &str, submit: &str, elapsed: &str, limit: &str, tres: &str| {
        format!("{id}|gpu|vision|alice|{state}|{submit}|{start}|{end}|{elapsed}|{limit}|{tres}|\n")
    };
    let mut text = [
        job(
            1,
            "COMPLETED",
            &submit,
            "34560000",
            "60",
            "gres/gpu:1g.5gb=1",
        ),
        job(
            2,
            "COMPLETED",
            &submit,
            "60",
            "307445734561825861",
            "gres/gpu:1g.5gb=65",
        ),
        job(
            3,
            "COMPLETED",
            &submit,
            "60",
            "60",
            "gres/gpu:2g.10gb=4294967296",
        ),
        job(
            4,
            "COMPLETED",
            "9999-12-31T23:59:59",
            "60",
            "60",
            "gres/gpu:1g.5gb=1",
        ),
        job(
            5,
            "COMPLETED",
            &submit,
            "60",
            "60",
            "gres/gpu:1g\u{1b}[31m.5gb=1",
        ),
        job(
            6,
            "COMPLETED",
            &submit,
            "60",
            "60",
            &format!("gres/gpu:{}=1", "x".repeat(65)),
        ),
        job(
            7,
            "COMPLETED",
            &submit,
            "60",
            "60",
            "gres/gpu=18446744073709551616",
        ),
    ]
    .concat();
    // Still pending, limited past u64 seconds (TimelimitRaw × 60).
    text.push_str(&format!(
        "8|gpu|vision|alice|PENDING|{submit}|Unknown|Unknown|0|18446744073709551615|gres/gpu:3g.20gb=1|\n"
    ));
    for i in 0..10 {
        text.push_str(&job(
            100 + i,
            "COMPLETED",
            &submit,
            "3600",
            "90",
            "gres/gpu:1g.5gb=1",
        ));
    }
    let path = dir.join("hostile.txt");
    std::fs::write(&path, text).unwrap();
    (path, stamp(since), stamp(until))
}

/// Item 7: out-of-range jobs are clamped or left out, said in every
/// format, and the demand file holds only what node-setup reads (node-setup
/// itself reads it in `node_setup::advise_demand_files_are_read_by_node_setup`).
#[test]
fn jobs_past_what_node_setup_plans_for_are_clamped_or_left_out_and_said() {
    let s = Standins::new("exit 0");
    let (file, since, until) = hostile_window(s.dir.path());
    let demand = s.dir.path().join("demand.csv");
    let mut cmd = s.advise();
    cmd.args([
        "--since",
        &since,
        "--until",
        &until,
        "--partition",
        "gpu",
        "--json",
    ])
    .arg("--sacct-file")
    .arg(&file)
    .arg("--demand-out")
    .arg(&demand);
    let out = run(&mut cmd);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let c = &v["counted"];
    assert_eq!(
        (
            &c["jobs"],
            &c["clamped"],
            &c["bad_type"],
            &c["after_window"]
        ),
        (&14.into(), &4.into(), &2.into(), &1.into()),
        "{v}"
    );
    let warnings = v["warnings"].to_string();
    for said in [
        "counted as 366 days",
        "no node can offer",
        "after the window",
    ] {
        assert!(warnings.contains(said), "{said}: {warnings}");
    }
    let csv = std::fs::read_to_string(&demand).unwrap();
    assert!(!csv.contains('\u{1b}') && !csv.contains("xxxx"), "{csv}");
    for line in csv.lines().skip(2) {
        let f: Vec<u64> = line
            .split(',')
            .skip(1)
            .map(|n| n.parse().unwrap())
            .collect();
        assert!(f[0] <= 366 * 86_400 && f[2] <= 366 * 86_400, "{line}");
        let count: u32 = line
            .split(',')
            .next()
            .unwrap()
            .rsplit(':')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=64).contains(&count), "{line}");
    }
    // The table says it too.
    let mut cmd = s.advise();
    cmd.args(["--since", &since, "--until", &until, "--partition", "gpu"])
        .arg("--sacct-file")
        .arg(&file);
    let out = run(&mut cmd);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("past what node-setup plans for: 4 job(s)"),
        "{text}"
    );
    assert!(!text.contains('\u{1b}'), "{text}");
    // A window longer than a demand file holds is refused before sacct is asked.
    let mut cmd = s.advise();
    cmd.args(["--since", "2025-01-01T00:00:00", "--until", &until])
        .arg("--sacct-file")
        .arg(&file);
    let out = run(&mut cmd);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("advise reads at most 366"), "{err}");
}

/// Item 8: a saved output that is not sacct's (11 fields, another order,
/// binary) is invalid input at its line, saying what was expected; sacct
/// answering so is sacct failing (exit 1), said the same way.
#[test]
fn a_saved_output_that_is_not_sacct_s_is_refused_at_its_line() {
    let s = Standins::new("printf '\\177ELF\\001\\377\\376|||\\n'");
    let (file, since, until) = hostile_window(s.dir.path());
    let good = std::fs::read_to_string(&file).unwrap();
    let good = good.lines().last().unwrap();
    let mut eleven: Vec<&str> = good.split('|').collect();
    eleven.pop();
    let mut order: Vec<&str> = good.split('|').collect();
    order.swap(3, 5);
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("11 fields", eleven.join("|").into_bytes(), "11 field(s)"),
        (
            "another order",
            order.join("|").into_bytes(),
            "field 6 (Submit) is `alice`",
        ),
        (
            "binary",
            b"\x7fELF\x02\x01\x01\x00\xff\xfe\x00\x00|\x1b[2J".to_vec(),
            "not text (byte 0xff",
        ),
    ];
    for (what, line, said) in cases {
        let path = s.dir.path().join("saved.txt");
        let mut bytes = format!("{good}\n").into_bytes();
        bytes.extend_from_slice(&line);
        bytes.push(b'\n');
        std::fs::write(&path, bytes).unwrap();
        let mut cmd = s.advise();
        cmd.args(["--since", &since, "--until", &until])
            .arg("--sacct-file")
            .arg(&path);
        let out = run(&mut cmd);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{what}: {err}");
        assert!(
            err.contains(&format!("{}:2: ", path.display())),
            "{what}: {err}"
        );
        assert!(err.contains(said), "{what}: {err}");
        assert!(
            err.contains("expected") && err.contains("JobIDRaw,Partition"),
            "{what}: {err}"
        );
        assert!(!err.contains('\u{1b}') && err.len() < 2048, "{what}: {err}");
    }
    let mut cmd = s.advise();
    cmd.args(["--since", &since, "--until", &until]);
    let out = run(&mut cmd);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("sacct's output, line 1: not text"), "{err}");
}

/// Item 10: sacct's stderr reaches the terminal escaped.
#[test]
fn sacct_s_stderr_is_echoed_escaped() {
    let s =
        Standins::new("printf 'sacct: error: \\033]0;owned\\007slurmdbd down\\r\\n' >&2\nexit 1");
    let out = run(s.advise().args(["--since", "1d"]));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("sacct failed: sacct: error: \\u{1b}]0;owned\\u{7}slurmdbd down"),
        "{err}"
    );
    for raw in ['\u{1b}', '\u{7}', '\r'] {
        assert!(!err.contains(raw), "raw {raw:?} in {err:?}");
    }
}

/// Items 8 and 9: `--sacct-file` is read line by line in bounded memory: a
/// file of 2,000,005 lines (about 200 MB) runs in a fraction of its size, and the
/// 5 lines past the limit are said in every format.
#[test]
fn a_large_saved_output_is_streamed_and_lines_past_the_limit_are_said() {
    use std::io::Write as _;
    let time = std::path::Path::new("/usr/bin/time");
    assert!(
        time.is_file(),
        "this test measures peak RSS with /usr/bin/time (GNU time)"
    );
    let s = Standins::new("exit 0");
    let now = chrono::Local::now().naive_local();
    let (since, until) = (
        stamp(now - chrono::Duration::days(2)),
        stamp(now - chrono::Duration::hours(1)),
    );
    let submit = stamp(now - chrono::Duration::days(1));
    let path = s.dir.path().join("big.txt");
    let mut w = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    // Jobs without a GPU: every line is read whole, none is kept (a line of
    // a typed GPU job parses 3 times slower in a debug build; the test would
    // take minutes).
    let line = format!("7|batch|a|u|COMPLETED|{submit}|{submit}|{submit}|60|5|cpu=1,mem=4G,node=1|cpu=1,mem=4G,node=1\n");
    for _ in 0..2_000_005u32 {
        w.write_all(line.as_bytes()).unwrap();
    }
    w.flush().unwrap();
    drop(w);
    let size = std::fs::metadata(&path).unwrap().len();
    let said = "after the first 2000000 were not read";
    for format in ["table", "json", "html"] {
        let rss = s.dir.path().join("rss");
        let cmd = s.advise();
        let args: Vec<std::ffi::OsString> = cmd.get_args().map(|a| a.to_owned()).collect();
        let mut timed = Command::new(time);
        for (k, v) in cmd.get_envs() {
            match v {
                Some(v) => timed.env(k, v),
                None => timed.env_remove(k),
            };
        }
        timed
            .arg("-f")
            .arg("%M")
            .arg("-o")
            .arg(&rss)
            .arg(cmd.get_program())
            .args(args);
        timed
            .args([
                "--since",
                &since,
                "--until",
                &until,
                "--partition",
                "gpu",
                "--format",
                format,
            ])
            .arg("--sacct-file")
            .arg(&path);
        let out = run(&mut timed);
        let text = String::from_utf8_lossy(&out.stdout);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{format}: {}",
            common::head(&err, 2000)
        );
        // In the output itself, whatever its format (and on stderr).
        assert!(
            text.contains("5 line(s)") && text.contains(said),
            "{format}: {}",
            common::head(&text, 4000)
        );
        assert!(err.contains(said), "{format}: {err}");
        if format == "json" {
            let v: Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(v["skipped"]["past_limit"], 5, "{v}");
            assert_eq!(v["skipped"]["no_gpu"], 2_000_000, "{v}");
        }
        let kib: u64 = std::fs::read_to_string(&rss)
            .unwrap()
            .trim()
            .lines()
            .last()
            .unwrap()
            .parse()
            .unwrap();
        // Read whole, the file alone would be about 200 MB of RSS.
        assert!(
            kib * 1024 < size / 4,
            "{format}: {kib} KiB peak RSS for a {size}-byte file"
        );
    }
}

// ---- issue 34: planning from what jobs needed (stand-in Slurm clients) ----

/// 24 one-hour jobs that each asked a whole `a100` and used 6 GiB (the job
/// agent's measurement in their comments), submitted at once, and 4 whose
/// comments carry a measurement not to trust (another job's id, a negative
/// and a 10^30 peak, a control character). `comments`: false cuts every
/// line to its first twelve fields (a saved output without needs).
fn whole_gpu_window(dir: &std::path::Path, comments: bool) -> (std::path::PathBuf, String, String) {
    let now = chrono::Local::now().naive_local();
    let t0 = now - chrono::Duration::hours(30);
    let mut text = String::new();
    let tres = "billing=1,cpu=1,gres/gpu:a100=1,gres/gpu=1,mem=4G,node=1";
    let carrier = |id: u32, peak: &str| {
        format!("yolo-sched:w-{id}:ab:train ysneed=1;job={id};slice=a100;epochs=30;peak_mib={peak}/40960")
    };
    for i in 0..28u32 {
        let id = 500 + i;
        // As they ran on the site's two a100s: two at a time.
        let start = t0 + chrono::Duration::hours(i64::from(i / 2));
        let end = start + chrono::Duration::hours(1);
        let comment = match i {
            24 => carrier(9, "6144"),
            25 => carrier(id, "-6144"),
            26 => carrier(id, "1000000000000000000000000000000"),
            27 => format!("{}\u{7}", carrier(id, "6144")),
            _ => carrier(id, "6144"),
        };
        text.push_str(&format!(
            "{id}|gpu|vision|alice|COMPLETED|{}|{}|{}|3600|120|{tres}|{tres}",
            stamp(t0),
            stamp(start),
            stamp(end)
        ));
        if comments {
            text.push_str(&format!("||{comment}"));
        }
        text.push('\n');
    }
    let path = dir.join(if comments { "needs.txt" } else { "asked.txt" });
    std::fs::write(&path, text).unwrap();
    (path, stamp(t0 - chrono::Duration::hours(1)), stamp(now))
}

/// The jobs of `csv` (a demand file) of one GRES, summed over its lines.
fn demand_jobs(csv: &str, gres: &str) -> u64 {
    csv.lines()
        .filter(|l| l.starts_with(gres))
        .filter_map(|l| l.split(',').nth(2)?.parse::<u64>().ok())
        .sum()
}

#[test]
fn whole_gpu_jobs_that_used_little_are_planned_on_what_fits_and_cutting_is_advised() {
    let s = Standins::new("exit 0");
    let (file, since, until) = whole_gpu_window(s.dir.path(), true);
    let demand = s.dir.path().join("demand.csv");
    let advise = |extra: &[&str]| {
        let mut cmd = s.advise();
        cmd.args(["--since", &since, "--until", &until, "--partition", "gpu"])
            .arg("--sacct-file")
            .arg(&file)
            .args(extra);
        run(&mut cmd)
    };
    let out = advise(&["--json", "--demand-out", demand.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let n = &v["needs"];
    assert_eq!(n["measured"]["jobs"], 24, "{n}");
    assert_eq!(n["asked"]["jobs"], 4, "{n}");
    assert_eq!(n["smaller"]["jobs"], 24, "{n}");
    let r = &n["refused"];
    assert_eq!(
        (&r["other_job"], &r["bad_number"], &r["malformed"]),
        (&1.into(), &2.into(), &1.into()),
        "{n}"
    );
    assert!(
        v["warnings"]
            .to_string()
            .contains("4 measurement(s) in job comments were refused"),
        "{}",
        v["warnings"]
    );
    // 6 GiB + 10 % is a 1g.10gb (9.62 GiB) on these A100-40GBs, in every
    // set-up: as cut now it runs on the 2g.10gb slices (the smallest that
    // hold it), and `auto` cuts the MIG GPUs into 1g.10gb for it.
    assert!(v["advice"]["changes"].as_bool().unwrap(), "{v}");
    let current = outcome(&v, "current");
    let auto = outcome(&v, "auto");
    assert!(
        auto["mean_wait_s"].as_f64().unwrap() < current["mean_wait_s"].as_f64().unwrap() / 2.0,
        "{current}\n{auto}"
    );
    let csv = std::fs::read_to_string(&demand).unwrap();
    assert_eq!(demand_jobs(&csv, "gpu:1g.10gb:1,"), 24, "{csv}");
    assert_eq!(demand_jobs(&csv, "gpu:a100:1,"), 4, "{csv}");
    // Site-wide right-sizing: alice and her account, 24 GPU-hours asked.
    let rs = v["rightsizing"].as_array().unwrap();
    let alice = rs
        .iter()
        .find(|o| o["by"] == "user" && o["name"] == "alice")
        .unwrap_or_else(|| panic!("{v}"));
    assert_eq!(alice["jobs"], 24, "{alice}");
    assert!((alice["gpu_hours_asked"].as_f64().unwrap() - 24.0).abs() < 1e-6);
    assert!(
        alice["gpu_hours_fit"].as_f64().unwrap() < 24.0 / 6.0,
        "{alice}"
    );
    assert!(alice["wait_saved_h"].as_f64().unwrap() > 0.0, "{alice}");
    assert!(rs
        .iter()
        .any(|o| o["by"] == "account" && o["name"] == "vision"));
    // Text, HTML and Prometheus say the same.
    let out = advise(&[]);
    let text = String::from_utf8_lossy(&out.stdout);
    for said in [
        "needs: 24 job(s) (24.0 GPU-h) from measured GPU memory",
        "asked for more than they used",
        "a100 → 1g.10gb ×24",
    ] {
        assert!(text.contains(said), "{said}:\n{text}");
    }
    let out = advise(&["--format", "html"]);
    let html = String::from_utf8_lossy(&out.stdout);
    assert!(
        html.contains("What the jobs needed") && html.contains("alice"),
        "{html}"
    );
    let out = advise(&["--format", "prometheus"]);
    let prom = String::from_utf8_lossy(&out.stdout);
    for said in [
        "yolo_sched_advice_jobs_by_need{source=\"measured\"} 24",
        "yolo_sched_advice_needs_refused{why=\"other_job\"} 1",
        "yolo_sched_advice_oversized_jobs{by=\"user\",name=\"alice\"} 24",
        "yolo_sched_advice_oversized_gpu_hours_saved{by=\"account\",name=\"vision\"}",
    ] {
        assert!(prom.contains(said), "{said}:\n{prom}");
    }
}

/// The same window saved without the comments: every job as asked, and said.
#[test]
fn a_window_without_measurements_is_planned_from_the_types_asked_and_says_so() {
    let s = Standins::new("exit 0");
    let (file, since, until) = whole_gpu_window(s.dir.path(), false);
    let demand = s.dir.path().join("demand.csv");
    let mut cmd = s.advise();
    cmd.args([
        "--since",
        &since,
        "--until",
        &until,
        "--partition",
        "gpu",
        "--json",
    ])
    .arg("--sacct-file")
    .arg(&file)
    .arg("--demand-out")
    .arg(&demand);
    let out = run(&mut cmd);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["needs"]["asked"]["jobs"], 28, "{v}");
    assert_eq!(v["needs"]["measured"]["jobs"], 0, "{v}");
    assert!(v["rightsizing"].as_array().unwrap().is_empty(), "{v}");
    let warnings = v["warnings"].to_string();
    assert!(
        warnings.contains("no job of the window carries a measured GPU memory")
            && warnings.contains("planned from the type it asked for"),
        "{warnings}"
    );
    let csv = std::fs::read_to_string(&demand).unwrap();
    assert_eq!(demand_jobs(&csv, "gpu:a100:1,"), 28, "{csv}");
    assert_eq!(demand_jobs(&csv, "gpu:1g.10gb:1,"), 0, "{csv}");
}

/// A live sacct from a site whose accounting drops comments: the line names
/// the setting (the stand-in scontrol's configuration has no job_comment).
#[test]
fn a_site_without_the_carrier_is_told_what_to_set() {
    let scratch = tempfile::tempdir().unwrap();
    let (file, _, _) = whole_gpu_window(scratch.path(), false);
    let text = std::fs::read_to_string(&file).unwrap();
    let s = Standins::new(&format!("cat <<'EOF'\n{text}EOF"));
    let out = run(s.advise().args(["--since", "3d", "--partition", "gpu"]));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("accounting does not keep job comments")
            && err.contains("AccountingStoreFlags=job_comment"),
        "{err}"
    );
}
