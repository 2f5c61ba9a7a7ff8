//! `[tune]`: a hyperparameter search run as a chain of jobs (docs/spec.md):
//! per batch an `ask` job, an array of `parallel` trials, a `tell` job.
//! Only the form is checked here; `parallel` against what the cluster can run
//! at once is the planner's check.

use serde::Serialize;
use toml::de::{DeTable, DeValue};

use super::cx::{join, Cx, Val};
use super::keys::TUNE_KEYS;
use super::tables::ok_arg_name;
use crate::spec::args;
use crate::spec::types::{ArgValue, StageKind};
use crate::spec::ultralytics::{self, ArgKind};
use crate::suggest;

const RANGE_KEYS: &[&str] = &["min", "max", "log"];
const CHOICE_KEYS: &[&str] = &["choices"];
const EARLY_STOP_KEYS: &[&str] = &["rule", "min_epochs", "min_trials", "eta"];

/// The most trials one search may run: each batch is three jobs, and a
/// search of thousands of trainings is many searches' worth of GPU time.
pub const MAX_TRIALS: u32 = 1000;
/// The most batches (ask, trials, tell) one search may queue: three jobs each.
pub const MAX_BATCHES: u32 = 200;
/// The most values one `choices` may list.
pub const MAX_CHOICES: usize = 1000;
/// The most hyperparameters one space may hold.
pub const MAX_SPACE: usize = 64;
/// The objective when `[tune]` names none: Ultralytics' mAP over IoU 0.5–0.95.
pub const DEFAULT_OBJECTIVE: &str = "metrics/mAP50-95(B)";

/// The Ultralytics version whose tuner the default space is copied from.
pub const DEFAULT_SPACE_FROM: &str =
    "ultralytics 8.4.190, ultralytics/engine/tuner.py (Tuner.space)";

/// `Tuner.space` of ultralytics 8.4.190: `(name, min, max)`. Its `momentum`
/// gain (0.3, how far evolution moves it) is the ask script's business.
/// `close_mosaic` is an integer there (`CFG_INT_KEYS`).
pub const DEFAULT_SPACE: &[(&str, f64, f64)] = &[
    ("lr0", 1e-5, 1e-2),
    ("lrf", 0.01, 1.0),
    ("momentum", 0.7, 0.98),
    ("weight_decay", 0.0, 0.001),
    ("warmup_epochs", 0.0, 5.0),
    ("warmup_momentum", 0.0, 0.95),
    ("box", 1.0, 20.0),
    ("cls", 0.1, 4.0),
    ("cls_pw", 0.0, 1.0),
    ("dfl", 0.4, 12.0),
    ("hsv_h", 0.0, 0.1),
    ("hsv_s", 0.0, 0.9),
    ("hsv_v", 0.0, 0.9),
    ("degrees", 0.0, 45.0),
    ("translate", 0.0, 0.9),
    ("scale", 0.0, 0.95),
    ("shear", 0.0, 10.0),
    ("perspective", 0.0, 0.001),
    ("flipud", 0.0, 1.0),
    ("fliplr", 0.0, 1.0),
    ("bgr", 0.0, 1.0),
    ("mosaic", 0.0, 1.0),
    ("mixup", 0.0, 1.0),
    ("cutmix", 0.0, 1.0),
    ("copy_paste", 0.0, 1.0),
    ("close_mosaic", 0.0, 10.0),
];

/// How the ask job proposes the next batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Sampler {
    /// Optuna's TPESampler (`constant_liar` on: trials of one batch are steered apart).
    #[default]
    Tpe,
    /// Optuna's GPSampler.
    Gp,
    /// Optuna's RandomSampler.
    Random,
    /// Ultralytics' own tuner's way: mutation of a fitness-weighted parent
    /// among the best so far (written in the ask script).
    Evolve,
}

impl Sampler {
    pub const NAMES: &'static [&'static str] = &["tpe", "gp", "random", "evolve"];

    pub fn name(self) -> &'static str {
        match self {
            Sampler::Tpe => "tpe",
            Sampler::Gp => "gp",
            Sampler::Random => "random",
            Sampler::Evolve => "evolve",
        }
    }

    fn from_name(s: &str) -> Option<Sampler> {
        Some(match s {
            "tpe" => Sampler::Tpe,
            "gp" => Sampler::Gp,
            "random" => Sampler::Random,
            "evolve" => Sampler::Evolve,
            _ => return None,
        })
    }
}

/// Whether a larger objective is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    #[default]
    Maximize,
    Minimize,
}

impl Direction {
    pub fn name(self) -> &'static str {
        match self {
            Direction::Maximize => "maximize",
            Direction::Minimize => "minimize",
        }
    }
}

/// One hyperparameter's range or choices.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Dist {
    Float { min: f64, max: f64, log: bool },
    Int { min: i64, max: i64, log: bool },
    Choice { choices: Vec<ArgValue> },
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TuneParam {
    pub name: String,
    #[serde(flatten)]
    pub dist: Dist,
}

/// `[tune]` of a spec.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Tune {
    pub trials: u32,
    pub parallel: u32,
    /// Epochs of each trial; `None`: `[train] epochs` (else Ultralytics' default).
    pub epochs: Option<u32>,
    /// A `results.csv` column; each trial's value is its best epoch's.
    pub objective: String,
    pub direction: Direction,
    pub sampler: Sampler,
    pub seed: Option<u32>,
    /// In the file's order; the default space when `[tune.space]` is absent.
    pub space: Vec<TuneParam>,
    /// True when `space` is `DEFAULT_SPACE` (`DEFAULT_SPACE_FROM`).
    pub default_space: bool,
    /// `publish = "NAME"`: the best trial's model goes into the model
    /// registry under this name when the search ends (its export job).
    pub publish: Option<String>,
    /// `early_stop`: stop trials that fall behind (`crate::agent::prune`).
    pub early_stop: Option<EarlyStop>,
}

/// Which rule stops a trial early.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PruneRule {
    /// Optuna's median rule: a trial whose best value so far is worse than
    /// the median of the others' at the same epoch.
    Median,
    /// Successive halving: at epochs `min_epochs × eta^k`, only the best
    /// `1/eta` of the trials that reached that epoch go on.
    Halving,
}

impl PruneRule {
    pub const NAMES: &'static [&'static str] = &["median", "halving"];

    pub fn name(self) -> &'static str {
        match self {
            PruneRule::Median => "median",
            PruneRule::Halving => "halving",
        }
    }
}

/// `[tune] early_stop`: the rule and its numbers (docs/spec.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct EarlyStop {
    pub rule: PruneRule,
    /// No trial is stopped before it reached this many epochs (the median
    /// rule's warm-up; successive halving's first rung).
    pub min_epochs: u32,
    /// Values needed at an epoch before anyone is stopped there: the other
    /// trials' for the median rule, all of them (this one too) for halving.
    pub min_trials: u32,
    /// Successive halving's reduction factor: the best `1/eta` go on.
    pub eta: u32,
}

impl EarlyStop {
    /// Optuna's defaults: `MedianPruner(n_startup_trials=5, n_warmup_steps=0)`
    /// (a trial is never stopped before its first epoch), and
    /// `SuccessiveHalvingPruner(min_resource=1, reduction_factor=4)`.
    pub fn defaults(rule: PruneRule) -> EarlyStop {
        match rule {
            PruneRule::Median => EarlyStop {
                rule,
                min_epochs: 1,
                min_trials: 5,
                eta: 4,
            },
            PruneRule::Halving => EarlyStop {
                rule,
                min_epochs: 1,
                min_trials: 4,
                eta: 4,
            },
        }
    }
}

impl Tune {
    /// Batches of `parallel` trials (the last may be smaller).
    pub fn batches(&self) -> u32 {
        self.trials.div_ceil(self.parallel.max(1))
    }

    /// The trials of batch `b` (0-based), as global trial numbers.
    pub fn batch_trials(&self, b: u32) -> std::ops::Range<u32> {
        let start = b.saturating_mul(self.parallel);
        start.min(self.trials)..start.saturating_add(self.parallel).min(self.trials)
    }
}

/// The default space as `TuneParam`s.
pub fn default_space() -> Vec<TuneParam> {
    DEFAULT_SPACE
        .iter()
        .map(|&(name, min, max)| TuneParam {
            name: name.to_string(),
            dist: if name == "close_mosaic" {
                Dist::Int {
                    min: min as i64,
                    max: max as i64,
                    log: false,
                }
            } else {
                Dist::Float {
                    min,
                    max,
                    log: false,
                }
            },
        })
        .collect()
}

fn count(cx: &mut Cx<'_>, key: &str, v: &Val<'_>, max: u32, what: &str) -> Option<u32> {
    let n = cx.int_of(key, v, &format!("{what} (an integer from 1 to {max})"))?;
    if (1..=i64::from(max)).contains(&n) {
        Some(n as u32)
    } else {
        cx.error(
            v.span(),
            key,
            format!("{n} is out of range; expected {what}, an integer from 1 to {max}"),
            None,
        );
        None
    }
}

/// The keys of `[tune]` as `Cx::fields` found them.
type Fields<'a, 'i> = std::collections::BTreeMap<String, &'a Val<'i>>;

/// `[tune]`, every key checked and every mistake reported; `None` when any was wrong.
pub(super) fn read_tune(cx: &mut Cx<'_>, t: &DeTable<'_>) -> Option<Tune> {
    let f = cx.fields("tune", t, TUNE_KEYS);
    let mut ok = true;
    let trials = read_trials(cx, &f);
    ok &= trials.is_some();
    let parallel = read_parallel(cx, &f, trials, &mut ok);
    let epochs = read_epochs(cx, &f, &mut ok);
    let objective = read_objective(cx, &f);
    ok &= objective.is_some();
    let direction = read_direction(cx, &f);
    ok &= direction.is_some();
    let sampler = read_sampler(cx, &f);
    ok &= sampler.is_some();
    let seed = read_seed(cx, &f, &mut ok);
    let (space, default_space) = match f.get("space") {
        Some(v) => match cx.table_of("tune.space", v) {
            Some(t) => match read_space(cx, t, v) {
                Some(s) => (Some(s), false),
                None => (None, false),
            },
            None => (None, false),
        },
        None => (Some(default_space()), true),
    };
    ok &= space.is_some();
    let publish = read_publish(cx, &f, &mut ok);
    let early_stop = match f.get("early_stop") {
        Some(v) => {
            let e = read_early_stop(cx, v, trials);
            ok &= e.is_some();
            e
        }
        None => None,
    };
    if !ok {
        return None;
    }
    Some(Tune {
        publish,
        early_stop,
        trials: trials?,
        parallel: parallel?,
        epochs,
        objective: objective?,
        direction: direction?,
        sampler: sampler?,
        seed,
        space: space?,
        default_space,
    })
}

/// `trials`, required: how many trainings the search runs.
fn read_trials(cx: &mut Cx<'_>, f: &Fields<'_, '_>) -> Option<u32> {
    match f.get("trials") {
        Some(v) => count(cx, "tune.trials", v, MAX_TRIALS, "a number of trials"),
        None => {
            cx.error(
                0..0,
                "tune.trials",
                "[tune] needs `trials`: how many trainings the search runs".into(),
                Some("add e.g. trials = 16 under [tune]".into()),
            );
            None
        }
    }
}

/// `parallel` (default 1): trials per batch, at most the trials, in at most
/// `MAX_BATCHES` batches; `ok` false when it is wrong.
fn read_parallel(
    cx: &mut Cx<'_>,
    f: &Fields<'_, '_>,
    trials: Option<u32>,
    ok: &mut bool,
) -> Option<u32> {
    let parallel = match f.get("parallel") {
        Some(v) => {
            let p = count(cx, "tune.parallel", v, MAX_TRIALS, "trials per batch");
            *ok &= p.is_some();
            p
        }
        None => Some(1),
    };
    if let (Some(t), Some(p), Some(v)) = (trials, parallel, f.get("parallel")) {
        if p > t {
            cx.error(
                v.span(),
                "tune.parallel",
                format!("{p} trials per batch is more than the {t} trials of the search"),
                Some(format!("set parallel to at most {t}")),
            );
            *ok = false;
        } else if t.div_ceil(p) > MAX_BATCHES {
            cx.error(
                v.span(),
                "tune.parallel",
                format!(
                    "{t} trials {p} at a time make {} batches, more than the {MAX_BATCHES} one search may queue (three jobs each)",
                    t.div_ceil(p)
                ),
                Some(format!(
                    "raise parallel to at least {}, or run fewer trials",
                    t.div_ceil(MAX_BATCHES)
                )),
            );
            *ok = false;
        }
    }
    parallel
}

/// `epochs`, optional: every trial's; `ok` false when it is wrong.
fn read_epochs(cx: &mut Cx<'_>, f: &Fields<'_, '_>, ok: &mut bool) -> Option<u32> {
    match f.get("epochs") {
        Some(v) => {
            let e = count(cx, "tune.epochs", v, 100_000, "epochs per trial");
            *ok &= e.is_some();
            e
        }
        None => None,
    }
}

/// `objective` (default `DEFAULT_OBJECTIVE`): a column of results.csv.
fn read_objective(cx: &mut Cx<'_>, f: &Fields<'_, '_>) -> Option<String> {
    match f.get("objective") {
        Some(v) => match cx.str_of("tune.objective", v, "a column of results.csv") {
            Some(s) if !s.trim().is_empty() && s.len() <= 200 && !s.contains(',') => {
                Some(s.to_string())
            }
            Some(_) => {
                cx.error(
                    v.span(),
                    "tune.objective",
                    "expected a column of results.csv (a non-empty name without commas)".into(),
                    Some(format!("e.g. objective = \"{DEFAULT_OBJECTIVE}\"")),
                );
                None
            }
            None => None,
        },
        None => Some(DEFAULT_OBJECTIVE.to_string()),
    }
}

/// `direction` (default maximize): `maximize`/`max` or `minimize`/`min`.
fn read_direction(cx: &mut Cx<'_>, f: &Fields<'_, '_>) -> Option<Direction> {
    match f.get("direction") {
        Some(v) => match cx.str_of("tune.direction", v, "\"maximize\" or \"minimize\"") {
            Some("maximize" | "max") => Some(Direction::Maximize),
            Some("minimize" | "min") => Some(Direction::Minimize),
            Some(other) => {
                let help = suggest::closest(other, ["maximize", "minimize"])
                    .map(|c| format!("did you mean `{c}`?"));
                cx.error(
                    v.span(),
                    "tune.direction",
                    format!(
                        "unknown direction `{}`; expected \"maximize\" or \"minimize\"",
                        crate::text::shown(other, 40)
                    ),
                    help,
                );
                None
            }
            None => None,
        },
        None => Some(Direction::Maximize),
    }
}

/// `sampler` (default TPE): one of `Sampler::NAMES`.
fn read_sampler(cx: &mut Cx<'_>, f: &Fields<'_, '_>) -> Option<Sampler> {
    match f.get("sampler") {
        Some(v) => match cx.str_of("tune.sampler", v, "a sampler name") {
            Some(s) => match Sampler::from_name(s) {
                Some(s) => Some(s),
                None => {
                    let help = suggest::closest(s, Sampler::NAMES.iter().copied())
                        .map(|c| format!("did you mean `{c}`?"));
                    cx.error(
                        v.span(),
                        "tune.sampler",
                        format!(
                            "unknown sampler `{}`; expected one of: {}",
                            crate::text::shown(s, 40),
                            Sampler::NAMES.join(", ")
                        ),
                        help,
                    );
                    None
                }
            },
            None => None,
        },
        None => Some(Sampler::Tpe),
    }
}

/// `seed`, optional: a `u32`; `ok` false when it is wrong.
fn read_seed(cx: &mut Cx<'_>, f: &Fields<'_, '_>, ok: &mut bool) -> Option<u32> {
    match f.get("seed") {
        Some(v) => match cx.int_of("tune.seed", v, "an integer from 0 to 4294967295") {
            Some(n) if (0..=i64::from(u32::MAX)).contains(&n) => Some(n as u32),
            Some(n) => {
                cx.error(
                    v.span(),
                    "tune.seed",
                    format!("{n} is out of range; expected an integer from 0 to 4294967295"),
                    None,
                );
                *ok = false;
                None
            }
            None => {
                *ok = false;
                None
            }
        },
        None => None,
    }
}

/// `publish`, optional: the registry name the best trial is published as;
/// `ok` false when it is wrong.
fn read_publish(cx: &mut Cx<'_>, f: &Fields<'_, '_>, ok: &mut bool) -> Option<String> {
    match f.get("publish") {
        Some(v) => match cx.str_of("tune.publish", v, "a model name for the registry") {
            Some(name) => match crate::names::model::check_name(name) {
                Ok(()) => Some(name.to_string()),
                Err(e) => {
                    cx.error(
                        v.span(),
                        "tune.publish",
                        e,
                        Some("e.g. publish = \"pcb-detector\"".into()),
                    );
                    *ok = false;
                    None
                }
            },
            None => {
                *ok = false;
                None
            }
        },
        None => None,
    }
}

fn prune_rule(cx: &mut Cx<'_>, key: &str, v: &Val<'_>) -> Option<PruneRule> {
    let s = cx.str_of(key, v, "\"median\" or \"halving\"")?;
    match s {
        "median" => Some(PruneRule::Median),
        "halving" => Some(PruneRule::Halving),
        other => {
            let help = suggest::closest(other, PruneRule::NAMES.iter().copied())
                .map(|c| format!("did you mean `{c}`?"));
            cx.error(
                v.span(),
                key,
                format!(
                    "unknown early-stopping rule `{}`; expected \"median\" or \"halving\"",
                    crate::text::shown(other, 40)
                ),
                help,
            );
            None
        }
    }
}

/// `early_stop = "median"` (the rule's defaults) or
/// `early_stop = { rule = "halving", min_epochs = 2, min_trials = 4, eta = 3 }`.
fn read_early_stop(cx: &mut Cx<'_>, v: &Val<'_>, trials: Option<u32>) -> Option<EarlyStop> {
    const KEY: &str = "tune.early_stop";
    let mut explicit = false;
    let mut out = match v.get_ref() {
        DeValue::String(_) => EarlyStop::defaults(prune_rule(cx, KEY, v)?),
        DeValue::Table(t) => {
            let f = cx.fields(KEY, t, EARLY_STOP_KEYS);
            let Some(rule) = f.get("rule") else {
                cx.error(
                    v.span(),
                    KEY,
                    "early_stop needs its `rule`: \"median\" or \"halving\"".into(),
                    Some("e.g. early_stop = { rule = \"median\", min_epochs = 3 }".into()),
                );
                return None;
            };
            let mut e = EarlyStop::defaults(prune_rule(cx, "tune.early_stop.rule", rule)?);
            let mut ok = true;
            for (name, max, slot) in [
                ("min_epochs", 100_000, &mut e.min_epochs),
                ("min_trials", MAX_TRIALS, &mut e.min_trials),
                ("eta", 100, &mut e.eta),
            ] {
                if let Some(x) = f.get(name) {
                    explicit |= name == "min_trials";
                    let key = format!("{KEY}.{name}");
                    match count(cx, &key, x, max, name) {
                        Some(n) if name == "eta" && n < 2 => {
                            cx.error(
                                x.span(),
                                &key,
                                "eta = 1 keeps every trial; expected 2 or more".into(),
                                Some("eta = 3 keeps the best third at each step".into()),
                            );
                            ok = false;
                        }
                        Some(n) => *slot = n,
                        None => ok = false,
                    }
                }
            }
            if !ok {
                return None;
            }
            e
        }
        _ => {
            cx.wrong_type(
                KEY,
                v,
                "\"median\", \"halving\" or a table",
                Some(
                    "write early_stop = \"median\" or early_stop = { rule = \"halving\", eta = 3 }"
                        .into(),
                ),
            );
            return None;
        }
    };
    // Peers other than the trial itself (median) or with it (halving).
    let peers = match out.rule {
        PruneRule::Median => trials.map(|t| t.saturating_sub(1)),
        PruneRule::Halving => trials,
    };
    if let Some(p) = peers.filter(|p| out.min_trials > *p) {
        if !explicit {
            // The rule's default asks more than a small search has: as many as it has.
            out.min_trials = p.max(1);
            return Some(out);
        }
        cx.error(
            v.span(),
            KEY,
            format!(
                "min_trials = {} but the search has only {} trial(s) to compare with: no trial would ever be stopped",
                out.min_trials, p
            ),
            Some(format!("set min_trials to at most {p}, or remove early_stop")),
        );
        return None;
    }
    out.min_trials = out.min_trials.max(1);
    Some(out)
}

/// Whether a range makes sense for an argument of this kind.
fn numeric(kind: ArgKind) -> bool {
    matches!(
        kind,
        ArgKind::Int { .. }
            | ArgKind::Number
            | ArgKind::Positive
            | ArgKind::Fraction
            | ArgKind::DataFraction
            | ArgKind::FractionOrPair
            | ArgKind::BoolOrFraction
    )
}

/// The arguments a search may not vary: what sizes the slice, names the data
/// or the run, or yolo-sched sets itself.
fn not_tunable(key: &str) -> Option<&'static str> {
    match key {
        "batch" | "imgsz" => {
            Some("the slice is chosen for one batch and image size, before the search starts")
        }
        "model" => {
            Some("every trial trains the same model: compare models with a [sweep] over `model`")
        }
        "data" => Some("the prepare stage checks (and caches) one dataset per run"),
        "epochs" => Some("every trial trains `[tune] epochs` epochs, so their objectives compare"),
        "workers" => Some("the job's CPUs are planned for one number of workers"),
        _ => None,
    }
}

fn read_space(cx: &mut Cx<'_>, t: &DeTable<'_>, table: &Val<'_>) -> Option<Vec<TuneParam>> {
    let mut entries: Vec<_> = t.iter().collect();
    entries.sort_by_key(|(k, _)| k.span().start);
    if entries.is_empty() {
        cx.error(
            table.span(),
            "tune.space",
            "[tune.space] is empty; expected at least one hyperparameter".into(),
            Some("add e.g. lr0 = { min = 1e-4, max = 1e-1, log = true }, or remove [tune.space] for the default space".into()),
        );
        return None;
    }
    if entries.len() > MAX_SPACE {
        cx.error(
            table.span(),
            "tune.space",
            format!(
                "{} hyperparameters; a search space may hold at most {MAX_SPACE}",
                entries.len()
            ),
            None,
        );
        return None;
    }
    let mut out = Vec::new();
    let mut ok = true;
    for (k, v) in entries {
        let key = k.get_ref().as_ref();
        let path = join("tune.space", key);
        cx.locations.insert(path.clone(), cx.at(&v.span()));
        let arg = ultralytics::find(key).filter(|_| ok_arg_name(key));
        let Some(arg) = arg else {
            cx.problem(k.span(), &path, args::unknown_arg(key, StageKind::Train));
            ok = false;
            continue;
        };
        if let Some(why) =
            not_tunable(key).or_else(|| args::controlled_reason(StageKind::Train, key))
        {
            cx.error(
                k.span(),
                &path,
                format!("`{key}` cannot be tuned: {why}"),
                None,
            );
            ok = false;
            continue;
        }
        match read_param(cx, &path, key, arg.kind, v) {
            Some(dist) => out.push(TuneParam {
                name: key.to_string(),
                dist,
            }),
            None => ok = false,
        }
    }
    ok.then_some(out)
}

fn number(v: &DeValue<'_>) -> Option<(f64, bool)> {
    match v {
        DeValue::Integer(i) => i64::from_str_radix(i.as_str(), i.radix())
            .ok()
            .map(|n| (n as f64, true)),
        DeValue::Float(f) => f
            .as_str()
            .replace('_', "")
            .parse::<f64>()
            .ok()
            .map(|x| (x, false)),
        _ => None,
    }
}

fn read_param(cx: &mut Cx<'_>, path: &str, key: &str, kind: ArgKind, v: &Val<'_>) -> Option<Dist> {
    let shape = format!("{key} = {{ min = …, max = … }} (add log = true for a log scale), or {key} = {{ choices = [ … ] }}");
    let DeValue::Table(t) = v.get_ref() else {
        cx.wrong_type(
            path,
            v,
            "a range or a list of choices",
            Some(format!("write {shape}")),
        );
        return None;
    };
    if t.get("choices").is_some() {
        let f = cx.fields(path, t, CHOICE_KEYS);
        let c = f.get("choices")?;
        let choices_path = format!("{path}.choices");
        let items = cx.array_of(&choices_path, c, "a list of values to try", None)?;
        if items.is_empty() || items.len() > MAX_CHOICES {
            cx.error(
                c.span(),
                &choices_path,
                format!(
                    "{} choices; expected from 1 to {MAX_CHOICES} values",
                    items.len()
                ),
                Some("for many numbers, write a range: { min = …, max = … }".into()),
            );
            return None;
        }
        let mut values = Vec::with_capacity(items.len());
        let mut seen = std::collections::HashSet::with_capacity(items.len());
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            let item_path = format!("{choices_path}[{i}]");
            let value = args::to_arg_value(item.get_ref())
                .and_then(|a| args::check_arg(StageKind::Train, key, &a, true).map(|()| a));
            match value {
                Ok(a) if !seen.insert(a.to_string()) => {
                    cx.error(
                        item.span(),
                        &item_path,
                        format!("{a} is listed twice"),
                        Some("remove the duplicate".into()),
                    );
                    ok = false;
                }
                Ok(a) => values.push(a),
                Err(p) => {
                    cx.problem(item.span(), &item_path, p);
                    ok = false;
                }
            }
        }
        return ok.then_some(Dist::Choice { choices: values });
    }
    let f = cx.fields(path, t, RANGE_KEYS);
    if !numeric(kind) {
        cx.error(
            v.span(),
            path,
            format!("`{key}` is not a number, so it has no range"),
            Some(format!("list its values: {key} = {{ choices = [ … ] }}")),
        );
        return None;
    }
    let bound = |cx: &mut Cx<'_>, which: &str| -> Option<(f64, bool)> {
        let p = format!("{path}.{which}");
        let Some(b) = f.get(which) else {
            cx.error(
                v.span(),
                path,
                format!("the range has no `{which}`"),
                Some(format!("write {shape}")),
            );
            return None;
        };
        match number(b.get_ref()) {
            Some((x, int)) if x.is_finite() => {
                let value = if int {
                    ArgValue::Int(x as i64)
                } else {
                    ArgValue::Float(x)
                };
                match args::check_arg(StageKind::Train, key, &value, true) {
                    Ok(()) => Some((x, int)),
                    Err(p2) => {
                        cx.problem(b.span(), &p, p2);
                        None
                    }
                }
            }
            _ => {
                cx.wrong_type(&p, b, "a finite number", None);
                None
            }
        }
    };
    let min = bound(cx, "min");
    let max = bound(cx, "max");
    let log = match f.get("log") {
        Some(b) => cx.bool_of(&format!("{path}.log"), b),
        None => Some(false),
    };
    let ((min, min_int), (max, max_int), log) = (min?, max?, log?);
    if min > max {
        cx.error(
            v.span(),
            path,
            format!("min {min} is greater than max {max}"),
            Some(format!("swap them: {key} = {{ min = {max}, max = {min} }}")),
        );
        return None;
    }
    if min == max {
        cx.error(
            v.span(),
            path,
            format!("min and max are both {min}: nothing to search"),
            Some(format!("set `{key}` in [train.args] instead")),
        );
        return None;
    }
    if log && min <= 0.0 {
        cx.error(
            v.span(),
            path,
            format!("a log range must lie above 0, and min is {min}"),
            Some("raise min above 0 (e.g. 1e-5), or remove log = true".into()),
        );
        return None;
    }
    let int = matches!(kind, ArgKind::Int { .. });
    if int {
        if !(min_int && max_int) {
            cx.error(
                v.span(),
                path,
                format!("`{key}` is an integer argument; expected integer bounds"),
                None,
            );
            return None;
        }
        return Some(Dist::Int {
            min: min as i64,
            max: max as i64,
            log,
        });
    }
    Some(Dist::Float { min, max, log })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str =
        "version = 1\n[run]\nname = \"t\"\n[train]\nmodel = \"yolov8n.pt\"\ndata = \"d.yaml\"\n";

    fn parse(tune: &str) -> Result<crate::spec::Spec, crate::spec::SpecErrors> {
        crate::spec::parse(&format!("{HEAD}{tune}"), "t.toml")
    }

    /// The one error of a bad `[tune]`: its key, line and message.
    fn error(tune: &str) -> (String, usize, String) {
        let errs = parse(tune).expect_err(tune);
        assert_eq!(errs.errors.len(), 1, "{errs}");
        let e = &errs.errors[0];
        (
            e.key.clone(),
            e.line,
            format!(
                "{}{}",
                e.message,
                e.help
                    .as_deref()
                    .map(|h| format!(" | {h}"))
                    .unwrap_or_default()
            ),
        )
    }

    #[test]
    fn the_issue_example_parses() {
        let spec = parse(
            "[tune]\ntrials = 32\nparallel = 4\nepochs = 20\n[tune.space]\nlr0 = { min = 1e-4, max = 1e-1, log = true }\nmomentum = { min = 0.6, max = 0.98 }\nmosaic = { choices = [0.0, 0.5, 1.0] }\nclose_mosaic = { min = 0, max = 10 }\noptimizer = { choices = [\"SGD\", \"AdamW\"] }\n",
        )
        .unwrap();
        let t = spec.tune.unwrap();
        assert_eq!(
            (t.trials, t.parallel, t.epochs, t.batches()),
            (32, 4, Some(20), 8)
        );
        assert_eq!(t.objective, DEFAULT_OBJECTIVE);
        assert_eq!(t.sampler, Sampler::Tpe);
        assert_eq!(t.direction, Direction::Maximize);
        assert!(!t.default_space);
        let names: Vec<&str> = t.space.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            names,
            ["lr0", "momentum", "mosaic", "close_mosaic", "optimizer"]
        );
        assert_eq!(
            t.space[0].dist,
            Dist::Float {
                min: 1e-4,
                max: 0.1,
                log: true
            }
        );
        assert_eq!(
            t.space[3].dist,
            Dist::Int {
                min: 0,
                max: 10,
                log: false
            }
        );
        assert!(matches!(&t.space[4].dist, Dist::Choice { choices } if choices.len() == 2));
    }

    #[test]
    fn without_a_space_the_tuners_default_is_used() {
        let t = parse("[tune]\ntrials = 4\nsampler = \"evolve\"\ndirection = \"min\"\nobjective = \"val/box_loss\"\nseed = 7\n")
            .unwrap()
            .tune
            .unwrap();
        assert!(t.default_space);
        assert_eq!(t.space.len(), DEFAULT_SPACE.len());
        assert_eq!(
            (t.parallel, t.sampler, t.direction, t.seed),
            (1, Sampler::Evolve, Direction::Minimize, Some(7))
        );
        assert_eq!(t.objective, "val/box_loss");
    }

    #[test]
    fn bad_input_names_line_and_key() {
        let cases: &[(&str, &str, usize, &str)] = &[
            (
                "[tune]\ntrials = 4\n[tune.space]\nlr0 = { min = 0.1, max = 0.01 }\n",
                "tune.space.lr0",
                10,
                "greater than max",
            ),
            (
                "[tune]\ntrials = 4\n[tune.space]\nlr0 = { min = 0.0, max = 0.1, log = true }\n",
                "tune.space.lr0",
                10,
                "above 0",
            ),
            (
                "[tune]\ntrials = 4\n[tune.space]\nlr = { min = 0.001, max = 0.1 }\n",
                "tune.space.lr",
                10,
                "did you mean `lr0`?",
            ),
            (
                "[tune]\ntrials = 4\n[tune.space]\nmomentum = { min = 0.5, max = 1.5 }\n",
                "tune.space.momentum.max",
                10,
                "1.5",
            ),
            (
                "[tune]\ntrials = 4\n[tune.space]\nimgsz = { choices = [320, 640] }\n",
                "tune.space.imgsz",
                10,
                "cannot be tuned",
            ),
            (
                "[tune]\ntrials = 4\n[tune.space]\noptimizer = { min = 1, max = 2 }\n",
                "tune.space.optimizer",
                10,
                "no range",
            ),
            (
                "[tune]\ntrials = 4\n[tune.space]\nlr0 = { min = 0.001 }\n",
                "tune.space.lr0",
                10,
                "no `max`",
            ),
            (
                "[tune]\ntrials = 4\n[tune.space]\nlr0 = { min = 0.001, max = 0.01, lg = true }\n",
                "tune.space.lr0.lg",
                10,
                "did you mean `log`?",
            ),
            ("[tune]\ntrials = 0\n", "tune.trials", 8, "out of range"),
            (
                "[tune]\ntrials = 1000000000\n",
                "tune.trials",
                8,
                "out of range",
            ),
            (
                "[tune]\ntrials = 4\nparallel = 8\n",
                "tune.parallel",
                9,
                "more than the 4 trials",
            ),
            (
                "[tune]\ntrials = 1000\nparallel = 2\n",
                "tune.parallel",
                9,
                "batches",
            ),
            (
                "[tune]\ntrials = 4\nsampler = \"tp\"\n",
                "tune.sampler",
                9,
                "did you mean `tpe`?",
            ),
            (
                "[tune]\ntrials = 4\ndirection = \"up\"\n",
                "tune.direction",
                9,
                "maximize",
            ),
            (
                "[tune]\ntrials = 4\ntrails = 4\n",
                "tune.trails",
                9,
                "did you mean `trials`?",
            ),
            ("[tune]\nparallel = 2\n", "tune.trials", 1, "needs `trials`"),
            (
                "[tune]\ntrials = 4\n[sweep]\nlr0 = [0.01, 0.02]\n",
                "tune",
                7,
                "cannot be used together",
            ),
            (
                "[tune]\ntrials = 4\n[tune.space]\nmosaic = { choices = [0.5, 0.5] }\n",
                "tune.space.mosaic.choices[1]",
                10,
                "listed twice",
            ),
            (
                "[tune]\ntrials = 4\npublish = \"no spaces\"\n",
                "tune.publish",
                9,
                "model name",
            ),
            (
                "[tune]\ntrials = 4\npublish = \"best\"\n[stages.export]\nenabled = false\n",
                "tune.publish",
                9,
                "[stages.export] is off",
            ),
            (
                "[tune]\ntrials = 4\nearly_stop = \"medain\"\n",
                "tune.early_stop",
                9,
                "did you mean `median`?",
            ),
            (
                "[tune]\ntrials = 4\nearly_stop = 3\n",
                "tune.early_stop",
                9,
                "\"median\", \"halving\" or a table",
            ),
            (
                "[tune]\ntrials = 4\nearly_stop = { min_epochs = 2 }\n",
                "tune.early_stop",
                9,
                "needs its `rule`",
            ),
            (
                "[tune]\ntrials = 4\nearly_stop = { rule = \"halving\", eta = 1 }\n",
                "tune.early_stop.eta",
                9,
                "eta = 1 keeps every trial",
            ),
            (
                "[tune]\ntrials = 4\nearly_stop = { rule = \"median\", min_epoch = 2 }\n",
                "tune.early_stop.min_epoch",
                9,
                "did you mean `min_epochs`?",
            ),
            (
                "[tune]\ntrials = 4\nearly_stop = { rule = \"median\", min_trials = 4 }\n",
                "tune.early_stop",
                9,
                "only 3 trial(s) to compare with",
            ),
            (
                "[tune]\ntrials = 4\nepochs = 3\nearly_stop = { rule = \"median\", min_epochs = 3 }\n",
                "tune.early_stop",
                10,
                "stops nothing",
            ),
        ];
        for (tune, key, line, needle) in cases {
            let (k, l, m) = error(tune);
            assert_eq!((k.as_str(), l), (*key, *line), "{tune}: {m}");
            assert!(m.contains(needle), "{tune}: {m}");
        }
    }

    #[test]
    fn publish_and_early_stop_parse_with_the_rules_defaults() {
        let t = parse("[tune]\ntrials = 8\npublish = \"pcb-best\"\nearly_stop = \"halving\"\n")
            .unwrap()
            .tune
            .unwrap();
        assert_eq!(t.publish.as_deref(), Some("pcb-best"));
        assert_eq!(t.early_stop, Some(EarlyStop::defaults(PruneRule::Halving)));
        // The median rule's default of 5 other trials, in a search of 4: 3.
        let t = parse("[tune]\ntrials = 4\nearly_stop = \"median\"\n")
            .unwrap()
            .tune
            .unwrap();
        let e = t.early_stop.unwrap();
        assert_eq!(
            (e.rule, e.min_epochs, e.min_trials),
            (PruneRule::Median, 1, 3)
        );
        let t = parse(
            "[tune]\ntrials = 16\nepochs = 20\n[tune.early_stop]\nrule = \"halving\"\nmin_epochs = 2\nmin_trials = 3\neta = 3\n",
        )
        .unwrap()
        .tune
        .unwrap();
        assert_eq!(
            t.early_stop,
            Some(EarlyStop {
                rule: PruneRule::Halving,
                min_epochs: 2,
                min_trials: 3,
                eta: 3
            })
        );
        assert_eq!(t.publish, None);
    }

    #[test]
    fn early_stop_of_trials_without_a_gpu_is_warned_of() {
        // No GPU, no job agent beside the trials: nothing could stop one.
        let spec =
            parse("[tune]\ntrials = 4\nearly_stop = \"median\"\n[resources]\ngpu = \"none\"\n")
                .unwrap();
        let w: Vec<&crate::spec::SpecError> = spec
            .origin
            .warnings
            .iter()
            .filter(|w| w.key == "tune.early_stop")
            .collect();
        assert_eq!(w.len(), 1, "{:?}", spec.origin.warnings);
        assert!(
            w[0].message
                .contains("no trial of this search can be stopped early")
                && w[0].message.contains("gpu = \"none\""),
            "{}",
            w[0]
        );
        // On a GPU (auto), or without early stopping, no such warning.
        for text in [
            "[tune]\ntrials = 4\nearly_stop = \"median\"\n",
            "[tune]\ntrials = 4\n[resources]\ngpu = \"none\"\n",
        ] {
            let spec = parse(text).unwrap();
            assert!(
                !spec
                    .origin
                    .warnings
                    .iter()
                    .any(|w| w.key == "tune.early_stop"),
                "{text}: {:?}",
                spec.origin.warnings
            );
        }
    }

    #[test]
    fn ten_thousand_choices_are_refused() {
        let many: Vec<String> = (0..10_000)
            .map(|i| format!("{}", i as f64 / 10_000.0))
            .collect();
        let (key, line, message) = error(&format!(
            "[tune]\ntrials = 4\n[tune.space]\nmosaic = {{ choices = [{}] }}\n",
            many.join(", ")
        ));
        assert_eq!((key.as_str(), line), ("tune.space.mosaic.choices", 10));
        assert!(message.contains("10000 choices"), "{message}");
    }

    #[test]
    fn batches_split_the_trials() {
        let t = Tune {
            trials: 10,
            parallel: 4,
            epochs: None,
            objective: DEFAULT_OBJECTIVE.into(),
            direction: Direction::Maximize,
            sampler: Sampler::Tpe,
            seed: None,
            space: default_space(),
            default_space: true,
            publish: None,
            early_stop: None,
        };
        assert_eq!(t.batches(), 3);
        assert_eq!(t.batch_trials(0), 0..4);
        assert_eq!(t.batch_trials(2), 8..10);
        assert_eq!(t.batch_trials(3), 10..10);
    }

    #[test]
    fn the_default_space_is_in_the_argument_table() {
        for (name, min, max) in DEFAULT_SPACE {
            let arg = ultralytics::find(name).expect(name);
            assert!(numeric(arg.kind), "{name}");
            assert!(min < max, "{name}");
            assert!(not_tunable(name).is_none());
        }
    }
}
