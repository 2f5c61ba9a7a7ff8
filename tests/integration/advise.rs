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

fn advise(file: &std::path::Path, since: &str, until: &str, partition: &str) -> Value {
    let out = run(week_cmd(file, since, until, partition).arg("--json"));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

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
