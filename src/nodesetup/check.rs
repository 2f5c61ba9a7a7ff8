//! `--check`: how the node differs from its layout (also the "already applied"
//! test of `--apply`).

use anyhow::Result;
use serde::Serialize;

use super::prepare::read_text;
use super::{include_text, slurm, ModeAction, Options, Prepared};
use crate::slurm::Slurm;

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

/// The node is drained (or draining) with a reason node-setup wrote.
pub(super) fn drained_by_node_setup(opts: &Options, slurm: &Slurm) -> Result<bool> {
    Ok(
        slurm::state_and_reason(slurm, &opts.node)?.is_some_and(|(state, reason)| {
            state.starts_with("drain") && reason.starts_with(slurm::REASON_PREFIX)
        }),
    )
}
