//! Property tests of the planner, layouts and `auto`, over the built-in geometries.

use proptest::prelude::*;

use std::cmp::Reverse;
use std::collections::HashMap;

use super::auto::plan_auto;
use super::builtin;
use super::catalog::LayoutCatalog;
use super::demand::{Demand, QueueCost};
use super::layout::{parse_gpu_layout, GpuLayout, ProfileCounts};
use super::planner::{check, diff, ExistingInstance, GpuChange, GpuPlan, GpuTarget};
use super::profile::GpuGeometry;

/// The invariants every emitted plan must keep on `g`.
fn assert_plan_is_legal(plan: &GpuPlan, g: &GpuGeometry) {
    let mut used = 0u32;
    let mut compute = 0u32;
    let half = g.memory_slices() / 2;
    let mut half_compute = Vec::new();
    for inst in &plan.instances {
        let p = g
            .profile(&inst.profile)
            .expect("plan uses the GPU's profiles");
        assert!(
            p.placement_starts.contains(&inst.start),
            "{inst:?} at an illegal start"
        );
        assert_eq!(inst.size, p.memory_slices);
        assert_eq!(inst.profile_id, p.id);
        let mask = p.mask_at(inst.start);
        assert_eq!(used & mask, 0, "{inst:?} overlaps in {plan:?}");
        used |= mask;
        compute += u32::from(p.compute_slices);
        if p.memory_slices == half {
            half_compute.push(p.compute_slices);
        }
    }
    assert!(compute <= u32::from(g.compute_slices()));
    if let [a, b] = half_compute.as_slice() {
        assert!(a + b < g.compute_slices(), "half rule broken in {plan:?}");
    }
    let sizes: Vec<u8> = plan.instances.iter().map(|i| i.size).collect();
    let mut sorted = sizes.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(sizes, sorted, "creation order is largest first");
}

fn geometry_and_counts() -> impl Strategy<Value = (GpuGeometry, ProfileCounts)> {
    (0..builtin::all().len()).prop_flat_map(|gi| {
        let g = builtin::all().swap_remove(gi);
        let ranges: Vec<_> = g
            .profiles()
            .iter()
            .map(|p| 0..=u32::from(p.max_instances) + 1)
            .collect();
        (Just(g), ranges).prop_map(|(g, ns)| {
            let counts: ProfileCounts = g
                .profiles()
                .iter()
                .zip(ns)
                .map(|(p, n)| (p.name.clone(), n))
                .collect();
            (g, counts)
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// Every accepted layout is placed legally; acceptance agrees with the catalog.
    #[test]
    fn placements_are_legal_and_agree_with_the_catalog((g, counts) in geometry_and_counts()) {
        let catalog = LayoutCatalog::build(&g);
        match check(&counts, &g) {
            Ok(plan) => {
                assert_plan_is_legal(&plan, &g);
                prop_assert_eq!(plan.counts(), counts.clone());
                prop_assert!(counts.is_empty() || catalog.contains(&counts));
            }
            Err(err) => {
                prop_assert_eq!(crate::error::exit_code_for(&err), 2);
                prop_assert!(
                    !catalog.contains(&counts),
                    "refused {} but the catalog has it: {:#}",
                    counts,
                    err
                );
            }
        }
    }

    /// Display then parse gives the same layout back.
    #[test]
    fn layouts_round_trip(
        items in prop::collection::vec((1u32..8, 1u32..200, 1u32..5, prop::bool::ANY), 0..6)
    ) {
        let counts: ProfileCounts = items
            .iter()
            .map(|(g, gb, n, me)| (format!("{g}g.{gb}gb{}", if *me { "+me" } else { "" }), *n))
            .collect();
        let layout = GpuLayout::Profiles(counts);
        let text = layout.to_string();
        prop_assert_eq!(parse_gpu_layout(&text).unwrap(), layout.clone());
        let words = [
            GpuLayout::Disabled,
            GpuLayout::AllSmallest,
            GpuLayout::Balanced,
            GpuLayout::Auto,
        ];
        for word in words {
            prop_assert_eq!(parse_gpu_layout(&word.to_string()).unwrap(), word);
        }
    }

    /// Applying a diff reaches the target; kept instances stay put; no change iff same profiles.
    #[test]
    fn diffs_reach_the_target(gi in 0usize..4, from in 0usize..10_000, to in 0usize..10_000) {
        let g = builtin::all().swap_remove(gi);
        let catalog = LayoutCatalog::build(&g);
        let current_plan = &catalog.layouts()[from % catalog.len()];
        let target = catalog.layouts()[to % catalog.len()].counts();
        let current: Vec<ExistingInstance> = current_plan
            .instances
            .iter()
            .enumerate()
            .map(|(i, inst)| ExistingInstance {
                profile: inst.profile.clone(),
                start: inst.start,
                gi_id: i as u32,
            })
            .collect();
        match diff(&current, &target, &g).unwrap() {
            GpuChange::Unchanged => prop_assert_eq!(current_plan.counts(), target),
            GpuChange::Reconfigure { destroy, keep, create } => {
                prop_assert_ne!(current_plan.counts(), target.clone());
                prop_assert_eq!(destroy.len() + keep.len(), current.len());
                let mut after: Vec<_> = keep
                    .iter()
                    .map(|k| {
                        let p = g.profile(&k.profile).unwrap();
                        super::planner::PlacedInstance {
                            profile: p.name.clone(),
                            profile_id: p.id,
                            start: k.start,
                            size: p.memory_slices,
                        }
                    })
                    .chain(create.iter().cloned())
                    .collect();
                after.sort_by_key(|i| (std::cmp::Reverse(i.size), i.start));
                let plan = GpuPlan { model: g.model().into(), instances: after };
                assert_plan_is_legal(&plan, &g);
                prop_assert_eq!(plan.counts(), target);
            }
        }
    }
}

proptest! {
    // Each case plans a whole node; fewer cases keep debug test runs short.
    #![proptest_config(ProptestConfig::with_cases(40))]

    /// `auto` gives every GPU one valid layout of its model.
    #[test]
    fn auto_plans_are_valid(gpus in 1usize..5, jobs in prop::collection::vec(0u64..200, 7)) {
        let g = builtin::h200();
        let catalog = LayoutCatalog::build(&g);
        let mut demand = Demand::new();
        for (p, n) in g.profiles().iter().zip(&jobs) {
            demand.add_jobs(&p.name, *n);
        }
        let cats = vec![&catalog; gpus];
        match plan_auto(&cats, &demand) {
            None => prop_assert!(demand.is_empty()),
            Some(plan) => {
                prop_assert_eq!(plan.gpus.len(), gpus);
                for t in &plan.gpus {
                    if let GpuTarget::Enabled(p) = t {
                        assert_plan_is_legal(p, &g);
                        prop_assert!(catalog.contains(&p.counts()));
                    }
                }
            }
        }
    }
}

fn counts(pairs: &[(&str, u32)]) -> ProfileCounts {
    pairs.iter().map(|(p, n)| (*p, *n)).collect()
}

/// Every per-GPU layout of mig-parted's shipped config that applies to our
/// models: `NVIDIA/mig-parted` `deployments/systemd/config-default.yaml`
/// (commit 1400787), the `all-*` entries for A100-40GB, A100-80GB/H100-80GB
/// and H200-141GB, including `all-enabled` (no instances) and `all-balanced`.
#[test]
fn mig_parted_default_layouts_are_all_accepted() {
    let a100_40 = [
        counts(&[]),
        counts(&[("1g.5gb", 7)]),
        counts(&[("1g.5gb+me", 1)]),
        counts(&[("2g.10gb", 3)]),
        counts(&[("3g.20gb", 2)]),
        counts(&[("4g.20gb", 1)]),
        counts(&[("7g.40gb", 1)]),
        counts(&[("1g.10gb", 4)]),
        counts(&[("1g.5gb", 2), ("2g.10gb", 1), ("3g.20gb", 1)]),
    ];
    let gb80 = [
        counts(&[]),
        counts(&[("1g.10gb", 7)]),
        counts(&[("1g.10gb+me", 1)]),
        counts(&[("1g.20gb", 4)]),
        counts(&[("2g.20gb", 3)]),
        counts(&[("3g.40gb", 2)]),
        counts(&[("4g.40gb", 1)]),
        counts(&[("7g.80gb", 1)]),
        counts(&[("1g.10gb", 2), ("2g.20gb", 1), ("3g.40gb", 1)]),
    ];
    let h200 = [
        counts(&[]),
        counts(&[("1g.18gb", 7)]),
        counts(&[("1g.18gb+me", 1)]),
        counts(&[("1g.35gb", 4)]),
        counts(&[("2g.35gb", 3)]),
        counts(&[("3g.71gb", 2)]),
        counts(&[("4g.71gb", 1)]),
        counts(&[("7g.141gb", 1)]),
        counts(&[("1g.18gb", 2), ("2g.35gb", 1), ("3g.71gb", 1)]),
    ];
    let cases: [(GpuGeometry, &[ProfileCounts]); 4] = [
        (builtin::a100_40gb(), &a100_40),
        (builtin::a100_80gb(), &gb80),
        (builtin::h100_80gb(), &gb80),
        (builtin::h200(), &h200),
    ];
    for (g, layouts) in cases {
        for c in layouts {
            let plan = check(c, &g).unwrap_or_else(|e| panic!("{} refused {c}: {e:#}", g.model()));
            assert_plan_is_legal(&plan, &g);
        }
    }
}

/// NVIDIA's curated valid A100-40GB geometries as listed by
/// `nebuly-ai/nos` `pkg/gpu/mig/known_configs.go` (12 entries) are all accepted.
#[test]
fn curated_a100_geometries_are_all_accepted() {
    let g = builtin::a100_40gb();
    let known = [
        counts(&[("7g.40gb", 1)]),
        counts(&[("4g.20gb", 1), ("2g.10gb", 1), ("1g.5gb", 1)]),
        counts(&[("4g.20gb", 1), ("1g.5gb", 3)]),
        counts(&[("3g.20gb", 2)]),
        counts(&[("3g.20gb", 1), ("2g.10gb", 1), ("1g.5gb", 1)]),
        counts(&[("3g.20gb", 1), ("1g.5gb", 3)]),
        counts(&[("2g.10gb", 2), ("3g.20gb", 1)]),
        counts(&[("2g.10gb", 1), ("1g.5gb", 2), ("3g.20gb", 1)]),
        counts(&[("2g.10gb", 3), ("1g.5gb", 1)]),
        counts(&[("2g.10gb", 2), ("1g.5gb", 3)]),
        counts(&[("2g.10gb", 1), ("1g.5gb", 5)]),
        counts(&[("1g.5gb", 7)]),
    ];
    for c in &known {
        assert_plan_is_legal(&check(c, &g).unwrap(), &g);
    }
}

/// One GPU as the brute force sees it: a layout's instance counts, or MIG off.
#[derive(Clone)]
enum Option_ {
    Mig(ProfileCounts, u32),
    Whole(String),
}

impl Option_ {
    /// Instances of each of `kinds`, and unused memory slices.
    fn project(&self, kinds: &[String]) -> (Vec<u32>, u32) {
        match self {
            Option_::Mig(counts, unused) => {
                (kinds.iter().map(|k| counts.get(k)).collect(), *unused)
            }
            Option_::Whole(t) => (kinds.iter().map(|k| u32::from(t == k)).collect(), 0),
        }
    }
}

/// `auto`'s objective, computed from the node's instance totals alone:
/// (jobs that never start, total wait), then more instances of demanded types,
/// then fewer unused memory slices.
type Value = (QueueCost, Reverse<u32>, u32);

struct Brute<'a> {
    demand: &'a Demand,
    kinds: Vec<String>,
    memo: HashMap<(usize, u32), QueueCost>,
}

impl Brute<'_> {
    fn value(&mut self, choice: &[&(Vec<u32>, u32)]) -> Value {
        let mut cost = QueueCost::default();
        let mut room = 0;
        let unused = choice.iter().map(|c| c.1).sum();
        for k in 0..self.kinds.len() {
            let kind = &self.kinds[k];
            let n: u32 = choice.iter().map(|c| c.0[k]).sum();
            room += n;
            let demand = self.demand;
            cost = cost
                + *self
                    .memo
                    .entry((k, n))
                    .or_insert_with(|| (0..=n).map(|m| demand.cost(kind, m)).min().unwrap());
        }
        (cost, Reverse(room), unused)
    }
}

fn options_of(cat: &LayoutCatalog) -> Vec<Option_> {
    let m = u32::from(cat.geometry().memory_slices());
    let mut out: Vec<Option_> = cat
        .layouts()
        .iter()
        .map(|p| Option_::Mig(p.counts(), m - u32::from(p.used_memory_slices())))
        .collect();
    if let Some(w) = cat.whole_type() {
        out.push(Option_::Whole(w.to_string()));
    }
    out
}

/// The best value over every combination of per-GPU options (cartesian product).
fn brute_force(cats: &[&LayoutCatalog], demand: &Demand) -> Value {
    let offered = |k: &str| {
        cats.iter()
            .any(|c| c.geometry().profile(k).is_some() || c.whole_type() == Some(k))
    };
    let kinds = demand
        .iter()
        .map(|(k, _)| k.to_string())
        .filter(|k| offered(k))
        .collect();
    let mut brute = Brute {
        demand,
        kinds,
        memo: HashMap::new(),
    };
    let options: Vec<Vec<(Vec<u32>, u32)>> = cats
        .iter()
        .map(|c| {
            options_of(c)
                .iter()
                .map(|o| o.project(&brute.kinds))
                .collect()
        })
        .collect();
    let mut idx = vec![0usize; cats.len()];
    let mut best: Option<Value> = None;
    loop {
        let choice: Vec<&(Vec<u32>, u32)> = idx.iter().zip(&options).map(|(&i, o)| &o[i]).collect();
        let v = brute.value(&choice);
        if best.as_ref().is_none_or(|b| v < *b) {
            best = Some(v);
        }
        let mut g = 0;
        loop {
            if g == idx.len() {
                return best.unwrap();
            }
            idx[g] += 1;
            if idx[g] < options[g].len() {
                break;
            }
            idx[g] = 0;
            g += 1;
        }
    }
}

/// The value of the plan `auto` chose, computed the brute force's way.
fn value_of_plan(cats: &[&LayoutCatalog], demand: &Demand, targets: &[GpuTarget]) -> Value {
    let offered = |k: &str| {
        cats.iter()
            .any(|c| c.geometry().profile(k).is_some() || c.whole_type() == Some(k))
    };
    let mut brute = Brute {
        demand,
        kinds: demand
            .iter()
            .map(|(k, _)| k.to_string())
            .filter(|k| offered(k))
            .collect(),
        memo: HashMap::new(),
    };
    let chosen: Vec<Option_> = cats
        .iter()
        .zip(targets)
        .map(|(c, t)| match t {
            GpuTarget::Enabled(p) => Option_::Mig(
                p.counts(),
                u32::from(c.geometry().memory_slices()) - u32::from(p.used_memory_slices()),
            ),
            GpuTarget::Disabled => Option_::Whole(c.whole_type().unwrap().to_string()),
        })
        .collect();
    let projected: Vec<(Vec<u32>, u32)> = chosen.iter().map(|o| o.project(&brute.kinds)).collect();
    let refs: Vec<&(Vec<u32>, u32)> = projected.iter().collect();
    brute.value(&refs)
}

/// A random queue over `kinds`: a few jobs per kind, some asking for two
/// instances, times from a minute to ten hours, some instances elsewhere.
fn random_demand(kinds: &[String], seed: u64) -> Demand {
    let mut state = seed | 1;
    let mut next = |m: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % m
    };
    let mut d = Demand::new();
    for k in kinds {
        if next(3) == 0 {
            continue;
        }
        for _ in 0..1 + next(12) {
            let count = if next(6) == 0 { 2 } else { 1 };
            let seconds = [60, 600, 3600, 4 * 3600, 10 * 3600][next(5) as usize];
            d.add(k, count, seconds);
        }
        if next(4) == 0 {
            for _ in 0..1 + next(3) {
                d.offer_elsewhere(k, [0, 1800, 7200][next(3) as usize]);
            }
        }
    }
    d
}

fn kinds_of(cats: &[&LayoutCatalog]) -> Vec<String> {
    let mut kinds: Vec<String> = cats
        .iter()
        .flat_map(|c| {
            c.geometry()
                .profiles()
                .iter()
                .map(|p| p.name.clone())
                .chain(c.whole_type().map(str::to_string))
                .collect::<Vec<_>>()
        })
        .collect();
    kinds.sort();
    kinds.dedup();
    kinds
}

/// `auto`'s programme against the brute force over every combination, on
/// random queues for nodes of one and two GPUs (one model, and mixed models).
/// 360 queues in all.
#[test]
fn auto_is_exact_against_brute_force() {
    let a40 = LayoutCatalog::build(&builtin::a100_40gb());
    let a80 = LayoutCatalog::build(&builtin::a100_80gb());
    let h200 = LayoutCatalog::build(&builtin::h200());
    let nodes: Vec<Vec<&LayoutCatalog>> = vec![
        vec![&a40],
        vec![&h200],
        vec![&a40, &a40],
        vec![&h200, &h200],
        vec![&a80, &a80],
        vec![&a40, &h200],
    ];
    let mut compared = 0;
    for (n, cats) in nodes.iter().enumerate() {
        let kinds = kinds_of(cats);
        for case in 0..60u64 {
            let demand = random_demand(&kinds, 0x9e37_79b9 ^ (n as u64) << 32 ^ case);
            let want = brute_force(cats, &demand);
            match plan_auto(cats, &demand) {
                None => assert!(
                    demand.iter().all(|(k, _)| !kinds.iter().any(|x| x == k)),
                    "no plan for {demand:?}"
                ),
                Some(plan) => {
                    let got = value_of_plan(cats, &demand, &plan.gpus);
                    assert_eq!(got, want, "node {n} case {case}: {demand:?}\n{plan:?}");
                    assert_eq!(plan.cost, want.0);
                    compared += 1;
                }
            }
        }
    }
    assert!(compared >= 300, "only {compared} queues compared");
}

/// The best value by a plain dynamic programme over the GPUs: every option of
/// every GPU, states merged by each type's instance count (capped where more
/// instances no longer lower that type's cost), the best tie keys kept per
/// state, no bound and no pruning. Independent of `auto`'s search; for nodes
/// too large for `brute_force` (eight GPUs).
fn plain_dp(cats: &[&LayoutCatalog], demand: &Demand) -> Value {
    let offered = |k: &str| {
        cats.iter()
            .any(|c| c.geometry().profile(k).is_some() || c.whole_type() == Some(k))
    };
    let kinds: Vec<String> = demand
        .iter()
        .map(|(k, _)| k.to_string())
        .filter(|k| offered(k))
        .collect();
    let options: Vec<Vec<(Vec<u32>, u32)>> = cats
        .iter()
        .map(|c| options_of(c).iter().map(|o| o.project(&kinds)).collect())
        .collect();
    // cost[k][n]: the best of 0..=n instances; constant from caps[k] on.
    let mut cost: Vec<Vec<QueueCost>> = Vec::new();
    let mut caps: Vec<u32> = Vec::new();
    for (k, kind) in kinds.iter().enumerate() {
        let most: u32 = options
            .iter()
            .map(|o| o.iter().map(|(c, _)| c[k]).max().unwrap_or(0))
            .sum();
        let mut table: Vec<QueueCost> = Vec::new();
        for n in 0..=most {
            let c = demand.cost(kind, n);
            table.push(table.last().map_or(c, |p: &QueueCost| c.min(*p)));
        }
        let last = *table.last().unwrap();
        caps.push(table.iter().position(|c| *c == last).unwrap() as u32);
        cost.push(table);
    }
    assert!(caps.iter().all(|&c| c < 256) && kinds.len() <= 8);
    let pack = |counts: &[u32]| -> u64 {
        counts
            .iter()
            .zip(&caps)
            .enumerate()
            .fold(0, |acc, (k, (&n, &cap))| {
                acc | u64::from(n.min(cap)) << (8 * k)
            })
    };
    type Ties = (Reverse<u32>, u32);
    let mut states: HashMap<u64, Ties> = HashMap::from([(0, (Reverse(0), 0))]);
    for gpu in &options {
        let mut next: HashMap<u64, Ties> = HashMap::new();
        for (&key, &(Reverse(room), unused)) in &states {
            let counts: Vec<u32> = (0..kinds.len())
                .map(|k| (key >> (8 * k) & 0xff) as u32)
                .collect();
            for (serves, free) in gpu {
                let sum: Vec<u32> = counts.iter().zip(serves).map(|(a, b)| a + b).collect();
                let ties = (Reverse(room + serves.iter().sum::<u32>()), unused + free);
                let slot = next.entry(pack(&sum)).or_insert(ties);
                *slot = (*slot).min(ties);
            }
        }
        states = next;
    }
    states
        .iter()
        .map(|(&key, &(room, unused))| {
            let c = (0..kinds.len()).fold(QueueCost::default(), |acc, k| {
                acc + cost[k][(key >> (8 * k) & 0xff) as usize]
            });
            (c, room, unused)
        })
        .min()
        .unwrap()
}

/// Issue 34, item 5: eight H200s and every one of the model's seven profiles
/// demanded (and the whole GPU in some queues): `auto` is proven exact and
/// agrees with the plain programme on every queue.
#[test]
fn auto_is_exact_on_eight_h200_with_seven_types() {
    let h200 = LayoutCatalog::build(&builtin::h200());
    let cats = vec![&h200; 8];
    let profiles: Vec<String> = builtin::h200()
        .profiles()
        .iter()
        .map(|p| p.name.clone())
        .collect();
    for case in 0..4u64 {
        let mut kinds = profiles.clone();
        if case % 3 == 0 {
            kinds.push("h200".into());
        }
        let mut demand = random_demand(&kinds, 0x5eed_0034 ^ case << 20);
        // random_demand leaves a type out now and then: all seven are demanded.
        for p in &profiles {
            if demand.jobs(p) == 0 {
                demand.add(p, 1, 3600);
            }
        }
        let want = plain_dp(&cats, &demand);
        let plan = plan_auto(&cats, &demand).unwrap();
        assert!(plan.exact, "case {case}: {demand:?}");
        let got = value_of_plan(&cats, &demand, &plan.gpus);
        assert_eq!(got, want, "case {case}: {demand:?}\n{plan:?}");
        assert_eq!(plan.cost, want.0);
    }
}
