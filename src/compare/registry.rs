//! The registry's versions as leaderboard rows (`compare --registry`, the
//! HTML page): `registry:NAME@N`, ranked with runs on the same dataset
//! fingerprint.

use anyhow::Result;

use super::Row;
use crate::registry::{Caller, ModelRecord, Registry};

/// This version as a leaderboard row (`compare --registry`, the HTML
/// page): `registry:NAME@N`, ranked with runs on the same dataset fingerprint.
pub(crate) fn row_of(record: &ModelRecord) -> Row {
    let m = &record.metrics;
    Row {
        rank: None,
        id: format!("registry:{}", record.id()),
        run_id: record.source.run_id.clone().unwrap_or_else(|| record.id()),
        variant: record.source.variant,
        name: record.name.clone(),
        user: record.user.clone(),
        submitted_at: record.created_at,
        state: "published".into(),
        train_state: "published".into(),
        model: record.parent.clone(),
        data: record.data.clone(),
        fingerprint: record.fingerprint.clone(),
        params: Default::default(),
        imgsz: record.imgsz.clone(),
        epochs_done: m.epochs.unwrap_or(0),
        epochs: m.epochs,
        best_epoch: m.best_epoch,
        best_map50_95: m.map50_95,
        best_map50: m.map50,
        precision: m.precision,
        recall: m.recall,
        train_seconds: None,
        slice: None,
        slice_index: None,
        slice_hours: None,
        gpu_hours: None,
        inference_ms: m.onnx_ms_per_image,
        inference_of: m.onnx_ms_per_image.map(|_| "onnx".to_string()),
    }
}

/// The leaderboard rows of every version `caller` may read that is not
/// removed, and the records that could not be read.
pub(crate) fn rows(registry: &Registry, caller: &Caller) -> Result<(Vec<Row>, Vec<String>)> {
    let listing = registry.list(None, caller)?;
    Ok((
        listing
            .versions
            .iter()
            .filter(|l| !l.removed)
            .map(|l| row_of(&l.record))
            .collect(),
        listing.problems,
    ))
}
