//! Faults of the submitting process and of Slurm's answers, on the live
//! cluster: `submit` killed with SIGKILL after each of its Slurm calls, and an
//! `sbatch` whose answer is lost after it queued the job.
//!
//! The Slurm clients are the real ones; a stand-in directory on PATH puts a
//! small wrapper in front of `sbatch` and `scontrol` that runs the real client
//! and then kills its parent (yolo-sched) at the chosen call, or reports a
//! socket timeout though the real client succeeded.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::common::*;
use crate::run_fixture::RunFixture;
use serde_json::Value;

/// The shared run fixture, plus stand-in clients that strike.
struct Fixture {
    run: RunFixture,
}

/// Where the wrapper should strike.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// SIGKILL to yolo-sched right after the n-th `sbatch` answered.
    KillAfterSbatch(u32),
    /// SIGKILL to yolo-sched just before `scontrol release` runs.
    KillBeforeRelease,
    /// SIGKILL to yolo-sched right after `scontrol release` answered.
    KillAfterRelease,
    /// The first `sbatch` queues its job but yolo-sched sees a socket timeout.
    LoseFirstSbatchAnswer,
}

const WRAPPER: &str = r#"#!/bin/bash
# Stand-in for a Slurm client: the real one, then the fault the test asked for.
name=$(basename "$0")
real="/usr/bin/$name"
count() { local n; n=$(( $(cat "$FAULT_DIR/$1" 2>/dev/null || echo 0) + 1 )); echo "$n" >"$FAULT_DIR/$1"; echo "$n"; }
if [ "$name" = scontrol ] && [ "$1" = release ] && [ "$FAULT" = kill-before-release ]; then
    kill -KILL "$PPID"; exit 1
fi
"$real" "$@"; rc=$?
if [ "$name" = sbatch ]; then
    n=$(count sbatch)
    if [ "$FAULT" = kill-after-sbatch ] && [ "$n" = "$FAULT_AT" ]; then kill -KILL "$PPID"; fi
    if [ "$FAULT" = lose-first-answer ] && [ "$n" = 1 ]; then
        echo "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation" >&2
        exit 1
    fi
fi
if [ "$name" = scontrol ] && [ "$1" = release ] && [ "$FAULT" = kill-after-release ]; then
    kill -KILL "$PPID"
fi
exit "$rc"
"#;

impl Fixture {
    fn new() -> Fixture {
        let run = RunFixture::new();
        let bin = run.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        for name in ["sbatch", "scontrol"] {
            let p = bin.join(name);
            std::fs::write(&p, WRAPPER).unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        std::fs::create_dir_all(run.path().join("fault")).unwrap();
        Fixture { run }
    }

    fn path(&self) -> &Path {
        self.run.path()
    }

    fn spec(&self, name: &str) -> PathBuf {
        self.run.spec(name)
    }

    fn cmd(&self) -> Command {
        self.run.cmd()
    }

    /// The same, with the wrappers on PATH and `fault` armed.
    fn faulty(&self, fault: Fault) -> Command {
        let mut c = self.cmd();
        let path = format!(
            "{}:{}",
            self.path().join("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let (name, at) = match fault {
            Fault::KillAfterSbatch(n) => ("kill-after-sbatch", n),
            Fault::KillBeforeRelease => ("kill-before-release", 0),
            Fault::KillAfterRelease => ("kill-after-release", 0),
            Fault::LoseFirstSbatchAnswer => ("lose-first-answer", 0),
        };
        c.env("PATH", path)
            .env("FAULT", name)
            .env("FAULT_AT", at.to_string())
            .env("FAULT_DIR", self.path().join("fault"));
        c
    }

    fn journal_entries(&self) -> Vec<Value> {
        let dir = self.path().join("state/yolo-sched/submissions");
        let Ok(list) = std::fs::read_dir(&dir) else {
            return vec![];
        };
        list.flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
            .map(|e| serde_json::from_str(&read(&e.path())).unwrap())
            .collect()
    }
}

/// The queued jobs whose comment carries this submission token: (id, held).
fn jobs_with_token(token: &str) -> Vec<(u64, bool)> {
    tagged(token, false)
}

/// Every job slurmctld knows with this token, finished ones included (a
/// released chain's first stage may already be done).
fn all_jobs_with_token(token: &str) -> Vec<(u64, bool)> {
    tagged(token, true)
}

fn tagged(token: &str, finished_too: bool) -> Vec<(u64, bool)> {
    let mut args = vec!["--me", "-h", "-O", "JobID:|,Reason:|,Comment:|"];
    if finished_too {
        args.extend(["-t", "all"]);
    }
    let out = Command::new("squeue").args(&args).output().unwrap();
    let mut jobs = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let f: Vec<&str> = line.split('|').collect();
        if f.len() >= 3 && f[2].contains(&format!(":{token}:")) {
            jobs.push((f[0].trim().parse().unwrap(), f[1].trim() == "JobHeldUser"));
        }
    }
    jobs
}

fn cancel_ids(ids: &[u64]) {
    if ids.is_empty() {
        return;
    }
    let list: Vec<String> = ids.iter().map(u64::to_string).collect();
    let _ = Command::new("scancel").args(&list).status();
}

/// How many `sbatch` calls one submission of this spec makes.
#[track_caller]
fn stage_count(f: &Fixture, spec: &Path) -> u32 {
    let out = run(f.cmd().args(["submit", "--dry-run", "--json"]).arg(spec));
    assert_eq!(out.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    // The dry run's sbatch lines carry the comment the real jobs get.
    for j in v["jobs"].as_array().unwrap() {
        assert!(
            j["sbatch"]
                .as_str()
                .unwrap()
                .contains("--comment=yolo-sched:"),
            "{j}"
        );
    }
    let _ = std::fs::remove_dir_all(f.path().join("run"));
    v["jobs"].as_array().unwrap().len() as u32
}

/// Kill `submit` at `fault`; then check what is left, what the next commands
/// say and do, and that the workdir can be used as documented.
fn killed_submit(fault: Fault, name: &str) {
    let f = Fixture::new();
    let spec = f.spec(name);
    let stages = stage_count(&f, &spec);
    let out = common::run_bounded(
        f.faulty(fault).args(["submit", "--json"]).arg(&spec),
        Duration::from_secs(120),
    )
    .expect("submit ended");
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&out.status),
        Some(9),
        "submit was to be killed at {fault:?}: {out:?}"
    );
    let entries = f.journal_entries();
    assert_eq!(entries.len(), 1, "one journal entry: {entries:?}");
    let token = entries[0]["token"].as_str().unwrap().to_string();
    let run_id = entries[0]["run_id"].as_str().unwrap().to_string();
    let released = matches!(fault, Fault::KillAfterRelease);
    // A released chain's first stage may already have run and ended.
    let queued = if released {
        all_jobs_with_token(&token)
    } else {
        jobs_with_token(&token)
    };
    let expected = match fault {
        Fault::KillAfterSbatch(n) => n,
        _ => stages,
    };
    assert_eq!(
        queued.len() as u32,
        expected,
        "jobs left by {fault:?}: {queued:?}"
    );
    assert!(
        queued.iter().all(|(_, held)| *held != released),
        "held before the release, not after: {queued:?}"
    );
    let manifest = f.path().join("run/manifest.json");
    assert_eq!(
        manifest.exists(),
        matches!(fault, Fault::KillBeforeRelease | Fault::KillAfterRelease),
        "the manifest is written after the last sbatch, before the release"
    );

    // A command that only looks says what is left and changes nothing.
    let list = run(f.cmd().args(["list"]));
    assert_eq!(list.status.code(), Some(0));
    let said = String::from_utf8_lossy(&list.stderr);
    assert!(
        said.contains(&run_id) && said.contains("yolo-sched gc"),
        "{said}"
    );
    assert_eq!(all_jobs_with_token(&token).len() as u32, expected);

    // gc undoes it (or, after the release, finishes it).
    let gc = run(f.cmd().args(["gc", "--json"]));
    assert_eq!(gc.status.code(), Some(0), "{gc:?}");
    let v: Value = serde_json::from_slice(&gc.stdout).unwrap();
    let r = &v["recovered"][0];
    assert_eq!(r["run_id"], run_id.as_str(), "{v}");
    assert!(f.journal_entries().is_empty(), "the entry is gone after gc");
    let left = jobs_with_token(&token);
    if released {
        assert_eq!(r["cancelled"].as_array().unwrap().len(), 0, "{v}");
        let all = all_jobs_with_token(&token);
        assert_eq!(
            all.len() as u32,
            stages,
            "a released chain goes on: {all:?}"
        );
        assert!(manifest.exists());
        // The run is a real run: status knows it, cancel stops it.
        let st = run(f.cmd().args(["status", "--json", &run_id]));
        assert_eq!(st.status.code(), Some(0), "{st:?}");
        let c = run(f.cmd().args(["cancel", &run_id]));
        assert_eq!(c.status.code(), Some(0), "{c:?}");
    } else {
        assert_eq!(
            r["cancelled"].as_array().unwrap().len() as u32,
            expected,
            "{v}"
        );
        assert!(
            left.is_empty(),
            "no held job of a dead submission survives gc: {left:?}"
        );
        assert!(
            !manifest.exists(),
            "the manifest of a run that never ran is removed"
        );
        // The workdir can be submitted again.
        let again = run(f.cmd().args(["submit", "--json"]).arg(&spec));
        assert_eq!(again.status.code(), Some(0), "{again:?}");
        let v: Value = serde_json::from_slice(&again.stdout).unwrap();
        let ids = crate::common::submitted_ids(&v);
        cancel_ids(&ids);
    }
    cancel_ids(&left.iter().map(|(id, _)| *id).collect::<Vec<_>>());
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up)"]
fn submit_killed_after_the_first_sbatch_leaves_nothing_after_gc() {
    let _cluster = common::cluster(module_path!());
    killed_submit(Fault::KillAfterSbatch(1), "kill1");
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up)"]
fn submit_killed_between_stages_leaves_nothing_after_gc() {
    let _cluster = common::cluster(module_path!());
    killed_submit(Fault::KillAfterSbatch(2), "kill2");
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up)"]
fn submit_killed_after_the_last_sbatch_leaves_nothing_after_gc() {
    let _cluster = common::cluster(module_path!());
    let f = Fixture::new();
    let n = stage_count(&f, &f.spec("probe"));
    drop(f);
    killed_submit(Fault::KillAfterSbatch(n), "killlast");
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up)"]
fn submit_killed_before_the_release_leaves_no_run_after_gc() {
    let _cluster = common::cluster(module_path!());
    killed_submit(Fault::KillBeforeRelease, "killrel");
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up)"]
fn submit_killed_after_the_release_leaves_a_real_run() {
    let _cluster = common::cluster(module_path!());
    killed_submit(Fault::KillAfterRelease, "killdone");
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up)"]
fn submit_killed_then_submitted_again_needs_no_gc() {
    let _cluster = common::cluster(module_path!());
    let f = Fixture::new();
    let spec = f.spec("killagain");
    let out = common::run_bounded(
        f.faulty(Fault::KillBeforeRelease)
            .args(["submit", "--json"])
            .arg(&spec),
        Duration::from_secs(120),
    )
    .expect("submit ended");
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&out.status),
        Some(9)
    );
    let token = f.journal_entries()[0]["token"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(!jobs_with_token(&token).is_empty());
    // submit itself undoes the interrupted submission into its workdir.
    let again = run(f.cmd().args(["submit", "--json"]).arg(&spec));
    assert_eq!(again.status.code(), Some(0), "{again:?}");
    assert!(
        jobs_with_token(&token).is_empty(),
        "the dead submission's jobs are gone"
    );
    let v: Value = serde_json::from_slice(&again.stdout).unwrap();
    let ids = crate::common::submitted_ids(&v);
    cancel_ids(&ids);
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up)"]
fn a_lost_sbatch_answer_adopts_the_job_instead_of_submitting_it_twice() {
    let _cluster = common::cluster(module_path!());
    let f = Fixture::new();
    let spec = f.spec("lost");
    let stages = stage_count(&f, &spec);
    let out = run(f
        .faulty(Fault::LoseFirstSbatchAnswer)
        .args(["submit", "--json"])
        .arg(&spec));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ids = crate::common::submitted_ids(&v);
    assert_eq!(ids.len() as u32, stages);
    // The wrapper ran sbatch exactly once per stage: the lost answer was
    // resolved by looking the job up, not by submitting it again.
    let calls = read(&f.path().join("fault/sbatch"));
    assert_eq!(calls.trim(), stages.to_string(), "sbatch calls");
    let m: Value = serde_json::from_str(&read(&f.path().join("run/manifest.json"))).unwrap();
    let first = m["stages"][0]["attempts"][0]["job_id"].as_u64().unwrap();
    assert_eq!(first, ids[0], "the adopted job is the one recorded");
    assert!(
        f.journal_entries().is_empty(),
        "a finished submission leaves no journal"
    );
    cancel_ids(&ids);
}
