//! `list --json`, `status --json` and `report --format json` give every run
//! the same state: one run model (`run::status`) behind all three. Synthetic
//! run directories (one per run state, the `cancelled (train)` case among
//! them) and stand-in `squeue`, `sacct` and `sinfo` first on PATH, each
//! printing one fixed table of jobs in the format the caller asked for.

use crate::common::Test;
use serde_json::{json, Value};

const SEP: char = '\u{1f}';

/// What Slurm says about one job: in the queue, or only in accounting.
#[derive(Clone, Copy)]
enum Where {
    Queue(&'static str, &'static str),
    Sacct(&'static str),
    Nowhere,
}
use Where::*;

/// One synthetic run of three stages, and the state all three commands must give it.
struct Case {
    name: &'static str,
    /// prepare, train, export (train may be an array of `tasks`).
    jobs: [Where; 3],
    /// Per train task when train is an array.
    train_tasks: Vec<Where>,
    /// Job files written: (stage, task, exit code: None = start only).
    files: Vec<(&'static str, Option<u32>, Option<i32>)>,
    state: &'static str,
    stage: Option<&'static str>,
}

fn case(
    name: &'static str,
    jobs: [Where; 3],
    state: &'static str,
    stage: Option<&'static str>,
) -> Case {
    Case {
        name,
        jobs,
        train_tasks: vec![],
        files: vec![],
        state,
        stage,
    }
}

fn cases() -> Vec<Case> {
    let done = Queue("COMPLETED", "None");
    let dep = Queue("PENDING", "Dependency");
    vec![
        case("completed", [done, done, done], "completed", None),
        case(
            "failed-prepare",
            [
                Queue("FAILED", "NonZeroExitCode"),
                Queue("PENDING", "DependencyNeverSatisfied"),
                dep,
            ],
            "failed",
            Some("prepare"),
        ),
        // The new user's case: train cancelled while it waited, so it wrote no job files.
        Case {
            files: vec![("prepare", None, None), ("prepare", None, Some(0))],
            ..case(
                "cancelled-train",
                [
                    done,
                    Queue("CANCELLED", "None"),
                    Queue("CANCELLED", "Dependency"),
                ],
                "cancelled",
                Some("train"),
            )
        },
        case(
            "pending",
            [Queue("PENDING", "Resources"), dep, dep],
            "pending",
            None,
        ),
        // Prepare just completed; slurmctld has not yet re-tested train's dependency.
        case("dependency-met", [done, dep, dep], "pending", None),
        case(
            "running",
            [done, Queue("RUNNING", "None"), dep],
            "running",
            Some("train"),
        ),
        case(
            "suspended",
            [done, Queue("SUSPENDED", "None"), dep],
            "running",
            Some("train"),
        ),
        case(
            "deadline",
            [
                done,
                Queue("DEADLINE", "DeadLine"),
                Queue("PENDING", "DependencyNeverSatisfied"),
            ],
            "failed",
            Some("train"),
        ),
        case(
            "never-runs",
            [done, Queue("PENDING", "BadConstraints"), dep],
            "never_runs",
            Some("train"),
        ),
        case(
            "out-of-memory",
            [
                done,
                Queue("OUT_OF_MEMORY", "OutOfMemory"),
                Queue("CANCELLED", "Dependency"),
            ],
            "failed",
            Some("train"),
        ),
        // Left the queue; accounting remembers them.
        case(
            "sacct-cancelled",
            [
                Sacct("COMPLETED"),
                Sacct("CANCELLED by 0"),
                Sacct("CANCELLED by 0"),
            ],
            "cancelled",
            Some("train"),
        ),
        // Left the queue, no accounting: the job files say train started and never ended.
        Case {
            files: vec![
                ("prepare", None, None),
                ("prepare", None, Some(0)),
                ("train", None, None),
            ],
            ..case(
                "lost-train",
                [Nowhere, Nowhere, Nowhere],
                "failed",
                Some("train"),
            )
        },
        case("unknown", [Nowhere, Nowhere, Nowhere], "unknown", None),
        // A sweep: one variant failed.
        Case {
            train_tasks: vec![
                Queue("COMPLETED", "None"),
                Queue("FAILED", "NonZeroExitCode"),
            ],
            ..case(
                "sweep-failed",
                [done, Nowhere, Queue("PENDING", "DependencyNeverSatisfied")],
                "failed",
                Some("train"),
            )
        },
    ]
}

/// A line of the job queries (`slurm::squeue::jobs::FIELDS`), each field
/// followed by the separator, as squeue prints them.
fn status_line(array: u64, task: &str, state: &str, reason: &str) -> String {
    use yolo_sched::slurm::squeue::{jobs, Field};
    // `JobArrayID`: `12`, `12_3`, or `12_[4-9%2]` for pending tasks.
    let id = if task == "N/A" {
        array.to_string()
    } else if task.parse::<u64>().is_ok() {
        format!("{array}_{task}")
    } else {
        format!("{array}_[{task}]")
    };
    let array = array.to_string();
    let mut s = String::new();
    for f in jobs::FIELDS {
        s.push_str(match f {
            Field::JobArrayId => &id,
            Field::ArrayJobId => &array,
            Field::ArrayTaskId => task,
            Field::State => state,
            Field::Reason => reason,
            Field::TimeUsed => "0:01",
            Field::TimeLimit => "1:00:00",
            Field::NodeList => "node1",
            Field::TresPerNode => "gres:gpu:1g.5gb:1",
            Field::ExitCode => "0",
            Field::Name => "x",
            Field::UserName => "u",
            Field::Account => "acct",
            Field::SubmitTime => "2026-12-01T07:50:00",
            Field::StartTime => "2026-12-01T07:50:01",
            Field::EndTime => "2026-12-01T08:50:01",
            Field::WorkDir => "/tmp",
            Field::Comment => "(null)",
            other => panic!("no value for {other:?}"),
        });
        s.push(SEP);
    }
    s.push('\n');
    s
}

/// A line of the report's listing (`slurm::squeue::listing::FIELDS`).
fn listing_line(id: &str, state: &str, reason: &str) -> String {
    let f = [
        id,
        state,
        "gpu",
        "u",
        "acct",
        "2026-12-01T07:50:00",
        "1",
        "1",
        "gres:gpu:1g.5gb:1",
        "N/A",
        "N/A",
        "N/A",
        "",
        reason,
    ];
    let mut s: String = f.iter().map(|x| format!("{x}{SEP}")).collect();
    s.push('\n');
    s
}

/// Write the runs, their job files and the tables the stand-ins print.
fn build(cases: &[Case]) -> (Test, Vec<String>) {
    let w = Test::new();
    let index = w.path().join("state/yolo-sched/runs");
    std::fs::create_dir_all(&index).unwrap();
    let (mut squeue, mut listing, mut sacct) = (String::new(), String::new(), String::new());
    let mut ids = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        let run_id = format!("{}-20261201T075000-{i:04x}", c.name);
        let workdir = w.path().join("runs").join(c.name);
        std::fs::create_dir_all(workdir.join("state")).unwrap();
        let base = 100 + 10 * i as u64;
        let names = ["prepare", "train", "export"];
        let mut stages = Vec::new();
        for (si, stage) in names.iter().enumerate() {
            let job = base + si as u64;
            let tasks = if *stage == "train" && !c.train_tasks.is_empty() {
                c.train_tasks.len()
            } else {
                1
            };
            let deps: Vec<&str> = names[..si].last().copied().into_iter().collect();
            stages.push(json!({
                "stage": stage, "job_name": format!("{}.{stage}", c.name), "partition": "gpu",
                "gres": (*stage == "train").then_some("gpu:1g.5gb:1"), "time": "01:00:00",
                "cpus": 1, "mem": "1G", "tasks": tasks, "depends_on": deps,
                "script": format!("scripts/{stage}.sh"),
                "attempts": [{"attempt": 1, "job_id": job,
                    "array": (tasks > 1).then(|| format!("0-{}", tasks - 1)),
                    "dependency": (si > 0).then(|| format!("afterok:{}", job - 1)),
                    "submitted_at": "2026-12-01T07:50:00Z"}]
            }));
            let mut add = |id: String, task: &str, wh: Where| match wh {
                Queue(state, reason) => {
                    squeue.push_str(&status_line(job, task, state, reason));
                    listing.push_str(&listing_line(&id, state, reason));
                }
                // sacct -o slurm::sacct::JOB_FIELDS.
                Sacct(state) => sacct.push_str(&format!(
                    "{id}|{state}|0:0|node1|x|u|acct|2026-12-01T07:50:00|\
                     2026-12-01T07:50:01|2026-12-01T08:50:01|cpu=1|/tmp|\n"
                )),
                Nowhere => {}
            };
            if tasks > 1 {
                for (t, wh) in c.train_tasks.iter().enumerate() {
                    add(format!("{job}_{t}"), &t.to_string(), *wh);
                }
            } else {
                add(job.to_string(), "N/A", c.jobs[si]);
            }
        }
        for (stage, task, code) in &c.files {
            let job = base + names.iter().position(|n| n == stage).unwrap() as u64;
            let key = match task {
                Some(t) => format!("{stage}.{t}"),
                None => stage.to_string(),
            };
            let (suffix, rec) = match code {
                None => (
                    "start",
                    json!({"array_job_id": job.to_string(), "node": "node1"}),
                ),
                Some(c) => (
                    "end",
                    json!({"array_job_id": job.to_string(), "exit_code": c}),
                ),
            };
            std::fs::write(
                workdir.join("state").join(format!("{key}.{suffix}.json")),
                rec.to_string(),
            )
            .unwrap();
        }
        let manifest = json!({
            "schema_version": 1, "run_id": run_id, "name": c.name, "user": "u", "host": "h",
            "submitted_at": format!("2026-12-01T07:{:02}:00Z", i), "workdir": workdir,
            "spec_file": "/s.toml", "spec_hash": "0", "spec_text": "[train]\nepochs = 3\n",
            "variants": 1, "gpu_explanation": [], "estimate_gib": 4.4, "stages": stages,
        });
        std::fs::write(workdir.join("manifest.json"), manifest.to_string()).unwrap();
        let entry = json!({"run_id": run_id, "name": c.name, "workdir": workdir,
            "submitted_at": format!("2026-12-01T07:{:02}:00Z", i)});
        std::fs::write(index.join(format!("{run_id}.json")), entry.to_string()).unwrap();
        ids.push(run_id);
    }
    let file = |name: &str, text: &str| w.file(name, text);
    let (sq, li, sa) = (
        file("squeue.txt", &squeue),
        file("listing.txt", &listing),
        file("sacct.txt", &sacct),
    );
    w.standin(
        "squeue",
        &format!(
            // The job queries ask for `ArrayJobID`; the report's listing does not.
            "case \"$*\" in *ArrayJobID*) cat '{}' ;; *) cat '{}' ;; esac",
            sq.display(),
            li.display()
        ),
    );
    w.standin("sacct", &format!("cat '{}'", sa.display()));
    w.standin("sinfo", "echo '{\"errors\":[],\"nodes\":[]}'");
    (w, ids)
}

/// The row of `run_id` in `list --json`.
#[track_caller]
fn row_of<'a>(list: &'a Value, run_id: &str) -> &'a Value {
    list.as_array()
        .unwrap()
        .iter()
        .find(|r| r["run_id"] == run_id)
        .unwrap_or_else(|| panic!("{run_id} not in list: {list}"))
}

#[test]
fn list_status_and_report_agree_on_every_run() {
    let cases = cases();
    let (w, ids) = build(&cases);
    let list = w.json(&["list", "--json"]);
    let report = w.json(&["report", "--format", "json", "--section", "runs"]);
    let by_run = report["runs"]["by_run"].as_array().unwrap();
    assert_eq!(by_run.len(), cases.len(), "{report}");
    assert_eq!(list.as_array().unwrap().len(), cases.len());
    for (c, id) in cases.iter().zip(&ids) {
        let st = w.json(&["status", "--json", id]);
        let l = row_of(&list, id);
        let r = by_run.iter().find(|r| r["run_id"] == id.as_str()).unwrap();
        let want = (json!(c.state), json!(c.stage));
        assert_eq!(
            (st["state"].clone(), st["stage"].clone()),
            want,
            "status, {}",
            c.name
        );
        assert_eq!(
            (l["state"].clone(), l["stage"].clone()),
            want,
            "list, {}",
            c.name
        );
        assert_eq!(
            (r["state"].clone(), r["stage"].clone()),
            want,
            "report, {}",
            c.name
        );
        assert_eq!(l["description"], r["description"], "{}", c.name);
    }
    // The counts the report prints come from the same states.
    let counted: u64 = report["runs"]["by_state"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["state"] == "cancelled")
        .map(|s| s["runs"].as_u64().unwrap())
        .sum();
    assert_eq!(counted, 2);
}

#[test]
fn list_json_is_flat_with_the_index_time() {
    let cases = cases();
    let (w, ids) = build(&cases);
    let list = w.json(&["list", "--json"]);
    let cancelled = list
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["run_id"] == ids[2].as_str())
        .unwrap();
    assert_eq!(cancelled["state"], "cancelled");
    assert_eq!(cancelled["stage"], "train");
    assert_eq!(cancelled["description"], "cancelled (train)");
    assert_eq!(cancelled["submitted_at"], "2026-12-01T07:02:00Z");
    let never = list
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["state"] == "never_runs")
        .unwrap();
    assert!(never["reason"].as_str().unwrap().contains("BadConstraints"));
}

#[test]
fn a_met_dependency_does_not_read_as_waiting() {
    let cases = cases();
    let (w, ids) = build(&cases);
    let i = cases
        .iter()
        .position(|c| c.name == "dependency-met")
        .unwrap();
    let st = w.json(&["status", "--json", &ids[i]]);
    let train = st["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["stage"] == "train")
        .unwrap();
    assert_eq!(
        train["tasks"][0]["reason_text"],
        "prepare finished; waiting for Slurm to schedule it"
    );
    let export = &st["stages"][2]["tasks"][0];
    assert_eq!(export["reason_text"], "waiting for train to finish");
}

/// A run directory moved since submit (its manifest still names the old
/// place): `status` reads the job files where the directory is now, as
/// `list` does, so the two still agree.
#[test]
fn a_moved_run_directory_reads_where_it_is_now() {
    let cases = cases();
    let (w, ids) = build(&cases);
    for c in &cases {
        let manifest = w.path().join("runs").join(c.name).join("manifest.json");
        let mut m: Value =
            serde_json::from_str(&std::fs::read_to_string(&manifest).unwrap()).unwrap();
        m["workdir"] = json!(format!("/nonexistent/moved-from/{}", c.name));
        std::fs::write(&manifest, m.to_string()).unwrap();
    }
    let list = w.json(&["list", "--json"]);
    for (c, id) in cases.iter().zip(&ids) {
        let st = w.json(&["status", "--json", id]);
        let l = row_of(&list, id);
        assert_eq!(st["state"], l["state"], "{}", c.name);
        // And by path: the directory itself.
        let dir = w.path().join("runs").join(c.name);
        let by_path = w.json(&["status", "--json", dir.to_str().unwrap()]);
        assert_eq!(by_path["state"], l["state"], "{} by path", c.name);
    }
}

/// The human `list` and `status` tables of the same runs, whole: where a
/// wording change shows (`UPDATE_SNAPSHOTS=1` accepts one on purpose).
#[test]
fn list_and_status_tables() {
    let cases = cases();
    let (w, ids) = build(&cases);
    let shown = |args: &[&str]| {
        let out = w.run(args);
        format!(
            "$ yolo-sched {} (exit {:?})\n{}{}",
            args.join(" "),
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    let mut all = shown(&["list"]);
    for id in &ids {
        all.push_str(&shown(&["status", id]));
    }
    crate::common::assert_snapshot("runs-tables.txt", &w.masked(&all));
}
