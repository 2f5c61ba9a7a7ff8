//! Reading the node and deciding: the topology, `auto`'s demand, the decision,
//! and the gres.conf text before and after. Nothing here changes the node.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;

use super::{plan, slurm, NodeDecision, Options};
use crate::gres::minors::{mig_minors_path, MigMinors};
use crate::gres::render::{
    gpu_type_name, render_block, replace_block, slurm_conf_lines, NodeGres, SlurmConfLines,
};
use crate::mig::{plan_auto, AutoPlan, Demand, GpuTarget, Layout, LayoutCatalog};
use crate::nvml::topology::Topology;
use crate::nvml::Nvml;
use crate::slurm::Slurm;

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

/// A configuration file of at most `gres::CONF_LIMIT` bytes (a regular file,
/// never waited on); nothing there is empty text.
pub(super) fn read_text(path: &Path) -> Result<String> {
    use crate::fsutil::Links;
    match crate::fsutil::open_regular_bounded(path, Links::Follow, crate::gres::CONF_LIMIT) {
        Ok(f) => crate::fsutil::read_text(f, path, crate::gres::CONF_LIMIT),
        Err(e) if e.is_not_found() => Ok(String::new()),
        Err(e) => Err(e.into()),
    }
}

pub(super) fn read_minors(sysroot: &Path) -> Result<MigMinors> {
    let path = mig_minors_path(sysroot);
    let text = crate::fsutil::read_regular(&path, crate::gres::CONF_LIMIT).with_context(|| {
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

/// Plans for `auto` GPUs from the demand. The node's other GPUs (without
/// MIG, or selected by another layout entry) serve their types as they are
/// and count in the cost. Nothing to plan from is an error that says so,
/// unless those other GPUs serve all of it: then the `auto` GPUs are left
/// as they are (no plan for them).
fn auto_plans(
    topology: &Topology,
    layout: &Layout,
    demand: &Demand,
    demand_file: Option<&Path>,
) -> Result<AutoTargets> {
    let mut indices = Vec::new();
    let mut catalogs = Vec::new();
    let mut demand = demand.clone();
    for gpu in &topology.gpus {
        let wanted = layout.for_gpu(gpu.index, &gpu.name)?;
        if wanted == Some(&crate::mig::GpuLayout::Auto) && gpu.mig_mode.is_some() {
            indices.push(gpu.index);
            catalogs.push(
                LayoutCatalog::build(&plan::geometry(gpu)?)
                    .with_whole_type(Some(gpu_type_name(&gpu.name))),
            );
        } else {
            for (kind, n) in fixed_instances(gpu, wanted)? {
                demand.offer_fixed(&kind, n);
            }
        }
    }
    if indices.is_empty() {
        return Ok((Vec::new(), None));
    }
    let refs: Vec<&LayoutCatalog> = catalogs.iter().collect();
    let fixed_serve_all = !demand.is_empty()
        && demand.iter().all(|(k, _)| {
            demand.fixed(k) > 0
                || !catalogs
                    .iter()
                    .any(|c| c.geometry().profile(k).is_some() || c.whole_type() == Some(k))
        })
        && demand.iter().any(|(k, _)| demand.fixed(k) > 0);
    let demand = &demand;
    let planned = plan_auto(&refs, demand);
    if planned.is_none() && fixed_serve_all {
        return Ok((Vec::new(), None));
    }
    let plan = planned.ok_or_else(|| {
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
             {}",
            if demand.is_empty() {
                "none".to_string()
            } else {
                demand
                    .iter()
                    .map(|(p, n)| format!("{p} ×{n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            },
            offered.into_iter().collect::<Vec<_>>().join(", "),
            match demand_file {
                Some(f) => format!(
                    "or give a --demand file with jobs for these types ({} has none)",
                    crate::text::echo_path(f)
                ),
                None => "or plan from a representative queue with `--demand FILE`".to_string(),
            }
        ))
    })?;
    Ok((
        indices.into_iter().zip(plan.gpus.clone()).collect(),
        Some(plan),
    ))
}

/// The instances a GPU that `auto` does not plan offers after the change,
/// by type: a GPU without MIG, or MIG off, is one whole GPU of its type; an
/// explicit layout, its instances; a GPU no entry selects, what it has now.
fn fixed_instances(
    gpu: &crate::nvml::topology::Gpu,
    wanted: Option<&crate::mig::GpuLayout>,
) -> Result<Vec<(String, u32)>> {
    use crate::mig::GpuLayout;
    let whole = || vec![(gpu_type_name(&gpu.name), 1)];
    let Some(mode) = gpu.mig_mode else {
        return Ok(whole());
    };
    Ok(match wanted {
        // `auto` on a GPU with MIG is planned, not fixed.
        Some(GpuLayout::Auto) => Vec::new(),
        Some(other) => match crate::mig::plan_gpu(other, &plan::geometry(gpu)?)? {
            GpuTarget::Disabled => whole(),
            GpuTarget::Enabled(p) => p
                .counts()
                .iter()
                .map(|(name, n)| (name.to_string(), n))
                .collect(),
        },
        None if mode.current => {
            let mut by_profile: BTreeMap<String, u32> = BTreeMap::new();
            for gi in &gpu.gpu_instances {
                *by_profile.entry(gi.profile_name.clone()).or_default() += 1;
            }
            by_profile.into_iter().collect()
        }
        None => whole(),
    })
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
    let uses_auto = layout
        .entries
        .iter()
        .any(|e| e.gpu == crate::mig::GpuLayout::Auto);
    // NVML first: a node whose GPUs cannot be read says so at once, without
    // waiting on Slurm (reading both at once saved about 2 ms).
    let topology = Topology::read(nvml).context("reading the GPUs through NVML")?;
    let (plans, auto) = if uses_auto {
        let demand = read_demand(opts, slurm)?;
        auto_plans(&topology, layout, &demand, opts.demand_file.as_deref())?
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
