//! The MIG changes node-setup makes, one NVML step each: switch MIG mode (and say
//! whether a reset is still needed), destroy every instance on a GPU, create a GPU
//! instance at a placement with its full compute instance. Failures are `MigError`s
//! that say which GPU, what was being done, and why NVML refused.

use std::fmt;

use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};
use nvml_wrapper_sys::bindings::{
    nvmlReturn_enum_NVML_ERROR_IN_USE as NVML_ERROR_IN_USE,
    nvmlReturn_enum_NVML_ERROR_RESET_REQUIRED as NVML_ERROR_RESET_REQUIRED,
    nvmlReturn_enum_NVML_SUCCESS as NVML_SUCCESS, NVML_COMPUTE_INSTANCE_PROFILE_COUNT,
    NVML_GPU_INSTANCE_PROFILE_COUNT,
};

use super::raw;
use super::topology::Placement;

/// Why NVML refused a MIG step, in the terms an admin acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MigErrorKind {
    /// NVML_ERROR_INSUFFICIENT_RESOURCES: no room at that placement now.
    InsufficientResources,
    /// NVML_ERROR_IN_USE: processes or compute instances still use it.
    InUse,
    /// NVML_ERROR_NO_PERMISSION: needs root.
    NoPermission,
    /// NVML_ERROR_NOT_SUPPORTED: no MIG, no such profile, or MIG mode is off.
    NotSupported,
    /// NVML_ERROR_NOT_FOUND / NVML_ERROR_INVALID_ARGUMENT: no such GPU, profile or placement.
    Invalid,
    /// The NVML library lacks a function this needs (driver too old).
    MissingFunction,
    Other,
}

#[derive(Debug)]
pub struct MigError {
    /// NVML index of the GPU.
    pub gpu: u32,
    /// What was being done, e.g. "creating GPU instance 3g.20gb (profile 9) at slices 4..8".
    pub action: String,
    pub kind: MigErrorKind,
    pub source: NvmlError,
}

impl MigError {
    fn new(gpu: u32, action: impl Into<String>, source: NvmlError) -> MigError {
        let kind = match &source {
            NvmlError::UnexpectedVariant(code) if *code == raw::INSUFFICIENT_RESOURCES => {
                MigErrorKind::InsufficientResources
            }
            NvmlError::InUse => MigErrorKind::InUse,
            NvmlError::NoPermission => MigErrorKind::NoPermission,
            NvmlError::NotSupported => MigErrorKind::NotSupported,
            NvmlError::NotFound | NvmlError::InvalidArg => MigErrorKind::Invalid,
            NvmlError::FailedToLoadSymbol(_) => MigErrorKind::MissingFunction,
            _ => MigErrorKind::Other,
        };
        MigError {
            gpu,
            action: action.into(),
            kind,
            source,
        }
    }
}

impl fmt::Display for MigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let why = match self.kind {
            MigErrorKind::InsufficientResources => "the GPU has no room for it (NVML: insufficient resources): the placement overlaps an instance that exists, the profile's instance limit is reached, or the hardware refuses the combination (4g + 3g is one)".to_string(),
            MigErrorKind::InUse => "it is in use (NVML: in use): stop the processes running on it, or destroy its compute instances first".to_string(),
            MigErrorKind::NoPermission => "permission denied (NVML: no permission): MIG changes need root".to_string(),
            MigErrorKind::NotSupported => "not supported (NVML: not supported): this GPU has no MIG, lacks this profile, or MIG mode is not on yet".to_string(),
            MigErrorKind::Invalid => format!("NVML says the request is invalid ({})", self.source),
            MigErrorKind::MissingFunction => format!("the NVML library is too old for this ({})", self.source),
            MigErrorKind::Other => format!("NVML failed: {}", self.source),
        };
        write!(f, "GPU {}: {}: {why}", self.gpu, self.action)
    }
}

impl std::error::Error for MigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// What asking for a MIG mode achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MigModeOutcome {
    /// The GPU was already in that mode; nothing was done.
    AlreadySet,
    /// The mode changed and is in effect now.
    Activated,
    /// The mode is pending: it takes effect after a GPU reset or a reboot.
    ResetRequired,
    /// The mode is pending: processes on the GPU kept it from taking effect; stop
    /// them, then reset the GPU or reboot.
    Busy,
}

impl MigModeOutcome {
    /// True when the requested mode is not in effect yet.
    pub fn is_pending(self) -> bool {
        matches!(self, MigModeOutcome::ResetRequired | MigModeOutcome::Busy)
    }
}

fn device(nvml: &Nvml, gpu: u32) -> Result<Device<'_>, MigError> {
    nvml.device_by_index(gpu)
        .map_err(|e| MigError::new(gpu, "opening the GPU", e))
}

/// Turn MIG mode on or off on GPU `gpu`.
pub fn set_mig_mode(nvml: &Nvml, gpu: u32, enabled: bool) -> Result<MigModeOutcome, MigError> {
    let dev = device(nvml, gpu)?;
    let want = u32::from(enabled);
    let before = dev
        .mig_mode()
        .map_err(|e| MigError::new(gpu, "reading MIG mode", e))?;
    if before.current == want && before.pending == want {
        return Ok(MigModeOutcome::AlreadySet);
    }
    let action = format!("turning MIG mode {}", if enabled { "on" } else { "off" });
    let status = dev
        .set_mig_mode(enabled)
        .map_err(|e| MigError::new(gpu, action.clone(), e))?;
    match status {
        NVML_SUCCESS if before.current == want => Ok(MigModeOutcome::AlreadySet),
        NVML_SUCCESS => Ok(MigModeOutcome::Activated),
        NVML_ERROR_RESET_REQUIRED => Ok(MigModeOutcome::ResetRequired),
        NVML_ERROR_IN_USE => Ok(MigModeOutcome::Busy),
        other => Err(MigError::new(gpu, action, NvmlError::from(other))),
    }
}

/// What `destroy_all_instances` removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Destroyed {
    pub gpu_instances: u32,
    pub compute_instances: u32,
}

/// Destroy every compute and GPU instance on GPU `gpu` (compute instances first,
/// as NVML requires). Nothing to do on a GPU without MIG or with MIG mode off.
/// A failure part-way leaves the rest in place; calling again continues.
pub fn destroy_all_instances(nvml: &Nvml, gpu: u32) -> Result<Destroyed, MigError> {
    let dev = device(nvml, gpu)?;
    let mut done = Destroyed::default();
    match dev.mig_mode() {
        Ok(m) if m.current == 1 => {}
        Ok(_) | Err(NvmlError::NotSupported) => return Ok(done),
        Err(e) => return Err(MigError::new(gpu, "reading MIG mode", e)),
    }
    for index in 0..NVML_GPU_INSTANCE_PROFILE_COUNT {
        let profile = match raw::gpu_instance_profile(&dev, index) {
            Ok(p) => p,
            Err(NvmlError::NotSupported | NvmlError::InvalidArg) => continue,
            Err(e) => return Err(MigError::new(gpu, "reading GPU instance profiles", e)),
        };
        let instances =
            raw::gpu_instances(&dev, profile.id, profile.instance_count).map_err(|e| {
                MigError::new(
                    gpu,
                    format!("listing GPU instances of profile {}", profile.id),
                    e,
                )
            })?;
        for gi in instances {
            let info = gi
                .info()
                .map_err(|e| MigError::new(gpu, "reading a GPU instance", e))?;
            done.compute_instances += destroy_compute_instances(gpu, &gi, info.id)?;
            gi.destroy().map_err(|e| {
                MigError::new(gpu, format!("destroying GPU instance {}", info.id), e)
            })?;
            done.gpu_instances += 1;
        }
    }
    Ok(done)
}

fn destroy_compute_instances(gpu: u32, gi: &raw::GpuInstance, gi_id: u32) -> Result<u32, MigError> {
    let mut destroyed = 0;
    for index in 0..NVML_COMPUTE_INSTANCE_PROFILE_COUNT {
        let profile = match gi.compute_instance_profile(index) {
            Ok(p) => p,
            Err(NvmlError::NotSupported | NvmlError::InvalidArg) => continue,
            Err(e) => {
                return Err(MigError::new(
                    gpu,
                    format!("reading compute profiles of GPU instance {gi_id}"),
                    e,
                ))
            }
        };
        let cis = gi
            .compute_instances(profile.id, profile.instance_count)
            .map_err(|e| {
                MigError::new(
                    gpu,
                    format!("listing compute instances of GPU instance {gi_id}"),
                    e,
                )
            })?;
        for ci in cis {
            let ci_id = ci.info().map(|i| i.id).map_err(|e| {
                MigError::new(
                    gpu,
                    format!("reading a compute instance of GPU instance {gi_id}"),
                    e,
                )
            })?;
            ci.destroy().map_err(|e| {
                MigError::new(
                    gpu,
                    format!("destroying compute instance {ci_id} of GPU instance {gi_id}"),
                    e,
                )
            })?;
            destroyed += 1;
        }
    }
    Ok(destroyed)
}

/// A GPU instance created with its full compute instance: one MIG device.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CreatedInstance {
    pub gpu_instance_id: u32,
    pub compute_instance_id: u32,
    pub profile_id: u32,
    pub placement: Placement,
    /// The new MIG device's UUID, when NVML lists it.
    pub uuid: Option<String>,
}

/// Create a GPU instance of `profile_id` at `placement` on GPU `gpu`, then the
/// compute instance that spans it. If the compute instance cannot be made, the
/// GPU instance is destroyed again, so the GPU is left as it was.
pub fn create_instance(
    nvml: &Nvml,
    gpu: u32,
    profile_id: u32,
    placement: Placement,
) -> Result<CreatedInstance, MigError> {
    let dev = device(nvml, gpu)?;
    let action = format!(
        "creating a GPU instance of profile {profile_id} at memory slices {}..{}",
        placement.start,
        placement.start + placement.size
    );
    let gi = raw::create_gpu_instance_at(&dev, profile_id, placement)
        .map_err(|e| MigError::new(gpu, action.clone(), e))?;
    let info = match gi.info() {
        Ok(info) => info,
        Err(e) => return Err(undo(gpu, gi, MigError::new(gpu, action, e))),
    };
    let ci_action = format!("creating the compute instance of GPU instance {}", info.id);
    let full = match full_compute_profile(&dev, gpu, &gi, profile_id) {
        Ok(id) => id,
        Err(e) => return Err(undo(gpu, gi, e)),
    };
    let ci = match gi.create_compute_instance(full) {
        Ok(ci) => ci,
        Err(e) => return Err(undo(gpu, gi, MigError::new(gpu, ci_action, e))),
    };
    let ci_info = ci.info().map_err(|e| MigError::new(gpu, ci_action, e))?;
    Ok(CreatedInstance {
        gpu_instance_id: info.id,
        compute_instance_id: ci_info.id,
        profile_id,
        placement: info.placement,
        uuid: mig_uuid(&dev, info.id, ci_info.id),
    })
}

/// Destroy a GPU instance created a moment ago, keeping the original error.
fn undo(gpu: u32, gi: raw::GpuInstance, mut error: MigError) -> MigError {
    if let Err(e) = gi.destroy() {
        // Said in the error itself: library code does not print.
        error.action.push_str(&format!(
            " (and GPU {gpu}'s instance just created for it could not be destroyed again: {e})"
        ));
    }
    error
}

/// The compute instance profile whose slices equal the GPU instance's.
fn full_compute_profile(
    dev: &Device,
    gpu: u32,
    gi: &raw::GpuInstance,
    profile_id: u32,
) -> Result<u32, MigError> {
    let slices = (0..NVML_GPU_INSTANCE_PROFILE_COUNT)
        .filter_map(|i| raw::gpu_instance_profile(dev, i).ok())
        .find(|p| p.id == profile_id)
        .map(|p| p.slice_count)
        .ok_or_else(|| {
            MigError::new(
                gpu,
                format!("looking up profile {profile_id}"),
                NvmlError::NotFound,
            )
        })?;
    (0..NVML_COMPUTE_INSTANCE_PROFILE_COUNT)
        .filter_map(|i| gi.compute_instance_profile(i).ok())
        .find(|p| p.slice_count == slices)
        .map(|p| p.id)
        .ok_or_else(|| {
            MigError::new(
                gpu,
                format!("finding a compute profile of {slices} slices"),
                NvmlError::NotSupported,
            )
        })
}

fn mig_uuid(dev: &Device, gi: u32, ci: u32) -> Option<String> {
    let max = dev.mig_device_count().ok()?;
    (0..max)
        .filter_map(|slot| dev.mig_device_by_index(slot).ok())
        .find(|m| raw::mig_device_ids(m).is_ok_and(|ids| ids == (gi, ci)))
        .and_then(|m| m.uuid().ok())
}
