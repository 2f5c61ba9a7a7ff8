//! `yolo-sched report` against the live local Slurm cluster, with jobs of our
//! own in known states: running on slices, pending for resources, pending on
//! a dependency, never satisfiable, a pending array; a drained node when
//! node2 exists. Every format must show the same figures as Slurm itself.
//!
//! Other people use the cluster at the same time, so the jobs carry an
//! account of their own and the report is filtered by it; what Slurm decided
//! (which of our jobs run, which wait and why) is read with plain `squeue`
//! right before and after the report, and the report must match it.

use crate::common;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use crate::common::{run, yolo};
use serde_json::Value;

/// Cancels our jobs, and only ours, however the test ends.
struct Jobs {
    ids: Vec<u64>,
}

impl Drop for Jobs {
    fn drop(&mut self) {
        if !self.ids.is_empty() {
            let ids: Vec<String> = self.ids.iter().map(u64::to_string).collect();
            let _ = Command::new("scancel").args(&ids).status();
        }
    }
}

impl Jobs {
    #[track_caller]
    fn submit(&mut self, args: &[&str]) -> u64 {
        let out = Command::new("sbatch")
            .arg("--parsable")
            .args(["-o", "/dev/null"])
            .args(args)
            .output()
            .expect("sbatch");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "sbatch {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let id: u64 = text.trim().split(';').next().unwrap().parse().unwrap();
        self.ids.push(id);
        id
    }
}

/// Puts node2 back in service however the test ends.
struct Drained {
    node: String,
}

impl Drop for Drained {
    fn drop(&mut self) {
        let _ = Command::new("scontrol")
            .args(["update", &format!("NodeName={}", self.node), "State=RESUME"])
            .status();
    }
}

/// What Slurm says about our jobs: job id (`15_[0-3]` for a pending array) →
/// (state, reason, tres-per-node, submit time).
type Snapshot = BTreeMap<String, (String, String, String, String)>;

fn snapshot(account: &str) -> Snapshot {
    let out = Command::new("squeue")
        .args(["-h", "-A", account, "-t", "PD,R,CG", "-o", "%i|%T|%r|%b|%V"])
        .output()
        .expect("squeue");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('|').collect();
            (f.len() == 5).then(|| {
                (
                    f[0].to_string(),
                    (
                        f[1].to_string(),
                        f[2].to_string(),
                        f[3].to_string(),
                        f[4].to_string(),
                    ),
                )
            })
        })
        .collect()
}

/// Jobs a snapshot line stands for (`15_[0-3]` is four).
fn tasks(id: &str) -> u64 {
    match id.split_once("_[") {
        Some((_, range)) => {
            let range = range.trim_end_matches(']').split('%').next().unwrap();
            range
                .split(',')
                .map(|p| match p.split_once('-') {
                    Some((a, b)) => b.parse::<u64>().unwrap() - a.parse::<u64>().unwrap() + 1,
                    None => 1,
                })
                .sum()
        }
        None => 1,
    }
}

/// The figures the report must show, from a snapshot: running and pending
/// jobs per type, and pending jobs per reason.
#[derive(Debug, PartialEq, Default)]
struct Figures {
    running: BTreeMap<String, u64>,
    pending: BTreeMap<String, u64>,
    reasons: BTreeMap<String, u64>,
}

fn figures(s: &Snapshot) -> Figures {
    let mut f = Figures::default();
    for (id, (state, reason, gres, _)) in s {
        let kind = gres
            .trim_start_matches("gres:")
            .rsplit_once(':')
            .unwrap()
            .0
            .to_string();
        let n = tasks(id);
        if state == "PENDING" {
            *f.pending.entry(kind).or_default() += n;
            *f.reasons.entry(reason.clone()).or_default() += n;
        } else {
            *f.running.entry(kind).or_default() += n;
        }
    }
    f
}

#[track_caller]
fn report_figures(v: &Value) -> Figures {
    let mut f = Figures::default();
    for r in v["queue"]["by_partition_type"].as_array().unwrap() {
        assert_eq!(r["partition"], "gpu");
        let kind = r["type"].as_str().unwrap().to_string();
        for (key, map) in [
            ("running_jobs", &mut f.running),
            ("pending_jobs", &mut f.pending),
        ] {
            let n = r[key].as_u64().unwrap();
            if n > 0 {
                *map.entry(kind.clone()).or_default() += n;
            }
        }
    }
    for r in v["queue"]["pending_reasons"].as_array().unwrap() {
        f.reasons.insert(
            r["reason"].as_str().unwrap().to_string(),
            r["jobs"].as_u64().unwrap(),
        );
    }
    f
}

#[track_caller]
fn report(account: &str, trace: &std::path::Path, args: &[&str]) -> String {
    let out = run(yolo()
        .args(["report", "--account", account])
        .args(args)
        .env("YOLO_SCHED_SLURM_TRACE", trace));
    assert_eq!(out.status.code(), Some(0));
    String::from_utf8(out.stdout).unwrap()
}

fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|r| r.strip_prefix(' ')))
        .map(|v| v.parse().unwrap())
}

fn node_exists(name: &str) -> bool {
    Command::new("sinfo")
        .args(["-h", "-N", "-n", name, "-o", "%N"])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .any(|l| l.trim() == name)
        })
        .unwrap_or(false)
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up): cargo test -- --include-ignored"]
fn every_format_shows_what_slurm_shows() {
    let _cluster = common::cluster(module_path!());
    let account = format!("yrt{}", std::process::id());
    let a = ["-A", account.as_str(), "-p", "gpu"];
    let mut jobs = Jobs { ids: Vec::new() };
    let failing = jobs.submit(&[&a[..], &["--wrap", "exit 3"]].concat());
    let running = jobs.submit(&[&a[..], &["--gres=gpu:1g.5gb:1", "--wrap", "sleep 300"]].concat());
    // Three whole-GPU jobs for the two a100s of a two-node cluster (one of a
    // single node): at least one must wait for resources.
    let mut whole = Vec::new();
    for _ in 0..3 {
        whole.push(jobs.submit(&[&a[..], &["--gres=gpu:a100:1", "--wrap", "sleep 300"]].concat()));
    }
    let dep = format!("--dependency=afterok:{running}");
    let dependent = jobs.submit(
        &[
            &a[..],
            &[dep.as_str(), "--gres=gpu:2g.10gb:1", "--wrap", "true"],
        ]
        .concat(),
    );
    let array = jobs.submit(
        &[
            &a[..],
            &[
                dep.as_str(),
                "--array=0-3",
                "--gres=gpu:1g.5gb:1",
                "--wrap",
                "true",
            ],
        ]
        .concat(),
    );
    crate::common::wait_until(Duration::from_secs(60), "the failing job to fail", || {
        common::job_state(failing).as_deref() == Some("FAILED")
    });
    let never_dep = format!("--dependency=afterok:{failing}");
    let never = jobs.submit(
        &[
            &a[..],
            &[never_dep.as_str(), "--gres=gpu:1g.5gb:1", "--wrap", "true"],
        ]
        .concat(),
    );

    // Let Slurm settle: the slice job runs, nothing waits with reason None.
    crate::common::wait_until(Duration::from_secs(90), "the jobs to settle", || {
        let s = snapshot(&account);
        let state = |id: u64| s.get(&id.to_string()).map(|v| (v.0.as_str(), v.1.as_str()));
        state(running).is_some_and(|(st, _)| st == "RUNNING")
            && state(never) == Some(("PENDING", "DependencyNeverSatisfied"))
            && state(dependent) == Some(("PENDING", "Dependency"))
            && whole
                .iter()
                .any(|j| state(*j).is_some_and(|(_, r)| r == "Resources"))
            && s.values()
                .all(|(st, r, _, _)| st != "PENDING" || r != "None")
    });

    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace");
    // The report must match Slurm's own view taken just before and after it.
    let mut attempt = 0;
    let (json, before) = loop {
        let before = snapshot(&account);
        let _ = std::fs::remove_file(&trace);
        let json: Value =
            serde_json::from_str(&report(&account, &trace, &["--format", "json"])).unwrap();
        if snapshot(&account) == before || attempt == 5 {
            break (json, before);
        }
        attempt += 1;
    };
    let mut calls: Vec<String> = std::fs::read_to_string(&trace)
        .unwrap()
        .lines()
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .collect();
    calls.sort();
    // One call each for the queue, nodes and usage; with --account the runs
    // section finds the account's runs through Slurm: one more squeue, and
    // one more sacct unless the usage query found accounting off.
    let sacct = calls.iter().filter(|c| *c == "sacct").count();
    calls.retain(|c| c != "sacct");
    assert_eq!(
        calls,
        vec!["sinfo", "squeue", "squeue"],
        "a constant number of calls"
    );
    assert!((1..=2).contains(&sacct), "{sacct} sacct calls");

    let expected = figures(&before);
    assert_eq!(report_figures(&json), expected);
    assert!(before.contains_key(&format!("{array}_[0-3]")), "{before:?}");
    assert_eq!(
        expected.pending.get("gpu:1g.5gb"),
        Some(&5),
        "the array counts 4 and the never-runnable job 1"
    );
    let q = &json["queue"];
    assert_eq!(q["never_runnable_jobs"], 1);
    assert_eq!(q["never_runnable"][0]["job_id"], never.to_string());
    assert_eq!(
        q["never_runnable"][0]["dependency"],
        format!("afterok:{failing}(failed)")
    );
    let first_submitted = before
        .values()
        .filter(|v| v.0 == "PENDING")
        .map(|v| v.3.clone())
        .min()
        .unwrap();
    assert_eq!(q["oldest_pending"]["submitted"], first_submitted.as_str());
    let oldest = q["oldest_pending"]["job_id"].as_str().unwrap();
    assert_eq!(before[oldest].3, first_submitted);
    assert!(q["oldest_pending"]["wait_seconds"].as_i64().unwrap() >= 0);

    // Usage: the running jobs' slices, per type, under our account.
    let held: BTreeMap<String, u64> = json["usage"]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            assert_eq!(r["account"], account.as_str());
            (
                r["type"].as_str().unwrap().to_string(),
                r["slices_held"].as_u64().unwrap(),
            )
        })
        .filter(|(_, n)| *n > 0)
        .collect();
    assert_eq!(held, expected.running);
    match json["usage"]["accounting"]["status"].as_str().unwrap() {
        "disabled" => assert!(json["usage"]["rows"][0]["slice_hours"].is_null()),
        "ok" => assert!(json["usage"]["rows"][0]["slice_hours"].is_number()),
        other => panic!("accounting status {other}: {}", json["usage"]["accounting"]),
    }

    // Inventory: the cluster's totals, and our running a100s among the allocated.
    for t in json["inventory"]["totals"].as_array().unwrap() {
        let n = |k: &str| t[k].as_u64().unwrap();
        assert_eq!(n("allocated") + n("free"), n("total"), "{t}");
    }
    let a100 = json["inventory"]["totals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["type"] == "gpu:a100")
        .unwrap();
    let our_a100 = expected.running.get("gpu:a100").copied().unwrap_or(0);
    assert!(a100["allocated"].as_u64().unwrap() >= our_a100);

    // The other formats, from fresh runs: same counts (the jobs are settled).
    let text = report(&account, &trace, &["--section", "queue"]);
    assert!(
        text.contains(&format!(
            "{} running",
            expected.running.values().sum::<u64>()
        )),
        "{text}"
    );
    assert!(text.contains("can never run: dependency failed"), "{text}");
    assert!(text.contains("waiting for free resources"), "{text}");
    assert!(
        text.contains(&format!("afterok:{failing}(failed)")),
        "{text}"
    );
    assert!(!text.contains('\x1b'));

    let csv = report(
        &account,
        &trace,
        &["--format", "csv", "--section", "queue-reasons"],
    );
    let mut csv_reasons = BTreeMap::new();
    for line in csv.lines().skip(1) {
        let (code, rest) = line.split_once(',').unwrap();
        let jobs: u64 = rest.rsplit_once(',').unwrap().1.parse().unwrap();
        csv_reasons.insert(code.to_string(), jobs);
    }
    assert_eq!(csv_reasons, expected.reasons, "{csv}");

    let prom = report(&account, &trace, &["--format", "prometheus"]);
    for (kind, n) in &expected.pending {
        let series =
            format!(r#"yolo_sched_queue_jobs{{partition="gpu",type="{kind}",state="pending"}}"#);
        assert_eq!(sample(&prom, &series), Some(*n as f64), "{series}");
    }
    assert_eq!(
        sample(&prom, "yolo_sched_queue_never_runnable_jobs"),
        Some(1.0)
    );
    promtool_accepts(&prom);

    // Cancel our jobs before touching a node.
    drop(jobs);

    if node_exists("node2") {
        let reason = format!("yolo-sched report test {}", std::process::id());
        let status = Command::new("scontrol")
            .args([
                "update",
                "NodeName=node2",
                "State=DRAIN",
                &format!("Reason={reason}"),
            ])
            .status()
            .unwrap();
        assert!(status.success());
        let _guard = Drained {
            node: "node2".into(),
        };
        let json: Value = serde_json::from_str(&report(
            &account,
            &trace,
            &["--format", "json", "--section", "inventory"],
        ))
        .unwrap();
        let node2 = json["inventory"]["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["node"] == "node2")
            .unwrap();
        let state = node2["state"].as_str().unwrap();
        assert!(state == "drained" || state == "draining", "{node2}");
        assert_eq!(node2["reason"], reason.as_str());
        let prom = report(
            &account,
            &trace,
            &["--format", "prometheus", "--section", "inventory"],
        );
        let series =
            format!(r#"yolo_sched_node_info{{node="node2",state="{state}",reason="{reason}"}}"#);
        assert_eq!(sample(&prom, &series), Some(1.0), "{prom}");
    } else {
        eprintln!("no node2: the drained-node check needs NODES=2 (as CI runs it)");
    }
}

/// `promtool check metrics` must accept the exposition.
#[track_caller]
pub fn promtool_accepts(text: &str) {
    use std::io::Write;
    let child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => panic!("promtool is needed (Debian package `prometheus`): {e}"),
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "promtool: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up): cargo test -- --include-ignored"]
fn unreachable_controller_is_exit_1_and_leaves_the_file() {
    let _cluster = common::cluster(module_path!());
    // A copy of the live configuration with a controller port nothing listens on.
    let dir = tempfile::tempdir().unwrap();
    let conf = std::fs::read_to_string("/etc/slurm/slurm.conf").unwrap();
    let dead: String = conf
        .lines()
        .map(|l| {
            if l.starts_with("SlurmctldPort=") {
                "SlurmctldPort=9".to_string()
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(dir.path().join("slurm.conf"), dead).unwrap();
    let target = dir.path().join("yolo.prom");
    std::fs::write(&target, "previous\n").unwrap();
    let out = run(yolo()
        .args(["report", "--format", "prometheus", "--output"])
        .arg(&target)
        .env("SLURM_CONF", dir.path().join("slurm.conf")));
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot read the nodes from Slurm"), "{err}");
    assert!(err.contains("left as it was"), "{err}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "previous\n");
}
