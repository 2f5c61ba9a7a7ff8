//! Stage resources shaped to the node, on the live cluster: K runs submitted
//! together on a node with K slices train at the same time; a request no
//! node can satisfy is refused before anything is queued; Slurm's own
//! per-GPU defaults are used where a partition sets them; a job Slurm holds
//! for ever ends `watch` with exit 1; resume re-checks the cluster.
//!
//! Two cluster shapes (slurm/cluster.sh): node1/node2 (16 CPUs, 64000 MB,
//! gpu:1g.5gb:4,gpu:2g.10gb:2,gpu:a100:1, partitions cpu and gpu) and small1
//! (16 CPUs, 16000 MB, gpu:1g.5gb:7, partitions small and smalldef, the
//! latter with DefCpuPerGPU=2 DefMemPerGPU=2000). The tests here share
//! small1 and change partition limits, so they run one at a time.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::Value;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = shared_tempdir();
        let data = dir.path().join("dataset");
        copy_dir(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/pcb/dataset"),
            &data,
        );
        Fixture { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A spec with no `cpus`, `mem` or `workers`: what a new user writes.
    fn spec(&self, name: &str, partition: &str, extra: &str) -> PathBuf {
        let text = format!(
            "version = 1\n[run]\nname = \"{name}\"\npartition = \"{partition}\"\n\
             workdir = \"{}\"\n\
             [train]\nmodel = \"yolov8n.yaml\"\ndata = \"{}\"\nepochs = 3\nimgsz = 640\nbatch = 16\n\
             [stages]\nprepare = false\n[stages.export]\nenabled = false\n{extra}",
            self.path().join("runs").join(name).display(),
            self.path().join("dataset/data.yaml").display()
        );
        let p = self.path().join(format!("{name}.toml"));
        std::fs::write(&p, text).unwrap();
        p
    }

    fn cmd(&self, epoch_seconds: &str) -> Command {
        let mut c = yolo();
        c.env("XDG_STATE_HOME", self.path().join("state"))
            .env(
                "YOLO_SCHED_YOLO",
                Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/standin/yolo"),
            )
            .env("YOLO_STANDIN_EPOCH_SECONDS", epoch_seconds)
            .env("YOLO_SCHED_WATCH_INTERVAL", "0.3")
            .env("YOLO_SCHED_WATCH_MAX_INTERVAL", "1");
        c
    }

    #[track_caller]
    fn submit(&self, spec: &Path, epoch_seconds: &str) -> Value {
        let out = run(self.cmd(epoch_seconds).args(["submit", "--json"]).arg(spec));
        assert_eq!(out.status.code(), Some(0), "submit failed");
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

fn job_ids(submitted: &Value) -> Vec<u64> {
    submitted["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["job_id"].as_u64().unwrap())
        .collect()
}

fn record_time(workdir: &Path, which: &str, field: &str) -> chrono::DateTime<chrono::Utc> {
    let p = workdir.join("state").join(format!("train.{which}.json"));
    let v: Value = serde_json::from_str(&read(&p)).unwrap();
    v[field].as_str().unwrap().parse().unwrap()
}

/// Every job of the cluster whose name starts with `prefix` (any state).
fn queued_named(prefix: &str) -> Vec<String> {
    let out = Command::new("squeue")
        .args(["-h", "-t", "all", "-o", "%j %i %T"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with(prefix))
        .map(str::to_string)
        .collect()
}

/// A partition setting (`MaxTime`, `State`), put back however the test ends.
struct PartitionSetting {
    partition: &'static str,
    key: &'static str,
    restore: &'static str,
}

impl PartitionSetting {
    #[track_caller]
    fn set(
        partition: &'static str,
        key: &'static str,
        value: &str,
        restore: &'static str,
    ) -> PartitionSetting {
        let st = Command::new("scontrol")
            .args([
                "update",
                &format!("PartitionName={partition}"),
                &format!("{key}={value}"),
            ])
            .status()
            .unwrap();
        assert!(st.success(), "scontrol update {partition} {key}={value}");
        PartitionSetting {
            partition,
            key,
            restore,
        }
    }
}

impl Drop for PartitionSetting {
    fn drop(&mut self) {
        let _ = Command::new("scontrol")
            .args([
                "update",
                &format!("PartitionName={}", self.partition),
                &format!("{}={}", self.key, self.restore),
            ])
            .status();
    }
}

/// Submit `k` runs and check that their trainings all run at once. Each
/// training holds before its first epoch (`YOLO_STANDIN_HOLD`) until this
/// test has seen all `k` started, so a slow submission on a loaded machine
/// cannot let the first end before the last starts; a slice that is not
/// free keeps a training pending, and the wait for all `k` fails.
pub(crate) fn k_runs_overlap(partition: &str, k: usize, prefix: &str, share: (u64, &str)) {
    let f = Fixture::new();
    let hold = f.path().join(format!("{prefix}go"));
    let mut workdirs = Vec::new();
    let mut jobs = Vec::new();
    for i in 0..k {
        let spec = f.spec(&format!("{prefix}{i}"), partition, "");
        let out = run(f
            .cmd("2")
            .env("YOLO_STANDIN_HOLD", &hold)
            .args(["submit", "--json"])
            .arg(&spec));
        assert_eq!(out.status.code(), Some(0), "submit failed");
        let sub: Value = serde_json::from_slice(&out.stdout).unwrap();
        let train = &sub["jobs"][0];
        assert_eq!(train["stage"], "train");
        assert_eq!(train["gres"], "gpu:1g.5gb:1");
        assert_eq!(train["cpus"].as_u64(), Some(share.0), "{sub}");
        assert_eq!(train["mem"], share.1, "{sub}");
        workdirs.push(PathBuf::from(sub["workdir"].as_str().unwrap()));
        jobs.extend(job_ids(&sub));
    }
    common::wait_until(
        Duration::from_secs(180),
        &format!("all {k} trainings started at once"),
        || {
            workdirs
                .iter()
                .all(|w| w.join("state/train.start.json").is_file())
        },
    );
    std::fs::write(&hold, "go").unwrap();
    let states = wait_jobs(&jobs, Duration::from_secs(180));
    assert!(states.iter().all(|s| s == "COMPLETED"), "{states:?}");
    let starts: Vec<_> = workdirs
        .iter()
        .map(|w| record_time(w, "start", "started"))
        .collect();
    let ends: Vec<_> = workdirs
        .iter()
        .map(|w| record_time(w, "end", "ended"))
        .collect();
    let last_start = starts.iter().max().unwrap();
    let first_end = ends.iter().min().unwrap();
    assert!(
        last_start < first_end,
        "the {k} trainings did not all run at once: last start {last_start}, first end {first_end}"
    );
    // Each got the dataloader workers its CPUs allow, not Ultralytics' 8.
    let script = read(&workdirs[0].join("scripts/train.sh"));
    assert!(
        script.contains(&format!("workers={}", share.0 - 1)),
        "{script}"
    );
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up): cargo test -- --include-ignored"]
fn seven_runs_fill_the_seven_slices_of_a_16000_mb_node() {
    let _cluster = common::cluster(module_path!());
    let _one = serial();
    // 16 CPUs over 7 units → 2 CPUs; (16000 − 500 reserve) / 7 = 2214 MiB.
    k_runs_overlap("small", 7, "fill-small-", (2, "2214M"));
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up): cargo test -- --include-ignored"]
fn as_many_runs_as_1g_slices_fill_the_local_nodes() {
    let _cluster = common::cluster(module_path!());
    let _one = serial();
    // K from the cluster itself: 4 per node, 8 with NODES=2 as CI runs it.
    let cluster = yolo_sched::slurm::cluster::fetch(&yolo_sched::slurm::Slurm::from_env()).unwrap();
    let k: u64 = cluster
        .nodes_in("gpu")
        .map(|n| n.gres_count("gpu", Some("1g.5gb")))
        .sum();
    assert!(k >= 4, "{k}");
    // 16 CPUs over 15 units → 1 CPU; (64000 − 2000) / 15 = 4133 MiB.
    k_runs_overlap("gpu", k as usize, "fill-gpu-", (1, "4133M"));
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up): cargo test -- --include-ignored"]
fn a_request_no_node_can_satisfy_is_refused_and_nothing_is_queued() {
    let _cluster = common::cluster(module_path!());
    let _one = serial();
    let f = Fixture::new();
    let cases = [
        (
            "toomuch-mem",
            "[resources]\nmem = \"16G\"\n",
            "`resources.mem`: train asks 16.0 GiB (from the spec); the largest node with gpu:1g.5gb in partition small has 15.6 GiB",
            "set [resources] mem = \"7G\" or leave it out",
        ),
        (
            "toomuch-workers",
            "",
            "`train.workers`: train asks 21 CPUs (workers + 1, from the spec); the largest node with gpu:1g.5gb in partition small has 16",
            "set [train] workers = 15 or less",
        ),
        (
            "no-such-slice",
            "[resources]\ngpu = \"2g.10gb\"\n",
            "train asks gpu:2g.10gb, which no node in partition small has (it has gpu:1g.5gb)",
            "use partition cpu or gpu (`[run] partition`), which has it",
        ),
    ];
    for (name, extra, message, help) in cases {
        let spec = f.spec(name, "small", extra);
        if name == "toomuch-workers" {
            let text = read(&spec).replace("batch = 16\n", "batch = 16\nworkers = 20\n");
            std::fs::write(&spec, text).unwrap();
        }
        for sub in ["submit", "validate"] {
            let out = run(f.cmd("0.1").arg(sub).arg(&spec));
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{sub} {name}");
            assert!(err.contains(message), "{sub} {name}: {err}");
            assert!(err.contains(help), "{sub} {name}: {err}");
            assert!(
                err.contains(&format!("{name}.toml:")),
                "file and line: {err}"
            );
        }
        assert!(queued_named(name).is_empty(), "{name} left jobs");
        assert!(!f
            .path()
            .join("runs")
            .join(name)
            .join("manifest.json")
            .exists());
    }
    // A time limit over the partition's MaxTime, set while the cluster runs.
    let _limit = PartitionSetting::set("small", "MaxTime", "00:10:00", "INFINITE");
    let spec = f.spec("toolong", "small", "[resources]\ntime = \"00:20:00\"\n");
    let out = run(f.cmd("0.1").arg("submit").arg(&spec));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("train asks a time limit of 00:20:00; partition small allows at most 00:10:00"));
    assert!(queued_named("toolong").is_empty());
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up): cargo test -- --include-ignored"]
fn slurm_per_gpu_defaults_are_used_where_the_partition_sets_them() {
    let _cluster = common::cluster(module_path!());
    let _one = serial();
    let f = Fixture::new();
    let spec = f.spec("slurmdef", "smalldef", "");
    let explain = run(f
        .cmd("0.3")
        .args(["submit", "--dry-run", "--explain", "--workdir"])
        .arg(f.path().join("dry"))
        .arg(&spec));
    assert_eq!(explain.status.code(), Some(0));
    let text = String::from_utf8_lossy(&explain.stdout);
    assert!(
        text.contains("→ 2 CPUs (Slurm's default), 2.0 GiB (Slurm's default)"),
        "{text}"
    );
    let sub = f.submit(&spec, "0.3");
    let workdir = PathBuf::from(sub["workdir"].as_str().unwrap());
    let script = read(&workdir.join("scripts/train.sh"));
    assert!(!script.contains("--cpus-per-task"), "{script}");
    assert!(!script.contains("#SBATCH --mem"), "{script}");
    assert!(script.contains("workers=1"), "{script}");
    let id = job_ids(&sub)[0];
    let states = wait_jobs(&[id], Duration::from_secs(120));
    assert_eq!(states, ["COMPLETED"]);
    let show = Command::new("scontrol")
        .args(["show", "job", &id.to_string()])
        .output()
        .unwrap();
    let show = String::from_utf8_lossy(&show.stdout);
    assert!(
        show.contains("NumCPUs=2 "),
        "Slurm gave DefCpuPerGPU × 1: {show}"
    );
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up): cargo test -- --include-ignored"]
fn a_stage_slurm_holds_for_ever_ends_watch_with_exit_1_and_resume_rechecks() {
    let _cluster = common::cluster(module_path!());
    let _one = serial();
    let f = Fixture::new();
    // Prepare first, so train is still waiting when its limit is raised.
    let spec = f.spec("forever", "small", "[resources]\ntime = \"00:20:00\"\n");
    let text = read(&spec).replace("prepare = false\n", "");
    std::fs::write(&spec, text).unwrap();
    // The partition is down while the run is submitted and its limit
    // lowered: on a busy machine prepare can end, and train start, between
    // `submit` returning and the `scontrol update` below.
    let down = PartitionSetting::set("small", "State", "DOWN", "UP");
    let sub = f.submit(&spec, "0.1");
    let run_id = sub["run_id"].as_str().unwrap().to_string();
    let train = sub["jobs"][1]["job_id"].as_u64().unwrap();
    // An administrator shortens the partition's limit while train waits for
    // prepare: train can now never start there.
    let _limit = PartitionSetting::set("small", "MaxTime", "00:05:00", "INFINITE");
    drop(down);
    let start = Instant::now();
    let mut watch = f.cmd("0.1");
    watch.args(["watch", &run_id]);
    let out = run(&mut watch);
    assert_eq!(out.status.code(), Some(1), "watch ends instead of waiting");
    assert!(start.elapsed() < crate::common::patience(Duration::from_secs(90)));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("will never run (train): its time limit is longer than the partition allows (PartitionTimeLimit)"),
        "{stdout}"
    );
    let status = run(f.cmd("0.1").args(["status", "--json", &run_id]));
    let v: Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(v["state"], "never_runs", "{v}");

    // Cancel it; with MaxTime now below what train asks, resume refuses
    // before submitting anything.
    let cancel = run(f.cmd("0.1").args(["cancel", &run_id]));
    assert_eq!(cancel.status.code(), Some(0));
    wait_jobs(&[train], Duration::from_secs(30));
    let before = queued_named("forever.").len();
    let resume = run(f.cmd("0.1").args(["resume", &run_id]));
    let err = String::from_utf8_lossy(&resume.stderr);
    assert_eq!(resume.status.code(), Some(2), "{err}");
    assert!(
        err.contains("the cluster can no longer run what it asked for")
            && err.contains("partition small allows at most 00:05:00"),
        "{err}"
    );
    assert_eq!(
        queued_named("forever.").len(),
        before,
        "resume queued nothing"
    );
}
