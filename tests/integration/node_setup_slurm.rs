//! End to end with the local Slurm cluster: node-setup on a fake A100-40GB (with
//! a sysroot of fake device nodes) writes mig1's gres.conf block and the include
//! its slurm.conf line comes from; `slurm/cluster.sh mig-up` adds mig1 with its
//! own slurmd; jobs run on its slices; a layout change while a job runs drains
//! the node, waits for the job, applies, reloads Slurm and resumes the node.
//! One test function: it restarts slurmctld, so it must not race itself.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use crate::fake_nvml::FakeNode;

const NODE: &str = "mig1";
const GRES_CONF: &str = "/etc/slurm/gres.conf";
const INCLUDE: &str = "/etc/slurm/yolo-mig-node.conf";

fn cluster_sh() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("slurm/cluster.sh")
}

/// `cluster.sh reload` and `mig-up` write the config with cluster-conf: this
/// build's, so that they never run cargo (whose lock a `cargo test` beside
/// them may hold).
const CLUSTER_CONF: (&str, &str) = ("YOLO_CLUSTER_CONF", env!("CARGO_BIN_EXE_cluster-conf"));

/// Puts the cluster back as the other tests expect it (no mig1), even when the
/// test fails, and removes the gres.conf backups node-setup made.
struct RestoreCluster {
    backups_before: Vec<PathBuf>,
}

fn gres_backups() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir("/etc/slurm")
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("gres.conf.") && n.ends_with(".bak"))
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

impl Drop for RestoreCluster {
    fn drop(&mut self) {
        let out = Command::new(cluster_sh())
            .arg("mig-down")
            .env(CLUSTER_CONF.0, CLUSTER_CONF.1)
            .output();
        match out {
            Ok(o) if o.status.success() => {}
            Ok(o) => eprintln!(
                "cluster.sh mig-down failed: {}",
                String::from_utf8_lossy(&o.stderr)
            ),
            Err(e) => eprintln!("cluster.sh mig-down: {e}"),
        }
        for b in gres_backups() {
            if !self.backups_before.contains(&b) {
                let _ = std::fs::remove_file(b);
            }
        }
    }
}

fn node_setup(node: &FakeNode, args: &[&str]) -> Command {
    let mut cmd = common::yolo();
    node.fake_env(&mut cmd);
    // For `--reconfigure-cmd "cluster.sh reload"`.
    cmd.env(CLUSTER_CONF.0, CLUSTER_CONF.1);
    cmd.arg("node-setup")
        .args(args)
        .args([
            "--node",
            NODE,
            "--gres-conf",
            GRES_CONF,
            "--slurm-include",
            INCLUDE,
        ])
        .arg("--sysroot")
        .arg(&node.sysroot);
    cmd
}

trait FakeEnv {
    fn fake_env(&self, cmd: &mut Command);
}

impl FakeEnv for FakeNode {
    fn fake_env(&self, cmd: &mut Command) {
        self.apply_env(cmd);
        cmd.env("YOLO_SCHED_SITE", self.dir.path().join("site.toml"));
    }
}

#[track_caller]
fn ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn node_line() -> String {
    let out = Command::new("scontrol")
        .args(["-o", "show", "node", NODE])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn field(line: &str, key: &str) -> String {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
        .unwrap_or_default()
        .to_string()
}

/// Wait until mig1 is idle with `gres`.
#[track_caller]
fn wait_idle_with(gres: &str, limit: Duration) {
    common::wait_for_seen(
        limit,
        &format!("{NODE} IDLE with Gres={gres}"),
        node_line,
        || {
            let line = node_line();
            (field(&line, "State") == "IDLE" && field(&line, "Gres") == gres).then_some(())
        },
    );
}

fn submit(dir: &Path, gres: &str, wrap: &str) -> u64 {
    let out = Command::new("sbatch")
        .args(["--parsable", "-p", "mig", "-w", NODE, "-n", "1"])
        .arg(format!("--gres=gpu:{gres}:1"))
        .arg("-o")
        .arg(dir.join("job-%j.out"))
        .args(["--wrap", wrap])
        .output()
        .unwrap();
    ok(&out, "sbatch");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .split(';')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// `slurmd -G -N mig1`: the GRES lines slurmd would offer.
#[track_caller]
fn slurmd_g() -> Vec<String> {
    let out = Command::new("slurmd")
        .args(["-G", "-N", NODE])
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "slurmd -G failed:\n{text}");
    text.lines()
        .filter(|l| l.contains("Gres Name=gpu"))
        .map(str::to_string)
        .collect()
}

/// Distinct capability files slurmd lists for GRES type `kind` (two per slice).
fn cap_files(listed: &[String], kind: &str) -> usize {
    let mut files: Vec<&str> = listed
        .iter()
        .filter(|l| l.contains(&format!("Type={kind} ")))
        .filter_map(|l| l.split_whitespace().find(|w| w.starts_with("File=")))
        .filter(|f| f.contains("nvidia-cap"))
        .collect();
    files.sort_unstable();
    files.dedup();
    files.len()
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up): cargo test -- --include-ignored"]
fn node_setup_serves_a_mig_node_to_real_slurm() {
    let _cluster = common::cluster(module_path!());
    let node = FakeNode::new("a100-sxm4-40gb.json");
    std::fs::write(node.dir.path().join("site.toml"), "").unwrap();
    let jobs_dir = common::shared_tempdir();
    let _restore = RestoreCluster {
        backups_before: gres_backups(),
    };

    // 1. mig1 is not in Slurm yet: apply without Slurm, then add it.
    let out = common::run(&mut node_setup(
        &node,
        &["--apply", "--layout", "1g.5gb*7", "--no-slurm"],
    ));
    ok(&out, "node-setup --apply 1g.5gb*7");
    let include = common::read(Path::new(INCLUDE));
    assert!(
        include.contains("NodeName=mig1 Gres=gpu:1g.5gb:7"),
        "{include}"
    );
    let up = Command::new(cluster_sh())
        .arg("mig-up")
        .env(CLUSTER_CONF.0, CLUSTER_CONF.1)
        .output()
        .unwrap();
    ok(&up, "cluster.sh mig-up");

    // 2. slurmd lists every slice, with node-setup's files. It prints one line
    // per file of a MultipleFiles record: the parent and two capability files.
    let listed = slurmd_g();
    assert_eq!(cap_files(&listed, "1g.5gb"), 14, "{listed:#?}");
    assert!(
        listed.iter().all(|l| l.contains("Type=1g.5gb")),
        "{listed:#?}"
    );

    // 3. the node becomes idle with the right Gres and a job runs on a slice.
    wait_idle_with("gpu:1g.5gb:7", Duration::from_secs(60));
    let job = submit(jobs_dir.path(), "1g.5gb", "echo slice");
    let states = common::wait_jobs(&[job], Duration::from_secs(60));
    assert_eq!(states, vec!["COMPLETED"], "job {job} on a 1g.5gb slice");

    // 4. A layout change while a job runs: drain, wait, apply, reload, resume.
    // The job runs until this test has seen the node drained under it (a
    // fixed `sleep` ended before a slow node-setup drained on a loaded machine).
    let release = jobs_dir.path().join("release");
    let long = submit(
        jobs_dir.path(),
        "1g.5gb",
        &format!(
            "for i in $(seq 1 3000); do [ -e '{}' ] && exit 0; sleep 0.2; done",
            release.display()
        ),
    );
    common::wait_until(
        Duration::from_secs(30),
        &format!("job {long} running"),
        || common::job_state(long).as_deref() == Some("RUNNING"),
    );
    let reload = format!("{} reload", cluster_sh().display());
    let mut cmd = node_setup(
        &node,
        &[
            "--apply",
            "--layout",
            "3g.20gb,2g.10gb,1g.5gb*2",
            "--reconfigure-cmd",
            &reload,
            "--drain-timeout",
            "120",
        ],
    );
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut saw_drain_with_job = false;
    while child.try_wait().unwrap().is_none() {
        let state = field(&node_line(), "State");
        if state.contains("DRAIN") && common::job_state(long).as_deref() == Some("RUNNING") {
            saw_drain_with_job = true;
            std::fs::write(&release, "go").unwrap();
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let out = child.wait_with_output().unwrap();
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    ok(&out, "node-setup --apply (layout change)");
    assert!(
        saw_drain_with_job,
        "mig1 was not drained while job {long} ran"
    );
    assert_eq!(
        common::wait_jobs(&[long], Duration::from_secs(30)),
        vec!["COMPLETED"]
    );
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(
        log.contains("node-setup: step 6/14: waiting for the jobs on mig1"),
        "{log}"
    );

    // 5. The node is back with the new Gres; the new slices serve jobs.
    wait_idle_with(
        "gpu:3g.20gb:1,gpu:2g.10gb:1,gpu:1g.5gb:2",
        Duration::from_secs(60),
    );
    let listed = slurmd_g();
    assert_eq!(cap_files(&listed, "3g.20gb"), 2, "{listed:#?}");
    assert_eq!(cap_files(&listed, "2g.10gb"), 2, "{listed:#?}");
    assert_eq!(cap_files(&listed, "1g.5gb"), 4, "{listed:#?}");
    let job = submit(jobs_dir.path(), "3g.20gb", "echo big");
    assert_eq!(
        common::wait_jobs(&[job], Duration::from_secs(60)),
        vec!["COMPLETED"]
    );
    // Applying the same layout again changes nothing.
    let again = common::run(&mut node_setup(
        &node,
        &[
            "--apply",
            "--layout",
            "3g.20gb,2g.10gb,1g.5gb*2",
            "--reconfigure-cmd",
            &reload,
        ],
    ));
    ok(&again, "node-setup --apply again");
    assert!(String::from_utf8_lossy(&again.stdout).contains("already applied"));

    // 6. A job that outlasts --drain-timeout: node-setup gives up, resumes the
    // node, and changes nothing.
    let blocker = submit(jobs_dir.path(), "1g.5gb", "sleep 30");
    common::wait_until(
        Duration::from_secs(30),
        &format!("job {blocker} running"),
        || common::job_state(blocker).as_deref() == Some("RUNNING"),
    );
    let timeout = common::run(&mut node_setup(
        &node,
        &[
            "--apply",
            "--layout",
            "1g.5gb*7",
            "--reconfigure-cmd",
            &reload,
            "--drain-timeout",
            "2",
        ],
    ));
    assert_eq!(timeout.status.code(), Some(1));
    let err = String::from_utf8_lossy(&timeout.stderr);
    assert!(
        err.contains(&format!("jobs {blocker} still run on mig1 after 2 s")),
        "{err}"
    );
    let line = node_line();
    assert!(
        !field(&line, "State").contains("DRAIN"),
        "not resumed: {line}"
    );
    assert_eq!(
        field(&line, "Gres"),
        "gpu:3g.20gb:1,gpu:2g.10gb:1,gpu:1g.5gb:2"
    );
    assert_eq!(common::job_state(blocker).as_deref(), Some("RUNNING"));
    ok(
        &Command::new("scancel")
            .arg(blocker.to_string())
            .output()
            .unwrap(),
        "scancel",
    );
    common::wait_jobs(&[blocker], Duration::from_secs(30));

    // 7. A failure after the drain leaves the node drained with a reason that
    // says so; the rerun converges and resumes it.
    let failed = common::run(&mut node_setup(
        &node,
        &[
            "--apply",
            "--layout",
            "1g.5gb*7",
            "--reconfigure-cmd",
            "false",
        ],
    ));
    assert_eq!(failed.status.code(), Some(1));
    let err = String::from_utf8_lossy(&failed.stderr);
    assert!(err.contains("FAILED at step 13/14 (reconfigure)"), "{err}");
    let reason = Command::new("sinfo")
        .args(["-h", "-N", "-n", NODE, "-o", "%T|%E"])
        .output()
        .unwrap();
    let reason = String::from_utf8_lossy(&reason.stdout).into_owned();
    assert!(
        reason.starts_with("drained|yolo-sched node-setup failed at step 13 (reconfigure)"),
        "{reason}"
    );
    let rerun = common::run(&mut node_setup(
        &node,
        &[
            "--apply",
            "--layout",
            "1g.5gb*7",
            "--reconfigure-cmd",
            &reload,
        ],
    ));
    ok(&rerun, "node-setup rerun after the failure");
    wait_idle_with("gpu:1g.5gb:7", Duration::from_secs(60));

    // 8. Only the include is missing: it is rewritten and Slurm reloaded, without a
    // drain, and the node (not drained) is left alone.
    std::fs::remove_file(INCLUDE).unwrap();
    let repair = common::run(&mut node_setup(
        &node,
        &[
            "--apply",
            "--layout",
            "1g.5gb*7",
            "--reconfigure-cmd",
            &reload,
        ],
    ));
    ok(&repair, "node-setup repairing the include");
    let err = String::from_utf8_lossy(&repair.stderr);
    assert!(err.contains("step 5/14: skipped"), "{err}");
    assert!(
        err.contains("mig1 was not drained; nothing to resume"),
        "{err}"
    );
    assert!(common::read(Path::new(INCLUDE)).contains("NodeName=mig1 Gres=gpu:1g.5gb:7"));
    wait_idle_with("gpu:1g.5gb:7", Duration::from_secs(60));
}
