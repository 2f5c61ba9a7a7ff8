//! The context each stage template is rendered with, built from a spec and its plan.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::Serialize;

use super::Templates;
use crate::plan::{stage_name, Plan, PlannedStage};
use crate::spec::{ArgValue, GpuRequest, Spec, StageKind};

#[derive(Debug, Serialize)]
struct RunCtx<'a> {
    id: &'a str,
    name: &'a str,
    workdir: String,
    spec_hash: String,
}

#[derive(Debug, Serialize)]
struct StageCtx {
    name: &'static str,
    job_name: String,
    comment: String,
    output: String,
    error: String,
    time: String,
    /// `None`: Slurm's per-GPU default applies (`DefCpuPerGPU`), no `--cpus-per-task`.
    cpus: Option<u32>,
    /// `None`: Slurm's `DefMemPerGPU` applies, no `--mem`.
    mem: Option<String>,
    partition: Option<String>,
    account: Option<String>,
    qos: Option<String>,
    gres: Option<String>,
    /// `1` when the job takes several GPUs of one node (`--nodes=1`).
    nodes: Option<u32>,
    array: Option<String>,
}

#[derive(Debug, Serialize)]
struct PrepareCtx {
    data: String,
    /// A shell word (variables expand on the node), marked safe by the caller.
    cache: Option<minijinja::Value>,
    /// `[train] model`'s registry version (templates written before sweeps
    /// could name registry models read this one).
    registry: Option<RegistryCtx>,
    /// Every registry version the run trains from, each weights file once
    /// (by SHA-256): the built-in template pulls them all.
    models: Vec<RegistryCtx>,
}

/// A registry model the prepare stage copies to node-local storage and the
/// train stage loads from there.
#[derive(Debug, Serialize)]
struct RegistryCtx {
    /// `NAME@N`.
    reference: String,
    /// The node-local directory: a shell word, marked safe.
    dir: minijinja::Value,
    /// The weights' file name in it.
    file: String,
}

/// The registry version of some array tasks of a sweep over `model`.
#[derive(Debug, Serialize)]
struct TaskModelCtx {
    /// The tasks that train from it, as a `case` pattern (`0|3`), marked safe.
    tasks: minijinja::Value,
    /// `NAME@N`, its node-local directory (marked safe) and file, as in `RegistryCtx`.
    reference: String,
    dir: minijinja::Value,
    file: String,
}

#[derive(Debug, Serialize)]
struct TrainCtx {
    data: String,
    cache: Option<minijinja::Value>,
    /// `[train] model`'s registry version, when every variant trains from it.
    registry: Option<RegistryCtx>,
    /// A sweep over `model` naming registry versions: each version and the
    /// array tasks that train from it (the others' `model=` is in `variants`).
    models: Vec<TaskModelCtx>,
    args: Vec<String>,
    /// Ultralytics' `device` as planned: `0`, `0,1,…,N-1` or `cpu` (the
    /// built-in script uses the count of GPUs the job holds when it differs).
    device: String,
    /// `["device=<planned>"]`: what templates written before `device` was in
    /// the context pass on resume; kept so that they still render.
    resume_args: Vec<String>,
    variants: Vec<Vec<String>>,
    /// `[resources] on_oom = "resume-bigger"`: the most moves to a bigger
    /// slice (a single run, or each trial of a search; a sweep is resumed by hand).
    escalate_steps: Option<u32>,
    /// `[tune]`: each array task is a trial and reads its arguments from
    /// `tune/trial-<task>.args`, written by its batch's ask job.
    tune: bool,
}

/// `[tune]`: what the ask and tell jobs run.
#[derive(Debug, Serialize)]
struct TuneCtx {
    /// The Python with Optuna (`submit --python`), a shell word; empty: the
    /// `python3` beside the `yolo` command, else the one on `PATH`.
    python: String,
    /// The search's program and settings, relative to the run directory.
    program: &'static str,
    settings: &'static str,
}

#[derive(Debug, Serialize)]
struct ValCtx {
    data: String,
    args: Vec<String>,
}

#[derive(Debug, Serialize)]
struct ExportCtx {
    formats: Vec<String>,
    args: Vec<String>,
    /// `yolo val` the exported ONNX model on the training data (its speed).
    validate_onnx: bool,
    data: String,
    /// Arguments of that val (`imgsz`).
    val_args: Vec<String>,
    /// `[tune]`: export the search's best trial (`tune/best-trial`).
    tune: bool,
    /// `[tune] publish`: the registry name the best trial is published as.
    publish: Option<String>,
}

#[derive(Debug, Serialize)]
struct ScriptCtx<'a> {
    version: &'static str,
    template_name: String,
    run: RunCtx<'a>,
    stage: StageCtx,
    setup: Vec<minijinja::Value>,
    yolo_sched: String,
    yolo: String,
    /// The site's font for Ultralytics, a shell-quoted path, or none.
    font: Option<String>,
    prepare: Option<PrepareCtx>,
    train: Option<TrainCtx>,
    val: Option<ValCtx>,
    export: Option<ExportCtx>,
    tune: Option<TuneCtx>,
    /// The run directory's names (`rundir::layout`), so no template spells them.
    layout: LayoutCtx,
}

#[derive(Debug, Serialize)]
struct LayoutCtx {
    /// The training directory without a variant (`train`; a variant adds `-<task>`).
    train: &'static str,
    /// The job-written records' directory (`state`).
    state: &'static str,
    /// What follows a task's key there: the start and end records, the guard's record.
    start: &'static str,
    end: &'static str,
    guard: &'static str,
    /// What follows a trial's key there when its agent stopped it early.
    prune: &'static str,
    /// … and when it ran out of GPU memory.
    oom: &'static str,
    /// What follows a task's key there: the trainer's Ultralytics and torch versions.
    versions: &'static str,
    /// A search's directory (`tune`: the study, each trial's arguments, the best).
    tune: &'static str,
    /// In a training directory: the checkpoint, the best weights, the epochs.
    weights_last: &'static str,
    weights_best: &'static str,
    results: &'static str,
    /// What the prepare stage writes: the dataset check's summary, the
    /// cached dataset's path.
    prepare_summary: &'static str,
    prepare_data_path: &'static str,
}

/// A rendered stage script.
#[derive(Debug, Clone)]
pub struct StageScript {
    pub kind: StageKind,
    pub file_name: String,
    pub text: String,
}

/// `key=value` words for `yolo`.
fn arg_words(args: &BTreeMap<String, ArgValue>) -> Vec<String> {
    args.iter()
        .map(|(k, v)| format!("{k}={}", v.to_cli()))
        .collect()
}

/// Resolve a spec path (dataset YAML) against the spec's directory, absolute.
pub fn absolute_in(base: &Path, p: &str) -> String {
    let path = Path::new(p);
    if path.is_absolute() {
        p.to_string()
    } else {
        base.join(path).display().to_string()
    }
}

/// Where Slurm writes a stage's output: `<workdir>/logs/<stage>[-<task>].out`.
pub fn log_path(workdir: &Path, stage: StageKind, array: bool) -> PathBuf {
    let name = stage_name(stage);
    workdir
        .join(crate::rundir::layout::LOGS)
        .join(crate::rundir::layout::log_pattern(name, array))
}

pub struct RenderInput<'a> {
    pub spec: &'a Spec,
    pub plan: &'a Plan,
    pub run_id: &'a str,
    /// Absolute path of the yolo-sched binary the prepare stage runs.
    pub yolo_sched: &'a Path,
    /// The `yolo` command (`yolo`, or a path).
    pub yolo: &'a str,
    /// The spec's directory, absolute: relative dataset paths resolve against it.
    pub base_dir: &'a Path,
    /// The site's `[paths] yolo_font`, copied into each run's Ultralytics config dir.
    pub font: Option<&'a Path>,
    /// The registry versions the spec's `registry:` models resolved to
    /// (`[train] model`, or per variant of a sweep over `model`).
    pub models: &'a crate::names::model::Resolved,
    /// `[tune]`: the Python with Optuna the ask and tell jobs run (`submit
    /// --python`); `None`: the one beside `yolo`, else `python3`.
    pub python: Option<&'a str>,
}

/// Ultralytics' `device` for a job holding `gpus` GPUs: Slurm renumbers the
/// job's devices from 0 in `CUDA_VISIBLE_DEVICES`, so `0`, or `0,1,…,N-1` for
/// several GPUs of one node (Ultralytics then starts DDP itself).
pub fn device_list(gpus: u64) -> String {
    (0..gpus.max(1))
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// The registry versions of a sweep's variants, each with the array tasks
/// that train from it as a `case` pattern (`0|3`), in first-use order.
fn task_models(
    variants: &[Option<crate::names::model::RegistryModel>],
) -> Vec<(String, &crate::names::model::RegistryModel)> {
    let mut out: Vec<(String, &crate::names::model::RegistryModel)> = Vec::new();
    for (task, m) in variants.iter().enumerate() {
        let Some(m) = m else { continue };
        match out.iter_mut().find(|(_, o)| *o == m) {
            Some((tasks, _)) => tasks.push_str(&format!("|{task}")),
            None => out.push((task.to_string(), m)),
        }
    }
    out
}

/// Render every stage of the plan.
pub fn render_all(templates: &Templates, input: &RenderInput) -> Result<Vec<StageScript>> {
    input
        .plan
        .stages
        .iter()
        .map(|stage| render_stage(templates, input, stage))
        .collect()
}

/// One stage's script: the context every stage shares, its own section, the template.
fn render_stage(
    templates: &Templates,
    input: &RenderInput,
    stage: &PlannedStage,
) -> Result<StageScript> {
    let spec = input.spec;
    let data = absolute_in(input.base_dir, &spec.train.data);
    let cache = spec
        .stages
        .prepare
        .as_ref()
        .and_then(|p| p.cache.as_ref())
        .map(|c| minijinja::Value::from_safe_string(c.shell_word()));
    let gpus = stage
        .gres
        .as_deref()
        .and_then(crate::plan::resources::GpuAsk::parse)
        .map_or(0, |g| g.gpus());
    let device = if matches!(spec.resources.gpu, GpuRequest::None) {
        "cpu".to_string()
    } else {
        device_list(gpus)
    };

    let mut ctx = script_ctx(input, stage, gpus);
    match stage.kind {
        StageKind::Prepare => ctx.prepare = Some(prepare_ctx(input, data, cache)),
        StageKind::Train => ctx.train = Some(train_ctx(input, stage, data, cache, device)),
        StageKind::Val => ctx.val = Some(val_ctx(input, stage, data)),
        StageKind::Export => ctx.export = Some(export_ctx(input, data)),
        // The search's own jobs: everything they need is in the run
        // directory (the settings, the study) and `TuneCtx`.
        StageKind::Ask | StageKind::Tell => {}
    }
    let text = templates.render(ctx.template_name.as_str(), &ctx)?;
    Ok(StageScript {
        kind: stage.kind,
        file_name: format!("{}.sh", stage_name(stage.kind)),
        text,
    })
}

/// What every stage's template sees: the run, the job's Slurm settings, the
/// commands, the layout; no stage's own section yet.
fn script_ctx<'a>(input: &RenderInput<'a>, stage: &PlannedStage, gpus: u64) -> ScriptCtx<'a> {
    let spec = input.spec;
    let plan = input.plan;
    let workdir = plan.workdir.display().to_string();
    let is_array = stage.array.is_some();
    let out = log_path(&plan.workdir, stage.kind, is_array);
    ScriptCtx {
        version: env!("CARGO_PKG_VERSION"),
        template_name: format!("{}.sh.j2", stage_name(stage.kind)),
        run: RunCtx {
            id: input.run_id,
            name: &spec.run.name,
            workdir: workdir.clone(),
            spec_hash: spec.hash_hex(),
        },
        stage: StageCtx {
            name: stage_name(stage.kind),
            job_name: stage.job_name.clone(),
            comment: format!("yolo-sched:{}", input.run_id),
            output: out.display().to_string(),
            error: out.display().to_string(),
            time: stage.time.clone(),
            cpus: (!stage.cpus_from_slurm).then_some(stage.cpus),
            mem: (!stage.mem_from_slurm).then(|| stage.mem.clone()),
            partition: stage.partition.clone(),
            account: stage.account.clone(),
            qos: stage.qos.clone(),
            gres: stage.gres.clone(),
            nodes: (gpus > 1).then_some(1),
            array: stage.array.as_ref().map(|a| a.slurm_value()),
        },
        setup: spec
            .run
            .setup
            .iter()
            .map(|l| minijinja::Value::from_safe_string(l.clone()))
            .collect(),
        yolo_sched: input.yolo_sched.display().to_string(),
        layout: layout_ctx(),
        yolo: input.yolo.to_string(),
        font: input.font.map(|f| f.display().to_string()),
        prepare: None,
        train: None,
        val: None,
        export: None,
        tune: spec.tune.as_ref().map(|_| TuneCtx {
            python: input.python.unwrap_or("").to_string(),
            program: crate::rundir::layout::TUNE_PROGRAM,
            settings: crate::rundir::layout::TUNE_SETTINGS,
        }),
    }
}

/// The run directory's names, from `rundir::layout`, so that no template spells them.
fn layout_ctx() -> LayoutCtx {
    LayoutCtx {
        train: crate::rundir::layout::TRAIN,
        state: crate::rundir::layout::STATE,
        start: crate::rundir::layout::START,
        end: crate::rundir::layout::END,
        guard: crate::rundir::layout::GUARD,
        prune: crate::rundir::layout::PRUNE,
        oom: crate::rundir::layout::OOM,
        versions: crate::rundir::layout::VERSIONS,
        tune: crate::rundir::layout::TUNE,
        weights_last: crate::rundir::layout::WEIGHTS_LAST,
        weights_best: crate::rundir::layout::WEIGHTS_BEST,
        results: crate::rundir::layout::RESULTS,
        prepare_summary: crate::rundir::layout::PREPARE_SUMMARY,
        prepare_data_path: crate::rundir::layout::PREPARE_DATA_PATH,
    }
}

/// A registry version as the templates see it: its node-local directory marked safe.
fn registry_ctx(m: &crate::names::model::RegistryModel) -> RegistryCtx {
    RegistryCtx {
        reference: m.reference.clone(),
        dir: minijinja::Value::from_safe_string(m.dir.clone()),
        file: m.file.clone(),
    }
}

/// The prepare stage's section: the dataset, its cache, every registry version to copy.
fn prepare_ctx(input: &RenderInput, data: String, cache: Option<minijinja::Value>) -> PrepareCtx {
    PrepareCtx {
        data,
        cache,
        registry: input.models.single.as_ref().map(registry_ctx),
        models: input
            .models
            .distinct()
            .into_iter()
            .map(registry_ctx)
            .collect(),
    }
}

/// The train stage's section: the shared arguments, each variant's own, the
/// registry versions per task, the OOM moves.
fn train_ctx(
    input: &RenderInput,
    stage: &PlannedStage,
    data: String,
    cache: Option<minijinja::Value>,
    device: String,
) -> TrainCtx {
    let spec = input.spec;
    // A sweep of one variant is no array: its values are the base's.
    let array = input.plan.variants > 1;
    let base = train_base_args(input, stage, array);
    let variants: Vec<Vec<String>> = if array {
        let pinned = &input.models.variants;
        spec.sweep_variants()
            .into_iter()
            .enumerate()
            .map(|(i, mut v)| {
                if pinned.get(i).is_some_and(Option::is_some) {
                    // A registry version: `"model=$MODEL"`, set per task.
                    v.remove("model");
                }
                arg_words(&v)
            })
            .collect()
    } else {
        Vec::new()
    };
    let models = task_models(&input.models.variants)
        .into_iter()
        .map(|(tasks, m)| TaskModelCtx {
            tasks: minijinja::Value::from_safe_string(tasks),
            reference: m.reference.clone(),
            dir: minijinja::Value::from_safe_string(m.dir.clone()),
            file: m.file.clone(),
        })
        .collect();
    // A sweep's variants do not move (one variant's resume would
    // wait for the others); a search's trial moves on its own.
    let escalate_steps = match spec.resources.on_oom {
        crate::spec::OnOom::ResumeBigger { steps } if variants.is_empty() => Some(steps),
        _ => None,
    };
    TrainCtx {
        data,
        cache,
        registry: input.models.single.as_ref().map(registry_ctx),
        models,
        args: arg_words(&base),
        resume_args: vec![format!("device={device}")],
        device,
        variants,
        escalate_steps,
        tune: spec.tune.is_some(),
    }
}

/// The arguments every training task shares: the spec's, less what the script
/// or the variants set, plus the plan's defaults and `[tune]`'s epochs.
fn train_base_args(
    input: &RenderInput,
    stage: &PlannedStage,
    array: bool,
) -> BTreeMap<String, ArgValue> {
    let spec = input.spec;
    let plan = input.plan;
    let only = match array {
        false => spec.sweep_variants().into_iter().next(),
        true => None,
    };
    let mut base = spec.train_args(&only.unwrap_or_default());
    base.remove("data");
    let swept_model = spec.sweep.axes.iter().any(|a| a.key == "model");
    if input.models.single.is_some() || (array && swept_model) {
        // The node-local copy, `"model=$MODEL"` in the template; or
        // each variant's own model.
        base.remove("model");
    }
    if let Some(b) = plan.batch_default {
        base.entry("batch".into())
            .or_insert(ArgValue::Int(b.into()));
    }
    if let Some(i) = plan.imgsz_default {
        base.entry("imgsz".into())
            .or_insert(ArgValue::Int(i.into()));
    }
    // The script adds device= itself (`YS_DEVICE`).
    base.remove("device");
    if let Some(w) = stage.workers {
        base.entry("workers".into())
            .or_insert(ArgValue::Int(w.into()));
    }
    if let Some(t) = &spec.tune {
        // Every trial the same number of epochs; the searched
        // arguments come from the trial's file, after these.
        if let Some(e) = t.epochs {
            base.insert("epochs".into(), ArgValue::Int(e.into()));
        }
        for p in &t.space {
            base.remove(&p.name);
        }
    }
    base
}

/// The image size the val and export stages use when their own arguments
/// name none: the training's, else the planned default.
fn stage_imgsz(input: &RenderInput) -> Option<u32> {
    input.spec.train.imgsz.or(input.plan.imgsz_default)
}

/// The val stage's section: `[stages.val]`'s arguments with the image size,
/// the device the job holds and its workers.
fn val_ctx(input: &RenderInput, stage: &PlannedStage, data: String) -> ValCtx {
    let spec = input.spec;
    let val = spec
        .stages
        .val
        .as_ref()
        .expect("planned val stage comes from the spec");
    let mut args = val.args.clone();
    if let Some(i) = stage_imgsz(input) {
        args.entry("imgsz".into())
            .or_insert(ArgValue::Int(i.into()));
    }
    let val_device = if stage.gres.is_some() { "0" } else { "cpu" };
    args.insert("device".into(), ArgValue::Str(val_device.into()));
    if let Some(w) = stage.workers {
        args.entry("workers".into())
            .or_insert(ArgValue::Int(w.into()));
    }
    ValCtx {
        data,
        args: arg_words(&args),
    }
}

/// The export stage's section: the formats, the export's and the ONNX check's
/// arguments (on the CPU), what a search publishes.
fn export_ctx(input: &RenderInput, data: String) -> ExportCtx {
    let spec = input.spec;
    let export = spec
        .stages
        .export
        .as_ref()
        .expect("planned export stage comes from the spec");
    let mut args = export.args.clone();
    if let Some(i) = stage_imgsz(input) {
        args.entry("imgsz".into())
            .or_insert(ArgValue::Int(i.into()));
    }
    args.insert("device".into(), ArgValue::Str("cpu".into()));
    let mut val_args = BTreeMap::new();
    if let Some(i) = stage_imgsz(input) {
        val_args.insert("imgsz".to_string(), ArgValue::Int(i.into()));
    }
    val_args.insert("device".into(), ArgValue::Str("cpu".into()));
    val_args.insert("plots".into(), ArgValue::Bool(false));
    ExportCtx {
        formats: export.formats.clone(),
        args: arg_words(&args),
        validate_onnx: export.validate && export.formats.iter().any(|f| f == "onnx"),
        data,
        val_args: arg_words(&val_args),
        tune: spec.tune.is_some(),
        publish: spec.tune.as_ref().and_then(|t| t.publish.clone()),
    }
}
