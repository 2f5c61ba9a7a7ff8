//! The whole spec: `Spec`, the typed form of a spec file, and what is asked
//! of it (its stages, variants, keys' positions, content hash). Its parts are
//! in `types`; `[backup]` and `[tune]` in the parser's files. A file of its
//! own so that the parts and their parsers never lead back to the whole.

use std::collections::BTreeMap;

use serde::Serialize;

use super::error::{Location, SpecError};
use super::types::*;
use super::SpecBackup;
use super::Tune;

/// A whole training spec.
#[derive(Debug, Clone, Serialize)]
pub struct Spec {
    /// Always `SPEC_VERSION`.
    pub version: i64,
    pub run: Run,
    pub train: Train,
    /// Resources of the train stage.
    pub resources: Resources,
    pub stages: Stages,
    /// Empty (no axes) when the spec has no `[sweep]`: one variant.
    pub sweep: Sweep,
    /// `[guard]`: the job's memory-guard settings (`spec::guard`); empty when absent.
    pub guard: super::guard::GuardSpec,
    /// `[backup]`: the run's checkpoint backup, within the site's rules (docs/backup.md).
    #[serde(skip_serializing_if = "SpecBackup::is_default")]
    pub backup: SpecBackup,
    /// `[tune]`: a hyperparameter search instead of one training (docs/spec.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tune: Option<Tune>,
    /// Where the spec came from and where its keys are; not part of its content.
    #[serde(skip)]
    pub origin: Origin,
}

/// The resources of a stage no table sets.
static NO_RESOURCES: StageResources = StageResources {
    partition: None,
    time: None,
    cpus: None,
    mem: None,
};

impl Spec {
    /// The stages this spec runs, in order.
    pub fn stages(&self) -> Vec<StageKind> {
        let mut out = Vec::with_capacity(4);
        if self.stages.prepare.is_some() {
            out.push(StageKind::Prepare);
        }
        if self.tune.is_some() {
            // A search: ask, trials, tell per batch; no val (its trials validate).
            out.extend([StageKind::Ask, StageKind::Train, StageKind::Tell]);
            if self.stages.export.is_some() {
                out.push(StageKind::Export);
            }
            return out;
        }
        out.push(StageKind::Train);
        if self.stages.val.is_some() {
            out.push(StageKind::Val);
        }
        if self.stages.export.is_some() {
            out.push(StageKind::Export);
        }
        out
    }

    /// The `[stages.X]` resources of a side stage (`None` for train, or when off).
    pub fn stage_resources(&self, kind: StageKind) -> Option<&StageResources> {
        match kind {
            StageKind::Prepare => self.stages.prepare.as_ref().map(|s| &s.resources),
            StageKind::Val => self.stages.val.as_ref().map(|s| &s.resources),
            StageKind::Export => self.stages.export.as_ref().map(|s| &s.resources),
            // A search's ask and tell: the planner's defaults (one CPU's
            // worth, shaped by `plan::resources`).
            StageKind::Ask | StageKind::Tell => Some(&NO_RESOURCES),
            StageKind::Train => None,
        }
    }

    /// How many training variants the sweep makes (1 without a sweep).
    pub fn variant_count(&self) -> u64 {
        self.sweep.variant_count()
    }

    /// The sweep's variants: each maps swept keys to one value. The order is the
    /// Cartesian product with the first `[sweep]` key varying slowest and the last
    /// fastest; variant `i` is Slurm array task `i`. Without a sweep: one empty map.
    pub fn sweep_variants(&self) -> Vec<BTreeMap<String, ArgValue>> {
        self.sweep.variants()
    }

    /// The full `yolo train` arguments of one variant (from `sweep_variants`),
    /// without the ones yolo-sched controls (device, project, name, exist_ok, resume):
    /// `model`, `data`, the `[train]` numbers that are set, `args`, then the
    /// variant's values, which win.
    pub fn train_args(&self, variant: &BTreeMap<String, ArgValue>) -> BTreeMap<String, ArgValue> {
        let t = &self.train;
        let mut out = BTreeMap::new();
        out.insert("model".to_string(), ArgValue::Str(t.model.clone()));
        out.insert("data".to_string(), ArgValue::Str(t.data.clone()));
        if let Some(v) = t.epochs {
            out.insert("epochs".to_string(), ArgValue::Int(v.into()));
        }
        if let Some(v) = t.imgsz {
            out.insert("imgsz".to_string(), ArgValue::Int(v.into()));
        }
        if let Some(v) = t.batch {
            out.insert("batch".to_string(), v.to_arg());
        }
        if let Some(v) = t.workers {
            out.insert("workers".to_string(), ArgValue::Int(v.into()));
        }
        for (k, v) in &t.args {
            out.insert(k.clone(), v.clone());
        }
        for (k, v) in variant {
            out.insert(k.clone(), v.clone());
        }
        out
    }

    /// The largest `workers` the spec sets over all variants; `None` when it
    /// leaves the dataloader to yolo-sched (one worker per CPU the stage gets, less one).
    pub fn explicit_workers(&self) -> Option<u32> {
        let swept = self
            .sweep
            .axes
            .iter()
            .filter(|a| a.key == "workers")
            .flat_map(|a| a.values.iter())
            .filter_map(|v| match v {
                ArgValue::Int(i) => u32::try_from(*i).ok(),
                _ => None,
            })
            .max();
        match (swept, self.train.workers) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }

    /// Position of a key path (`train.imgsz`, `sweep`, `resources.gpu`), if written.
    pub fn location(&self, key: &str) -> Option<Location> {
        self.origin.locations.get(key).copied()
    }

    /// An error about a key of this spec, located at the key (or its closest
    /// written parent, or line 1), for checks done after parsing (e.g. by the
    /// planner against the cluster's limits).
    pub fn error_at(
        &self,
        key: &str,
        message: impl Into<String>,
        help: Option<String>,
    ) -> SpecError {
        let mut probe = key;
        let loc = loop {
            if let Some(loc) = self.location(probe) {
                break loc;
            }
            match probe.rfind('.') {
                Some(i) => probe = &probe[..i],
                None => break Location { line: 1, column: 1 },
            }
        };
        SpecError {
            file: self.origin.file.clone(),
            line: loc.line,
            column: loc.column,
            key: key.to_string(),
            message: message.into(),
            help,
        }
    }

    /// A stable 64-bit FNV-1a hash of the spec's content (its canonical JSON form),
    /// independent of formatting, comments, key order and the file's location.
    pub fn content_hash(&self) -> u64 {
        let canonical = serde_json::to_string(self).expect("spec types always serialize");
        fnv1a64(canonical.as_bytes())
    }

    /// `content_hash` as 16 lower-case hex digits.
    pub fn hash_hex(&self) -> String {
        format!("{:016x}", self.content_hash())
    }
}
