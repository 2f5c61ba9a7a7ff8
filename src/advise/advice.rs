//! From the window's demand and the GPU nodes to the comparison of set-ups
//! and the plan (pure): the current layout, each built-in layout on every
//! MIG GPU, and `auto` rolled out node by node as node-setup applies it.

use std::collections::BTreeMap;

use anyhow::Result;
use serde::Serialize;

use super::fleet::GpuNode;
use super::simulate::{memory_of, simulate, Outcome};
use crate::mig::{
    all_smallest, balanced, plan_auto, Demand, GpuGeometry, GpuTarget, LayoutCatalog, ProfileCounts,
};

/// One set-up's name and what it would have done.
#[derive(Debug, Clone, Serialize)]
pub struct SetUp {
    /// `current`, `whole`, `all-1g`, `balanced` or `auto`.
    pub name: String,
    pub offered: BTreeMap<String, u32>,
    pub outcome: Outcome,
}

/// One node's step of the advised roll-out.
#[derive(Debug, Clone, Serialize)]
pub struct Step {
    pub node: String,
    /// Each GPU after the step: `whole` or its instances.
    pub gpus: Vec<String>,
    /// Whether the step changes the node at all.
    pub changes: bool,
    /// The whole fleet's predicted outcome once this step is applied.
    pub after: Outcome,
}

/// Everything `advise` says.
#[derive(Debug, Clone, Serialize)]
pub struct Advice {
    pub setups: Vec<SetUp>,
    /// `auto`'s roll-out, in the order to apply it.
    pub steps: Vec<Step>,
    /// Whether `auto` changes any node.
    pub changes: bool,
}

/// Nodes planned in the best order (each step the one that helps most) up to
/// this many; beyond, in name order (the search is quadratic in nodes).
pub const ORDERED_NODES: usize = 16;

fn offered_by(nodes: &[(String, Vec<String>, ProfileCounts)]) -> ProfileCounts {
    let mut all = ProfileCounts::new();
    for (_, _, c) in nodes {
        for (k, n) in c.iter() {
            all.add(k, n);
        }
    }
    all
}

fn map(c: &ProfileCounts) -> BTreeMap<String, u32> {
    c.iter().map(|(k, n)| (k.to_string(), n)).collect()
}

/// A node's GPUs set to one layout each, with its fixed GPUs beside them.
fn node_with(node: &GpuNode, gpus: &[GpuTarget]) -> (Vec<String>, ProfileCounts) {
    let mut c = ProfileCounts::new();
    for (k, n) in &node.fixed {
        c.add(k, *n);
    }
    let mut words = Vec::new();
    for t in gpus {
        match t {
            GpuTarget::Disabled => {
                c.add(&node.whole_type(), 1);
                words.push("whole".to_string());
            }
            GpuTarget::Enabled(p) => {
                for (k, n) in p.counts().iter() {
                    c.add(k, n);
                }
                words.push(p.counts().to_string());
            }
        }
    }
    (words, c)
}

/// One built-in layout on every MIG GPU of every node.
fn uniform(
    nodes: &[GpuNode],
    layout: impl Fn(&GpuGeometry) -> Result<GpuTarget>,
) -> Result<ProfileCounts> {
    let mut all = ProfileCounts::new();
    for n in nodes {
        let targets = match &n.geometry {
            Some(g) => vec![layout(g)?; n.gpus.len()],
            None => Vec::new(),
        };
        for (k, c) in node_with(n, &targets).1.iter() {
            all.add(k, c);
        }
    }
    Ok(all)
}

/// The demand as `auto` on a node of `geometry` sees it: each job asking for
/// the smallest type of that model that holds what it asked (a type of
/// another model that holds more than any of this one's stays as it is).
pub fn demand_for(demand: &Demand, geometry: &GpuGeometry) -> Demand {
    let whole = crate::gres::render::gpu_type_name(geometry.model());
    // Smallest memory first, then the fewest compute slices (3g.20gb before 4g.20gb).
    let mut profiles: Vec<&crate::mig::Profile> = geometry.profiles().iter().collect();
    profiles.sort_by_key(|p| (p.memory_mib, p.compute_slices, p.name.contains('+')));
    let types: Vec<(&str, u64)> = profiles
        .iter()
        .map(|p| (p.name.as_str(), p.memory_mib))
        .collect();
    let mut out = Demand::new();
    for (asked, _) in demand.iter() {
        let target = if geometry.profile(asked).is_some() || asked == whole {
            asked.to_string()
        } else {
            match memory_of(asked) {
                Some(need) => types
                    .iter()
                    .find(|(_, m)| *m >= need)
                    .map_or(asked.to_string(), |(k, _)| (*k).to_string()),
                None => asked.to_string(),
            }
        };
        for r in demand.queue(asked) {
            out.add_arriving(&target, r.count, r.seconds, r.arrival_s);
        }
    }
    out
}

/// The least cut of the mean wait that is worth draining a node for.
pub const MIN_GAIN_S: f64 = 60.0;

/// Whether going from `before` to `after` is worth a drain: more jobs can
/// run, or the mean wait drops by at least a minute and 5 %.
pub fn worth_a_drain(before: &Outcome, after: &Outcome) -> bool {
    if after.never_run != before.never_run {
        return after.never_run < before.never_run;
    }
    let gain = before.mean_wait_s - after.mean_wait_s;
    gain >= MIN_GAIN_S && gain >= 0.05 * before.mean_wait_s
}

/// Compare the set-ups and plan `auto`'s roll-out.
pub fn advise(demand: &Demand, nodes: &[GpuNode]) -> Result<Advice> {
    let current: Vec<(String, Vec<String>, ProfileCounts)> = nodes
        .iter()
        .map(|n| (n.name.clone(), n.layout_words(), n.offers()))
        .collect();
    let mut setups = Vec::new();
    let mut add = |name: &str, offered: ProfileCounts| {
        setups.push(SetUp {
            name: name.to_string(),
            outcome: simulate(demand, &offered),
            offered: map(&offered),
        })
    };
    add("current", offered_by(&current));
    add("whole", uniform(nodes, |_| Ok(GpuTarget::Disabled))?);
    add(
        "all-1g",
        uniform(nodes, |g| {
            Ok(GpuTarget::Enabled(crate::mig::check(&all_smallest(g)?, g)?))
        })?,
    );
    add(
        "balanced",
        uniform(nodes, |g| {
            Ok(GpuTarget::Enabled(crate::mig::check(&balanced(g)?, g)?))
        })?,
    );

    // `auto`, node by node: each node planned seeing the others as they are
    // at that moment (the ones already changed, in their new layout).
    let mut state = current.clone();
    let mut left: Vec<usize> = (0..nodes.len())
        .filter(|&i| nodes[i].geometry.is_some() && !nodes[i].gpus.is_empty())
        .collect();
    let greedy = left.len() <= ORDERED_NODES;
    let mut catalogs: BTreeMap<String, LayoutCatalog> = BTreeMap::new();
    let mut steps = Vec::new();
    while !left.is_empty() {
        let candidates: Vec<usize> = if greedy { left.clone() } else { vec![left[0]] };
        let mut best: Option<(usize, Vec<String>, ProfileCounts, Outcome)> = None;
        for &i in &candidates {
            let node = &nodes[i];
            let Some(geometry) = &node.geometry else {
                continue;
            };
            let catalog = catalogs
                .entry(geometry.model().to_string())
                .or_insert_with(|| LayoutCatalog::build(geometry));
            let mut seen = demand_for(demand, geometry);
            for (j, (_, _, offers)) in state.iter().enumerate() {
                if j != i {
                    for (k, n) in offers.iter() {
                        for _ in 0..n {
                            seen.offer_elsewhere(k, 0);
                        }
                    }
                }
            }
            for (k, n) in &node.fixed {
                seen.offer_fixed(k, *n);
            }
            let refs: Vec<&LayoutCatalog> = vec![&*catalog; node.gpus.len()];
            let (words, offers) = match plan_auto(&refs, &seen) {
                Some(plan) => node_with(node, &plan.gpus),
                // Nothing this node can offer is asked for: it stays as it is.
                None => (state[i].1.clone(), state[i].2.clone()),
            };
            let mut trial = state.clone();
            trial[i] = (node.name.clone(), words.clone(), offers.clone());
            let outcome = simulate(demand, &offered_by(&trial));
            let better = match &best {
                None => true,
                Some((_, _, _, b)) => outcome.cost() < b.cost(),
            };
            if better {
                best = Some((i, words, offers, outcome));
            }
        }
        let Some((i, words, offers, after)) = best else {
            break;
        };
        // A drain is worth it only for a better outcome. In the best order,
        // once no node's change helps, none will; in name order, the next may.
        if !worth_a_drain(&simulate(demand, &offered_by(&state)), &after) {
            if greedy {
                break;
            }
            left.retain(|&j| j != i);
            continue;
        }
        // The node's GPU order is not known from Slurm: compare as multisets.
        let sorted = |w: &[String]| {
            let mut w = w.to_vec();
            w.sort();
            w
        };
        let changes = sorted(&words) != sorted(&state[i].1);
        state[i] = (nodes[i].name.clone(), words.clone(), offers);
        left.retain(|&j| j != i);
        steps.push(Step {
            node: nodes[i].name.clone(),
            gpus: words,
            changes,
            after,
        });
    }
    // A node whose plan is what it has needs no step.
    steps.retain(|s| s.changes);
    add("auto", offered_by(&state));
    let changes = steps.iter().any(|s| s.changes);
    Ok(Advice {
        setups,
        steps,
        changes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::advise::fleet::{split_into_gpus, GpuNow};
    use crate::mig::builtin;

    fn node(name: &str, gpus: Vec<GpuNow>) -> GpuNode {
        GpuNode {
            name: name.into(),
            model: Some(builtin::a100_40gb().model().to_string()),
            model_from: "test".into(),
            gpus,
            fixed: Vec::new(),
            geometry: Some(builtin::a100_40gb()),
        }
    }

    #[test]
    fn many_small_jobs_on_whole_gpus_get_sliced_and_wait_less() {
        // Two nodes of two whole A100s; 40 one-hour 1g.5gb jobs at once.
        let nodes = vec![
            node("n1", vec![GpuNow::Whole, GpuNow::Whole]),
            node("n2", vec![GpuNow::Whole, GpuNow::Whole]),
        ];
        let mut d = Demand::new();
        for _ in 0..40 {
            d.add("1g.5gb", 1, 3600);
        }
        let a = advise(&d, &nodes).unwrap();
        let get = |n: &str| a.setups.iter().find(|s| s.name == n).unwrap();
        // On whole GPUs the small jobs run four at a time: 10 hours of queue.
        assert_eq!(get("current").outcome.peak_concurrent, 4);
        assert_eq!(get("all-1g").outcome.peak_concurrent, 28);
        assert!(get("auto").outcome.mean_wait_s <= get("all-1g").outcome.mean_wait_s);
        assert!(get("auto").outcome.mean_wait_s < get("current").outcome.mean_wait_s / 3.0);
        assert!(a.changes);
        assert_eq!(a.steps.len(), 2);
        // The first step already helps: after it the wait is below the current one.
        assert!(a.steps[0].after.mean_wait_s < get("current").outcome.mean_wait_s);
    }

    #[test]
    fn a_fleet_already_cut_for_its_demand_needs_no_change() {
        let g = builtin::a100_40gb();
        let mut c = ProfileCounts::new();
        c.add("1g.5gb", 7);
        let gpu = GpuNow::Instances {
            counts: split_into_gpus(&g, &c).unwrap()[0].to_string(),
        };
        let nodes = vec![node("n1", vec![gpu])];
        let mut d = Demand::new();
        for _ in 0..7 {
            d.add("1g.5gb", 1, 3600);
        }
        let a = advise(&d, &nodes).unwrap();
        assert!(!a.changes, "{:?}", a.steps);
        let get = |n: &str| a.setups.iter().find(|s| s.name == n).unwrap();
        assert_eq!(get("current").outcome, get("auto").outcome);
    }

    #[test]
    fn a_job_is_planned_as_the_smallest_profile_of_the_model_that_holds_it() {
        let mut d = Demand::new();
        d.add("2g.10gb", 1, 60);
        d.add("1g.18gb", 1, 60); // an H200 profile: 16 GiB → 3g.20gb on an A100-40GB
        let seen = demand_for(&d, &builtin::a100_40gb());
        assert_eq!(seen.jobs("2g.10gb"), 1);
        assert_eq!(seen.jobs("3g.20gb"), 1);
    }
}
