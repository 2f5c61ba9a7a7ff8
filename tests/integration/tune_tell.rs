//! The search's ask and tell (`templates/tune.py`) with the real Optuna
//! 5.0.0 of the trainer's venv, no cluster: trials that finished, one its
//! agent stopped early (its `state/train.N.prune.json`) and one that failed
//! are told complete, PRUNED (with its curve as Optuna's intermediate
//! values, the last one its value) and FAIL; the summary `status`,
//! `compare` and the HTML page read says so.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::common::*;

#[track_caller]
fn python() -> std::path::PathBuf {
    let py = trainer_venv().join("bin/python");
    let ok = Command::new(&py)
        .args(["-c", "import optuna; assert optuna.__version__ == '5.0.0'"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "{} has no optuna 5.0.0: run `bash slurm/trainer.sh install` (YOLO_TRAINER_VENV names the venv)",
        py.display()
    );
    py
}

#[track_caller]
fn tune(workdir: &Path, mode: &str, batch: u32) -> String {
    let out = Command::new(python())
        .arg(workdir.join("scripts/tune.py"))
        .args([mode, workdir.to_str().unwrap(), &batch.to_string()])
        .env("OPTUNA_DISABLE_TELEMETRY", "1")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "tune.py {mode} {batch}: {text}");
    text
}

/// A results.csv whose objective column has these values.
fn results(values: &[f64]) -> String {
    let mut s = "                  epoch,  metrics/mAP50-95(B),      val/box_loss\n".to_string();
    for (i, v) in values.iter().enumerate() {
        s.push_str(&format!("{:>23},{v:>21},{:>18}\n", i + 1, 1.0));
    }
    s
}

fn ended(workdir: &Path, n: u32, code: i32, done: bool) {
    std::fs::write(
        workdir.join(format!("state/train.{n}.end.json")),
        format!(
            "{{\"stage\":\"train\",\"exit_code\":{code},\"ended\":\"2026-12-03T20:00:00Z\"}}\n"
        ),
    )
    .unwrap();
    if done {
        std::fs::write(
            workdir.join(format!("train-{n}/.yolo-sched-train-done")),
            "",
        )
        .unwrap();
    }
}

#[test]
fn a_pruned_trial_is_told_pruned_with_its_curve_and_a_failed_one_fail() {
    let dir = tempfile::tempdir().unwrap();
    let w = dir.path();
    std::fs::create_dir_all(w.join("scripts")).unwrap();
    std::fs::create_dir_all(w.join("state")).unwrap();
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("templates/tune.py"),
        w.join("scripts/tune.py"),
    )
    .unwrap();
    std::fs::write(
        w.join("scripts/tune.json"),
        r#"{"study": "t-1", "run": "t", "trials": 4, "parallel": 4, "epochs": 4,
            "objective": "metrics/mAP50-95(B)", "direction": "maximize", "sampler": "random",
            "seed": 7, "space": [{"name": "lr0", "type": "float", "min": 0.0001, "max": 0.1, "log": true}],
            "default_space": null}"#,
    )
    .unwrap();
    tune(w, "ask", 0);
    for n in 0..4 {
        assert!(w.join(format!("tune/trial-{n}.args")).exists());
        std::fs::create_dir_all(w.join(format!("train-{n}"))).unwrap();
    }
    std::fs::write(
        w.join("train-0/results.csv"),
        results(&[0.1, 0.2, 0.3, 0.35]),
    )
    .unwrap();
    ended(w, 0, 0, true);
    std::fs::write(
        w.join("train-1/results.csv"),
        results(&[0.2, 0.3, 0.4, 0.45]),
    )
    .unwrap();
    ended(w, 1, 0, true);
    // Stopped by its agent at epoch 2: the job ended well, without the done mark.
    std::fs::write(w.join("train-2/results.csv"), results(&[0.05, 0.08])).unwrap();
    std::fs::write(
        w.join("state/train.2.prune.json"),
        r#"{"rule": "median", "epoch": 2, "value": 0.08, "reference": 0.25, "compared": 3,
            "objective": "metrics/mAP50-95(B)", "message": "stopped early (median rule)"}"#,
    )
    .unwrap();
    ended(w, 2, 0, false);
    // Failed after one epoch.
    std::fs::write(w.join("train-3/results.csv"), results(&[0.01])).unwrap();
    ended(w, 3, 1, false);

    let log = tune(w, "tell", 0);
    assert!(
        log.contains("trial 2: told pruned after 2 epoch(s)"),
        "{log}"
    );
    assert!(log.contains("trial 3: told failed"), "{log}");
    let summary: Value = serde_json::from_str(&read(&w.join("tune/trials.json"))).unwrap();
    let states: Vec<&str> = summary["trials"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["state"].as_str().unwrap())
        .collect();
    assert_eq!(
        states,
        ["complete", "complete", "pruned", "fail"],
        "{summary:#}"
    );
    assert_eq!(summary["trials"][2]["epochs"], 2);
    assert_eq!(
        summary["trials"][2]["value"],
        Value::Null,
        "a pruned trial is not ranked"
    );
    assert_eq!(summary["best"]["trial"], 1);

    // Optuna's own record: PRUNED, its curve as intermediate values, the
    // last one its value (what TPE ranks pruned trials by).
    let out = Command::new(python())
        .args([
            "-c",
            "import optuna,sys,json\n\
             from optuna.storages import JournalStorage\n\
             from optuna.storages.journal import JournalFileBackend\n\
             s = optuna.load_study(study_name='t-1', storage=JournalStorage(JournalFileBackend(sys.argv[1])))\n\
             print(json.dumps([[t.state.name, t.value, {str(k): v for k, v in t.intermediate_values.items()}] for t in s.trials]))",
        ])
        .arg(w.join("tune/study.journal"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let trials: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(trials[0][0], "COMPLETE");
    assert_eq!(trials[0][1], 0.35);
    assert_eq!(trials[2][0], "PRUNED", "{trials}");
    assert_eq!(trials[2][1], 0.08, "{trials}");
    assert_eq!(trials[2][2], serde_json::json!({"1": 0.05, "2": 0.08}));
    assert_eq!(trials[3][0], "FAIL");
}
