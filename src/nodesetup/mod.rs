//! `node-setup`: bring a node's MIG layout and its gres.conf block to a target.
//!
//! `plan` decides what each GPU needs (pure); `lock`, `destroy` and `slurm` are
//! the effects; this module reads the node, prepares the dry-run view, and runs
//! the apply sequence step by step, logging each on stderr.

pub mod lock;
pub mod plan;
pub mod site;
pub mod slurm;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::nvml::Nvml;
use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;

use crate::gres::minors::{mig_minors_path, MigMinors};
use crate::gres::render::gpu_type_name;
use crate::gres::render::{
    check_written, render_block, replace_block, slurm_conf_lines, NodeGres, RenderOptions,
    SlurmConfLines,
};
use crate::mig::{plan_auto, AutoPlan, Demand, GpuTarget, Layout, LayoutCatalog};
use crate::nvml::apply::{create_instance, set_mig_mode};
use crate::nvml::topology::{Placement, Topology};
use crate::printer::Printer;
use crate::slurm::Slurm;
pub use plan::{GpuDecision, ModeAction, NodeDecision};

/// Test hook: stop (sleep) right after the named step so a test can kill the
/// process there. Names: see `STEPS`, plus `create-1` (after the first instance).
pub const PAUSE_ENV: &str = "YOLO_SCHED_NODE_SETUP_PAUSE_AFTER";

/// The apply steps, in order; `step N/M` in the log counts these.
pub const STEPS: [&str; 14] = [
    "lock",
    "topology",
    "plan",
    "processes",
    "drain",
    "jobs",
    "destroy",
    "mode",
    "create",
    "verify",
    "gres",
    "include",
    "reconfigure",
    "resume",
];

/// Everything node-setup needs to know, resolved from flags, environment and site file.
#[derive(Debug, Clone)]
pub struct Options {
    pub nvml_lib: OsString,
    /// Root for `/dev`, `/proc` and `/run` paths (`/` on a real node).
    pub sysroot: PathBuf,
    pub gres_conf: PathBuf,
    pub node: String,
    pub slurm_include: Option<PathBuf>,
    pub use_slurm: bool,
    pub reconfigure_cmd: String,
    /// Reset command (`{index}` replaced by the GPU index) when `--reset` is given.
    pub reset_cmd: Option<String>,
    pub force: bool,
    pub drain_timeout: Duration,
    /// `--demand FILE`: plan `auto` from this queue instead of the live one.
    pub demand_file: Option<PathBuf>,
}

impl Options {
    fn render_options(&self) -> RenderOptions {
        RenderOptions {
            device_root: (self.sysroot != Path::new("/")).then(|| self.sysroot.clone()),
        }
    }
}

/// The node as read, its decision, and the gres.conf text before and after.
#[derive(Debug, Clone, Serialize)]
pub struct Prepared {
    pub node: String,
    pub topology: Topology,
    pub decision: NodeDecision,
    /// What `auto` chose and how it serves the queue, when it was used.
    pub auto: Option<AutoPlan>,
    pub gres_conf: PathBuf,
    #[serde(skip)]
    pub old_text: String,
    /// The whole new gres.conf, or why it cannot be rendered yet.
    #[serde(skip)]
    pub new_text: std::result::Result<String, String>,
    pub planned_gres: NodeGres,
    pub slurm_lines: SlurmConfLines,
    /// The node's block in gres.conf already says what it will say.
    pub gres_matches: bool,
    /// Things the admin should know (gres.conf lines outside the block for this node).
    pub warnings: Vec<String>,
}

/// Load NVML, turning a missing driver into a clear message.
pub fn open_nvml(lib: &OsString) -> Result<Nvml> {
    crate::nvml::open(lib)
}

/// The layout to apply: `auto` is resolved against the node later.
pub fn resolve_layout(arg: &str, named: &BTreeMap<String, Layout>) -> Result<Layout> {
    crate::mig::resolve_layout_arg(arg, named)
}

fn read_text(path: &Path) -> Result<String> {
    match std::fs::read_to_string(path) {
        Ok(t) => Ok(t),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

fn read_minors(sysroot: &Path) -> Result<MigMinors> {
    let path = mig_minors_path(sysroot);
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "reading {} (the driver's MIG capability minors; is the nvidia-caps module loaded?)",
            path.display()
        )
    })?;
    MigMinors::parse(&text, &path.display().to_string())
}

/// Largest demand file read (`--demand`): 200,000 lines of a few dozen bytes.
const DEMAND_FILE_LIMIT: u64 = 16 << 20;

/// Targets by GPU index for the `auto` GPUs, and the plan they come from.
type AutoTargets = (Vec<(u32, GpuTarget)>, Option<AutoPlan>);

/// Plans for `auto` GPUs from the demand. Nothing to plan from is an error that says so.
fn auto_plans(topology: &Topology, layout: &Layout, demand: &Demand) -> Result<AutoTargets> {
    let mut indices = Vec::new();
    let mut catalogs = Vec::new();
    for gpu in &topology.gpus {
        if layout.for_gpu(gpu.index, &gpu.name)? == Some(&crate::mig::GpuLayout::Auto)
            && gpu.mig_mode.is_some()
        {
            indices.push(gpu.index);
            catalogs.push(
                LayoutCatalog::build(&plan::geometry(gpu)?)
                    .with_whole_type(Some(gpu_type_name(&gpu.name))),
            );
        }
    }
    if indices.is_empty() {
        return Ok((Vec::new(), None));
    }
    let refs: Vec<&LayoutCatalog> = catalogs.iter().collect();
    let plan = plan_auto(&refs, demand).ok_or_else(|| {
        let offered: std::collections::BTreeSet<String> = catalogs
            .iter()
            .flat_map(|c| {
                c.geometry()
                    .profile_names()
                    .into_iter()
                    .map(str::to_string)
                    .chain(c.whole_type().map(str::to_string))
            })
            .collect();
        crate::error::invalid(format!(
            "layout `auto`: no pending job asks for a GPU type these GPUs can offer \
             (demand seen: {}; offered: {}); give a layout such as `balanced` or `all-1g`, \
             or plan from a representative queue with `--demand FILE`",
            if demand.is_empty() {
                "none".to_string()
            } else {
                demand
                    .iter()
                    .map(|(p, n)| format!("{p} ×{n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            },
            offered.into_iter().collect::<Vec<_>>().join(", ")
        ))
    })?;
    Ok((
        indices.into_iter().zip(plan.gpus.clone()).collect(),
        Some(plan),
    ))
}

/// The demand `auto` plans from: the live queue, or `--demand FILE`, and the
/// other nodes' instances (unless `--no-slurm` with a demand file: then the
/// plan uses no Slurm at all).
fn read_demand(opts: &Options, slurm: &Slurm) -> Result<Demand> {
    let from_file = match &opts.demand_file {
        Some(path) => {
            let text = crate::fsutil::read_regular(path, DEMAND_FILE_LIMIT)
                .map_err(|e| crate::error::invalid(format!("--demand: {e:#}")))?;
            Some(
                Demand::parse_file(&text, &path.display().to_string())
                    .map_err(crate::error::invalid)?,
            )
        }
        None => None,
    };
    match from_file {
        Some(d) if !opts.use_slurm => Ok(d),
        pending => slurm::demand(slurm, &opts.node, pending)
            .context("reading job demand for `auto` (squeue, scontrol)"),
    }
}

/// Read the node, decide every GPU, render the gres.conf it should have.
pub fn prepare(nvml: &Nvml, opts: &Options, layout: &Layout, slurm: &Slurm) -> Result<Prepared> {
    let topology = Topology::read(nvml).context("reading the GPUs through NVML")?;
    let uses_auto = layout
        .entries
        .iter()
        .any(|e| e.gpu == crate::mig::GpuLayout::Auto);
    let (plans, auto) = if uses_auto {
        let demand = read_demand(opts, slurm)?;
        auto_plans(&topology, layout, &demand)?
    } else {
        (Vec::new(), None)
    };
    let decision = plan::decide(&topology, layout, &plans)?;
    prepared_from(opts, topology, decision, auto)
}

fn prepared_from(
    opts: &Options,
    topology: Topology,
    decision: NodeDecision,
    auto: Option<AutoPlan>,
) -> Result<Prepared> {
    let planned_gres = plan::gres_planned(&opts.node, &topology, &decision);
    let old_text = read_text(&opts.gres_conf)?;
    let (new_text, warnings) = match render_file(opts, &planned_gres, &old_text) {
        Ok((text, warnings)) => (Ok(text), warnings),
        Err(e) => (Err(e), Vec::new()),
    };
    let gres_matches = matches!(&new_text, Ok(t) if *t == old_text);
    Ok(Prepared {
        node: opts.node.clone(),
        slurm_lines: slurm_conf_lines(&planned_gres),
        topology,
        decision,
        auto,
        gres_conf: opts.gres_conf.clone(),
        old_text,
        new_text,
        planned_gres,
        gres_matches,
        warnings,
    })
}

/// The whole new gres.conf for `gres`, or why it cannot be rendered.
/// With it, the warnings about gres.conf lines outside the block that also
/// configure this node's GPUs.
fn render_file(
    opts: &Options,
    gres: &NodeGres,
    old_text: &str,
) -> std::result::Result<(String, Vec<String>), String> {
    let has_mig = gres
        .gpus
        .iter()
        .any(|g| matches!(g.usage, crate::gres::render::GpuUsage::Mig { .. }));
    let minors = if has_mig {
        read_minors(&opts.sysroot).map_err(|e| format!("{e:#}"))?
    } else {
        MigMinors::default()
    };
    let block =
        render_block(gres, &minors, &opts.render_options()).map_err(|e| format!("{e:#}"))?;
    let edit = replace_block(old_text, &gres.node, &block).map_err(|e| format!("{e:#}"))?;
    let warnings = edit
        .conflicts
        .iter()
        .map(|(line, text)| {
            format!(
                "gres.conf line {line} also configures GPUs for {}: {text}",
                gres.node
            )
        })
        .collect();
    Ok((edit.text, warnings))
}

/// One way the node differs from its layout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Difference {
    pub what: DifferenceKind,
    pub message: String,
}

/// What differs: the GPUs, gres.conf, the include file, or Slurm's view of the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DifferenceKind {
    Gpu,
    GresConf,
    Include,
    LeftDrained,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// The one assertion walk, shared by `--check` and `--apply` (which stops as
/// "already applied" when it finds nothing): the GPUs against the decision,
/// the gres.conf block, the `--slurm-include` file, and (with Slurm) a node
/// left drained by an earlier node-setup. Empty: the node matches.
pub fn differences(prepared: &Prepared, opts: &Options, slurm: &Slurm) -> Result<Vec<Difference>> {
    let mut out = Vec::new();
    let mut push = |what, message: String| out.push(Difference { what, message });
    for g in &prepared.decision.gpus {
        if let ModeAction::Switch { on } | ModeAction::AwaitReset { on } = g.mode {
            push(
                DifferenceKind::Gpu,
                format!(
                    "GPU {}: MIG mode should be {}",
                    g.index,
                    if on { "on" } else { "off" }
                ),
            );
        }
        for d in &g.destroy {
            push(
                DifferenceKind::Gpu,
                format!(
                    "GPU {}: has {} at slice {} (GPU instance {}) that the layout does not want",
                    g.index, d.profile, d.start, d.gi_id
                ),
            );
        }
        for c in &g.create {
            push(
                DifferenceKind::Gpu,
                format!(
                    "GPU {}: lacks {} (planned at slice {})",
                    g.index, c.profile, c.start
                ),
            );
        }
    }
    if !prepared.gres_matches {
        let why = match &prepared.new_text {
            Ok(_) => "differs from what the layout needs".to_string(),
            Err(e) => format!("cannot be checked: {e}"),
        };
        push(
            DifferenceKind::GresConf,
            format!(
                "{}: the block for {} {why}",
                prepared.gres_conf.display(),
                prepared.node
            ),
        );
    }
    if let Some(path) = &opts.slurm_include {
        if read_text(path)? != include_text(&prepared.slurm_lines) {
            push(
                DifferenceKind::Include,
                format!(
                    "{}: the slurm.conf lines for {} are missing or differ",
                    path.display(),
                    prepared.node
                ),
            );
        }
    }
    if opts.use_slurm && drained_by_node_setup(opts, slurm)? {
        push(
            DifferenceKind::LeftDrained,
            format!(
                "{} is still drained by an earlier node-setup (rerun --apply to resume it)",
                prepared.node
            ),
        );
    }
    Ok(out)
}

/// How an apply ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Applied {
    /// Nothing needed changing.
    AlreadyApplied,
    /// Changes were made.
    Changed { summary: String },
}

/// Logs `node-setup: step N/M: …` through the printer and remembers what was done.
struct Log<'a> {
    printer: &'a Printer,
    current: usize,
    done: Vec<String>,
}

impl Log<'_> {
    fn step(&mut self, name: &str, what: &str) {
        self.current = STEPS.iter().position(|s| *s == name).map_or(0, |i| i + 1);
        self.printer.note(format!(
            "node-setup: step {}/{}: {what}",
            self.current,
            STEPS.len()
        ));
    }

    fn did(&mut self, what: impl Into<String>) {
        let what = what.into();
        self.printer.note(format!("node-setup:   {what}"));
        self.done.push(what);
    }

    fn name(&self) -> &'static str {
        self.current
            .checked_sub(1)
            .and_then(|i| STEPS.get(i))
            .copied()
            .unwrap_or("start")
    }
}

/// The test hook behind `PAUSE_ENV`.
fn pause_point(printer: &Printer, name: &str) {
    if std::env::var(PAUSE_ENV).is_ok_and(|v| v == name) {
        printer.note(format!("node-setup: paused after {name} ({PAUSE_ENV})"));
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// Run a configured shell command (the admin's own setting); failure is an error.
fn run_shell(cmd: &str, what: &str, limit: Duration) -> Result<()> {
    let out = crate::process::run_with_timeout("sh", &["-c", cmd], limit)
        .with_context(|| format!("running the {what} command `{cmd}`"))?;
    if !out.status.success() {
        let stderr = out.stderr_str();
        let said = match stderr.trim() {
            "" => "it printed nothing on stderr".to_string(),
            text => text.to_string(),
        };
        bail!(
            "the {what} command `{cmd}` failed ({}): {said}",
            crate::process::describe_status(&out.status),
        );
    }
    Ok(())
}

/// `--apply`: the whole sequence. The caller has checked root and holds nothing.
pub fn apply(
    printer: &Printer,
    nvml: &Nvml,
    opts: &Options,
    layout: &Layout,
    slurm: &Slurm,
) -> Result<Applied> {
    let mut log = Log {
        printer,
        current: 0,
        done: Vec::new(),
    };
    log.step("lock", "taking the node-setup lock");
    let lock = lock::acquire(&lock::lock_path(&opts.sysroot))?;
    log.did(format!("holding {}", lock.path.display()));
    pause_point(log.printer, "lock");
    let mut drained = false;
    let result = apply_locked(nvml, opts, layout, slurm, &mut log, &mut drained);
    if let Err(err) = &result {
        report_failure(opts, slurm, &log, drained, err);
    }
    result
}

fn report_failure(opts: &Options, slurm: &Slurm, log: &Log, drained: bool, err: &anyhow::Error) {
    let n = log.current;
    log.printer.note(format!(
        "node-setup: FAILED at step {n}/{} ({}): {err:#}",
        STEPS.len(),
        log.name()
    ));
    if log.done.is_empty() {
        log.printer.note("node-setup: nothing was changed");
    } else {
        log.printer.note("node-setup: done before the failure:");
        for d in &log.done {
            log.printer.note(format!("node-setup:   - {d}"));
        }
    }
    let rest: Vec<&str> = STEPS.iter().skip(n).copied().collect();
    if !rest.is_empty() {
        log.printer
            .note(format!("node-setup: not done: {}", rest.join(", ")));
    }
    if drained {
        let reason = format!(
            "{} failed at step {n} ({}); rerun node-setup",
            slurm::REASON_PREFIX,
            log.name()
        );
        match slurm::set_reason(slurm, &opts.node, &reason) {
            Ok(()) => log.printer.note(format!(
                "node-setup: {} stays drained (reason: {reason}); fix the cause and rerun the same command: every step is safe to repeat",
                opts.node
            )),
            Err(e) => log.printer.warn(format!("could not set the drain reason: {e:#}")),
        }
    } else if n > 0 {
        log.printer.note(
            "node-setup: fix the cause and rerun the same command: every step is safe to repeat",
        );
    }
}

fn apply_locked(
    nvml: &Nvml,
    opts: &Options,
    layout: &Layout,
    slurm: &Slurm,
    log: &mut Log<'_>,
    drained: &mut bool,
) -> Result<Applied> {
    log.step("topology", "reading the GPUs through NVML");
    let prepared = prepare(nvml, opts, layout, slurm)?;
    log.did(format!("{} GPU(s) read", prepared.topology.gpus.len()));
    pause_point(log.printer, "topology");

    log.step("plan", &format!("planning layout `{}`", layout.name));
    for g in &prepared.decision.gpus {
        log.printer
            .note(format!("node-setup:   {}", describe_gpu(g)));
    }
    for w in &prepared.warnings {
        log.printer.warn(w);
    }
    if let Some(auto) = &prepared.auto {
        for line in describe_auto(auto) {
            log.printer.note(format!("node-setup:   {line}"));
        }
        for s in auto.unserved() {
            log.printer.warn(format!(
                "{} pending job(s) asking for {} cannot run on this node's new layout nor on any \
                 other node",
                s.never_start, s.kind
            ));
        }
    }
    let found = differences(&prepared, opts, slurm)?;
    if found.iter().all(|d| d.what == DifferenceKind::LeftDrained) {
        if !found.is_empty() {
            resume_if_left_drained(log.printer, opts, slurm)?;
        }
        log.printer.note(format!(
            "node-setup: already applied: the node matches layout `{}`",
            layout.name
        ));
        return Ok(Applied::AlreadyApplied);
    }
    pause_point(log.printer, "plan");

    log.step("processes", "looking for processes on GPUs to change");
    let busy = prepared.decision.busy();
    if !busy.is_empty() {
        let list: Vec<String> = busy
            .iter()
            .map(|(gpu, p)| {
                format!(
                    "GPU {gpu}: pid {} ({}){}",
                    p.pid,
                    p.used_memory_mib
                        .map_or("memory unknown".to_string(), |m| format!("{m} MiB")),
                    p.gpu_instance_id
                        .map_or(String::new(), |gi| format!(" in GPU instance {gi}"))
                )
            })
            .collect();
        if !opts.force {
            bail!(
                "GPUs to change are in use:\n  {}\nstop these processes (or pass --force to go ahead anyway)",
                list.join("\n  ")
            );
        }
        log.printer.note(format!(
            "node-setup:   --force: going ahead although processes run:\n  {}",
            list.join("\n  ")
        ));
    } else {
        log.did("no process in the way");
    }
    pause_point(log.printer, "processes");

    let mig_changes = !prepared.decision.unchanged();
    if opts.use_slurm && mig_changes {
        log.step("drain", &format!("draining {} in Slurm", opts.node));
        let reason = format!("{}: applying layout {}", slurm::REASON_PREFIX, layout.name);
        slurm::drain(slurm, &opts.node, &reason)?;
        *drained = true;
        log.did(format!("drained {}", opts.node));
        pause_point(log.printer, "drain");

        log.step(
            "jobs",
            &format!("waiting for the jobs on {} to finish", opts.node),
        );
        if let Err(e) = slurm::wait_for_jobs(log.printer, slurm, &opts.node, opts.drain_timeout) {
            slurm::resume(slurm, &opts.node).context("undraining after the timeout")?;
            *drained = false;
            log.did(format!("undrained {} again", opts.node));
            return Err(e.context("gave up waiting; the node was resumed and nothing else changed"));
        }
        log.did("no job left on the node");
        pause_point(log.printer, "jobs");
    } else {
        log.step("drain", "skipped (no MIG change, or --no-slurm)");
        log.step("jobs", "skipped");
    }

    log.step("destroy", "destroying instances the layout does not keep");
    for g in &prepared.decision.gpus {
        let ids: Vec<u32> = g.destroy.iter().map(|d| d.gi_id).collect();
        if !ids.is_empty() {
            let n = crate::nvml::destroy::destroy_instances(nvml, g.index, &ids)?;
            log.did(format!("GPU {}: destroyed {n} GPU instance(s)", g.index));
        }
    }
    pause_point(log.printer, "destroy");

    log.step("mode", "setting MIG mode");
    let mut mode_changed = false;
    for g in &prepared.decision.gpus {
        let on = match g.mode {
            ModeAction::Keep => continue,
            ModeAction::Switch { on } | ModeAction::AwaitReset { on } => on,
        };
        let pending = match g.mode {
            ModeAction::AwaitReset { .. } => true,
            _ => {
                let outcome = set_mig_mode(nvml, g.index, on)?;
                log.did(format!(
                    "GPU {}: MIG mode {} ({outcome:?})",
                    g.index,
                    if on { "on" } else { "off" }
                ));
                outcome.is_pending()
            }
        };
        mode_changed = true;
        if pending {
            reset_gpu(nvml, opts, g.index, on, log)?;
        }
    }
    pause_point(log.printer, "mode");

    // After a mode change the GPU's placements and instances are new: decide again.
    let decision = if mode_changed {
        let topology = Topology::read(nvml).context("re-reading the GPUs after the mode change")?;
        plan::decide(
            &topology,
            &fixed_layout(&topology, &prepared.decision),
            &plans_of(&prepared.decision),
        )?
    } else {
        prepared.decision.clone()
    };

    log.step("create", "creating the planned instances");
    let mut created = 0;
    for g in &decision.gpus {
        let ids: Vec<u32> = g.destroy.iter().map(|d| d.gi_id).collect();
        if !ids.is_empty() {
            crate::nvml::destroy::destroy_instances(nvml, g.index, &ids)?;
        }
        for c in &g.create {
            let placement = Placement {
                start: u32::from(c.start),
                size: u32::from(c.size),
            };
            let made = create_instance(nvml, g.index, c.profile_id, placement)?;
            created += 1;
            log.did(format!(
                "GPU {}: created {} at slice {} (GPU instance {}, compute instance {})",
                g.index, c.profile, c.start, made.gpu_instance_id, made.compute_instance_id
            ));
            if created == 1 {
                pause_point(log.printer, "create-1");
            }
        }
    }
    pause_point(log.printer, "create");

    log.step("verify", "re-reading the GPUs and comparing with the plan");
    let topology = Topology::read(nvml).context("re-reading the GPUs")?;
    let check = plan::decide(
        &topology,
        &fixed_layout(&topology, &decision),
        &plans_of(&decision),
    )?;
    if !check.unchanged() {
        let left: Vec<String> = check
            .gpus
            .iter()
            .filter(|g| !g.unchanged())
            .map(describe_gpu)
            .collect();
        bail!(
            "the GPUs do not match the plan after applying it: {}",
            left.join("; ")
        );
    }
    log.did("every GPU matches the plan");
    pause_point(log.printer, "verify");

    log.step("gres", &format!("writing {}", opts.gres_conf.display()));
    let gres = plan::gres_now(&opts.node, &topology);
    let minors = if topology.gpus.iter().any(|g| g.mig_enabled()) {
        read_minors(&opts.sysroot)?
    } else {
        MigMinors::default()
    };
    let block = render_block(&gres, &minors, &opts.render_options())?;
    let old = read_text(&opts.gres_conf)?;
    let edit = replace_block(&old, &opts.node, &block)?;
    let outcome =
        crate::fsutil::write_with_backup(&opts.gres_conf, edit.text.as_bytes(), 0o644, |b| {
            check_written(b, &gres, &block)
        })?;
    log.did(format!("{}: {outcome:?}", opts.gres_conf.display()));
    pause_point(log.printer, "gres");

    log.step("include", "writing the slurm.conf include");
    let lines = slurm_conf_lines(&gres);
    eprint!("{}", indent(&lines.to_string()));
    if let Some(path) = &opts.slurm_include {
        crate::fsutil::write_atomic(path, include_text(&lines).as_bytes(), 0o644)?;
        log.did(format!("wrote {}", path.display()));
    }
    pause_point(log.printer, "include");

    if opts.use_slurm {
        log.step(
            "reconfigure",
            &format!("running `{}`", opts.reconfigure_cmd),
        );
        run_shell(
            &opts.reconfigure_cmd,
            "reconfigure",
            Duration::from_secs(300),
        )?;
        log.did("Slurm reconfigured");
        pause_point(log.printer, "reconfigure");
        log.step("resume", &format!("resuming {}", opts.node));
        // A node this run did not drain is resumed only if an earlier node-setup left it drained.
        if *drained || drained_by_node_setup(opts, slurm)? {
            slurm::resume(slurm, &opts.node)?;
            *drained = false;
            log.did(format!("resumed {}", opts.node));
        } else {
            log.did(format!("{} was not drained; nothing to resume", opts.node));
        }
    } else {
        log.step("reconfigure", "skipped (--no-slurm)");
        log.step("resume", "skipped (--no-slurm)");
    }
    let summary = lines.node_line();
    log.printer.note(format!(
        "node-setup: applied layout `{}`: {summary}",
        layout.name
    ));
    Ok(Applied::Changed { summary })
}

/// A layout that pins each GPU to the target already decided (for re-deciding
/// after a mode change and for the verify step).
fn fixed_layout(topology: &Topology, decision: &NodeDecision) -> Layout {
    use crate::mig::{GpuLayout, GpuSelector, LayoutEntry};
    let entries = decision
        .gpus
        .iter()
        .filter_map(|g| {
            let gpu = match g.target.as_ref()? {
                crate::mig::GpuTarget::Disabled => GpuLayout::Disabled,
                crate::mig::GpuTarget::Enabled(_) => GpuLayout::Auto,
            };
            topology.gpu(g.index)?;
            Some(LayoutEntry {
                selector: GpuSelector {
                    indices: Some(vec![g.index]),
                    model: None,
                },
                gpu,
            })
        })
        .collect();
    Layout {
        name: decision.layout.clone(),
        description: None,
        entries,
    }
}

fn plans_of(decision: &NodeDecision) -> Vec<(u32, GpuTarget)> {
    decision
        .gpus
        .iter()
        .filter_map(|g| match &g.target {
            Some(t @ GpuTarget::Enabled(_)) => Some((g.index, t.clone())),
            _ => None,
        })
        .collect()
}

fn reset_gpu(nvml: &Nvml, opts: &Options, index: u32, on: bool, log: &mut Log<'_>) -> Result<()> {
    let mode = if on { "on" } else { "off" };
    let Some(cmd) = &opts.reset_cmd else {
        bail!(
            "GPU {index}: MIG mode {mode} is pending: reset or reboot required. Rerun with --reset \
             (runs `nvidia-smi --gpu-reset -i {index}` or the site's reset_command), or reboot the \
             node, then rerun node-setup"
        );
    };
    let cmd = cmd.replace("{index}", &index.to_string());
    log.printer
        .note(format!("node-setup:   GPU {index}: resetting with `{cmd}`"));
    run_shell(&cmd, "GPU reset", Duration::from_secs(300))?;
    let topology = Topology::read(nvml).context("re-reading the GPUs after the reset")?;
    let now = topology
        .gpu(index)
        .and_then(|g| g.mig_mode)
        .ok_or_else(|| anyhow!("GPU {index}: gone after the reset"))?;
    if now.current != on {
        bail!(
            "GPU {index}: MIG mode is still not {mode} after `{cmd}`: reboot the node, then rerun node-setup"
        );
    }
    log.did(format!(
        "GPU {index}: reset; MIG mode {mode} is now current"
    ));
    Ok(())
}

/// The node is drained (or draining) with a reason node-setup wrote.
fn drained_by_node_setup(opts: &Options, slurm: &Slurm) -> Result<bool> {
    Ok(
        slurm::state_and_reason(slurm, &opts.node)?.is_some_and(|(state, reason)| {
            state.starts_with("drain") && reason.starts_with(slurm::REASON_PREFIX)
        }),
    )
}

/// After an earlier run failed late (MIG and gres.conf done, Slurm not told), the
/// node is still drained: reconfigure and resume it.
fn resume_if_left_drained(printer: &Printer, opts: &Options, slurm: &Slurm) -> Result<()> {
    if drained_by_node_setup(opts, slurm)? {
        printer.note(format!(
            "node-setup: {} was left drained by an earlier node-setup; reconfiguring and resuming it",
            opts.node
        ));
        run_shell(
            &opts.reconfigure_cmd,
            "reconfigure",
            Duration::from_secs(300),
        )?;
        slurm::resume(slurm, &opts.node)?;
    }
    Ok(())
}

/// One line per GPU for logs and dry runs.
pub fn describe_gpu(g: &GpuDecision) -> String {
    let mut parts = Vec::new();
    match g.mode {
        ModeAction::Keep => {}
        ModeAction::Switch { on } => {
            parts.push(format!("MIG mode → {}", if on { "on" } else { "off" }))
        }
        ModeAction::AwaitReset { on } => parts.push(format!(
            "MIG mode {} pending (needs a GPU reset)",
            if on { "on" } else { "off" }
        )),
    }
    if !g.destroy.is_empty() {
        parts.push(format!(
            "destroy {}",
            g.destroy
                .iter()
                .map(|d| format!("{}@{} (GI {})", d.profile, d.start, d.gi_id))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if !g.keep.is_empty() {
        parts.push(format!(
            "keep {}",
            g.keep
                .iter()
                .map(|d| format!("{}@{}", d.profile, d.start))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if !g.create.is_empty() {
        parts.push(format!(
            "create {}",
            g.create
                .iter()
                .map(|c| format!("{}@{}", c.profile, c.start))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let what = if g.unchanged() {
        "unchanged".to_string()
    } else {
        parts.join("; ")
    };
    let notes = if g.notes.is_empty() {
        String::new()
    } else {
        format!(" [{}]", g.notes.join("; "))
    };
    format!("GPU {} ({}): {what}{notes}", g.index, g.name)
}

/// The include file written by `--slurm-include`: the node's `Gres=` line and the
/// cluster-wide settings as comments (merge those with other nodes' by hand).
pub fn include_text(lines: &SlurmConfLines) -> String {
    format!(
        "# Written by `yolo-sched node-setup` for {}; replaced on every run.\n# {}\n# {}\n{}\n",
        lines.node,
        lines.gres_types_line(),
        lines.accounting_line(),
        lines.node_line()
    )
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|l| format!("node-setup:   {l}\n"))
        .collect()
}

/// How `auto`'s choice serves the queue, one line per demanded type.
pub fn describe_auto(auto: &AutoPlan) -> Vec<String> {
    let hours = |s: u64| format!("{:.1} h", s as f64 / 3600.0);
    let mut lines = vec![format!(
        "auto: {} pending job(s) never start, {} of waiting in all (simulated, in queue order)",
        auto.cost.never_start,
        hours(u64::try_from(auto.cost.wait_s).unwrap_or(u64::MAX))
    )];
    for s in &auto.served {
        lines.push(format!(
            "  {}: {} pending, {} instance(s) here, {} elsewhere, mean wait {}{}",
            s.kind,
            s.jobs,
            s.instances,
            s.elsewhere,
            hours(s.mean_wait_s),
            if s.never_start > 0 {
                format!(", {} never start", s.never_start)
            } else {
                String::new()
            }
        ));
    }
    for (kind, n) in &auto.not_offered {
        lines.push(format!(
            "  {kind}: {n} pending, not a type these GPUs offer"
        ));
    }
    lines
}
