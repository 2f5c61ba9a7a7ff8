//! A cluster without cgroups (the default `slurm/cluster.sh up`, as many
//! sites run): what `doctor` says of it, and the gap it warns about, shown:
//! a job given one slice opens another slice's device file. The same test
//! on a cluster with cgroups is `isolation_live`.

use crate::common;

use std::process::Command;

use crate::common::*;
use serde_json::Value;

#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up): cargo test -- --include-ignored"]
fn doctor_warns_of_each_isolation_gap_and_a_job_opens_every_slice() {
    let _cluster = common::cluster(module_path!());
    let config = Command::new("scontrol")
        .args(["show", "config"])
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&config.stdout).contains("task/cgroup"),
        "isolation_none_live needs a cluster without cgroups (CGROUPS=0)"
    );
    let out = run(yolo().args(["doctor", "--json"]));
    assert_eq!(
        out.status.code(),
        Some(0),
        "gaps are warnings, not failures"
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let checks = v["checks"].as_array().unwrap();
    let status = |name: &str| {
        checks
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("no `{name}` check: {v}"))
            .clone()
    };
    for name in [
        "task plugin",
        "process tracking",
        "memory allocation",
        "device isolation",
        "memory isolation",
        "cpu isolation",
    ] {
        assert_eq!(status(name)["status"], "warn", "{}", status(name));
    }
    let devices = status("device isolation")["detail"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        devices.starts_with("any job on node1, node2")
            && devices.contains("can open every GPU and MIG slice")
            && devices.contains("set ConstrainDevices=yes in cgroup.conf"),
        "{devices}"
    );
    // Every GPU line of this cluster's gres.conf names its device file.
    assert_eq!(status("gres device files")["status"], "ok");
    // cgroups or not, other users' processes are listed unless /proc hides
    // them: the line follows this host's /proc mount.
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let hidden = mountinfo
        .lines()
        .rfind(|l| l.split_whitespace().nth(4) == Some("/proc") && l.contains(" - proc "))
        .is_some_and(|l| {
            l.contains("hidepid=") && !l.contains("hidepid=0") && !l.contains("hidepid=off")
        });
    let visibility = status("process visibility");
    assert_eq!(
        visibility["status"],
        if hidden { "ok" } else { "warn" },
        "{visibility}"
    );
    if !hidden {
        assert!(
            visibility["detail"]
                .as_str()
                .unwrap()
                .contains("mount /proc with hidepid=2"),
            "{visibility}"
        );
    }
    // What the warning means: a job with one slice opens the others.
    let dir = shared_tempdir();
    let script = dir.path().join("open.sh");
    std::fs::write(
        &script,
        "#!/bin/bash\nfor f in /dev/yolo-fakegpu/$SLURMD_NODENAME/nvidia*; do\n\
         python3 -c 'import errno, os, sys\ntry:\n    os.close(os.open(sys.argv[1], os.O_RDONLY)); print(\"ok\")\nexcept OSError as e:\n    print(errno.errorcode[e.errno])' \"$f\"\ndone\n",
    )
    .unwrap();
    let out_file = dir.path().join("open.out");
    let st = Command::new("sbatch")
        .args([
            "--wait",
            "-p",
            "gpu",
            "-w",
            "node1",
            "--gres=gpu:1g.5gb:1",
            "-t",
            "5",
        ])
        .arg(format!("--output={}", out_file.display()))
        .arg(&script)
        .status()
        .unwrap();
    assert!(st.success());
    let text = read(&out_file);
    assert_eq!(text.lines().count(), 7, "{text}");
    assert!(
        text.lines().all(|l| l == "ENXIO"),
        "without ConstrainDevices no device file is denied (each open reaches the absent driver):\n{text}"
    );
}
