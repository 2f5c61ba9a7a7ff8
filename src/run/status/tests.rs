use super::*;
use crate::rundir::manifest::SCHEMA_VERSION;
use crate::rundir::ultralytics::{final_validation, train_progress, FinalValidation};
use chrono::Utc;

fn stage(name: &str, tasks: usize, job: u64) -> StageRecord {
    StageRecord {
        stage: name.into(),
        job_name: format!("r.{name}"),
        partition: None,
        gres: (name == "train").then(|| "gpu:1g.5gb:1".into()),
        time: "01:00:00".into(),
        cpus: 1,
        mem: "1G".into(),
        tasks,
        depends_on: vec![],
        script: format!("scripts/{name}.sh"),
        attempts: vec![Attempt {
            attempt: 1,
            job_id: job,
            array: (tasks > 1).then(|| format!("0-{}", tasks - 1)),
            dependency: None,
            submitted_at: Utc::now(),
            gres: None,
        }],
    }
}

fn manifest(stages: Vec<StageRecord>) -> Manifest {
    Manifest {
        schema_version: SCHEMA_VERSION,
        run_id: "r-1".into(),
        name: "r".into(),
        user: "u".into(),
        host: "h".into(),
        submitted_at: Utc::now(),
        workdir: "/nonexistent/run".into(),
        spec_file: "/s.toml".into(),
        spec_hash: "0".into(),
        spec_text: "[train]\nepochs = 5\n".into(),
        variants: 1,
        gpu_explanation: vec![],
        estimate_gib: None,
        model_ref: None,
        model_refs: Vec::new(),
        stages,
    }
}

fn row(job: &str, array: u64, tasks: &str, state: &str, reason: &str) -> QueueRow {
    QueueRow {
        job_id: job.into(),
        array_job_id: array,
        tasks: parse_task_list(tasks),
        state: state.into(),
        reason: reason.into(),
        time_used: "0:01".into(),
        time_limit: "1:00:00".into(),
        nodes: String::new(),
        gres: "gres:gpu:1g.5gb:1".into(),
        exit_code: None,
        name: String::new(),
    }
}

#[test]
fn failed_prepare_names_the_run_failure_and_explains_the_rest() {
    let m = manifest(vec![
        stage("prepare", 1, 10),
        stage("train", 1, 11),
        stage("export", 1, 12),
    ]);
    let rows = vec![
        row("10", 10, "", "FAILED", "NonZeroExitCode"),
        row("11", 11, "", "PENDING", "DependencyNeverSatisfied"),
        row("12", 12, "", "PENDING", "Dependency"),
    ];
    let s = compute(&m, &rows, &[], &JobFiles::new(), &Nothing, true);
    assert_eq!(
        s.state,
        RunState::Failed {
            stage: "prepare".into(),
            why: None,
        }
    );
    let train = s.stage("train").unwrap();
    assert_eq!(
        train.tasks[0].reason_text.as_deref(),
        Some("will never run: prepare failed")
    );
    assert_eq!(
        s.stage("export").unwrap().tasks[0].reason_text.as_deref(),
        Some("waiting for train to finish")
    );
}

#[test]
fn a_stage_held_for_ever_makes_the_run_never_run() {
    let m = manifest(vec![
        stage("prepare", 1, 10),
        stage("train", 1, 11),
        stage("export", 1, 12),
    ]);
    let rows = vec![
        row("10", 10, "", "COMPLETED", ""),
        row("11", 11, "", "PENDING", "BadConstraints"),
        row("12", 12, "", "PENDING", "Dependency"),
    ];
    let s = compute(&m, &rows, &[], &JobFiles::new(), &Nothing, true);
    assert_eq!(
        s.state,
        RunState::NeverRuns {
            stage: "train".into(),
            reason: "will never run: the request does not fit any node (BadConstraints)".into()
        }
    );
    assert!(s.state.is_finished(), "watch stops on it");
    assert_eq!(
        s.state.describe(),
        "will never run (train): the request does not fit any node (BadConstraints)"
    );
    // A reason that clears (a node comes back) is only waiting.
    let rows = vec![
        row("10", 10, "", "COMPLETED", ""),
        row(
            "11",
            11,
            "",
            "PENDING",
            "ReqNodeNotAvail, UnavailableNodes:node2",
        ),
        row("12", 12, "", "PENDING", "Dependency"),
    ];
    let s = compute(&m, &rows, &[], &JobFiles::new(), &Nothing, true);
    assert_eq!(s.state, RunState::Pending);
    let rows = vec![
        row("10", 10, "", "COMPLETED", ""),
        row("11", 11, "", "PENDING", "MaxMemPerLimit"),
        row("12", 12, "", "PENDING", "Dependency"),
    ];
    let s = compute(&m, &rows, &[], &JobFiles::new(), &Nothing, true);
    assert!(
        matches!(s.state, RunState::NeverRuns { .. }),
        "{:?}",
        s.state
    );
}

/// A run directory in memory: `compute` reads only through `RunDir`.
struct InMemory {
    epochs: Vec<crate::rundir::results::Epoch>,
    logs: BTreeMap<String, String>,
}

impl RunDir for InMemory {
    fn results(&self, dir: &str) -> Option<Vec<crate::rundir::results::Epoch>> {
        (dir == "train").then(|| self.epochs.clone())
    }
    fn log_tail(&self, log: &str) -> Option<String> {
        self.logs.get(log).cloned()
    }
    fn guards(&self) -> BTreeMap<(String, Option<u32>), crate::rundir::guard::GuardRecord> {
        BTreeMap::new()
    }
}

#[test]
fn progress_and_the_exported_validation_come_through_the_run_dir_without_a_disk() {
    let m = manifest(vec![stage("train", 1, 60), stage("export", 1, 61)]);
    let epoch = |e: u32, map: f64| crate::rundir::results::Epoch {
        epoch: e,
        map50_95: Some(map),
        ..Default::default()
    };
    let val = "Validating /w/export/best.onnx...\n\
               Class     Images  Instances      Box(P          R      mAP50  mAP50-95)\n\
               all         12         19      0.25      0.5     0.375    0.125\n\
               Speed: 0.1ms preprocess, 7.5ms inference, 0.0ms loss, 0.2ms postprocess per image\n";
    let dir = InMemory {
        epochs: vec![epoch(1, 0.1), epoch(2, 0.3), epoch(3, 0.2)],
        logs: BTreeMap::from([("export.out".to_string(), val.to_string())]),
    };
    let rows = vec![
        row("60", 60, "", "COMPLETED", ""),
        row("61", 61, "", "COMPLETED", ""),
    ];
    let s = compute(&m, &rows, &[], &JobFiles::new(), &dir, true);
    let train = s.stage("train").unwrap();
    let (_, p) = &train.progress[0];
    assert_eq!((p.epoch, p.best_map50_95), (3, Some(0.3)));
    let export = s.stage("export").unwrap();
    let (_, v) = &export.exported_validation[0];
    assert_eq!(v.inference_ms_per_image, Some(7.5));
    // The same run with nothing in its directory: states only.
    let s = compute(&m, &rows, &[], &JobFiles::new(), &Nothing, true);
    assert!(s.stage("train").unwrap().progress.is_empty());
    assert_eq!(s.state, RunState::Completed);
}

#[test]
fn the_final_validation_is_read_from_the_training_log() {
    let log = "      1/3   0G  3.1  4.2  1.1  19  64: 100%\n\
               Class     Images  Instances      Box(P          R      mAP50  mAP50-95)\n\
               all         12         19      0.001      0.05     0.0004    0.0001\n\
               3 epochs completed in 0.001 hours.\n\
               Validating /w/train/weights/best.pt...\n\
               Model summary (fused): 72 layers\n\
               Class     Images  Instances      Box(P          R      mAP50  mAP50-95): 100%\n\
               all         12         19      0.25      0.5     0.375    0.125\n\
               Speed: 0.0ms preprocess, 3.0ms inference, 0.0ms loss, 0.2ms postprocess per image\n";
    assert_eq!(
        final_validation(log),
        Some(FinalValidation {
            images: 12,
            instances: 19,
            precision: 0.25,
            recall: 0.5,
            map50: 0.375,
            map50_95: 0.125,
            inference_ms_per_image: Some(3.0),
        })
    );
    assert_eq!(
        final_validation("epoch 1/3\nall 12 19 0 0 0 0\n"),
        None,
        "no final validation yet"
    );
}

#[test]
fn resources_reason_names_the_slice() {
    assert_eq!(
        reason_in_words("Resources", Some("gres:gpu:1g.5gb:1"), None).as_deref(),
        Some("waiting for a free 1g.5gb slice")
    );
}

#[test]
fn array_tasks_are_matched_to_their_rows() {
    let m = manifest(vec![stage("train", 4, 20)]);
    let rows = vec![
        row("20_0", 20, "0", "COMPLETED", ""),
        row("20_1", 20, "1", "RUNNING", ""),
        row("20", 20, "2-3%2", "PENDING", "JobArrayTaskLimit"),
    ];
    let s = compute(&m, &rows, &[], &JobFiles::new(), &Nothing, true);
    let t = s.stage("train").unwrap();
    assert_eq!(t.tasks.len(), 4);
    assert_eq!(t.counts.get("pending"), Some(&2));
    assert_eq!(t.state, TaskState::Running);
    assert_eq!(
        s.state,
        RunState::Running {
            stage: "train".into()
        }
    );
    assert_eq!(t.tasks[3].job_id, "20_3");
}

#[test]
fn job_files_stand_in_when_slurm_forgot_and_only_for_this_attempt() {
    let m = manifest(vec![stage("prepare", 1, 30), stage("train", 1, 31)]);
    let mut files = JobFiles::new();
    let rec = |array: &str, code: Option<i32>| JobFileRecord {
        array_job_id: array.into(),
        exit_code: code,
        ..Default::default()
    };
    files.insert(
        ("prepare".into(), None),
        (Some(rec("30", None)), Some(rec("30", Some(0)))),
    );
    // An end record of an older attempt (job 5) must not count.
    files.insert(
        ("train".into(), None),
        (Some(rec("5", None)), Some(rec("5", Some(1)))),
    );
    let s = compute(&m, &[], &[], &files, &Nothing, false);
    assert_eq!(s.stage("prepare").unwrap().state, TaskState::Completed);
    assert_eq!(
        s.stage("prepare").unwrap().tasks[0].source,
        Source::JobFiles
    );
    assert_eq!(s.stage("train").unwrap().tasks[0].state, TaskState::Unknown);
    assert!(s.stale);
}

#[test]
fn a_started_task_is_running_not_lost_when_slurm_could_not_be_asked() {
    let m = manifest(vec![stage("prepare", 1, 30), stage("train", 1, 31)]);
    let mut files = JobFiles::new();
    let rec = |code: Option<i32>| JobFileRecord {
        array_job_id: "31".into(),
        exit_code: code,
        ..Default::default()
    };
    files.insert(("train".into(), None), (Some(rec(None)), None));
    // slurmctld down: the last known state, marked stale.
    let s = compute(&m, &[], &[], &files, &Nothing, false);
    assert_eq!(s.stage("train").unwrap().state, TaskState::Running);
    assert!(s.stale);
    assert!(!matches!(s.state, RunState::Failed { .. }), "{:?}", s.state);
    // Slurm answered and no longer knows the job: lost, the run failed.
    let s = compute(&m, &[], &[], &files, &Nothing, true);
    assert_eq!(s.stage("train").unwrap().tasks[0].state, TaskState::Lost);
    assert!(matches!(s.state, RunState::Failed { .. }), "{:?}", s.state);
}

#[test]
fn a_stop_by_the_memory_guard_is_why_the_run_failed_and_only_for_its_attempt() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = manifest(vec![stage("prepare", 1, 50), stage("train", 1, 51)]);
    m.workdir = dir.path().to_path_buf();
    std::fs::create_dir(dir.path().join("state")).unwrap();
    let msg = "stopped by the memory guard: grew 640 MB/min for 3 min, 4.4 of 4.75 GiB";
    let record = |job: &str| crate::rundir::guard::GuardRecord {
        array_job_id: job.into(),
        job_id: job.into(),
        action: "stopped".into(),
        message: msg.into(),
        ..Default::default()
    };
    let path = dir.path().join("state/train.guard.json");
    crate::rundir::guard::write_record(&path, &record("51")).unwrap();
    let rows = vec![
        row("50", 50, "", "COMPLETED", ""),
        row("51", 51, "", "FAILED", "NonZeroExitCode"),
    ];
    let s = compute(&m, &rows, &[], &JobFiles::new(), &OnDisk(dir.path()), true);
    assert_eq!(
        s.state,
        RunState::Failed {
            stage: "train".into(),
            why: Some(msg.into())
        }
    );
    assert_eq!(s.state.describe(), format!("failed (train): {msg}"));
    let t = &s.stage("train").unwrap().tasks[0];
    assert_eq!(t.reason_text.as_deref(), Some(msg));
    assert_eq!(t.guard_stop(), Some(msg));
    // A record of an earlier attempt says nothing about this one.
    crate::rundir::guard::write_record(&path, &record("7")).unwrap();
    let s = compute(&m, &rows, &[], &JobFiles::new(), &OnDisk(dir.path()), true);
    assert_eq!(s.state.describe(), "failed (train)");
}

#[test]
fn all_completed_is_completed_and_cancel_is_cancelled() {
    let m = manifest(vec![stage("prepare", 1, 40), stage("train", 1, 41)]);
    let done = vec![
        row("40", 40, "", "COMPLETED", ""),
        row("41", 41, "", "COMPLETED", ""),
    ];
    assert_eq!(
        compute(&m, &done, &[], &JobFiles::new(), &Nothing, true).state,
        RunState::Completed
    );
    let cancelled = vec![
        row("40", 40, "", "COMPLETED", ""),
        row("41", 41, "", "CANCELLED", ""),
    ];
    assert_eq!(
        compute(&m, &cancelled, &[], &JobFiles::new(), &Nothing, true).state,
        RunState::Cancelled {
            stage: "train".into()
        }
    );
}

#[test]
fn a_met_dependency_reads_as_met_and_suspended_is_running() {
    let m = manifest(vec![
        stage("prepare", 1, 50),
        stage("train", 1, 51),
        stage("export", 1, 52),
    ]);
    // Prepare just ended; slurmctld has not re-tested train's dependency yet.
    let rows = vec![
        row("50", 50, "", "COMPLETED", ""),
        row("51", 51, "", "PENDING", "Dependency"),
        row("52", 52, "", "PENDING", "Dependency"),
    ];
    let s = compute(&m, &rows, &[], &JobFiles::new(), &Nothing, true);
    assert_eq!(s.state, RunState::Pending);
    assert_eq!(
        s.stage("train").unwrap().tasks[0].reason_text.as_deref(),
        Some("prepare finished; waiting for Slurm to schedule it")
    );
    assert_eq!(
        s.stage("export").unwrap().tasks[0].reason_text.as_deref(),
        Some("waiting for train to finish")
    );
    let rows = vec![
        row("50", 50, "", "COMPLETED", ""),
        row("51", 51, "", "SUSPENDED", ""),
        row("52", 52, "", "PENDING", "Dependency"),
    ];
    let s = compute(&m, &rows, &[], &JobFiles::new(), &Nothing, true);
    assert_eq!(
        s.state,
        RunState::Running {
            stage: "train".into()
        }
    );
    assert!(!s.state.is_finished());
    let rows = vec![
        row("50", 50, "", "COMPLETED", ""),
        row("51", 51, "", "DEADLINE", ""),
        row("52", 52, "", "CANCELLED", "Dependency"),
    ];
    let s = compute(&m, &rows, &[], &JobFiles::new(), &Nothing, true);
    assert_eq!((s.state.word(), s.state.stage()), ("failed", Some("train")));
}

#[test]
fn results_csv_gives_epoch_and_best_map() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("results.csv");
    std::fs::write(
        &p,
        "epoch,metrics/mAP50(B),metrics/mAP50-95(B)\n1,0.2,0.1\n2,0.5,0.3\n3,0.4,0.25\n",
    )
    .unwrap();
    let pr = train_progress(&p, Some(10)).unwrap();
    assert_eq!(pr.epoch, 3);
    assert_eq!(pr.best_map50_95, Some(0.3));
    assert_eq!(pr.best_map50, Some(0.5));
}

#[test]
fn a_job_killed_by_its_cgroup_ran_out_of_host_memory_with_the_figure_and_the_fix() {
    let m = manifest(vec![stage("prepare", 1, 80), stage("train", 1, 81)]);
    let rows = vec![
        row("80", 80, "", "COMPLETED", ""),
        row("81", 81, "", "OUT_OF_MEMORY", "OutOfMemory"),
    ];
    let s = compute(&m, &rows, &[], &JobFiles::new(), &Nothing, true);
    let RunState::Failed {
        stage,
        why: Some(why),
    } = &s.state
    else {
        panic!("{:?}", s.state)
    };
    assert_eq!(stage, "train");
    assert!(
        why.contains("host memory") && why.contains("not GPU memory"),
        "{why}"
    );
    assert!(
        why.contains("1G") && why.contains("set `mem` higher"),
        "{why}"
    );
    // Slurm forgot the job: slurmstepd's line in the log says the same.
    let rows = vec![
        row("80", 80, "", "COMPLETED", ""),
        row("81", 81, "", "FAILED", "NonZeroExitCode"),
    ];
    let log = "slurmstepd-node1: error: Detected 1 oom-kill event(s) in StepId=81.batch. \
               Some of your processes may have been killed by the cgroup out-of-memory handler.\n";
    let dir = InMemory {
        epochs: vec![],
        logs: BTreeMap::from([("train.out".to_string(), log.to_string())]),
    };
    let s = compute(&m, &rows, &[], &JobFiles::new(), &dir, true);
    assert!(
        matches!(&s.state, RunState::Failed { why: Some(w), .. } if w.contains("host memory")),
        "{:?}",
        s.state
    );
    // An ordinary failure says nothing of memory.
    let s = compute(&m, &rows, &[], &JobFiles::new(), &Nothing, true);
    assert!(
        matches!(&s.state, RunState::Failed { why: None, .. }),
        "{:?}",
        s.state
    );
}

/// A search: prepare, ask (one task per batch), train (one per trial), tell.
fn search_manifest() -> Manifest {
    let mut ask = stage("ask", 2, 20);
    ask.attempts[0].array = Some("0".into());
    let mut second = ask.attempts[0].clone();
    (second.attempt, second.job_id, second.array) = (2, 23, Some("1".into()));
    ask.attempts.push(second);
    let mut train = stage("train", 4, 21);
    train.attempts[0].array = Some("0-1".into());
    let mut second = train.attempts[0].clone();
    (second.attempt, second.job_id, second.array) = (2, 24, Some("2-3".into()));
    train.attempts.push(second);
    let mut tell = stage("tell", 2, 22);
    tell.attempts[0].array = Some("0".into());
    let mut second = tell.attempts[0].clone();
    (second.attempt, second.job_id, second.array) = (2, 25, Some("1".into()));
    tell.attempts.push(second);
    manifest(vec![stage("prepare", 1, 10), ask, train, tell])
}

fn acct(job: &str, state: &str, code: i32) -> AcctRow {
    AcctRow {
        job_id: job.into(),
        state: state.into(),
        exit_code: Some(code),
        node: "node1".into(),
    }
}

#[test]
fn a_searchs_failed_trial_is_told_not_the_runs_failure() {
    let m = search_manifest();
    let done = |job: &str| acct(job, "COMPLETED", 0);
    let mut rows = vec![
        done("10"),
        done("20_0"),
        done("21_0"),
        acct("21_1", "FAILED", 1),
        done("22_0"),
        done("23_1"),
        done("24_2"),
        done("24_3"),
        done("25_1"),
    ];
    let s = compute(&m, &[], &rows, &JobFiles::new(), &Nothing, true);
    assert_eq!(s.state, RunState::Completed, "{s:#?}");
    // Each batch's task comes from its own attempt.
    let train = s.stage("train").unwrap();
    let jobs: Vec<&str> = train.tasks.iter().map(|t| t.job_id.as_str()).collect();
    assert_eq!(jobs, ["21_0", "21_1", "24_2", "24_3"]);
    assert_eq!(train.tasks[1].state, TaskState::Failed);
    // A failed tell stops the search: that is the run's failure.
    rows.retain(|r| r.job_id != "25_1");
    rows.push(acct("25_1", "FAILED", 1));
    let s = compute(&m, &[], &rows, &JobFiles::new(), &Nothing, true);
    assert!(
        matches!(&s.state, RunState::Failed { stage, .. } if stage == "tell"),
        "{:?}",
        s.state
    );
}
