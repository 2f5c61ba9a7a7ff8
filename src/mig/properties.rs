//! Property tests of the planner, layouts and `auto`, over the built-in geometries.

use proptest::prelude::*;

use super::auto::{plan_auto, Demand, LayoutCatalog};
use super::builtin;
use super::layout::{parse_gpu_layout, GpuLayout, ProfileCounts};
use super::planner::{check, diff, ExistingInstance, GpuChange, GpuPlan};
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
    fn auto_plans_are_valid(gpus in 1usize..9, jobs in prop::collection::vec(0u64..5000, 7)) {
        let g = builtin::h200();
        let catalog = LayoutCatalog::build(&g);
        let demand: Demand = g
            .profiles()
            .iter()
            .zip(&jobs)
            .map(|(p, n)| (p.name.clone(), *n))
            .collect();
        let cats = vec![&catalog; gpus];
        match plan_auto(&cats, &demand) {
            None => prop_assert!(demand.is_empty()),
            Some(plan) => {
                prop_assert_eq!(plan.gpus.len(), gpus);
                for p in &plan.gpus {
                    assert_plan_is_legal(p, &g);
                    prop_assert!(catalog.contains(&p.counts()));
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
