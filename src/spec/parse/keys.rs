//! The keys of each table of the format, and "unknown key" with where the key belongs.

use crate::spec::ultralytics;
use crate::spec::values::Problem;
use crate::suggest;

/// The most variants a sweep may have: Slurm's largest possible `MaxArraySize`
/// is 4000001 (task ids 0..=4000000). The cluster's real limit is checked by the planner.
pub const MAX_VARIANTS: u64 = 4_000_001;

/// Default export formats when `[stages.export]` gives none: Ultralytics' own default.
pub const DEFAULT_EXPORT_FORMATS: &[&str] = &["torchscript"];

pub(super) const ROOT_KEYS: &[&str] = &[
    "version",
    "run",
    "train",
    "resources",
    "stages",
    "sweep",
    "guard",
    "backup",
    "tune",
];
pub(super) const RUN_KEYS: &[&str] = &["name", "workdir", "account", "qos", "partition", "setup"];
pub(super) const TRAIN_TABLE_KEYS: &[&str] = &[
    "model", "data", "epochs", "imgsz", "batch", "workers", "args",
];
pub(super) const RESOURCE_KEYS: &[&str] = &[
    "gpu",
    "gpus",
    "time",
    "cpus",
    "mem",
    "on_oom",
    "on_oom_steps",
];
/// The most automatic moves to a bigger slice one training may make.
pub const MAX_OOM_STEPS: i64 = 4;
pub(super) const STAGE_NAMES: &[&str] = &["prepare", "val", "export"];
pub(super) const PREPARE_KEYS: &[&str] = &["enabled", "partition", "time", "cpus", "mem", "cache"];
pub(super) const VAL_KEYS: &[&str] =
    &["enabled", "partition", "time", "cpus", "mem", "gpu", "args"];
pub(super) const EXPORT_KEYS: &[&str] = &[
    "enabled",
    "partition",
    "time",
    "cpus",
    "mem",
    "formats",
    "args",
    "validate",
];

/// `[backup]` of a spec (`backup.rs`).
pub(super) const BACKUP_KEYS: &[&str] = &["enabled", "url"];

pub(super) const TUNE_KEYS: &[&str] = &[
    "trials",
    "parallel",
    "epochs",
    "objective",
    "direction",
    "sampler",
    "seed",
    "space",
    "publish",
    "early_stop",
];

/// Where each key of the format lives, for "`time` belongs in [resources]".
const HOMES: &[(&str, &[&str])] = &[
    ("", ROOT_KEYS),
    ("run", RUN_KEYS),
    ("train", TRAIN_TABLE_KEYS),
    ("resources", RESOURCE_KEYS),
    ("stages", STAGE_NAMES),
    ("guard", crate::spec::guard::GUARD_KEYS),
    ("backup", BACKUP_KEYS),
    ("tune", TUNE_KEYS),
];

/// Parse and validate a spec. `file` names it in messages; relative paths in it
/// "unknown key" with what was expected and the best suggestion we have.
pub(super) fn unknown_key(table_path: &str, key: &str, allowed: &[&str]) -> Problem {
    let place = if table_path.is_empty() {
        "at the top level".to_string()
    } else {
        format!("in [{table_path}]")
    };
    let mut p = Problem::new(format!(
        "unknown key `{key}` {place}; expected one of: {}",
        allowed.join(", ")
    ));
    let home = HOMES
        .iter()
        .find(|(home, keys)| *home != table_path && keys.contains(&key))
        .map(|(home, _)| {
            if home.is_empty() {
                "at the top level".to_string()
            } else {
                format!("in [{home}]")
            }
        });
    if table_path == "train" && ultralytics::find(key).is_some() {
        return p.help(match home {
            Some(home) => format!(
                "`{key}` belongs {home}; Ultralytics' own `{key}` argument goes in `train.args`"
            ),
            None => format!(
                "`{key}` is a `yolo train` argument: put it in `train.args`, e.g. args = {{ {key} = … }}"
            ),
        });
    }
    if (table_path == "stages.prepare" || table_path == "stages.export") && key == "gpu" {
        return Problem::new(format!(
            "unknown key `gpu` {place}: this stage runs on CPU only (its work needs no GPU, so it does not hold one)"
        ))
        .help("remove it; the GPU of training is `resources.gpu`");
    }
    if let Some(c) = suggest::closest(key, allowed.iter().copied()) {
        return p.help(format!("did you mean `{c}`?"));
    }
    if let Some(home) = home {
        return p.help(format!("`{key}` belongs {home}"));
    }
    if table_path == "resources" && (key == "gpus" || key == "gres") {
        p = p.help("did you mean `gpu`?");
    }
    p
}
