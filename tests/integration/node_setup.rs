//! `yolo-sched node-setup` on the fake NVML library: show, dry run, apply,
//! idempotency, refusals, busy GPUs, pending MIG mode, non-root, --check, a
//! process killed part-way, and two applies at once. No Slurm (`--no-slurm`).

use crate::common;
use crate::fake_nvml;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::fake_nvml::FakeNode;

/// A fake node with a gres.conf and a site file of its own.
struct Node {
    fake: FakeNode,
    gres: PathBuf,
    site: PathBuf,
    audit: PathBuf,
}

impl Node {
    fn new(fixture: &str) -> Node {
        Node::with(FakeNode::new(fixture))
    }

    fn with(fake: FakeNode) -> Node {
        let dir = fake.dir.path().to_path_buf();
        let gres = dir.join("gres.conf");
        std::fs::write(
            &gres,
            "# hand-written\nNodeName=other Name=gpu File=/dev/nvidia9\n",
        )
        .unwrap();
        let audit = dir.join("audit.log");
        let site = dir.join("site.toml");
        std::fs::write(
            &site,
            format!("[paths]\naudit_log = {:?}\n", audit.display().to_string()),
        )
        .unwrap();
        Node {
            fake,
            gres,
            site,
            audit,
        }
    }

    /// node-setup on the fake node, `--no-slurm`.
    fn cmd(&self, args: &[&str]) -> Command {
        self.node_setup(args, true)
    }

    fn node_setup(&self, args: &[&str], no_slurm: bool) -> Command {
        let mut cmd = common::yolo();
        self.fake.apply_env(&mut cmd);
        cmd.env("YOLO_SCHED_SITE", &self.site)
            .env_remove(PAUSE)
            .arg("node-setup")
            .args(args)
            .args(["--node", "fake1"]);
        if no_slurm {
            cmd.arg("--no-slurm");
        }
        cmd.arg("--gres-conf")
            .arg(&self.gres)
            .arg("--sysroot")
            .arg(&self.fake.sysroot);
        cmd
    }

    fn run(&self, args: &[&str]) -> Output {
        common::run(&mut self.cmd(args))
    }

    /// As `cmd`, but node-setup talks to Slurm (give stand-ins on PATH).
    fn cmd_with_slurm(&self, args: &[&str]) -> Command {
        self.node_setup(args, false)
    }

    fn state_bytes(&self) -> Vec<u8> {
        let path = PathBuf::from(format!("{}.state.json", self.fake.fixture.display()));
        std::fs::read(path).unwrap_or_default()
    }

    /// Instances per GPU as `profile@start`, from the fake's state through `--show --json`.
    #[track_caller]
    fn instances(&self) -> Vec<Vec<String>> {
        let out = self.run(&["--show", "--json"]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["gpus"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| {
                let mut list: Vec<String> = g["gpu_instances"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|gi| {
                        format!(
                            "{}@{}",
                            gi["profile_name"]
                                .as_str()
                                .unwrap()
                                .trim_start_matches("MIG "),
                            gi["placement"]["start"]
                        )
                    })
                    .collect();
                list.sort();
                list
            })
            .collect()
    }

    fn gres_text(&self) -> String {
        common::read(&self.gres)
    }
}

const PAUSE: &str = "YOLO_SCHED_NODE_SETUP_PAUSE_AFTER";

fn code(out: &Output) -> i32 {
    out.status.code().expect("exited normally")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn mig_lines(text: &str) -> usize {
    text.lines()
        .filter(|l| l.contains("MultipleFiles="))
        .count()
}

#[test]
fn show_json_matches_the_fixture() {
    let node = Node::new("mixed-2xh200-1xv100.json");
    let out = node.run(&["--show", "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let shown: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let fixture: serde_json::Value =
        serde_json::from_str(&common::read(&node.fake.fixture)).unwrap();
    let gpus = shown["gpus"].as_array().unwrap();
    let fixture_gpus = fixture["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), fixture_gpus.len());
    for (i, (g, f)) in gpus.iter().zip(fixture_gpus).enumerate() {
        assert_eq!(g["index"], i as u64);
        assert_eq!(g["uuid"], f["uuid"]);
        assert_eq!(g["minor"], f["minor"]);
        let model = &fixture["models"][f["model"].as_str().unwrap()];
        assert_eq!(g["name"], model["name"]);
        assert_eq!(g["memory_mib"], model["memory_mib"]);
        assert_eq!(g["mig_capable"], model.get("mig").is_some());
    }
    // The table names every GPU too.
    let table = node.run(&["--show"]);
    assert_eq!(code(&table), 0);
    for f in fixture_gpus {
        let model = &fixture["models"][f["model"].as_str().unwrap()];
        assert!(stdout(&table).contains(model["name"].as_str().unwrap()));
    }
}

#[test]
fn no_driver_is_a_clear_message() {
    let node = Node::new("a100-sxm4-40gb.json");
    let mut cmd = node.cmd(&["--show"]);
    cmd.env(
        "YOLO_SCHED_NVML_LIB",
        node.fake.dir.path().join("missing/libnvidia-ml.so.1"),
    );
    let out = common::run(&mut cmd);
    assert_eq!(code(&out), 1);
    let err = stderr(&out);
    assert!(err.contains("missing/libnvidia-ml.so.1"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn dry_run_changes_nothing_and_prints_the_plan_and_diff() {
    let node = Node::new("a100-sxm4-40gb.json");
    let _ = node.run(&["--show"]); // creates the state file
    let state_before = node.state_bytes();
    assert!(!state_before.is_empty());
    let gres_before = node.gres_text();
    let out = node.run(&["--dry-run", "--layout", "1g.5gb*7"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("MIG mode → on"), "{text}");
    assert!(text.contains("create 1g.5gb@0"), "{text}");
    assert_eq!(
        text.matches("\n+NodeName=fake1 AutoDetect=off Name=gpu Type=1g.5gb")
            .count(),
        7,
        "{text}"
    );
    assert!(text.contains("NodeName=fake1 Gres=gpu:1g.5gb:7"), "{text}");
    assert!(
        text.contains("AccountingStorageTRES=gres/gpu,gres/gpu:1g.5gb"),
        "{text}"
    );
    assert_eq!(
        node.state_bytes(),
        state_before,
        "dry run changed the driver state"
    );
    assert_eq!(node.gres_text(), gres_before, "dry run changed gres.conf");
    // Non-root may dry-run too: JSON form, same plan.
    let json = node.run(&["--dry-run", "--layout", "1g.5gb*7", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(
        v["decision"]["gpus"][0]["create"].as_array().unwrap().len(),
        7
    );
    assert!(v["gres_conf_diff"]
        .as_str()
        .unwrap()
        .contains("+# BEGIN yolo-sched node-setup fake1"));
}

#[test]
fn apply_again_change_layout_and_check() {
    let node = Node::new("a100-sxm4-40gb.json");
    let check = node.run(&["--check", "--layout", "1g.5gb*7"]);
    assert_eq!(code(&check), 1, "an untouched node does not match");

    let out = node.run(&["--apply", "--layout", "1g.5gb*7"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stderr(&out).contains("node-setup: step 9/14: creating the planned instances"));
    assert_eq!(
        node.instances(),
        vec![(0..7).map(|s| format!("1g.5gb@{s}")).collect::<Vec<_>>()]
    );
    let gres = node.gres_text();
    assert!(
        gres.starts_with("# hand-written\nNodeName=other Name=gpu File=/dev/nvidia9\n"),
        "hand-written lines survive"
    );
    assert_eq!(mig_lines(&gres), 7);
    // Every capability file gres.conf names exists in the sysroot (the fake made them).
    for line in gres.lines().filter(|l| l.contains("MultipleFiles=")) {
        let files = line
            .split("MultipleFiles=")
            .nth(1)
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap();
        for f in files.split(',') {
            assert!(
                Path::new(f).exists(),
                "{f} named in gres.conf does not exist"
            );
        }
    }
    assert_eq!(code(&node.run(&["--check", "--layout", "1g.5gb*7"])), 0);
    let audit = common::read(&node.audit);
    assert!(audit.contains("\"command\":\"node-setup\""), "{audit}");

    let again = node.run(&["--apply", "--layout", "1g.5gb*7"]);
    assert_eq!(code(&again), 0);
    assert!(
        stderr(&again).contains("already applied"),
        "{}",
        stderr(&again)
    );
    assert_eq!(node.gres_text(), gres, "already applied rewrote gres.conf");

    let change = node.run(&["--apply", "--layout", "3g.20gb,2g.10gb,1g.5gb*2"]);
    assert_eq!(code(&change), 0, "{}", stderr(&change));
    let mut got = node.instances()[0].clone();
    got.sort();
    // The two 1g at slices 0 and 1 are kept; 2g and 3g are created beside them.
    assert_eq!(got, vec!["1g.5gb@0", "1g.5gb@1", "2g.10gb@2", "3g.20gb@4"]);
    let gres2 = node.gres_text();
    assert_eq!(mig_lines(&gres2), 4);
    assert!(gres2.contains("Type=3g.20gb") && gres2.contains("Type=2g.10gb"));
    assert_eq!(
        code(&node.run(&["--check", "--layout", "3g.20gb,2g.10gb,1g.5gb*2"])),
        0
    );
    assert_eq!(code(&node.run(&["--check", "--layout", "1g.5gb*7"])), 1);

    // Back to whole GPU: instances gone, MIG off, a File= line.
    let off = node.run(&["--apply", "--layout", "disabled"]);
    assert_eq!(code(&off), 0, "{}", stderr(&off));
    let st = node.fake.state();
    assert_eq!(node.instances(), vec![Vec::<String>::new()]);
    assert!(st.to_string().contains("false"), "{st}");
    let gres3 = node.gres_text();
    assert_eq!(mig_lines(&gres3), 0);
    assert!(gres3.contains("Name=gpu Type=a100 File="), "{gres3}");
}

#[test]
fn impossible_layouts_are_refused_before_anything_changes() {
    let node = Node::new("a100-sxm4-40gb.json");
    let _ = node.run(&["--show"]);
    let state_before = node.state_bytes();
    let gres_before = node.gres_text();
    for (layout, needle) in [
        (
            "4g.20gb,3g.20gb",
            "hardware refuses 4g.20gb together with 3g.20gb",
        ),
        ("1g.5gb*8", "1g.5gb"),
        ("1g.5gg*2", "did you mean `1g.5gb`"),
        ("balancd", "Did you mean `balanced`"),
    ] {
        for action in ["--apply", "--dry-run"] {
            let out = node.run(&[action, "--layout", layout]);
            assert_eq!(code(&out), 2, "{layout} {action}: {}", stderr(&out));
            assert!(stderr(&out).contains(needle), "{layout}: {}", stderr(&out));
        }
    }
    assert_eq!(node.state_bytes(), state_before);
    assert_eq!(node.gres_text(), gres_before);
}

#[test]
fn busy_gpu_is_refused_unless_forced() {
    // The fixture's process runs in the 3g instance (GPU instance 2).
    let node = Node::new("h200-partitioned-busy.json");
    let before = node.instances();
    let out = node.run(&["--apply", "--layout", "1g.18gb*7"]);
    assert_eq!(code(&out), 1);
    let err = stderr(&out);
    assert!(
        err.contains("pid 4242") && err.contains("30000 MiB"),
        "{err}"
    );
    assert!(err.contains("--force"), "{err}");
    assert_eq!(
        node.instances(),
        before,
        "a refused apply changed instances"
    );

    // A layout that keeps the busy 3g is not blocked by it.
    let keep = node.run(&["--apply", "--layout", "3g.71gb,1g.18gb*4"]);
    assert_eq!(code(&keep), 0, "{}", stderr(&keep));
    assert!(node.instances()[0].contains(&"3g.71gb@4".to_string()));

    // A process on the GPU outside any instance: refused, then --force goes ahead.
    let node = Node::with(FakeNode::with_fixture("h200-partitioned-busy.json", |v| {
        let p = &mut v["gpus"][0]["processes"][0];
        let obj = p.as_object_mut().unwrap();
        obj.remove("gpu_instance_id");
        obj.remove("compute_instance_id");
    }));
    let refused = node.run(&["--apply", "--layout", "1g.18gb*7"]);
    assert_eq!(code(&refused), 1);
    assert!(stderr(&refused).contains("pid 4242"));
    let forced = node.run(&["--apply", "--layout", "1g.18gb*7", "--force"]);
    assert_eq!(code(&forced), 0, "{}", stderr(&forced));
    assert_eq!(node.instances()[0].len(), 7);
}

fn needs_reset() -> FakeNode {
    FakeNode::with_fixture("a100-sxm4-40gb.json", |v| {
        v["gpus"][0]["mode_change_requires_reset"] = serde_json::Value::Bool(true);
    })
}

#[test]
fn pending_mig_mode_stops_then_converges_after_a_reset() {
    let node = Node::with(needs_reset());
    let out = node.run(&["--apply", "--layout", "1g.5gb*7"]);
    assert_eq!(code(&out), 1);
    let err = stderr(&out);
    assert!(err.contains("reset or reboot required"), "{err}");
    assert!(err.contains("FAILED at step 8/14 (mode)"), "{err}");
    assert_eq!(code(&node.run(&["--check", "--layout", "1g.5gb*7"])), 1);
    // Rerunning without a reset still stops, with the same message.
    let again = node.run(&["--apply", "--layout", "1g.5gb*7"]);
    assert!(stderr(&again).contains("reset or reboot required"));
    // The admin resets the GPU; the rerun converges.
    let reset = node.fake.ctl(&["reset", "--gpu", "0"]);
    assert!(
        reset.status.success(),
        "{}",
        String::from_utf8_lossy(&reset.stderr)
    );
    let done = node.run(&["--apply", "--layout", "1g.5gb*7"]);
    assert_eq!(code(&done), 0, "{}", stderr(&done));
    assert_eq!(node.instances()[0].len(), 7);
    assert_eq!(code(&node.run(&["--check", "--layout", "1g.5gb*7"])), 0);
}

#[test]
fn reset_flag_runs_the_reset_command() {
    let node = Node::with(needs_reset());
    let ctl = fake_nvml::built().join("fake-nvml-ctl");
    let reset_cmd = format!(
        "{} --fixture {} --sysroot {} reset --gpu {{index}}",
        ctl.display(),
        node.fake.fixture.display(),
        node.fake.sysroot.display()
    );
    let out = node.run(&[
        "--apply",
        "--layout",
        "balanced",
        "--reset",
        "--reset-cmd",
        &reset_cmd,
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("reset; MIG mode on is now current"),
        "{}",
        stderr(&out)
    );
    assert_eq!(node.instances()[0].len(), 4);
}

#[test]
fn non_root_is_refused_clearly() {
    let node = Node::new("a100-sxm4-40gb.json");
    // As root, but the driver says no permission.
    let mut cmd = node.cmd(&["--apply", "--layout", "1g.5gb*7"]);
    cmd.env("FAKE_NVML_SIMULATE_NON_ROOT", "1");
    let out = common::run(&mut cmd);
    assert_eq!(code(&out), 1);
    assert!(stderr(&out).contains("need root"), "{}", stderr(&out));
    assert_eq!(node.instances(), vec![Vec::<String>::new()]);

    // A real non-root user: refused before NVML is touched; dry run works.
    if common::as_root_and_nobody("node-setup as an ordinary user") {
        common::ensure_users(false, &["researcher"]);
        // The fake keeps its state (and lock) in files it opens for writing even to
        // read; open the node's directory to the test user.
        open_to_everyone(node.fake.dir.path());
        let as_user = |args: &[&str]| {
            let inner = node.cmd(args);
            let mut cmd = Command::new("runuser");
            // The checkout may be unreadable to other users: run a copy.
            cmd.args(["-u", "researcher", "--"])
                .arg(common::bin_for_everyone())
                .args(inner.get_args());
            for (k, v) in inner.get_envs() {
                match v {
                    Some(v) => cmd.env(k, v),
                    None => cmd.env_remove(k),
                };
            }
            common::run(&mut cmd)
        };
        let refused = as_user(&["--apply", "--layout", "1g.5gb*7"]);
        assert_eq!(code(&refused), 1);
        assert!(
            stderr(&refused).contains("must run as root"),
            "{}",
            stderr(&refused)
        );
        let dry = as_user(&["--dry-run", "--layout", "1g.5gb*7"]);
        assert_eq!(code(&dry), 0, "{}", stderr(&dry));
    }
}

fn open_to_everyone(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let mode = if path.is_dir() { 0o777 } else { 0o666 };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    if path.is_dir() {
        for entry in std::fs::read_dir(path).unwrap() {
            open_to_everyone(&entry.unwrap().path());
        }
    }
}

/// Start an apply that pauses after `step`; returns once it says so.
#[track_caller]
fn start_paused(node: &Node, args: &[&str], step: &str) -> Child {
    let mut cmd = node.cmd(args);
    cmd.env(PAUSE, step)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let err = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            eprintln!("[child] {line}");
            if line.contains("paused after") {
                let _ = tx.send(());
            }
        }
    });
    if rx.recv_timeout(Duration::from_secs(60)).is_err() {
        let _ = child.kill();
        panic!("node-setup did not pause after {step}");
    }
    child
}

#[test]
fn killed_at_each_step_then_rerun_converges() {
    let from = "1g.5gb*7";
    let to = "3g.20gb,2g.10gb,1g.5gb*2";
    for step in [
        "plan", "destroy", "mode", "create-1", "create", "verify", "gres", "include",
    ] {
        let node = Node::new("a100-sxm4-40gb.json");
        let out = node.run(&["--apply", "--layout", from]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let old_gres = node.gres_text();
        let mut child = start_paused(&node, &["--apply", "--layout", to], step);
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        let _ = child.wait();
        // gres.conf is the old file or the new one, whole.
        let mid = node.gres_text();
        let before_write =
            ["plan", "destroy", "mode", "create-1", "create", "verify"].contains(&step);
        if before_write {
            assert_eq!(mid, old_gres, "killed after {step}: gres.conf changed");
        } else {
            assert_eq!(mig_lines(&mid), 4, "killed after {step}: {mid}");
        }
        let rerun = node.run(&["--apply", "--layout", to]);
        assert_eq!(
            code(&rerun),
            0,
            "rerun after a kill at {step}: {}",
            stderr(&rerun)
        );
        assert_eq!(
            code(&node.run(&["--check", "--layout", to])),
            0,
            "not converged after a kill at {step}"
        );
        let final_gres = node.gres_text();
        assert_eq!(mig_lines(&final_gres), 4);
        assert!(final_gres.starts_with("# hand-written\n"));
    }
}

#[test]
fn killed_while_turning_mig_on_then_rerun_converges() {
    for step in ["mode", "create-1"] {
        let node = Node::new("a100-sxm4-40gb.json");
        let old_gres = node.gres_text();
        let mut child = start_paused(&node, &["--apply", "--layout", "1g.5gb*7"], step);
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        let _ = child.wait();
        assert_eq!(
            node.gres_text(),
            old_gres,
            "killed after {step}: gres.conf changed"
        );
        assert_eq!(code(&node.run(&["--check", "--layout", "1g.5gb*7"])), 1);
        let rerun = node.run(&["--apply", "--layout", "1g.5gb*7", "--json"]);
        assert_eq!(
            code(&rerun),
            0,
            "rerun after a kill at {step}: {}",
            stderr(&rerun)
        );
        let applied: serde_json::Value = serde_json::from_slice(&rerun.stdout).unwrap();
        assert_eq!(
            applied["changed"]["summary"],
            "NodeName=fake1 Gres=gpu:1g.5gb:7"
        );
        assert_eq!(node.instances()[0].len(), 7);
        assert_eq!(code(&node.run(&["--check", "--layout", "1g.5gb*7"])), 0);
    }
}

#[test]
fn two_applies_at_once_the_second_fails_clearly() {
    let node = Node::new("a100-sxm4-40gb.json");
    let mut first = start_paused(&node, &["--apply", "--layout", "1g.5gb*7"], "lock");
    let second = node.run(&["--apply", "--layout", "balanced"]);
    assert_eq!(code(&second), 1);
    let err = stderr(&second);
    assert!(
        err.contains(&format!(
            "another node-setup is running (pid {}",
            first.id()
        )),
        "{err}"
    );
    first.kill().unwrap();
    let _ = first.wait();
    // The lock dies with its holder.
    let third = node.run(&["--apply", "--layout", "balanced"]);
    assert_eq!(code(&third), 0, "{}", stderr(&third));
}

#[test]
fn mixed_node_names_devices_by_minor_and_keeps_the_v100_whole() {
    // GPU 0 has minor 1, GPU 1 minor 0, the V100 minor 2.
    let node = Node::new("mixed-2xh200-1xv100.json");
    let out = node.run(&["--apply", "--layout", "1g.18gb*7"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let gres = node.gres_text();
    let root = node.fake.sysroot.display().to_string();
    let parent = |minor: u32| format!("MultipleFiles={root}/dev/nvidia{minor},");
    assert_eq!(gres.matches(&parent(1)).count(), 7, "{gres}");
    assert_eq!(gres.matches(&parent(0)).count(), 7, "{gres}");
    assert!(
        gres.contains(&format!("Name=gpu Type=v100 File={root}/dev/nvidia2")),
        "{gres}"
    );
    assert!(
        stdout(&out).contains("Gres=gpu:1g.18gb:14,gpu:v100:1"),
        "{}",
        stdout(&out)
    );
    assert_eq!(node.instances()[2], Vec::<String>::new());
    assert_eq!(code(&node.run(&["--check", "--layout", "1g.18gb*7"])), 0);
}

/// Stand-in `squeue` printing `lines` (node-setup's queue fields,
/// `slurm::squeue::queue::FIELDS`, written with `|` for squeue's separator
/// 0x1F, which the stand-in prints) and
/// `scontrol` printing a recorded answer of a two-node cluster (node1, node2:
/// 1g.5gb ×4, 2g.10gb ×2 and an a100 each). Returns the PATH to use.
fn fake_slurm(node: &Node, lines: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let bin = node.fake.dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let data = node.fake.dir.path().join("squeue.txt");
    std::fs::write(&data, lines.replace('|', "\u{1f}")).unwrap();
    let shape = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/scontrol-shape-22.05.txt");
    for (name, file) in [("squeue", data.as_path()), ("scontrol", shape.as_path())] {
        let script = bin.join(name);
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\ncat >/dev/null 2>&1 </dev/null\nexec cat '{}'\n",
                file.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

#[test]
fn auto_plans_from_job_demand() {
    let node = Node::new("a100-sxm4-40gb.json");
    let pending = "PENDING|(null)|gres:gpu:3g.20gb:1|1:00:00|1:00:00|\n";
    let path = fake_slurm(
        &node,
        &format!("{pending}{pending}PENDING|(null)|N/A|10:00|10:00|\n{pending}"),
    );
    let mut dry = node.cmd(&["--dry-run", "--layout", "auto"]);
    dry.env("PATH", &path);
    let out = common::run(&mut dry);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // The other nodes offer no 3g.20gb: this GPU takes two.
    assert!(
        stdout(&out).contains("3g.20gb: 3 pending, 2 instance(s) here, 0 elsewhere"),
        "{}",
        stdout(&out)
    );
    let mut apply = node.cmd(&["--apply", "--layout", "auto"]);
    apply.env("PATH", &path);
    let out = common::run(&mut apply);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(node.instances()[0], vec!["3g.20gb@0", "3g.20gb@4"]);

    // No typed GPU demand: nothing to plan from, invalid input, nothing changed.
    let path = fake_slurm(
        &node,
        "PENDING|(null)|N/A|1:00|1:00|\nPENDING|(null)|gres:gpu:2|1:00|1:00|\n",
    );
    let before = node.instances();
    let mut none = node.cmd(&["--apply", "--layout", "auto"]);
    none.env("PATH", &path);
    let out = common::run(&mut none);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("no pending job asks for a GPU type these GPUs can offer"),
        "{}",
        stderr(&out)
    );
    assert_eq!(node.instances(), before);
}

/// Issue 32, item 7: the demand file `advise --demand-out` writes from a
/// window of jobs past every limit of the format (a run of 400 days, a limit
/// past u64 seconds, 65 and 2^32 instances, a year-9999 submission, a type
/// with ESC, an untyped count past u64) is one node-setup reads.
#[test]
fn advise_demand_files_are_read_by_node_setup() {
    let node = Node::new("a100-sxm4-40gb.json");
    let standins = crate::advise::Standins::new("exit 0");
    let (file, since, until) = crate::advise::hostile_window(standins.dir.path());
    let demand = node.fake.dir.path().join("advised.csv");
    let mut advise = standins.advise();
    advise
        .args(["--since", &since, "--until", &until, "--partition", "gpu"])
        .arg("--sacct-file")
        .arg(&file)
        .arg("--demand-out")
        .arg(&demand);
    let out = common::run(&mut advise);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let file = demand.to_str().unwrap();
    let mut dry = node.cmd(&["--dry-run", "--layout", "auto", "--demand", file]);
    dry.env("PATH", "/nonexistent");
    let out = common::run(&mut dry);
    assert_eq!(
        code(&out),
        0,
        "{}\n{}",
        stderr(&out),
        std::fs::read_to_string(&demand).unwrap()
    );
}

#[test]
fn auto_from_a_demand_file_keeps_a_gpu_whole_for_whole_gpu_jobs() {
    let node = Node::new("a100-sxm4-40gb.json");
    let demand = node.fake.dir.path().join("demand.csv");
    std::fs::write(
        &demand,
        "# last week\ngres,time_limit_s,jobs\ngpu:a100:1,7200,3\ngpu:1g.5gb:1,3600,2\n",
    )
    .unwrap();
    // --no-slurm with a demand file: no Slurm command at all.
    let file = demand.to_str().unwrap();
    let mut dry = node.cmd(&["--dry-run", "--layout", "auto", "--demand", file]);
    dry.env("PATH", "/nonexistent");
    let out = common::run(&mut dry);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("a100: 3 pending, 1 instance(s) here"),
        "{text}"
    );
    assert!(
        text.contains(
            "1g.5gb: 2 pending, 0 instance(s) here, 0 elsewhere, mean wait 0.0 h, 2 never start"
        ),
        "{text}"
    );
    assert!(
        stderr(&out).contains("warning: 2 pending job(s) asking for 1g.5gb"),
        "{}",
        stderr(&out)
    );
    let mut json = node.cmd(&["--dry-run", "--json", "--layout", "auto", "--demand", file]);
    json.env("PATH", "/nonexistent");
    let out = common::run(&mut json);
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["auto"]["whole_gpus"], 1, "{v}");
    assert_eq!(v["auto"]["cost"]["never_start"], 2, "{v}");

    // A broken file is invalid input naming the line; nothing is read from Slurm.
    std::fs::write(&demand, "gres,time_limit_s,jobs\ngpu:1g.5gb:1,forever,2\n").unwrap();
    let mut bad = node.cmd(&["--dry-run", "--layout", "auto", "--demand", file]);
    bad.env("PATH", "/nonexistent");
    let out = common::run(&mut bad);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("{}:2: time_limit_s `forever`", demand.display())),
        "{}",
        stderr(&out)
    );
    // Not a regular file: refused without blocking.
    let mut dev = node.cmd(&["--dry-run", "--layout", "auto", "--demand", "/dev/zero"]);
    dev.env("PATH", "/nonexistent");
    let out = common::run(&mut dev);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("not a regular file"),
        "{}",
        stderr(&out)
    );
}

/// Issue 34, item 5: eight H200s and all seven of the model's profiles
/// demanded (the case that kept only its most promising states and could not
/// prove its plan): the plan says it is proven best, in text and in JSON.
#[test]
fn auto_says_whether_its_plan_is_proven_best() {
    let node = Node::new("8xh200.json");
    let demand = node.fake.dir.path().join("demand.csv");
    let mut text = String::from("gres,time_limit_s,jobs\n");
    for (kind, limit, jobs) in [
        ("1g.18gb", 1800, 3000),
        ("1g.18gb", 14_400, 700),
        ("1g.18gb+me", 3600, 570),
        ("1g.35gb", 7200, 650),
        ("2g.35gb", 3600, 1860),
        ("3g.71gb", 28_800, 1270),
        ("4g.71gb", 7200, 645),
        ("7g.141gb", 14_400, 620),
    ] {
        text.push_str(&format!("gpu:{kind}:1,{limit},{jobs}\n"));
    }
    std::fs::write(&demand, text).unwrap();
    let file = demand.to_str().unwrap();
    let run = |args: &[&str]| {
        let mut cmd = node.cmd(args);
        cmd.env("PATH", "/nonexistent");
        common::run(&mut cmd)
    };
    let out = run(&["--dry-run", "--layout", "auto", "--demand", file]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("; proven the best layouts for this queue"),
        "{text}"
    );
    assert!(!text.contains("not proven"), "{text}");
    let out = run(&["--dry-run", "--json", "--layout", "auto", "--demand", file]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["auto"]["exact"], true, "{v}");
    assert_eq!(v["auto"]["served"].as_array().unwrap().len(), 7, "{v}");
}

/// Issue 22, item 13: on a node with H200s and a V100, `auto` counts the
/// V100's jobs on the V100 as it is (they were left out, and a demand of only
/// V100 jobs exited 2); the V100 itself is never planned.
#[test]
fn auto_counts_the_v100_jobs_on_a_mixed_node() {
    let node = Node::new("mixed-2xh200-1xv100.json");
    let demand = node.fake.dir.path().join("demand.csv");
    let file = demand.to_str().unwrap();
    let run = |args: &[&str]| {
        let mut cmd = node.cmd(args);
        cmd.env("PATH", "/nonexistent");
        common::run(&mut cmd)
    };
    std::fs::write(
        &demand,
        "gres,time_limit_s,jobs\ngpu:v100:1,3600,3\ngpu:1g.18gb:1,3600,14\n",
    )
    .unwrap();
    let out = run(&["--dry-run", "--layout", "auto", "--demand", file]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("v100: 3 pending, 1 instance(s) here (1 on GPUs left as they are)"),
        "{text}"
    );
    assert!(!text.contains("not a type these GPUs offer"), "{text}");
    let out = run(&["--dry-run", "--json", "--layout", "auto", "--demand", file]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let served = v["auto"]["served"].as_array().unwrap();
    let v100 = served
        .iter()
        .find(|s| s["kind"] == "v100")
        .expect("v100 served");
    assert_eq!(v100["fixed"], 1, "{v}");
    assert_eq!(v100["mean_wait_s"], 3600, "{v}");
    assert_eq!(v["auto"]["instances"]["1g.18gb"], 14, "{v}");

    // Only V100 jobs: the H200s have nothing to serve and stay as they are.
    let before = node.instances();
    std::fs::write(&demand, "gres,time_limit_s,jobs\ngpu:v100:1,3600,3\n").unwrap();
    let out = run(&["--dry-run", "--layout", "auto", "--demand", file]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stdout(&out).contains("no pending job asks for a type this GPU can offer"),
        "{}",
        stdout(&out)
    );
    assert_eq!(node.instances(), before);
    // A type no GPU here offers at all is still nothing to plan from.
    std::fs::write(&demand, "gres,time_limit_s,jobs\ngpu:1g.5gb:1,3600,3\n").unwrap();
    let out = run(&["--dry-run", "--layout", "auto", "--demand", file]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
}

/// `--check` and `--apply` share one assertion walk: each compared thing is
/// changed in turn (the GPUs, the gres.conf block, the include file, a node
/// left drained) and `--check` names exactly that one, while `--apply` acts.
#[test]
fn check_sees_each_thing_apply_compares() {
    let node = Node::new("a100-sxm4-40gb.json");
    let include = node.fake.dir.path().join("nodes-mig.conf");
    let inc = include.to_str().unwrap();
    let layout = ["--layout", "1g.5gb*7", "--slurm-include", inc];
    fn with<'a>(action: &'a str, layout: &[&'a str]) -> Vec<&'a str> {
        let mut v = vec![action];
        v.extend_from_slice(layout);
        v
    }
    let out = node.run(&with("--apply", &layout));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let kinds = |out: &Output| -> Vec<String> {
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["differences"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["what"].as_str().unwrap().to_string())
            .collect()
    };
    let check = |node: &Node| node.run(&[&with("--check", &layout)[..], &["--json"]].concat());
    let matches = check(&node);
    assert_eq!(code(&matches), 0, "{}", stdout(&matches));
    assert!(kinds(&matches).is_empty());

    // The GPUs alone: another layout applied, then gres.conf and the include put back.
    let (gres, inc_text) = (node.gres_text(), common::read(&include));
    let out = node.run(&["--apply", "--layout", "3g.20gb*2", "--slurm-include", inc]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    std::fs::write(&node.gres, &gres).unwrap();
    std::fs::write(&include, &inc_text).unwrap();
    let out = check(&node);
    assert_eq!(code(&out), 1);
    let got = kinds(&out);
    assert!(!got.is_empty() && got.iter().all(|k| k == "gpu"), "{got:?}");
    let out = node.run(&with("--apply", &layout));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(kinds(&check(&node)).is_empty());

    // The gres.conf block alone.
    std::fs::write(&node.gres, gres.replace("Type=1g.5gb", "Type=1g.10gb")).unwrap();
    assert_eq!(kinds(&check(&node)), ["gres_conf"]);
    let out = node.run(&with("--apply", &layout));
    assert!(
        !stderr(&out).contains("already applied"),
        "{}",
        stderr(&out)
    );
    assert_eq!(node.gres_text(), gres);

    // The include file alone.
    std::fs::remove_file(&include).unwrap();
    assert_eq!(kinds(&check(&node)), ["include"]);
    let out = node.run(&with("--apply", &layout));
    assert!(
        !stderr(&out).contains("already applied"),
        "{}",
        stderr(&out)
    );
    assert_eq!(common::read(&include), inc_text);
    assert!(kinds(&check(&node)).is_empty());

    // A node an earlier run left drained: stand-in sinfo says so.
    use std::os::unix::fs::PermissionsExt;
    let bin = node.fake.dir.path().join("slurm-bin");
    std::fs::create_dir_all(&bin).unwrap();
    let calls = node.fake.dir.path().join("calls.log");
    for (name, body) in [
        ("sinfo", "echo 'drained|yolo-sched node-setup failed at step 13 (reconfigure); rerun node-setup'"),
        ("scontrol", ":"),
    ] {
        let script = bin.join(name);
        std::fs::write(
            &script,
            format!("#!/bin/sh\necho \"{name} $*\" >>'{}'\n{body}\n", calls.display()),
        )
        .unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = node.cmd_with_slurm(&[&with("--check", &layout)[..], &["--json"]].concat());
    cmd.env("PATH", &path);
    let out = common::run(&mut cmd);
    assert_eq!(code(&out), 1);
    assert_eq!(kinds(&out), ["left_drained"]);
    let mut cmd = node.cmd_with_slurm(&with("--apply", &layout));
    cmd.env("PATH", &path).args(["--reconfigure-cmd", "true"]);
    let out = common::run(&mut cmd);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("left drained by an earlier node-setup"),
        "{}",
        stderr(&out)
    );
    assert!(
        common::read(&calls).contains("scontrol update NodeName=fake1 State=RESUME"),
        "{}",
        common::read(&calls)
    );

    // The isolation on the node, from the controller's settings (a site
    // without cgroups): warnings after the verdict, the exit status unchanged.
    std::fs::write(
        bin.join("scontrol"),
        format!(
            "#!/bin/sh\necho \"scontrol $*\" >>'{}'\n\
             [ \"$1 $2\" = 'show config' ] || exit 0\n\
             printf 'TaskPlugin              = task/none\\nProctrackType           = proctrack/linuxproc\\nSelectTypeParameters    = CR_CPU\\n'\n",
            calls.display()
        ),
    )
    .unwrap();
    std::fs::write(bin.join("sinfo"), "#!/bin/sh\necho 'idle|'\n").unwrap();
    let mut cmd = node.cmd_with_slurm(&with("--check", &layout));
    cmd.env("PATH", &path);
    let out = common::run(&mut cmd);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("fake1 matches layout"), "{text}");
    assert!(
        text.contains(
            "isolation: WARN device isolation: any job on fake1 can open every GPU and MIG slice"
        ) && text.contains("set ConstrainDevices=yes in cgroup.conf"),
        "{text}"
    );
    assert!(
        text.contains("isolation: ok gres device files"),
        "node-setup's lines name their device files: {text}"
    );
}

/// A node name gres.conf or Slurm cannot carry is invalid input before any
/// change: MIG mode and instances stay as they were, gres.conf untouched.
#[test]
fn a_bad_node_name_is_refused_before_the_first_change() {
    let node = Node::new("a100-sxm4-40gb.json");
    let before = (node.instances(), node.fake.state(), node.gres_text());
    for bad in ["gpu#07", "-x", "a b", "node1,node2", ""] {
        let mut cmd = common::yolo();
        node.fake.apply_env(&mut cmd);
        cmd.env("YOLO_SCHED_SITE", &node.site)
            .env_remove(PAUSE)
            .args([
                "node-setup",
                "--apply",
                "--layout",
                "1g.5gb*7",
                "--no-slurm",
            ])
            .arg(format!("--node={bad}"))
            .arg("--gres-conf")
            .arg(&node.gres)
            .arg("--sysroot")
            .arg(&node.fake.sysroot);
        let out = common::run(&mut cmd);
        assert_eq!(code(&out), 2, "{bad:?}: {}", stderr(&out));
        assert!(stderr(&out).contains("--node"), "{}", stderr(&out));
        assert!(
            !stderr(&out).contains("step 2/"),
            "{bad:?} got past the checks"
        );
    }
    assert_eq!(
        (node.instances(), node.fake.state(), node.gres_text()),
        before
    );
}

/// Every other input of `--apply` is checked before the first change too
/// (issue 13, class 6): a bad path, count, layout, demand file or command
/// exits 2 (or 1 where the input is fine but the machine refuses) with the
/// MIG mode, the instances and gres.conf as they were.
#[test]
fn every_bad_input_of_apply_is_refused_before_the_first_change() {
    let node = Node::new("a100-sxm4-40gb.json");
    let dir = node.fake.dir.path().to_path_buf();
    let fifo = dir.join("a-fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let subdir = dir.join("a-dir");
    std::fs::create_dir_all(&subdir).unwrap();
    let before = (node.instances(), node.fake.state(), node.gres_text());
    let gres = node.gres.display().to_string();
    let d = |p: &Path| p.display().to_string();
    // (what, the flags that replace the defaults, the exit status)
    let cases: Vec<(&str, Vec<String>, i32)> = vec![
        (
            "gres.conf is a directory",
            vec!["--gres-conf".into(), d(&subdir)],
            2,
        ),
        (
            "gres.conf is a FIFO",
            vec!["--gres-conf".into(), d(&fifo)],
            2,
        ),
        (
            "gres.conf in a missing directory",
            vec!["--gres-conf".into(), d(&dir.join("missing/gres.conf"))],
            2,
        ),
        (
            "the include is a directory",
            vec!["--slurm-include".into(), d(&subdir)],
            2,
        ),
        (
            "an infinite drain timeout",
            vec!["--drain-timeout".into(), "inf".into()],
            2,
        ),
        (
            "a negative drain timeout",
            vec!["--drain-timeout".into(), "-1".into()],
            2,
        ),
        (
            "a layout that does not fit",
            vec!["--layout".into(), "1g.5gb*99".into()],
            2,
        ),
        (
            "a layout that is no layout",
            vec!["--layout".into(), "nonsense".into()],
            2,
        ),
        (
            "a missing demand file",
            vec![
                "--layout".into(),
                "auto".into(),
                "--demand".into(),
                d(&dir.join("no-such-demand.json")),
            ],
            2,
        ),
        (
            "a demand file that is a FIFO",
            vec![
                "--layout".into(),
                "auto".into(),
                "--demand".into(),
                d(&fifo),
            ],
            2,
        ),
        (
            "an empty reset command",
            vec!["--reset".into(), "--reset-cmd".into(), "".into()],
            2,
        ),
    ];
    for (what, flags, expected) in cases {
        let has = |f: &str| flags.iter().any(|x| x == f);
        let mut cmd = common::yolo();
        node.fake.apply_env(&mut cmd);
        cmd.env("YOLO_SCHED_SITE", &node.site)
            .env_remove(PAUSE)
            .args(["node-setup", "--apply", "--node", "fake1", "--no-slurm"]);
        if !has("--layout") {
            cmd.args(["--layout", "1g.5gb*7"]);
        }
        if !has("--gres-conf") {
            cmd.args(["--gres-conf", &gres]);
        }
        cmd.arg("--sysroot").arg(&node.fake.sysroot);
        cmd.args(&flags);
        let out = common::run_bounded(&mut cmd, std::time::Duration::from_secs(30))
            .unwrap_or_else(|| panic!("{what}: node-setup did not end"));
        let err = stderr(&out);
        assert_eq!(code(&out), expected, "{what}: {err}");
        assert!(!err.contains("panicked"), "{what}: {err}");
        assert!(
            (node.instances(), node.fake.state(), node.gres_text()) == before,
            "{what}: the node changed: {err}"
        );
    }
    assert!(!dir.join("missing").exists(), "no directory was made");
}
