//! Faults of Slurm's daemons and of the machine, on the live cluster:
//! slurmctld stopped and restarted under a running chain, a node's slurmd
//! killed (with its job) during training, the workdir's filesystem full
//! during `submit`, and four submitters at once while `status`, `list` and
//! `report` run in a loop.
//!
//! The first two disturb the whole cluster and the last one fills it with
//! jobs, so every test of this module takes `DISRUPT` first: they run one
//! after the other. Each test that stops a daemon puts the cluster back
//! (`slurm/cluster.sh up`, which restarts what is missing and resumes down
//! nodes) when it ends, also when it fails.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::common::*;
use crate::run_fixture::RunFixture;
use serde_json::Value;

/// One test of this module at a time (see the module doc).
static DISRUPT: Mutex<()> = Mutex::new(());

fn disrupt() -> MutexGuard<'static, ()> {
    DISRUPT.lock().unwrap_or_else(|e| e.into_inner())
}

/// The run directory of the cluster under test: `slurm/cluster.sh`'s instance
/// (`INSTANCE`, 1 unless set: the test command runs this module on a cluster of
/// its own, instance 3, with `SLURM_CONF` pointing at it).
fn slurm_run_dir() -> String {
    match std::env::var("INSTANCE") {
        Ok(k) if k != "1" && !k.is_empty() => format!("/run/yolo-slurm-{k}"),
        _ => "/run/yolo-slurm".to_string(),
    }
}

/// The slurm.conf of the cluster under test.
fn slurm_conf() -> String {
    std::env::var("SLURM_CONF").unwrap_or_else(|_| "/etc/slurm/slurm.conf".to_string())
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A prepare → train → export spec on `f`'s copy of the demo dataset.
fn spec(f: &RunFixture, name: &str, workdir: &Path, epochs: u32) -> PathBuf {
    let text = format!(
        "version = 1\n[run]\nname = \"{name}\"\npartition = \"gpu\"\nworkdir = \"{}\"\n\
         [train]\nmodel = \"yolov8n.yaml\"\ndata = \"{}\"\nepochs = {epochs}\nimgsz = 64\nbatch = 8\nworkers = 1\n\
         [stages.prepare]\npartition = \"cpu\"\n[stages.export]\npartition = \"cpu\"\nformats = [\"onnx\"]\n",
        workdir.display(),
        f.path().join("dataset/data.yaml").display()
    );
    let p = f.path().join(format!("{name}.toml"));
    std::fs::write(&p, text).unwrap();
    p
}

/// The pid in `<run dir>/NAME.pid` when that process is alive (not a zombie).
fn daemon_pid(name: &str) -> Option<i32> {
    let text = std::fs::read_to_string(format!("{}/{name}.pid", slurm_run_dir())).ok()?;
    let pid: i32 = text.trim().parse().ok()?;
    alive(pid).then_some(pid)
}

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map(|s| {
            !s.lines()
                .any(|l| l.starts_with("State:") && l.contains("Z"))
        })
        .unwrap_or(false)
}

/// `slurm/cluster.sh up`: restarts what is missing, resumes nodes left down,
/// waits until every node is idle. Its output goes to a file, never to a
/// pipe a daemon could inherit. Returns how long it took.
#[track_caller]
fn cluster_up() -> Duration {
    let log =
        std::env::temp_dir().join(format!("yolo-faults-cluster-up-{}.log", std::process::id()));
    let start = Instant::now();
    let file = std::fs::File::create(&log).unwrap();
    let status = Command::new("bash")
        .arg(repo().join("slurm/cluster.sh"))
        .arg("up")
        // cluster.sh writes its config with this build's cluster-conf, not cargo's.
        .env("YOLO_CLUSTER_CONF", env!("CARGO_BIN_EXE_cluster-conf"))
        .stdin(Stdio::null())
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .status()
        .expect("running slurm/cluster.sh up");
    let took = start.elapsed();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    eprintln!("*** cluster.sh up ({took:?}):\n{text}");
    assert!(status.success(), "slurm/cluster.sh up failed:\n{text}");
    took
}

/// Puts the cluster back when a test that stops daemons ends (also on panic).
struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        let healthy = daemon_pid("slurmctld").is_some()
            && ["node1", "node2", "small1"]
                .iter()
                .all(|n| daemon_pid(&format!("slurmd-{n}")).is_some())
            && nodes_usable();
        if !healthy {
            // Down nodes are resumed by `up` itself (resume_stuck_nodes).
            for n in ["node1", "node2", "small1"] {
                let _ = Command::new("scontrol")
                    .args(["update", &format!("nodename={n}"), "state=resume"])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status();
            }
            let _ = std::panic::catch_unwind(cluster_up);
        }
    }
}

/// Every node answers and takes jobs (idle, mixed or allocated).
fn nodes_usable() -> bool {
    let Ok(out) = Command::new("sinfo")
        .args(["-h", "-N", "-o", "%N %t"])
        .stdin(Stdio::null())
        .output()
    else {
        return false;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    out.status.success()
        && !text.trim().is_empty()
        && text.lines().all(|l| {
            let state = l.split_whitespace().nth(1).unwrap_or("");
            matches!(state, "idle" | "mix" | "alloc")
        })
}

#[track_caller]
fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

#[track_caller]
fn bounded(cmd: &mut Command, limit: Duration) -> Output {
    let shown = format!("{cmd:?}");
    let out = run_bounded(cmd, limit).unwrap_or_else(|| panic!("{shown}: not done in {limit:?}"));
    eprintln!(
        "*** {shown}\n--- status: {}\n--- stdout:\n{}\n--- stderr:\n{}",
        out.status,
        head(&String::from_utf8_lossy(&out.stdout), 4000),
        head(&String::from_utf8_lossy(&out.stderr), 4000)
    );
    out
}

/// The workdir an index entry names.
fn index_workdir(index: &Path, run_id: &str) -> PathBuf {
    let v: Value = serde_json::from_str(&read(&index.join(format!("{run_id}.json")))).unwrap();
    PathBuf::from(v["workdir"].as_str().unwrap())
}

fn status_json(f: &RunFixture, run_id: &str) -> (Option<i32>, Value, String, Duration) {
    let start = Instant::now();
    let out = bounded(
        f.cmd().args(["status", "--json", run_id]),
        Duration::from_secs(180),
    );
    let took = start.elapsed();
    (
        out.status.code(),
        json(&out),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        took,
    )
}

#[track_caller]
fn stage<'a>(st: &'a Value, name: &str) -> &'a Value {
    st["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["stage"] == name)
        .unwrap_or_else(|| panic!("no stage {name} in {st}"))
}

fn watch(f: &RunFixture, run_id: &str, limit: Duration) -> i32 {
    bounded(f.cmd().args(["watch", run_id]), limit)
        .status
        .code()
        .unwrap_or(-1)
}

fn cancel_ids(ids: &[u64]) {
    if ids.is_empty() {
        return;
    }
    let list: Vec<String> = ids.iter().map(u64::to_string).collect();
    let _ = Command::new("scancel")
        .args(&list)
        .stdin(Stdio::null())
        .status();
}

/// The jobs (any state slurmctld still lists) whose comment names a run of
/// `name`: `yolo-sched:<name>-<time>-<hash>:<token>:<stage>`.
#[track_caller]
fn jobs_of_name(name: &str) -> Vec<(u64, String)> {
    let out = Command::new("squeue")
        .args(["-h", "-t", "all", "-O", "JobID:|,Comment:|"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "squeue: {out:?}");
    let prefix = format!("yolo-sched:{name}-");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (id, comment) = l.split_once('|')?;
            let comment = comment.trim_end_matches('|').trim();
            if !comment.starts_with(&prefix) {
                return None;
            }
            Some((id.trim().parse().ok()?, comment.to_string()))
        })
        .collect()
}

/// Files under `dir` (recursively), relative.
#[track_caller]
fn files_under(dir: &Path) -> Vec<String> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        let Ok(list) = std::fs::read_dir(dir) else {
            return;
        };
        for e in list.flatten() {
            let p = e.path();
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                walk(base, &p, out);
            } else {
                out.push(p.strip_prefix(base).unwrap().display().to_string());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

// ---------------------------------------------------------------- slurmctld

/// Stop slurmctld as an administrator or a crash would (SIGTERM, then
/// SIGKILL), wait until it is gone.
fn stop_slurmctld() {
    let pid = daemon_pid("slurmctld").expect("slurmctld runs");
    nix_kill(pid, "TERM");
    let gone = Instant::now();
    while alive(pid) && gone.elapsed() < crate::common::patience(Duration::from_secs(15)) {
        std::thread::sleep(Duration::from_millis(100));
    }
    if alive(pid) {
        nix_kill(pid, "KILL");
        wait_until(Duration::from_secs(10), "slurmctld gone", || !alive(pid));
    }
}

fn nix_kill(pid: i32, signal: &str) {
    let _ = Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .stdin(Stdio::null())
        .status();
}

/// Submit `spec` with one-second stand-in epochs: the run id and job ids.
#[track_caller]
fn submit_one_second_epochs(f: &RunFixture, spec: &Path) -> (String, Vec<u64>) {
    let out = bounded(
        f.cmd()
            .env("YOLO_STANDIN_EPOCH_SECONDS", "1")
            .args(["submit", "--json"])
            .arg(spec),
        Duration::from_secs(120),
    );
    assert_eq!(out.status.code(), Some(0));
    let submitted = json(&out);
    let run_id = submitted["run_id"].as_str().unwrap().to_string();
    (run_id, submitted_ids(&submitted))
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up)"]
fn slurmctld_restarted_under_a_running_chain_the_chain_completes() {
    let _cluster = common::cluster(module_path!());
    let _turn = disrupt();
    let _restore = Restore;
    let f = RunFixture::new();
    let workdir = f.path().join("run");
    let spec = spec(&f, "ctldrestart", &workdir, 20);
    let (run_id, ids) = submit_one_second_epochs(&f, &spec);
    let results = workdir.join("train/results.csv");
    wait_until(Duration::from_secs(120), "two epochs of training", || {
        epochs_in(&results).len() >= 2
    });

    // Before: Slurm answers, training runs.
    let (code, st, _, before) = status_json(&f, &run_id);
    assert_eq!(code, Some(0));
    assert_eq!(st["state"], "running", "{st}");
    assert_eq!(st["stale"], false);
    assert_eq!(stage(&st, "train")["state"], "running", "{st}");

    stop_slurmctld();
    let stopped = Instant::now();
    let epochs_at_stop = epochs_in(&results).len();

    // During: status says it could not ask Slurm, shows the job files' view
    // marked stale, exits 1; so does list. Nothing reads completed.
    let (code, st, err, during) = status_json(&f, &run_id);
    assert_eq!(code, Some(1), "status while slurmctld is down");
    assert_eq!(st["stale"], true, "{st}");
    assert!(err.contains("Slurm could not be asked"), "{err}");
    // The last known state: training started and has no end record, so it
    // runs (or, if it ended meanwhile, completed); never failed, never lost.
    assert!(
        !matches!(st["state"].as_str(), Some("completed" | "failed")),
        "{st}"
    );
    assert!(
        matches!(
            stage(&st, "train")["state"].as_str(),
            Some("running" | "completed")
        ),
        "{st}"
    );
    let text = bounded(f.cmd().args(["status", &run_id]), Duration::from_secs(180));
    assert_eq!(text.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("[stale: Slurm did not answer]"),
        "the table says it is stale"
    );
    let list = bounded(f.cmd().args(["list", "--json"]), Duration::from_secs(180));
    assert_eq!(list.status.code(), Some(1), "list while slurmctld is down");
    // Training goes on without the controller.
    wait_until(
        Duration::from_secs(60),
        "training goes on without slurmctld",
        || epochs_in(&results).len() > epochs_at_stop,
    );
    let down_for = stopped.elapsed();

    let up = cluster_up();
    let (code, st, _, _) = status_json(&f, &run_id);
    assert_eq!(code, Some(0), "status once slurmctld is back");
    assert_eq!(st["stale"], false);
    assert!(
        matches!(st["state"].as_str(), Some("running" | "completed")),
        "{st}"
    );

    // After: the chain completes with the jobs submitted before the restart.
    assert_eq!(watch(&f, &run_id, Duration::from_secs(240)), 0);
    let (code, st, _, _) = status_json(&f, &run_id);
    assert_eq!(code, Some(0));
    assert_eq!(st["state"], "completed", "{st}");
    for (s, id) in st["stages"].as_array().unwrap().iter().zip(&ids) {
        assert_eq!(s["state"], "completed", "{s}");
        assert_eq!(s["job_id"].as_u64(), Some(*id), "no stage resubmitted: {s}");
        assert_eq!(s["attempt"], 1, "{s}");
    }
    let epochs = epochs_in(&results);
    assert_eq!(epochs, (1..=20).collect::<Vec<u32>>(), "every epoch once");
    eprintln!(
        "FIGURES slurmctld: status before {before:?}, while down {during:?}, \
         down for {down_for:?}, cluster.sh up {up:?}"
    );
}

// ---------------------------------------------------------------- slurmd

/// Parent pid of every process, from /proc.
fn process_parents() -> Vec<(i32, i32)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // pid (comm) state ppid …; comm may hold spaces and parentheses.
        let Some(after) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        if let Some(ppid) = after.split_whitespace().nth(1).and_then(|p| p.parse().ok()) {
            out.push((pid, ppid));
        }
    }
    out
}

/// The slurmstepd processes of `job` and everything under them.
fn job_processes(job: u64) -> Vec<i32> {
    let tag = format!("[{job}.");
    let mut found: Vec<i32> = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if comm.trim() == "slurmstepd" && String::from_utf8_lossy(&cmdline).contains(&tag) {
            found.push(pid);
        }
    }
    let parents = process_parents();
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        for (child, parent) in &parents {
            if *parent == p && !found.contains(child) {
                found.push(*child);
            }
        }
        i += 1;
    }
    found
}

fn squeue_field(job: u64, field: &str) -> String {
    let out = Command::new("squeue")
        .args(["-h", "-t", "all", "-j", &job.to_string(), "-o", field])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The node's state as sinfo words it (`idle`, `down*`: `*` while it does not answer).
fn node_state(node: &str) -> Option<String> {
    let out = Command::new("sinfo")
        .args(["-h", "-N", "-n", node, "-o", "%t"])
        .stdin(Stdio::null())
        .output()
        .ok()?;
    let s = String::from_utf8_lossy(&out.stdout);
    s.lines().next().map(|l| l.trim().to_string())
}

/// Start the node's slurmd again as `cluster.sh up` does, and resume the node.
fn bring_back(node: &str) -> Duration {
    let start = Instant::now();
    if daemon_pid(&format!("slurmd-{node}")).is_none() {
        let status = Command::new("/usr/sbin/slurmd")
            .args(["-f", &slurm_conf(), "-N", node])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("starting slurmd");
        assert!(status.success(), "slurmd -N {node}: {status}");
    }
    // With ReturnToService=2 a node that registers again returns by itself;
    // one that stays down is resumed as an administrator would.
    let _ = wait_until(Duration::from_secs(30), "the node registers", || {
        node_state(node).is_some_and(|s| !s.contains('*'))
    });
    if node_state(node).is_some_and(|s| s.starts_with("down") || s.starts_with("drain")) {
        let _ = Command::new("scontrol")
            .args(["update", &format!("nodename={node}"), "state=resume"])
            .stdin(Stdio::null())
            .output();
    }
    wait_until(Duration::from_secs(90), "the node takes jobs again", || {
        let s = Command::new("sinfo")
            .args(["-h", "-N", "-n", node, "-o", "%t"])
            .stdin(Stdio::null())
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
            .unwrap_or_default();
        s.lines()
            .all(|l| matches!(l.trim(), "idle" | "mix" | "alloc"))
            && !s.trim().is_empty()
    });
    start.elapsed()
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up)"]
fn slurmd_killed_during_training_the_run_goes_on_from_its_checkpoint() {
    let _cluster = common::cluster(module_path!());
    let _turn = disrupt();
    let _restore = Restore;
    let f = RunFixture::new();
    let workdir = f.path().join("run");
    let epochs = 15;
    let spec = spec(&f, "slurmdkill", &workdir, epochs);
    let (run_id, ids) = submit_one_second_epochs(&f, &spec);
    let train = ids[1];
    let results = workdir.join("train/results.csv");
    wait_until(Duration::from_secs(120), "three epochs of training", || {
        epochs_in(&results).len() >= 3
    });
    let node = squeue_field(train, "%N");
    assert!(!node.is_empty(), "the training job runs on a node");

    // The node dies: its slurmd, the job's slurmstepd and the trainer under it.
    let slurmd = daemon_pid(&format!("slurmd-{node}")).expect("the node's slurmd runs");
    let job = job_processes(train);
    assert!(!job.is_empty(), "the training job's processes");
    nix_kill(slurmd, "KILL");
    for p in &job {
        nix_kill(*p, "KILL");
    }
    wait_until(Duration::from_secs(10), "the node's processes gone", || {
        !alive(slurmd) && job.iter().all(|p| !alive(*p))
    });
    let killed = Instant::now();
    let reached = epochs_in(&results);
    assert!(
        reached.len() < epochs as usize,
        "killed mid-training: {reached:?}"
    );

    // What slurmctld does once SlurmdTimeout (300 s here) passes without an
    // answer from the node: mark it down. Said at once, so the test does not
    // wait five minutes.
    let down = Command::new("scontrol")
        .args([
            "update",
            &format!("nodename={node}"),
            "state=down",
            "reason=yolo-sched fault test: slurmd killed",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(down.status.success(), "{down:?}");
    // Slurm decides: a --requeue job goes back to pending, else it fails.
    let mut decided = String::new();
    let decision = wait_until(Duration::from_secs(60), "Slurm's decision", || {
        decided = squeue_field(train, "%T");
        decided != "RUNNING" && decided != "COMPLETING"
    });
    eprintln!("slurm decided {decided} for job {train} after {decision:?}");

    // Nothing is marked completed that did not complete.
    let (code, st, _, _) = status_json(&f, &run_id);
    assert_eq!(code, Some(0));
    assert_ne!(st["state"], "completed", "{st}");
    assert_ne!(stage(&st, "train")["state"], "completed", "{st}");
    assert_ne!(stage(&st, "export")["state"], "completed", "{st}");
    assert!(
        !workdir.join("state/train.end.json").exists(),
        "no end record for a training that was killed"
    );
    assert!(!workdir.join("train/.yolo-sched-train-done").exists());

    let back = bring_back(&node);

    let requeued = decided == "PENDING" || decided == "CONFIGURING" || decided == "REQUEUED";
    // Slurm holds a requeued job until a begin time (reason BeginTime,
    // cred_expire + 1 s on, 11 s with the test cluster's AuthInfo): that wait also keeps the kill of the old
    // incarnation, queued for the dead node, from reaching the new one when
    // the node returns. (Moving the begin time to now lets that stale kill
    // cancel the requeued job "due to node failure".)
    let held_for = if requeued {
        format!(
            "reason {}, begin time {}",
            squeue_field(train, "%r"),
            squeue_field(train, "%S")
        )
    } else {
        String::new()
    };
    if !requeued {
        // Slurm failed it: the run failed in train, and resume continues it.
        let (_, st, _, _) = status_json(&f, &run_id);
        assert_eq!(st["state"], "failed", "{st}");
        let r = bounded(
            f.cmd()
                .env("YOLO_STANDIN_EPOCH_SECONDS", "1")
                .args(["resume", &run_id]),
            Duration::from_secs(120),
        );
        assert_eq!(r.status.code(), Some(0), "resume after the node died");
    }
    assert_eq!(watch(&f, &run_id, Duration::from_secs(300)), 0);
    let done = killed.elapsed();
    let (code, st, _, _) = status_json(&f, &run_id);
    assert_eq!(code, Some(0));
    assert_eq!(st["state"], "completed", "{st}");
    let train_stage = stage(&st, "train");
    assert_eq!(
        train_stage["attempt"],
        if requeued { 1 } else { 2 },
        "{train_stage}"
    );

    // Training continued from the checkpoint: no epoch before the kill was
    // trained again from scratch, and the last epoch was reached.
    let all = epochs_in(&results);
    assert_eq!(all.last(), Some(&epochs), "{all:?}");
    assert_eq!(
        all.iter().filter(|e| **e == 1).count(),
        1,
        "training did not start again from epoch 1: {all:?}"
    );
    assert!(
        all.windows(2).all(|w| w[1] > w[0]),
        "epochs only go forward: {all:?}"
    );
    let log = read(&workdir.join("logs/train.out"));
    assert!(
        log.contains("resuming from"),
        "the second start resumed from last.pt:\n{log}"
    );
    eprintln!(
        "FIGURES slurmd: killed at epoch {}, Slurm said {decided} after {decision:?} \
         ({held_for}, killed at {}), node back in {back:?}, run completed {done:?} after the kill",
        reached.len(),
        (chrono::Utc::now() - chrono::Duration::from_std(done).unwrap())
            .format("%Y-%m-%dT%H:%M:%S")
    );
}

// ---------------------------------------------------------------- disk full

/// A small tmpfs mounted on a directory of the fixture; unmounted when dropped.
struct SmallDisk {
    at: PathBuf,
}

impl SmallDisk {
    #[track_caller]
    fn new(at: PathBuf, size: &str) -> SmallDisk {
        std::fs::create_dir_all(&at).unwrap();
        let out = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=1777"),
                "tmpfs",
            ])
            .arg(&at)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "mount tmpfs: {out:?}");
        SmallDisk { at }
    }

    fn free_bytes(&self) -> u64 {
        let out = Command::new("stat")
            .args(["-f", "-c", "%a %S"])
            .arg(&self.at)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let mut it = text.split_whitespace().map(|x| x.parse::<u64>().unwrap());
        it.next().unwrap() * it.next().unwrap()
    }

    /// Remove everything on it.
    fn clear(&self) {
        for e in std::fs::read_dir(&self.at).unwrap().flatten() {
            let p = e.path();
            if e.file_type().unwrap().is_dir() {
                std::fs::remove_dir_all(&p).unwrap();
            } else {
                std::fs::remove_file(&p).unwrap();
            }
        }
    }

    /// Fill it up to `left` free bytes (in whole pages).
    fn fill(&self, left: u64) {
        let filler = self.at.join("filler");
        let free = self.free_bytes();
        let size = free.saturating_sub(left);
        use std::io::Write;
        let mut file = std::fs::File::create(&filler).unwrap();
        let chunk = vec![0u8; 64 << 10];
        let mut written = 0u64;
        while written < size {
            let n = (size - written).min(chunk.len() as u64) as usize;
            file.write_all(&chunk[..n]).unwrap();
            written += n as u64;
        }
        file.sync_all().unwrap();
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(&self.at)
            .stdin(Stdio::null())
            .status();
    }
}

/// Submit into a workdir on `disk` filled to 0, 1, 2, … free pages until one
/// fits; `state_home` is XDG_STATE_HOME (on the disk too, or not). Returns
/// the free page count that fits (every count below it was refused) and the
/// first line of each message.
fn disk_full_sweep(
    f: &RunFixture,
    disk: &SmallDisk,
    state_home: &Path,
    name: &str,
) -> (u64, Vec<String>) {
    let workdir = disk.at.join(format!("run-{name}"));
    let spec = spec(f, name, &workdir, 2);
    let page = 4096;
    let index = state_home.join("yolo-sched/runs");
    let journal = state_home.join("yolo-sched/submissions");
    let entries = |dir: &Path| -> Vec<String> {
        std::fs::read_dir(dir)
            .map(|l| {
                l.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    let submit = || {
        bounded(
            f.cmd()
                .env("XDG_STATE_HOME", state_home)
                .args(["submit", "--json"])
                .arg(&spec),
            Duration::from_secs(120),
        )
    };
    let mut messages = Vec::new();
    // From no free page up: every submit either fails cleanly or succeeds.
    for pages in 0..64u64 {
        disk.clear();
        disk.fill(pages * page);
        let before: Vec<u64> = jobs_of_name(name).into_iter().map(|(id, _)| id).collect();
        let out = submit();
        if out.status.code() == Some(0) {
            cancel_ids(&submitted_ids(&json(&out)));
            assert!(pages >= 2, "the disk was full for several writes");
            messages.dedup();
            return (pages, messages);
        }
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(1), "a full disk is exit 1: {err}");
        assert!(
            err.contains("No space left on device") && err.contains("the disk is full"),
            "the message says the disk is full: {err}"
        );
        assert!(
            err.contains(&disk.at.display().to_string()),
            "the message says where: {err}"
        );
        messages.push(err.lines().next().unwrap_or("").to_string());
        // Nothing submitted, nothing recorded, nothing half-written.
        let jobs: Vec<_> = jobs_of_name(name)
            .into_iter()
            .filter(|(id, _)| !before.contains(id))
            .collect();
        assert!(jobs.is_empty(), "{pages} free pages: jobs left {jobs:?}");
        let files = files_under(&disk.at);
        assert!(
            !files.iter().any(|p| p.ends_with("manifest.json")),
            "{pages} pages: a manifest is left: {files:?}"
        );
        assert!(
            !files.iter().any(|p| p.contains("yolo-sched-tmp")),
            "{pages} pages: a temporary file is left: {files:?}"
        );
        assert!(
            entries(&index).is_empty(),
            "no index entry: {:?}",
            entries(&index)
        );
        assert!(
            entries(&journal).is_empty(),
            "no journal entry: {:?}",
            entries(&journal)
        );
        // Freeing space is all it takes to submit that workdir.
        std::fs::remove_file(disk.at.join("filler")).unwrap();
        let again = submit();
        assert_eq!(again.status.code(), Some(0), "after freeing space");
        let v = json(&again);
        let run_id = v["run_id"].as_str().unwrap().to_string();
        cancel_ids(&submitted_ids(&v));
        assert_eq!(entries(&index), vec![format!("{run_id}.json")]);
        std::fs::remove_file(index.join(format!("{run_id}.json"))).unwrap();
    }
    panic!("no submit fitted in 64 free pages");
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up)"]
fn a_full_workdir_filesystem_fails_submit_cleanly_at_every_write() {
    let _cluster = common::cluster(module_path!());
    let _turn = disrupt();
    let f = RunFixture::new();
    let disk = SmallDisk::new(f.path().join("disk"), "1m");
    // The workdir on the full disk, the state directory elsewhere …
    let (fits, messages) = disk_full_sweep(&f, &disk, &f.path().join("state"), "diskfull");
    eprintln!(
        "FIGURES disk full (workdir): {fits} submits refused (0..{fits} free pages), \
         the first that fits at {fits} pages; messages: {messages:#?}"
    );
    // … and both on it: the journal, index entry and audit line cannot be
    // written either.
    let (fits, messages) = disk_full_sweep(&f, &disk, &disk.at.join("state"), "diskfullstate");
    eprintln!(
        "FIGURES disk full (workdir and state): {fits} submits refused (0..{fits} free pages), \
         the first that fits at {fits} pages; messages: {messages:#?}"
    );
}

// ---------------------------------------------------------------- many submitters

#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up)"]
fn four_submitters_at_once_record_every_run_once_while_readers_loop() {
    let _cluster = common::cluster(module_path!());
    let _turn = disrupt();
    const SUBMITTERS: usize = 4;
    const EACH: usize = 5;
    let f = RunFixture::new();
    std::fs::set_permissions(f.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    // One run before, for status to look at while the others arrive.
    let first = spec(&f, "many-first", &f.path().join("run-first"), 2);
    let (first_id, v) = f.submit(&first);
    let mut all_ids = submitted_ids(&v);
    let specs: Vec<Vec<PathBuf>> = (0..SUBMITTERS)
        .map(|u| {
            (0..EACH)
                .map(|i| {
                    let name = format!("many-u{u}-r{i}");
                    spec(&f, &name, &f.path().join(format!("run-{name}")), 2)
                })
                .collect()
        })
        .collect();
    let done = std::sync::atomic::AtomicBool::new(false);
    let started = Instant::now();
    let (submits, reads) = std::thread::scope(|s| {
        let submitters: Vec<_> = specs
            .iter()
            .map(|mine| {
                let f = &f;
                s.spawn(move || {
                    mine.iter()
                        .map(|spec| {
                            let out = run_bounded(
                                f.cmd().args(["submit", "--json"]).arg(spec),
                                Duration::from_secs(120),
                            )
                            .expect("submit ended");
                            (spec.clone(), out)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let reader = {
            let f = &f;
            let done = &done;
            let first_id = &first_id;
            s.spawn(move || {
                let mut reads: Vec<(String, Output, Duration)> = Vec::new();
                // While the submitters run, and at least five rounds.
                while !done.load(std::sync::atomic::Ordering::Relaxed) || reads.len() < 15 {
                    for args in [
                        vec!["status", "--json", first_id.as_str()],
                        vec!["list", "--json", "--limit", "100"],
                        vec!["report", "--format", "json"],
                    ] {
                        let t = Instant::now();
                        let out = run_bounded(f.cmd().args(&args), Duration::from_secs(120))
                            .expect("reader ended");
                        reads.push((args.join(" "), out, t.elapsed()));
                    }
                }
                reads
            })
        };
        let submits: Vec<(PathBuf, Output)> = submitters
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        (submits, reader.join().unwrap())
    });
    let took = started.elapsed();

    // No command failed.
    let mut run_ids = vec![first_id.clone()];
    for (spec, out) in &submits {
        assert_eq!(
            out.status.code(),
            Some(0),
            "submit {}: {}",
            spec.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let v = json(out);
        run_ids.push(v["run_id"].as_str().unwrap().to_string());
        all_ids.extend(submitted_ids(&v));
    }
    let stderr_of = |o: &Output| String::from_utf8_lossy(&o.stderr).into_owned();
    for (what, out, _) in &reads {
        assert_eq!(out.status.code(), Some(0), "{what}: {}", stderr_of(out));
        let _ = json(out);
    }
    assert!(reads.len() >= 3, "the readers ran: {}", reads.len());
    let slowest = reads.iter().map(|r| r.2).max().unwrap();
    let total = SUBMITTERS * EACH + 1;
    let mut unique = run_ids.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), total, "distinct run ids: {run_ids:?}");

    // The index: one entry per run, each whole.
    let index = f.path().join("state/yolo-sched/runs");
    let mut indexed = Vec::new();
    for e in std::fs::read_dir(&index).unwrap().flatten() {
        let p = e.path();
        let v: Value = serde_json::from_str(&read(&p))
            .unwrap_or_else(|e| panic!("index entry {} is corrupt: {e}", p.display()));
        let id = v["run_id"].as_str().unwrap().to_string();
        assert_eq!(p.file_stem().unwrap().to_string_lossy(), id);
        let m: Value = serde_json::from_str(&read(
            &PathBuf::from(v["workdir"].as_str().unwrap()).join("manifest.json"),
        ))
        .unwrap();
        assert_eq!(m["run_id"], id.as_str());
        indexed.push(id);
    }
    indexed.sort();
    assert_eq!(indexed, unique, "every run indexed once, nothing else");
    // list agrees.
    let list = bounded(
        f.cmd().args(["list", "--json", "--limit", "100"]),
        Duration::from_secs(120),
    );
    assert_eq!(list.status.code(), Some(0));
    let mut listed: Vec<String> = json(&list)
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run_id"].as_str().unwrap().to_string())
        .collect();
    listed.sort();
    assert_eq!(listed, unique, "list shows every run once");
    // The audit log: every line whole JSON, one submit line per run.
    let audit = read(&f.path().join("state/yolo-sched/audit.log"));
    let mut audited = Vec::new();
    for line in audit.lines() {
        let v: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("audit line is corrupt ({e}): {line:?}"));
        if v["command"] == "submit" {
            assert_eq!(v["outcome"], "ok", "{v}");
            audited.push(v["run_id"].as_str().unwrap().to_string());
        }
    }
    audited.sort();
    assert_eq!(audited, unique, "one audit line per submission");
    // No submission left a journal entry; each run has its three jobs.
    let journal = f.path().join("state/yolo-sched/submissions");
    let left: Vec<_> = std::fs::read_dir(&journal)
        .map(|l| l.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "journal entries left: {left:?}");
    // Each run's manifest holds its own three jobs, and Slurm knows no job
    // of a run that its manifest does not name (no stage submitted twice).
    // Finished jobs may already have left squeue (MinJobAge), so only that
    // direction is checked there.
    let queued = jobs_of_name("many");
    let mut every_job = Vec::new();
    for id in &unique {
        let m: Value =
            serde_json::from_str(&read(&index_workdir(&index, id).join("manifest.json"))).unwrap();
        let mine: Vec<u64> = m["stages"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|s| s["attempts"].as_array().unwrap().iter())
            .map(|a| a["job_id"].as_u64().unwrap())
            .collect();
        assert_eq!(mine.len(), 3, "run {id}: {mine:?}");
        let tagged: Vec<u64> = queued
            .iter()
            .filter(|(_, c)| c.starts_with(&format!("yolo-sched:{id}:")))
            .map(|(j, _)| *j)
            .collect();
        assert!(
            tagged.iter().all(|j| mine.contains(j)),
            "run {id}: Slurm has {tagged:?}, the manifest {mine:?}"
        );
        every_job.extend(mine);
    }
    every_job.sort();
    every_job.dedup();
    assert_eq!(every_job.len(), 3 * total, "no job shared by two runs");
    cancel_ids(&all_ids);
    eprintln!(
        "FIGURES submitters: {} submits by {SUBMITTERS} processes in {took:?}, \
         {} reads (status, list, report), the slowest {slowest:?}",
        submits.len(),
        reads.len()
    );
}
