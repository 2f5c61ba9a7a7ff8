//! Checks of `yolo` arguments in `[train] args`, `[sweep]` and stage `args`:
//! known names, value types (as Ultralytics checks them), and the arguments
//! yolo-sched sets itself.

use super::types::{ArgValue, Batch, StageKind};
use super::ultralytics::{self, ArgKind, IMGSZ_STRIDE};
use super::values::{check_no_control, Problem};

/// `[train]` keys that are `yolo train` arguments yolo-sched reads to plan the job.
pub const TRAIN_KEYS: &[&str] = &["model", "data", "epochs", "imgsz", "batch", "workers"];

/// Why yolo-sched sets an argument itself, for the stage `stage`; `None` when the
/// user may set it.
pub fn controlled_reason(stage: StageKind, key: &str) -> Option<&'static str> {
    let common = match key {
        "device" => Some(
            "yolo-sched runs each GPU stage with device=0, the one GPU or MIG slice Slurm gives the job (device=0,1,… for several GPUs of one node); choose the GPU with `resources.gpu` and the count with `resources.gpus`",
        ),
        "project" | "name" | "exist_ok" => Some(
            "yolo-sched sets project=<workdir> name=<stage> exist_ok=True so that every stage finds the others' files; choose the place with `run.workdir`",
        ),
        "resume" => Some(
            "yolo-sched resumes from weights/last.pt by itself when a job is requeued or `yolo-sched resume` is run",
        ),
        "mode" => Some("the stage decides the mode (train, val or export)"),
        "cfg" => Some(
            "a cfg file replaces the arguments given before it on the command line, including the device, project and name yolo-sched sets; put its settings in `args` instead",
        ),
        _ => None,
    };
    if common.is_some() {
        return common;
    }
    match (stage, key) {
        (StageKind::Val | StageKind::Export, "model") => {
            Some("the stage uses the run's trained weights (weights/best.pt)")
        }
        (StageKind::Val, "data") => Some("val uses `train.data` (or its cached copy)"),
        (StageKind::Export, "format") => Some("list the formats in `stages.export.formats`"),
        _ => None,
    }
}

/// Convert a TOML value to an `ArgValue` (scalars and lists of scalars).
pub fn to_arg_value(v: &toml::de::DeValue<'_>) -> Result<ArgValue, Problem> {
    use toml::de::DeValue;
    match v {
        DeValue::Boolean(b) => Ok(ArgValue::Bool(*b)),
        DeValue::Integer(i) => i64::from_str_radix(i.as_str(), i.radix())
            .map(ArgValue::Int)
            .map_err(|_| Problem::new("is an integer too large for a 64-bit number")),
        DeValue::Float(f) => match f.as_str().parse::<f64>() {
            Ok(x) if x.is_finite() => Ok(ArgValue::Float(x)),
            _ => Err(Problem::new(format!(
                "{} is not a finite number",
                f.as_str()
            ))),
        },
        DeValue::String(s) => {
            if s.is_empty() {
                return Err(Problem::new("is an empty string; expected a value"));
            }
            check_no_control(s)?;
            Ok(ArgValue::Str(s.to_string()))
        }
        DeValue::Array(items) => {
            let mut out = Vec::with_capacity(items.len());
            for item in items.iter() {
                match item.get_ref() {
                    DeValue::Array(_) | DeValue::Table(_) => {
                        return Err(Problem::new(
                            "is a nested list or table; `yolo` arguments take scalars or lists of scalars",
                        ))
                    }
                    other => out.push(to_arg_value(other)?),
                }
            }
            Ok(ArgValue::List(out))
        }
        DeValue::Table(_) => Err(Problem::new(
            "is a table; `yolo` arguments take a boolean, number, string or list",
        )),
        DeValue::Datetime(_) => Err(Problem::new(
            "is a date/time; `yolo` arguments take a boolean, number, string or list",
        )),
    }
}

fn as_number(v: &ArgValue) -> Option<f64> {
    match v {
        ArgValue::Int(i) => Some(*i as f64),
        ArgValue::Float(f) => Some(*f),
        _ => None,
    }
}

fn is_fraction(v: &ArgValue) -> bool {
    as_number(v).is_some_and(|x| (0.0..=1.0).contains(&x))
}

/// Check a value against the type Ultralytics expects for the argument.
pub fn check_kind(kind: ArgKind, v: &ArgValue) -> Result<(), Problem> {
    let found = || format!("{} ({v})", v.type_name());
    let expected = |what: &str| {
        let mut p = Problem::new(format!("expected {what}, found {}", found()));
        if let ArgValue::Str(s) = v {
            match s.as_str() {
                "true" | "True" | "false" | "False" => {
                    p = p.help(format!("write {} without quotes", s.to_lowercase()));
                }
                _ if s.parse::<f64>().is_ok() => {
                    p = p.help(format!("write {s} without quotes"));
                }
                _ => {}
            }
        }
        p
    };
    match kind {
        ArgKind::Bool => match v {
            ArgValue::Bool(_) => Ok(()),
            _ => Err(expected("true or false")),
        },
        ArgKind::Int { min } => match v {
            ArgValue::Int(i) if *i >= min => Ok(()),
            ArgValue::Int(_) => Err(Problem::new(format!(
                "{v} is too small; expected an integer ≥ {min}"
            ))),
            ArgValue::Float(f) if f.fract() == 0.0 => {
                Err(expected("an integer").help(format!("write {}", *f as i64)))
            }
            _ => Err(expected(&format!("an integer ≥ {min}"))),
        },
        ArgKind::Number => match as_number(v) {
            Some(_) => Ok(()),
            None => Err(expected("a number")),
        },
        ArgKind::Positive => match as_number(v) {
            Some(x) if x > 0.0 => Ok(()),
            Some(_) => Err(Problem::new(format!("{v} must be greater than 0"))),
            None => Err(expected("a number greater than 0")),
        },
        ArgKind::Fraction => match v {
            ArgValue::List(items) if items.len() == 2 && items.iter().all(is_fraction) => Ok(()),
            _ if is_fraction(v) => Ok(()),
            _ if as_number(v).is_some() => Err(Problem::new(format!(
                "{v} is out of range; expected a number between 0.0 and 1.0"
            ))),
            _ => Err(expected("a number between 0.0 and 1.0")),
        },
        ArgKind::DataFraction => match as_number(v) {
            Some(x) if x > 0.0 && x <= 1.0 => Ok(()),
            Some(_) => Err(Problem::new(format!(
                "{v} is out of range; expected a share of the dataset in (0.0, 1.0]"
            ))),
            None => Err(expected("a number in (0.0, 1.0]")),
        },
        ArgKind::BoolOrFraction => match v {
            ArgValue::Bool(_) => Ok(()),
            _ if is_fraction(v) => Ok(()),
            _ => Err(expected("true, false or a number between 0.0 and 1.0")),
        },
        ArgKind::FractionOrPair => match v {
            ArgValue::List(items)
                if items.len() == 2 && items.iter().all(|x| as_number(x).is_some()) =>
            {
                Ok(())
            }
            _ if is_fraction(v) => Ok(()),
            _ => Err(expected(
                "a number between 0.0 and 1.0, or a list of two numbers",
            )),
        },
        ArgKind::Choice(choices) => check_choice(choices, v, false),
        ArgKind::BoolOrChoice(choices) => check_choice(choices, v, true),
        ArgKind::BoolOrStr => match v {
            ArgValue::Bool(_) | ArgValue::Str(_) => Ok(()),
            _ => Err(expected("true, false or a string")),
        },
        ArgKind::Str => match v {
            ArgValue::Str(_) => Ok(()),
            _ => Err(expected("a string")),
        },
        ArgKind::IntOrIntList => match v {
            ArgValue::Int(_) => Ok(()),
            ArgValue::List(items) if items.iter().all(|x| matches!(x, ArgValue::Int(_))) => Ok(()),
            _ => Err(expected("an integer or a list of integers")),
        },
        ArgKind::IntOrStr => match v {
            ArgValue::Int(_) | ArgValue::Str(_) => Ok(()),
            _ => Err(expected("an integer or a string")),
        },
    }
}

fn check_choice(choices: &[&str], v: &ArgValue, bool_ok: bool) -> Result<(), Problem> {
    let list = choices
        .iter()
        .map(|c| format!("\"{c}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let what = if bool_ok {
        format!("true, false or one of {list}")
    } else {
        format!("one of {list}")
    };
    match v {
        ArgValue::Bool(_) if bool_ok => Ok(()),
        ArgValue::Str(s) if choices.iter().any(|c| c.eq_ignore_ascii_case(s)) => Ok(()),
        ArgValue::Str(s) => {
            let mut p = Problem::new(format!("\"{s}\" is not {what}"));
            if let Some(c) = crate::suggest::closest(s, choices.iter().copied()) {
                p = p.help(format!("did you mean \"{c}\"?"));
            }
            Err(p)
        }
        _ => Err(Problem::new(format!(
            "expected {what}, found {} ({v})",
            v.type_name()
        ))),
    }
}

/// `model`: weights (`.pt`) or an architecture YAML.
pub fn check_model(s: &str) -> Result<(), Problem> {
    check_no_control(s)?;
    if let Some(r) = s.strip_prefix(crate::names::model::PREFIX) {
        return crate::names::model::ModelRef::parse(r).map(|_| ()).map_err(|e| {
            Problem::new(e).help(
                "write \"registry:NAME\", \"registry:NAME@3\" or \"registry:NAME@production\" (`yolo-sched models list` shows the names)"
                    .to_string(),
            )
        });
    }
    let lower = s.to_ascii_lowercase();
    if lower.ends_with(".pt") || lower.ends_with(".yaml") || lower.ends_with(".yml") {
        return Ok(());
    }
    let expected =
        "expected PyTorch weights (.pt, e.g. \"yolov8s.pt\") or a model YAML (.yaml, from scratch)";
    let stem = std::path::Path::new(s)
        .file_stem()
        .and_then(|x| x.to_str())
        .unwrap_or(s);
    let ext = std::path::Path::new(s).extension().and_then(|x| x.to_str());
    Err(match ext {
        None => Problem::new(format!("\"{s}\" has no file extension; {expected}")).help(format!(
            "write \"{s}.pt\" (pretrained) or \"{s}.yaml\" (from scratch)"
        )),
        Some(e) => Problem::new(format!("\"{s}\" is a .{e} file; `yolo train` {expected}")).help(
            format!("train from \"{stem}.pt\"; exported formats cannot be trained"),
        ),
    })
}

/// `data`: an Ultralytics dataset YAML.
pub fn check_data(s: &str) -> Result<(), Problem> {
    check_no_control(s)?;
    let lower = s.to_ascii_lowercase();
    if lower.ends_with(".yaml") || lower.ends_with(".yml") {
        return Ok(());
    }
    Err(Problem::new(format!(
        "\"{s}\" is not a .yaml file; expected an Ultralytics dataset YAML (with path, train, val, names)"
    ))
    .help("yolo-sched checks and caches datasets described by a YAML file; classification folders are not supported yet"))
}

/// `imgsz`: a positive multiple of 32.
pub fn check_imgsz(v: &ArgValue) -> Result<u32, Problem> {
    let n = match v {
        ArgValue::Int(n) => *n,
        ArgValue::List(_) => {
            return Err(Problem::new(
                "is a list; training takes one square size (an integer multiple of 32)",
            ))
        }
        _ => {
            check_kind(ArgKind::Int { min: 32 }, v)?;
            unreachable_kind()?
        }
    };
    let stride = i64::from(IMGSZ_STRIDE);
    if n < stride {
        return Err(Problem::new(format!(
            "{n} is too small; expected a multiple of {stride} of at least {stride}"
        ))
        .help(format!("use {stride}")));
    }
    if n % stride != 0 {
        let down = n / stride * stride;
        return Err(Problem::new(format!(
            "{n} is not a multiple of {stride} (YOLO models downsample by {stride}; Ultralytics would silently round it)"
        ))
        .help(format!("use {down} or {}", down + stride)));
    }
    if n > i64::from(MAX_IMGSZ) {
        return Err(Problem::new(format!(
            "{n} is larger than {MAX_IMGSZ}, the largest image size yolo-sched plans for"
        )));
    }
    u32::try_from(n).map_err(|_| Problem::new(format!("{n} is larger than {MAX_IMGSZ}")))
}

/// The largest `imgsz` accepted: beyond it the memory estimate means nothing.
pub const MAX_IMGSZ: u32 = 8192;

/// `batch`: ≥ 1 images, or -1 / a fraction in (0, 1) for AutoBatch.
pub fn check_batch(v: &ArgValue) -> Result<Batch, Problem> {
    let expected = "expected a batch size ≥ 1, -1 (AutoBatch) or a fraction between 0 and 1 (AutoBatch at that share of GPU memory)";
    match v {
        ArgValue::Int(-1) => Ok(Batch::AutoDefault),
        ArgValue::Int(n) if *n >= 1 => u32::try_from(*n)
            .map(Batch::Images)
            .map_err(|_| Problem::new(format!("{n} is too large"))),
        ArgValue::Int(n) => Err(Problem::new(format!("{n} is not a batch size; {expected}"))),
        ArgValue::Float(f) if *f > 0.0 && *f < 1.0 => Ok(Batch::AutoFraction(*f)),
        ArgValue::Float(f) if f.fract() == 0.0 && *f >= 1.0 => {
            Err(Problem::new(format!("{v} is a float; {expected}"))
                .help(format!("write {}", *f as i64)))
        }
        ArgValue::Float(_) => Err(Problem::new(format!("{v} is not a batch size; {expected}"))),
        other => Err(Problem::new(format!(
            "{expected}, found {} ({other})",
            other.type_name()
        ))),
    }
}

/// `epochs` ≥ 1 and `workers` ≥ 0, as u32.
pub fn check_count(key: &str, v: &ArgValue) -> Result<u32, Problem> {
    let min = if key == "workers" { 0 } else { 1 };
    check_kind(ArgKind::Int { min }, v)?;
    match v {
        ArgValue::Int(n) => {
            u32::try_from(*n).map_err(|_| Problem::new(format!("{n} is too large")))
        }
        _ => unreachable_kind(),
    }
}

/// A value that passed `check_kind` for an integer kind is an integer; this keeps
/// the impossible branch an error rather than a panic.
fn unreachable_kind<T>() -> Result<T, Problem> {
    Err(Problem::new("expected an integer"))
}

/// Check the value of one of `TRAIN_KEYS` (also when swept).
pub fn check_train_value(key: &str, v: &ArgValue) -> Result<(), Problem> {
    match key {
        "model" | "data" => match v {
            ArgValue::Str(s) if key == "model" => check_model(s),
            ArgValue::Str(s) => check_data(s),
            _ => Err(Problem::new(format!(
                "expected a string, found {} ({v})",
                v.type_name()
            ))),
        },
        "imgsz" => check_imgsz(v).map(drop),
        "batch" => check_batch(v).map(drop),
        _ => check_count(key, v).map(drop),
    }
}

/// Check a `yolo` argument given in `args` of `stage` or swept: known, not
/// controlled, value of the right type. `in_sweep` adjusts the advice.
pub fn check_arg(stage: StageKind, key: &str, v: &ArgValue, in_sweep: bool) -> Result<(), Problem> {
    if let Some(reason) = controlled_reason(stage, key) {
        return Err(Problem::new(format!(
            "`{key}` is set by yolo-sched and cannot be {}: {reason}",
            if in_sweep { "swept" } else { "given here" }
        )));
    }
    if stage == StageKind::Train && TRAIN_KEYS.contains(&key) {
        if !in_sweep {
            return Err(Problem::new(format!(
                "`{key}` has its own key: yolo-sched reads it to plan the job"
            ))
            .help(format!("set `train.{key}` instead")));
        }
        if key == "data" {
            return Err(Problem::new(
                "the dataset cannot be swept: the prepare stage checks (and caches) one dataset per run",
            )
            .help("submit one run per dataset, e.g. one spec each"));
        }
        return check_train_value(key, v);
    }
    let Some(arg) = ultralytics::find(key) else {
        return Err(unknown_arg(key, stage));
    };
    check_kind(arg.kind, v)?;
    if stage == StageKind::Train && key == "save" && *v == ArgValue::Bool(false) {
        return Err(Problem::new(
            "save = false stops Ultralytics from writing weights/last.pt and best.pt, which yolo-sched needs to resume a requeued job and to run val and export",
        )
        .help("remove it"));
    }
    Ok(())
}

/// The error for an argument `yolo` does not know.
pub fn unknown_arg(key: &str, stage: StageKind) -> Problem {
    let verb = match stage {
        StageKind::Val => "val",
        StageKind::Export => "export",
        _ => "train",
    };
    let mut p = Problem::new(format!(
        "`{key}` is not a `yolo {verb}` argument (Ultralytics would stop with \"'{key}' is not a valid YOLO argument\")"
    ));
    if let Some(c) = crate::suggest::closest(key, ultralytics::names()) {
        p = p.help(format!("did you mean `{c}`?"));
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_checked_by_kind() {
        assert!(check_kind(ArgKind::Bool, &ArgValue::Bool(true)).is_ok());
        let p = check_kind(ArgKind::Bool, &ArgValue::Str("true".into())).unwrap_err();
        assert_eq!(p.help.as_deref(), Some("write true without quotes"));
        assert!(check_kind(ArgKind::Fraction, &ArgValue::Float(0.5)).is_ok());
        assert!(check_kind(ArgKind::Fraction, &ArgValue::Int(1)).is_ok());
        assert!(check_kind(ArgKind::Fraction, &ArgValue::Float(1.5)).is_err());
        assert!(check_kind(
            ArgKind::Fraction,
            &ArgValue::List(vec![ArgValue::Float(0.1), ArgValue::Float(0.2)])
        )
        .is_ok());
        assert!(check_kind(ArgKind::DataFraction, &ArgValue::Float(0.0)).is_err());
        assert!(check_kind(ArgKind::Int { min: 0 }, &ArgValue::Int(-1)).is_err());
        assert_eq!(
            check_kind(ArgKind::Int { min: 0 }, &ArgValue::Float(3.0))
                .unwrap_err()
                .help
                .as_deref(),
            Some("write 3")
        );
        let choice = ArgKind::Choice(&["SGD", "AdamW", "auto"]);
        assert!(check_kind(choice, &ArgValue::Str("adamw".into())).is_ok());
        assert_eq!(
            check_kind(choice, &ArgValue::Str("AdamX".into()))
                .unwrap_err()
                .help
                .as_deref(),
            Some("did you mean \"AdamW\"?")
        );
        assert!(check_kind(
            ArgKind::IntOrIntList,
            &ArgValue::List(vec![ArgValue::Int(1)])
        )
        .is_ok());
        assert!(check_kind(ArgKind::IntOrIntList, &ArgValue::Str("1".into())).is_err());
    }

    #[test]
    fn imgsz_and_batch_rules() {
        assert_eq!(check_imgsz(&ArgValue::Int(640)), Ok(640));
        let p = check_imgsz(&ArgValue::Int(650)).unwrap_err();
        assert_eq!(p.help.as_deref(), Some("use 640 or 672"));
        assert!(check_imgsz(&ArgValue::Int(0)).is_err());
        assert!(check_imgsz(&ArgValue::Str("640".into())).is_err());
        assert_eq!(check_batch(&ArgValue::Int(16)), Ok(Batch::Images(16)));
        assert_eq!(check_batch(&ArgValue::Int(-1)), Ok(Batch::AutoDefault));
        assert_eq!(
            check_batch(&ArgValue::Float(0.7)),
            Ok(Batch::AutoFraction(0.7))
        );
        for bad in [
            ArgValue::Int(0),
            ArgValue::Int(-2),
            ArgValue::Float(1.5),
            ArgValue::Float(1.0),
        ] {
            assert!(check_batch(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn controlled_and_unknown_arguments() {
        let e = check_arg(StageKind::Train, "device", &ArgValue::Int(0), false).unwrap_err();
        assert!(e.message.contains("device=0"), "{e:?}");
        let e = check_arg(StageKind::Train, "epochs", &ArgValue::Int(3), false).unwrap_err();
        assert_eq!(e.help.as_deref(), Some("set `train.epochs` instead"));
        assert!(check_arg(StageKind::Train, "epochs", &ArgValue::Int(3), true).is_ok());
        assert!(check_arg(
            StageKind::Train,
            "data",
            &ArgValue::Str("a.yaml".into()),
            true
        )
        .is_err());
        let e = check_arg(StageKind::Train, "lr", &ArgValue::Float(0.1), false).unwrap_err();
        assert_eq!(e.help.as_deref(), Some("did you mean `lr0`?"));
        assert!(check_arg(StageKind::Train, "save", &ArgValue::Bool(false), false).is_err());
        assert!(check_arg(StageKind::Train, "cos_lr", &ArgValue::Bool(true), false).is_ok());
        assert!(check_arg(
            StageKind::Export,
            "format",
            &ArgValue::Str("onnx".into()),
            false
        )
        .is_err());
        assert!(check_arg(StageKind::Export, "half", &ArgValue::Bool(true), false).is_ok());
    }

    #[test]
    fn model_and_data_names() {
        assert!(check_model("yolov8s.pt").is_ok());
        assert!(check_model("cfg/yolov8s-p2.yaml").is_ok());
        assert_eq!(
            check_model("yolov8s").unwrap_err().help.as_deref(),
            Some("write \"yolov8s.pt\" (pretrained) or \"yolov8s.yaml\" (from scratch)")
        );
        assert!(check_model("best.onnx").is_err());
        assert!(check_data("data/pcb.yaml").is_ok());
        assert!(check_data("data/pcb").is_err());
    }
}
