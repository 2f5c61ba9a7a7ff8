//! Ultralytics' own words in a run directory, parsed: the final validation a
//! training or `yolo val` prints in a stage's log, and training progress from
//! results.csv (`run::status`, `compare` and `registry` read them).

use serde::Serialize;

use super::manifest::Manifest;
use super::results::Epoch;

/// What Ultralytics prints when it validates `best.pt` after the last epoch:
/// the `all` row (images, instances, P, R, mAP50, mAP50-95) and the speed line.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FinalValidation {
    pub images: u64,
    pub instances: u64,
    pub precision: f64,
    pub recall: f64,
    pub map50: f64,
    pub map50_95: f64,
    /// `Speed: … X ms inference … per image`.
    pub inference_ms_per_image: Option<f64>,
}

/// Parse the final validation out of a training log (only the part after the
/// last `Validating …best.pt` line counts; per-epoch validations come before).
pub fn final_validation(log: &str) -> Option<FinalValidation> {
    let start = log.rfind("Validating ")?;
    let tail = &log[start..];
    if !tail.lines().next()?.contains("best.pt") {
        return None;
    }
    validation_summary(tail)
}

/// The last `all` row and `Speed:` line of a `yolo val` run (the export
/// stage's validation of the exported ONNX model).
pub fn validation_summary(text: &str) -> Option<FinalValidation> {
    let row = text.lines().rev().find_map(|l| {
        let w: Vec<&str> = l.split_whitespace().collect();
        (w.len() == 7 && w[0] == "all").then_some(w)
    })?;
    let num = |i: usize| row[i].parse::<f64>().ok();
    let inference = text.lines().rev().find_map(|l| {
        let rest = l.trim().strip_prefix("Speed:")?;
        rest.split(',').find_map(|part| {
            let v = part
                .trim()
                .strip_suffix("inference")?
                .trim()
                .strip_suffix("ms")?;
            v.trim().parse::<f64>().ok()
        })
    });
    Some(FinalValidation {
        images: row[1].parse().ok()?,
        instances: row[2].parse().ok()?,
        precision: num(3)?,
        recall: num(4)?,
        map50: num(5)?,
        map50_95: num(6)?,
        inference_ms_per_image: inference,
    })
}

/// Progress of training, from a `results.csv`.
#[derive(Debug, Clone, Serialize)]
pub struct TrainProgress {
    pub epoch: u32,
    pub epochs: Option<u32>,
    pub best_map50_95: Option<f64>,
    pub best_map50: Option<f64>,
    /// Ultralytics' validation of `best.pt` at the end of training, from the job log.
    pub final_validation: Option<FinalValidation>,
}

/// Read `results.csv` (through `rundir::results`): the last epoch and the best mAP so far.
#[cfg(test)]
pub fn train_progress(results_csv: &std::path::Path, epochs: Option<u32>) -> Option<TrainProgress> {
    progress_of(&super::results::read(results_csv)?, epochs)
}

/// The last epoch and the best mAP so far of a training's epochs.
pub fn progress_of(rows: &[Epoch], epochs: Option<u32>) -> Option<TrainProgress> {
    let best_of = |f: fn(&Epoch) -> Option<f64>| rows.iter().filter_map(f).reduce(f64::max);
    Some(TrainProgress {
        epoch: rows.iter().map(|e| e.epoch).max().unwrap_or(0),
        epochs,
        best_map50_95: best_of(|e| e.map50_95),
        best_map50: best_of(|e| e.map50),
        final_validation: None,
    })
}

pub fn epochs_of(manifest: &Manifest) -> Option<u32> {
    let table: toml::Table = manifest.spec_text.parse().ok()?;
    table
        .get("train")?
        .get("epochs")?
        .as_integer()
        .and_then(|e| u32::try_from(e).ok())
}
