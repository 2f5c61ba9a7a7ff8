//! Checking a MIG layout against a GPU's geometry before any hardware is touched,
//! placing its instances, and comparing a plan with the instances that exist.
//!
//! The placement model (see `docs/mig-layouts.md` §Placement rules):
//! 1. an instance of a profile covers `memory_slices` consecutive memory slices
//!    starting at one of the profile's legal starts, and no two instances overlap;
//! 2. instances of a profile are at most its `max_instances`, and their compute
//!    slices add up to at most the GPU's;
//! 3. **half rule**: two instances that each cover one whole half of the memory
//!    slices may not together use all compute slices. On A100/H100/H200 this
//!    refuses exactly `4g + 3g` (4 + 3 = 7 compute slices, memory 0–3 and 4–7),
//!    which NVML refuses with "Insufficient Resources" (`NVIDIA/mig-parted#29`,
//!    `NVIDIA/gpu-operator#622`) and which NVIDIA's list of valid A100
//!    combinations (and `nebuly-ai/nos` `known_configs.go`) leaves out, while
//!    `3g + 3g` (6 compute slices) is allowed. No slot model of memory and
//!    compute explains the refusal (4g takes compute 0–3, 3g at 4 takes 4–6),
//!    so the rule is stated directly, in terms NVML reports for any model.
//!
//! The search places the largest instances first and backtracks; it is complete,
//! so "no arrangement" means none exists under these rules.

use std::ops::ControlFlow;

use anyhow::Result;
use serde::Serialize;

use super::layout::{GpuLayout, ProfileCounts};
use super::profile::GpuGeometry;
use crate::error::invalid;
use crate::suggest::{did_you_mean, ticked_list};

/// One GPU instance of a plan: which profile, where.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct PlacedInstance {
    pub profile: String,
    /// NVML GPU-instance profile id, for `nvmlDeviceCreateGpuInstanceWithPlacement`.
    pub profile_id: u32,
    /// First memory slice.
    pub start: u8,
    /// Memory slices covered.
    pub size: u8,
}

/// The instances one GPU should have, in creation order (largest first).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuPlan {
    pub model: String,
    pub instances: Vec<PlacedInstance>,
}

impl GpuPlan {
    /// Instances per profile.
    pub fn counts(&self) -> ProfileCounts {
        self.instances
            .iter()
            .map(|i| (i.profile.as_str(), 1))
            .collect()
    }

    /// Memory slices covered by the plan.
    pub fn used_memory_slices(&self) -> u8 {
        self.instances.iter().map(|i| i.size).sum()
    }
}

/// What one GPU should become.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "mig", rename_all = "snake_case")]
pub enum GpuTarget {
    /// MIG mode off; the GPU is used whole.
    Disabled,
    /// MIG mode on with these instances.
    Enabled(GpuPlan),
}

/// Turn a GPU's layout into a checked target. `auto` is planned for the whole
/// node at once (`auto::plan_auto`) and is refused here.
pub fn plan_gpu(layout: &GpuLayout, geometry: &GpuGeometry) -> Result<GpuTarget> {
    let counts = match layout {
        GpuLayout::Disabled => return Ok(GpuTarget::Disabled),
        GpuLayout::Profiles(c) => c.clone(),
        GpuLayout::AllSmallest => all_smallest(geometry)?,
        GpuLayout::Balanced => balanced(geometry)?,
        GpuLayout::Auto => return Err(invalid(
            "layout `auto` is chosen from job demand for the whole node; plan it with plan_auto",
        )),
    };
    check(&counts, geometry).map(GpuTarget::Enabled)
}

/// `all-1g`: the smallest plain profile (1 compute slice, fewest memory slices) at its maximum count.
pub fn all_smallest(geometry: &GpuGeometry) -> Result<ProfileCounts> {
    let smallest = geometry
        .profiles()
        .iter()
        .filter(|p| !p.has_attributes())
        .min_by(|a, b| {
            (
                a.compute_slices,
                a.memory_slices,
                std::cmp::Reverse(a.max_instances),
                a.id,
            )
                .cmp(&(
                    b.compute_slices,
                    b.memory_slices,
                    std::cmp::Reverse(b.max_instances),
                    b.id,
                ))
        })
        .ok_or_else(|| {
            invalid(format!(
                "{} has no plain MIG profile for `all-1g`",
                geometry.model()
            ))
        })?;
    Ok(
        [(smallest.name.as_str(), u32::from(smallest.max_instances))]
            .into_iter()
            .collect(),
    )
}

/// `balanced`: mig-parted's `all-balanced` formula (`pkg/mig/builder/balanced.go`):
/// 2×1g + 1×2g + 1×3g on a 7-compute-slice GPU, 2×1g + 1×2g on a 4-slice one;
/// for each size the plain profile with the most instances (`1g.5gb`, not `1g.10gb`).
pub fn balanced(geometry: &GpuGeometry) -> Result<ProfileCounts> {
    let wanted: &[(u8, u32)] = match geometry.compute_slices() {
        7 => &[(1, 2), (2, 1), (3, 1)],
        4 => &[(1, 2), (2, 1)],
        n => {
            let model = geometry.model();
            return Err(invalid(format!(
                "no `balanced` layout is defined for {model} ({n} compute slices); give profiles instead"
            )));
        }
    };
    let mut counts = ProfileCounts::new();
    for &(g, n) in wanted {
        let p = geometry
            .profiles()
            .iter()
            .filter(|p| p.compute_slices == g && !p.has_attributes())
            .max_by(|a, b| {
                (
                    a.max_instances,
                    std::cmp::Reverse(a.memory_slices),
                    std::cmp::Reverse(a.id),
                )
                    .cmp(&(
                        b.max_instances,
                        std::cmp::Reverse(b.memory_slices),
                        std::cmp::Reverse(b.id),
                    ))
            })
            .ok_or_else(|| {
                invalid(format!(
                    "{} has no {g}g profile for the `balanced` layout",
                    geometry.model()
                ))
            })?;
        counts.add(&p.name, n);
    }
    Ok(counts)
}

/// Check `counts` against `geometry` and place every instance. The error (exit
/// status 2) says why the layout cannot exist on this GPU.
pub fn check(counts: &ProfileCounts, geometry: &GpuGeometry) -> Result<GpuPlan> {
    let model = geometry.model();
    let names = geometry.profile_names();
    let mut need = vec![0u8; geometry.profiles().len()];
    let mut unknown = Vec::new();
    for (name, n) in counts.iter() {
        match geometry.profile_index(name) {
            Some(i) => need[i] = u8::try_from(n).unwrap_or(u8::MAX),
            None => unknown.push(format!(
                "`{name}`{}",
                did_you_mean(name, names.iter().copied())
            )),
        }
    }
    if !unknown.is_empty() {
        return Err(invalid(format!(
            "{model} has no MIG profile {}; its profiles are {}",
            unknown.join(", "),
            ticked_list(names.iter().copied())
        )));
    }
    let profiles = geometry.profiles();
    let mut problems = Vec::new();
    for (p, &n) in profiles.iter().zip(&need) {
        if n > p.max_instances {
            problems.push(format!(
                "{n} × {} asked, but at most {} fit on one GPU",
                p.name, p.max_instances
            ));
        }
    }
    let (memory, compute) = totals(geometry, &need);
    let parts = |per: fn(&super::profile::Profile) -> u8| -> String {
        profiles
            .iter()
            .zip(&need)
            .filter(|(_, &n)| n > 0)
            .map(|(p, &n)| {
                let each = per(p);
                if n == 1 {
                    format!("{} = {each}", p.name)
                } else {
                    format!("{}×{n} = {}", p.name, u32::from(each) * u32::from(n))
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    if memory > u32::from(geometry.memory_slices()) {
        problems.push(format!(
            "needs {memory} memory slices ({}) but the GPU has {}",
            parts(|p| p.memory_slices),
            geometry.memory_slices()
        ));
    }
    if compute > u32::from(geometry.compute_slices()) {
        problems.push(format!(
            "needs {compute} compute slices ({}) but the GPU has {}",
            parts(|p| p.compute_slices),
            geometry.compute_slices()
        ));
    }
    if !problems.is_empty() {
        return Err(invalid(format!(
            "layout `{counts}` does not fit {model}: {}",
            problems.join("; ")
        )));
    }
    if let Some(starts) = place_first(geometry, &need, Rules::Hardware) {
        return Ok(make_plan(geometry, &need, &starts));
    }
    if place_first(geometry, &need, Rules::IntervalsOnly).is_some() {
        let pair = half_pair(geometry, &need);
        return Err(invalid(format!(
            "layout `{counts}` does not fit {model}: the slices would fit side by side, but the \
             hardware refuses {pair} on one GPU: two instances that each take half of the memory may not \
             together use all {} compute slices (NVML answers \"Insufficient Resources\"; see \
             docs/mig-layouts.md and NVIDIA/mig-parted#29)",
            geometry.compute_slices()
        )));
    }
    let rules: Vec<String> = profiles
        .iter()
        .zip(&need)
        .filter(|(_, &n)| n > 0)
        .map(|(p, _)| {
            let starts: Vec<String> = p.placement_starts.iter().map(u8::to_string).collect();
            format!(
                "{} covers {} slice{} from {{{}}}",
                p.name,
                p.memory_slices,
                if p.memory_slices == 1 { "" } else { "s" },
                starts.join(",")
            )
        })
        .collect();
    Err(invalid(format!(
        "layout `{counts}` does not fit {model}: it needs {memory} of {} memory slices, but no \
         arrangement puts every instance where its profile may start ({})",
        geometry.memory_slices(),
        rules.join("; ")
    )))
}

/// "4g.20gb together with 3g.20gb": the half-size profiles of a refused layout.
fn half_pair(geometry: &GpuGeometry, need: &[u8]) -> String {
    let half = geometry.memory_slices() / 2;
    let names: Vec<&str> = geometry
        .profiles()
        .iter()
        .zip(need)
        .filter(|(p, &n)| n > 0 && p.memory_slices == half)
        .map(|(p, _)| p.name.as_str())
        .collect();
    names.join(" together with ")
}

/// Total memory and compute slices of a count vector.
pub(crate) fn totals(geometry: &GpuGeometry, need: &[u8]) -> (u32, u32) {
    geometry
        .profiles()
        .iter()
        .zip(need)
        .fold((0, 0), |(m, c), (p, &n)| {
            (
                m + u32::from(p.memory_slices) * u32::from(n),
                c + u32::from(p.compute_slices) * u32::from(n),
            )
        })
}

/// Which placement rules a search applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rules {
    /// Intervals, legal starts, compute budget and the half rule.
    Hardware,
    /// Without the half rule, to explain a refusal.
    IntervalsOnly,
}

/// Instances to place, as profile indices, largest first (the geometry's order).
fn items_of(need: &[u8]) -> Vec<usize> {
    need.iter()
        .enumerate()
        .flat_map(|(i, &n)| std::iter::repeat_n(i, usize::from(n)))
        .collect()
}

/// Visit every placement of `items` (one start per item). Identical items are
/// placed at descending starts only, so each arrangement is visited once.
fn search(
    geometry: &GpuGeometry,
    items: &[usize],
    rules: Rules,
    visit: &mut dyn FnMut(&[u8]) -> ControlFlow<()>,
) -> ControlFlow<()> {
    let mut starts = Vec::with_capacity(items.len());
    descend(geometry, items, rules, 0, 0, &mut starts, visit)
}

fn descend(
    geometry: &GpuGeometry,
    items: &[usize],
    rules: Rules,
    used: u32,
    compute: u32,
    starts: &mut Vec<u8>,
    visit: &mut dyn FnMut(&[u8]) -> ControlFlow<()>,
) -> ControlFlow<()> {
    let k = starts.len();
    if k == items.len() {
        return visit(starts);
    }
    let profiles = geometry.profiles();
    let p = &profiles[items[k]];
    let compute = compute + u32::from(p.compute_slices);
    if compute > u32::from(geometry.compute_slices()) {
        return ControlFlow::Continue(());
    }
    let below = if k > 0 && items[k - 1] == items[k] {
        starts[k - 1]
    } else {
        u8::MAX
    };
    for &start in p.placement_starts.iter().rev() {
        if start >= below {
            continue;
        }
        let mask = p.mask_at(start);
        if used & mask != 0 {
            continue;
        }
        if rules == Rules::Hardware && breaks_half_rule(geometry, items, starts, items[k]) {
            continue;
        }
        starts.push(start);
        let flow = descend(geometry, items, rules, used | mask, compute, starts, visit);
        starts.pop();
        flow?;
    }
    ControlFlow::Continue(())
}

/// True when adding an instance of profile `new` next to the placed `items[..starts.len()]`
/// would pair two half-GPU instances that together use every compute slice.
fn breaks_half_rule(geometry: &GpuGeometry, items: &[usize], starts: &[u8], new: usize) -> bool {
    let m = geometry.memory_slices();
    if m % 2 != 0 {
        return false;
    }
    let half = m / 2;
    let profiles = geometry.profiles();
    let p = &profiles[new];
    if p.memory_slices != half {
        return false;
    }
    items[..starts.len()].iter().any(|&other| {
        let q = &profiles[other];
        q.memory_slices == half && p.compute_slices + q.compute_slices >= geometry.compute_slices()
    })
}

/// The first placement found, as one start per item of `items_of(need)`.
pub(crate) fn place_first(geometry: &GpuGeometry, need: &[u8], rules: Rules) -> Option<Vec<u8>> {
    let items = items_of(need);
    let mut found = None;
    let _ = search(geometry, &items, rules, &mut |starts| {
        found = Some(starts.to_vec());
        ControlFlow::Break(())
    });
    found
}

pub(crate) fn make_plan(geometry: &GpuGeometry, need: &[u8], starts: &[u8]) -> GpuPlan {
    let items = items_of(need);
    let profiles = geometry.profiles();
    let mut instances: Vec<(usize, PlacedInstance)> = items
        .iter()
        .zip(starts)
        .map(|(&i, &start)| {
            let p = &profiles[i];
            (
                i,
                PlacedInstance {
                    profile: p.name.clone(),
                    profile_id: p.id,
                    start,
                    size: p.memory_slices,
                },
            )
        })
        .collect();
    instances.sort_by_key(|(i, inst)| (*i, inst.start));
    GpuPlan {
        model: geometry.model().to_string(),
        instances: instances.into_iter().map(|(_, inst)| inst).collect(),
    }
}

// ---------------------------------------------------------------- diff

/// A GPU instance that exists now, as NVML reports it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct ExistingInstance {
    pub profile: String,
    /// First memory slice of its placement.
    pub start: u8,
    /// NVML GPU-instance id, for destroying it.
    pub gi_id: u32,
}

/// What to do to one GPU to reach its plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum GpuChange {
    /// The GPU already has the planned profiles: nothing to do.
    Unchanged,
    /// Destroy `destroy`, leave `keep` alone, then create `create` (in order).
    Reconfigure {
        destroy: Vec<ExistingInstance>,
        keep: Vec<ExistingInstance>,
        create: Vec<PlacedInstance>,
    },
}

/// Compare what a GPU has with what it should have.
///
/// A GPU matches when it has the same *multiset of profiles*, wherever they
/// sit: placements are the planner's choice, not the admin's, and moving an
/// instance would change its device files for nothing (mig-parted compares the
/// same way). Otherwise the target is placed so that as many existing
/// instances as possible stay where they are (same profile, same start); the
/// rest are destroyed and the missing ones created.
pub fn diff(
    current: &[ExistingInstance],
    target: &ProfileCounts,
    geometry: &GpuGeometry,
) -> Result<GpuChange> {
    let fresh = check(target, geometry)?;
    let have: ProfileCounts = current.iter().map(|i| (i.profile.as_str(), 1)).collect();
    if &have == target {
        return Ok(GpuChange::Unchanged);
    }
    let need = need_vector(target, geometry);
    let items = items_of(&need);
    let existing: Vec<(usize, u8)> = current
        .iter()
        .filter_map(|i| geometry.profile_index(&i.profile).map(|p| (p, i.start)))
        .collect();
    let mut best: Option<(usize, Vec<u8>)> = None;
    let _ = search(geometry, &items, Rules::Hardware, &mut |starts| {
        let kept = items
            .iter()
            .zip(starts)
            .filter(|&(&p, &s)| existing.contains(&(p, s)))
            .count();
        if best.as_ref().is_none_or(|(k, _)| kept > *k) {
            best = Some((kept, starts.to_vec()));
        }
        if kept == items.len() {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    });
    let plan = match best {
        Some((_, starts)) => make_plan(geometry, &need, &starts),
        None => fresh,
    };
    let mut keep = Vec::new();
    let mut destroy = Vec::new();
    let mut create = Vec::new();
    let mut claimed = vec![false; current.len()];
    for inst in &plan.instances {
        let found = current.iter().enumerate().position(|(j, c)| {
            !claimed[j]
                && c.start == inst.start
                && geometry.profile_index(&c.profile) == geometry.profile_index(&inst.profile)
        });
        match found {
            Some(j) => {
                claimed[j] = true;
                keep.push(current[j].clone());
            }
            None => create.push(inst.clone()),
        }
    }
    for (j, c) in current.iter().enumerate() {
        if !claimed[j] {
            destroy.push(c.clone());
        }
    }
    destroy.sort_by_key(|i| i.start);
    keep.sort_by_key(|i| i.start);
    Ok(GpuChange::Reconfigure {
        destroy,
        keep,
        create,
    })
}

/// Counts per profile index of a checked `ProfileCounts`.
fn need_vector(counts: &ProfileCounts, geometry: &GpuGeometry) -> Vec<u8> {
    let mut need = vec![0u8; geometry.profiles().len()];
    for (name, n) in counts.iter() {
        if let Some(i) = geometry.profile_index(name) {
            need[i] = u8::try_from(n).unwrap_or(u8::MAX);
        }
    }
    need
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::exit_code_for;
    use crate::mig::builtin;
    use crate::mig::layout::parse_gpu_layout;

    fn counts(s: &str) -> ProfileCounts {
        match parse_gpu_layout(s).unwrap() {
            GpuLayout::Profiles(c) => c,
            other => panic!("{other:?}"),
        }
    }

    fn err_of(s: &str, g: &GpuGeometry) -> String {
        let err = check(&counts(s), g).unwrap_err();
        assert_eq!(exit_code_for(&err), 2, "{s}");
        err.to_string()
    }

    #[test]
    fn balanced_and_all_1g_per_model() {
        let a = builtin::a100_40gb();
        assert_eq!(
            balanced(&a).unwrap().to_string(),
            "3g.20gb,2g.10gb,1g.5gb*2"
        );
        assert_eq!(all_smallest(&a).unwrap().to_string(), "1g.5gb*7");
        let h = builtin::h200();
        assert_eq!(
            balanced(&h).unwrap().to_string(),
            "3g.71gb,2g.35gb,1g.18gb*2"
        );
        assert_eq!(all_smallest(&h).unwrap().to_string(), "1g.18gb*7");
        assert_eq!(
            balanced(&builtin::a100_80gb()).unwrap().to_string(),
            "3g.40gb,2g.20gb,1g.10gb*2"
        );
    }

    #[test]
    fn balanced_places_3g_at_4_to_use_slice_7() {
        let a = builtin::a100_40gb();
        let plan = check(&balanced(&a).unwrap(), &a).unwrap();
        assert_eq!(plan.used_memory_slices(), 8);
        let three: Vec<u8> = plan
            .instances
            .iter()
            .filter(|i| i.profile == "3g.20gb")
            .map(|i| i.start)
            .collect();
        assert_eq!(three, [4]);
        assert_eq!(plan.instances[0].profile, "3g.20gb", "largest first");
    }

    #[test]
    fn four_g_with_three_g_is_refused_on_every_model_but_three_g_twice_is_fine() {
        for g in builtin::all() {
            let three = g
                .profiles()
                .iter()
                .find(|p| p.id == 9)
                .unwrap()
                .name
                .clone();
            let four = g
                .profiles()
                .iter()
                .find(|p| p.id == 5)
                .unwrap()
                .name
                .clone();
            let msg = err_of(&format!("{four},{three}"), &g);
            assert!(msg.contains("hardware refuses"), "{msg}");
            assert!(
                msg.contains(&format!("{four} together with {three}")),
                "{msg}"
            );
            assert!(check(&counts(&format!("{three}*2")), &g).is_ok());
            let two = g
                .profiles()
                .iter()
                .find(|p| p.id == 14)
                .unwrap()
                .name
                .clone();
            assert!(check(&counts(&format!("{four},{two}")), &g).is_ok());
        }
    }

    #[test]
    fn refusals_say_why() {
        let a = builtin::a100_40gb();
        let typo: ProfileCounts = [("1g.5g", 7)].into_iter().collect();
        let msg = check(&typo, &a).unwrap_err().to_string();
        assert!(msg.contains("did you mean `1g.5gb`"), "{msg}");
        assert!(msg.contains("its profiles are `7g.40gb`"), "{msg}");
        let msg = err_of("1g.18gb", &a);
        assert!(msg.contains("no MIG profile `1g.18gb`"), "{msg}");
        let msg = err_of("3g.21gb", &a);
        assert!(msg.contains("`3g.21gb`; did you mean `3g.20gb`?"), "{msg}");
        let msg = err_of("1g.5gb*8", &a);
        assert!(msg.contains("at most 7 fit"), "{msg}");
        let msg = err_of("3g.20gb*2,1g.5gb", &a);
        assert!(
            msg.contains("needs 9 memory slices (3g.20gb×2 = 8, 1g.5gb = 1) but the GPU has 8"),
            "{msg}"
        );
        let msg = err_of("2g.10gb*3,1g.5gb*2", &a);
        assert!(
            msg.contains("needs 8 compute slices (2g.10gb×3 = 6, 1g.5gb×2 = 2) but the GPU has 7"),
            "{msg}"
        );
        let msg = err_of("1g.5gb*7,1g.5gb+me", &a);
        assert!(msg.contains("8 compute slices"), "{msg}");
    }

    #[test]
    fn a_layout_that_adds_up_but_has_no_arrangement() {
        // On the built-in models every layout within the slice budgets can be
        // arranged except 4g + 3g; a geometry where 2g may not start at 6 shows
        // the placement explanation.
        let p = |name: &str, id, c, size, max, starts: &[u8]| crate::mig::Profile {
            name: name.into(),
            id,
            compute_slices: c,
            memory_slices: size,
            max_instances: max,
            memory_mib: 1024,
            sms: 10,
            placement_starts: starts.to_vec(),
        };
        let g = GpuGeometry::new(
            "test GPU",
            vec![
                p("8g.8gb", 0, 8, 8, 1, &[0]),
                p("2g.2gb", 14, 2, 2, 4, &[0, 2, 4]),
            ],
        )
        .unwrap();
        let msg = err_of("2g.2gb*4", &g);
        assert!(
            msg.contains("needs 8 of 8 memory slices, but no arrangement"),
            "{msg}"
        );
        assert!(msg.contains("2g.2gb covers 2 slices from {0,2,4}"), "{msg}");
    }

    #[test]
    fn plan_gpu_resolves_words() {
        let a = builtin::a100_40gb();
        assert_eq!(
            plan_gpu(&GpuLayout::Disabled, &a).unwrap(),
            GpuTarget::Disabled
        );
        let GpuTarget::Enabled(p) = plan_gpu(&GpuLayout::AllSmallest, &a).unwrap() else {
            panic!("all-1g is MIG")
        };
        let starts: Vec<u8> = p.instances.iter().map(|i| i.start).collect();
        assert_eq!(starts, [0, 1, 2, 3, 4, 5, 6]);
        assert!(plan_gpu(&GpuLayout::Auto, &a).is_err());
        let GpuTarget::Enabled(empty) =
            plan_gpu(&GpuLayout::Profiles(ProfileCounts::new()), &a).unwrap()
        else {
            panic!("enabled is MIG")
        };
        assert!(empty.instances.is_empty());
    }

    fn existing(spec: &[(&str, u8)]) -> Vec<ExistingInstance> {
        spec.iter()
            .enumerate()
            .map(|(i, (p, s))| ExistingInstance {
                profile: p.to_string(),
                start: *s,
                gi_id: i as u32 + 1,
            })
            .collect()
    }

    #[test]
    fn diff_is_idempotent_on_the_profile_multiset() {
        let a = builtin::a100_40gb();
        // Placed differently from what the planner would choose, same profiles.
        let now = existing(&[("3g.20gb", 0), ("2g.10gb", 4), ("1g.5gb", 6)]);
        let target = counts("3g.20gb,2g.10gb,1g.5gb");
        assert_eq!(diff(&now, &target, &a).unwrap(), GpuChange::Unchanged);
    }

    #[test]
    fn diff_keeps_what_it_can() {
        let a = builtin::a100_40gb();
        let now = existing(&[("3g.20gb", 0), ("2g.10gb", 4), ("1g.5gb", 6)]);
        let GpuChange::Reconfigure {
            destroy,
            keep,
            create,
        } = diff(&now, &counts("3g.20gb,1g.5gb*3"), &a).unwrap()
        else {
            panic!("layout differs")
        };
        assert_eq!(keep.len(), 2, "3g at 0 and 1g at 6 stay");
        assert_eq!(destroy, vec![now[1].clone()]);
        let starts: Vec<u8> = create.iter().map(|i| i.start).collect();
        assert_eq!(starts, [4, 5]);
    }

    #[test]
    fn diff_to_a_layout_that_cannot_keep_anything() {
        let a = builtin::a100_40gb();
        let now = existing(&[("1g.5gb", 0), ("1g.5gb", 1)]);
        let GpuChange::Reconfigure {
            destroy,
            keep,
            create,
        } = diff(&now, &counts("7g.40gb"), &a).unwrap()
        else {
            panic!("layout differs")
        };
        assert!(keep.is_empty());
        assert_eq!(destroy.len(), 2);
        assert_eq!(create.len(), 1);
        assert!(diff(&now, &counts("4g.20gb,3g.20gb"), &a).is_err());
    }
}
