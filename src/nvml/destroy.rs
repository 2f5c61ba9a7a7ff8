//! Destroying chosen GPU instances (with their compute instances first, as NVML
//! requires), so instances the plan keeps stay untouched. `nvml::apply` only
//! destroys everything; this goes through the same safe wrappers in `nvml::raw`.

use anyhow::{anyhow, Context, Result};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;
use nvml_wrapper_sys::bindings::{
    NVML_COMPUTE_INSTANCE_PROFILE_COUNT, NVML_GPU_INSTANCE_PROFILE_COUNT,
};

use super::raw;

/// Destroy the GPU instances of GPU `gpu` whose ids are in `gi_ids`. Returns how
/// many were destroyed. Ids that no longer exist are skipped (a rerun after a
/// crash part-way continues).
pub fn destroy_instances(nvml: &Nvml, gpu: u32, gi_ids: &[u32]) -> Result<u32> {
    if gi_ids.is_empty() {
        return Ok(0);
    }
    let dev = nvml
        .device_by_index(gpu)
        .with_context(|| format!("GPU {gpu}: opening it"))?;
    let mut destroyed = 0;
    for index in 0..NVML_GPU_INSTANCE_PROFILE_COUNT {
        let profile = match raw::gpu_instance_profile(&dev, index) {
            Ok(p) => p,
            Err(NvmlError::NotSupported | NvmlError::InvalidArg) => continue,
            Err(e) => return Err(anyhow!("GPU {gpu}: reading GPU instance profiles: {e}")),
        };
        let instances =
            raw::gpu_instances(&dev, profile.id, profile.instance_count).map_err(|e| {
                anyhow!(
                    "GPU {gpu}: listing GPU instances of profile {}: {e}",
                    profile.id
                )
            })?;
        for gi in instances {
            let info = gi
                .info()
                .map_err(|e| anyhow!("GPU {gpu}: reading a GPU instance: {e}"))?;
            if !gi_ids.contains(&info.id) {
                continue;
            }
            destroy_compute_instances(gpu, &gi, info.id)?;
            gi.destroy()
                .map_err(|e| explain(gpu, &format!("destroying GPU instance {}", info.id), e))?;
            destroyed += 1;
        }
    }
    Ok(destroyed)
}

fn destroy_compute_instances(gpu: u32, gi: &raw::GpuInstance, gi_id: u32) -> Result<()> {
    for index in 0..NVML_COMPUTE_INSTANCE_PROFILE_COUNT {
        let profile = match gi.compute_instance_profile(index) {
            Ok(p) => p,
            Err(NvmlError::NotSupported | NvmlError::InvalidArg) => continue,
            Err(e) => {
                return Err(anyhow!(
                    "GPU {gpu}: reading compute profiles of GPU instance {gi_id}: {e}"
                ))
            }
        };
        let cis = gi
            .compute_instances(profile.id, profile.instance_count)
            .map_err(|e| {
                anyhow!("GPU {gpu}: listing compute instances of GPU instance {gi_id}: {e}")
            })?;
        for ci in cis {
            let ci_id = ci.info().map(|i| i.id).unwrap_or(u32::MAX);
            ci.destroy().map_err(|e| {
                explain(
                    gpu,
                    &format!("destroying compute instance {ci_id} of GPU instance {gi_id}"),
                    e,
                )
            })?;
        }
    }
    Ok(())
}

fn explain(gpu: u32, action: &str, err: NvmlError) -> anyhow::Error {
    let why = match err {
        NvmlError::InUse => {
            "it is in use (NVML: in use): a process still runs in it; stop it and rerun".to_string()
        }
        NvmlError::NoPermission => "permission denied (NVML): MIG changes need root".to_string(),
        other => format!("NVML failed: {other}"),
    };
    anyhow!("GPU {gpu}: {action}: {why}")
}
