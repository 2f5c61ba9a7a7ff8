//! `yolo-sched report` parsers and aggregation on output recorded from the
//! live Slurm 22.05 cluster (tests/data/report/README.md lists the jobs).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde_json::Value;
use yolo_sched::report::model::{AccountingStatus, GresCount, QueueRow, ReasonCount};
use yolo_sched::report::queue::{QueueAggregator, NO_GRES};
use yolo_sched::report::Filter;
use yolo_sched::report::{inventory, reasons, runs, sacct};
use yolo_sched::slurm::squeue::listing::{self, Phase};
use yolo_sched::slurm::{sinfo, time};

const COMPACT: &str = include_str!("../data/report/squeue-22.05-compact.txt");
const JSON: &str = include_str!("../data/report/squeue-22.05.json");
const SINFO: &str = include_str!("../data/report/sinfo-22.05-two-nodes.json");
const SINFO_DRAINED: &str = include_str!("../data/report/sinfo-22.05-node2-drained.json");
const SACCT_STDERR: &str = include_str!("../data/report/sacct-22.05-no-accounting.stderr");

fn at(s: &str) -> chrono::NaiveDateTime {
    time::parse_time(s).unwrap()
}

/// The moment the recordings were made (cluster local time).
fn recorded_now() -> chrono::NaiveDateTime {
    at("2026-11-30T15:10:00")
}

#[track_caller]
fn row<'a>(rows: &'a [QueueRow], partition: &str, kind: &str) -> &'a QueueRow {
    rows.iter()
        .find(|r| r.partition == partition && r.kind == kind)
        .unwrap_or_else(|| panic!("no row {partition}/{kind} in {rows:#?}"))
}

#[test]
fn compact_listing_gives_the_known_queue() {
    let mut agg = QueueAggregator::new(recorded_now(), Filter::default()).keep_job_phases();
    agg.add_text(COMPACT);
    let (q, held, phases) = agg.finish();

    assert_eq!(q.unparsed_lines, 0, "{:?}", q.first_unparsed);
    // 5–12 run; 13, 15 (10 tasks), 16, 18, 19, 20 wait; 1–4, 14 and 17 have ended.
    assert_eq!(q.running_jobs, 8);
    assert_eq!(q.pending_jobs, 15);

    let r = row(&q.by_partition_type, "gpu", "gpu:1g.5gb");
    assert_eq!(
        (r.running_jobs, r.running_slices),
        (2, 2),
        "jobs 5 and 11 (--gpus)"
    );
    assert_eq!((r.pending_jobs, r.pending_slices), (13, 13));
    let r = row(&q.by_partition_type, "gpu", "gpu:2g.10gb");
    assert_eq!((r.running_jobs, r.pending_jobs), (4, 2));
    let r = row(&q.by_partition_type, "gpu", "shard");
    assert_eq!((r.running_jobs, r.running_slices), (1, 2));
    // The untyped request stays untyped: tres-alloc has no GRES without typed accounting.
    let r = row(&q.by_partition_type, "gpu", "gpu");
    assert_eq!((r.running_jobs, r.running_slices), (1, 1));
    assert!(!q.by_partition_type.iter().any(|r| r.kind == NO_GRES));

    assert_eq!(
        q.pending_reasons,
        vec![
            ReasonCount {
                reason: "Dependency".into(),
                description: "waiting for the jobs it depends on".into(),
                jobs: 11
            },
            ReasonCount {
                reason: "DependencyNeverSatisfied".into(),
                description: "can never run: dependency failed".into(),
                jobs: 1
            },
            ReasonCount {
                reason: "JobHeldUser".into(),
                description: "held by its owner (scontrol release)".into(),
                jobs: 1
            },
            ReasonCount {
                reason: "Priority".into(),
                description: "waiting behind higher-priority jobs".into(),
                jobs: 1
            },
            ReasonCount {
                reason: "Resources".into(),
                description: "waiting for free resources".into(),
                jobs: 1
            },
        ]
    );

    assert_eq!(q.never_runnable_jobs, 1);
    let stuck = &q.never_runnable[0];
    assert_eq!(stuck.job_id, "16");
    assert_eq!(stuck.dependency, "afterok:14(failed)");
    assert_eq!(stuck.types, vec!["gpu:1g.5gb"]);

    let oldest = q.oldest_pending.as_ref().unwrap();
    assert_eq!(oldest.job_id, "13");
    assert_eq!(oldest.submitted, "2026-11-30T15:09:06");
    assert_eq!(oldest.wait_seconds, 54);

    // 1g.5gb waits: 13 → 54 s, 15 → 54 s × 10, 16 → 52 s, 20 → 4 s: median 54 s.
    let t = q.by_type.iter().find(|t| t.kind == "gpu:1g.5gb").unwrap();
    assert_eq!(t.median_wait_seconds, Some(54));
    // 2g.10gb: 18 → 41 s, 19 → 40 s: the lower median.
    let t = q.by_type.iter().find(|t| t.kind == "gpu:2g.10gb").unwrap();
    assert_eq!(t.median_wait_seconds, Some(40));
    assert_eq!(t.oldest_pending.as_ref().unwrap().job_id, "18");

    let held: BTreeMap<(String, String), u64> = held
        .into_iter()
        .map(|h| ((h.user, h.kind), h.slices))
        .collect();
    let key = |u: &str, k: &str| (u.to_string(), k.to_string());
    assert_eq!(held[&key("root", "gpu:1g.5gb")], 2);
    assert_eq!(held[&key("root", "gpu:2g.10gb")], 2);
    assert_eq!(held[&key("researcher", "gpu:2g.10gb")], 2);
    assert_eq!(held[&key("root", "shard")], 2);
    assert_eq!(held[&key("root", "gpu")], 1);
    assert_eq!(held.len(), 5);

    assert_eq!(phases.get(&15), Some(&Phase::Pending));
    assert_eq!(phases.get(&5), Some(&Phase::Running));
    assert_eq!(phases.get(&14), None, "ended jobs are not queued");
}

#[test]
fn filters_apply_to_the_recorded_listing() {
    let only = |filter: Filter| {
        let mut agg = QueueAggregator::new(recorded_now(), filter);
        agg.add_text(COMPACT);
        agg.finish().0
    };
    let q = only(Filter {
        user: Some("researcher".into()),
        ..Filter::default()
    });
    assert_eq!((q.running_jobs, q.pending_jobs), (2, 1));
    let q = only(Filter {
        partition: Some("cpu".into()),
        ..Filter::default()
    });
    assert_eq!((q.running_jobs, q.pending_jobs), (0, 0));
    let q = only(Filter {
        account: Some("yrep".into()),
        ..Filter::default()
    });
    assert_eq!((q.running_jobs, q.pending_jobs), (8, 15));
}

/// The JSON Slurm printed at the same moment says the same, field by field:
/// the compact listing loses nothing the report uses.
#[test]
fn json_recording_agrees_with_the_compact_listing() {
    let doc: Value = serde_json::from_str(JSON).unwrap();
    let jobs = doc["jobs"].as_array().unwrap();
    assert_eq!(
        jobs[0].as_object().unwrap().len(),
        111,
        "22.05 prints 111 fields a job"
    );

    let mut from_json: HashMap<String, (String, String, String, String)> = HashMap::new();
    for j in jobs {
        let id = match j["array_task_string"].as_str().filter(|s| !s.is_empty()) {
            Some(tasks) => format!("{}_[{tasks}]", j["array_job_id"]),
            None => j["job_id"].to_string(),
        };
        let tres = format!(
            "{}|{}",
            j["tres_per_node"].as_str().unwrap(),
            j["tres_per_job"].as_str().unwrap()
        );
        from_json.insert(
            id,
            (
                j["job_state"].as_str().unwrap().to_string(),
                j["state_reason"].as_str().unwrap().to_string(),
                j["user_name"].as_str().unwrap().to_string(),
                tres,
            ),
        );
    }
    let mut seen = 0;
    for line in COMPACT.lines() {
        let q = listing::parse_line(line).unwrap();
        let (state, reason, user, tres) = from_json
            .get(q.job_id)
            .unwrap_or_else(|| panic!("{} missing from the JSON", q.job_id));
        assert_eq!(q.state, state);
        assert_eq!(q.reason, reason);
        assert_eq!(q.user, user);
        let compact_tres = format!("{}|{}", q.tres_per_node, q.tres_per_job);
        assert_eq!(&compact_tres, tres, "job {}", q.job_id);
        seen += 1;
    }
    assert_eq!(seen, from_json.len());
    assert_eq!(seen, 20);
    // The one thing only the JSON has: the type an untyped request got.
    let untyped = jobs.iter().find(|j| j["job_id"] == 12).unwrap();
    assert!(untyped["gres_detail"][0]
        .as_str()
        .unwrap()
        .starts_with("gpu:1g.5gb:1(IDX:2)"));
    // And it is about 27 times as large.
    assert!(
        JSON.len() > 25 * COMPACT.len(),
        "{} vs {}",
        JSON.len(),
        COMPACT.len()
    );
}

#[test]
fn recorded_sinfo_gives_the_inventory() {
    let nodes = sinfo::parse_nodes(SINFO).unwrap();
    let inv = inventory::build(&nodes, None);
    assert_eq!(inv.nodes.len(), 2);
    let n1 = &inv.nodes[0];
    assert_eq!(
        (n1.node.as_str(), n1.state.as_str(), n1.reason.as_deref()),
        ("node1", "mixed", None)
    );
    assert_eq!(
        n1.gres,
        vec![
            GresCount {
                kind: "gpu:1g.5gb".into(),
                total: 4,
                allocated: 3,
                free: 1
            },
            GresCount {
                kind: "gpu:2g.10gb".into(),
                total: 2,
                allocated: 2,
                free: 0
            },
            GresCount {
                kind: "gpu:a100".into(),
                total: 1,
                allocated: 0,
                free: 1
            },
            GresCount {
                kind: "shard:a100".into(),
                total: 8,
                allocated: 1,
                free: 7
            },
        ]
    );
    let total = |k: &str| inv.totals.iter().find(|t| t.kind == k).unwrap().clone();
    let t = total("gpu:1g.5gb");
    assert_eq!((t.total, t.allocated, t.free, t.free_usable), (8, 3, 5, 5));
    let t = total("gpu:2g.10gb");
    assert_eq!((t.total, t.allocated, t.free), (4, 4, 0));

    let drained = inventory::build(&sinfo::parse_nodes(SINFO_DRAINED).unwrap(), None);
    let n2 = &drained.nodes[1];
    assert_eq!(
        n2.state, "draining",
        "mixed + DRAIN: jobs still run, nothing new starts"
    );
    assert_eq!(n2.reason.as_deref(), Some("yrep report test: bad fan"));
    let t = drained
        .totals
        .iter()
        .find(|t| t.kind == "gpu:1g.5gb")
        .unwrap();
    assert_eq!(
        (t.free, t.free_usable),
        (5, 1),
        "node2's four free 1g.5gb slices are unusable"
    );
}

#[test]
fn recorded_sacct_failure_means_accounting_disabled() {
    let state = sacct::failure_state(SACCT_STDERR, "exit status 1");
    assert_eq!(state.status, AccountingStatus::Disabled);
    assert!(state
        .message
        .unwrap()
        .contains("Slurm accounting storage is disabled"));
}

#[test]
fn recorded_run_manifest_reads_through_its_index() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/report/run-smoke");
    let tmp = tempfile::tempdir().unwrap();
    let index_dir = tmp.path().join("runs");
    let workdir = tmp.path().join("work/smoke");
    std::fs::create_dir_all(&index_dir).unwrap();
    std::fs::create_dir_all(workdir.join("state")).unwrap();
    std::fs::copy(data.join("manifest.json"), workdir.join("manifest.json")).unwrap();
    for f in std::fs::read_dir(data.join("state")).unwrap() {
        let f = f.unwrap();
        std::fs::copy(f.path(), workdir.join("state").join(f.file_name())).unwrap();
    }
    // The recorded index names the workdir the run had; point it at the copy.
    let mut index: Value =
        serde_json::from_str(&std::fs::read_to_string(data.join("index.json")).unwrap()).unwrap();
    index["workdir"] = Value::String(workdir.display().to_string());
    std::fs::write(
        index_dir.join("smoke-20261130T151539-650a.json"),
        index.to_string(),
    )
    .unwrap();

    let (manifests, unreadable) = runs::load(&index_dir);
    assert!(unreadable.is_empty(), "{unreadable:?}");
    let view = |rows: &[yolo_sched::slurm::squeue::QueueRow]| {
        let st = runs::statuses(&manifests, rows, &[]);
        runs::view(&manifests[0], &st[0])
    };
    let m = view(&[]);
    assert_eq!(m.run_id, "smoke-20261130T151539-650a");
    assert_eq!(m.state, "completed");
    let train = &m.stages[0];
    assert_eq!(
        (train.name.as_str(), train.state.as_str()),
        ("train", "completed")
    );
    assert_eq!(train.job_id.as_deref(), Some("28"));
    assert_eq!(train.profile.as_deref(), Some("1g.5gb"));
    assert_eq!(train.estimate_gib, Some(4.4));
    assert_eq!(m.stages[1].profile, None, "export runs on CPU");

    // While Slurm still had the training job queued, the queue decides.
    let sep = yolo_sched::slurm::squeue::SEPARATOR;
    let listing = format!(
        "28{sep}RUNNING{sep}gpu{sep}root{sep}(null){sep}2026-11-30T15:15:40{sep}1{sep}1{sep}\
         gres:gpu:1g.5gb:1{sep}N/A{sep}N/A{sep}N/A{sep}(null){sep}None{sep}\n\
         77{sep}RUNNING{sep}gpu{sep}other{sep}(null){sep}2026-11-30T15:15:40{sep}1{sep}1{sep}\
         N/A{sep}N/A{sep}N/A{sep}N/A{sep}(null){sep}None{sep}\n"
    );
    let rows = runs::queue_rows(&listing, &runs::job_ids(&manifests));
    assert_eq!(rows.len(), 1, "only the run's own job");
    std::fs::remove_file(workdir.join("state/train.end.json")).unwrap();
    let m = view(&rows);
    assert_eq!(m.stages[0].state, "running");
    assert_eq!(m.state, "running");
    // Gone from the queue without an end record: lost, which counts as a failure.
    let m = view(&[]);
    assert_eq!(m.stages[0].state, "failed");
    assert_eq!(
        (m.state.as_str(), m.stage.as_deref()),
        ("failed", Some("train"))
    );
    let summary = runs::summarise(&index_dir, &[m], Vec::new());
    assert_eq!(summary.most_failing_stage.unwrap().stage, "train");
}

#[test]
fn reason_words_cover_what_the_cluster_printed() {
    for line in COMPACT.lines() {
        let q = listing::parse_line(line).unwrap();
        let code = reasons::code(q.reason);
        if q.phase == Phase::Pending {
            assert_ne!(reasons::describe(code), code, "no words for {code}");
        }
    }
}
