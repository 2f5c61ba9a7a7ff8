//! The whole spec: TOML syntax errors, invisible characters, the top-level
//! table and the checks across tables.

use std::collections::BTreeMap;
use std::path::PathBuf;

use toml::de::DeTable;

use super::backup;
use super::cx::{join, Cx};
use super::keys::ROOT_KEYS;
use super::resources::read_resources;
use super::stages::{default_stages, read_stages};
use super::sweep::read_sweep;
use super::tables::{read_run, read_train};
use crate::spec::error::{self, SpecErrors};
use crate::spec::types::*;
use crate::spec::{Spec, Tune};

/// are resolved against `base_dir`.
pub fn parse_spec(text: &str, file: &str, base_dir: PathBuf) -> Result<Spec, SpecErrors> {
    let mut cx = Cx {
        text,
        lines: crate::spec::error::LineIndex::new(text),
        file,
        errors: Vec::new(),
        warnings: Vec::new(),
        locations: BTreeMap::new(),
    };
    invisible_characters(&mut cx);
    let (root, syntax) = DeTable::parse_recoverable(text);
    if !syntax.is_empty() {
        for e in syntax {
            let span = e.span().unwrap_or(0..0);
            let message = e.message().trim_end_matches('.').to_string();
            let (message, help) = if message == "duplicate key" {
                let key = cx.snippet(&span);
                (
                    format!("invalid TOML: duplicate key `{key}`"),
                    Some(format!(
                        "each key may appear once in a table; remove one `{key}`"
                    )),
                )
            } else {
                (format!("invalid TOML: {message}"), None)
            };
            cx.error(span, "", message, help);
        }
        return Err(SpecErrors::new(file, cx.errors));
    }
    let root = root.get_ref();
    let spec = read_root(&mut cx, root);
    if !cx.errors.is_empty() {
        return Err(SpecErrors::new(file, cx.errors));
    }
    let mut spec = spec.ok_or_else(|| SpecErrors::new(file, cx.errors.clone()))?;
    error::sort(&mut cx.warnings);
    spec.origin = Origin {
        file: file.to_string(),
        base_dir,
        locations: cx.locations,
        warnings: cx.warnings,
    };
    Ok(spec)
}

/// Characters that print as nothing (zero-width joiner, BOM inside the text,
/// bidirectional controls) make two names look the same, or a value look
/// like another: each is an error at its position, shown escaped.
fn invisible_characters(cx: &mut Cx<'_>) {
    // A byte-order mark that opens the file is an encoding detail, not content.
    let body = cx.text.strip_prefix('\u{feff}').unwrap_or(cx.text);
    let skip = cx.text.len() - body.len();
    let found: Vec<(usize, char)> = body
        .char_indices()
        .filter(|(_, c)| crate::text::is_invisible(*c))
        .take(crate::spec::error::SHOWN_ERRORS)
        .collect();
    for (i, c) in found {
        let at = skip + i;
        cx.error(
            at..at + c.len_utf8(),
            "",
            format!(
                "invisible character U+{:04X} in the text; it would make this value look like another",
                c as u32
            ),
            Some("delete it (editors often show it only with \"show invisibles\")".into()),
        );
    }
}

fn read_root(cx: &mut Cx<'_>, root: &DeTable<'_>) -> Option<Spec> {
    let top = 0..0;
    // The version decides how to read the rest, so it is checked first.
    match root.get("version") {
        None => cx.error(
            top.clone(),
            "version",
            "missing `version`; expected `version = 1` (the spec format version)".into(),
            Some("add `version = 1` as the first line".into()),
        ),
        Some(v) => {
            let n = cx.int_of("version", v, "the integer 1");
            if let Some(n) = n {
                if n != SPEC_VERSION {
                    cx.error(
                        v.span(),
                        "version",
                        format!(
                            "spec format version {n} is not supported; this yolo-sched reads version {SPEC_VERSION}"
                        ),
                        Some(if n > SPEC_VERSION {
                            "upgrade yolo-sched, or rewrite the spec in format 1 (docs/spec.md)".into()
                        } else {
                            "write `version = 1` and follow docs/spec.md".into()
                        }),
                    );
                    // The rest is in a format we do not know: more errors would only confuse.
                    return None;
                }
            }
        }
    }
    let f = cx.fields("", root, ROOT_KEYS);

    let run_table = match f.get("run") {
        Some(v) => cx.table_of("run", v).map(|t| (t, v.span())),
        None => {
            cx.error(
                top.clone(),
                "run",
                "missing table [run]; expected at least `name`".into(),
                Some("add:\n      [run]\n      name = \"my-run\"".into()),
            );
            None
        }
    };
    let run = run_table.and_then(|(t, span)| read_run(cx, t, span));

    let train = match f.get("train") {
        Some(v) => cx
            .table_of("train", v)
            .and_then(|t| read_train(cx, t, v.span())),
        None => {
            cx.error(
                top.clone(),
                "train",
                "missing table [train]; expected at least `model` and `data`".into(),
                Some(
                    "add:\n      [train]\n      model = \"yolov8n.pt\"\n      data = \"data.yaml\""
                        .into(),
                ),
            );
            None
        }
    };

    let resources = match f.get("resources") {
        Some(v) => cx
            .table_of("resources", v)
            .and_then(|t| read_resources(cx, t)),
        None => Some(Resources {
            gpu: GpuRequest::Auto,
            gpus: None,
            time: None,
            cpus: None,
            mem: None,
            on_oom: OnOom::Stop,
        }),
    };

    let stages = match f.get("stages") {
        Some(v) => cx.table_of("stages", v).and_then(|t| read_stages(cx, t)),
        None => Some(default_stages()),
    };

    let sweep = match f.get("sweep") {
        Some(v) => cx
            .table_of("sweep", v)
            .and_then(|t| read_sweep(cx, t, v.span())),
        None => Some(Sweep::default()),
    };

    // `[guard]` is read by its own file (`spec::guard`); this is its one hook.
    let guard = match f.get("guard") {
        Some(v) => cx.table_of("guard", v).map(|t| {
            let mut issues = Vec::new();
            let g = crate::spec::guard::read(t, &mut issues);
            for (k, v) in t.iter() {
                let path = join("guard", k.get_ref().as_ref());
                let at = cx.at(&v.span());
                cx.locations.insert(path, at);
            }
            for i in issues {
                cx.error(i.span, &i.key, i.message, i.help);
            }
            g
        }),
        None => Some(crate::spec::guard::GuardSpec::default()),
    };
    let backup = match f.get("backup") {
        Some(v) => cx
            .table_of("backup", v)
            .and_then(|t| backup::read_backup(cx, t)),
        None => Some(backup::SpecBackup::default()),
    };

    let tune = match f.get("tune") {
        Some(v) => cx
            .table_of("tune", v)
            .map(|t| super::tune::read_tune(cx, t)),
        None => Some(None),
    };

    let spec = Spec {
        version: SPEC_VERSION,
        run: run?,
        train: train?,
        resources: resources?,
        stages: stages?,
        sweep: sweep?,
        guard: guard?,
        backup: backup?,
        tune: tune?,
        origin: Origin::default(),
    };
    check_whole(cx, &spec);
    Some(spec)
}
/// Checks across tables, once every part parsed.
fn check_whole(cx: &mut Cx<'_>, spec: &Spec) {
    if let Some(tune) = &spec.tune {
        check_tune(cx, spec, tune);
    }
    if let (Some(cpus), Some(workers)) = (spec.resources.cpus, spec.explicit_workers()) {
        let needed = workers.saturating_add(1);
        if cpus < needed {
            cx.warn_at(
                "resources.cpus",
                format!(
                    "{cpus} CPUs for {} dataloader workers + the training process: the workers will compete for CPUs and slow training",
                    needed - 1
                ),
                Some(format!(
                    "ask for cpus = {needed}, or set train.workers = {}",
                    cpus.saturating_sub(1)
                )),
            );
        }
    }
    if spec.resources.gpu == GpuRequest::None {
        cx.warn_at(
            "resources.gpu",
            "training runs on CPU only; this is very slow for anything but tests".into(),
            None,
        );
    }
}

/// `[tune]` against the rest: no `[sweep]` beside it, no hyperparameter both
/// fixed and searched.
fn check_tune(cx: &mut Cx<'_>, spec: &Spec, tune: &Tune) {
    if !spec.sweep.axes.is_empty() || spec.sweep.max_parallel.is_some() {
        let at = cx.locations.get("tune").copied();
        let loc = at.unwrap_or(crate::spec::Location { line: 1, column: 1 });
        cx.errors.push(crate::spec::SpecError {
            file: cx.file.to_string(),
            line: loc.line,
            column: loc.column,
            key: "tune".into(),
            message: "[tune] and [sweep] cannot be used together: a search chooses its own trials"
                .into(),
            help: Some(
                "remove [sweep] (put a swept value in [tune.space] as choices), or submit two specs"
                    .into(),
            ),
        });
    }
    if tune.publish.is_some() && spec.stages.export.is_none() {
        let loc = cx
            .locations
            .get("tune.publish")
            .copied()
            .unwrap_or(crate::spec::Location { line: 1, column: 1 });
        cx.errors.push(crate::spec::SpecError {
            file: cx.file.to_string(),
            line: loc.line,
            column: loc.column,
            key: "tune.publish".into(),
            message: "publish runs in the search's export job, and [stages.export] is off".into(),
            help: Some("remove `enabled = false` from [stages.export], or remove publish".into()),
        });
    }
    if let Some(e) = &tune.early_stop {
        let epochs = tune.epochs.or(spec.train.epochs);
        if let Some(n) = epochs.filter(|n| e.min_epochs >= *n) {
            let loc = cx
                .locations
                .get("tune.early_stop")
                .copied()
                .unwrap_or(crate::spec::Location { line: 1, column: 1 });
            cx.errors.push(crate::spec::SpecError {
                file: cx.file.to_string(),
                line: loc.line,
                column: loc.column,
                key: "tune.early_stop".into(),
                message: format!(
                    "early stopping from epoch {} of trials of {n} epoch(s) stops nothing",
                    e.min_epochs
                ),
                help: Some(format!("set min_epochs below {n}, or remove early_stop")),
            });
        }
        if spec.resources.gpu == crate::spec::GpuRequest::None {
            // The job agent that stops a trial runs only beside a training
            // on a GPU (templates/_agent.sh.j2: a stage with a GRES).
            cx.warn_at(
                "tune.early_stop",
                "no trial of this search can be stopped early: early stopping is done by each \
                 trial's job agent, which runs only beside a training on a GPU, and these \
                 trials train without one (`[resources] gpu = \"none\"`); every trial runs all its epochs"
                    .into(),
                Some("train the trials on a GPU or slice (`gpu = \"auto\"`), or remove early_stop".into()),
            );
        }
    }
    for p in &tune.space {
        if spec.train.args.contains_key(&p.name) {
            cx.warn_at(
                &format!("tune.space.{}", p.name),
                format!(
                    "`{}` is also set in [train.args]; each trial uses the value the search proposes",
                    p.name
                ),
                Some(format!("remove `{}` from [train.args]", p.name)),
            );
        }
    }
}
