//! The memory of one job's own device: which device `CUDA_VISIBLE_DEVICES`
//! names, and its memory used and total, read through NVML.
//!
//! On a MIG slice the device is the MIG device handle of the `MIG-…` UUID Slurm
//! put in `CUDA_VISIBLE_DEVICES`; its memory info needs no privileges and covers
//! only that slice. On a whole GPU (or a shard of one) the device is the GPU by
//! UUID or index; the GPU's memory is everybody's, so the job's own use is the
//! sum over its processes (the caller says which pids are the job's).

use std::fmt;

use anyhow::{anyhow, bail, Context, Result};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::{Device, Nvml};
use serde::Serialize;

/// One entry of `CUDA_VISIBLE_DEVICES`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "id", rename_all = "snake_case")]
pub enum DeviceId {
    /// `MIG-<uuid>` (or the older `MIG-GPU-<uuid>/<gi>/<ci>`).
    Mig(String),
    /// `GPU-<uuid>`.
    Gpu(String),
    /// An NVML index (what Slurm writes for GRES without MIG UUIDs).
    Index(u32),
}

impl fmt::Display for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceId::Mig(u) | DeviceId::Gpu(u) => f.write_str(u),
            DeviceId::Index(i) => write!(f, "{i}"),
        }
    }
}

/// Parse `CUDA_VISIBLE_DEVICES`: a comma-separated list of `MIG-…`, `GPU-…`
/// or indices. Empty, `NoDevFiles` (Slurm's word for none) or a malformed
/// entry is an error naming it.
pub fn parse_visible_devices(value: &str) -> Result<Vec<DeviceId>> {
    let value = value.trim();
    if value.is_empty() || value == "NoDevFiles" {
        bail!("CUDA_VISIBLE_DEVICES names no device ({value:?}); the job holds no GPU");
    }
    value
        .split(',')
        .map(|raw| {
            let entry = raw.trim();
            let well_formed = |rest: &str| {
                !rest.is_empty()
                    && rest.len() <= 96
                    && rest
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '/'))
            };
            if let Some(rest) = entry.strip_prefix("MIG-") {
                if well_formed(rest) {
                    return Ok(DeviceId::Mig(entry.to_string()));
                }
            } else if let Some(rest) = entry.strip_prefix("GPU-") {
                if well_formed(rest) && !rest.contains('/') {
                    return Ok(DeviceId::Gpu(entry.to_string()));
                }
            } else if let Ok(i) = entry.parse::<u32>() {
                if entry.chars().all(|c| c.is_ascii_digit()) {
                    return Ok(DeviceId::Index(i));
                }
            }
            Err(anyhow!(
                "CUDA_VISIBLE_DEVICES entry {entry:?} is not a MIG-<uuid>, a GPU-<uuid> or an index"
            ))
        })
        .collect()
}

/// One read of the job's device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MemorySample {
    /// Bytes in use on the device, by anyone.
    pub device_used: u64,
    /// Bytes the device has.
    pub total: u64,
    /// Bytes the job's own processes hold: the slice's use on MIG; on a
    /// whole GPU the sum over the job's processes in NVML's list. `None` when
    /// it cannot be known: no pids to count, NVML cannot list the processes,
    /// or it lists a job process without its memory (some drivers and
    /// containers hide it).
    pub job_used: Option<u64>,
    /// Processes on the device that are not the job's; `None` when NVML
    /// cannot list them or no pids tell them apart.
    pub others: Option<usize>,
}

pub struct JobDevice<'nvml> {
    device: Device<'nvml>,
    pub id: DeviceId,
    /// A MIG slice (only this job's processes run in it).
    pub is_mig: bool,
    /// `nvmlDeviceGetName`, e.g. "NVIDIA A100-SXM4-40GB MIG 1g.5gb".
    pub name: String,
    pub uuid: String,
}

impl<'nvml> JobDevice<'nvml> {
    /// Find the device `id` names. An index counts among the GPUs NVML sees,
    /// which is what Slurm's index means when it sets no UUIDs.
    pub fn open(nvml: &'nvml Nvml, id: &DeviceId) -> Result<JobDevice<'nvml>> {
        let (device, is_mig) = match id {
            DeviceId::Mig(uuid) => (nvml.device_by_uuid(uuid.as_str()), true),
            DeviceId::Gpu(uuid) => (nvml.device_by_uuid(uuid.as_str()), false),
            DeviceId::Index(i) => (nvml.device_by_index(*i), false),
        };
        let device = device.with_context(|| format!("NVML has no device {id}"))?;
        // A GPU in MIG mode is cut into slices: an index names none of them,
        // and the whole GPU's memory is every slice's.
        if let (DeviceId::Index(i), Ok(mode)) = (id, device.mig_mode()) {
            if mode.current == 1 {
                bail!(
                    "GPU {i} is in MIG mode: its index names no slice, and its memory is every slice's"
                );
            }
        }
        Ok(JobDevice::of(device, id.clone(), is_mig))
    }

    fn of(device: Device<'nvml>, id: DeviceId, is_mig: bool) -> JobDevice<'nvml> {
        let name = device.name().unwrap_or_else(|_| "unknown".into());
        let uuid = device.uuid().unwrap_or_else(|_| id.to_string());
        JobDevice {
            device,
            id,
            is_mig,
            name,
            uuid,
        }
    }

    /// The GPU whose device file is `/dev/nvidia<minor>` (a GRES line's
    /// `File=`), among those this process may open: under a cgroup that
    /// constrains devices, NVML refuses handles to the others
    /// (`NVML_ERROR_NO_PERMISSION`), and they are passed over. Its id is its UUID.
    pub fn open_gpu(nvml: &'nvml Nvml, minor: u32) -> Result<JobDevice<'nvml>> {
        let device = gpu_by_minor(nvml, minor)?;
        let uuid = device
            .uuid()
            .with_context(|| format!("the UUID of /dev/nvidia{minor}"))?;
        Ok(JobDevice::of(device, DeviceId::Gpu(uuid), false))
    }

    /// The MIG device of GPU instance `gi`, compute instance `ci` on the GPU
    /// `/dev/nvidia<minor>` (a GRES line's capability files); slices this
    /// process may not open are passed over. Its id is its `MIG-` UUID.
    pub fn open_mig(nvml: &'nvml Nvml, minor: u32, gi: u32, ci: u32) -> Result<JobDevice<'nvml>> {
        let gpu = gpu_by_minor(nvml, minor)?;
        let slots = gpu
            .mig_device_count()
            .with_context(|| format!("counting the MIG devices of /dev/nvidia{minor}"))?;
        for slot in 0..slots {
            let Ok(mig) = gpu.mig_device_by_index(slot) else {
                continue;
            };
            if super::raw::mig_device_ids(&mig).ok() == Some((gi, ci)) {
                let uuid = mig.uuid().with_context(|| {
                    format!("the UUID of MIG device {gi}/{ci} of /dev/nvidia{minor}")
                })?;
                return Ok(JobDevice::of(mig, DeviceId::Mig(uuid), true));
            }
        }
        bail!(
            "/dev/nvidia{minor} has no MIG device of GPU instance {gi}, compute instance {ci} that this job may open"
        )
    }

    /// One reading. `job_pids`: which processes are the job's (on a whole
    /// GPU their memory is the job's use); `None` when the caller cannot
    /// tell, and then the job's use on a whole GPU is unknown.
    pub fn read(&self, job_pids: Option<&dyn Fn(u32) -> bool>) -> Result<MemorySample> {
        let info = self
            .device
            .memory_info()
            .with_context(|| format!("reading the memory of {}", self.id))?;
        if self.is_mig {
            // A slice fences its memory: all of it is the job's.
            return Ok(MemorySample {
                device_used: info.used,
                total: info.total,
                job_used: Some(info.used),
                others: Some(0),
            });
        }
        let (job_used, others) = match job_pids {
            Some(is_job_pid) => match self.device.running_compute_processes() {
                Ok(list) => {
                    let mut own = Some(0u64);
                    let mut others = 0;
                    for p in &list {
                        if !is_job_pid(p.pid) {
                            others += 1;
                            continue;
                        }
                        own = match (own, &p.used_gpu_memory) {
                            (Some(sum), UsedGpuMemory::Used(b)) => Some(sum + b),
                            _ => None,
                        };
                    }
                    (own, Some(others))
                }
                Err(_) => (None, None),
            },
            None => (None, None),
        };
        Ok(MemorySample {
            device_used: info.used,
            total: info.total,
            job_used,
            others,
        })
    }
}

/// The GPU with device minor `minor`, skipping those NVML will not open for
/// this process.
fn gpu_by_minor(nvml: &Nvml, minor: u32) -> Result<Device<'_>> {
    let count = nvml.device_count().context("counting the GPUs")?;
    for i in 0..count {
        let Ok(device) = nvml.device_by_index(i) else {
            continue;
        };
        if device.minor_number().ok() == Some(minor) {
            return Ok(device);
        }
    }
    bail!("NVML has no GPU /dev/nvidia{minor} that this job may open")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn visible_devices_of_every_kind_parse() {
        assert_eq!(
            parse_visible_devices("MIG-4a2b36b7-8d1c-5f43-9a4e-2c0d6b3e7f10").unwrap(),
            [DeviceId::Mig(
                "MIG-4a2b36b7-8d1c-5f43-9a4e-2c0d6b3e7f10".into()
            )]
        );
        assert_eq!(
            parse_visible_devices("MIG-GPU-a1000040-0000-4000-8000-000000000001/7/0").unwrap(),
            [DeviceId::Mig(
                "MIG-GPU-a1000040-0000-4000-8000-000000000001/7/0".into()
            )]
        );
        assert_eq!(
            parse_visible_devices("GPU-a1000040-0000-4000-8000-000000000001, 1").unwrap(),
            [
                DeviceId::Gpu("GPU-a1000040-0000-4000-8000-000000000001".into()),
                DeviceId::Index(1)
            ]
        );
    }

    #[test]
    fn nonsense_in_visible_devices_is_named() {
        for bad in [
            "",
            "NoDevFiles",
            "0,,1",
            "-1",
            "+1",
            "GPU-",
            "MIG-$(x)",
            "gpu0",
        ] {
            let e = parse_visible_devices(bad).unwrap_err().to_string();
            assert!(e.contains("CUDA_VISIBLE_DEVICES"), "{bad}: {e}");
        }
    }
}
