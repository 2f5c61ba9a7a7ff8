//! The `sacct` paths, live, on the cluster with accounting (MariaDB +
//! slurmdbd) and a short MinJobAge, so finished jobs leave slurmctld's memory
//! within seconds: `status` of purged jobs, `report` slice-hours and its
//! `--since` window, and the run named in sacct's comment.
//!
//! `slurm/test-all.sh` runs these in a second pass after switching the
//! cluster with `ACCOUNTING=1 MIN_JOB_AGE=10 slurm/cluster.sh up`; the first
//! pass (accounting off, as on many clusters) skips them.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{self, *};
use crate::run_fixture::RunFixture;
use serde_json::Value;

const NEEDS: &str = "needs the local Slurm cluster with accounting (ACCOUNTING=1 MIN_JOB_AGE=10 slurm/cluster.sh up)";

#[track_caller]
fn assert_accounting() {
    let out = Command::new("scontrol")
        .args(["show", "config"])
        .output()
        .expect("scontrol");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines()
            .any(|l| l.starts_with("AccountingStorageType") && l.contains("slurmdbd")),
        "this test {NEEDS}"
    );
}

/// Wait until slurmctld has forgotten every job (MinJobAge passed and purged).
#[track_caller]
fn wait_purged(ids: &[u64], limit: Duration) {
    crate::common::wait_until(limit, &format!("squeue to forget jobs {ids:?}"), || {
        ids.iter().all(|id| job_state(*id).is_none())
    });
}

/// A finished run whose jobs slurmctld has purged: (fixture, run id, submit JSON).
/// A finished run whose jobs slurmctld has forgotten; each stand-in epoch
/// takes `epoch_s` seconds.
#[track_caller]
fn purged_run(name: &str, epoch_s: &str) -> (RunFixture, String, Value) {
    let f = RunFixture::new();
    let spec = f.spec(name);
    let out = run(f
        .cmd()
        .env("YOLO_STANDIN_EPOCH_SECONDS", epoch_s)
        .args(["submit", "--json"])
        .arg(&spec));
    assert_eq!(out.status.code(), Some(0), "submit failed: {out:?}");
    let submitted: Value = serde_json::from_slice(&out.stdout).unwrap();
    let run_id = submitted["run_id"].as_str().unwrap().to_string();
    let watch = common::run_bounded(f.cmd().args(["watch", &run_id]), Duration::from_secs(300))
        .expect("watch ended");
    assert_eq!(watch.status.code(), Some(0), "{watch:?}");
    let ids = job_ids(&submitted);
    wait_purged(&ids, Duration::from_secs(180));
    (f, run_id, submitted)
}

fn job_ids(submitted: &Value) -> Vec<u64> {
    crate::common::submitted_ids(submitted)
}

#[test]
#[ignore = "needs the local Slurm cluster with accounting (ACCOUNTING=1 MIN_JOB_AGE=10 slurm/cluster.sh up)"]
fn doctor_sees_accounting_with_job_comments() {
    let _cluster = common::cluster(module_path!());
    assert_accounting();
    let out = run(yolo().args(["doctor", "--json"]));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let check = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "accounting")
        .unwrap_or_else(|| panic!("no accounting check in {v}"));
    assert_eq!(check["status"], "ok", "{check}");
    let comments = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "job_comments")
        .unwrap_or_else(|| panic!("no job_comments check in {v}"));
    assert_eq!(comments["status"], "ok", "{comments}");
    assert!(
        comments["detail"]
            .as_str()
            .unwrap()
            .contains("PrivateData=jobs"),
        "{comments}"
    );
    // The local cluster records every GPU type it has (slurm/cluster.sh's
    // AccountingStorageTRES), so the advisor sees what jobs asked for.
    let typed = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "typed_gpu_accounting")
        .unwrap_or_else(|| panic!("no typed_gpu_accounting check in {v}"));
    assert_eq!(typed["status"], "ok", "{typed}");
}

#[test]
#[ignore = "needs the local Slurm cluster with accounting (ACCOUNTING=1 MIN_JOB_AGE=10 slurm/cluster.sh up)"]
fn a_purged_run_is_known_from_sacct_alone() {
    let _cluster = common::cluster(module_path!());
    assert_accounting();
    let (f, run_id, submitted) = purged_run("acctstatus", "0.1");
    // Without the records the jobs wrote, only sacct knows how they ended.
    let state = f.path().join("run/state");
    for e in std::fs::read_dir(&state).unwrap().flatten() {
        std::fs::remove_file(e.path()).unwrap();
    }
    let out = run(f.cmd().args(["status", "--json", &run_id]));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let st: Value = serde_json::from_slice(&out.stdout).unwrap();
    let stages = st["stages"].as_array().unwrap();
    assert_eq!(stages.len(), job_ids(&submitted).len());
    for s in stages {
        for t in s["tasks"].as_array().unwrap() {
            assert_eq!(t["state"], "completed", "{s}");
            assert_eq!(t["source"], "sacct", "{s}");
        }
    }
    // list and report agree with status on the same run.
    let out = run(f.cmd().args(["list", "--json"]));
    let rows: Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["run_id"] == run_id.as_str())
        .unwrap_or_else(|| panic!("{run_id} not listed: {rows}"));
    assert_eq!(row["state"], "completed", "{row}");

    // The comment in accounting names the run, its submission and stage.
    let ids: Vec<String> = job_ids(&submitted).iter().map(u64::to_string).collect();
    let out = Command::new("sacct")
        .args([
            "-X",
            "-n",
            "-P",
            "-o",
            "JobID,Comment",
            "-j",
            &ids.join(","),
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text.lines()
            .filter(|l| l.contains(&format!("|yolo-sched:{run_id}:")))
            .count(),
        ids.len(),
        "{text}"
    );
}

#[test]
#[ignore = "needs the local Slurm cluster with accounting (ACCOUNTING=1 MIN_JOB_AGE=10 slurm/cluster.sh up)"]
fn report_counts_slice_hours_inside_the_window_only() {
    let _cluster = common::cluster(module_path!());
    assert_accounting();
    // Two epochs of 1.5 s: sacct counts whole seconds, and a train job that
    // starts and ends within one second has no slice-hours to count.
    let (f, _run_id, submitted) = purged_run("acctreport", "1.5");
    let train_gres = submitted["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["stage"] == "train")
        .and_then(|j| j["gres"].as_str())
        .expect("train has a GPU")
        .to_string();
    let slice = train_gres.trim_start_matches("gpu:").to_string();
    let slice = slice
        .rsplit_once(':')
        .map_or(slice.clone(), |(t, _)| t.to_string());
    let hours_of = |since: &str| -> f64 {
        let out = run(f.cmd().args(["report", "--since", since, "--json"]));
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["usage"]["rows"]
            .as_array()
            .unwrap_or(&vec![])
            .iter()
            .filter(|r| r["type"].as_str().is_some_and(|g| g.contains(&slice)))
            .filter_map(|r| r["slice_hours"].as_f64())
            .sum()
    };
    let inside = hours_of("1h");
    assert!(
        inside > 0.0,
        "slice-hours of {slice} in the last hour: {inside}"
    );
    // A window that starts after the run ended counts none of it.
    let later = (chrono::Utc::now() + chrono::Duration::seconds(1))
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    std::thread::sleep(Duration::from_secs(2));
    let after = hours_of(&later);
    assert!(
        after < inside,
        "{after} slice-hours after the run, {inside} with it"
    );
}

/// `advise` reads the window's typed GPU jobs from the real sacct, infers the
/// nodes' A100-40GB from their GRES types, and simulates the set-ups: the
/// `2g.10gb` jobs fit no `1g.5gb` slice, so `all-1g` cannot run them, while
/// the current layout and whole GPUs can. `--demand-out` writes them for
/// `node-setup --layout auto --demand`.
#[test]
#[ignore = "needs the local Slurm cluster with accounting (ACCOUNTING=1 MIN_JOB_AGE=10 slurm/cluster.sh up)"]
fn advise_reads_the_windows_typed_jobs_and_simulates_the_set_ups() {
    let _cluster = common::cluster(module_path!());
    assert_accounting();
    let since = (chrono::Utc::now() - chrono::Duration::seconds(5))
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let dir = common::shared_tempdir();
    let mut ids = Vec::new();
    for i in 0..5 {
        let out = run(Command::new("sbatch")
            .args([
                "--parsable",
                "--partition=gpu",
                "--gres=gpu:2g.10gb:1",
                "--cpus-per-task=1",
                "--mem=100M",
                "--time=5",
            ])
            .arg(format!("--output={}/advise-{i}.out", dir.path().display()))
            .args(["--wrap", "sleep 3"]));
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        ids.push(
            text.trim()
                .split(';')
                .next()
                .unwrap()
                .parse::<u64>()
                .unwrap(),
        );
    }
    // An untyped request is counted and left out.
    let out = run(Command::new("sbatch")
        .args([
            "--parsable",
            "--partition=gpu",
            "--gres=gpu:1",
            "--mem=100M",
            "--time=5",
        ])
        .arg(format!(
            "--output={}/advise-untyped.out",
            dir.path().display()
        ))
        .args(["--wrap", "sleep 1"]));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    ids.push(
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse::<u64>()
            .unwrap(),
    );
    let states = wait_jobs(&ids, Duration::from_secs(180));
    assert!(states.iter().all(|s| s == "COMPLETED"), "{states:?}");

    let demand = dir.path().join("demand.csv");
    // sacct may take a moment to hold the last job's end: poll until it does.
    let started = Instant::now();
    let v = loop {
        let out = run(yolo()
            .args(["advise", "--since", &since, "--partition", "gpu", "--json"])
            .arg("--demand-out")
            .arg(&demand));
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        let lines = std::fs::read_to_string(&demand).unwrap();
        // Equal jobs share a line (gres,time_limit_s,jobs,submit_s): count the jobs.
        let medium: u64 = lines
            .lines()
            .filter(|l| l.starts_with("gpu:2g.10gb:1,"))
            .filter_map(|l| l.split(',').nth(2)?.parse::<u64>().ok())
            .sum();
        if medium >= 5 && v["counted"]["untyped"].as_u64() >= Some(1) {
            break v;
        }
        assert!(
            started.elapsed() < crate::common::patience(Duration::from_secs(60)),
            "{v}\n{lines}"
        );
        std::thread::sleep(Duration::from_secs(1));
    };
    for n in v["nodes"].as_array().unwrap() {
        assert_eq!(n["model"], "NVIDIA A100-SXM4-40GB", "{n}");
        assert_eq!(n["model_from"], "gres types");
        // 4 × 1g.5gb and 2 × 2g.10gb need two A100s; the a100 is a third.
        assert_eq!(n["gpus"].as_array().unwrap().len(), 3, "{n}");
    }
    let setup = |name: &str| -> Value {
        v["advice"]["setups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .unwrap_or_else(|| panic!("no set-up {name}: {v}"))
            .clone()
    };
    assert_eq!(setup("current")["outcome"]["never_run"], 0, "{v}");
    assert_eq!(setup("whole")["outcome"]["never_run"], 0, "{v}");
    assert!(
        setup("all-1g")["outcome"]["never_run"].as_u64().unwrap() >= 5,
        "{v}"
    );
    assert_eq!(setup("auto")["outcome"]["never_run"], 0, "{v}");
    // The report carries the short form where accounting answers: one
    // row and one gauge per node of the partition.
    let out = run(yolo().args([
        "report",
        "--partition",
        "gpu",
        "--section",
        "advice",
        "--json",
    ]));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let advice = &r["advice"];
    assert!(advice["error"].is_null(), "{advice}");
    assert!(advice["jobs"].as_u64() >= Some(5), "{advice}");
    let nodes = advice["nodes"].as_array().unwrap();
    assert!(
        nodes.len() >= 2 && nodes.iter().all(|n| n["advised"].is_boolean()),
        "{advice}"
    );
    let out = run(yolo().args(["report", "--partition", "gpu", "--format", "prometheus"]));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("yolo_sched_advice_node_layout_advised{node=\"node1\"}"),
        "{text}"
    );
    // The text form names the set-ups and ends with the advice.
    let out = run(yolo().args(["advise", "--since", &since, "--partition", "gpu"]));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    for word in ["current", "whole", "all-1g", "balanced", "auto", "advice:"] {
        assert!(text.contains(word), "{word} missing:\n{text}");
    }
}

/// Issue 34: trainings that asked for a whole `a100` and held 6000 MiB (the
/// fake NVML's process on every GPU) under the stand-in trainer. Each job's
/// agent writes its peak into the job's comment while the job runs;
/// slurmdbd keeps it; `advise` reads it back with the window's one sacct
/// call and plans the jobs on the smallest type that holds 6000 MiB + 10 %
/// (1g.10gb on these A100-40GB nodes). Comments carrying a measurement of
/// another job, a negative, a 10^30 and a control character are refused and
/// counted. The same jobs without their comments are planned as asked, and
/// said to be; and on the same jobs' lines with their times stretched 60×
/// (seconds as minutes, as the replay stretches its traces), `advise`
/// recommends cutting with a predicted gain.
#[test]
#[ignore = "needs the local Slurm cluster with accounting (ACCOUNTING=1 MIN_JOB_AGE=10 slurm/cluster.sh up)"]
fn measured_needs_reach_advise_through_accounting_and_forgeries_are_counted() {
    let _cluster = common::cluster(module_path!());
    assert_accounting();
    let since = chrono::Local::now().naive_local() - chrono::Duration::seconds(5);
    let node = crate::fake_nvml::FakeNode::with_fixture("8xh200.json", |f| {
        for g in f["gpus"].as_array_mut().unwrap() {
            g["processes"] = serde_json::json!([{"pid": 1, "used_memory_mib": 6000}]);
        }
    });
    let f = RunFixture::new();
    std::fs::write(f.path().join("site.toml"), "[guard]\ninterval_s = 0.5\n").unwrap();
    let trainings = 8;
    let mut runs = Vec::new();
    for i in 0..trainings {
        let spec = f.path().join(format!("need-{i}.toml"));
        std::fs::write(
            &spec,
            format!(
                "version = 1\n[run]\nname = \"need-{i}\"\npartition = \"gpu\"\nworkdir = \"run-{i}\"\n\
                 [train]\nmodel = \"yolov8n.yaml\"\ndata = \"{}\"\nepochs = 3\nimgsz = 64\nbatch = 8\nworkers = 1\n\
                 [resources]\ngpu = \"a100\"\n\
                 [stages.prepare]\nenabled = false\n[stages.val]\nenabled = false\n[stages.export]\nenabled = false\n",
                f.path().join("dataset/data.yaml").display()
            ),
        )
        .unwrap();
        let mut cmd = f.cmd();
        node.apply_env(&mut cmd);
        let out = run(cmd
            .env("YOLO_SCHED_SITE", f.path().join("site.toml"))
            .env("YOLO_STANDIN_EPOCH_SECONDS", "2")
            .args(["submit", "--json"])
            .arg(&spec));
        assert_eq!(out.status.code(), Some(0), "submit failed: {out:?}");
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        runs.push(v["run_id"].as_str().unwrap().to_string());
    }
    // Jobs whose own comments carry measurements not to trust.
    let forged = [
        "yolo-sched:x:y:train ysneed=1;job=1;slice=a100;peak_mib=100/40960".to_string(),
        "yolo-sched:x:y:train ysneed=1;job=JOB;slice=a100;peak_mib=-100/40960".to_string(),
        "yolo-sched:x:y:train ysneed=1;job=JOB;slice=a100;peak_mib=1000000000000000000000000000000/40960".to_string(),
        "yolo-sched:x:y:train ysneed=1;job=JOB;slice=a100;peak_mib=1\u{7}00/40960".to_string(),
    ];
    let mut others = Vec::new();
    for comment in &forged {
        let out = run(Command::new("sbatch")
            .args([
                "--parsable",
                "--partition=gpu",
                "--gres=gpu:a100:1",
                "--mem=100M",
                "--time=5",
                "--output=/dev/null",
                "--hold",
            ])
            .arg(format!("--comment={comment}"))
            .args(["--wrap", "true"]));
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let id: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
        // Its own id where the comment names JOB: only the numbers are wrong.
        let c = comment.replace("JOB", &id.to_string());
        let out = run(Command::new("scontrol").args([
            "update",
            &format!("JobId={id}"),
            &format!("Comment={c}"),
        ]));
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        run(Command::new("scontrol").args(["release", &id.to_string()]));
        others.push(id);
    }
    for run_id in &runs {
        let mut cmd = f.cmd();
        node.apply_env(&mut cmd);
        let watch = common::run_bounded(cmd.args(["watch", run_id]), Duration::from_secs(300))
            .expect("watch ended");
        assert_eq!(watch.status.code(), Some(0), "{watch:?}");
    }
    let states = wait_jobs(&others, Duration::from_secs(120));
    assert!(states.iter().all(|s| s == "COMPLETED"), "{states:?}");

    // The window's one sacct call, polled until slurmdbd holds every end.
    let dir = common::shared_tempdir();
    let demand = dir.path().join("demand.csv");
    let since_arg = since.format("%Y-%m-%dT%H:%M:%S").to_string();
    let started = Instant::now();
    let v = loop {
        let out = run(yolo()
            .args([
                "advise",
                "--since",
                &since_arg,
                "--partition",
                "gpu",
                "--json",
            ])
            .arg("--demand-out")
            .arg(&demand));
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        let n = &v["needs"];
        if n["measured"]["jobs"].as_u64() >= Some(trainings)
            && n["refused"]["other_job"].as_u64() >= Some(1)
            && n["refused"]["bad_number"].as_u64() >= Some(2)
            && n["refused"]["malformed"].as_u64() >= Some(1)
        {
            break v;
        }
        assert!(
            started.elapsed() < crate::common::patience(Duration::from_secs(60)),
            "{n}\n{v}"
        );
        std::thread::sleep(Duration::from_secs(1));
    };
    let csv = std::fs::read_to_string(&demand).unwrap();
    let jobs_of = |gres: &str| -> u64 {
        csv.lines()
            .filter(|l| l.starts_with(gres))
            .filter_map(|l| l.split(',').nth(2)?.parse::<u64>().ok())
            .sum()
    };
    assert!(jobs_of("gpu:1g.10gb:1,") >= trainings, "{csv}");
    assert!(
        jobs_of("gpu:a100:1,") >= 4,
        "the refused stay as asked: {csv}"
    );
    let user = String::from_utf8(Command::new("id").arg("-un").output().unwrap().stdout)
        .unwrap()
        .trim()
        .to_string();
    let mine = v["rightsizing"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["by"] == "user" && o["name"] == user.as_str())
        .unwrap_or_else(|| panic!("no right-sizing line for {user}: {v}"))
        .clone();
    assert!(mine["jobs"].as_u64() >= Some(trainings), "{mine}");
    assert!(
        mine["moves"]["a100 → 1g.10gb"].as_u64() >= Some(trainings),
        "{mine}"
    );

    // What the agent wrote, as accounting keeps it: the run's tag first.
    let fields = "JobIDRaw,Partition,Account,User,State,Submit,Start,End,ElapsedRaw,TimelimitRaw,ReqTRES,AllocTRES,TRESUsageInMax,Comment";
    let out = run(Command::new("sacct").args([
        "-X",
        "--parsable2",
        "--noheader",
        "--allusers",
        "--partition=gpu",
        "-S",
        &since_arg,
        &format!("--format={fields}"),
    ]));
    let lines = String::from_utf8_lossy(&out.stdout).to_string();
    let measured: Vec<&str> = lines
        .lines()
        .filter(|l| runs.iter().any(|r| l.contains(&format!("yolo-sched:{r}:"))))
        .collect();
    assert_eq!(measured.len() as u64, trainings, "{lines}");
    for l in &measured {
        let id = l.split('|').next().unwrap();
        assert!(
            l.contains(&format!(":train ysneed=1;job={id};slice=h200;epochs="))
                && l.contains(";peak_mib=6000/"),
            "{l}"
        );
    }

    // The same jobs without their comments: planned as asked, and said.
    let asked: String = lines
        .lines()
        .map(|l| l.splitn(13, '|').take(12).collect::<Vec<_>>().join("|") + "\n")
        .collect();
    let file = dir.path().join("asked.txt");
    std::fs::write(&file, &asked).unwrap();
    let out = run(yolo()
        .args(["advise", "--since", &since_arg])
        .args(["--partition", "gpu", "--json", "--sacct-file"])
        .arg(&file));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let a: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(a["needs"]["measured"]["jobs"], 0, "{a}");
    assert!(
        a["needs"]["asked"]["jobs"].as_u64() >= Some(trainings + 4),
        "{a}"
    );
    assert!(
        a["warnings"]
            .to_string()
            .contains("no job of the window carries a measured GPU memory"),
        "{}",
        a["warnings"]
    );

    // Stretched 60×: the jobs' seconds as minutes, from two days ago.
    let t0 = since;
    let from = chrono::Local::now().naive_local() - chrono::Duration::days(2);
    let stretch = |t: &str| -> String {
        match chrono::NaiveDateTime::parse_from_str(t, "%Y-%m-%dT%H:%M:%S") {
            Ok(at) => (from + (at - t0) * 60)
                .format("%Y-%m-%dT%H:%M:%S")
                .to_string(),
            Err(_) => t.to_string(),
        }
    };
    let stretched: String = lines
        .lines()
        .map(|l| {
            let mut c: Vec<String> = l.splitn(14, '|').map(str::to_string).collect();
            for i in [5, 6, 7] {
                c[i] = stretch(&c[i]);
            }
            for i in [8, 9] {
                if let Ok(n) = c[i].parse::<u64>() {
                    c[i] = (n * 60).to_string();
                }
            }
            c.join("|") + "\n"
        })
        .collect();
    let file = dir.path().join("stretched.txt");
    std::fs::write(&file, &stretched).unwrap();
    let from_arg = (from - chrono::Duration::hours(1))
        .format("%Y-%m-%dT%H:%M:%S")
        .to_string();
    let out = run(yolo()
        .args(["advise", "--since", &from_arg])
        .args(["--partition", "gpu", "--json", "--sacct-file"])
        .arg(&file));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let s: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        s["needs"]["measured"]["jobs"].as_u64() >= Some(trainings),
        "{s}"
    );
    assert!(s["advice"]["changes"].as_bool().unwrap(), "{s}");
    let mean = |name: &str| -> f64 {
        s["advice"]["setups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == name)
            .unwrap()["outcome"]["mean_wait_s"]
            .as_f64()
            .unwrap()
    };
    assert!(mean("auto") + 60.0 <= mean("current"), "{s}");
}
