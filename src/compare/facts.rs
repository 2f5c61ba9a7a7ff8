//! What one run recorded, per training variant: the effects half of
//! `compare` (it reads the run's files; `compare::board` is pure).

use chrono::{DateTime, Utc};

use super::Row;
use crate::run::status::{self, RunStatus, TaskState};
use crate::rundir::manifest::Manifest;
use crate::rundir::results::Epoch;
use crate::rundir::trained::Trained;

/// How much of a job log's end is searched for Ultralytics' summary.
const LOG_TAIL: u64 = 256 << 10;

/// One variant's row and its per-epoch curve (for the HTML report).
#[derive(Debug, Clone)]
pub struct Facts {
    pub row: Row,
    pub curve: Vec<Epoch>,
}

/// `[train]` and `[sweep]` of the spec the run was submitted with.
struct SpecView {
    model: Option<String>,
    data: Option<String>,
    imgsz: Option<String>,
    swept: Vec<String>,
}

fn spec_view(spec_text: &str) -> SpecView {
    let table: toml::Table = spec_text.parse().unwrap_or_default();
    let train = table.get("train");
    let text = |k: &str| {
        train.and_then(|t| t.get(k)).map(|v| match v {
            toml::Value::String(s) => s.clone(),
            other => other.to_string(),
        })
    };
    SpecView {
        model: text("model"),
        data: text("data"),
        imgsz: text("imgsz"),
        swept: table
            .get("sweep")
            .and_then(|s| s.as_table())
            .map(|s| s.keys().cloned().collect())
            .unwrap_or_default(),
    }
}

fn time_of(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s.trim())
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// Share of a whole GPU one unit of a GRES type is: a MIG profile `Ng.…`
/// holds N of the GPU's 7 compute slices; anything else counts as a GPU.
pub fn gpu_share(kind: &str) -> f64 {
    kind.split_once("g.")
        .and_then(|(g, _)| g.parse::<f64>().ok())
        .filter(|g| (1.0..=7.0).contains(g))
        .map_or(1.0, |g| g / 7.0)
}

/// One row per training variant of a run, from its status (the one run
/// model) and its files. `now` bounds the wall time of a running task.
pub fn facts(manifest: &Manifest, st: &RunStatus, now: DateTime<Utc>) -> Vec<Facts> {
    let spec = spec_view(&manifest.spec_text);
    let fingerprint = crate::rundir::trained::recorded_fingerprint(&manifest.workdir);
    let files = status::read_job_files(&manifest.workdir);
    let Some(train) = st.stage("train") else {
        return Vec::new();
    };
    let gres = manifest
        .stages
        .iter()
        .find(|s| s.stage == "train")
        .and_then(|s| s.gres.clone());
    let unit = gres.as_deref().and_then(crate::slurm::gres::parse_item);
    let swept = spec.swept.clone();
    // A search's trials stopped early: the job ended well, the study says pruned.
    let pruned: Vec<u32> = st
        .tune
        .as_ref()
        .map(|s| {
            s.trials
                .iter()
                .filter(|t| t.state == "pruned")
                .map(|t| t.trial)
                .collect()
        })
        .unwrap_or_default();
    let mut out = Vec::new();
    for task in &train.tasks {
        let dir = crate::rundir::layout::train_dir(task.task);
        let workdir = &manifest.workdir;
        let trained = Trained::read(&workdir.join(&dir));
        let best = trained.best();

        // Wall time from the job's own records, if they belong together.
        let (start, end) = files
            .get(&("train".to_string(), task.task))
            .cloned()
            .unwrap_or_default();
        let started = start.as_ref().and_then(|s| time_of(&s.started));
        let ended = end
            .as_ref()
            .filter(|e| start.as_ref().is_none_or(|s| s.job_id == e.job_id))
            .and_then(|e| time_of(&e.ended));
        let train_seconds = match (started, ended) {
            (Some(s), Some(e)) if e >= s => Some((e - s).num_milliseconds() as f64 / 1000.0),
            (Some(s), None) if task.state == TaskState::Running && now >= s => {
                Some((now - s).num_milliseconds() as f64 / 1000.0)
            }
            _ => None,
        };
        let slice_hours = match (&unit, train_seconds) {
            (Some(u), Some(s)) => Some(u.count as f64 * s / 3600.0),
            _ => None,
        };
        let gpu_hours = match (&unit, slice_hours) {
            (Some(u), Some(h)) => Some(h * gpu_share(u.kind.as_deref().unwrap_or(""))),
            _ => None,
        };

        // Inference per image: the exported model first, then the val stage,
        // then training's own final validation of best.pt.
        let log = |stage: &str| {
            crate::fsutil::read_tail(
                &workdir
                    .join(crate::rundir::layout::LOGS)
                    .join(crate::rundir::layout::log_file(stage, task.task)),
                LOG_TAIL,
            )
        };
        let exported = st
            .stage("export")
            .and_then(|s| s.exported_validation.iter().find(|(t, _)| *t == task.task))
            .and_then(|(_, v)| v.inference_ms_per_image);
        let val = st
            .stage("val")
            .filter(|s| s.state == TaskState::Completed)
            .and_then(|_| log("val"))
            .and_then(|l| crate::rundir::ultralytics::validation_summary(&l))
            .and_then(|v| v.inference_ms_per_image);
        let in_training = train
            .progress
            .iter()
            .find(|(t, _)| *t == task.task)
            .and_then(|(_, p)| p.final_validation.as_ref())
            .and_then(|v| v.inference_ms_per_image);
        let (inference_ms, inference_of) = match (exported, val, in_training) {
            (Some(v), _, _) => (Some(v), Some("onnx")),
            (None, Some(v), _) => (Some(v), Some("val")),
            (None, None, Some(v)) => (Some(v), Some("train")),
            _ => (None, None),
        };

        let args = &trained.args;
        let params = swept
            .iter()
            .filter_map(|k| args.get(k).map(|v| (k.clone(), v.clone())))
            .collect();
        let epochs = trained
            .epochs_planned()
            .or_else(|| crate::rundir::ultralytics::epochs_of(manifest));
        let row = Row {
            rank: None,
            id: match task.task {
                Some(_) => format!("{}/{dir}", manifest.run_id),
                None => manifest.run_id.clone(),
            },
            run_id: manifest.run_id.clone(),
            variant: task.task,
            name: manifest.name.clone(),
            user: manifest.user.clone(),
            submitted_at: manifest.submitted_at,
            state: st.state.word().to_string(),
            train_state: match task.task {
                Some(t) if pruned.contains(&t) => "pruned".to_string(),
                _ => task.state.word().to_string(),
            },
            model: spec.model.clone().or_else(|| args.get("model").cloned()),
            data: spec.data.clone().or_else(|| args.get("data").cloned()),
            fingerprint: fingerprint.clone(),
            params,
            imgsz: args.get("imgsz").cloned().or_else(|| spec.imgsz.clone()),
            epochs_done: trained.epochs_done(),
            epochs,
            best_epoch: best.map(|b| b.epoch),
            best_map50_95: best.and_then(|b| b.map50_95),
            best_map50: trained.best_map50(),
            precision: best.and_then(|b| b.precision),
            recall: best.and_then(|b| b.recall),
            train_seconds,
            slice: gres.clone(),
            slice_index: task.slice.clone(),
            slice_hours,
            gpu_hours,
            inference_ms,
            inference_of: inference_of.map(str::to_string),
        };
        out.push(Facts {
            row,
            curve: trained.epochs,
        });
    }
    out
}

/// The manifests of index entries (workdir set to where the entry points, as
/// `list` and `report` read them), and a line for each that could not be read.
/// Entries whose run directory is gone are left out silently.
pub fn load_manifests(
    entries: &[crate::rundir::manifest::IndexEntry],
) -> (Vec<Manifest>, Vec<String>) {
    let mut manifests = Vec::new();
    let mut warnings = Vec::new();
    for e in entries {
        let path = Manifest::path_in(&e.workdir);
        if !path.exists() {
            continue;
        }
        match Manifest::load(&path) {
            Ok(mut m) => {
                m.workdir = e.workdir.clone();
                manifests.push(m);
            }
            Err(err) => warnings.push(format!("run {}: {err:#}", e.run_id)),
        }
    }
    (manifests, warnings)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_yaml_is_read_flat() {
        let a = crate::rundir::trained::parse_args_yaml(
            "task: detect\nmodel: yolov8n.yaml\ndata: /d/pcb/data.yaml\nimgsz: 64\nname: 'train-1'\nlr0: 0.02\nnested:\n  x: 1\n",
        );
        assert_eq!(a["model"], "yolov8n.yaml");
        assert_eq!(a["imgsz"], "64");
        assert_eq!(a["name"], "train-1");
        assert_eq!(a["nested"], "");
        assert!(!a.contains_key("x"));
    }

    #[test]
    fn mig_profiles_are_shares_of_a_gpu() {
        assert!((gpu_share("1g.5gb") - 1.0 / 7.0).abs() < 1e-9);
        assert!((gpu_share("3g.20gb") - 3.0 / 7.0).abs() < 1e-9);
        assert_eq!(gpu_share("a100"), 1.0);
        assert_eq!(gpu_share(""), 1.0);
        assert_eq!(gpu_share("9g.x"), 1.0);
    }
}
