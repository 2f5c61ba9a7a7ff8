//! Out of GPU memory on a small slice, live: the stand-in trainer ends as
//! CUDA out-of-memory does on the 1g.5gb devices (`YOLO_STANDIN_OOM_DEVICES`,
//! devices 0–3 of the local cluster's GPU nodes), and the run moves to the
//! next larger slice, automatically (`on_oom = "resume-bigger"`, within
//! `on_oom_steps`) or by hand (`resume --gpu bigger`), and resumes from its
//! checkpoint.

use std::time::{Duration, Instant};

use crate::common::{self, *};
use crate::run_fixture::RunFixture;
use serde_json::Value;

/// Devices the local cluster gives 1g.5gb jobs (docs/local-cluster.md).
const SMALL_SLICES: &str = "0,1,2,3";
/// … and 1g.5gb plus 2g.10gb jobs.
const SMALL_AND_MEDIUM: &str = "0,1,2,3,4,5";

#[track_caller]
fn status(f: &RunFixture, run_id: &str) -> Value {
    let out = run(f.cmd().args(["status", "--json", run_id]));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"))
}

/// Poll until the run is neither pending nor running, the newest train
/// attempt's job has left Slurm's queue, and the run has stayed so for a
/// quiet period (or `limit` passes). Slurm can show the failed attempt's job
/// ended before the escalation's new attempt is in the manifest (seen under
/// load), so one settled read is not enough: the run must read the same for
/// the quiet period, measured from the last change.
fn settle(f: &RunFixture, run_id: &str, limit: Duration) -> Value {
    let quiet = common::patience(Duration::from_secs(3));
    let mut last: Option<(Value, Instant)> = None;
    let mut result = Value::Null;
    common::wait_until(limit, &format!("run {run_id} settled"), || {
        let st = status(f, run_id);
        let state = st["state"].as_str().unwrap_or("").to_string();
        let settled = !matches!(state.as_str(), "pending" | "running")
            && newest_train_job(&st).is_none_or(|job| {
                common::job_state(job).is_none_or(|s| {
                    !matches!(
                        s.as_str(),
                        "PENDING" | "RUNNING" | "CONFIGURING" | "COMPLETING" | "REQUEUED"
                    )
                })
            });
        if !settled {
            last = None;
            return false;
        }
        let key = (st["state"].clone(), newest_train_job(&st));
        match &last {
            Some((seen, since)) if *seen == serde_json::json!([key.0, key.1]) => {
                result = st;
                since.elapsed() >= quiet
            }
            _ => {
                last = Some((serde_json::json!([key.0, key.1]), Instant::now()));
                false
            }
        }
    });
    result
}

/// The job id of the train stage's newest attempt.
fn newest_train_job(st: &Value) -> Option<u64> {
    st["stages"]
        .as_array()?
        .iter()
        .find(|s| s["stage"] == "train")?["attempts"]
        .as_array()?
        .last()?["job_id"]
        .as_u64()
}

fn train_slices(st: &Value) -> Vec<String> {
    st["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["stage"] == "train")
        .unwrap()["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["gres"].as_str().unwrap_or("").to_string())
        .collect()
}

fn spec(f: &RunFixture, name: &str, resources: &str) -> std::path::PathBuf {
    f.spec_with(
        name,
        &format!("[resources]\ngpu = \"1g.5gb\"\ntime = \"00:10:00\"\n{resources}"),
    )
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up)"]
fn out_of_memory_on_1g_moves_training_to_2g_and_the_run_completes() {
    let _cluster = common::cluster_shared(module_path!());
    let f = RunFixture::new();
    let spec = spec(&f, "oomup", "on_oom = \"resume-bigger\"\n");
    let mut cmd = f.cmd();
    cmd.env("YOLO_STANDIN_OOM_DEVICES", SMALL_SLICES);
    let out = run(cmd.args(["submit", "--json"]).arg(&spec));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let run_id = v["run_id"].as_str().unwrap();
    // `watch` follows the run through its escalation to the end: the job
    // rewrites the manifest before it exits, and a watch that kept the
    // manifest it started with saw attempt 1 failed and its export cancelled,
    // and stopped there with "failed" (it did, before `run_status` read the
    // manifest again after each answer of Slurm's).
    let watch = common::run_bounded(
        f.cmd().args(["watch", "--interval", "0.5", run_id]),
        Duration::from_secs(300),
    )
    .expect("watch ended");
    assert_eq!(
        watch.status.code(),
        Some(0),
        "watch stopped before the escalated run ended: {watch:?}"
    );
    let st = settle(&f, run_id, Duration::from_secs(240));
    assert_eq!(st["state"], "completed", "{st}");
    assert_eq!(train_slices(&st), ["gpu:1g.5gb:1", "gpu:2g.10gb:1"], "{st}");
    // It continued from its checkpoint rather than starting over.
    let resumed = read(&f.path().join("run/train/resumed.txt"));
    assert!(resumed.contains("resumed_from_epoch="), "{resumed}");
    let log = read(&f.path().join("run/logs/train.out"));
    assert!(
        log.contains(
            "training ended with CUDA out of memory (exit 1); resuming it on a bigger slice"
        ),
        "{log}"
    );
    // The text status names each attempt and its slice.
    let text = run(f.cmd().args(["status", run_id]));
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("on gpu:1g.5gb:1") && text.contains("on gpu:2g.10gb:1"),
        "{text}"
    );
}

/// The log is opened in append mode, so it holds every attempt: an earlier
/// attempt's out-of-memory must not move a later attempt that failed for
/// another reason (it did: the next attempt climbed again, up to the step
/// limit, for a dead dataloader).
#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up)"]
fn a_later_failure_that_is_not_memory_is_not_escalated_for_an_earlier_one() {
    let _cluster = common::cluster_shared(module_path!());
    let f = RunFixture::new();
    let spec = spec(
        &f,
        "oomthenfail",
        "on_oom = \"resume-bigger\"\non_oom_steps = 3\n",
    );
    let mut cmd = f.cmd();
    cmd.env("YOLO_STANDIN_OOM_DEVICES", SMALL_SLICES)
        .env("YOLO_STANDIN_FAIL_DEVICES", "4,5");
    let out = run(cmd.args(["submit", "--json"]).arg(&spec));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let run_id = v["run_id"].as_str().unwrap();
    let st = settle(&f, run_id, Duration::from_secs(240));
    let log = read(&f.path().join("run/logs/train.out"));
    assert_eq!(st["state"], "failed", "{st}\n{log}");
    assert_eq!(
        train_slices(&st),
        ["gpu:1g.5gb:1", "gpu:2g.10gb:1"],
        "one move for the out-of-memory, none for the dataloader: {st}\n{log}"
    );
    assert!(log.contains("DataLoader worker"), "{log}");
    assert_eq!(
        log.matches("resuming it on a bigger slice").count(),
        1,
        "{log}"
    );
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up)"]
fn the_step_limit_stops_a_training_that_does_not_fit_the_next_slice_either() {
    let _cluster = common::cluster_shared(module_path!());
    let f = RunFixture::new();
    let spec = spec(
        &f,
        "oomlimit",
        "on_oom = \"resume-bigger\"\non_oom_steps = 1\n",
    );
    let mut cmd = f.cmd();
    cmd.env("YOLO_STANDIN_OOM_DEVICES", SMALL_AND_MEDIUM);
    let out = run(cmd.args(["submit", "--json"]).arg(&spec));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let run_id = v["run_id"].as_str().unwrap();
    let st = settle(&f, run_id, Duration::from_secs(240));
    assert_eq!(st["state"], "failed", "{st}");
    assert_eq!(st["stage"], "train", "{st}");
    assert_eq!(
        train_slices(&st),
        ["gpu:1g.5gb:1", "gpu:2g.10gb:1"],
        "one move, then no more: {st}"
    );
    let log = read(&f.path().join("run/logs/train.out"));
    assert!(log.contains("1 time(s) already"), "{log}");
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up)"]
fn resume_gpu_bigger_by_hand_after_an_out_of_memory_end() {
    let _cluster = common::cluster_shared(module_path!());
    let f = RunFixture::new();
    let spec = spec(&f, "oomhand", "");
    let mut cmd = f.cmd();
    cmd.env("YOLO_STANDIN_OOM_DEVICES", SMALL_SLICES);
    let out = run(cmd.args(["submit", "--json"]).arg(&spec));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let run_id = v["run_id"].as_str().unwrap().to_string();
    let st = settle(&f, &run_id, Duration::from_secs(180));
    assert_eq!(st["state"], "failed", "on_oom = stop by default: {st}");
    // A misspelt type is refused with a suggestion, nothing submitted.
    let bad = run(f.cmd().args(["resume", &run_id, "--gpu", "2g.10g"]));
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("did you mean `2g.10gb`"),
        "{bad:?}"
    );
    // A dry run says where it would go and submits nothing.
    let dry = run(f
        .cmd()
        .args(["resume", &run_id, "--gpu", "bigger", "--dry-run"]));
    assert_eq!(dry.status.code(), Some(0), "{dry:?}");
    assert!(
        String::from_utf8_lossy(&dry.stdout)
            .contains("would run on gpu:2g.10gb:1 instead of gpu:1g.5gb:1"),
        "{dry:?}"
    );
    let mut cmd = f.cmd();
    cmd.env("YOLO_STANDIN_OOM_DEVICES", SMALL_SLICES);
    let out = run(cmd.args(["resume", &run_id, "--gpu", "bigger"]));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let st = settle(&f, &run_id, Duration::from_secs(180));
    assert_eq!(st["state"], "completed", "{st}");
    assert_eq!(train_slices(&st), ["gpu:1g.5gb:1", "gpu:2g.10gb:1"]);
}
