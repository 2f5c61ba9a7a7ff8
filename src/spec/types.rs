//! The typed form of a spec (format v1): what `spec::parse` returns and the planner reads.
//!
//! Every value here has been validated: strings are free of control characters,
//! names match their Slurm or Ultralytics rules, numbers are in range. Optional
//! fields stay `None` when the spec leaves them out, so that site defaults can be
//! applied by the planner before Ultralytics' own defaults (see `ultralytics::DEFAULT_*`).

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use serde::{Serialize, Serializer};

use super::error::{Location, SpecError};

/// The one spec format this version reads.
pub const SPEC_VERSION: i64 = 1;

/// Where a spec was read from, the position of each key, and the warnings found.
#[derive(Debug, Clone, Default)]
pub struct Origin {
    /// The file name as given to `parse`/`load` (used in messages).
    pub file: String,
    /// The directory relative paths in the spec are resolved against: the
    /// directory holding the spec file (`.` for `parse` without a directory).
    pub base_dir: PathBuf,
    /// Key path (`train.imgsz`, `sweep.lr0`, `stages.prepare`) → position of its value.
    pub locations: BTreeMap<String, Location>,
    /// Things that will work but are probably not what the user wants.
    pub warnings: Vec<SpecError>,
}

/// `[run]`: identity of the run and settings shared by every stage.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    /// Letters, digits, '.', '_', '-'; 1..=64; not starting with '.' or '-'.
    pub name: String,
    /// Default `runs/<name>`; relative paths are relative to `origin.base_dir`.
    pub workdir: PathTemplate,
    /// `--account`.
    pub account: Option<String>,
    /// `--qos`.
    pub qos: Option<String>,
    /// Partition(s) of the GPU stages (train, val); Slurm's comma list allowed.
    pub partition: Option<String>,
    /// Shell lines run first in every stage, verbatim (they are the user's own commands).
    pub setup: Vec<String>,
}

/// `[train]`: the `yolo train` command.
#[derive(Debug, Clone, Serialize)]
pub struct Train {
    /// `.pt` (pretrained weights) or `.yaml`/`.yml` (architecture, from scratch).
    pub model: String,
    /// An Ultralytics dataset YAML; relative to `origin.base_dir`.
    pub data: String,
    pub epochs: Option<u32>,
    /// A multiple of 32.
    pub imgsz: Option<u32>,
    pub batch: Option<Batch>,
    pub workers: Option<u32>,
    /// Every other `yolo train` argument, checked against `ultralytics::TRAIN_ARGS`.
    pub args: BTreeMap<String, ArgValue>,
}

/// Ultralytics' `batch`: a fixed number of images, or AutoBatch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Batch {
    /// A fixed batch size (≥ 1).
    Images(u32),
    /// `-1`: AutoBatch at Ultralytics' default 60 % of GPU memory.
    AutoDefault,
    /// A fraction in (0, 1): AutoBatch at that fraction of GPU memory.
    AutoFraction(f64),
}

/// `[resources]` of the train stage.
#[derive(Debug, Clone, Serialize)]
pub struct Resources {
    pub gpu: GpuRequest,
    /// Whole GPUs of one node the training asks for: `gpu = "h100:4"` or
    /// `gpus = 4`. `None` leaves it to the planner: one GPU for a named type;
    /// for `auto`, as many as the estimate needs in the exclusive pool.
    pub gpus: Option<u32>,
    pub time: Option<SlurmTime>,
    /// Default: workers + 1 when the spec sets workers, else the slice's
    /// share of the node (`plan::resources`).
    pub cpus: Option<u32>,
    pub mem: Option<MemSize>,
    /// What happens when training runs out of GPU memory.
    pub on_oom: OnOom,
}

/// `[resources] on_oom`: what a training that ends with CUDA out-of-memory
/// (or is stopped by the memory guard) does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(tag = "policy", rename_all = "kebab-case")]
pub enum OnOom {
    /// The run fails; `yolo-sched resume RUN --gpu bigger` moves it by hand.
    #[default]
    Stop,
    /// Resume from the last checkpoint on the next larger slice the cluster
    /// has, at most `steps` times.
    ResumeBigger { steps: u32 },
}

/// What GPU a stage asks for: one device (one CUDA process sees one MIG device),
/// except that training may take several whole GPUs of one node
/// (`Resources::gpus`, `yolo train device=0,1,…`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuRequest {
    /// The planner picks the smallest slice or GPU that fits the estimate.
    Auto,
    /// A MIG profile such as `1g.5gb` (optionally `+me`).
    Mig(String),
    /// A whole GPU of a Slurm GRES type such as `a100`.
    Type(String),
    /// `shard:N`: N shards of a GPU without MIG (Slurm `--gres=shard:N`).
    Shard(u32),
    /// No GPU (CPU training; slow, for tests and tiny runs).
    None,
}

/// `[stages]`: the optional stages around training.
#[derive(Debug, Clone, Serialize)]
pub struct Stages {
    /// On by default; `enabled = false` turns it off.
    pub prepare: Option<PrepareStage>,
    /// Off unless `[stages.val]` is present.
    pub val: Option<ValStage>,
    /// On by default; `enabled = false` turns it off.
    pub export: Option<ExportStage>,
}

/// Slurm resources any stage can set. `None` = the planner's default.
#[derive(Debug, Clone, Default, Serialize)]
pub struct StageResources {
    pub partition: Option<String>,
    pub time: Option<SlurmTime>,
    pub cpus: Option<u32>,
    pub mem: Option<MemSize>,
}

/// `[stages.prepare]`: dataset check (and optional copy to node-local storage), CPU only.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PrepareStage {
    pub resources: StageResources,
    /// Copy the dataset here and train from the copy. May use `$VAR`/`${VAR}`,
    /// expanded by the shell on the node (e.g. `/local/ssd/$USER`).
    pub cache: Option<PathTemplate>,
}

/// `[stages.val]`: `yolo val` on the best weights, on a GPU.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ValStage {
    pub resources: StageResources,
    /// `None` = the same GPU request as the train stage.
    pub gpu: Option<GpuRequest>,
    /// Extra `yolo val` arguments (e.g. `split = "test"`), checked like train args.
    pub args: BTreeMap<String, ArgValue>,
}

/// `[stages.export]`: `yolo export` of the best weights, CPU only.
#[derive(Debug, Clone, Serialize)]
pub struct ExportStage {
    pub resources: StageResources,
    /// Ultralytics export formats, each exported in turn. Default `["torchscript"]`.
    pub formats: Vec<String>,
    /// Extra `yolo export` arguments (e.g. `half = true`, `opset = 17`).
    pub args: BTreeMap<String, ArgValue>,
    /// Run `yolo val` on the exported ONNX model (its accuracy and ms per image
    /// as deployed). Default true; only when `onnx` is among the formats.
    pub validate: bool,
}

/// `[sweep]`: the Cartesian product of train-argument values.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Sweep {
    /// In file order. The first axis varies slowest.
    pub axes: Vec<SweepAxis>,
    /// Slurm array throttle (`--array=0-N%P`).
    pub max_parallel: Option<u32>,
}

/// One swept argument and its values (non-empty, no duplicates).
#[derive(Debug, Clone, Serialize)]
pub struct SweepAxis {
    pub key: String,
    pub values: Vec<ArgValue>,
}

/// The pipeline stages, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StageKind {
    Prepare,
    /// `[tune]`: the job that proposes a batch of trials (CPU).
    Ask,
    Train,
    /// `[tune]`: the job that records a batch's outcomes (CPU).
    Tell,
    Val,
    Export,
}

/// A value of a `yolo` argument, as written in the spec.
#[derive(Debug, Clone, PartialEq)]
pub enum ArgValue {
    Bool(bool),
    Int(i64),
    /// Always finite.
    Float(f64),
    Str(String),
    /// A list of scalars (e.g. `freeze = [0, 1, 2]`).
    List(Vec<ArgValue>),
}

/// A Slurm time limit, kept as written and in seconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmTime {
    /// As written in the spec (one of Slurm's formats); pass this to `--time`.
    pub text: String,
    pub seconds: u64,
}

/// A Slurm memory size, kept as written and in MiB.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemSize {
    /// As written, e.g. `32G`; pass this to `--mem`.
    pub text: String,
    pub mebibytes: u64,
}

/// A path that may reference environment variables as `$NAME` or `${NAME}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathTemplate {
    text: String,
    parts: Vec<PathPart>,
}

/// A piece of a `PathTemplate`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathPart {
    Literal(String),
    Var(String),
}

impl StageKind {
    /// Every stage, in chain order.
    pub const ALL: [StageKind; 6] = [
        StageKind::Prepare,
        StageKind::Ask,
        StageKind::Train,
        StageKind::Tell,
        StageKind::Val,
        StageKind::Export,
    ];

    /// Lower-case name, as in job names (`<run>.<stage>`), manifests and JSON:
    /// the one mapping between stages and their names.
    pub fn name(self) -> &'static str {
        match self {
            StageKind::Prepare => "prepare",
            StageKind::Ask => "ask",
            StageKind::Train => "train",
            StageKind::Tell => "tell",
            StageKind::Val => "val",
            StageKind::Export => "export",
        }
    }

    /// The stage a name means (`name`'s inverse).
    pub fn from_name(name: &str) -> Option<StageKind> {
        StageKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

impl fmt::Display for StageKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// FNV-1a, 64 bit: small, stable across versions and platforms, good enough to
/// tell specs apart (not a cryptographic digest).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes
        .iter()
        .fold(OFFSET, |h, b| (h ^ u64::from(*b)).wrapping_mul(PRIME))
}

impl Sweep {
    /// Product of the axis lengths; 1 without axes. Saturates at `u64::MAX`.
    pub fn variant_count(&self) -> u64 {
        self.axes
            .iter()
            .fold(1u64, |n, a| n.saturating_mul(a.values.len() as u64))
    }

    /// See `Spec::sweep_variants`.
    pub fn variants(&self) -> Vec<BTreeMap<String, ArgValue>> {
        let total = usize::try_from(self.variant_count()).unwrap_or(usize::MAX);
        let mut out = Vec::with_capacity(total.min(1 << 20));
        for index in 0..total {
            let mut rest = index;
            let mut variant = BTreeMap::new();
            // Mixed-radix digits, last axis least significant (varies fastest).
            for axis in self.axes.iter().rev() {
                let n = axis.values.len();
                variant.insert(axis.key.clone(), axis.values[rest % n].clone());
                rest /= n;
            }
            out.push(variant);
        }
        out
    }
}

impl Batch {
    /// The value as a `yolo` argument.
    pub fn to_arg(self) -> ArgValue {
        match self {
            Batch::Images(n) => ArgValue::Int(n.into()),
            Batch::AutoDefault => ArgValue::Int(-1),
            Batch::AutoFraction(f) => ArgValue::Float(f),
        }
    }
}

impl ArgValue {
    /// The value as Ultralytics' CLI reads it after `key=` (not shell-quoted:
    /// quote the whole `key=value` word with `crate::shell::quote`). Booleans are
    /// `True`/`False`, floats keep a decimal point or exponent (`1.0`, `1e-5`) so
    /// they stay floats, lists are `[a,b]`.
    pub fn to_cli(&self) -> String {
        match self {
            ArgValue::Bool(true) => "True".to_string(),
            ArgValue::Bool(false) => "False".to_string(),
            ArgValue::Int(i) => i.to_string(),
            ArgValue::Float(f) => format!("{f:?}"),
            ArgValue::Str(s) => s.clone(),
            ArgValue::List(items) => {
                let inner: Vec<String> = items.iter().map(ArgValue::to_cli).collect();
                format!("[{}]", inner.join(","))
            }
        }
    }

    /// The TOML-ish name of the value's type, for messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            ArgValue::Bool(_) => "a boolean",
            ArgValue::Int(_) => "an integer",
            ArgValue::Float(_) => "a float",
            ArgValue::Str(_) => "a string",
            ArgValue::List(_) => "a list",
        }
    }
}

impl fmt::Display for ArgValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArgValue::Str(s) => write!(f, "{s:?}"),
            other => f.write_str(&other.to_cli()),
        }
    }
}

impl Serialize for ArgValue {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            ArgValue::Bool(b) => s.serialize_bool(*b),
            ArgValue::Int(i) => s.serialize_i64(*i),
            ArgValue::Float(f) => s.serialize_f64(*f),
            ArgValue::Str(v) => s.serialize_str(v),
            ArgValue::List(items) => items.serialize(s),
        }
    }
}

impl Serialize for Batch {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_arg().serialize(s)
    }
}

impl GpuRequest {
    /// The request as written in a spec (`auto`, `1g.5gb`, `a100`, `shard:2`, `none`).
    pub fn as_spec_str(&self) -> String {
        match self {
            GpuRequest::Auto => "auto".to_string(),
            GpuRequest::Mig(p) | GpuRequest::Type(p) => p.clone(),
            GpuRequest::Shard(n) => format!("shard:{n}"),
            GpuRequest::None => "none".to_string(),
        }
    }
}

impl fmt::Display for GpuRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.as_spec_str())
    }
}

impl Serialize for GpuRequest {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.as_spec_str())
    }
}

impl Serialize for SlurmTime {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl Serialize for MemSize {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl Serialize for PathTemplate {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl PathTemplate {
    /// Build from parts already checked by the parser.
    pub(crate) fn from_parts(text: String, parts: Vec<PathPart>) -> Self {
        PathTemplate { text, parts }
    }

    /// A template without variables.
    pub fn literal(text: &str) -> Self {
        PathTemplate {
            text: text.to_string(),
            parts: vec![PathPart::Literal(text.to_string())],
        }
    }

    /// As written in the spec.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub fn parts(&self) -> &[PathPart] {
        &self.parts
    }

    pub fn has_vars(&self) -> bool {
        self.parts.iter().any(|p| matches!(p, PathPart::Var(_)))
    }

    /// Replace the variables using `lookup` (e.g. `|n| std::env::var(n).ok()`);
    /// the error names the first variable that has no value.
    pub fn expand(&self, lookup: impl Fn(&str) -> Option<String>) -> Result<String, String> {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                PathPart::Literal(s) => out.push_str(s),
                PathPart::Var(name) => match lookup(name) {
                    Some(v) => out.push_str(&v),
                    None => return Err(name.clone()),
                },
            }
        }
        Ok(out)
    }

    /// One shell word that the shell expands to the path: literals single-quoted
    /// with `crate::shell::quote`, variables as `"${NAME:?…}"` (so their values
    /// are never split or globbed, nothing else is expanded, and an unset or
    /// empty variable stops the script with a message naming it instead of
    /// making a different path).
    pub fn shell_word(&self) -> String {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                PathPart::Literal(s) => out.push_str(&crate::shell::quote(s)),
                PathPart::Var(name) => {
                    out.push_str("\"${");
                    out.push_str(name);
                    out.push_str(":?is not set (a spec path uses it)}\"");
                }
            }
        }
        if out.is_empty() {
            out.push_str("''");
        }
        out
    }
}

impl fmt::Display for PathTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}
