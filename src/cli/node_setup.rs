//! `yolo-sched node-setup`: show the GPUs, plan, check or apply a MIG layout and
//! this node's gres.conf block. The work is in `crate::nodesetup`.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, Result};
use clap::Args;
use serde::Serialize;

use super::args::{JsonArg, NvmlLibArg};
use super::Context;
use crate::error::invalid;
use crate::mig::named_layouts;
use crate::nodesetup::{self, Applied, Options, Prepared};
use crate::nvml::Topology;
use crate::printer::Printer;

use crate::nodesetup::site::{
    SiteSection as NodeSetupSection, DEFAULT_GRES_CONF, DEFAULT_RECONFIGURE, DEFAULT_RESET,
};

#[derive(Debug, Args)]
#[command(after_help = "\
One of --show, --dry-run, --check or --apply (default: --show). --apply needs root; the
others change nothing and work as any user.

Layouts (--layout): a name from the site file ([node_setup.layouts.<name>]), a built-in
(`all-1g`, `balanced`, `disabled`), a profile list for every MIG GPU (`1g.5gb*7`,
`3g.20gb,2g.10gb,1g.5gb*2`), or `auto` (chosen from the MIG profiles that pending and
running jobs ask for, read with one squeue call). See docs/mig-layouts.md.

--apply: lock, read GPUs, plan (impossible layouts are refused before anything changes,
exit 2), refuse GPUs with processes unless --force, drain the node and wait for its jobs,
destroy instances, set MIG mode (a pending change needs --reset or a reboot), create the
planned instances, verify, write this node's gres.conf block (atomically, with a backup),
write --slurm-include, run the reconfigure command, resume the node. Each step is logged
on stderr; after a failure the node stays drained and a rerun converges.
See docs/admin-guide.md.

Exit status: 0 done / already applied / --check matches; 1 runtime failure, not root,
--check found differences; 2 invalid input (bad layout, a layout this GPU cannot hold).

Examples:
  yolo-sched node-setup --show
  yolo-sched node-setup --show --json | jq '.gpus[].mig_mode'
  yolo-sched node-setup --dry-run --layout balanced
  yolo-sched node-setup --dry-run --layout auto
  yolo-sched node-setup --dry-run --layout auto --demand last-week.csv
  sudo yolo-sched node-setup --apply --layout '1g.5gb*7'
  sudo yolo-sched node-setup --apply --layout '3g.20gb,2g.10gb,1g.5gb*2' --reset
  yolo-sched node-setup --check --layout training || echo 'node drifted'
  sudo yolo-sched node-setup --apply --layout all-1g --no-slurm --gres-conf /tmp/gres.conf")]
pub struct NodeSetupArgs {
    /// Print the GPUs, MIG mode, profiles and instances (the default action).
    #[arg(long, group = "action")]
    pub show: bool,

    /// Print the plan per GPU, the gres.conf diff and slurm.conf lines; change nothing.
    #[arg(long, group = "action")]
    pub dry_run: bool,

    /// Exit 0 when the node matches --layout (GPUs and gres.conf), 1 otherwise (for cron).
    #[arg(long, group = "action")]
    pub check: bool,

    /// Apply --layout (root only): e.g. `sudo yolo-sched node-setup --apply --layout balanced`.
    #[arg(long, group = "action")]
    pub apply: bool,

    /// The layout: site name, `all-1g`, `balanced`, `disabled`, `1g.5gb*7`, or `auto`.
    #[arg(long, value_name = "LAYOUT")]
    pub layout: Option<String>,

    #[command(flatten)]
    pub output: JsonArg,

    /// Change GPUs even when processes run on them (they may be killed or block the change).
    #[arg(long)]
    pub force: bool,

    /// When a MIG mode change is pending, reset the GPU (`--reset-cmd`) instead of stopping.
    #[arg(long)]
    pub reset: bool,

    /// GPU reset command for --reset; `{index}` becomes the GPU index.
    /// Default: site reset_command, else `nvidia-smi --gpu-reset -i {index}`.
    #[arg(long, value_name = "CMD", requires = "reset")]
    pub reset_cmd: Option<String>,

    #[command(flatten)]
    pub nvml_lib: NvmlLibArg,

    /// Prefix for /dev, /proc and /run paths (tests: fake device nodes), e.g. `/tmp/root`.
    #[arg(long, value_name = "DIR")]
    pub sysroot: Option<PathBuf>,

    /// gres.conf to update, e.g. `/etc/slurm/gres.conf` (the default, or site gres_conf).
    #[arg(long, value_name = "PATH")]
    pub gres_conf: Option<PathBuf>,

    /// Slurm node name for the gres.conf block and drain, e.g. `gpu07` (default: short hostname).
    #[arg(long, value_name = "NAME")]
    pub node: Option<String>,

    /// Also write the slurm.conf lines (Gres=) to FILE, atomically, e.g. `/etc/slurm/nodes-mig.conf`.
    #[arg(long, value_name = "FILE")]
    pub slurm_include: Option<PathBuf>,

    /// Do not drain, reconfigure or resume (for nodes not in Slurm yet).
    #[arg(long)]
    pub no_slurm: bool,

    /// Command that makes Slurm read the new gres.conf, e.g. `systemctl restart slurmd`.
    /// Default: site reconfigure_command, else `scontrol reconfigure`.
    #[arg(long, value_name = "CMD")]
    pub reconfigure_cmd: Option<String>,

    /// Seconds to wait for the drained node's jobs before giving up and resuming it, e.g. 600.
    #[arg(long, value_name = "SECS")]
    pub drain_timeout: Option<u64>,

    /// With `--layout auto`: plan from this queue instead of the live one. CSV with the
    /// header `gres,time_limit_s,jobs`, e.g. a line `gpu:1g.5gb:1,3600,40` (docs/mig-layouts.md).
    #[arg(long, value_name = "FILE")]
    pub demand: Option<PathBuf>,
}

#[derive(Debug, Serialize)]
struct DryRunOut<'a> {
    #[serde(flatten)]
    prepared: &'a Prepared,
    gres_conf_diff: String,
    slurm_conf: String,
}

pub fn run(ctx: &mut Context, args: &NodeSetupArgs) -> Result<i32> {
    let section: NodeSetupSection = ctx.site()?.section("node_setup")?;
    let lib = crate::nvml::library_path(args.nvml_lib.path.as_ref());
    let opts = options(args, &section)?;
    let acting = args.dry_run || args.check || args.apply;
    if args.demand.is_some() && !acting {
        return Err(crate::error::with_hint(
            invalid("--demand is only read when planning: it needs --dry-run, --check or --apply with `--layout auto`"),
            "e.g. `yolo-sched node-setup --dry-run --layout auto --demand FILE`",
        ));
    }
    if !acting {
        let nvml = nodesetup::open_nvml(&lib)?;
        let topology = Topology::read(&nvml).context("reading the GPUs through NVML")?;
        return show(&ctx.printer, &topology, args.output.json);
    }
    let Some(layout_arg) = &args.layout else {
        return Err(invalid(
            "--dry-run, --check and --apply need --layout, e.g. `--layout balanced` or `--layout '1g.5gb*7'`",
        ));
    };
    let site_origin = ctx.site()?.describe();
    let named = named_layouts(&section.layouts, &site_origin)?;
    let layout = nodesetup::resolve_layout(layout_arg, &named)?;
    if args.demand.is_some()
        && !layout
            .entries
            .iter()
            .any(|e| e.gpu == crate::mig::GpuLayout::Auto)
    {
        return Err(crate::error::with_hint(
            invalid(format!(
                "--demand is only read by `--layout auto`, and the layout is `{}`",
                crate::text::echo(layout_arg)
            )),
            "plan from the file with `--layout auto --demand FILE`, or leave out --demand",
        ));
    }
    if args.apply && !nix::unistd::geteuid().is_root() {
        return Err(crate::error::with_hint(
            crate::error::typed(
                crate::error::Kind::NotRoot,
                "node-setup --apply changes GPUs and /etc/slurm and must run as root",
            ),
            "try `sudo yolo-sched node-setup --apply …`; --dry-run and --check work as any user",
        ));
    }
    let nvml = nodesetup::open_nvml(&lib)?;
    if args.apply {
        let result = nodesetup::apply(&ctx.printer, &nvml, &opts, &layout, &ctx.slurm);
        // Nothing changed, nothing to audit.
        let applied = if matches!(result, Ok(Applied::AlreadyApplied)) {
            result
        } else {
            super::runs::Audit::of("node-setup")
                .detail(format!("node {} layout {}", opts.node, layout.name))
                .done_with(ctx, result, |applied, rec| {
                    if let Applied::Changed { summary } = applied {
                        rec.outcome = format!("ok: {summary}");
                    }
                })
        }?;
        if args.output.json {
            ctx.printer.json(&applied)?;
            return Ok(0);
        }
        return match applied {
            Applied::AlreadyApplied => {
                ctx.printer.line("already applied")?;
                Ok(0)
            }
            Applied::Changed { summary } => {
                ctx.printer.line(format!("applied: {summary}"))?;
                Ok(0)
            }
        };
    }
    let prepared = nodesetup::prepare(&nvml, &opts, &layout, &ctx.slurm)?;
    if args.check {
        let diffs = nodesetup::differences(&prepared, &opts, &ctx.slurm)?;
        // The isolation in force on this node (docs/admin-guide.md,
        // "Isolation"): warnings only, they do not change the exit status.
        let isolation = if args.no_slurm {
            Vec::new()
        } else {
            isolation_on_node(ctx, &prepared.node, &prepared.gres_conf)
        };
        if args.output.json {
            ctx.printer.json(&serde_json::json!({
                "node": prepared.node,
                "layout": layout.name,
                "matches": diffs.is_empty(),
                "differences": diffs,
                "isolation": isolation,
            }))?;
            return Ok(if diffs.is_empty() { 0 } else { 1 });
        }
        if diffs.is_empty() {
            ctx.printer.line(format!(
                "{} matches layout `{}`",
                prepared.node, layout.name
            ))?;
        } else {
            ctx.printer.line(format!(
                "{} does not match layout `{}`:",
                prepared.node, layout.name
            ))?;
            for d in &diffs {
                ctx.printer.line(format!("  {d}"))?;
            }
        }
        for c in &isolation {
            let word = match c.status {
                crate::doctor::Status::Ok => "ok",
                crate::doctor::Status::Info => "info",
                crate::doctor::Status::Warn => "WARN",
                crate::doctor::Status::Fail => "FAIL",
            };
            ctx.printer
                .line(format!("isolation: {word} {}: {}", c.name, c.detail))?;
        }
        return Ok(if diffs.is_empty() { 0 } else { 1 });
    }
    dry_run(&ctx.printer, &prepared, args.output.json)
}

/// `doctor`'s isolation checks for this node: Slurm's settings (the
/// controller's), and the device files of this node's gres.conf. Nothing when
/// the controller cannot be asked.
fn isolation_on_node(
    ctx: &Context,
    node: &str,
    gres_conf: &std::path::Path,
) -> Vec<crate::doctor::Check> {
    use crate::slurm::isolation;
    // A controller that answers without its settings says nothing either.
    let Some(ctl) = crate::slurm::config::fetch(&ctx.slurm)
        .ok()
        .filter(|c| c.get("TaskPlugin").is_some())
    else {
        return Vec::new();
    };
    let mut findings = isolation::findings(&ctl, &[node.to_string()]);
    let text = crate::fsutil::read_regular(gres_conf, crate::gres::CONF_LIMIT).ok();
    findings.push(isolation::device_files_finding(
        text.as_deref(),
        &gres_conf.display().to_string(),
    ));
    findings.push(crate::doctor::process_visibility_here());
    findings
        .into_iter()
        .map(|f| crate::doctor::Check {
            name: f.name.to_string(),
            status: if f.ok {
                crate::doctor::Status::Ok
            } else {
                crate::doctor::Status::Warn
            },
            detail: f.detail,
        })
        .collect()
}

fn options(args: &NodeSetupArgs, section: &NodeSetupSection) -> Result<Options> {
    let node = match &args.node {
        Some(n) => n.clone(),
        None => crate::identity::short_host_name()?,
    };
    // Checked before anything is touched: the name goes into gres.conf
    // (`NodeName=`), the include file and `scontrol update`.
    if let Err(p) = crate::spec::values::check_slurm_name(&node, false) {
        return Err(invalid(format!(
            "--node {:?} {}",
            crate::text::clip(&node),
            p.message
        )));
    }
    if node.starts_with('-') || node.len() > 64 {
        return Err(invalid(format!(
            "--node {:?}: expected a Slurm node name of at most 64 characters, not starting with '-'",
            crate::text::clip(&node)
        )));
    }
    let reset_cmd = args.reset.then(|| {
        args.reset_cmd
            .clone()
            .or_else(|| section.reset_command.clone())
            .unwrap_or_else(|| DEFAULT_RESET.to_string())
    });
    let gres_conf = args
        .gres_conf
        .clone()
        .or_else(|| section.gres_conf.clone())
        .unwrap_or_else(|| PathBuf::from(DEFAULT_GRES_CONF));
    let reconfigure_cmd = args
        .reconfigure_cmd
        .clone()
        .or_else(|| section.reconfigure_command.clone())
        .unwrap_or_else(|| DEFAULT_RECONFIGURE.to_string());
    // Every other input is checked here too, before step 1: a file that
    // cannot be written, or a command that cannot be run, would otherwise be
    // found only after MIG mode changed.
    let what_gres = if args.gres_conf.is_some() {
        "--gres-conf"
    } else {
        "[node_setup] gres_conf"
    };
    crate::fsutil::check_target(&gres_conf, what_gres).map_err(invalid)?;
    if let Some(p) = &args.slurm_include {
        crate::fsutil::check_target(p, "--slurm-include").map_err(invalid)?;
    }
    for (flag, cmd) in [
        ("--reset-cmd", reset_cmd.as_deref()),
        ("--reconfigure-cmd", Some(reconfigure_cmd.as_str())),
    ] {
        if let Some(c) = cmd {
            if c.trim().is_empty() || c.chars().any(|ch| ch.is_control() && ch != '\t') {
                return Err(invalid(format!(
                    "{flag} {:?}: expected a command line (not empty, no control characters)",
                    crate::text::clip(c)
                )));
            }
        }
    }
    Ok(Options {
        nvml_lib: crate::nvml::library_path(args.nvml_lib.path.as_ref()),
        sysroot: args.sysroot.clone().unwrap_or_else(|| PathBuf::from("/")),
        gres_conf,
        node,
        slurm_include: args.slurm_include.clone(),
        use_slurm: !args.no_slurm,
        reconfigure_cmd,
        reset_cmd,
        force: args.force,
        drain_timeout: Duration::from_secs(
            args.drain_timeout.or(section.drain_timeout).unwrap_or(3600),
        ),
        demand_file: args.demand.clone(),
    })
}

fn show(printer: &Printer, topology: &Topology, json: bool) -> Result<i32> {
    if json {
        printer.json(topology)?;
        return Ok(0);
    }
    let mut table = printer.table(&[
        "GPU",
        "name",
        "minor",
        "memory",
        "MIG",
        "instances",
        "processes",
    ]);
    for g in &topology.gpus {
        let mig = match g.mig_mode {
            None => "n/a".to_string(),
            Some(m) if m.current == m.pending => (if m.current { "on" } else { "off" }).to_string(),
            Some(m) => format!(
                "{} (pending {})",
                if m.current { "on" } else { "off" },
                if m.pending { "on" } else { "off" }
            ),
        };
        let instances: Vec<String> = g
            .gpu_instances
            .iter()
            .map(|gi| {
                format!(
                    "{}@{} (GI {}, CI {})",
                    crate::mig::profile::normalize_profile_name(&gi.profile_name),
                    gi.placement.start,
                    gi.id,
                    gi.compute_instances
                        .iter()
                        .map(|c| c.id.to_string())
                        .collect::<Vec<_>>()
                        .join(",")
                )
            })
            .collect();
        table.add_row(vec![
            g.index.to_string(),
            g.name.clone(),
            g.minor.to_string(),
            format!("{} MiB", g.memory_mib),
            mig,
            if instances.is_empty() {
                "-".to_string()
            } else {
                instances.join("\n")
            },
            g.processes.len().to_string(),
        ]);
    }
    printer.line(table)?;
    if let Some(v) = &topology.driver_version {
        printer.line(printer.paint(&format!("driver {v}"), "2"))?;
    }
    Ok(0)
}

fn dry_run(printer: &Printer, prepared: &Prepared, json: bool) -> Result<i32> {
    let path = prepared.gres_conf.display().to_string();
    let diff = match &prepared.new_text {
        Ok(new) => crate::gres::diff::unified_diff(
            &prepared.old_text,
            new,
            &path,
            &format!("{path} (new)"),
        ),
        Err(why) => format!("(gres.conf cannot be rendered yet: {why})\n"),
    };
    let slurm_conf = prepared.slurm_lines.to_string();
    if json {
        printer.json(&DryRunOut {
            prepared,
            gres_conf_diff: diff,
            slurm_conf,
        })?;
        return Ok(0);
    }
    printer.line(format!(
        "Plan for {} (layout `{}`), dry run: nothing is changed",
        prepared.node, prepared.decision.layout
    ))?;
    for g in &prepared.decision.gpus {
        printer.line(format!("  {}", nodesetup::describe_gpu(g)))?;
        for p in &g.busy {
            printer.line(format!(
                "    busy: pid {} ({} MiB) would block this change (--force to override)",
                p.pid,
                p.used_memory_mib.unwrap_or(0)
            ))?;
        }
    }
    for w in &prepared.warnings {
        printer.warn(w);
    }
    if let Some(auto) = &prepared.auto {
        for line in nodesetup::describe_auto(auto) {
            printer.line(format!("  {line}"))?;
        }
        for s in auto.unserved() {
            printer.warn(format!(
                "{} pending job(s) asking for {} could run neither on this layout nor on any \
                 other node",
                s.never_start, s.kind
            ));
        }
    }
    printer.line("")?;
    if diff.is_empty() {
        printer.line(format!("{path}: unchanged"))?;
    } else {
        printer.line(format!("{path} would change:"))?;
        printer.line(diff.trim_end())?;
    }
    printer.line("")?;
    printer.line("slurm.conf lines (GPU instance ids of new instances are predicted):")?;
    printer.line(slurm_conf.trim_end())?;
    Ok(0)
}
