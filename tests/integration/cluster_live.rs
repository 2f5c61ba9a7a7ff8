//! The foundation against the live cluster: `doctor`, and jobs submitted
//! through `yolo_sched::slurm` seeing their MIG slice.

use crate::common;

use std::time::Duration;

use crate::common::*;
use yolo_sched::slurm::{sbatch, Slurm};

#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up): cargo test -- --include-ignored"]
fn doctor_sees_partitions_and_the_1g5gb_type() {
    let _cluster = common::cluster(module_path!());
    let out = run(yolo().args(["doctor", "--json"]));
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["usable"], true);
    let parts: Vec<&str> = v["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert!(
        parts.contains(&"cpu") && parts.contains(&"gpu"),
        "{parts:?}"
    );
    assert!(
        v["gres"]["gpu:1g.5gb"].as_u64().unwrap() >= 4,
        "{}",
        v["gres"]
    );
    assert!(v["gres"]["gpu:2g.10gb"].as_u64().unwrap() >= 2);
    assert!(v["slurm_version"].as_str().unwrap().starts_with("22.05"));

    let table = run(yolo().arg("doctor"));
    assert_eq!(table.status.code(), Some(0));
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.contains("gpu:1g.5gb:"), "{text}");
    assert!(text.contains("usable: yes"));
    // Piped: plain lines, one per check, no table borders.
    assert!(
        text.lines().any(|l| l.starts_with("ok    slurmctld: ")),
        "{text}"
    );
    assert!(!text.contains("|---"), "{text}");
}

#[test]
fn doctor_fails_clearly_without_slurm_on_path() {
    let out = run(yolo()
        .args(["doctor", "--json"])
        .env("PATH", "/nonexistent"));
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["usable"], false);
    let cmds = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "slurm commands")
        .unwrap();
    assert_eq!(cmds["status"], "fail");
    assert!(cmds["detail"].as_str().unwrap().contains("sbatch"));
}

#[track_caller]
fn submit_env_job(slurm: &Slurm, dir: &std::path::Path, tag: &str, sleep: u32) -> u64 {
    let out = dir.join(format!("{tag}.env"));
    let script = format!(
        "echo START=$(date +%s.%N); echo NODE=$SLURMD_NODENAME; echo CVD=$CUDA_VISIBLE_DEVICES; echo GPUS=$SLURM_JOB_GPUS; sleep {sleep}; echo END=$(date +%s.%N)"
    );
    let out_arg = format!("--output={}", out.display());
    let args: Vec<String> = [
        "--partition=gpu",
        "--nodelist=node1",
        "--gres=gpu:1g.5gb:1",
        "--job-name=yolo-test-env",
        &out_arg,
        "--wrap",
        &script,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    match sbatch::try_submit(slurm, &args) {
        sbatch::Answer::Accepted(id) => id,
        other => panic!("sbatch: {other:?}"),
    }
}

#[track_caller]
fn field<'a>(text: &'a str, key: &str) -> &'a str {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key}= in {text:?}"))
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up): cargo test -- --include-ignored"]
fn a_job_submitted_through_the_slurm_module_sees_its_slice() {
    let _cluster = common::cluster(module_path!());
    let dir = shared_tempdir();
    let slurm = Slurm::from_env();
    let job = submit_env_job(&slurm, dir.path(), "single", 0);
    assert_eq!(
        wait_jobs(&[job], Duration::from_secs(60)),
        vec!["COMPLETED"]
    );
    let text = read(&dir.path().join("single.env"));
    let cvd = field(&text, "CVD");
    // 1g.5gb slices are the first four devices in the node's gres.conf.
    let idx: u32 = cvd
        .parse()
        .unwrap_or_else(|_| panic!("CUDA_VISIBLE_DEVICES={cvd:?}"));
    assert!(idx <= 3, "a 1g.5gb job got device {idx}");
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up): cargo test -- --include-ignored"]
fn two_concurrent_1g5gb_jobs_get_different_slices() {
    let _cluster = common::cluster(module_path!());
    let dir = shared_tempdir();
    let slurm = Slurm::from_env();
    let a = submit_env_job(&slurm, dir.path(), "a", 4);
    let b = submit_env_job(&slurm, dir.path(), "b", 4);
    assert_eq!(
        wait_jobs(&[a, b], Duration::from_secs(120)),
        vec!["COMPLETED", "COMPLETED"]
    );
    let ta = read(&dir.path().join("a.env"));
    let tb = read(&dir.path().join("b.env"));
    let span = |t: &str| -> (f64, f64) {
        (
            field(t, "START").parse().unwrap(),
            field(t, "END").parse().unwrap(),
        )
    };
    let ((sa, ea), (sb, eb)) = (span(&ta), span(&tb));
    assert!(
        sa < eb && sb < ea,
        "the two jobs did not overlap in time: a {sa}..{ea}, b {sb}..{eb}"
    );
    assert_eq!(field(&ta, "NODE"), "node1");
    assert_eq!(field(&tb, "NODE"), "node1");
    // The slice in the node's numbering: with ConstrainDevices (a cluster
    // with cgroups) Slurm renumbers CUDA_VISIBLE_DEVICES from 0 in each job,
    // so both may read 0.
    assert_ne!(
        field(&ta, "GPUS"),
        field(&tb, "GPUS"),
        "two running jobs share one slice"
    );
    assert!(!field(&ta, "CVD").is_empty() && !field(&tb, "CVD").is_empty());
}

/// `slurm/test-all.sh` runs the live modules that share a cluster
/// (`common::cluster_shared`) on its second cluster, beside those that take
/// one alone (`common::cluster`) on the first; its lists must name exactly
/// those modules, or a module would run in the wrong pass (or not at all).
#[test]
fn the_test_command_knows_which_modules_share_the_cluster() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let script = read(&root.join("slurm/test-all.sh"));
    let list = |name: &str| -> Vec<String> {
        let line = script
            .lines()
            .find(|l| l.starts_with(&format!("{name}=(")))
            .unwrap_or_else(|| panic!("no {name}=(…) in test-all.sh"));
        let inner = &line[name.len() + 2..line.find(')').unwrap()];
        let mut v: Vec<String> = inner.split_whitespace().map(String::from).collect();
        v.sort();
        v
    };
    let mut alone_named = list("alone");
    alone_named.extend(list("disrupting"));
    alone_named.extend(list("constrained"));
    alone_named.extend(list("later"));
    alone_named.sort();
    let (mut alone, mut shared) = (Vec::new(), Vec::new());
    for e in std::fs::read_dir(root.join("tests/integration")).unwrap() {
        let path = e.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if text.contains(concat!("common::cluster", "(module_path!())"))
            || text.contains(concat!("= cluster", "(module_path!())"))
        {
            alone.push(name.clone());
        }
        if text.contains(concat!("cluster_shared", "(module_path!())")) {
            shared.push(name);
        }
    }
    alone.sort();
    shared.sort();
    assert_eq!(
        alone_named, alone,
        "slurm/test-all.sh's alone=(…), disrupting=(…), constrained=(…) and later=(…)"
    );
    assert_eq!(list("shared"), shared, "slurm/test-all.sh's shared=(…)");
}
