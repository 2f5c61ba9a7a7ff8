//! A cluster without cgroups (the default `slurm/cluster.sh up`, as many
//! sites run): what `doctor` says of it, and the gap it warns about, shown:
//! a job given one slice opens another slice's device file, and two users'
//! trainings list each other's processes and read their command lines (no
//! `hidepid`). The same tests on a cluster with cgroups and `hidepid=2` are
//! `isolation_live`'s.

use crate::common;

use std::process::Command;

use crate::common::*;
use serde_json::Value;

/// Whether this host's `/proc` (the last proc mount at /proc) hides other
/// users' processes (`hidepid=` 1 or 2).
pub(crate) fn host_hides_processes() -> bool {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    mountinfo
        .lines()
        .rfind(|l| l.split_whitespace().nth(4) == Some("/proc") && l.contains(" - proc "))
        .is_some_and(|l| {
            l.contains("hidepid=") && !l.contains("hidepid=0") && !l.contains("hidepid=off")
        })
}

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
    let hidden = host_hides_processes();
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

#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up): cargo test -- --include-ignored"]
fn two_users_trainings_see_each_other_s_processes_and_slices() {
    let _cluster = common::cluster(module_path!());
    let config = Command::new("scontrol")
        .args(["show", "config"])
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&config.stdout).contains("task/cgroup"),
        "isolation_none_live needs a cluster without cgroups (CGROUPS=0)"
    );
    // The same trainings as isolation_live's: here each lists the other's
    // process and reads its command line (run directory, dataset,
    // arguments), and opens the other's slice. What still holds without
    // cgroups or hidepid: no signal to another user's process, no read of
    // its environment or of a private home.
    let views = crate::isolation_live::two_users_probe_each_other("none");
    for (i, view) in views.iter().enumerate() {
        let (me, probe) = (view.user, &view.probe);
        let peer = &views[1 - i];
        assert_eq!(
            probe["peer_listed"], true,
            "{me} should list {}'s training (pid {}) without hidepid: {probe}",
            peer.user, peer.pid
        );
        assert_eq!(probe["cmdline"], "ok", "{probe}");
        let owners = probe["owners"].as_array().unwrap();
        assert!(
            owners.contains(&Value::from(peer.uid)) && owners.contains(&Value::from(0)),
            "{me} lists the other's and root's processes: {probe}"
        );
        assert_eq!(probe["own_listed"], true, "{probe}");
        assert_eq!(probe["peer_device"], "ENXIO", "{probe}");
        assert_eq!(probe["signal"], "EPERM", "{probe}");
        assert_eq!(probe["environ"], "EACCES", "{probe}");
        assert_eq!(probe["workdir"], "EACCES", "{probe}");
    }
    // doctor in a job reads the same /proc as on this host.
    let in_job = crate::isolation_live::doctor_in_a_job();
    let visibility = in_job["checks"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == "process visibility"))
        .cloned()
        .unwrap_or_else(|| panic!("no `process visibility` check: {in_job}"));
    assert_eq!(
        visibility["status"],
        if host_hides_processes() { "ok" } else { "warn" },
        "{visibility}"
    );
}
