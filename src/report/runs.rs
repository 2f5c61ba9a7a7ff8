//! yolo-sched runs from their manifests: counts by state, the stage that fails
//! most, and the memory figures right-sizing needs.
//!
//! The manifest format belongs to `submit`; this reader takes only what it
//! needs and is lenient about the rest: `run_id`, `name`, `state` and
//! `stages[{name, state, job_id, profile, estimate_gib, peak_gib}]`, any of
//! them missing, numbers or strings. Manifests are `<dir>/*.json` or
//! `<dir>/<run>/manifest.json`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::model::{Runs, StageFailures, StateCount, Unreadable};

/// One stage as far as the report cares.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stage {
    pub name: String,
    pub state: String,
    pub job_id: Option<String>,
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
    pub state: String,
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

/// `gpu:1g.5gb:1` or `1g.5gb` → `1g.5gb`.
fn profile_of(v: &Value) -> Option<String> {
    let s = text(v)?;
    let s = s.strip_prefix("gres:").unwrap_or(&s);
    match crate::slurm::gres::parse_item(s) {
        Some(item) if item.name == "gpu" => item.kind.or(Some(s.to_string())).filter(|k| k != "gpu"),
        _ => Some(s.to_string()),
    }
}

fn first<'a>(obj: &'a Value, keys: &[&str]) -> Option<&'a Value> {
    keys.iter().find_map(|k| obj.get(k)).filter(|v| !v.is_null())
}

fn stage_from(v: &Value) -> Stage {
    Stage {
        name: first(v, &["name", "stage"]).and_then(text).unwrap_or_default(),
        state: first(v, &["state", "status"])
            .and_then(text)
            .unwrap_or_default()
            .to_lowercase(),
        job_id: first(v, &["job_id", "slurm_job_id"]).and_then(text),
        profile: first(v, &["profile", "requested_profile", "gres"]).and_then(profile_of),
        estimate_gib: first(v, &["estimate_gib", "estimated_gib"]).and_then(number),
        peak_gib: first(v, &["peak_gib", "measured_peak_gib"]).and_then(number),
    }
}

/// Read one manifest document. Fails only when it is not a JSON object.
pub fn parse_manifest(json: &str) -> Result<Manifest, String> {
    let v: Value = serde_json::from_str(json).map_err(|e| format!("not JSON: {e}"))?;
    if !v.is_object() {
        return Err("not a JSON object".to_string());
    }
    let mut stages: Vec<Stage> = v
        .get("stages")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter(|s| s.is_object()).map(stage_from).collect())
        .unwrap_or_default();
    // A run-level estimate applies to the stage that asked for a profile, or
    // stands for the run when the stages say nothing.
    let run_level = stage_from(&v);
    if run_level.estimate_gib.is_some() || run_level.peak_gib.is_some() {
        match stages.iter_mut().find(|s| s.profile.is_some()) {
            Some(s) => {
                s.estimate_gib = s.estimate_gib.or(run_level.estimate_gib);
                s.peak_gib = s.peak_gib.or(run_level.peak_gib);
            }
            None if run_level.profile.is_some() => stages.push(Stage {
                name: "run".to_string(),
                ..run_level
            }),
            None => {}
        }
    }
    Ok(Manifest {
        run_id: first(&v, &["run_id", "id"]).and_then(text).unwrap_or_default(),
        name: v.get("name").and_then(text).unwrap_or_default(),
        state: first(&v, &["state", "status"])
            .and_then(text)
            .unwrap_or_else(|| "unknown".to_string())
            .to_lowercase(),
        stages,
    })
}

/// Every manifest in `dir`, and the files that could not be read. A missing
/// directory means no runs, not an error.
pub fn read_dir(dir: &Path) -> (Vec<Manifest>, Vec<Unreadable>) {
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
        .filter_map(|p| {
            if p.is_dir() {
                Some(p.join("manifest.json")).filter(|m| m.is_file())
            } else {
                (p.extension().is_some_and(|x| x == "json")).then_some(p)
            }
        })
        .collect();
    paths.sort();
    for path in paths {
        let result = std::fs::read_to_string(&path)
            .map_err(|e| e.to_string())
            .and_then(|t| parse_manifest(&t));
        match result {
            Ok(mut m) => {
                if m.run_id.is_empty() {
                    m.run_id = run_id_from_path(&path);
                }
                manifests.push(m);
            }
            Err(error) => unreadable.push(Unreadable {
                path: path.display().to_string(),
                error,
            }),
        }
    }
    (manifests, unreadable)
}

fn run_id_from_path(path: &Path) -> String {
    let stem = if path.file_name().is_some_and(|n| n == "manifest.json") {
        path.parent().and_then(Path::file_name)
    } else {
        path.file_stem()
    };
    stem.map(|s| s.to_string_lossy().into_owned()).unwrap_or_default()
}

/// Stage states that count as a failure of that stage.
pub fn is_failure(state: &str) -> bool {
    matches!(
        state,
        "failed" | "timeout" | "out_of_memory" | "node_fail" | "boot_fail" | "deadline"
    )
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

    #[test]
    fn lenient_manifest() {
        let m = parse_manifest(
            r#"{"run_id":"r1","name":"coco","state":"FAILED","future":{"x":1},
                "stages":[{"name":"prepare","state":"completed","job_id":101},
                          {"name":"train","state":"failed","job_id":"102","profile":"gpu:2g.10gb:1","estimate_gib":"3.5"},
                          "not an object",
                          {"state":"pending"}]}"#,
        )
        .unwrap();
        assert_eq!(m.state, "failed");
        assert_eq!(m.stages.len(), 3);
        assert_eq!(m.stages[0].job_id.as_deref(), Some("101"));
        assert_eq!(m.stages[1].profile.as_deref(), Some("2g.10gb"));
        assert_eq!(m.stages[1].estimate_gib, Some(3.5));
        assert_eq!(m.stages[2].name, "");
        assert!(parse_manifest("[1,2]").is_err());
        assert!(parse_manifest("{").unwrap_err().contains("not JSON"));
    }

    #[test]
    fn run_level_estimate_goes_to_the_gpu_stage_or_stands_alone() {
        let m = parse_manifest(
            r#"{"run_id":"r","estimate_gib":4,"stages":[{"name":"prepare"},{"name":"train","profile":"1g.10gb"}]}"#,
        )
        .unwrap();
        assert_eq!(m.stages[1].estimate_gib, Some(4.0));
        assert_eq!(m.stages[0].estimate_gib, None);
        let m = parse_manifest(r#"{"run_id":"r","estimate_gib":4,"profile":"3g.40gb"}"#).unwrap();
        assert_eq!(m.stages.len(), 1);
        assert_eq!(m.stages[0].name, "run");
        assert_eq!(m.stages[0].profile.as_deref(), Some("3g.40gb"));
    }

    #[test]
    fn directory_with_both_layouts_and_a_broken_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.json"), r#"{"state":"completed","stages":[]}"#).unwrap();
        std::fs::create_dir(dir.path().join("b")).unwrap();
        std::fs::write(
            dir.path().join("b/manifest.json"),
            r#"{"run_id":"b","state":"failed","stages":[{"name":"train","state":"failed"},{"name":"train","state":"failed"}]}"#,
        )
        .unwrap();
        std::fs::write(dir.path().join("c.json"), "{oops").unwrap();
        std::fs::write(dir.path().join("notes.txt"), "ignored").unwrap();
        let (manifests, unreadable) = read_dir(dir.path());
        assert_eq!(manifests.len(), 2);
        assert_eq!(manifests[0].run_id, "a");
        assert_eq!(unreadable.len(), 1);
        assert!(unreadable[0].path.ends_with("c.json"));
        let runs = summarise(dir.path(), &manifests, unreadable);
        assert_eq!(runs.runs, 2);
        assert_eq!(
            runs.by_state,
            vec![
                StateCount { state: "completed".into(), runs: 1 },
                StateCount { state: "failed".into(), runs: 1 }
            ]
        );
        // Counted once per run even when the stage appears twice.
        assert_eq!(
            runs.most_failing_stage,
            Some(StageFailures { stage: "train".into(), failures: 1 })
        );
    }

    #[test]
    fn missing_directory_is_zero_runs() {
        let (m, u) = read_dir(Path::new("/nonexistent/yolo-sched/runs"));
        assert!(m.is_empty() && u.is_empty());
    }
}
