//! yolo-sched runs from their manifests: counts by state, the stage that fails
//! most, and the memory figures right-sizing needs.
//!
//! The manifest format belongs to `submit`; this reader takes only what it
//! needs and is lenient about everything else (missing fields, numbers as
//! strings, unknown fields). What it reads:
//!
//! - `<runs dir>/<run_id>.json`: an index entry `{run_id, name, workdir}`
//!   pointing at `<workdir>/manifest.json`, or a whole manifest itself;
//! - a manifest: `run_id`, `name`, optional `state`, `estimate_gib`,
//!   `stages[{stage|name, state?, gres|profile, estimate_gib?, peak_gib?,
//!   tasks?, attempts[{job_id}]}]`;
//! - `<workdir>/state/<stage>[.<task>].{start,end}.json`, which the stage
//!   scripts write themselves (`end` holds `exit_code`).
//!
//! A stage without an explicit state gets one from the queue listing the
//! report already has (pending/running), else from those records. No extra
//! Slurm call is made.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::model::{Runs, StageFailures, StateCount, Unreadable};
use super::squeue::Phase;

/// One stage as far as the report cares.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stage {
    pub name: String,
    /// Lower case; empty until known.
    pub state: String,
    /// The latest attempt's Slurm job id (the array job id for arrays).
    pub job_id: Option<String>,
    /// Array tasks (1 when not an array).
    pub tasks: u64,
    /// The MIG profile or GRES type asked for (`1g.5gb`).
    pub profile: Option<String>,
    pub estimate_gib: Option<f64>,
    /// Peak GPU memory the run measured, when it recorded one.
    pub peak_gib: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Manifest {
    pub run_id: String,
    pub name: String,
    /// Lower case; empty until known.
    pub state: String,
    pub workdir: Option<PathBuf>,
    pub stages: Vec<Stage>,
}

/// Where manifests are when no directory is given:
/// `$XDG_STATE_HOME/yolo-sched/runs`, else `~/.local/state/yolo-sched/runs`.
pub fn default_dir() -> Option<PathBuf> {
    let state = std::env::var_os("XDG_STATE_HOME")
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|s| !s.is_empty())
                .map(|h| PathBuf::from(h).join(".local/state"))
        })?;
    Some(state.join("yolo-sched").join("runs"))
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) if !s.trim().is_empty() => Some(s.trim().to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn number(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
    .filter(|x: &f64| x.is_finite() && *x >= 0.0)
}

/// `gpu:1g.5gb:1`, `gres:gpu:1g.5gb:1` or `1g.5gb` → `1g.5gb`; untyped
/// `gpu:1` → none (no profile to compare).
fn profile_of(v: &Value) -> Option<String> {
    let s = text(v)?;
    let s = s.strip_prefix("gres:").unwrap_or(&s);
    if !s.contains(':') {
        return Some(s.to_string()).filter(|k| k != "gpu");
    }
    let item = crate::slurm::gres::parse_item(s)?;
    (item.name == "gpu").then_some(item.kind).flatten()
}

fn first<'a>(obj: &'a Value, keys: &[&str]) -> Option<&'a Value> {
    keys.iter()
        .find_map(|k| obj.get(k))
        .filter(|v| !v.is_null())
}

fn stage_from(v: &Value) -> Stage {
    let latest_job = v
        .get("attempts")
        .and_then(Value::as_array)
        .and_then(|a| a.last())
        .and_then(|a| a.get("job_id"))
        .and_then(text);
    Stage {
        name: first(v, &["stage", "name"])
            .and_then(text)
            .unwrap_or_default(),
        state: first(v, &["state", "status"])
            .and_then(text)
            .unwrap_or_default()
            .to_lowercase(),
        job_id: latest_job.or_else(|| first(v, &["job_id", "slurm_job_id"]).and_then(text)),
        tasks: first(v, &["tasks"])
            .and_then(number)
            .map(|n| n as u64)
            .filter(|n| *n > 0)
            .unwrap_or(1),
        profile: first(v, &["profile", "requested_profile", "gres"]).and_then(profile_of),
        estimate_gib: first(v, &["estimate_gib", "estimated_gib"]).and_then(number),
        peak_gib: first(v, &["peak_gib", "measured_peak_gib"]).and_then(number),
    }
}

/// What a runs-directory file holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Entry {
    /// A whole manifest.
    Manifest(Manifest),
    /// An index entry: the manifest is in this workdir.
    Index { run_id: String, workdir: PathBuf },
}

/// Read one JSON document: a manifest, or an index entry pointing to one.
pub fn parse_entry(json: &str) -> Result<Entry, String> {
    let v: Value = serde_json::from_str(json).map_err(|e| format!("not JSON: {e}"))?;
    if !v.is_object() {
        return Err("not a JSON object".to_string());
    }
    let run_id = first(&v, &["run_id", "id"])
        .and_then(text)
        .unwrap_or_default();
    let workdir = v.get("workdir").and_then(text).map(PathBuf::from);
    if let (None, Some(workdir)) = (v.get("stages"), &workdir) {
        return Ok(Entry::Index {
            run_id,
            workdir: workdir.clone(),
        });
    }
    let mut stages: Vec<Stage> = v
        .get("stages")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter(|s| s.is_object()).map(stage_from).collect())
        .unwrap_or_default();
    // A run-level estimate belongs to the stage that asked for a GPU profile,
    // or stands for the run when no stage did.
    let run_level = stage_from(&v);
    if run_level.estimate_gib.is_some() || run_level.peak_gib.is_some() {
        match stages.iter_mut().find(|s| s.profile.is_some()) {
            Some(s) => {
                s.estimate_gib = s.estimate_gib.or(run_level.estimate_gib);
                s.peak_gib = s.peak_gib.or(run_level.peak_gib);
            }
            None if run_level.profile.is_some() => stages.push(Stage {
                name: "run".to_string(),
                state: String::new(),
                ..run_level
            }),
            None => {}
        }
    }
    Ok(Entry::Manifest(Manifest {
        run_id,
        name: v.get("name").and_then(text).unwrap_or_default(),
        state: first(&v, &["state", "status"])
            .and_then(text)
            .unwrap_or_default()
            .to_lowercase(),
        workdir,
        stages,
    }))
}

/// One record a stage script wrote: it started, and how it ended if it did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskRecord {
    pub started: bool,
    /// `Some(code)` once `end.json` exists.
    pub exit_code: Option<i64>,
}

/// Records per stage name, one per task.
pub type JobRecords = BTreeMap<String, BTreeMap<Option<u32>, TaskRecord>>;

/// Read `<workdir>/state/*.{start,end}.json`; unreadable files are skipped
/// (one being written right now is simply not there yet).
pub fn read_job_records(workdir: &Path) -> JobRecords {
    let mut out = JobRecords::new();
    let Ok(entries) = std::fs::read_dir(workdir.join("state")) else {
        return out;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let (key, is_end) = match (
            name.strip_suffix(".start.json"),
            name.strip_suffix(".end.json"),
        ) {
            (Some(k), _) => (k.to_string(), false),
            (_, Some(k)) => (k.to_string(), true),
            _ => continue,
        };
        let (stage, task) = match key.split_once('.') {
            Some((s, t)) => match t.parse::<u32>() {
                Ok(t) => (s.to_string(), Some(t)),
                Err(_) => continue,
            },
            None => (key, None),
        };
        let record = out.entry(stage).or_default().entry(task).or_default();
        if is_end {
            let code = std::fs::read_to_string(entry.path())
                .ok()
                .and_then(|t| serde_json::from_str::<Value>(&t).ok())
                .and_then(|v| v.get("exit_code").and_then(Value::as_i64));
            // An end record without a readable code still says it ended; -1 marks "unknown".
            record.exit_code = Some(code.unwrap_or(-1));
        } else {
            record.started = true;
        }
    }
    out
}

/// A stage's state: from the queue while Slurm has it pending or running,
/// else from the job-written records. `lost`: it started, it is not in the
/// queue and it never wrote its end (killed: time limit, memory, scancel).
pub fn stage_state(
    stage: &Stage,
    records: Option<&BTreeMap<Option<u32>, TaskRecord>>,
    active: &HashMap<u64, Phase>,
) -> String {
    if !stage.state.is_empty() {
        return stage.state.clone();
    }
    let job = stage.job_id.as_deref().and_then(|j| j.parse::<u64>().ok());
    match job.and_then(|j| active.get(&j)) {
        Some(Phase::Running) => return "running".into(),
        Some(Phase::Pending) => return "pending".into(),
        _ => {}
    }
    let Some(records) = records.filter(|r| !r.is_empty()) else {
        return if job.is_some() {
            "unknown"
        } else {
            "not submitted"
        }
        .into();
    };
    let ended: Vec<i64> = records.values().filter_map(|r| r.exit_code).collect();
    if ended.iter().any(|c| *c != 0) {
        "failed".into()
    } else if ended.len() as u64 >= stage.tasks {
        "completed".into()
    } else {
        "lost".into()
    }
}

/// Stage states that count as a failure of that stage.
pub fn is_failure(state: &str) -> bool {
    matches!(
        state,
        "failed" | "lost" | "timeout" | "out_of_memory" | "node_fail" | "boot_fail" | "deadline"
    )
}

/// A run's state from its stages: a failed stage decides; then running,
/// pending, completed (all stages).
pub fn run_state(stages: &[Stage]) -> String {
    let has = |f: &dyn Fn(&str) -> bool| stages.iter().any(|s| f(&s.state));
    if has(&is_failure) {
        "failed"
    } else if has(&|s| s == "running") {
        "running"
    } else if has(&|s| s == "pending") {
        "pending"
    } else if !stages.is_empty() && stages.iter().all(|s| s.state == "completed") {
        "completed"
    } else if has(&|s| s == "cancelled") {
        "cancelled"
    } else {
        "unknown"
    }
    .to_string()
}

/// Every run readable in `dir`, with states filled in, and the files that
/// could not be read. A missing directory means no runs, not an error.
pub fn read_dir(dir: &Path, active: &HashMap<u64, Phase>) -> (Vec<Manifest>, Vec<Unreadable>) {
    let mut manifests = Vec::new();
    let mut unreadable = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return (manifests, unreadable),
        Err(e) => {
            unreadable.push(Unreadable {
                path: dir.display().to_string(),
                error: e.to_string(),
            });
            return (manifests, unreadable);
        }
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    let read = |path: &Path| {
        std::fs::read_to_string(path)
            .map_err(|e| e.to_string())
            .and_then(|t| parse_entry(&t))
    };
    for path in paths {
        let entry = match read(&path) {
            Ok(Entry::Index { run_id, workdir }) => {
                let manifest_path = workdir.join("manifest.json");
                match read(&manifest_path) {
                    Ok(Entry::Manifest(mut m)) => {
                        if m.run_id.is_empty() {
                            m.run_id = run_id;
                        }
                        m.workdir = Some(workdir);
                        Ok(m)
                    }
                    Ok(Entry::Index { .. }) => {
                        Err((manifest_path, "an index entry, not a manifest".into()))
                    }
                    Err(e) => Err((manifest_path, e)),
                }
            }
            Ok(Entry::Manifest(m)) => Ok(m),
            Err(e) => Err((path.clone(), e)),
        };
        match entry {
            Ok(mut m) => {
                if m.run_id.is_empty() {
                    m.run_id = path
                        .file_stem()
                        .map(|s| s.to_string_lossy().into_owned())
                        .unwrap_or_default();
                }
                let records = m
                    .workdir
                    .as_deref()
                    .map(read_job_records)
                    .unwrap_or_default();
                for stage in &mut m.stages {
                    stage.state = stage_state(stage, records.get(&stage.name), active);
                }
                if m.state.is_empty() {
                    m.state = run_state(&m.stages);
                }
                manifests.push(m);
            }
            Err((path, error)) => unreadable.push(Unreadable {
                path: path.display().to_string(),
                error,
            }),
        }
    }
    (manifests, unreadable)
}

/// Runs by state and failing stages.
pub fn summarise(dir: &Path, manifests: &[Manifest], unreadable: Vec<Unreadable>) -> Runs {
    let mut by_state: BTreeMap<String, u64> = BTreeMap::new();
    let mut failures: BTreeMap<String, u64> = BTreeMap::new();
    for m in manifests {
        *by_state.entry(m.state.clone()).or_default() += 1;
        let mut failed: Vec<&str> = m
            .stages
            .iter()
            .filter(|s| is_failure(&s.state))
            .map(|s| s.name.as_str())
            .collect();
        failed.sort_unstable();
        failed.dedup();
        for name in failed {
            *failures.entry(name.to_string()).or_default() += 1;
        }
    }
    let mut failing_stages: Vec<StageFailures> = failures
        .into_iter()
        .map(|(stage, failures)| StageFailures { stage, failures })
        .collect();
    failing_stages.sort_by(|a, b| b.failures.cmp(&a.failures).then(a.stage.cmp(&b.stage)));
    Runs {
        dir: dir.display().to_string(),
        runs: manifests.len() as u64,
        by_state: by_state
            .into_iter()
            .map(|(state, runs)| StateCount { state, runs })
            .collect(),
        most_failing_stage: failing_stages.first().cloned(),
        failing_stages,
        unreadable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(json: &str) -> Manifest {
        match parse_entry(json).unwrap() {
            Entry::Manifest(m) => m,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn lenient_manifest() {
        let m = manifest(
            r#"{"run_id":"r1","name":"coco","state":"FAILED","future":{"x":1},
                "stages":[{"name":"prepare","state":"completed","job_id":101},
                          {"stage":"train","attempts":[{"job_id":102},{"job_id":"103"}],"gres":"gpu:2g.10gb:1","estimate_gib":"3.5","tasks":4},
                          "not an object",
                          {"state":"pending","gres":"gpu:1"}]}"#,
        );
        assert_eq!(m.state, "failed");
        assert_eq!(m.stages.len(), 3);
        assert_eq!(m.stages[0].job_id.as_deref(), Some("101"));
        assert_eq!(m.stages[1].name, "train");
        assert_eq!(m.stages[1].job_id.as_deref(), Some("103"));
        assert_eq!(m.stages[1].profile.as_deref(), Some("2g.10gb"));
        assert_eq!(m.stages[1].estimate_gib, Some(3.5));
        assert_eq!(m.stages[1].tasks, 4);
        assert_eq!(m.stages[2].profile, None);
        assert!(parse_entry("[1,2]").is_err());
        assert!(parse_entry("{").unwrap_err().contains("not JSON"));
    }

    #[test]
    fn index_entries_point_to_a_workdir() {
        let e = parse_entry(r#"{"run_id":"x","name":"n","workdir":"/w/x","submitted_at":"…"}"#)
            .unwrap();
        assert_eq!(
            e,
            Entry::Index {
                run_id: "x".into(),
                workdir: "/w/x".into()
            }
        );
    }

    #[test]
    fn run_level_estimate_goes_to_the_gpu_stage_or_stands_alone() {
        let m = manifest(
            r#"{"run_id":"r","estimate_gib":4,"stages":[{"stage":"prepare"},{"stage":"train","gres":"gpu:1g.10gb:1"}]}"#,
        );
        assert_eq!(m.stages[1].estimate_gib, Some(4.0));
        assert_eq!(m.stages[0].estimate_gib, None);
        let m = manifest(r#"{"run_id":"r","estimate_gib":4,"profile":"3g.40gb"}"#);
        assert_eq!(m.stages.len(), 1);
        assert_eq!(m.stages[0].name, "run");
        assert_eq!(m.stages[0].profile.as_deref(), Some("3g.40gb"));
    }

    fn rec(started: bool, exit: Option<i64>) -> TaskRecord {
        TaskRecord {
            started,
            exit_code: exit,
        }
    }

    #[test]
    fn stage_states_from_queue_and_records() {
        let stage = Stage {
            name: "train".into(),
            job_id: Some("28".into()),
            tasks: 2,
            ..Stage::default()
        };
        let mut active = HashMap::new();
        active.insert(28, Phase::Running);
        assert_eq!(stage_state(&stage, None, &active), "running");
        active.insert(28, Phase::Pending);
        assert_eq!(stage_state(&stage, None, &active), "pending");
        let none = HashMap::new();
        assert_eq!(stage_state(&stage, None, &none), "unknown");
        let mut r = BTreeMap::new();
        r.insert(Some(0), rec(true, Some(0)));
        assert_eq!(stage_state(&stage, Some(&r), &none), "lost");
        r.insert(Some(1), rec(true, Some(0)));
        assert_eq!(stage_state(&stage, Some(&r), &none), "completed");
        r.insert(Some(1), rec(true, Some(3)));
        assert_eq!(stage_state(&stage, Some(&r), &none), "failed");
        let unsubmitted = Stage::default();
        assert_eq!(stage_state(&unsubmitted, None, &none), "not submitted");
    }

    #[test]
    fn run_states() {
        let s = |state: &str| Stage {
            state: state.into(),
            ..Stage::default()
        };
        assert_eq!(run_state(&[s("completed"), s("completed")]), "completed");
        assert_eq!(run_state(&[s("completed"), s("running")]), "running");
        assert_eq!(run_state(&[s("lost"), s("pending")]), "failed");
        assert_eq!(run_state(&[s("completed"), s("pending")]), "pending");
        assert_eq!(run_state(&[]), "unknown");
    }

    #[test]
    fn directory_with_index_manifest_and_broken_files() {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("work/b");
        std::fs::create_dir_all(work.join("state")).unwrap();
        std::fs::write(
            dir.path().join("a.json"),
            r#"{"state":"completed","stages":[]}"#,
        )
        .unwrap();
        std::fs::write(
            dir.path().join("b.json"),
            format!(r#"{{"run_id":"b","workdir":"{}"}}"#, work.display()),
        )
        .unwrap();
        std::fs::write(
            work.join("manifest.json"),
            r#"{"run_id":"b","stages":[{"stage":"train","attempts":[{"job_id":5}]},{"stage":"export","attempts":[{"job_id":6}]}]}"#,
        )
        .unwrap();
        std::fs::write(work.join("state/train.start.json"), "{}").unwrap();
        std::fs::write(work.join("state/train.end.json"), r#"{"exit_code":2}"#).unwrap();
        std::fs::write(dir.path().join("c.json"), "{oops").unwrap();
        std::fs::write(
            dir.path().join("d.json"),
            r#"{"run_id":"d","workdir":"/nonexistent/d"}"#,
        )
        .unwrap();
        std::fs::write(dir.path().join("notes.txt"), "ignored").unwrap();
        let mut active = HashMap::new();
        active.insert(6, Phase::Pending);
        let (manifests, unreadable) = read_dir(dir.path(), &active);
        assert_eq!(manifests.len(), 2);
        assert_eq!(manifests[0].run_id, "a");
        assert_eq!(manifests[1].stages[0].state, "failed");
        assert_eq!(manifests[1].stages[1].state, "pending");
        assert_eq!(manifests[1].state, "failed");
        assert_eq!(unreadable.len(), 2, "{unreadable:?}");
        assert!(unreadable[0].path.ends_with("c.json"));
        assert!(unreadable[1].path.ends_with("/nonexistent/d/manifest.json"));
        let runs = summarise(dir.path(), &manifests, unreadable);
        assert_eq!(runs.runs, 2);
        assert_eq!(
            runs.by_state,
            vec![
                StateCount {
                    state: "completed".into(),
                    runs: 1
                },
                StateCount {
                    state: "failed".into(),
                    runs: 1
                }
            ]
        );
        assert_eq!(
            runs.most_failing_stage,
            Some(StageFailures {
                stage: "train".into(),
                failures: 1
            })
        );
    }

    #[test]
    fn missing_directory_is_zero_runs() {
        let (m, u) = read_dir(Path::new("/nonexistent/yolo-sched/runs"), &HashMap::new());
        assert!(m.is_empty() && u.is_empty());
    }
}
