//! `[run]` and `[train]`, and the `args` table of a stage.

use std::collections::BTreeMap;
use std::ops::Range;

use toml::de::{DeTable, DeValue};

use super::cx::{join, Cx, Val};
use super::keys::{RUN_KEYS, TRAIN_TABLE_KEYS};
use crate::spec::args::{self, TRAIN_KEYS};
use crate::spec::types::*;
use crate::spec::ultralytics;
use crate::spec::values;

pub(super) fn read_run(cx: &mut Cx<'_>, t: &DeTable<'_>, header: Range<usize>) -> Option<Run> {
    let f = cx.fields("run", t, RUN_KEYS);
    let name = match f.get("name") {
        Some(v) => {
            cx.str_of("run.name", v, "a string")
                .and_then(|s| match values::check_run_name(s) {
                    Ok(()) => Some(s.to_string()),
                    Err(p) => {
                        cx.problem(v.span(), "run.name", p);
                        None
                    }
                })
        }
        None => {
            cx.error(
                header,
                "run.name",
                "missing key `name` in [run]; expected a run name (letters, digits, '.', '_', '-')"
                    .into(),
                Some("add e.g. name = \"pcb-defects\"".into()),
            );
            None
        }
    };
    let workdir = match f.get("workdir") {
        Some(v) => cx.str_of("run.workdir", v, "a path").and_then(|s| {
            match values::parse_path_template(s) {
                Ok(t) => Some(t),
                Err(p) => {
                    cx.problem(v.span(), "run.workdir", p);
                    None
                }
            }
        }),
        None => name
            .as_ref()
            .map(|n| PathTemplate::literal(&format!("runs/{n}"))),
    };
    let account = slurm_name(cx, &f, "run", "account", false);
    let qos = slurm_name(cx, &f, "run", "qos", false);
    let partition = slurm_name(cx, &f, "run", "partition", true);
    let setup = match f.get("setup") {
        Some(v) => cx.strings_of(
            "run.setup",
            v,
            "a list of shell lines",
            values::check_setup_line,
        ),
        None => Some(Vec::new()),
    };
    Some(Run {
        name: name?,
        workdir: workdir?,
        account: account.ok()?,
        qos: qos.ok()?,
        partition: partition.ok()?,
        setup: setup?,
    })
}

/// An optional Slurm name (account, qos, partition). `Err` = present but invalid.
pub(super) fn slurm_name(
    cx: &mut Cx<'_>,
    f: &BTreeMap<String, &Val<'_>>,
    table: &str,
    key: &str,
    allow_list: bool,
) -> Result<Option<String>, ()> {
    let Some(v) = f.get(key) else {
        return Ok(None);
    };
    let path = join(table, key);
    let s = cx.str_of(&path, v, "a string").ok_or(())?;
    match values::check_slurm_name(s, allow_list) {
        Ok(()) => Ok(Some(s.to_string())),
        Err(p) => {
            cx.problem(v.span(), &path, p);
            Err(())
        }
    }
}

pub(super) fn read_train(cx: &mut Cx<'_>, t: &DeTable<'_>, header: Range<usize>) -> Option<Train> {
    let f = cx.fields("train", t, TRAIN_TABLE_KEYS);
    let mut ok = true;
    let mut arg_of = |cx: &mut Cx<'_>, key: &str| -> Option<ArgValue> {
        let v = f.get(key)?;
        let path = format!("train.{key}");
        let value = match args::to_arg_value(v.get_ref()) {
            Ok(a) => a,
            Err(p) => {
                cx.problem(v.span(), &path, p);
                ok = false;
                return None;
            }
        };
        if let Err(p) = args::check_train_value(key, &value) {
            cx.problem(v.span(), &path, p);
            ok = false;
            return None;
        }
        Some(value)
    };
    let model = arg_of(cx, "model");
    let data = arg_of(cx, "data");
    let epochs = arg_of(cx, "epochs");
    let imgsz = arg_of(cx, "imgsz");
    let batch = arg_of(cx, "batch");
    let workers = arg_of(cx, "workers");
    // A missing `model` is the site's `[defaults] model` (`spec::apply_default_model`).
    for (key, example) in [("data", "\"datasets/pcb.yaml\"")] {
        if !f.contains_key(key) {
            cx.error(
                header.clone(),
                &format!("train.{key}"),
                format!("missing key `{key}` in [train]"),
                Some(format!("add e.g. {key} = {example}")),
            );
            ok = false;
        }
    }
    let args = match f.get("args") {
        Some(v) => read_args(cx, "train.args", StageKind::Train, v),
        None => Some(BTreeMap::new()),
    };
    let text = |v: Option<ArgValue>| match v {
        Some(ArgValue::Str(s)) => Some(s),
        _ => None,
    };
    let count = |key: &str, v: Option<ArgValue>| v.and_then(|v| args::check_count(key, &v).ok());
    let train = Train {
        model: text(model).unwrap_or_default(),
        data: text(data).unwrap_or_default(),
        epochs: count("epochs", epochs),
        imgsz: imgsz.and_then(|v| args::check_imgsz(&v).ok()),
        batch: batch.and_then(|v| args::check_batch(&v).ok()),
        workers: count("workers", workers),
        args: args?,
    };
    ok.then_some(train)
}

/// `args = { … }` of a stage: every key a known, allowed `yolo` argument.
pub(super) fn read_args(
    cx: &mut Cx<'_>,
    path: &str,
    stage: StageKind,
    v: &Val<'_>,
) -> Option<BTreeMap<String, ArgValue>> {
    let DeValue::Table(t) = v.get_ref() else {
        cx.wrong_type(
            path,
            v,
            "a table of `yolo` arguments",
            Some("write e.g. args = { lr0 = 0.01, cos_lr = true }".into()),
        );
        return None;
    };
    let mut out = BTreeMap::new();
    let mut ok = true;
    for (k, val) in t.iter() {
        let key = k.get_ref().as_ref();
        let key_path = format!("{path}.{key}");
        cx.locations.insert(key_path.clone(), cx.at(&val.span()));
        if !ok_arg_name(key) {
            cx.error(
                k.span(),
                &key_path,
                format!("`{key}` is not a `yolo` argument name"),
                None,
            );
            ok = false;
            continue;
        }
        // Unknown names point at the key; bad values at the value.
        if ultralytics::find(key).is_none() && args::controlled_reason(stage, key).is_none() {
            cx.problem(k.span(), &key_path, args::unknown_arg(key, stage));
            ok = false;
            continue;
        }
        let value = match args::to_arg_value(val.get_ref()) {
            Ok(a) => a,
            Err(p) => {
                cx.problem(val.span(), &key_path, p);
                ok = false;
                continue;
            }
        };
        match args::check_arg(stage, key, &value, false) {
            Ok(()) => {
                if let Some(instead) = ultralytics::find(key).and_then(|a| a.deprecated) {
                    cx.warn_at(
                        &key_path,
                        format!("`{key}` is deprecated in Ultralytics 8.4: {instead}"),
                        None,
                    );
                }
                out.insert(key.to_string(), value);
            }
            Err(p) => {
                let span =
                    if args::controlled_reason(stage, key).is_some() || TRAIN_KEYS.contains(&key) {
                        k.span()
                    } else {
                        val.span()
                    };
                cx.problem(span, &key_path, p);
                ok = false;
            }
        }
    }
    ok.then_some(out)
}

/// Argument names become `key=value` words: keep them to Python identifiers.
pub(super) fn ok_arg_name(key: &str) -> bool {
    key.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}
