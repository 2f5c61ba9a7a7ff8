//! Slurm clients run by yolo-sched get the clients' documented defaults, not
//! the user's interactive settings (`SQUEUE_STATES`, `SQUEUE_FORMAT`,
//! `SLURM_TIME_FORMAT`, …), which would change what the parsers read. A
//! stand-in `squeue` records the environment it was given.

use std::os::unix::fs::PermissionsExt;

use crate::common::*;

#[test]
fn slurm_clients_get_the_documented_defaults_not_the_users_settings() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let record = dir.path().join("squeue.env");
    let squeue = bin.join("squeue");
    std::fs::write(
        &squeue,
        format!("#!/bin/sh\nenv > {}\nexit 0\n", record.display()),
    )
    .unwrap();
    std::fs::set_permissions(&squeue, std::fs::Permissions::from_mode(0o755)).unwrap();

    let workdir = dir.path().join("run");
    std::fs::create_dir_all(&workdir).unwrap();
    let manifest = serde_json::json!({
        "schema_version": 1, "run_id": "env-1", "name": "env", "user": "u", "host": "h",
        "submitted_at": "2026-11-30T12:00:00Z", "workdir": workdir, "spec_file": "/s.toml",
        "spec_hash": "0", "spec_text": "", "variants": 1, "gpu_explanation": [], "estimate_gib": null,
        "stages": [{"stage": "train", "job_name": "env.train", "partition": null, "gres": null,
            "time": "1:00:00", "cpus": 1, "mem": "1G", "tasks": 1, "depends_on": [],
            "script": "scripts/train.sh",
            "attempts": [{"attempt": 1, "job_id": 4242, "array": null, "dependency": null,
                "submitted_at": "2026-11-30T12:00:00Z"}]}]
    });
    std::fs::write(workdir.join("manifest.json"), manifest.to_string()).unwrap();

    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let out = run(yolo()
        .env("PATH", path)
        .env("SQUEUE_STATES", "RUNNING")
        .env("SQUEUE_FORMAT", "%i")
        .env("SLURM_TIME_FORMAT", "relative")
        .args(["status", "--json"])
        .arg(&workdir));
    assert_eq!(out.status.code(), Some(0));
    let env = read(&record);
    assert!(!env.contains("SQUEUE_STATES="), "{env}");
    assert!(!env.contains("SQUEUE_FORMAT="), "{env}");
    assert!(
        env.lines().any(|l| l == "SLURM_TIME_FORMAT=standard"),
        "{env}"
    );
}
