//! Isolation between jobs on a cluster configured like a production site
//! (`CGROUPS=1 slurm/cluster.sh up`: task/cgroup,task/affinity,
//! proctrack/cgroup, memory consumable, cgroup.conf constraining cores,
//! devices, RAM and swap; and, as `HIDEPID=1` comes with it, every job's
//! `/proc` mounted `hidepid=2`). Each test fails on a cluster without them
//! (`isolation_none_live` shows what a job can do there).
//!
//! The fake GPUs are character devices of major 240 with no driver behind
//! them: opening one a job may use reaches the (absent) driver and fails with
//! ENXIO; one the job's devices cgroup denies fails with EPERM before that.
//! Every node's `gpuN` has minor N, so only devices of one node are told
//! apart here (on a real cluster another node's devices are not on the
//! node at all). The nodes advertise 16 CPUs on a host with fewer: Slurm
//! binds a job only when the CPU ids it gave exist on the host (slurmd logs
//! "more resources configured than exist" otherwise and leaves the job on
//! every CPU), so the CPU test uses the first ids of an empty node.
//!
//! The module takes the cluster alone: the CPU test needs node2 empty, the
//! memory and two-user tests share small1 (one at a time).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use crate::common::*;
use serde_json::Value;

/// small1 (seven 1g.5gb slices of one A100) holds one test at a time.
static SMALL1: Mutex<()> = Mutex::new(());

fn small1() -> std::sync::MutexGuard<'static, ()> {
    SMALL1.lock().unwrap_or_else(|e| e.into_inner())
}

/// The cluster must enforce isolation, or every test here would fail for
/// the wrong reason.
#[track_caller]
fn constrained() -> common::ClusterGuard {
    let guard = common::cluster(module_path!());
    let out = Command::new("scontrol")
        .args(["show", "config"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("task/cgroup") && text.contains("ConstrainDevices        = yes"),
        "isolation_live needs a cluster with cgroups (CGROUPS=1 slurm/cluster.sh up); \
         SLURM_CONF={:?} has none",
        std::env::var("SLURM_CONF").ok()
    );
    guard
}

/// The probe run inside a job: which device files of its node it can open
/// (`ok`, or the errno's name), and its CPUs as the kernel and Slurm see them.
const PROBE: &str = r#"#!/usr/bin/env python3
import errno, glob, json, os, subprocess
node = os.environ["SLURMD_NODENAME"]
opened = {}
for p in sorted(glob.glob("/dev/yolo-fakegpu/%s/nvidia*" % node)):
    try:
        os.close(os.open(p, os.O_RDONLY))
        opened[os.path.basename(p)] = "ok"
    except OSError as e:
        opened[os.path.basename(p)] = errno.errorcode.get(e.errno, str(e.errno))
status = dict(l.split(":\t", 1) for l in open("/proc/self/status").read().splitlines() if ":\t" in l)
show = subprocess.run(["scontrol", "show", "job", "-d", os.environ["SLURM_JOB_ID"]],
                      capture_output=True, text=True).stdout
cpu_ids = [w.split("=", 1)[1] for w in show.split() if w.startswith("CPU_IDs=")]
print(json.dumps({
    "node": node,
    "gpus": os.environ.get("SLURM_JOB_GPUS", ""),
    "open": opened,
    "nproc": len(os.sched_getaffinity(0)),
    "cpus_allowed": status.get("Cpus_allowed_list", "").strip(),
    "cpu_ids": cpu_ids[0] if cpu_ids else "",
    "cpus_on_node": os.environ.get("SLURM_CPUS_ON_NODE", ""),
}))
"#;

/// Run the probe as a batch job with `args`, waiting for it; its JSON line.
fn probe_job(dir: &Path, name: &str, args: &[&str]) -> Value {
    let probe = dir.join("probe.py");
    if !probe.exists() {
        std::fs::write(&probe, PROBE).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&probe, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let out_file = dir.join(format!("{name}.out"));
    let out = Command::new("sbatch")
        .args([
            "--wait",
            "--parsable",
            "-J",
            &format!("iso-{name}"),
            "-t",
            "5",
        ])
        .arg(format!("--output={}", out_file.display()))
        .args(args)
        .arg(&probe)
        .output()
        .unwrap();
    let text = std::fs::read_to_string(&out_file).unwrap_or_default();
    assert!(
        out.status.success(),
        "sbatch {args:?}: {}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let line = text
        .lines()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("job {name} printed no probe line:\n{text}"));
    serde_json::from_str(line).unwrap()
}

#[test]
#[ignore = "needs the local Slurm cluster with cgroups (CGROUPS=1 slurm/cluster.sh up): cargo test -- --include-ignored"]
fn a_job_opens_only_the_device_files_of_what_it_was_given() {
    let _cluster = constrained();
    let dir = shared_tempdir();
    // node1's gres.conf: 1g.5gb nvidia0-3, 2g.10gb nvidia4-5, a100 nvidia6 (also its 8 shards).
    let slice = probe_job(
        dir.path(),
        "slice",
        &[
            "-p",
            "gpu",
            "-w",
            "node1",
            "--gres=gpu:1g.5gb:1",
            "-c",
            "1",
            "--mem=200M",
        ],
    );
    let own = format!("nvidia{}", slice["gpus"].as_str().unwrap());
    let opened = slice["open"].as_object().unwrap();
    assert_eq!(opened.len(), 7, "{slice}");
    assert_eq!(
        opened[&own], "ENXIO",
        "its own slice passes the cgroup and reaches the (absent) driver: {slice}"
    );
    for (file, result) in opened.iter().filter(|(f, _)| **f != own) {
        // Another 1g.5gb or 2g.10gb slice, the a100 (another GPU), and the
        // a100's device that its shards are.
        assert_eq!(result, "EPERM", "{file} was not denied: {slice}");
    }
    // A shard holds the a100's device file, and no slice's.
    let shard = probe_job(
        dir.path(),
        "shard",
        &[
            "-p",
            "gpu",
            "-w",
            "node1",
            "--gres=shard:1",
            "-c",
            "1",
            "--mem=200M",
        ],
    );
    let opened = shard["open"].as_object().unwrap();
    assert_eq!(opened["nvidia6"], "ENXIO", "{shard}");
    for i in 0..6 {
        assert_eq!(opened[&format!("nvidia{i}")], "EPERM", "{shard}");
    }
    // A job without GPUs opens none.
    let none = probe_job(
        dir.path(),
        "none",
        &["-p", "cpu", "-w", "node1", "-c", "1", "--mem=200M"],
    );
    assert!(
        none["open"]
            .as_object()
            .unwrap()
            .values()
            .all(|r| r == "EPERM"),
        "{none}"
    );
}

#[test]
#[ignore = "needs the local Slurm cluster with cgroups (CGROUPS=1 slurm/cluster.sh up): cargo test -- --include-ignored"]
fn a_job_s_cpus_are_its_own() {
    let _cluster = constrained();
    let host_cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let busy = Command::new("squeue")
        .args(["-h", "-w", "node2", "-t", "RUNNING,COMPLETING", "-o", "%i"])
        .output()
        .unwrap();
    assert!(
        busy.stdout.is_empty(),
        "node2 must be empty for this test (the module takes the cluster alone): {}",
        String::from_utf8_lossy(&busy.stdout)
    );
    let dir = shared_tempdir();
    // One CPU each, at once (the probe takes a second; a shared hold makes
    // them overlap): Slurm gives them CPU ids 0 and 1, which this host has.
    let jobs = host_cpus.min(2);
    let probes: Vec<Value> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..jobs)
            .map(|i| {
                let d = dir.path().to_path_buf();
                s.spawn(move || {
                    probe_job(
                        &d,
                        &format!("cpu{i}"),
                        &["-p", "cpu", "-w", "node2", "-c", "1", "--mem=200M"],
                    )
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for p in &probes {
        assert_eq!(
            p["nproc"], 1,
            "the job runs on more CPUs than Slurm gave it: {p}"
        );
        assert_eq!(p["cpus_on_node"], "1", "{p}");
        assert_eq!(
            p["cpus_allowed"], p["cpu_ids"],
            "the kernel's CPUs are not the ones Slurm allocated: {p}"
        );
    }
    if probes.len() == 2 && probes[0]["cpu_ids"] != probes[1]["cpu_ids"] {
        assert_ne!(
            probes[0]["cpus_allowed"], probes[1]["cpus_allowed"],
            "{probes:?}"
        );
    }
}

/// The stand-in trainer behind a wrapper that first does `prelude` (shell).
fn wrapped_trainer(dir: &Path, name: &str, prelude: &str) -> PathBuf {
    let standin = copy_for_everyone(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/standin/yolo"),
        dir,
    );
    let path = dir.join(name);
    std::fs::write(
        &path,
        format!(
            "#!/bin/bash\nif [ \"$1\" = train ]; then\n{prelude}\nfi\nexec {} \"$@\"\n",
            standin.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn spec_text(name: &str, workdir: &Path, data: &Path, resources: &str) -> String {
    format!(
        "version = 1\n[run]\nname = \"{name}\"\npartition = \"small\"\nworkdir = \"{}\"\n\
         [train]\nmodel = \"yolov8n.yaml\"\ndata = \"{}\"\nepochs = 3\nimgsz = 64\nbatch = 8\n\
         [stages]\nprepare = false\n[stages.export]\nenabled = false\n{resources}",
        workdir.display(),
        data.display()
    )
}

fn dataset_in(dir: &Path) -> PathBuf {
    let data = dir.join("dataset");
    if !data.exists() {
        copy_dir(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/pcb/dataset"),
            &data,
        );
        let _ = Command::new("chmod")
            .args(["-R", "a+rX"])
            .arg(&data)
            .status();
    }
    data.join("data.yaml")
}

/// What one user's training found out about the other's, from inside its
/// job: whether it can signal the peer's process, read its environment and
/// command line, list its run directory, open its slice; and what its `/proc`
/// lists: the peer's pid, its own process and its parent (the training's
/// wrapper), and the owners of every process it lists.
const PEER_PROBE: &str = r#"#!/usr/bin/env python3
import errno, json, os, signal, sys
pid, gpu, workdir = int(sys.argv[1]), sys.argv[2], sys.argv[3]
node = os.environ["SLURMD_NODENAME"]
def attempt(f):
    try:
        f()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
def open_dev(i):
    return lambda: os.close(os.open("/dev/yolo-fakegpu/%s/nvidia%s" % (node, i), os.O_RDONLY))
def read(path):
    return lambda: open(path, "rb").read()
def owner(p):
    try:
        for line in open("/proc/%d/status" % p):
            if line.startswith("Uid:"):
                return int(line.split()[1])
    except OSError:
        return None
listed = {int(n) for n in os.listdir("/proc") if n.isdigit()}
print(json.dumps({
    "me": os.getuid(),
    "signal": attempt(lambda: os.kill(pid, 0)),
    "environ": attempt(read("/proc/%d/environ" % pid)),
    "cmdline": attempt(read("/proc/%d/cmdline" % pid)),
    "workdir": attempt(lambda: os.listdir(workdir)),
    "peer_device": attempt(open_dev(gpu)),
    "own_device": attempt(open_dev(os.environ.get("SLURM_JOB_GPUS", "x"))),
    "peer_listed": pid in listed,
    "own_listed": os.getpid() in listed and os.getppid() in listed,
    "owners": sorted({u for u in map(owner, listed) if u is not None}),
}))
"#;

/// One user's training, as the other saw it from inside its job.
pub(crate) struct PeerView {
    pub user: &'static str,
    /// The user's uid (the owner of the file its training announced itself in).
    pub uid: u32,
    /// The pid its training announced (the wrapper's shell, alive until the
    /// other's probe is written), which the other's probe looked for.
    pub pid: u32,
    /// The slice (GRES index) its training ran on.
    pub slice: String,
    /// What its probe found out about the other's training.
    pub probe: Value,
}

/// Two users' trainings on two slices of small1's A100 at once, each probing
/// the other's from inside its job (`PEER_PROBE`) while the other waits in
/// its wrapper; both complete. The caller judges what each could do.
pub(crate) fn two_users_probe_each_other(tag: &str) -> [PeerView; 2] {
    let users = ["ys-iso-ann", "ys-iso-ben"];
    ensure_users(true, &users);
    let dir = shared_tempdir();
    let exchange = dir.path().join("exchange");
    std::fs::create_dir(&exchange).unwrap();
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    std::fs::set_permissions(&exchange, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let probe = dir.path().join("peer-probe.py");
    std::fs::write(&probe, PEER_PROBE).unwrap();
    std::fs::set_permissions(&probe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let data = dataset_in(dir.path());
    let yolo_sched = bin_for_everyone();
    let mut jobs = Vec::new();
    for (me, peer) in [(users[0], users[1]), (users[1], users[0])] {
        let home = PathBuf::from(format!("/home/{me}"));
        let workdir = home.join(format!("iso-run-{tag}"));
        let _ = Command::new("rm").arg("-rf").arg(&workdir).status();
        // The training announces itself (its pid, its slice, its run
        // directory), waits for the other user's, probes it, and stays until
        // the other's probe is written: each is alive while probed.
        let prelude = format!(
            "x={x}\nprintf '%s %s %s\\n' $$ \"$SLURM_JOB_GPUS\" {workdir} >$x/{me}.tmp && mv $x/{me}.tmp $x/{me}\n\
             for _ in $(seq 1500); do [ -s $x/{peer} ] && break; sleep 0.2; done\n\
             read -r ppid pgpu pdir <$x/{peer}\n\
             {probe} \"$ppid\" \"$pgpu\" \"$pdir\" >$x/{me}.probe.tmp 2>&1; mv $x/{me}.probe.tmp $x/{me}.probe\n\
             for _ in $(seq 1500); do [ -s $x/{peer}.probe ] && break; sleep 0.2; done",
            x = exchange.display(),
            workdir = workdir.display(),
            probe = probe.display(),
        );
        let trainer = wrapped_trainer(dir.path(), &format!("yolo-{me}"), &prelude);
        let spec = dir.path().join(format!("{me}.toml"));
        std::fs::write(&spec, spec_text(&format!("iso-{me}"), &workdir, &data, "")).unwrap();
        std::fs::set_permissions(&spec, std::fs::Permissions::from_mode(0o644)).unwrap();
        let mut c = Command::new("runuser");
        c.args(["-u", me, "--", "env"])
            .arg(format!("HOME={}", home.display()))
            .arg(format!("XDG_STATE_HOME={}/.local/state", home.display()))
            .arg(format!("YOLO_SCHED_YOLO={}", trainer.display()))
            .arg("YOLO_STANDIN_EPOCH_SECONDS=0.3")
            .arg("NO_COLOR=1")
            .arg(&yolo_sched)
            .args(["submit", "--json"])
            .arg(&spec);
        let out = run(&mut c);
        assert_eq!(out.status.code(), Some(0), "submit as {me}");
        let sub: Value = serde_json::from_slice(&out.stdout).unwrap();
        jobs.extend(submitted_ids(&sub));
    }
    let states = wait_jobs(&jobs, Duration::from_secs(240));
    assert!(states.iter().all(|s| s == "COMPLETED"), "{states:?}");
    users.map(|me| {
        let announced = exchange.join(me);
        let line = read(&announced);
        let mut words = line.split_whitespace();
        let pid = words.next().and_then(|p| p.parse().ok());
        let probe: Value = serde_json::from_str(read(&exchange.join(format!("{me}.probe"))).trim())
            .unwrap_or_else(|e| panic!("{me}'s probe: {e}"));
        let uid = std::fs::metadata(&announced).unwrap().uid();
        assert_eq!(
            probe["me"],
            uid,
            "{me}'s training ran as {me}, who wrote {}: {probe}",
            announced.display()
        );
        PeerView {
            user: me,
            uid,
            pid: pid.unwrap_or_else(|| panic!("{me} announced no pid: {line}")),
            slice: words.next().unwrap_or("").to_string(),
            probe,
        }
    })
}

#[test]
#[ignore = "needs the local Slurm cluster with cgroups (CGROUPS=1 slurm/cluster.sh up): cargo test -- --include-ignored"]
fn two_users_trainings_on_two_slices_of_one_gpu_cannot_reach_each_other() {
    let _cluster = constrained();
    let _small1 = small1();
    let views = two_users_probe_each_other("cgroups");
    for (i, view) in views.iter().enumerate() {
        let (me, probe) = (view.user, &view.probe);
        let peer = &views[1 - i];
        assert_eq!(
            probe["signal"], "EPERM",
            "{me} could signal the other's training: {probe}"
        );
        // hidepid=2: the other's process is not there at all, so nothing of
        // it can be read (without it: EACCES for the environment, and the
        // command line readable by anyone).
        assert_eq!(
            probe["peer_listed"], false,
            "{me} lists {}'s training (pid {}) in /proc: is /proc mounted hidepid=2 in the jobs \
             (HIDEPID=1 slurm/cluster.sh up)? {probe}",
            peer.user, peer.pid
        );
        assert_eq!(
            probe["environ"], "ENOENT",
            "{me} reached the other's environment: {probe}"
        );
        assert_eq!(
            probe["cmdline"], "ENOENT",
            "{me} reached the other's command line: {probe}"
        );
        assert_eq!(
            probe["owners"],
            serde_json::json!([view.uid]),
            "{me} lists processes of other users (root's included): {probe}"
        );
        assert_eq!(
            probe["own_listed"], true,
            "{me} no longer sees its own processes: {probe}"
        );
        assert_eq!(
            probe["workdir"], "EACCES",
            "{me} listed the other's run directory: {probe}"
        );
        assert_eq!(
            probe["peer_device"], "EPERM",
            "{me} opened the other's slice: {probe}"
        );
        assert_eq!(
            probe["own_device"], "ENXIO",
            "{me}'s own slice was denied: {probe}"
        );
    }
    assert_ne!(views[0].uid, views[1].uid);
    assert_ne!(
        views[0].slice, views[1].slice,
        "two slices of one GPU: {} {}",
        views[0].slice, views[1].slice
    );
}

#[test]
#[ignore = "needs the local Slurm cluster with cgroups (CGROUPS=1 slurm/cluster.sh up): cargo test -- --include-ignored"]
fn a_job_over_its_memory_is_killed_alone_and_status_says_host_memory() {
    let _cluster = constrained();
    let _small1 = small1();
    let dir = shared_tempdir();
    let data = dataset_in(dir.path());
    let submit = |name: &str, trainer: &Path, resources: &str, epoch_seconds: &str| {
        let spec = dir.path().join(format!("{name}.toml"));
        let workdir = dir.path().join("runs").join(name);
        std::fs::write(&spec, spec_text(name, &workdir, &data, resources)).unwrap();
        let mut c = yolo();
        c.env("XDG_STATE_HOME", dir.path().join("state"))
            .env("YOLO_SCHED_YOLO", trainer)
            .env("YOLO_STANDIN_EPOCH_SECONDS", epoch_seconds);
        let out = run(c.args(["submit", "--json"]).arg(&spec));
        assert_eq!(out.status.code(), Some(0), "submit {name}");
        let sub: Value = serde_json::from_slice(&out.stdout).unwrap();
        (
            sub["run_id"].as_str().unwrap().to_string(),
            submitted_ids(&sub),
        )
    };
    let plain = wrapped_trainer(dir.path(), "yolo-plain", ":");
    let (neighbour, neighbour_jobs) = submit("iso-neighbour", &plain, "", "3");
    wait_until(
        Duration::from_secs(60),
        "the neighbour's training runs",
        || job_state(neighbour_jobs[0]).as_deref() == Some("RUNNING"),
    );
    // 300 MB asked; the training grows to 1.5 GB, 20 MB at a time.
    let hog = wrapped_trainer(
        dir.path(),
        "yolo-hog",
        "python3 -c 'import time\nb = []\nfor _ in range(75):\n    b.append(bytearray(20 << 20)); time.sleep(0.02)'",
    );
    let (hog_run, hog_jobs) = submit("iso-hog", &hog, "[resources]\nmem = \"300M\"\n", "0.3");
    let states = wait_jobs(&hog_jobs, Duration::from_secs(120));
    assert_eq!(states[0], "OUT_OF_MEMORY", "{states:?}");
    assert_eq!(
        job_state(neighbour_jobs[0]).as_deref(),
        Some("RUNNING"),
        "the neighbour must still train when the other job is killed"
    );
    let st = |run_id: &str| -> Value {
        let mut c = yolo();
        c.env("XDG_STATE_HOME", dir.path().join("state"));
        serde_json::from_slice(&run(c.args(["status", "--json", run_id])).stdout).unwrap()
    };
    let hog_status = st(&hog_run);
    assert_eq!(hog_status["state"], "failed", "{hog_status}");
    let why = hog_status["why"].as_str().unwrap_or("");
    assert!(
        why.contains("ran out of host memory") && why.contains("not GPU memory"),
        "{hog_status}"
    );
    assert!(
        why.contains("300M") && why.contains("set `mem` higher"),
        "{why}"
    );
    let mut c = yolo();
    c.env("XDG_STATE_HOME", dir.path().join("state"));
    let text = run(c.args(["status", &hog_run]));
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("ran out of host memory"),
        "status in words says it too"
    );
    let states = wait_jobs(&neighbour_jobs, Duration::from_secs(120));
    assert!(states.iter().all(|s| s == "COMPLETED"), "{states:?}");
    assert_eq!(st(&neighbour)["state"], "completed");
}

#[test]
#[ignore = "needs the local Slurm cluster with cgroups (CGROUPS=1 slurm/cluster.sh up): cargo test -- --include-ignored"]
fn with_memory_consumable_every_slice_of_small1_still_fills() {
    let _cluster = constrained();
    let _small1 = small1();
    // Memory is allocated now: each stage asks (16000 − 500 reserve) / 7 =
    // 2214 MiB, within its share of small1's 16000 MB, so all seven run at once.
    crate::resources_live::k_runs_overlap("small", 7, "iso-fill-", (2, "2214M"));
}

#[test]
#[ignore = "needs the local Slurm cluster with cgroups (CGROUPS=1 slurm/cluster.sh up): cargo test -- --include-ignored"]
fn doctor_reports_the_isolation_in_force() {
    let _cluster = constrained();
    let out = run(yolo().args(["doctor", "--json"]));
    assert_eq!(out.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let checks = v["checks"].as_array().unwrap();
    for name in [
        "task plugin",
        "process tracking",
        "memory allocation",
        "device isolation",
        "memory isolation",
        "cpu isolation",
        "gres device files",
    ] {
        let c = checks
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("no `{name}` check: {v}"));
        assert_eq!(c["status"], "ok", "{c}");
    }
    // Process visibility is the host's: doctor on this host reads this
    // host's /proc, and in a job it reads the job's, hidepid=2 in force.
    let visibility = |v: &Value| {
        v["checks"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["name"] == "process visibility"))
            .cloned()
            .unwrap_or_else(|| panic!("no `process visibility` check: {v}"))
    };
    let here = visibility(&v);
    assert_eq!(
        here["status"],
        if crate::isolation_none_live::host_hides_processes() {
            "ok"
        } else {
            "warn"
        },
        "{here}"
    );
    let in_job = visibility(&doctor_in_a_job());
    assert_eq!(in_job["status"], "ok", "{in_job}");
    let detail = in_job["detail"].as_str().unwrap_or("");
    assert!(
        detail.contains("/proc is mounted with hidepid=")
            && detail.contains("a user sees only their own processes"),
        "{in_job}"
    );
}

/// `yolo-sched doctor --json` run in a batch job on node1; its report.
pub(crate) fn doctor_in_a_job() -> Value {
    let dir = shared_tempdir();
    let dir = dir.path();
    let script = dir.join("doctor.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh
NO_COLOR=1 {} doctor --json
",
            bin_for_everyone().display()
        ),
    )
    .unwrap();
    let out_file = dir.join("doctor.out");
    let out = Command::new("sbatch")
        .args([
            "--wait",
            "-J",
            "iso-doctor",
            "-p",
            "cpu",
            "-w",
            "node1",
            "-t",
            "5",
        ])
        .args(["-c", "1", "--mem=500M"])
        .arg(format!("--output={}", out_file.display()))
        .arg(&script)
        .output()
        .unwrap();
    let text = read(&out_file);
    // doctor's exit status tells failures from warnings; its report is all
    // this needs.
    let start = text
        .find('{')
        .unwrap_or_else(|| panic!("doctor in a job printed no report ({out:?}):\n{text}"));
    serde_json::from_str(&text[start..])
        .unwrap_or_else(|e| panic!("doctor's report in a job: {e}\n{text}"))
}
