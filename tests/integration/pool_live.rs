//! The exclusive pool, live: several whole GPUs of one node on the local
//! cluster's pool nodes (`POOL=1`: pool1 with `gpu:a100:4`, pool2 with
//! `gpu:h100:8`, partition `pool`; docs/local-cluster.md). The stand-in
//! trainer plays Ultralytics' DDP launcher: it checks that
//! `CUDA_VISIBLE_DEVICES` lists as many devices as `device=` names and starts
//! one child process per device, each recording its pid and what it saw.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::{self, *};
use crate::run_fixture::RunFixture;
use serde_json::Value;

/// The fixture's spec on the pool partition, with `resources` appended.
fn pool_spec(f: &RunFixture, name: &str, resources: &str) -> PathBuf {
    let p = f.spec_with(
        name,
        &format!("[resources]\ntime = \"00:10:00\"\n{resources}"),
    );
    let text = read(&p).replace("partition = \"gpu\"", "partition = \"pool\"");
    std::fs::write(&p, text).unwrap();
    p
}

/// The pool must be there: a cluster without it fails the test, saying how to get it.
#[track_caller]
fn require_pool() {
    let out = run(std::process::Command::new("sinfo").args(["-h", "-p", "pool", "-o", "%N %G"]));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("gpu:a100:4") && text.contains("gpu:h100:8"),
        "the cluster has no exclusive pool (sinfo -p pool: {text:?}); bring it up with POOL=1 slurm/cluster.sh up"
    );
}

#[track_caller]
fn status(f: &RunFixture, run_id: &str) -> Value {
    let out = run(f.cmd().args(["status", "--json", run_id]));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"))
}

/// The rank records the stand-in wrote, once all `n` are there.
fn ranks(save_dir: &Path, n: usize) -> Option<Vec<Value>> {
    let records: Vec<Value> = (0..n)
        .filter_map(|k| std::fs::read(save_dir.join(format!("ranks/rank{k}.json"))).ok())
        .filter_map(|b| serde_json::from_slice(&b).ok())
        .collect();
    (records.len() == n).then_some(records)
}

/// A process is alive (and not a zombie waiting for its parent).
fn alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit(')').next().map(|r| r.trim_start().to_string()))
        .is_some_and(|r| !r.starts_with('Z'))
}

fn state_of(f: &RunFixture, run_id: &str) -> String {
    status(f, run_id)["state"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

#[test]
#[ignore = "needs the local Slurm cluster with the pool (POOL=1 slurm/cluster.sh up)"]
fn four_gpus_of_one_node_run_four_ranks_and_cancel_leaves_none() {
    let _cluster = common::cluster_shared(module_path!());
    require_pool();
    let f = RunFixture::new();
    let spec = pool_spec(&f, "ddp4", "gpu = \"a100:4\"\n");
    let text = read(&spec).replace("epochs = 2", "epochs = 400");
    std::fs::write(&spec, text).unwrap();
    let mut cmd = f.cmd();
    cmd.env("YOLO_STANDIN_EPOCH_SECONDS", "0.5");
    let out = run(cmd.args(["submit", "--json"]).arg(&spec));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let run_id = v["run_id"].as_str().unwrap().to_string();

    // The script: four A100s of one node, the four GPUs' share of pool1 (all
    // of its GPU units: its memory; the CPUs are (workers + 1) × 4 ranks, as
    // the spec sets workers = 1), device=0,1,2,3.
    let script = read(&f.path().join("run/scripts/train.sh"));
    for line in [
        "#SBATCH --gres=gpu:a100:4\n",
        "#SBATCH --nodes=1\n",
        "#SBATCH --partition=pool\n",
        "#SBATCH --cpus-per-task=8\n",
        // Four of pool1's four GPUs: all of its 256000 MB less the 4 GiB reserve.
        "#SBATCH --mem=246G\n",
        "\nYS_DEVICE=0,1,2,3\n",
        "\"device=$YS_DEVICE\"",
        " workers=1 ",
    ] {
        assert!(script.contains(line), "{line:?} not in:\n{script}");
    }

    let save = f.path().join("run/train");
    let records = wait_for_seen(
        Duration::from_secs(180),
        "the four ranks' records",
        || format!("{}", status(&f, &run_id)),
        || ranks(&save, 4),
    );
    let mut pids = Vec::new();
    for r in &records {
        let visible = r["cuda_visible_devices"].as_str().unwrap();
        assert_eq!(visible.split(',').count(), 4, "{r}");
        assert_eq!(r["world_size"], 4, "{r}");
        assert_eq!(r["device"], "0,1,2,3", "{r}");
        pids.push(r["pid"].as_u64().unwrap());
    }
    assert!(
        pids.iter().all(|p| alive(*p)),
        "every rank runs: {records:?}"
    );
    // status names the GPUs the job holds.
    let text = run(f.cmd().args(["status", &run_id]));
    let text = String::from_utf8_lossy(&text.stdout).to_string();
    assert!(text.contains("gpu:a100:4"), "{text}");

    // report counts the four GPUs the job holds (other tests of this module
    // may hold more of pool1's A100s, never fewer).
    let out = run(f.cmd().args(["report", "--format", "json"]));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let held = report["queue"]["by_partition_type"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["partition"] == "pool" && r["type"] == "gpu:a100")
        .map_or(0, |r| r["running_slices"].as_u64().unwrap_or(0));
    assert!(held >= 4, "{}", report["queue"]);

    let out = run(f.cmd().args(["cancel", &run_id]));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // No rank outlives the job.
    wait_for_seen(
        Duration::from_secs(90),
        "every rank gone after the cancel",
        || {
            let left: Vec<u64> = pids.iter().copied().filter(|p| alive(*p)).collect();
            format!("ranks still alive after cancel: {left:?}")
        },
        || (!pids.iter().any(|p| alive(*p))).then_some(()),
    );
    wait_for_seen(
        Duration::from_secs(60),
        "the run cancelled",
        || format!("{}", status(&f, &run_id)),
        || (state_of(&f, &run_id) == "cancelled").then_some(()),
    );
}

#[test]
#[ignore = "needs the local Slurm cluster with the pool (POOL=1 slurm/cluster.sh up)"]
fn resume_of_a_ddp_training_passes_the_same_device_list() {
    let _cluster = common::cluster_shared(module_path!());
    require_pool();
    let f = RunFixture::new();
    let spec = pool_spec(&f, "ddpres", "gpus = 2\n");
    let text = read(&spec).replace("epochs = 2", "epochs = 60");
    std::fs::write(&spec, text).unwrap();
    let mut cmd = f.cmd();
    cmd.env("YOLO_STANDIN_EPOCH_SECONDS", "0.5");
    let out = run(cmd.args(["submit", "--json"]).arg(&spec));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let run_id = v["run_id"].as_str().unwrap().to_string();
    let script = read(&f.path().join("run/scripts/train.sh"));
    assert!(
        script.contains("#SBATCH --gres=gpu:a100:2\n") && script.contains("\nYS_DEVICE=0,1\n"),
        "gpus = 2 takes the smallest type with two on one node:\n{script}"
    );
    // Stop it once a checkpoint exists, then resume.
    let results = f.path().join("run/train/results.csv");
    wait_for_seen(
        Duration::from_secs(180),
        "two epochs of training",
        || format!("{}", status(&f, &run_id)),
        || (epochs_in(&results).len() >= 2).then_some(()),
    );
    let out = run(f.cmd().args(["cancel", &run_id]));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    wait_for_seen(
        Duration::from_secs(60),
        "the run cancelled",
        || format!("{}", status(&f, &run_id)),
        || (state_of(&f, &run_id) == "cancelled").then_some(()),
    );
    let out = run(f.cmd().args(["resume", &run_id]));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    wait_for_seen(
        Duration::from_secs(240),
        "the resumed run completed",
        || format!("{}", status(&f, &run_id)),
        || (state_of(&f, &run_id) == "completed").then_some(()),
    );
    let resumed = read(&f.path().join("run/train/resumed-device.txt"));
    assert_eq!(resumed, "device=0,1\n", "{resumed}");
    let records = ranks(&f.path().join("run/train"), 2).expect("both ranks of the resumed job");
    for r in &records {
        assert_eq!(
            r["cuda_visible_devices"]
                .as_str()
                .unwrap()
                .split(',')
                .count(),
            2,
            "{r}"
        );
    }
    let epochs = epochs_in(&results);
    assert_eq!(epochs.last(), Some(&60), "{epochs:?}");
}

#[test]
#[ignore = "needs the local Slurm cluster with the pool (POOL=1 slurm/cluster.sh up)"]
fn validate_refuses_a_count_no_node_of_the_pool_has_and_explain_shows_the_route() {
    let _cluster = common::cluster_shared(module_path!());
    require_pool();
    let f = RunFixture::new();
    for (name, resources, wanted) in [
        (
            "five",
            "gpu = \"a100:5\"\n",
            "train asks gpu:a100:5; the most any node in partition pool has is 4",
        ),
        ("nine", "gpus = 9\n", "no node of partition pool has 9 GPUs"),
    ] {
        let spec = pool_spec(&f, name, resources);
        for verb in ["validate", "submit"] {
            let out = run(f.cmd().arg(verb).arg(&spec));
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{verb} {name}: {out:?}");
            assert!(err.contains(wanted), "{verb} {name}: {err}");
            assert!(err.contains(&format!("{name}.toml:")), "file:line: {err}");
        }
    }
    // Nothing was submitted.
    let index = f.path().join("state/yolo-sched/runs");
    let runs = std::fs::read_dir(&index).map(|d| d.count()).unwrap_or(0);
    assert_eq!(runs, 0, "no run may be recorded");

    // `auto` with the site's exclusive pool: a YOLOv8x at 1280 px and batch
    // 64 holds on no single GPU, so it goes to several H100s of pool2.
    let site = f.path().join("site.toml");
    std::fs::write(
        &site,
        "[pools.exclusive]\npartition = \"pool\"\nmax_gpus = 8\n",
    )
    .unwrap();
    let spec = f.spec_with("big", "");
    let text = read(&spec)
        .replace("partition = \"gpu\"\n", "")
        .replace("model = \"yolov8n.yaml\"", "model = \"yolov8x.yaml\"")
        .replace("imgsz = 64", "imgsz = 1280")
        .replace("batch = 8", "batch = 64");
    std::fs::write(&spec, text).unwrap();
    let out = run(f
        .cmd()
        .env("YOLO_SCHED_SITE", &site)
        .args(["submit", "--dry-run", "--explain"])
        .arg(&spec));
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{all}");
    for wanted in [
        "no single GPU holds",
        "3 GPUs of one node: batch 64 split over 3 is batch 22 per GPU",
        "in the exclusive pool (partition pool)",
        "gpu:h100:3",
        "per GPU (3 training processes)",
    ] {
        assert!(all.contains(wanted), "{wanted:?} not in:\n{all}");
    }
    let script = read(&f.path().join("run/scripts/train.sh"));
    for line in [
        "#SBATCH --gres=gpu:h100:3\n",
        "#SBATCH --nodes=1\n",
        "#SBATCH --partition=pool\n",
        "\nYS_DEVICE=0,1,2\n",
    ] {
        assert!(script.contains(line), "{line:?} not in:\n{script}");
    }
}

#[test]
#[ignore = "needs the local Slurm cluster with the pool (POOL=1 slurm/cluster.sh up)"]
fn out_of_memory_on_the_largest_gpu_moves_training_to_two_gpus_of_the_pool() {
    let _cluster = common::cluster_shared(module_path!());
    require_pool();
    let f = RunFixture::new();
    // The site lets a training grow to four GPUs of one node of `pool`.
    let site = f.path().join("site.toml");
    std::fs::write(
        &site,
        "[pools.exclusive]\npartition = \"pool\"\nmax_gpus = 4\n",
    )
    .unwrap();
    // The A100 of node1/node2 (partition gpu) is device 6 there
    // (docs/local-cluster.md): the stand-in runs out of memory on it.
    let spec = f.spec_with(
        "ddpoom",
        "[resources]\ngpu = \"a100\"\ntime = \"00:10:00\"\non_oom = \"resume-bigger\"\n",
    );
    let mut cmd = f.cmd();
    cmd.env("YOLO_SCHED_SITE", &site)
        .env("YOLO_STANDIN_OOM_DEVICES", "6");
    let out = run(cmd.args(["submit", "--json"]).arg(&spec));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let run_id = v["run_id"].as_str().unwrap().to_string();
    let st = wait_for_seen(
        Duration::from_secs(240),
        "the run ended (completed or failed)",
        || format!("{}", status(&f, &run_id)),
        || {
            let st = status(&f, &run_id);
            (st["state"] == "completed" || st["state"] == "failed").then_some(st)
        },
    );
    let log = read(&f.path().join("run/logs/train.out"));
    assert_eq!(st["state"], "completed", "{st}\n{log}");
    let slices: Vec<String> = st["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["stage"] == "train")
        .unwrap()["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["gres"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(slices, ["gpu:a100:1", "gpu:a100:2"], "{st}");
    assert!(
        log.contains("not the planned device=0: training with device=0,1"),
        "the moved job trains on both GPUs it holds:\n{log}"
    );
    let resumed = read(&f.path().join("run/train/resumed-device.txt"));
    assert_eq!(resumed, "device=0,1\n");
    let records = ranks(&f.path().join("run/train"), 2).expect("two ranks after the move");
    for r in &records {
        assert_eq!(r["world_size"], 2, "{r}");
    }
}

#[test]
#[ignore = "needs the local Slurm cluster with the pool (POOL=1 slurm/cluster.sh up)"]
fn the_time_limit_signal_stops_every_rank_and_the_requeued_job_resumes_on_as_many_gpus() {
    let _cluster = common::cluster_shared(module_path!());
    require_pool();
    let f = RunFixture::new();
    let spec = pool_spec(&f, "ddpusr1", "gpu = \"h100:2\"\n");
    let text = read(&spec).replace("epochs = 2", "epochs = 60");
    std::fs::write(&spec, text).unwrap();
    let mut cmd = f.cmd();
    cmd.env("YOLO_STANDIN_EPOCH_SECONDS", "0.5");
    let out = run(cmd.args(["submit", "--json"]).arg(&spec));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let run_id = v["run_id"].as_str().unwrap().to_string();
    let save = f.path().join("run/train");
    let results = save.join("results.csv");
    let records = wait_for_seen(
        Duration::from_secs(180),
        "both ranks' records and two epochs",
        || format!("{}", status(&f, &run_id)),
        || ranks(&save, 2).filter(|_| epochs_in(&results).len() >= 2),
    );
    let pids: Vec<u64> = records.iter().map(|r| r["pid"].as_u64().unwrap()).collect();
    let st = status(&f, &run_id);
    let job = st["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["stage"] == "train")
        .unwrap()["job_id"]
        .as_u64()
        .unwrap();
    // What Slurm sends two minutes before the time limit (--signal=B:USR1@120).
    let out = run(std::process::Command::new("scancel")
        .args(["--batch", "--signal=USR1"])
        .arg(job.to_string()));
    assert!(out.status.success(), "{out:?}");
    wait_for_seen(
        Duration::from_secs(60),
        "every rank gone after the requeue",
        || {
            let left: Vec<u64> = pids.iter().copied().filter(|p| alive(*p)).collect();
            format!("ranks still alive after the requeue: {left:?}")
        },
        || (!pids.iter().any(|p| alive(*p))).then_some(()),
    );
    wait_for_seen(
        Duration::from_secs(240),
        "the requeued run completed",
        || format!("{}", status(&f, &run_id)),
        || (state_of(&f, &run_id) == "completed").then_some(()),
    );
    let log = read(&f.path().join("run/logs/train.out"));
    assert!(
        log.contains("time limit near; stopping training and requeueing"),
        "{log}"
    );
    let resumed = read(&save.join("resumed-device.txt"));
    assert_eq!(resumed, "device=0,1\n", "{log}");
    assert_eq!(epochs_in(&results).last(), Some(&60));
}
