//! `--apply`: the sequence that changes the node, step by step under the lock,
//! and what is said when a step fails.

use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;

use super::check::drained_by_node_setup;
use super::prepare::{read_minors, read_text};
use super::steps::{pause_point, Log, STEPS};
use super::{
    describe_auto, describe_gpu, differences, include_text, lock, plan, prepare, slurm,
    DifferenceKind, ModeAction, NodeDecision, Options, Prepared,
};
use crate::gres::minors::MigMinors;
use crate::gres::render::{
    check_written, render_block, replace_block, slurm_conf_lines, NodeGres, SlurmConfLines,
};
use crate::mig::{GpuTarget, Layout};
use crate::nvml::apply::{create_instance, set_mig_mode};
use crate::nvml::topology::{Placement, Topology};
use crate::nvml::Nvml;
use crate::printer::Printer;
use crate::slurm::Slurm;

/// How an apply ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Applied {
    /// Nothing needed changing.
    AlreadyApplied,
    /// Changes were made.
    Changed { summary: String },
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
    show_plan(log, &prepared);
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
    check_processes(log, opts, &prepared.decision)?;
    pause_point(log.printer, "processes");

    drain_and_wait(log, opts, layout, slurm, &prepared.decision, drained)?;

    log.step("destroy", "destroying instances the layout does not keep");
    destroy_unwanted(log, nvml, &prepared.decision)?;
    pause_point(log.printer, "destroy");

    log.step("mode", "setting MIG mode");
    let mode_changed = set_modes(log, nvml, opts, &prepared.decision)?;
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
    create_planned(log, nvml, &decision)?;
    pause_point(log.printer, "create");

    log.step("verify", "re-reading the GPUs and comparing with the plan");
    let topology = verify(log, nvml, &decision)?;
    pause_point(log.printer, "verify");

    log.step("gres", &format!("writing {}", opts.gres_conf.display()));
    let gres = write_gres(log, opts, &topology)?;
    pause_point(log.printer, "gres");

    log.step("include", "writing the slurm.conf include");
    let lines = write_include(log, opts, &gres)?;
    pause_point(log.printer, "include");

    reconfigure_and_resume(log, opts, slurm, drained)?;
    let summary = lines.node_line();
    log.printer.note(format!(
        "node-setup: applied layout `{}`: {summary}",
        layout.name
    ));
    Ok(Applied::Changed { summary })
}

/// The plan step's log: each GPU's decision, warnings, and how `auto` serves the queue.
fn show_plan(log: &Log<'_>, prepared: &Prepared) {
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
}

/// Processes on GPUs to change stop the apply unless `--force`.
fn check_processes(log: &mut Log<'_>, opts: &Options, decision: &NodeDecision) -> Result<()> {
    let busy = decision.busy();
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
    Ok(())
}

/// The drain and jobs steps: drain the node and wait for its jobs (only when
/// MIG changes and Slurm is used); a timeout resumes the node and gives up.
fn drain_and_wait(
    log: &mut Log<'_>,
    opts: &Options,
    layout: &Layout,
    slurm: &Slurm,
    decision: &NodeDecision,
    drained: &mut bool,
) -> Result<()> {
    let mig_changes = !decision.unchanged();
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
    Ok(())
}

/// Destroy the GPU instances the layout does not keep.
fn destroy_unwanted(log: &mut Log<'_>, nvml: &Nvml, decision: &NodeDecision) -> Result<()> {
    for g in &decision.gpus {
        let ids: Vec<u32> = g.destroy.iter().map(|d| d.gi_id).collect();
        if !ids.is_empty() {
            let n = crate::nvml::destroy::destroy_instances(nvml, g.index, &ids)?;
            log.did(format!("GPU {}: destroyed {n} GPU instance(s)", g.index));
        }
    }
    Ok(())
}

/// Set each GPU's MIG mode (resetting where the change is pending); whether any changed.
fn set_modes(
    log: &mut Log<'_>,
    nvml: &Nvml,
    opts: &Options,
    decision: &NodeDecision,
) -> Result<bool> {
    let mut mode_changed = false;
    for g in &decision.gpus {
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
    Ok(mode_changed)
}

/// Create the planned instances (destroying first what the new decision drops).
fn create_planned(log: &mut Log<'_>, nvml: &Nvml, decision: &NodeDecision) -> Result<()> {
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
    Ok(())
}

/// Re-read the GPUs and fail unless they match `decision`; the topology read.
fn verify(log: &mut Log<'_>, nvml: &Nvml, decision: &NodeDecision) -> Result<Topology> {
    let topology = Topology::read(nvml).context("re-reading the GPUs")?;
    let check = plan::decide(
        &topology,
        &fixed_layout(&topology, decision),
        &plans_of(decision),
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
    Ok(topology)
}

/// Write this node's gres.conf block for the GPUs as they now are.
fn write_gres(log: &mut Log<'_>, opts: &Options, topology: &Topology) -> Result<NodeGres> {
    let gres = plan::gres_now(&opts.node, topology);
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
    Ok(gres)
}

/// Show the slurm.conf lines, and write them to `--slurm-include` when given.
fn write_include(log: &mut Log<'_>, opts: &Options, gres: &NodeGres) -> Result<SlurmConfLines> {
    let lines = slurm_conf_lines(gres);
    // Through the printer, as the step log is: the library never prints.
    for line in indent(&lines.to_string()).lines() {
        log.printer.note(line);
    }
    if let Some(path) = &opts.slurm_include {
        crate::fsutil::write_atomic(path, include_text(&lines).as_bytes(), 0o644)?;
        log.did(format!("wrote {}", path.display()));
    }
    Ok(lines)
}

/// The reconfigure and resume steps (with Slurm): a node is resumed if this
/// run drained it or an earlier node-setup left it drained.
fn reconfigure_and_resume(
    log: &mut Log<'_>,
    opts: &Options,
    slurm: &Slurm,
    drained: &mut bool,
) -> Result<()> {
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
    Ok(())
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

fn indent(text: &str) -> String {
    text.lines()
        .map(|l| format!("node-setup:   {l}\n"))
        .collect()
}
