//! Text for people and for the include file: one line per GPU decision, how
//! `auto` serves the queue, the `--slurm-include` file.

use super::{GpuDecision, ModeAction};
use crate::gres::render::SlurmConfLines;
use crate::mig::AutoPlan;

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

/// How `auto`'s choice serves the queue, one line per demanded type.
pub fn describe_auto(auto: &AutoPlan) -> Vec<String> {
    let hours = |s: u64| format!("{:.1} h", s as f64 / 3600.0);
    let mut lines = vec![format!(
        "auto: {} pending job(s) never start, {} of waiting in all (simulated, in queue order); {}",
        auto.cost.never_start,
        hours(u64::try_from(auto.cost.wait_s).unwrap_or(u64::MAX)),
        if auto.exact {
            "proven the best layouts for this queue"
        } else {
            "the best layouts found, not proven best (the search kept its most promising states)"
        }
    )];
    for s in &auto.served {
        lines.push(format!(
            "  {}: {} pending, {} instance(s) here{}, {} elsewhere, mean wait {}{}",
            s.kind,
            s.jobs,
            s.instances,
            if s.fixed > 0 {
                format!(" ({} on GPUs left as they are)", s.fixed)
            } else {
                String::new()
            },
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mig::{builtin, plan_auto, Demand, LayoutCatalog};

    /// The first line says whether the plan is proven best (issue 34, item 5).
    #[test]
    fn the_plan_says_whether_it_is_proven_best() {
        let cat = LayoutCatalog::build(&builtin::h200());
        let mut demand = Demand::new();
        demand.add_jobs("1g.18gb", 9);
        let mut plan = plan_auto(&[&cat], &demand).unwrap();
        assert!(plan.exact);
        let proven = describe_auto(&plan);
        assert!(
            proven[0].ends_with("; proven the best layouts for this queue"),
            "{proven:?}"
        );
        plan.exact = false;
        let found = describe_auto(&plan);
        assert!(found[0].contains("not proven best"), "{found:?}");
        assert!(!found[0].contains("proven the best"), "{found:?}");
    }
}
