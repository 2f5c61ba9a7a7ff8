//! What the node's GPUs look like now, read through NVML: every GPU with its MIG
//! mode, the GPU instance profiles it offers and their placements, the GPU and
//! compute instances that exist, and the processes running. GPUs without MIG are
//! listed as whole GPUs. The result serializes to JSON (`node-setup --show --json`).

use anyhow::{Context, Result};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};
use nvml_wrapper_sys::bindings::{
    NVML_COMPUTE_INSTANCE_PROFILE_COUNT, NVML_GPU_INSTANCE_PROFILE_COUNT,
};
use serde::{Deserialize, Serialize};

use super::raw;

const MIB: u64 = 1024 * 1024;
/// Words of CPU mask asked for: 64 × 64 = 4096 logical CPUs.
const CPU_MASK_WORDS: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topology {
    pub driver_version: Option<String>,
    pub gpus: Vec<Gpu>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gpu {
    /// NVML index (not the `/dev/nvidia` minor).
    pub index: u32,
    pub name: String,
    pub uuid: String,
    /// `/dev/nvidia<minor>`.
    pub minor: u32,
    pub pci_bus_id: Option<String>,
    pub memory_mib: u64,
    pub mig_capable: bool,
    /// `None` on GPUs without MIG.
    pub mig_mode: Option<MigMode>,
    /// GPU instance profiles, smallest first; empty without MIG.
    pub profiles: Vec<GpuInstanceProfile>,
    /// Instances that exist now (only while MIG mode is on), by id.
    pub gpu_instances: Vec<GpuInstance>,
    pub processes: Vec<Process>,
    /// Logical CPUs close to the GPU; empty when NVML does not say.
    pub cpu_affinity: Vec<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigMode {
    pub current: bool,
    /// What `current` becomes after a GPU reset or reboot.
    pub pending: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuInstanceProfile {
    /// The id GPU instances are created with (19 for 1g.5gb on A100).
    pub id: u32,
    /// The `NVML_GPU_INSTANCE_PROFILE_*` index it was read with.
    pub index: u32,
    /// Without NVML's "MIG " prefix: "1g.5gb", "1g.5gb+me", "7g.40gb".
    pub name: String,
    /// Compute slices.
    pub slices: u32,
    /// How many instances of it fit on an empty GPU.
    pub instance_count: u32,
    pub memory_mib: u64,
    pub multiprocessor_count: u32,
    /// Where instances may start, in memory slices. `None` when NVML does not
    /// answer, which is the case while MIG mode is off.
    pub placements: Option<Vec<Placement>>,
}

/// Memory slices `start .. start + size` (defined beside the FFI calls that
/// return it, so `raw` needs nothing from this module: no import cycle).
pub use super::raw::Placement;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuInstance {
    pub id: u32,
    pub profile_id: u32,
    pub profile_name: String,
    pub placement: Placement,
    pub compute_instances: Vec<ComputeInstance>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ComputeInstance {
    pub id: u32,
    pub profile_id: u32,
    /// "3g.20gb" for one spanning its GPU instance, "1c.3g.20gb" for a part.
    pub profile_name: String,
    pub slices: u32,
    /// Compute slices inside the GPU instance.
    pub placement: Placement,
    /// The MIG device's UUID ("MIG-…"), as CUDA_VISIBLE_DEVICES takes it.
    pub uuid: Option<String>,
    /// The MIG device's name, e.g. "NVIDIA A100-SXM4-40GB MIG 1g.5gb".
    pub device_name: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Process {
    pub pid: u32,
    pub used_memory_mib: Option<u64>,
    /// Set when the process runs in a MIG device.
    pub gpu_instance_id: Option<u32>,
    pub compute_instance_id: Option<u32>,
}

impl Topology {
    /// Read every GPU. Errors name the GPU and what was being read.
    pub fn read(nvml: &Nvml) -> Result<Topology> {
        let count = nvml.device_count().context("counting GPUs")?;
        let gpus = (0..count)
            .map(|i| read_gpu(nvml, i).with_context(|| format!("reading GPU {i}")))
            .collect::<Result<Vec<_>>>()?;
        Ok(Topology {
            driver_version: nvml.sys_driver_version().ok(),
            gpus,
        })
    }

    pub fn gpu(&self, index: u32) -> Option<&Gpu> {
        self.gpus.iter().find(|g| g.index == index)
    }
}

impl Gpu {
    /// MIG mode is on now (not just pending).
    pub fn mig_enabled(&self) -> bool {
        self.mig_mode.is_some_and(|m| m.current)
    }

    pub fn profile_by_name(&self, name: &str) -> Option<&GpuInstanceProfile> {
        self.profiles.iter().find(|p| p.name == name)
    }

    pub fn profile_by_id(&self, id: u32) -> Option<&GpuInstanceProfile> {
        self.profiles.iter().find(|p| p.id == id)
    }
}

fn read_gpu(nvml: &Nvml, index: u32) -> Result<Gpu> {
    let device = nvml.device_by_index(index).context("getting its handle")?;
    let name = device.name().context("reading its name")?;
    let uuid = device.uuid().context("reading its UUID")?;
    let minor = device.minor_number().context("reading its minor number")?;
    let memory_mib = device.memory_info().context("reading its memory")?.total / MIB;
    let pci_bus_id = device.pci_info().ok().map(|p| p.bus_id);
    let mig_mode = match device.mig_mode() {
        Ok(m) => Some(MigMode {
            current: m.current == 1,
            pending: m.pending == 1,
        }),
        Err(NvmlError::NotSupported | NvmlError::FailedToLoadSymbol(_)) => None,
        Err(e) => return Err(e).context("reading its MIG mode"),
    };
    let profiles = if mig_mode.is_some() {
        read_profiles(&device).context("reading its MIG profiles")?
    } else {
        Vec::new()
    };
    let gpu_instances = if mig_mode.is_some_and(|m| m.current) {
        read_instances(&device, &profiles).context("reading its MIG instances")?
    } else {
        Vec::new()
    };
    Ok(Gpu {
        index,
        name,
        uuid,
        minor,
        pci_bus_id,
        memory_mib,
        mig_capable: mig_mode.is_some(),
        mig_mode,
        profiles,
        gpu_instances,
        processes: read_processes(&device).context("listing its processes")?,
        cpu_affinity: read_cpu_affinity(&device),
    })
}

/// Profile indices a GPU does not have answer NotSupported; old drivers answer
/// InvalidArg for indices newer than they are.
fn absent(e: &NvmlError) -> bool {
    matches!(e, NvmlError::NotSupported | NvmlError::InvalidArg)
}

fn read_profiles(device: &Device) -> Result<Vec<GpuInstanceProfile>> {
    let mut profiles: Vec<GpuInstanceProfile> = Vec::new();
    for index in 0..NVML_GPU_INSTANCE_PROFILE_COUNT {
        let info = match raw::gpu_instance_profile(device, index) {
            Ok(info) => info,
            Err(e) if absent(&e) => continue,
            Err(e) => return Err(e).with_context(|| format!("profile index {index}")),
        };
        if profiles.iter().any(|p| p.id == info.id) {
            continue;
        }
        let placements = match raw::possible_placements(device, info.id) {
            Ok(p) => Some(p),
            Err(NvmlError::NotSupported) => None,
            Err(e) => return Err(e).with_context(|| format!("placements of profile {}", info.id)),
        };
        profiles.push(GpuInstanceProfile {
            id: info.id,
            index,
            name: profile_name(info.name.as_deref(), info.slice_count, info.memory_mib),
            slices: info.slice_count,
            instance_count: info.instance_count,
            memory_mib: info.memory_mib,
            multiprocessor_count: info.multiprocessor_count,
            placements,
        });
    }
    profiles.sort_by_key(|p| (p.slices, p.memory_mib, p.id));
    Ok(profiles)
}

/// NVML's name without "MIG "; drivers without names get Slurm's fallback form
/// `<slices>g.<GiB rounded up>gb`.
fn profile_name(nvml_name: Option<&str>, slices: u32, memory_mib: u64) -> String {
    match nvml_name {
        Some(n) => n.strip_prefix("MIG ").unwrap_or(n).to_string(),
        None => format!("{slices}g.{}gb", memory_mib.div_ceil(1024)),
    }
}

fn read_instances(device: &Device, profiles: &[GpuInstanceProfile]) -> Result<Vec<GpuInstance>> {
    let mig_ids = read_mig_devices(device)?;
    let mut instances = Vec::new();
    for profile in profiles {
        let handles = raw::gpu_instances(device, profile.id, profile.instance_count)
            .with_context(|| format!("GPU instances of profile {}", profile.name))?;
        for gi in handles {
            let info = gi.info().context("GPU instance info")?;
            let mut compute_instances = Vec::new();
            for ci_index in 0..NVML_COMPUTE_INSTANCE_PROFILE_COUNT {
                let ci_profile = match gi.compute_instance_profile(ci_index) {
                    Ok(p) => p,
                    Err(e) if absent(&e) => continue,
                    Err(e) => {
                        return Err(e).with_context(|| {
                            format!("compute profile {ci_index} of GPU instance {}", info.id)
                        })
                    }
                };
                let handles = gi
                    .compute_instances(ci_profile.id, ci_profile.instance_count)
                    .with_context(|| format!("compute instances of GPU instance {}", info.id))?;
                for ci in handles {
                    let ci_info = ci.info().context("compute instance info")?;
                    let device_info = mig_ids.iter().find(|m| m.ids == (info.id, ci_info.id));
                    compute_instances.push(ComputeInstance {
                        id: ci_info.id,
                        profile_id: ci_info.profile_id,
                        profile_name: ci_profile_name(
                            ci_profile.name.as_deref(),
                            ci_profile.slice_count,
                            profile,
                        ),
                        slices: ci_profile.slice_count,
                        placement: ci_info.placement,
                        uuid: device_info.map(|m| m.uuid.clone()),
                        device_name: device_info.map(|m| m.name.clone()),
                    });
                }
            }
            compute_instances.sort_by_key(|c| c.id);
            instances.push(GpuInstance {
                id: info.id,
                profile_id: info.profile_id,
                profile_name: profile.name.clone(),
                placement: info.placement,
                compute_instances,
            });
        }
    }
    instances.sort_by_key(|g| g.id);
    Ok(instances)
}

fn ci_profile_name(nvml_name: Option<&str>, slices: u32, gi: &GpuInstanceProfile) -> String {
    match nvml_name {
        Some(n) => n.strip_prefix("MIG ").unwrap_or(n).to_string(),
        None if slices == gi.slices => gi.name.clone(),
        None => format!("{slices}c.{}", gi.name),
    }
}

struct MigDeviceIds {
    ids: (u32, u32),
    uuid: String,
    name: String,
}

/// The MIG devices (one per compute instance) with their GPU/compute instance ids.
fn read_mig_devices(device: &Device) -> Result<Vec<MigDeviceIds>> {
    let max = device
        .mig_device_count()
        .context("counting MIG device slots")?;
    let mut found = Vec::new();
    for slot in 0..max {
        let mig = match device.mig_device_by_index(slot) {
            Ok(m) => m,
            Err(NvmlError::NotFound) => continue,
            Err(e) => return Err(e).with_context(|| format!("MIG device {slot}")),
        };
        found.push(MigDeviceIds {
            ids: raw::mig_device_ids(&mig).with_context(|| format!("ids of MIG device {slot}"))?,
            uuid: mig
                .uuid()
                .with_context(|| format!("UUID of MIG device {slot}"))?,
            name: mig
                .name()
                .with_context(|| format!("name of MIG device {slot}"))?,
        });
    }
    Ok(found)
}

fn read_processes(device: &Device) -> Result<Vec<Process>> {
    let list = match device.running_compute_processes() {
        Ok(list) => list,
        Err(NvmlError::NotSupported) => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    Ok(list
        .into_iter()
        .map(|p| Process {
            pid: p.pid,
            used_memory_mib: match p.used_gpu_memory {
                UsedGpuMemory::Used(bytes) => Some(bytes / MIB),
                UsedGpuMemory::Unavailable => None,
            },
            gpu_instance_id: p.gpu_instance_id,
            compute_instance_id: p.compute_instance_id,
        })
        .collect())
}

fn read_cpu_affinity(device: &Device) -> Vec<u32> {
    let Ok(words) = device.cpu_affinity(CPU_MASK_WORDS) else {
        return Vec::new();
    };
    let bits = std::ffi::c_ulong::BITS;
    words
        .iter()
        .enumerate()
        .flat_map(|(w, &mask)| {
            (0..bits)
                .filter(move |b| (mask >> b) & 1 == 1)
                .map(move |b| w as u32 * bits + b)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_drop_the_prefix_or_follow_slurms_fallback() {
        assert_eq!(profile_name(Some("MIG 1g.5gb+me"), 1, 4864), "1g.5gb+me");
        assert_eq!(profile_name(None, 3, 20096), "3g.20gb");
        assert_eq!(profile_name(None, 1, 4864), "1g.5gb");
        let gi = GpuInstanceProfile {
            id: 9,
            index: 2,
            name: "3g.20gb".into(),
            slices: 3,
            instance_count: 2,
            memory_mib: 20096,
            multiprocessor_count: 42,
            placements: None,
        };
        assert_eq!(ci_profile_name(None, 3, &gi), "3g.20gb");
        assert_eq!(ci_profile_name(None, 1, &gi), "1c.3g.20gb");
        assert_eq!(
            ci_profile_name(Some("MIG 1c.3g.20gb"), 1, &gi),
            "1c.3g.20gb"
        );
    }
}
