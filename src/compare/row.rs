//! One leaderboard row: a run, or one variant of a sweep.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Serialize;

/// One row: a run, or one variant of a sweep.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// 1 for the best row of its dataset group under the sort key; null when
    /// the row has no value for it.
    pub rank: Option<usize>,
    /// `<run id>` or `<run id>/train-<N>` for a sweep variant.
    pub id: String,
    pub run_id: String,
    /// The array task of a sweep variant.
    pub variant: Option<u32>,
    pub name: String,
    pub user: String,
    pub submitted_at: DateTime<Utc>,
    /// The run's state (`RunState::word`).
    pub state: String,
    /// This variant's training task state (`TaskState::word`).
    pub train_state: String,
    pub model: Option<String>,
    /// The dataset YAML as the spec names it.
    pub data: Option<String>,
    /// The dataset's content fingerprint; null when the prepare stage has not recorded one.
    pub fingerprint: Option<String>,
    /// What Ultralytics trained with where variants differ (`lr0=0.02`).
    pub params: BTreeMap<String, String>,
    pub imgsz: Option<String>,
    pub epochs_done: u32,
    pub epochs: Option<u32>,
    /// The epoch with the best mAP50-95.
    pub best_epoch: Option<u32>,
    pub best_map50_95: Option<f64>,
    pub best_map50: Option<f64>,
    /// Precision and recall at the best epoch.
    pub precision: Option<f64>,
    pub recall: Option<f64>,
    /// Training wall time: from the train job's start record to its end record
    /// (or now, while it runs).
    pub train_seconds: Option<f64>,
    /// The GRES the train stage asked for (`gpu:1g.5gb:1`).
    pub slice: Option<String>,
    /// The slice Slurm gave the task (`SLURM_JOB_GPUS`).
    pub slice_index: Option<String>,
    /// Slice count × wall hours.
    pub slice_hours: Option<f64>,
    /// Slice-hours as whole-GPU hours: a MIG profile `Ng.*` is N/7 of a GPU.
    pub gpu_hours: Option<f64>,
    /// Milliseconds of inference per image, as Ultralytics' `val` printed it.
    pub inference_ms: Option<f64>,
    /// Which model `inference_ms` was measured on: `onnx` (the export stage's
    /// `yolo val` of the exported model), `val` (the val stage on best.pt) or
    /// `train` (the final validation of best.pt at the end of training).
    pub inference_of: Option<String>,
}
