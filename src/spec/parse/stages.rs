//! `[stages]`: prepare, val and export, each on, off or a table, and export formats.

use std::collections::{BTreeMap, BTreeSet};

use toml::de::{DeTable, DeValue};

use super::cx::{Cx, Val};
use super::keys::{DEFAULT_EXPORT_FORMATS, EXPORT_KEYS, PREPARE_KEYS, STAGE_NAMES, VAL_KEYS};
use super::resources::{read_gpu, stage_resources};
use super::tables::read_args;
use crate::spec::types::*;
use crate::spec::ultralytics;
use crate::spec::values::{self, Problem};
use crate::suggest;

pub(super) fn default_stages() -> Stages {
    Stages {
        prepare: Some(PrepareStage::default()),
        val: None,
        export: Some(default_export()),
    }
}

fn default_export() -> ExportStage {
    ExportStage {
        resources: StageResources::default(),
        formats: DEFAULT_EXPORT_FORMATS
            .iter()
            .map(|s| s.to_string())
            .collect(),
        args: BTreeMap::new(),
        validate: true,
    }
}

/// What a `[stages.X]` entry says before its own keys are read.
enum StageSwitch<'a, 'i> {
    Off,
    /// `X = true`: on with defaults.
    Defaults,
    Table(&'a DeTable<'i>),
    Invalid,
}

fn stage_switch<'a, 'i>(cx: &mut Cx<'_>, name: &str, v: &'a Val<'i>) -> StageSwitch<'a, 'i> {
    let path = format!("stages.{name}");
    match v.get_ref() {
        DeValue::Boolean(true) => StageSwitch::Defaults,
        DeValue::Boolean(false) => StageSwitch::Off,
        DeValue::Table(t) => {
            if let Some((k, e)) = t.iter().find(|(k, _)| k.get_ref().as_ref() == "enabled") {
                let key_path = format!("{path}.enabled");
                match cx.bool_of(&key_path, e) {
                    Some(false) => {
                        if t.len() > 1 {
                            cx.warn(
                                k.span(),
                                &key_path,
                                format!("the {name} stage is off: its other settings are ignored"),
                                None,
                            );
                        }
                        cx.fields(&path, t, stage_keys(name));
                        return StageSwitch::Off;
                    }
                    Some(true) => {}
                    None => return StageSwitch::Invalid,
                }
            }
            StageSwitch::Table(t)
        }
        _ => {
            cx.wrong_type(
                &path,
                v,
                "a table ([stages.NAME]) or true/false",
                Some(format!(
                    "write [stages.{name}] with its settings, or {name} = false in [stages]"
                )),
            );
            StageSwitch::Invalid
        }
    }
}

fn stage_keys(name: &str) -> &'static [&'static str] {
    match name {
        "prepare" => PREPARE_KEYS,
        "val" => VAL_KEYS,
        _ => EXPORT_KEYS,
    }
}

pub(super) fn read_stages(cx: &mut Cx<'_>, t: &DeTable<'_>) -> Option<Stages> {
    let f = cx.fields("stages", t, STAGE_NAMES);
    let mut ok = true;
    let mut stages = default_stages();

    if let Some(v) = f.get("prepare") {
        stages.prepare = match stage_switch(cx, "prepare", v) {
            StageSwitch::Off => None,
            StageSwitch::Defaults => Some(PrepareStage::default()),
            StageSwitch::Invalid => {
                ok = false;
                None
            }
            StageSwitch::Table(t) => {
                let f = cx.fields("stages.prepare", t, PREPARE_KEYS);
                let resources = stage_resources(cx, &f, "stages.prepare");
                let cache = match f.get("cache") {
                    Some(v) => cx
                        .str_of("stages.prepare.cache", v, "a directory path")
                        .and_then(|s| match values::parse_path_template(s) {
                            Ok(t) => Some(Some(t)),
                            Err(p) => {
                                cx.problem(v.span(), "stages.prepare.cache", p);
                                None
                            }
                        }),
                    None => Some(None),
                };
                match (resources, cache) {
                    (Some(resources), Some(cache)) => Some(PrepareStage { resources, cache }),
                    _ => {
                        ok = false;
                        None
                    }
                }
            }
        };
    }

    if let Some(v) = f.get("val") {
        stages.val = match stage_switch(cx, "val", v) {
            StageSwitch::Off => None,
            StageSwitch::Defaults => Some(ValStage::default()),
            StageSwitch::Invalid => {
                ok = false;
                None
            }
            StageSwitch::Table(t) => {
                let f = cx.fields("stages.val", t, VAL_KEYS);
                let resources = stage_resources(cx, &f, "stages.val");
                let gpu = match f.get("gpu") {
                    Some(v) => read_gpu(cx, "stages.val.gpu", v).map(Some),
                    None => Some(None),
                };
                let args = match f.get("args") {
                    Some(v) => read_args(cx, "stages.val.args", StageKind::Val, v),
                    None => Some(BTreeMap::new()),
                };
                match (resources, gpu, args) {
                    (Some(resources), Some(gpu), Some(args)) => Some(ValStage {
                        resources,
                        gpu,
                        args,
                    }),
                    _ => {
                        ok = false;
                        None
                    }
                }
            }
        };
    }

    if let Some(v) = f.get("export") {
        stages.export = match stage_switch(cx, "export", v) {
            StageSwitch::Off => None,
            StageSwitch::Defaults => Some(default_export()),
            StageSwitch::Invalid => {
                ok = false;
                None
            }
            StageSwitch::Table(t) => {
                let f = cx.fields("stages.export", t, EXPORT_KEYS);
                let resources = stage_resources(cx, &f, "stages.export");
                let formats = match f.get("formats") {
                    Some(v) => read_formats(cx, v),
                    None => Some(default_export().formats),
                };
                let args = match f.get("args") {
                    Some(v) => read_args(cx, "stages.export.args", StageKind::Export, v),
                    None => Some(BTreeMap::new()),
                };
                let validate = match f.get("validate") {
                    Some(v) => cx.bool_of("stages.export.validate", v),
                    None => Some(true),
                };
                match (resources, formats, args, validate) {
                    (Some(resources), Some(formats), Some(args), Some(validate)) => {
                        Some(ExportStage {
                            resources,
                            formats,
                            args,
                            validate,
                        })
                    }
                    _ => {
                        ok = false;
                        None
                    }
                }
            }
        };
    }
    ok.then_some(stages)
}

fn read_formats(cx: &mut Cx<'_>, v: &Val<'_>) -> Option<Vec<String>> {
    let path = "stages.export.formats";
    let formats = cx.strings_of(
        path,
        v,
        "a list of export formats, e.g. [\"onnx\"]",
        check_format,
    )?;
    if formats.is_empty() {
        cx.error(
            v.span(),
            path,
            "is empty; expected at least one export format".into(),
            Some("to skip exporting, write enabled = false in [stages.export]".into()),
        );
        return None;
    }
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for f in formats {
        let canonical = f.to_ascii_lowercase();
        if !seen.insert(canonical.clone()) {
            cx.error(v.span(), path, format!("\"{f}\" is listed twice"), None);
            return None;
        }
        out.push(canonical);
    }
    Some(out)
}

fn check_format(s: &str) -> Result<(), Problem> {
    let lower = s.to_ascii_lowercase();
    let engine = matches!(lower.as_str(), "engine" | "tensorrt" | "trt");
    if engine {
        return Err(Problem::new(format!(
            "\"{s}\" (TensorRT) builds its engine on a GPU, and the export stage runs on CPU only; a TensorRT engine is also tied to the GPU model it was built on"
        ))
        .help("export \"onnx\" here and build the engine on the machine that will run it"));
    }
    if ultralytics::EXPORT_FORMATS.contains(&lower.as_str()) {
        return Ok(());
    }
    let mut p = Problem::new(format!(
        "\"{s}\" is not an Ultralytics export format; expected one of {}",
        ultralytics::EXPORT_FORMATS.join(", ")
    ));
    if let Some(c) = suggest::closest(&lower, ultralytics::EXPORT_FORMATS.iter().copied()) {
        p = p.help(format!("did you mean \"{c}\"?"));
    }
    Err(p)
}
