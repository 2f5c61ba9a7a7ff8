//! What node-setup must do to each GPU, decided from the topology and the layout
//! alone (pure): MIG mode switches, instances to destroy and create, processes in
//! the way, and the gres.conf description of the node before and after.

use anyhow::{anyhow, Result};
use serde::Serialize;

use crate::gres::render::{gpu_type_name, GpuGres, GpuUsage, MigSlice, NodeGres};
use crate::mig::profile::normalize_profile_name;
use crate::mig::{
    builtin, diff, plan_gpu, ExistingInstance, GpuChange, GpuGeometry, GpuLayout, GpuTarget,
    Layout, PlacedInstance, PlacementInfo, ProfileInfo,
};
use crate::nvml::topology::{Gpu, Process, Topology};

/// What to do about a GPU's MIG mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "action")]
pub enum ModeAction {
    /// The mode is right (or the GPU has no MIG).
    Keep,
    /// Ask NVML for MIG mode `on`.
    Switch { on: bool },
    /// The wanted mode is already pending: only a GPU reset or a reboot makes it current.
    AwaitReset { on: bool },
}

/// One GPU's decision.
#[derive(Debug, Clone, Serialize)]
pub struct GpuDecision {
    pub index: u32,
    pub name: String,
    pub minor: u32,
    /// What the layout asks for: `None` when no layout entry selects the GPU (left alone).
    pub target: Option<GpuTarget>,
    pub mode: ModeAction,
    /// GPU instances to destroy (with their compute instances), lowest start first.
    pub destroy: Vec<ExistingInstance>,
    pub keep: Vec<ExistingInstance>,
    pub create: Vec<PlacedInstance>,
    /// Processes that the changes would disturb.
    pub busy: Vec<Process>,
    /// Notes for the admin (a MIG layout on a GPU without MIG, …).
    pub notes: Vec<String>,
}

impl GpuDecision {
    /// Nothing to change on this GPU.
    pub fn unchanged(&self) -> bool {
        self.mode == ModeAction::Keep && self.destroy.is_empty() && self.create.is_empty()
    }
}

/// The decision for the whole node.
#[derive(Debug, Clone, Serialize)]
pub struct NodeDecision {
    pub layout: String,
    pub gpus: Vec<GpuDecision>,
}

impl NodeDecision {
    /// No GPU needs a change.
    pub fn unchanged(&self) -> bool {
        self.gpus.iter().all(GpuDecision::unchanged)
    }

    /// Every process in the way of a change, with its GPU index.
    pub fn busy(&self) -> Vec<(u32, &Process)> {
        self.gpus
            .iter()
            .flat_map(|g| g.busy.iter().map(move |p| (g.index, p)))
            .collect()
    }
}

/// The MIG geometry of a GPU: from NVML's placements when MIG mode is on,
/// otherwise (NVML lists no placements then) from the built-in table of models.
pub fn geometry(gpu: &Gpu) -> Result<GpuGeometry> {
    let infos: Vec<ProfileInfo> = gpu
        .profiles
        .iter()
        .filter_map(|p| {
            let placements = p.placements.as_ref()?;
            Some(ProfileInfo {
                name: p.name.clone(),
                id: p.id,
                slice_count: p.slices,
                instance_count: p.instance_count,
                memory_mib: p.memory_mib,
                sms: p.multiprocessor_count,
                placements: placements
                    .iter()
                    .map(|pl| PlacementInfo {
                        start: pl.start,
                        size: pl.size,
                    })
                    .collect(),
            })
        })
        .collect();
    if infos.iter().any(|i| !i.placements.is_empty()) {
        return GpuGeometry::from_profile_infos(&gpu.name, &infos);
    }
    builtin::lookup(&gpu.name).ok_or_else(|| {
        anyhow!(
            "GPU {} ({}): MIG mode is off, so NVML lists no placements, and yolo-sched has no \
             built-in table for this model; turn MIG mode on first (`nvidia-smi -i {} -mig 1`, \
             then reset the GPU) and rerun",
            gpu.index,
            gpu.name,
            gpu.index
        )
    })
}

/// The GPU instances that exist on `gpu`, in the planner's terms. A GPU
/// instance without exactly one compute instance spanning it (left by an
/// interrupted run) is returned separately: it is always destroyed.
pub fn existing_instances(gpu: &Gpu) -> (Vec<ExistingInstance>, Vec<ExistingInstance>) {
    let mut complete = Vec::new();
    let mut incomplete = Vec::new();
    for gi in &gpu.gpu_instances {
        let inst = ExistingInstance {
            profile: normalize_profile_name(&gi.profile_name),
            start: u8::try_from(gi.placement.start).unwrap_or(u8::MAX),
            gi_id: gi.id,
        };
        let slices = gpu.profile_by_id(gi.profile_id).map(|p| p.slices);
        let full = gi.compute_instances.len() == 1
            && slices.is_none_or(|s| gi.compute_instances[0].slices == s);
        if full {
            complete.push(inst);
        } else {
            incomplete.push(inst);
        }
    }
    (complete, incomplete)
}

/// Decide every GPU against `layout`. `auto_plans` (from `plan_auto`, by GPU
/// index) stand in for `auto` entries. Impossible layouts are invalid-input
/// errors naming the GPU, with the planner's explanation.
pub fn decide(
    topology: &Topology,
    layout: &Layout,
    auto_plans: &[(u32, GpuTarget)],
) -> Result<NodeDecision> {
    let mut gpus = Vec::new();
    for gpu in &topology.gpus {
        let wanted = layout.for_gpu(gpu.index, &gpu.name)?;
        gpus.push(decide_gpu(gpu, wanted, auto_plans)?);
    }
    Ok(NodeDecision {
        layout: layout.name.clone(),
        gpus,
    })
}

fn decide_gpu(
    gpu: &Gpu,
    wanted: Option<&GpuLayout>,
    auto_plans: &[(u32, GpuTarget)],
) -> Result<GpuDecision> {
    let mut d = GpuDecision {
        index: gpu.index,
        name: gpu.name.clone(),
        minor: gpu.minor,
        target: None,
        mode: ModeAction::Keep,
        destroy: Vec::new(),
        keep: Vec::new(),
        create: Vec::new(),
        busy: Vec::new(),
        notes: Vec::new(),
    };
    let Some(wanted) = wanted else {
        d.notes
            .push("no layout entry selects this GPU; left as it is".into());
        return Ok(d);
    };
    let Some(mode) = gpu.mig_mode else {
        if *wanted != GpuLayout::Disabled {
            d.notes.push(format!(
                "this GPU has no MIG; layout `{wanted}` does not apply, it is used whole"
            ));
        }
        d.target = Some(GpuTarget::Disabled);
        return Ok(d);
    };
    let target = match wanted {
        GpuLayout::Auto => match auto_plans.iter().find(|(i, _)| *i == gpu.index) {
            Some((_, target)) => target.clone(),
            // `prepare` plans every `auto` GPU unless the node's other GPUs
            // serve all the demand: then this one has nothing to serve.
            None => {
                d.notes.push(
                    "layout `auto`: no pending job asks for a type this GPU can offer \
                     (the node's other GPUs serve them all); left as it is"
                        .into(),
                );
                return Ok(d);
            }
        },
        other => {
            let geo = geometry(gpu)?;
            plan_gpu(other, &geo)
                .map_err(|e| prefix_error(e, &format!("GPU {} ({})", gpu.index, gpu.name)))?
        }
    };
    let (complete, incomplete) = existing_instances(gpu);
    let want_on = matches!(target, GpuTarget::Enabled(_));
    d.mode = if mode.current == want_on && mode.pending == want_on {
        ModeAction::Keep
    } else if mode.current != want_on && mode.pending == want_on {
        ModeAction::AwaitReset { on: want_on }
    } else {
        ModeAction::Switch { on: want_on }
    };
    match &target {
        GpuTarget::Disabled => {
            d.destroy = complete.into_iter().chain(incomplete).collect();
        }
        GpuTarget::Enabled(plan) => {
            if !mode.current {
                // Nothing can exist while MIG is off: create the whole plan.
                d.create = plan.instances.clone();
            } else {
                let geo = geometry(gpu)?;
                match diff(&complete, &plan.counts(), &geo)
                    .map_err(|e| prefix_error(e, &format!("GPU {} ({})", gpu.index, gpu.name)))?
                {
                    GpuChange::Unchanged => d.keep = complete,
                    GpuChange::Reconfigure {
                        destroy,
                        keep,
                        create,
                    } => {
                        d.destroy = destroy;
                        d.keep = keep;
                        d.create = create;
                    }
                }
                d.destroy.extend(incomplete);
                d.destroy.sort_by_key(|i| i.start);
            }
        }
    }
    d.target = Some(target);
    if !d.unchanged() {
        let destroyed: Vec<u32> = d.destroy.iter().map(|i| i.gi_id).collect();
        let mode_changes = d.mode != ModeAction::Keep;
        d.busy = gpu
            .processes
            .iter()
            .filter(|p| match p.gpu_instance_id {
                Some(gi) => mode_changes || destroyed.contains(&gi),
                None => true,
            })
            .cloned()
            .collect();
    }
    Ok(d)
}

/// Keep an invalid-input error invalid while naming where it happened.
fn prefix_error(err: anyhow::Error, what: &str) -> anyhow::Error {
    let invalid = err
        .chain()
        .any(|c| c.downcast_ref::<crate::error::InvalidInput>().is_some());
    if invalid {
        crate::error::invalid(format!("{what}: {err:#}"))
    } else {
        err.context(what.to_string())
    }
}

/// The GPU-instance id the driver gives an instance at `start` of `size` memory
/// slices out of `total`: its node number in a binary tree over the slices (0 the
/// whole GPU, 1–2 halves, 3–6 quarters, 7–14 eighths), as A100/H100 drivers do.
/// Used only to predict the gres.conf of a dry run.
pub fn predicted_gi_id(start: u8, size: u8, total: u8) -> u32 {
    let size = size.max(1);
    let per_level = u32::from(total / size).max(1);
    per_level - 1 + u32::from(start / size)
}

/// The node's GRES as the GPUs are now.
pub fn gres_now(node: &str, topology: &Topology) -> NodeGres {
    NodeGres {
        node: node.to_string(),
        gpus: topology
            .gpus
            .iter()
            .map(|gpu| GpuGres {
                minor: gpu.minor,
                cores: cpu_list(&gpu.cpu_affinity),
                usage: if gpu.mig_enabled() {
                    let mut slices = Vec::new();
                    for gi in &gpu.gpu_instances {
                        for ci in &gi.compute_instances {
                            slices.push(MigSlice {
                                profile: normalize_profile_name(&gi.profile_name),
                                gi_id: gi.id,
                                ci_id: ci.id,
                            });
                        }
                    }
                    GpuUsage::Mig { slices }
                } else {
                    GpuUsage::Whole {
                        gpu_type: gpu_type_name(&gpu.name),
                        shards: None,
                    }
                },
            })
            .collect(),
    }
}

/// The node's GRES as it will be once `decision` is applied, with GPU-instance
/// ids predicted for the instances still to be created.
pub fn gres_planned(node: &str, topology: &Topology, decision: &NodeDecision) -> NodeGres {
    let mut gres = gres_now(node, topology);
    for (gpu, d) in topology.gpus.iter().zip(&decision.gpus) {
        let Some(target) = &d.target else { continue };
        let Some(entry) = gres.gpus.iter_mut().find(|g| g.minor == gpu.minor) else {
            continue;
        };
        entry.usage = match target {
            GpuTarget::Disabled => GpuUsage::Whole {
                gpu_type: gpu_type_name(&gpu.name),
                shards: None,
            },
            GpuTarget::Enabled(_) => {
                let total = geometry(gpu).map(|g| g.memory_slices()).unwrap_or(8);
                let mut slices: Vec<MigSlice> = d
                    .keep
                    .iter()
                    .map(|k| MigSlice {
                        profile: k.profile.clone(),
                        gi_id: k.gi_id,
                        ci_id: 0,
                    })
                    .collect();
                slices.extend(d.create.iter().map(|c| MigSlice {
                    profile: c.profile.clone(),
                    gi_id: predicted_gi_id(c.start, c.size, total),
                    ci_id: 0,
                }));
                GpuUsage::Mig { slices }
            }
        };
    }
    gres
}

/// `0-15,32-47` from a list of CPU numbers; `None` when empty.
pub fn cpu_list(cpus: &[u32]) -> Option<String> {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut parts: Vec<String> = Vec::new();
    let mut iter = sorted.into_iter().peekable();
    while let Some(first) = iter.next() {
        let mut last = first;
        while iter.peek() == Some(&(last + 1)) {
            last = iter.next().unwrap_or(last);
        }
        parts.push(if first == last {
            first.to_string()
        } else {
            format!("{first}-{last}")
        });
    }
    (!parts.is_empty()).then(|| parts.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::exit_code_for;
    use crate::mig::layout::parse_gpu_layout;
    use crate::nvml::topology::{ComputeInstance, GpuInstance, MigMode, Placement};

    const A100: &str = "NVIDIA A100-SXM4-40GB";

    fn gpu(mode: Option<(bool, bool)>, instances: &[(&str, u32, u32, u32, usize)]) -> Gpu {
        Gpu {
            index: 0,
            name: A100.into(),
            uuid: "GPU-0".into(),
            minor: 3,
            pci_bus_id: None,
            memory_mib: 40960,
            mig_capable: mode.is_some(),
            mig_mode: mode.map(|(current, pending)| MigMode { current, pending }),
            profiles: Vec::new(),
            gpu_instances: instances
                .iter()
                .map(|&(name, id, start, size, cis)| GpuInstance {
                    id,
                    profile_id: 0,
                    profile_name: format!("MIG {name}"),
                    placement: Placement { start, size },
                    compute_instances: (0..cis)
                        .map(|c| ComputeInstance {
                            id: c as u32,
                            profile_id: 0,
                            profile_name: name.into(),
                            slices: 1,
                            placement: Placement { start: 0, size: 1 },
                            uuid: None,
                            device_name: None,
                        })
                        .collect(),
                })
                .collect(),
            processes: Vec::new(),
            cpu_affinity: vec![0, 1, 2, 3, 8],
        }
    }

    fn topo(g: Gpu) -> Topology {
        Topology {
            driver_version: None,
            gpus: vec![g],
        }
    }

    fn layout(s: &str) -> Layout {
        Layout::uniform(parse_gpu_layout(s).unwrap())
    }

    #[test]
    fn mig_off_gpu_is_switched_on_and_gets_the_whole_plan() {
        let d = decide(
            &topo(gpu(Some((false, false)), &[])),
            &layout("1g.5gb*7"),
            &[],
        )
        .unwrap();
        let g = &d.gpus[0];
        assert_eq!(g.mode, ModeAction::Switch { on: true });
        assert_eq!(g.create.len(), 7);
        assert!(g.destroy.is_empty());
        assert!(!d.unchanged());
    }

    #[test]
    fn matching_instances_are_unchanged_and_others_are_diffed() {
        let t = topo(gpu(
            Some((true, true)),
            &[
                ("3g.20gb", 2, 4, 4, 1),
                ("2g.10gb", 4, 2, 2, 1),
                ("1g.5gb", 7, 0, 1, 1),
                ("1g.5gb", 8, 1, 1, 1),
            ],
        ));
        assert!(decide(&t, &layout("3g.20gb,2g.10gb,1g.5gb*2"), &[])
            .unwrap()
            .unchanged());
        let d = decide(&t, &layout("3g.20gb,1g.5gb*4"), &[]).unwrap();
        let g = &d.gpus[0];
        assert_eq!(g.mode, ModeAction::Keep);
        assert_eq!(
            g.destroy.iter().map(|i| i.gi_id).collect::<Vec<_>>(),
            vec![4]
        );
        assert_eq!(g.create.len(), 2);
        assert_eq!(g.keep.len(), 3);
    }

    #[test]
    fn an_instance_without_its_compute_instance_is_destroyed() {
        let t = topo(gpu(
            Some((true, true)),
            &[("1g.5gb", 7, 0, 1, 1), ("1g.5gb", 8, 1, 1, 0)],
        ));
        let d = decide(&t, &layout("1g.5gb*2"), &[]).unwrap();
        let g = &d.gpus[0];
        assert_eq!(
            g.destroy.iter().map(|i| i.gi_id).collect::<Vec<_>>(),
            vec![8]
        );
        assert_eq!(g.create.len(), 1);
    }

    #[test]
    fn disabling_destroys_everything_and_switches_off() {
        let t = topo(gpu(Some((true, true)), &[("7g.40gb", 0, 0, 8, 1)]));
        let g = &decide(&t, &layout("disabled"), &[]).unwrap().gpus[0];
        assert_eq!(g.mode, ModeAction::Switch { on: false });
        assert_eq!(g.destroy.len(), 1);
    }

    #[test]
    fn a_pending_mode_awaits_a_reset() {
        let t = topo(gpu(Some((false, true)), &[]));
        let g = &decide(&t, &layout("1g.5gb*7"), &[]).unwrap().gpus[0];
        assert_eq!(g.mode, ModeAction::AwaitReset { on: true });
    }

    #[test]
    fn processes_in_instances_to_destroy_are_busy_others_are_not() {
        let mut g = gpu(
            Some((true, true)),
            &[("3g.20gb", 2, 4, 4, 1), ("4g.20gb", 1, 0, 4, 1)],
        );
        g.processes = vec![Process {
            pid: 7,
            used_memory_mib: Some(100),
            gpu_instance_id: Some(2),
            compute_instance_id: Some(0),
        }];
        let t = topo(g);
        // The 4g.20gb goes; the busy 3g stays.
        let keep = decide(&t, &layout("3g.20gb,2g.10gb"), &[]).unwrap();
        assert!(keep.busy().is_empty());
        let gone = decide(&t, &layout("1g.5gb*7"), &[]).unwrap();
        assert_eq!(gone.busy().len(), 1);
        assert_eq!(gone.busy()[0].1.pid, 7);
    }

    #[test]
    fn impossible_layouts_are_invalid_input_naming_the_gpu() {
        let t = topo(gpu(Some((false, false)), &[]));
        let err = decide(&t, &layout("4g.20gb,3g.20gb"), &[]).unwrap_err();
        assert_eq!(exit_code_for(&err), 2);
        assert!(
            err.to_string().starts_with("GPU 0 (NVIDIA A100-SXM4-40GB)"),
            "{err}"
        );
    }

    #[test]
    fn non_mig_gpu_is_used_whole_whatever_the_layout() {
        let mut g = gpu(None, &[]);
        g.name = "Tesla V100-SXM2-16GB".into();
        let d = decide(&topo(g), &layout("1g.5gb*7"), &[]).unwrap();
        assert!(d.unchanged());
        assert_eq!(d.gpus[0].target, Some(GpuTarget::Disabled));
        assert!(!d.gpus[0].notes.is_empty());
    }

    #[test]
    fn planned_gres_predicts_gi_ids_by_placement() {
        assert_eq!(predicted_gi_id(0, 8, 8), 0);
        assert_eq!(predicted_gi_id(4, 4, 8), 2);
        assert_eq!(predicted_gi_id(2, 2, 8), 4);
        assert_eq!(predicted_gi_id(6, 1, 8), 13);
        let t = topo(gpu(Some((false, false)), &[]));
        let d = decide(&t, &layout("3g.20gb,2g.10gb,1g.5gb*2"), &[]).unwrap();
        let gres = gres_planned("n1", &t, &d);
        let GpuUsage::Mig { slices } = &gres.gpus[0].usage else {
            panic!("not MIG: {gres:?}")
        };
        let mut ids: Vec<u32> = slices.iter().map(|s| s.gi_id).collect();
        ids.sort_unstable();
        assert_eq!(ids, vec![2, 4, 7, 8]);
        assert_eq!(gres.gpus[0].minor, 3);
        assert_eq!(gres.gpus[0].cores.as_deref(), Some("0-3,8"));
    }

    #[test]
    fn cpu_lists_compress_to_ranges() {
        assert_eq!(cpu_list(&[]), None);
        assert_eq!(cpu_list(&[5]).as_deref(), Some("5"));
        assert_eq!(
            cpu_list(&[3, 0, 1, 2, 32, 33]).as_deref(),
            Some("0-3,32-33")
        );
    }
}
