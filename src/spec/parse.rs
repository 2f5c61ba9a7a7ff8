//! Reading a spec: TOML with positions → `Spec`, collecting every error on the way.
//!
//! The TOML is parsed into `toml::de::DeTable`, which keeps the byte span of every
//! key and value, and walked by hand so that each problem can name its line,
//! column and key path, and so that all problems are reported at once.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::path::PathBuf;

use toml::de::{DeArray, DeTable, DeValue};
use toml::Spanned;

use super::args::{self, TRAIN_KEYS};
use super::error::{self, Location, SpecError, SpecErrors};
use super::types::*;
use super::ultralytics;
use super::values::{self, Problem};
use crate::suggest;

#[path = "backup.rs"]
pub(crate) mod backup;

type Val<'i> = Spanned<DeValue<'i>>;

/// The most variants a sweep may have: Slurm's largest possible `MaxArraySize`
/// is 4000001 (task ids 0..=4000000). The cluster's real limit is checked by the planner.
pub const MAX_VARIANTS: u64 = 4_000_001;

/// Default export formats when `[stages.export]` gives none: Ultralytics' own default.
pub const DEFAULT_EXPORT_FORMATS: &[&str] = &["torchscript"];

const ROOT_KEYS: &[&str] = &[
    "version",
    "run",
    "train",
    "resources",
    "stages",
    "sweep",
    "guard",
    "backup",
];
const RUN_KEYS: &[&str] = &["name", "workdir", "account", "qos", "partition", "setup"];
const TRAIN_TABLE_KEYS: &[&str] = &[
    "model", "data", "epochs", "imgsz", "batch", "workers", "args",
];
const RESOURCE_KEYS: &[&str] = &["gpu", "time", "cpus", "mem", "on_oom", "on_oom_steps"];
/// The most automatic moves to a bigger slice one training may make.
pub const MAX_OOM_STEPS: i64 = 4;
const STAGE_NAMES: &[&str] = &["prepare", "val", "export"];
const PREPARE_KEYS: &[&str] = &["enabled", "partition", "time", "cpus", "mem", "cache"];
const VAL_KEYS: &[&str] = &["enabled", "partition", "time", "cpus", "mem", "gpu", "args"];
const EXPORT_KEYS: &[&str] = &[
    "enabled",
    "partition",
    "time",
    "cpus",
    "mem",
    "formats",
    "args",
    "validate",
];

/// Where each key of the format lives, for "`time` belongs in [resources]".
const HOMES: &[(&str, &[&str])] = &[
    ("", ROOT_KEYS),
    ("run", RUN_KEYS),
    ("train", TRAIN_TABLE_KEYS),
    ("resources", RESOURCE_KEYS),
    ("stages", STAGE_NAMES),
    ("guard", super::guard::GUARD_KEYS),
    ("backup", backup::BACKUP_KEYS),
];

/// Parse and validate a spec. `file` names it in messages; relative paths in it
/// are resolved against `base_dir`.
pub fn parse_spec(text: &str, file: &str, base_dir: PathBuf) -> Result<Spec, SpecErrors> {
    let mut cx = Cx {
        text,
        lines: super::error::LineIndex::new(text),
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

/// The parsing context: the text (for positions) and what was found.
struct Cx<'t> {
    text: &'t str,
    lines: super::error::LineIndex,
    file: &'t str,
    errors: Vec<SpecError>,
    warnings: Vec<SpecError>,
    locations: BTreeMap<String, Location>,
}

impl Cx<'_> {
    fn at(&self, span: &Range<usize>) -> Location {
        self.lines.locate(self.text, span.start)
    }

    fn make(
        &self,
        span: &Range<usize>,
        key: &str,
        message: String,
        help: Option<String>,
    ) -> SpecError {
        let loc = self.at(span);
        SpecError {
            file: self.file.to_string(),
            line: loc.line,
            column: loc.column,
            key: key.to_string(),
            message,
            help,
        }
    }

    fn error(&mut self, span: Range<usize>, key: &str, message: String, help: Option<String>) {
        let e = self.make(&span, key, message, help);
        self.errors.push(e);
    }

    fn problem(&mut self, span: Range<usize>, key: &str, p: Problem) {
        self.error(span, key, p.message, p.help);
    }

    fn warn(&mut self, span: Range<usize>, key: &str, message: String, help: Option<String>) {
        let e = self.make(&span, key, message, help);
        self.warnings.push(e);
    }

    /// A warning at the recorded position of `key` (for checks after parsing).
    fn warn_at(&mut self, key: &str, message: String, help: Option<String>) {
        let loc = self
            .locations
            .get(key)
            .copied()
            .unwrap_or(Location { line: 1, column: 1 });
        self.warnings.push(SpecError {
            file: self.file.to_string(),
            line: loc.line,
            column: loc.column,
            key: key.to_string(),
            message,
            help,
        });
    }

    /// The value's source text, shortened, for "found …" messages.
    fn snippet(&self, span: &Range<usize>) -> String {
        let s = self.text.get(span.clone()).unwrap_or("");
        let one_line = s.lines().next().unwrap_or("");
        let cut = crate::text::shown(one_line, 40);
        if one_line.len() < s.len() && !cut.ends_with('…') {
            format!("{cut}…")
        } else {
            cut
        }
    }

    fn wrong_type(&mut self, key: &str, v: &Val<'_>, expected: &str, help: Option<String>) {
        let found = type_name(v.get_ref());
        let msg = format!(
            "expected {expected}, found {found} ({})",
            self.snippet(&v.span())
        );
        self.error(v.span(), key, msg, help);
    }

    fn str_of<'v>(&mut self, key: &str, v: &'v Val<'_>, expected: &str) -> Option<&'v str> {
        match v.get_ref() {
            DeValue::String(s) => match values::check_no_control(s) {
                Ok(()) => Some(s.as_ref()),
                Err(p) => {
                    self.problem(v.span(), key, p);
                    None
                }
            },
            _ => {
                self.wrong_type(key, v, expected, None);
                None
            }
        }
    }

    fn int_of(&mut self, key: &str, v: &Val<'_>, expected: &str) -> Option<i64> {
        match v.get_ref() {
            DeValue::Integer(i) => match i64::from_str_radix(i.as_str(), i.radix()) {
                Ok(n) => Some(n),
                Err(_) => {
                    self.error(
                        v.span(),
                        key,
                        format!("is too large; expected {expected}"),
                        None,
                    );
                    None
                }
            },
            DeValue::String(s) if s.trim().parse::<i64>().is_ok() => {
                let help = Some(format!("write {} without quotes", s.trim()));
                self.wrong_type(key, v, expected, help);
                None
            }
            _ => {
                self.wrong_type(key, v, expected, None);
                None
            }
        }
    }

    fn bool_of(&mut self, key: &str, v: &Val<'_>) -> Option<bool> {
        match v.get_ref() {
            DeValue::Boolean(b) => Some(*b),
            _ => {
                self.wrong_type(key, v, "true or false", None);
                None
            }
        }
    }

    fn array_of<'v, 'i>(
        &mut self,
        key: &str,
        v: &'v Val<'i>,
        expected: &str,
        help: Option<String>,
    ) -> Option<&'v DeArray<'i>> {
        match v.get_ref() {
            DeValue::Array(a) => Some(a),
            _ => {
                self.wrong_type(key, v, expected, help);
                None
            }
        }
    }

    /// A list of strings, each checked by `check`.
    fn strings_of(
        &mut self,
        key: &str,
        v: &Val<'_>,
        expected: &str,
        check: impl Fn(&str) -> Result<(), Problem>,
    ) -> Option<Vec<String>> {
        let help = match v.get_ref() {
            DeValue::String(s) => Some(format!("write {key_leaf} = [{s:?}]", key_leaf = leaf(key))),
            _ => None,
        };
        let items = self.array_of(key, v, expected, help)?;
        let mut out = Vec::with_capacity(items.len());
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            let item_key = format!("{key}[{i}]");
            match item.get_ref() {
                DeValue::String(s) => match check(s) {
                    Ok(()) => out.push(s.to_string()),
                    Err(p) => {
                        self.problem(item.span(), &item_key, p);
                        ok = false;
                    }
                },
                _ => {
                    self.wrong_type(&item_key, item, "a string", None);
                    ok = false;
                }
            }
        }
        ok.then_some(out)
    }

    /// The entries of a table, checking that every key is one of `allowed` and
    /// recording each key's position. `table_path` is "" for the top level.
    fn fields<'a, 'i>(
        &mut self,
        table_path: &str,
        table: &'a DeTable<'i>,
        allowed: &[&str],
    ) -> BTreeMap<String, &'a Val<'i>> {
        let mut out = BTreeMap::new();
        for (k, v) in table.iter() {
            let name = k.get_ref().as_ref();
            let path = join(table_path, name);
            self.locations.insert(path.clone(), self.at(&v.span()));
            if allowed.contains(&name) {
                out.insert(name.to_string(), v);
            } else {
                let p = unknown_key(table_path, name, allowed);
                self.problem(k.span(), &path, p);
            }
        }
        out
    }

    /// The value of `key` in `fields` as a table (reports other types).
    fn table_of<'a, 'i>(&mut self, key: &str, v: &'a Val<'i>) -> Option<&'a DeTable<'i>> {
        match v.get_ref() {
            DeValue::Table(t) => Some(t),
            _ => {
                let help = Some(format!("write it as a table: [{key}]"));
                self.wrong_type(key, v, "a table", help);
                None
            }
        }
    }
}

fn join(table: &str, key: &str) -> String {
    if table.is_empty() {
        key.to_string()
    } else {
        format!("{table}.{key}")
    }
}

fn leaf(path: &str) -> &str {
    path.rsplit('.').next().unwrap_or(path)
}

fn type_name(v: &DeValue<'_>) -> &'static str {
    match v {
        DeValue::String(_) => "a string",
        DeValue::Integer(_) => "an integer",
        DeValue::Float(_) => "a float",
        DeValue::Boolean(_) => "a boolean",
        DeValue::Datetime(_) => "a date/time",
        DeValue::Array(_) => "a list",
        DeValue::Table(_) => "a table",
    }
}

/// "unknown key" with what was expected and the best suggestion we have.
fn unknown_key(table_path: &str, key: &str, allowed: &[&str]) -> Problem {
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
            let g = super::guard::read(t, &mut issues);
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
        None => Some(super::guard::GuardSpec::default()),
    };
    let backup = match f.get("backup") {
        Some(v) => cx
            .table_of("backup", v)
            .and_then(|t| backup::read_backup(cx, t)),
        None => Some(backup::SpecBackup::default()),
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
        origin: Origin::default(),
    };
    check_whole(cx, &spec);
    Some(spec)
}

fn read_run(cx: &mut Cx<'_>, t: &DeTable<'_>, header: Range<usize>) -> Option<Run> {
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
fn slurm_name(
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

fn read_train(cx: &mut Cx<'_>, t: &DeTable<'_>, header: Range<usize>) -> Option<Train> {
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
    for (key, example) in [
        ("model", "\"yolov8n.pt\""),
        ("data", "\"datasets/pcb.yaml\""),
    ] {
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
fn read_args(
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
fn ok_arg_name(key: &str) -> bool {
    key.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn read_resources(cx: &mut Cx<'_>, t: &DeTable<'_>) -> Option<Resources> {
    let f = cx.fields("resources", t, RESOURCE_KEYS);
    let gpu = match f.get("gpu") {
        Some(v) => read_gpu(cx, "resources.gpu", v),
        None => Some(GpuRequest::Auto),
    };
    let time = opt_time(cx, &f, "resources");
    let cpus = opt_cpus(cx, &f, "resources");
    let mem = opt_mem(cx, &f, "resources");
    let on_oom = read_on_oom(cx, &f);
    Some(Resources {
        gpu: gpu?,
        time: time.ok()?,
        cpus: cpus.ok()?,
        mem: mem.ok()?,
        on_oom: on_oom?,
    })
}

/// `on_oom = "stop" | "resume-bigger"` and `on_oom_steps = 1..=4` (default 2).
fn read_on_oom(cx: &mut Cx<'_>, f: &BTreeMap<String, &Val<'_>>) -> Option<OnOom> {
    let policy = read_oom_policy(cx, f);
    let steps = read_oom_steps(cx, f, policy);
    Some(match policy? {
        "stop" => OnOom::Stop,
        _ => OnOom::ResumeBigger { steps: steps? },
    })
}

fn read_oom_policy(cx: &mut Cx<'_>, f: &BTreeMap<String, &Val<'_>>) -> Option<&'static str> {
    match f.get("on_oom") {
        None => Some("stop"),
        Some(v) => {
            let s = cx.str_of("resources.on_oom", v, "\"stop\" or \"resume-bigger\"")?;
            match s {
                "stop" => Some("stop"),
                "resume-bigger" => Some("resume-bigger"),
                other => {
                    cx.error(
                        v.span(),
                        "resources.on_oom",
                        format!(
                            "{:?} is not a policy; expected \"stop\" or \"resume-bigger\"",
                            crate::text::clip(other)
                        ),
                        Some(format!(
                            "on_oom = \"resume-bigger\" resumes on the next larger slice{}",
                            crate::suggest::did_you_mean(other, ["stop", "resume-bigger"])
                        )),
                    );
                    None
                }
            }
        }
    }
}

fn read_oom_steps(
    cx: &mut Cx<'_>,
    f: &BTreeMap<String, &Val<'_>>,
    policy: Option<&str>,
) -> Option<u32> {
    match f.get("on_oom_steps") {
        None => Some(2),
        Some(v) => {
            let n = cx.int_of("resources.on_oom_steps", v, "a number of steps from 1 to 4")?;
            if !(1..=MAX_OOM_STEPS).contains(&n) {
                cx.error(
                    v.span(),
                    "resources.on_oom_steps",
                    format!("{n} is out of range; expected 1 to {MAX_OOM_STEPS} moves to a bigger slice"),
                    None,
                );
                return None;
            }
            if policy == Some("stop") {
                cx.warn_at(
                    "resources.on_oom_steps",
                    "has no effect unless on_oom = \"resume-bigger\"".into(),
                    None,
                );
            }
            Some(n as u32)
        }
    }
}

fn read_gpu(cx: &mut Cx<'_>, path: &str, v: &Val<'_>) -> Option<GpuRequest> {
    let s = match v.get_ref() {
        DeValue::String(s) => s.as_ref(),
        _ => {
            cx.wrong_type(
                path,
                v,
                "a string: \"auto\", a MIG profile (\"1g.5gb\"), a GPU type (\"a100\"), \"shard:N\" or \"none\"",
                Some("write gpu = \"auto\" to let yolo-sched pick the smallest slice that fits".into()),
            );
            return None;
        }
    };
    match values::parse_gpu(s) {
        Ok(g) => Some(g),
        Err(p) => {
            cx.problem(v.span(), path, p);
            None
        }
    }
}

fn opt_time(
    cx: &mut Cx<'_>,
    f: &BTreeMap<String, &Val<'_>>,
    table: &str,
) -> Result<Option<SlurmTime>, ()> {
    let Some(v) = f.get("time") else {
        return Ok(None);
    };
    let path = join(table, "time");
    let help = match v.get_ref() {
        DeValue::Integer(i) => Some(format!(
            "Slurm reads a bare number as minutes: write \"{}\" for {} minutes, or \"HH:MM:SS\"",
            i.as_str(),
            i.as_str()
        )),
        _ => None,
    };
    let s = match v.get_ref() {
        DeValue::String(s) => s.as_ref(),
        _ => {
            cx.wrong_type(&path, v, "a Slurm time string such as \"08:00:00\"", help);
            return Err(());
        }
    };
    match values::parse_slurm_time(s) {
        Ok(t) => Ok(Some(t)),
        Err(p) => {
            cx.problem(v.span(), &path, p);
            Err(())
        }
    }
}

fn opt_mem(
    cx: &mut Cx<'_>,
    f: &BTreeMap<String, &Val<'_>>,
    table: &str,
) -> Result<Option<MemSize>, ()> {
    let Some(v) = f.get("mem") else {
        return Ok(None);
    };
    let path = join(table, "mem");
    let s = match v.get_ref() {
        DeValue::String(s) => s.as_ref(),
        DeValue::Integer(i) => {
            let help = Some(format!(
                "write \"{}M\" (megabytes) or a size in G, e.g. \"32G\"",
                i.as_str()
            ));
            cx.wrong_type(&path, v, "a Slurm memory size string such as \"32G\"", help);
            return Err(());
        }
        _ => {
            cx.wrong_type(&path, v, "a Slurm memory size string such as \"32G\"", None);
            return Err(());
        }
    };
    match values::parse_mem(s) {
        Ok(m) => Ok(Some(m)),
        Err(p) => {
            cx.problem(v.span(), &path, p);
            Err(())
        }
    }
}

/// Most CPUs one task may ask for; more is certainly a typo.
const MAX_CPUS: i64 = 4096;

fn opt_cpus(
    cx: &mut Cx<'_>,
    f: &BTreeMap<String, &Val<'_>>,
    table: &str,
) -> Result<Option<u32>, ()> {
    let Some(v) = f.get("cpus") else {
        return Ok(None);
    };
    let path = join(table, "cpus");
    let n = cx
        .int_of(&path, v, "a number of CPUs (an integer ≥ 1)")
        .ok_or(())?;
    if !(1..=MAX_CPUS).contains(&n) {
        cx.error(
            v.span(),
            &path,
            format!("{n} is out of range; expected a number of CPUs from 1 to {MAX_CPUS}"),
            None,
        );
        return Err(());
    }
    Ok(Some(n as u32))
}

fn stage_resources(
    cx: &mut Cx<'_>,
    f: &BTreeMap<String, &Val<'_>>,
    table: &str,
) -> Option<StageResources> {
    let partition = slurm_name(cx, f, table, "partition", true);
    let time = opt_time(cx, f, table);
    let cpus = opt_cpus(cx, f, table);
    let mem = opt_mem(cx, f, table);
    Some(StageResources {
        partition: partition.ok()?,
        time: time.ok()?,
        cpus: cpus.ok()?,
        mem: mem.ok()?,
    })
}

fn default_stages() -> Stages {
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

fn read_stages(cx: &mut Cx<'_>, t: &DeTable<'_>) -> Option<Stages> {
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

fn read_sweep(cx: &mut Cx<'_>, t: &DeTable<'_>, header: Range<usize>) -> Option<Sweep> {
    let mut entries: Vec<(&Spanned<std::borrow::Cow<'_, str>>, &Val<'_>)> = t.iter().collect();
    // The table is stored sorted by key; the axes follow the file's order.
    entries.sort_by_key(|(k, _)| k.span().start);
    let mut sweep = Sweep::default();
    let mut ok = true;
    for (k, v) in entries {
        let key = k.get_ref().as_ref();
        let path = format!("sweep.{key}");
        cx.locations.insert(path.clone(), cx.at(&v.span()));
        if key == "max_parallel" {
            match cx.int_of(&path, v, "a number of array tasks (an integer ≥ 1)") {
                Some(n) if (1..=i64::from(u32::MAX)).contains(&n) => {
                    sweep.max_parallel = Some(n as u32)
                }
                Some(n) => {
                    cx.error(
                        v.span(),
                        &path,
                        format!("{n} is out of range; expected an integer ≥ 1"),
                        None,
                    );
                    ok = false;
                }
                None => ok = false,
            }
            continue;
        }
        if !ok_arg_name(key)
            || (ultralytics::find(key).is_none()
                && args::controlled_reason(StageKind::Train, key).is_none())
        {
            let mut p = args::unknown_arg(key, StageKind::Train);
            if p.help.is_none() && suggest::distance(key, "max_parallel") <= 3 {
                p = p.help("did you mean `max_parallel`?");
            }
            cx.problem(k.span(), &path, p);
            ok = false;
            continue;
        }
        if let Some(reason) = args::controlled_reason(StageKind::Train, key) {
            cx.error(
                k.span(),
                &path,
                format!("`{key}` is set by yolo-sched and cannot be swept: {reason}"),
                None,
            );
            ok = false;
            continue;
        }
        if key == "data" {
            cx.error(
                k.span(),
                &path,
                "the dataset cannot be swept: the prepare stage checks (and caches) one dataset per run".into(),
                Some("submit one run per dataset, e.g. one spec each".into()),
            );
            ok = false;
            continue;
        }
        let items = match v.get_ref() {
            DeValue::Array(a) => a,
            DeValue::Table(_) => {
                cx.wrong_type(&path, v, "a list of values to try", None);
                ok = false;
                continue;
            }
            _ => {
                let help = Some(format!(
                    "write {key} = [{}] (a list of the values to try)",
                    cx.snippet(&v.span())
                ));
                cx.wrong_type(&path, v, "a list of values to try", help);
                ok = false;
                continue;
            }
        };
        if items.is_empty() {
            cx.error(
                v.span(),
                &path,
                "is an empty list, which makes zero variants; expected at least one value".into(),
                Some(format!(
                    "list the values of `{key}` to try, or remove the line"
                )),
            );
            ok = false;
            continue;
        }
        let mut values: Vec<ArgValue> = Vec::with_capacity(items.len());
        // Duplicates by their written form, in a set: a list of 256,000
        // values must not cost 256,000² comparisons.
        let mut seen = std::collections::HashSet::with_capacity(items.len());
        let mut axis_ok = true;
        for (i, item) in items.iter().enumerate() {
            let item_path = format!("{path}[{i}]");
            let value = match args::to_arg_value(item.get_ref()) {
                Ok(a) => a,
                Err(p) => {
                    cx.problem(item.span(), &item_path, p);
                    axis_ok = false;
                    continue;
                }
            };
            if let Err(p) = args::check_arg(StageKind::Train, key, &value, true) {
                cx.problem(item.span(), &item_path, p);
                axis_ok = false;
                continue;
            }
            if !seen.insert(value.to_string()) {
                cx.error(
                    item.span(),
                    &item_path,
                    format!("{value} is listed twice; each variant would run twice"),
                    Some("remove the duplicate".into()),
                );
                axis_ok = false;
                continue;
            }
            values.push(value);
        }
        if axis_ok {
            sweep.axes.push(SweepAxis {
                key: key.to_string(),
                values,
            });
        } else {
            ok = false;
        }
    }
    if sweep.axes.is_empty() && ok && sweep.max_parallel.is_some() {
        cx.warn(
            header.clone(),
            "sweep",
            "[sweep] has `max_parallel` but no argument to sweep: one variant".into(),
            None,
        );
    }
    let n = sweep.variant_count();
    if ok && n > MAX_VARIANTS {
        cx.error(
            header,
            "sweep",
            format!(
                "the sweep makes {n} variants; no Slurm cluster runs an array that large (MaxArraySize is at most {MAX_VARIANTS})"
            ),
            Some("sweep fewer values, or split the sweep into several runs".into()),
        );
        ok = false;
    }
    ok.then_some(sweep)
}

/// Checks across tables, once every part parsed; warnings only for now.
fn check_whole(cx: &mut Cx<'_>, spec: &Spec) {
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
