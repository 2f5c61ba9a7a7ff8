//! On the live cluster: runs that end completed, failed and cancelled, and one
//! left pending (held), all in one run index; `list --json`, `status --json`
//! and `report --format json` must give each the same state.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::common::*;
use serde_json::Value;

struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A copy of the demo dataset under `name`.
    fn dataset(&self, name: &str) -> PathBuf {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/pcb/dataset");
        copy_dir(&src, &self.path().join(name));
        self.path().join(name).join("data.yaml")
    }

    fn spec(&self, name: &str, data: &Path, epochs: u32) -> PathBuf {
        let spec = format!(
            "version = 1\n[run]\nname = \"{name}\"\npartition = \"gpu\"\n\
             [train]\nmodel = \"yolov8n.yaml\"\ndata = \"{}\"\nepochs = {epochs}\nimgsz = 64\nbatch = 8\nworkers = 1\n\
             [stages.prepare]\npartition = \"cpu\"\n[stages.export]\npartition = \"cpu\"\nformats = [\"onnx\"]\n",
            data.display()
        );
        let p = self.path().join(format!("{name}.toml"));
        std::fs::write(&p, spec).unwrap();
        p
    }

    fn cmd(&self) -> Command {
        let mut c = yolo();
        c.env("XDG_STATE_HOME", self.path().join("state"))
            .env_remove("YOLO_SCHED_RUNS_DIR")
            .env(
                "YOLO_SCHED_YOLO",
                Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/standin/yolo"),
            )
            .env("YOLO_STANDIN_EPOCH_SECONDS", "0.3");
        c
    }

    #[track_caller]
    fn json(&self, args: &[&str]) -> Value {
        let out = run(self.cmd().args(args));
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// Submit; the run id and the job ids of prepare, train, export.
    #[track_caller]
    fn submit(&self, spec: &Path) -> (String, Vec<u64>) {
        let out = run(self.cmd().args(["submit", "--json"]).arg(spec));
        assert_eq!(out.status.code(), Some(0), "submit failed");
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        let jobs = v["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| j["job_id"].as_u64().unwrap())
            .collect();
        (v["run_id"].as_str().unwrap().to_string(), jobs)
    }

    /// The run's status; its `state` and `stage` are flat, as in `list --json`.
    fn state(&self, run_id: &str) -> Value {
        self.json(&["status", "--json", run_id])
    }

    #[track_caller]
    fn wait_for(&self, run_id: &str, what: &str, limit: Duration, ok: impl Fn(&Value) -> bool) {
        let last = std::cell::RefCell::new(Value::Null);
        crate::common::wait_for_seen(
            limit,
            &format!("{run_id}'s {what}"),
            || last.borrow().to_string(),
            || {
                let st = self.state(run_id);
                let done = ok(&st);
                *last.borrow_mut() = st;
                done.then_some(())
            },
        );
    }
}

fn scontrol(args: &[&str]) {
    let _ = Command::new("scontrol").args(args).status();
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up): cargo test -- --include-ignored"]
fn list_status_and_report_agree_on_live_runs() {
    let _cluster = common::cluster_shared(module_path!());
    let f = Fixture {
        dir: shared_tempdir(),
    };
    let good = f.dataset("dataset");
    let broken = f.dataset("dataset-broken");
    // A label whose class is out of range: prepare's dataset check fails.
    let first = common::first_label(&broken.parent().unwrap().join("labels/train"));
    std::fs::write(&first, "99 0.5 0.5 0.2 0.2\n").unwrap();

    let (held, held_jobs) = f.submit(&f.spec("held", &good, 3));
    // Hold train and export before prepare ends: the run stays pending.
    let ids: Vec<String> = held_jobs[1..].iter().map(u64::to_string).collect();
    scontrol(&["hold", &ids.join(",")]);
    let (completed, _) = f.submit(&f.spec("completed", &good, 3));
    let (failed, _) = f.submit(&f.spec("failed", &broken, 3));
    let (cancelled, _) = f.submit(&f.spec("cancelled", &good, 200));

    let limit = Duration::from_secs(240);
    f.wait_for(&cancelled, "training", limit, |s| {
        s["state"] == "running" && s["stage"] == "train"
    });
    assert_eq!(
        run(f.cmd().args(["cancel", &cancelled])).status.code(),
        Some(0)
    );
    let finished = |s: &Value| {
        ["completed", "failed", "cancelled", "never_runs"].contains(&s["state"].as_str().unwrap())
    };
    for r in [&completed, &failed, &cancelled] {
        f.wait_for(r, "end", limit, finished);
    }
    f.wait_for(&held, "prepare's end", limit, |s| s["state"] != "running");

    let expected = [
        (&completed, "completed", None),
        (&failed, "failed", Some("prepare")),
        (&cancelled, "cancelled", Some("train")),
        (&held, "pending", None),
    ];
    let list = f.json(&["list", "--json"]);
    let report = f.json(&["report", "--format", "json", "--section", "runs"]);
    let by_run = report["runs"]["by_run"].as_array().unwrap().clone();
    assert_eq!(by_run.len(), expected.len(), "{report}");
    for (run_id, state, stage) in expected {
        let want = (Value::from(state), stage.map_or(Value::Null, Value::from));
        let st = f.state(run_id);
        let find = |rows: &[Value]| {
            rows.iter()
                .find(|r| r["run_id"] == run_id.as_str())
                .cloned()
                .unwrap_or_else(|| panic!("{run_id} missing"))
        };
        let l = find(list.as_array().unwrap());
        let r = find(&by_run);
        assert_eq!(
            (st["state"].clone(), st["stage"].clone()),
            want,
            "status {run_id}"
        );
        assert_eq!(
            (l["state"].clone(), l["stage"].clone()),
            want,
            "list {run_id}"
        );
        assert_eq!(
            (r["state"].clone(), r["stage"].clone()),
            want,
            "report {run_id}"
        );
    }
    assert_eq!(run(f.cmd().args(["cancel", &held])).status.code(), Some(0));
}
