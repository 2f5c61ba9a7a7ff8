//! The job agent (`yolo-sched agent`) against the fake libnvidia-ml.so, whose
//! processes follow a `memory_curve` the library itself interpolates against
//! wall time. The agent is the real binary; the "trainer" is a real process
//! (`sleep`) it watches and, when the guard decides so, stops. Short intervals
//! and windows come from the site file, so each test takes seconds.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::*;
use crate::fake_nvml::FakeNode;

const MIB: f64 = 1024.0 * 1024.0;
/// MiB per second of a leak of `mb_per_min` MB (10^6 bytes) per minute.
fn mib_per_s(mb_per_min: f64) -> f64 {
    mb_per_min * 1e6 / 60.0 / MIB
}

/// A trainer stand-in: a process the agent watches; killed when dropped.
struct Trainer(Child);

impl Trainer {
    fn start() -> Trainer {
        Trainer(Command::new("sleep").arg("120").spawn().unwrap())
    }
    fn pid(&self) -> u32 {
        self.0.id()
    }
    /// Whether it is still running (reaps it when it ended).
    fn running(&mut self) -> bool {
        self.0.try_wait().unwrap().is_none()
    }
}

impl Drop for Trainer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A run directory with a manifest, a site file and a fake node.
struct Setup {
    dir: tempfile::TempDir,
    node: FakeNode,
}

/// The fields of a manifest the agent reads (run id, the spec's `[guard]`).
pub fn write_manifest(workdir: &Path, spec_extra: &str) {
    std::fs::create_dir_all(workdir).unwrap();
    let spec = format!(
        "version = 1\n[run]\nname = \"leaky\"\n[train]\nmodel = \"yolov8n.yaml\"\ndata = \"d.yaml\"\n{spec_extra}"
    );
    let m = json!({
        "schema_version": 1, "run_id": "leaky-0001", "name": "leaky", "user": "u", "host": "h",
        "submitted_at": "2026-12-01T00:00:00Z", "workdir": workdir, "spec_file": "/s.toml",
        "spec_hash": "0", "spec_text": spec, "variants": 1, "gpu_explanation": [],
        "estimate_gib": null, "stages": []
    });
    std::fs::write(workdir.join("manifest.json"), m.to_string()).unwrap();
}

impl Setup {
    /// `processes` go on GPU 0 of `fixture`; `site_extra` adds `[guard]` lines.
    fn new(fixture: &str, processes: Value, site_extra: &str) -> Setup {
        Setup::on_gpus(fixture, vec![(0, processes)], site_extra)
    }

    /// `processes` on each GPU index of `fixture`.
    fn on_gpus(fixture: &str, gpus: Vec<(usize, Value)>, site_extra: &str) -> Setup {
        let node = FakeNode::with_fixture(fixture, |f| {
            for (i, processes) in gpus {
                f["gpus"][i]["processes"] = processes;
            }
        });
        let dir = tempfile::tempdir().unwrap();
        write_manifest(&dir.path().join("run"), "");
        std::fs::create_dir(dir.path().join("textfile")).unwrap();
        std::fs::write(
            dir.path().join("site.toml"),
            format!(
                "[guard]\ninterval_s = 0.2\nwindow_s = 3\nwarmup_epochs = 0\ngrace_s = 2\n\
                 textfile_dir = \"{}\"\n{site_extra}\n[paths]\naudit_log = \"{}\"\n",
                dir.path().join("textfile").display(),
                dir.path().join("audit.log").display()
            ),
        )
        .unwrap();
        Setup { dir, node }
    }

    fn workdir(&self) -> PathBuf {
        self.dir.path().join("run")
    }

    fn state(&self, file: &str) -> PathBuf {
        self.workdir().join("state").join(file)
    }

    /// The UUID of the MIG device in GPU instance `gi`, as NVML reports it.
    fn mig_uuid(&self, gi: u64) -> String {
        let mut cmd = yolo();
        self.node.apply_env(&mut cmd);
        let out = run(cmd.args(["node-setup", "--show", "--json"]));
        assert_eq!(out.status.code(), Some(0));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["gpus"][0]["gpu_instances"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["id"] == gi)
            .unwrap()["compute_instances"][0]["uuid"]
            .as_str()
            .unwrap()
            .to_string()
    }

    fn agent(&self, devices: &str, trainer: Option<u32>, extra: &[&str]) -> Command {
        let mut cmd = yolo();
        self.node.apply_env(&mut cmd);
        cmd.arg("--site")
            .arg(self.dir.path().join("site.toml"))
            .args(["agent", "--workdir"])
            .arg(self.workdir())
            .args(["--stage", "train", "--devices", devices, "--json"])
            .env("SLURM_JOB_ID", "77")
            .env_remove("SLURM_ARRAY_JOB_ID")
            .env_remove("SLURM_ARRAY_TASK_ID")
            .env_remove("SLURM_SHARDS_ON_NODE")
            .env_remove("SLURM_JOB_GPUS")
            .env_remove("SLURM_STEP_GPUS")
            .env_remove("FAKE_NVML_ALLOWED_DEVICES")
            .env("XDG_STATE_HOME", self.dir.path().join("xdg"))
            .args(extra);
        if let Some(pid) = trainer {
            cmd.args(["--pid", &pid.to_string()]);
        }
        cmd
    }
}

fn finish(cmd: &mut Command) -> (Value, String) {
    let out: Output = run_bounded(cmd, Duration::from_secs(60)).expect("the agent hung");
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "agent failed:\n{log}");
    (serde_json::from_slice(&out.stdout).unwrap(), log)
}

fn decisions(outcome: &Value, kind: &str) -> Vec<Value> {
    outcome["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["decision"] == kind)
        .cloned()
        .collect()
}

/// A process in the H200's 1g.18gb instance (GPU instance 9) following `curve`.
fn in_slice(curve: Value) -> Value {
    json!([{"pid": 4242, "gpu_instance_id": 9, "compute_instance_id": 0, "memory_curve": curve}])
}

fn series_lines(s: &Setup) -> Vec<String> {
    read(&s.state("train.memory.csv"))
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn steady_memory_on_a_mig_slice_takes_no_action_and_publishes_clean_gauges() {
    let s = Setup::new(
        "h200-partitioned-busy.json",
        in_slice(json!([[0, 6000]])),
        "",
    );
    let uuid = s.mig_uuid(9);
    let mut trainer = Trainer::start();
    let child = s
        .agent(&uuid, Some(trainer.pid()), &["--samples", "25"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // While it runs: the textfile is there and promtool-clean.
    let prom = s
        .dir
        .path()
        .join("textfile/yolo_sched_leaky-0001_train.prom");
    let start = Instant::now();
    while !prom.exists() {
        assert!(
            start.elapsed() < crate::common::patience(Duration::from_secs(20)),
            "no metrics file"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let text = read(&prom);
    assert!(
        text.contains(&format!("yolo_sched_job_gpu_memory_used_bytes{{run=\"leaky-0001\",stage=\"train\",task=\"\",user=\"{}\",account=\"\",slice=\"1g.18gb\"}} {}", user(), 6000u64 << 20)),
        "{text}"
    );
    assert!(text.contains("yolo_sched_job_gpu_memory_total_bytes{run=\"leaky-0001\""));
    if let Some(promtool) = crate::report_replay::tool(&["promtool"], "prometheus") {
        let check = run(Command::new(promtool)
            .args(["check", "metrics"])
            .stdin(std::fs::File::open(&prom).unwrap()));
        assert!(
            check.status.success() && check.stdout.is_empty() && check.stderr.is_empty(),
            "promtool: {}{}",
            String::from_utf8_lossy(&check.stdout),
            String::from_utf8_lossy(&check.stderr)
        );
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let outcome: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(outcome["samples"], 25);
    assert_eq!(outcome["ended"], "sample_limit");
    assert_eq!(outcome["is_mig"], true);
    assert_eq!(outcome["device_name"], "NVIDIA H200 MIG 1g.18gb");
    assert!(
        outcome["decisions"].as_array().unwrap().is_empty(),
        "{outcome}"
    );
    assert!(!prom.exists(), "the metrics file outlived the agent");
    assert!(!s.state("train.guard.json").exists());
    let lines = series_lines(&s);
    assert_eq!(
        lines[0],
        "t_unix,job_used_bytes,device_used_bytes,total_bytes"
    );
    assert_eq!(lines.len(), 26);
    assert!(lines[1].ends_with(&format!(",{0},{0},{1}", 6000u64 << 20, 16384u64 << 20)));
    assert!(trainer.running(), "a steady job was touched");
}

fn user() -> String {
    String::from_utf8(Command::new("id").arg("-un").output().unwrap().stdout)
        .unwrap()
        .trim()
        .to_string()
}

#[test]
fn slow_growth_within_the_limit_takes_no_action() {
    let rate = mib_per_s(300.0);
    let s = Setup::new(
        "h200-partitioned-busy.json",
        in_slice(json!([[0, 2000], [600, 2000.0 + 600.0 * rate]])),
        "",
    );
    let mut trainer = Trainer::start();
    let (outcome, log) =
        finish(&mut s.agent(&s.mig_uuid(9), Some(trainer.pid()), &["--samples", "30"]));
    assert!(decisions(&outcome, "stop").is_empty(), "{outcome}\n{log}");
    assert!(trainer.running());
    // The series shows the growth the library drove: about 300 MB/min.
    let lines = series_lines(&s);
    let field = |l: &str, i: usize| l.split(',').nth(i).unwrap().parse::<f64>().unwrap();
    let (first, last) = (&lines[1], lines.last().unwrap());
    let mb_min =
        (field(last, 1) - field(first, 1)) / (field(last, 0) - field(first, 0)) * 60.0 / 1e6;
    assert!((250.0..350.0).contains(&mb_min), "{mb_min} MB/min");
}

#[test]
fn a_600_mb_per_min_leak_is_stopped_with_its_reason_recorded() {
    let rate = mib_per_s(600.0);
    let s = Setup::new(
        "h200-partitioned-busy.json",
        in_slice(json!([[0, 3000], [3600, 3000.0 + 3600.0 * rate]])),
        "",
    );
    let mut trainer = Trainer::start();
    let start = Instant::now();
    let (outcome, log) = finish(&mut s.agent(&s.mig_uuid(9), Some(trainer.pid()), &[]));
    assert_eq!(outcome["ended"], "stopped", "{outcome}\n{log}");
    assert!(start.elapsed() < crate::common::patience(Duration::from_secs(20)));
    let stop = &decisions(&outcome, "stop")[0];
    let mb = stop["cause"]["mb_per_min"].as_f64().unwrap();
    assert!((540.0..660.0).contains(&mb), "{stop}");
    assert!(!trainer.running(), "the trainer still runs");
    let record: Value = serde_json::from_str(&read(&s.state("train.guard.json"))).unwrap();
    assert_eq!(record["action"], "stopped");
    assert_eq!(record["job_id"], "77");
    assert_eq!(record["stopped"], "terminated");
    let message = record["message"].as_str().unwrap();
    // The growth is judged over the samples the agent took: 3 s of them on
    // a quiet machine, a second more when a sample came late (a loaded
    // machine, run 2 of stop 33 under two CPU hogs: "for 4 s").
    let window = message
        .split(" MB/min for ")
        .nth(1)
        .and_then(|rest| rest.split(" s, ").next())
        .and_then(|secs| secs.parse::<u64>().ok());
    assert!(
        message.starts_with("stopped by the memory guard: grew ")
            && window.is_some_and(|s| (3..=20).contains(&s))
            && message.ends_with(" of 16 GiB"),
        "{message}"
    );
    assert!(
        log.contains(message),
        "the job log lacks the decision:\n{log}"
    );
    assert!(log.contains("stopped by TERM"), "{log}");
    // The audit log has the stop, with the reason.
    let audit = read(&s.dir.path().join("audit.log"));
    let rec: Value = serde_json::from_str(audit.lines().last().unwrap()).unwrap();
    assert_eq!(rec["command"], "guard-stop");
    assert_eq!(rec["run_id"], "leaky-0001");
    assert_eq!(rec["job_ids"], json!([77]));
    assert!(rec["detail"].as_str().unwrap().contains(message), "{rec}");
    let shown = run(yolo()
        .arg("--site")
        .arg(s.dir.path().join("site.toml"))
        .args(["audit", "--run", "leaky-0001"]));
    assert_eq!(shown.status.code(), Some(0));
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(text.contains("guard-stop"), "{text}");
}

#[test]
fn on_four_gpus_a_leak_on_one_is_seen_and_the_stop_ends_every_rank() {
    crate::fake_nvml::built();
    // A DDP trainer: a launcher with four ranks below it.
    let mut trainer = Trainer(
        Command::new("bash")
            .args(["-c", "for r in 0 1 2 3; do sleep 120 & done; wait"])
            .spawn()
            .unwrap(),
    );
    let launcher = trainer.pid() as i32;
    let deadline = Instant::now() + crate::common::patience(Duration::from_secs(20));
    let ranks: Vec<u32> = loop {
        let below = children_of(launcher);
        if below.len() == 4 {
            break below;
        }
        assert!(
            Instant::now() < deadline,
            "the ranks did not start: {below:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    // GPUs 0, 1 and 3 hold a steady 30 GiB; rank 2 leaks 600 MB/min.
    let rate = mib_per_s(600.0);
    let steady = |pid: u32| json!([{"pid": pid, "used_memory_mib": 30720}]);
    let s = Setup::on_gpus(
        "8xh200.json",
        vec![
            (0, steady(ranks[0])),
            (1, steady(ranks[1])),
            (
                2,
                json!([{"pid": ranks[2], "memory_curve": [[0, 30720], [3600, 30720.0 + 3600.0 * rate]]}]),
            ),
            (3, steady(ranks[3])),
        ],
        "",
    );
    let (outcome, log) = finish(&mut s.agent("0,1,2,3", Some(trainer.pid()), &[]));
    assert_eq!(outcome["device"], "0,1,2,3", "{outcome}");
    assert!(
        log.contains(
            "the job holds 4 devices (0,1,2,3); the guard reads each and counts the fullest"
        ),
        "{log}"
    );
    assert_eq!(outcome["ended"], "stopped", "{outcome}\n{log}");
    let stop = &decisions(&outcome, "stop")[0];
    let mb = stop["cause"]["mb_per_min"].as_f64().unwrap();
    assert!((540.0..660.0).contains(&mb), "{stop}");
    assert!(!trainer.running(), "the launcher still runs");
    for r in ranks {
        let state = std::fs::read_to_string(format!("/proc/{r}/stat")).unwrap_or_default();
        let state = state.rsplit(')').next().unwrap_or("").trim_start();
        assert!(
            state.is_empty() || state.starts_with('Z'),
            "rank {r} outlived the guard's stop: {state}"
        );
    }
    let record: Value = serde_json::from_str(&read(&s.state("train.guard.json"))).unwrap();
    assert_eq!(record["action"], "stopped");
    assert!(
        record["device"].as_str().unwrap().starts_with("0,1,2,3 "),
        "{record}"
    );
}

/// The direct children of `pid`.
fn children_of(pid: i32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(p) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
        let ppid = stat
            .rsplit(')')
            .next()
            .and_then(|r| r.split_whitespace().nth(1))
            .and_then(|x| x.parse::<i32>().ok());
        if ppid == Some(pid) {
            out.push(p);
        }
    }
    out.sort();
    out
}

#[test]
fn crossing_80_percent_of_the_slice_is_a_warning_only() {
    // 5000 MiB, then 85% of the 16384 MiB slice from the second second on: a
    // step of 1 ms (the fake interpolates between points), so that the first
    // sample above 80% reads 85% however the samples fall.
    let s = Setup::new(
        "h200-partitioned-busy.json",
        in_slice(json!([[0, 5000], [1, 5000], [1.001, 13926]])),
        "",
    );
    let mut trainer = Trainer::start();
    let (outcome, log) =
        finish(&mut s.agent(&s.mig_uuid(9), Some(trainer.pid()), &["--samples", "30"]));
    let warns = decisions(&outcome, "warn");
    assert_eq!(warns.len(), 1, "{outcome}");
    assert!(decisions(&outcome, "stop").is_empty(), "{outcome}");
    assert!(trainer.running());
    let record: Value = serde_json::from_str(&read(&s.state("train.guard.json"))).unwrap();
    assert_eq!(record["action"], "warned");
    assert_eq!(
        record["message"],
        "warning: memory at 13.6 of 16 GiB (85%, warns at 80%)"
    );
    assert!(log.contains("warning: memory at 13.6 of 16 GiB"), "{log}");
}

#[test]
fn on_a_whole_gpu_only_the_jobs_processes_count_and_its_share_is_enforced() {
    // The library first: its build may wait minutes on cargo's lock, and a
    // trainer started before would have ended by then.
    crate::fake_nvml::built();
    let trainer = Trainer::start();
    let s = Setup::new(
        "a100-sxm4-40gb.json",
        json!([
            {"pid": trainer.pid(), "used_memory_mib": 12288},
            {"pid": 999_999, "used_memory_mib": 20000}
        ]),
        "",
    );
    let mut trainer = trainer;
    let (outcome, log) = finish(&mut s.agent("0", Some(trainer.pid()), &["--share", "0.25"]));
    assert_eq!(outcome["is_mig"], false);
    assert_eq!(outcome["ended"], "stopped", "{outcome}\n{log}");
    let stop = &decisions(&outcome, "stop")[0];
    assert_eq!(stop["cause"]["cause"], "over_share", "{stop}");
    assert_eq!(stop["cause"]["used"].as_u64(), Some(12288 << 20));
    assert!(
        log.contains("holds 12 GiB, over its share of the shared GPU (10 of 40 GiB, 25%)"),
        "{log}"
    );
    assert!(
        log.contains("warning: memory at 12 of 10 GiB, the job's share of the shared GPU (120%"),
        "{log}"
    );
    assert!(!trainer.running());
    // The series keeps the job's use apart from the device's.
    let line = series_lines(&s)[1].clone();
    assert!(
        line.contains(&format!(
            ",{},{},",
            12288u64 << 20,
            (12288u64 + 20000) << 20
        )),
        "{line}"
    );
}

#[test]
fn the_agent_ends_with_its_trainer_when_its_stdin_closes_and_on_term() {
    let s = Setup::new(
        "h200-partitioned-busy.json",
        in_slice(json!([[0, 100]])),
        "",
    );
    let uuid = s.mig_uuid(9);
    let prom = s
        .dir
        .path()
        .join("textfile/yolo_sched_leaky-0001_train.prom");
    let trainer = Trainer::start();
    let child = s
        .agent(&uuid, Some(trainer.pid()), &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Once it has sampled, the agent is watching the trainer.
    wait_for_file(&prom);
    drop(trainer);
    let out = run_bounded_child(child.wait_with_output());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ended"], "trainer_gone");

    let mut child = s
        .agent(&uuid, None, &["--stdin-eof"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_file(&prom);
    drop(child.stdin.take());
    let out = run_bounded_child(child.wait_with_output());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ended"], "script_ended");
    assert!(!prom.exists());

    // scancel's TERM: the agent still removes its metrics file.
    let child = s
        .agent(&uuid, None, &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_file(&prom);
    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let out = run_bounded_child(child.wait_with_output());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ended"], "signalled");
    assert!(!prom.exists(), "a TERM left the metrics file behind");
}

/// Poll until `path` exists (the agent's first sample), at most a minute.
fn wait_for_file(path: &Path) {
    let start = Instant::now();
    while !path.exists() {
        assert!(
            start.elapsed() < crate::common::patience(Duration::from_secs(60)),
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn run_bounded_child(out: std::io::Result<Output>) -> Output {
    let out = out.unwrap();
    assert_eq!(out.status.code(), Some(0));
    out
}

#[test]
fn without_nvml_or_with_a_bad_device_the_agent_says_so_and_exits_1() {
    let s = Setup::new("h200-partitioned-busy.json", json!([]), "");
    let mut cmd = s.agent("MIG-00000000-0000-0000-0000-000000000000", None, &[]);
    let out = run_bounded(&mut cmd, Duration::from_secs(30)).unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("could not start") && err.contains("NVML has no device MIG-00000000"),
        "{err}"
    );
    let mut cmd = s.agent("0", None, &[]);
    cmd.env("YOLO_SCHED_NVML_LIB", "/nonexistent/libnvidia-ml.so.1");
    let out = run_bounded(&mut cmd, Duration::from_secs(30)).unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("could not be loaded"));
    let mut cmd = s.agent("$(reboot)", None, &[]);
    let out = run_bounded(&mut cmd, Duration::from_secs(30)).unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("CUDA_VISIBLE_DEVICES entry"));
}

#[test]
fn a_spec_guard_past_the_site_limits_is_refused_at_validation() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("d.yaml");
    std::fs::write(
        &data,
        "path: .\ntrain: images\nval: images\nnames: {0: a}\n",
    )
    .unwrap();
    let spec = dir.path().join("s.toml");
    std::fs::write(
        &spec,
        "version = 1\n[run]\nname = \"g\"\n[train]\nmodel = \"yolov8n.yaml\"\ndata = \"d.yaml\"\n\
         [guard]\nwarn_fraction = 0.99\ngrowth_mb_per_min = 100\n",
    )
    .unwrap();
    let site = dir.path().join("site.toml");
    std::fs::write(&site, "[guard.limits]\nmax_warn_fraction = 0.9\n").unwrap();
    let out = run(yolo()
        .arg("--site")
        .arg(&site)
        .args(["validate"])
        .arg(&spec));
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("s.toml:8:17: guard.warn_fraction: warn_fraction = 0.99 is above what the site allows (0.9"),
        "{err}"
    );
    assert!(
        !err.contains("growth_mb_per_min"),
        "tightening is allowed: {err}"
    );
}

#[test]
fn a_dry_run_decides_but_changes_nothing() {
    let rate = mib_per_s(900.0);
    let s = Setup::new(
        "h200-partitioned-busy.json",
        in_slice(json!([[0, 3000], [3600, 3000.0 + 3600.0 * rate]])),
        "",
    );
    let mut trainer = Trainer::start();
    let (outcome, log) = finish(&mut s.agent(
        &s.mig_uuid(9),
        Some(trainer.pid()),
        &["--dry-run", "--samples", "25"],
    ));
    let stops = decisions(&outcome, "stop");
    assert!(!stops.is_empty(), "{outcome}");
    assert_eq!(stops[0]["may_stop"], false);
    assert!(log.contains("would stop the job"), "{log}");
    assert!(trainer.running());
    assert!(!s.workdir().join("state").exists(), "a dry run wrote state");
    assert_eq!(
        std::fs::read_dir(s.dir.path().join("textfile"))
            .unwrap()
            .count(),
        0
    );
    assert!(!s.dir.path().join("audit.log").exists());
}

/// A leak of 1,200 MB/min by another job's process on the same GPU, from
/// 10,000 MiB: the process the job does not own.
fn neighbour_leaking() -> Value {
    let rate = mib_per_s(1200.0);
    json!({"pid": 999_999, "memory_curve": [[0, 10000], [3600, 10000.0 + 3600.0 * rate]]})
}

#[test]
fn a_shard_jobs_guard_counts_its_own_processes_even_without_shards_per_gpu() {
    // The held-out check's case: two shards of a whole A100, no
    // `shards_per_gpu` in the site file, a neighbour leaking beside a steady
    // job. The job is never stopped for the neighbour's growth.
    crate::fake_nvml::built();
    let mut trainer = Trainer::start();
    let s = Setup::new(
        "a100-sxm4-40gb.json",
        json!([{"pid": trainer.pid(), "used_memory_mib": 6000}, neighbour_leaking()]),
        "",
    );
    let (outcome, log) = finish(
        s.agent("0", Some(trainer.pid()), &["--samples", "40"])
            .env("SLURM_SHARDS_ON_NODE", "2"),
    );
    assert_eq!(outcome["ended"], "sample_limit", "{outcome}\n{log}");
    assert!(decisions(&outcome, "stop").is_empty(), "{outcome}\n{log}");
    assert!(
        trainer.running(),
        "the trainer was stopped for another job's leak"
    );
    assert!(
        log.contains("shared with other jobs (share unknown"),
        "{log}"
    );
    // Every sample counts the job's 6000 MiB, not the device's growing use.
    for line in series_lines(&s).iter().skip(1) {
        let used: u64 = line.split(',').nth(1).unwrap().parse().unwrap();
        assert_eq!(used, 6000u64 << 20, "{line}");
    }
    assert!(log.contains("ending after 40 sample(s)"), "{log}");
}

#[test]
fn where_the_jobs_own_use_cannot_be_known_growth_only_warns_and_says_why() {
    // A shard job whose agent has no trainer pid: the device's use stands
    // in, and its growth (the neighbour's) is a warning, never a stop.
    let s = Setup::new(
        "a100-sxm4-40gb.json",
        json!([{"pid": 999_998, "used_memory_mib": 6000}, neighbour_leaking()]),
        "",
    );
    let (outcome, log) = finish(
        s.agent("0", None, &["--samples", "40"])
            .env("SLURM_SHARDS_ON_NODE", "2"),
    );
    assert_eq!(outcome["ended"], "sample_limit", "{outcome}\n{log}");
    let held = decisions(&outcome, "stop");
    assert_eq!(held.len(), 1, "said once: {outcome}");
    assert_eq!(held[0]["may_stop"], false, "{held:?}");
    assert!(
        held[0]["unattributed"]
            .as_str()
            .is_some_and(|w| w.contains("no trainer pid")),
        "{held:?}"
    );
    assert!(
        log.contains("the job's own GPU memory cannot be known (no trainer pid"),
        "{log}"
    );
    assert!(log.contains("the guard does not stop it: grew "), "{log}");
    let record: Value = serde_json::from_str(&read(&s.state("train.guard.json"))).unwrap();
    assert_eq!(record["action"], "would_stop", "{record}");
}

#[test]
fn a_trainer_already_gone_or_a_zombie_is_refused_at_start() {
    let s = Setup::new(
        "h200-partitioned-busy.json",
        in_slice(json!([[0, 100]])),
        "",
    );
    let uuid = s.mig_uuid(9);
    // A zombie: exited, not yet reaped by its parent (this test).
    let mut zombie = Command::new("true").spawn().unwrap();
    let pid = zombie.id();
    let start = Instant::now();
    loop {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        if status
            .lines()
            .any(|l| l.starts_with("State:") && l.contains('Z'))
        {
            break;
        }
        assert!(
            start.elapsed() < crate::common::patience(Duration::from_secs(60)),
            "never a zombie"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = run_bounded(&mut s.agent(&uuid, Some(pid), &[]), Duration::from_secs(60))
        .expect("the agent hung on a zombie trainer");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("the trainer (pid {pid}) is not running")),
        "{err}"
    );
    zombie.wait().unwrap();
}

#[test]
fn with_every_read_failing_a_sample_limit_still_ends_the_agent() {
    let s = Setup::new("h200-partitioned-busy.json", json!([]), "");
    let uuid = s.mig_uuid(9);
    let trainer = Trainer::start();
    let child = s
        .agent(&uuid, Some(trainer.pid()), &["--samples", "12"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // After its first sample, the slice goes away under it: every read fails.
    wait_for_file(&s.state("train.memory.csv"));
    let reset = s.node.ctl(&["reset", "--gpu", "0"]);
    assert!(reset.status.success(), "{reset:?}");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output()).unwrap());
    let out = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the agent never ended with every read failing")
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{log}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ended"], "sample_limit", "{v}");
    assert!(v["read_errors"].as_u64().unwrap() >= 1, "{v}");
    assert_eq!(
        v["samples"].as_u64().unwrap() + v["read_errors"].as_u64().unwrap(),
        12,
        "{v}"
    );
    assert!(log.contains("could not read the device memory"), "{log}");
    drop(trainer);
}

// ------------------------------------------------------------------------
// Inside a constrained job (issue #33 item 3): Slurm's ConstrainDevices
// renumbers CUDA_VISIBLE_DEVICES from 0, a hand-written gres.conf gives MIG
// slices as plain indices, and the job's cgroup lets it open only its own
// device files (the fake: FAKE_NVML_ALLOWED_DEVICES). The agent is started
// as the templates start it: no --devices, the job's environment.

/// Capability minors of GPU instance `gi` (compute instance 0) on /dev/nvidia0.
fn caps(gi: u32) -> (u32, u32) {
    (3 + gi * 9, 4 + gi * 9)
}

/// Node `n1`: GPU 0 (minor 0) an A100 cut into seven 1g.5gb slices (GPU
/// instances 7–13, GRES indices 0–6 in the hand-written gres.conf), GPUs 1
/// and 2 whole A100s (GRES 7 and 8) with 4 shards each. A neighbour job's
/// process in the slice beside the last leaks 1,200 MB/min; `job_slice` are the
/// processes in the last slice (GRES 6), `gpu1`/`gpu2` those on the whole GPUs.
fn constrained_node(job_slice: Value, gpu1: Value, gpu2: Value) -> Setup {
    let rate = mib_per_s(1200.0);
    let mut neighbour = json!([{"pid": 999_997, "gpu_instance_id": 12, "compute_instance_id": 0,
                                "memory_curve": [[0, 500], [3600, 500.0 + 3600.0 * rate]]}]);
    let mut in_job_slice = job_slice;
    for p in in_job_slice.as_array_mut().unwrap() {
        p["gpu_instance_id"] = json!(13);
        p["compute_instance_id"] = json!(0);
    }
    neighbour
        .as_array_mut()
        .unwrap()
        .extend(in_job_slice.as_array().unwrap().iter().cloned());
    let node = FakeNode::with_fixture("a100-sxm4-40gb.json", |f| {
        let gpu = |n: u32, procs: Value| {
            json!({"model": "a100-sxm4-40gb", "uuid": format!("GPU-a1000040-0000-4000-8000-00000000000{}", n + 1),
                   "minor": n, "pci_bus_id": format!("00000000:0{}:00.0", 7 + n), "cpu_affinity": "0-15",
                   "mig_enabled": false, "processes": procs})
        };
        let mut g0 = gpu(0, neighbour);
        g0["mig_enabled"] = json!(true);
        g0["gpu_instances"] = json!((0..7)
            .map(|start| json!({"profile_id": 19, "start": start}))
            .collect::<Vec<_>>());
        f["gpus"] = json!([g0, gpu(1, gpu1), gpu(2, gpu2)]);
    });
    let dir = tempfile::tempdir().unwrap();
    write_manifest(&dir.path().join("run"), "");
    std::fs::create_dir(dir.path().join("textfile")).unwrap();
    std::fs::write(
        dir.path().join("site.toml"),
        format!(
            "[guard]\ninterval_s = 0.2\nwindow_s = 3\nwarmup_epochs = 0\ngrace_s = 2\n\
             textfile_dir = \"{}\"\n[paths]\naudit_log = \"{}\"\n",
            dir.path().join("textfile").display(),
            dir.path().join("audit.log").display()
        ),
    )
    .unwrap();
    // What an administrator writes by hand for this node (gres.conf(5)).
    let mut gres = String::from("NodeName=other Name=gpu Type=a100 File=/dev/nvidia5\n");
    for gi in 7..14 {
        let (g, c) = caps(gi);
        gres.push_str(&format!(
            "NodeName=n1 AutoDetect=off Name=gpu Type=1g.5gb MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap{g},/dev/nvidia-caps/nvidia-cap{c}\n"
        ));
    }
    gres.push_str("NodeName=n1 AutoDetect=off Name=gpu Type=a100 File=/dev/nvidia[1-2]\n");
    gres.push_str("NodeName=n1 AutoDetect=off Name=shard Count=8 File=/dev/nvidia[1-2]\n");
    std::fs::write(dir.path().join("gres.conf"), gres).unwrap();
    Setup { dir, node }
}

impl Setup {
    /// The agent as the train script starts it inside a job that Slurm gave
    /// GRES indices `job_gpus`, renumbered to `visible`, with a cgroup that
    /// allows `allowed` (device files).
    fn in_job(
        &self,
        visible: &str,
        job_gpus: &str,
        allowed: &str,
        trainer: Option<u32>,
        extra: &[&str],
    ) -> Command {
        let mut cmd = yolo();
        self.node.apply_env(&mut cmd);
        cmd.arg("--site")
            .arg(self.dir.path().join("site.toml"))
            .args(["agent", "--workdir"])
            .arg(self.workdir())
            .args(["--stage", "train", "--json", "--gres-conf"])
            .arg(self.dir.path().join("gres.conf"))
            .arg("--sysroot")
            .arg(&self.node.sysroot)
            .env("SLURM_JOB_ID", "78")
            .env("SLURMD_NODENAME", "n1")
            .env("CUDA_VISIBLE_DEVICES", visible)
            .env("SLURM_JOB_GPUS", job_gpus)
            .env("FAKE_NVML_ALLOWED_DEVICES", allowed)
            .env_remove("SLURM_STEP_GPUS")
            .env_remove("SLURM_ARRAY_JOB_ID")
            .env_remove("SLURM_ARRAY_TASK_ID")
            .env_remove("SLURM_SHARDS_ON_NODE")
            .env("XDG_STATE_HOME", self.dir.path().join("xdg"))
            .args(extra);
        if let Some(pid) = trainer {
            cmd.args(["--pid", &pid.to_string()]);
        }
        cmd
    }

    /// The UUID NVML gives GPU `index` (unconstrained, as the administrator sees it).
    fn gpu_uuid(&self, index: usize) -> String {
        let mut cmd = yolo();
        self.node.apply_env(&mut cmd);
        let out = run(cmd.args(["node-setup", "--show", "--json"]));
        assert_eq!(out.status.code(), Some(0));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["gpus"][index]["uuid"].as_str().unwrap().to_string()
    }
}

/// The device files Slurm allows a job on the slice of GPU instance `gi` of /dev/nvidia0.
fn slice_files(gi: u32) -> String {
    let (g, c) = caps(gi);
    format!(
        "/dev/nvidiactl,/dev/nvidia0,/dev/nvidia-caps/nvidia-cap{g},/dev/nvidia-caps/nvidia-cap{c}"
    )
}

/// Every sample of the series counted `mib` for the job.
fn every_sample_counts(s: &Setup, mib: u64) {
    let lines = series_lines(s);
    assert!(lines.len() > 2, "{lines:?}");
    for line in lines.iter().skip(1) {
        let used: u64 = line.split(',').nth(1).unwrap().parse().unwrap();
        assert_eq!(used, mib << 20, "{line}");
    }
}

/// The reproduction: a 1g.5gb job at GRES index 6 sees
/// CUDA_VISIBLE_DEVICES=0; the slice beside it leaks 1,200 MB/min. The agent
/// watches the job's own slice, whose memory is flat, and never stops it.
#[test]
fn a_renumbered_slice_job_reads_its_own_slice_not_gpu_0_and_is_not_stopped_for_a_neighbour() {
    let s = constrained_node(
        json!([{"pid": 4242, "used_memory_mib": 3000}]),
        json!([]),
        json!([]),
    );
    let uuid = s.mig_uuid(13);
    let mut trainer = Trainer::start();
    let (outcome, log) = finish(&mut s.in_job(
        "0",
        "6",
        &slice_files(13),
        Some(trainer.pid()),
        &["--samples", "40"],
    ));
    assert_eq!(outcome["ended"], "sample_limit", "{outcome}\n{log}");
    assert_eq!(outcome["device"], uuid.as_str(), "{outcome}");
    assert_eq!(outcome["is_mig"], true);
    assert_eq!(outcome["device_name"], "NVIDIA A100-SXM4-40GB MIG 1g.5gb");
    assert_eq!(outcome["read_errors"], 0, "{outcome}\n{log}");
    assert!(decisions(&outcome, "stop").is_empty(), "{outcome}\n{log}");
    assert!(
        trainer.running(),
        "the job was stopped for its neighbour's leak"
    );
    assert!(
        log.contains("the job's device(s): SLURM_JOB_GPUS=6 through gres.conf line(s) 8 (CUDA_VISIBLE_DEVICES=0)"),
        "{log}"
    );
    every_sample_counts(&s, 3000);
}

/// A whole-GPU job on GPU 1 (GRES 7) renumbered to 0: it reads GPU 1, the
/// only GPU its cgroup lets it open, not GPU 0.
#[test]
fn a_renumbered_whole_gpu_job_reads_its_own_gpu() {
    let mut trainer = Trainer::start();
    let s = constrained_node(
        json!([]),
        json!([{"pid": trainer.pid(), "used_memory_mib": 6000}]),
        json!([]),
    );
    let uuid = s.gpu_uuid(1);
    let (outcome, log) = finish(&mut s.in_job(
        "0",
        "7",
        "/dev/nvidiactl,/dev/nvidia1",
        Some(trainer.pid()),
        &["--samples", "30"],
    ));
    assert_eq!(outcome["ended"], "sample_limit", "{outcome}\n{log}");
    assert_eq!(outcome["device"], uuid.as_str(), "{outcome}");
    assert_eq!(outcome["is_mig"], false);
    assert_eq!(outcome["read_errors"], 0, "{outcome}\n{log}");
    assert!(decisions(&outcome, "stop").is_empty(), "{outcome}\n{log}");
    assert!(trainer.running());
    every_sample_counts(&s, 6000);
}

/// A shard job on GPU 1 renumbered to 0, with another shard job leaking on
/// the same GPU: its own processes on its own GPU count, nothing else.
#[test]
fn a_renumbered_shard_job_counts_its_processes_on_its_own_gpu() {
    let mut trainer = Trainer::start();
    let s = constrained_node(
        json!([]),
        json!([{"pid": trainer.pid(), "used_memory_mib": 6000}, neighbour_leaking()]),
        json!([]),
    );
    let uuid = s.gpu_uuid(1);
    let (outcome, log) = finish(
        s.in_job(
            "0",
            "7",
            "/dev/nvidiactl,/dev/nvidia1",
            Some(trainer.pid()),
            &["--samples", "30"],
        )
        .env("SLURM_SHARDS_ON_NODE", "2"),
    );
    assert_eq!(outcome["ended"], "sample_limit", "{outcome}\n{log}");
    assert_eq!(outcome["device"], uuid.as_str(), "{outcome}");
    assert_eq!(outcome["read_errors"], 0, "{outcome}\n{log}");
    assert!(decisions(&outcome, "stop").is_empty(), "{outcome}\n{log}");
    assert!(trainer.running());
    every_sample_counts(&s, 6000);
}

/// The exclusive pool: two whole GPUs (GRES 7, 8) renumbered to 0,1. Both of
/// the job's own GPUs are read, and its own leak on the second is stopped.
#[test]
fn the_exclusive_pools_renumbered_gpus_are_the_jobs_own_and_its_leak_is_stopped() {
    let mut trainer = Trainer::start();
    let rate = mib_per_s(600.0);
    let s = constrained_node(
        json!([]),
        json!([{"pid": trainer.pid(), "used_memory_mib": 2000}]),
        json!([{"pid": trainer.pid(), "memory_curve": [[0, 6000], [3600, 6000.0 + 3600.0 * rate]]}]),
    );
    let (one, two) = (s.gpu_uuid(1), s.gpu_uuid(2));
    let (outcome, log) = finish(&mut s.in_job(
        "0,1",
        "7,8",
        "/dev/nvidiactl,/dev/nvidia1,/dev/nvidia2",
        Some(trainer.pid()),
        &[],
    ));
    assert_eq!(outcome["ended"], "stopped", "{outcome}\n{log}");
    assert_eq!(outcome["device"], format!("{one},{two}"), "{outcome}");
    assert_eq!(outcome["read_errors"], 0, "{outcome}\n{log}");
    assert!(log.contains("the job holds 2 devices"), "{log}");
    assert!(!trainer.running(), "the job's own leak was not stopped");
}

/// Renumbered indices and no gres.conf to map them: the agent cannot know
/// which device is the job's. It warns, reads no device and never stops.
#[test]
fn where_the_mapping_cannot_be_known_the_agent_warns_and_never_stops() {
    let s = constrained_node(
        json!([{"pid": 4242, "used_memory_mib": 3000}]),
        json!([]),
        json!([]),
    );
    std::fs::remove_file(s.dir.path().join("gres.conf")).unwrap();
    let mut trainer = Trainer::start();
    let (outcome, log) = finish(&mut s.in_job(
        "0",
        "6",
        &slice_files(13),
        Some(trainer.pid()),
        &["--samples", "40"],
    ));
    assert_eq!(outcome["ended"], "unwatched", "{outcome}\n{log}");
    assert_eq!(outcome["samples"], 0, "{outcome}");
    assert!(
        outcome["decisions"].as_array().unwrap().is_empty(),
        "{outcome}"
    );
    assert!(
        log.contains("warning: the job's own GPU device(s) cannot be known: CUDA_VISIBLE_DEVICES=0 is renumbered from SLURM_JOB_GPUS=6")
            && log.contains("never stops this job"),
        "{log}"
    );
    assert_eq!(
        log.matches("warning: the job's own GPU device(s) cannot be known")
            .count(),
        1,
        "warned once: {log}"
    );
    assert!(log.contains("ending after 0 sample(s)"), "{log}");
    assert!(trainer.running());
    assert!(!s.state("train.guard.json").exists());
}

/// An index names no slice of a GPU in MIG mode, and that GPU's memory is
/// every slice's: the agent refuses to watch it rather than charge the job
/// with its neighbours' use.
#[test]
fn an_index_on_a_gpu_in_mig_mode_is_never_read_as_the_whole_gpu() {
    let s = Setup::new(
        "h200-partitioned-busy.json",
        in_slice(json!([[0, 100]])),
        "",
    );
    let out = run_bounded(
        &mut s.agent("0", None, &["--samples", "2"]),
        Duration::from_secs(60),
    )
    .expect("the agent hung");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("could not start") && err.contains("GPU 0 is in MIG mode"),
        "{err}"
    );
}

/// `[tune] early_stop` in the agent of a search's trial, with no NVML at
/// all (early stopping reads only the trials' results.csv): successive
/// halving at its first rung keeps the best half of the four trials of the
/// batch, so trial 2, the worst, is stopped: its record written, its trainer
/// gone, the decision in the outcome.
#[test]
fn a_trial_behind_its_batch_is_stopped_by_successive_halving_without_nvml() {
    let dir = tempfile::tempdir().unwrap();
    let workdir = dir.path().join("run");
    write_manifest(
        &workdir,
        "[tune]\ntrials = 4\nparallel = 4\nepochs = 10\n\
         early_stop = { rule = \"halving\", min_epochs = 1, min_trials = 3, eta = 2 }\n",
    );
    for (n, first) in [(0, 0.30), (1, 0.20), (2, 0.05), (3, 0.25)] {
        let d = workdir.join(format!("train-{n}"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(
            d.join("results.csv"),
            format!("epoch,metrics/mAP50-95(B)\n1,{first}\n"),
        )
        .unwrap();
    }
    std::fs::write(
        dir.path().join("site.toml"),
        format!(
            "[guard]\ninterval_s = 0.2\ngrace_s = 2\n[paths]\naudit_log = \"{}\"\n",
            dir.path().join("audit.log").display()
        ),
    )
    .unwrap();
    let mut trainer = Trainer::start();
    let mut cmd = yolo();
    cmd.arg("--site")
        .arg(dir.path().join("site.toml"))
        .args(["agent", "--workdir"])
        .arg(&workdir)
        .args([
            "--stage",
            "train",
            "--task",
            "2",
            "--devices",
            "0",
            "--json",
        ])
        .args(["--nvml-lib", "/nonexistent/libnvidia-ml.so.1"])
        .args(["--pid", &trainer.pid().to_string(), "--samples", "50"])
        .env("SLURM_JOB_ID", "78")
        .env_remove("SLURM_ARRAY_TASK_ID")
        .env("XDG_STATE_HOME", dir.path().join("xdg"));
    let out = run(&mut cmd);
    let log = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(0), "{log}");
    let outcome: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(outcome["ended"], "pruned", "{outcome:#}\n{log}");
    let d = &outcome["decisions"][0];
    assert_eq!(
        (
            &d["decision"],
            &d["rule"],
            &d["epoch"],
            &d["compared"],
            &d["kept"]
        ),
        (
            &json!("prune"),
            &json!("halving"),
            &json!(1),
            &json!(4),
            &json!(2)
        ),
        "{outcome:#}"
    );
    assert!(!trainer.running(), "the trainer was stopped");
    let record: Value =
        serde_json::from_str(&read(&workdir.join("state/train.2.prune.json"))).unwrap();
    assert_eq!(record["value"], 0.05, "{record}");
    assert_eq!(
        record["reference"], 0.25,
        "the last of the two kept: {record}"
    );
    assert_eq!(record["job_id"], "78");
    assert!(
        log.contains("early stopping of trial 2: halving rule")
            && log.contains("stopped early (successive halving)"),
        "{log}"
    );
    assert!(read(&dir.path().join("audit.log")).contains("tune-prune"));
    // No guard record: a prune is not the memory guard's stop (on_oom reads that).
    assert!(!workdir.join("state/train.2.guard.json").exists());

    // An agent that goes on: it looks ten times (without a device, each
    // pass of its loop counts for --samples; the first look judges the
    // trial's epoch 1 at once) and ends by the sample limit, having decided
    // nothing, with the trainer still running.
    let goes_on = |task: &str, epochs_before: Option<&str>| {
        let mut trainer = Trainer::start();
        let mut cmd = yolo();
        cmd.arg("--site")
            .arg(dir.path().join("site.toml"))
            .args(["agent", "--workdir"])
            .arg(&workdir)
            .args([
                "--stage",
                "train",
                "--task",
                task,
                "--devices",
                "0",
                "--json",
            ])
            .args(["--nvml-lib", "/nonexistent/libnvidia-ml.so.1"])
            .args(["--pid", &trainer.pid().to_string(), "--samples", "10"])
            .env("XDG_STATE_HOME", dir.path().join("xdg"))
            .env_remove("YOLO_SCHED_EPOCHS_BEFORE");
        if let Some(n) = epochs_before {
            cmd.env("YOLO_SCHED_EPOCHS_BEFORE", n);
        }
        let out = run(&mut cmd);
        let log = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(out.status.code(), Some(0), "{log}");
        let outcome: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(outcome["ended"], "sample_limit", "{outcome:#}\n{log}");
        assert_eq!(outcome["decisions"], json!([]), "{outcome:#}\n{log}");
        assert!(trainer.running(), "trial {task} was stopped: {log}");
        let _ = trainer.0.kill();
        assert!(!workdir
            .join(format!("state/train.{task}.prune.json"))
            .exists());
    };
    // Trial 0, the best, goes on.
    goes_on("0", None);
    // Trial 1 (0.20, under the 0.25 kept at rung 1) started again from its
    // checkpoint: its earlier job's agent decided its rung 1 (it was alone
    // there then), so this one does not judge it again.
    goes_on("1", Some("1"));
}
