//! The NVML calls node-setup needs that nvml-wrapper 0.13 does not wrap (GPU and
//! compute instances, profile names, remaining capacity) or wraps wrongly
//! (`Device::possible_placements` always returns an empty list: it never sets the
//! vector's length). They go through the library nvml-wrapper already loaded
//! (`Nvml::lib()`), so there is one NVML instance.
//!
//! This is the only module of yolo-sched with `unsafe` code. Every call follows the
//! same pattern: look the symbol up (a missing one is an error, not a panic), pass
//! handles that nvml-wrapper or NVML handed out and pointers to local values, and
//! check the return code.

use std::ffi::{c_char, c_uint, CStr};

use nvml_wrapper::error::{nvml_sym, nvml_try, NvmlError};
use nvml_wrapper::{Device, Nvml};
use nvml_wrapper_sys::bindings::{
    nvmlComputeInstanceInfo_t, nvmlComputeInstanceProfileInfo_t,
    nvmlComputeInstanceProfileInfo_v2_t, nvmlComputeInstance_t, nvmlDevice_t,
    nvmlGpuInstanceInfo_t, nvmlGpuInstancePlacement_t, nvmlGpuInstanceProfileInfo_t,
    nvmlGpuInstanceProfileInfo_v2_t, nvmlGpuInstance_t,
    nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_RESOURCES, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
};

/// Memory slices `start .. start + size` of a GPU instance.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct Placement {
    pub start: u32,
    pub size: u32,
}

/// `NVML_ERROR_INSUFFICIENT_RESOURCES`, which nvml-wrapper only knows as `UnexpectedVariant(23)`.
pub const INSUFFICIENT_RESOURCES: u32 = nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_RESOURCES;

/// A GPU instance profile as NVML reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GiProfileInfo {
    /// The id Create*/Placements take (not the `NVML_GPU_INSTANCE_PROFILE_*` index).
    pub id: u32,
    /// "MIG 1g.5gb" from the versioned call; `None` on drivers without it.
    pub name: Option<String>,
    pub slice_count: u32,
    pub instance_count: u32,
    pub multiprocessor_count: u32,
    pub memory_mib: u64,
}

/// A compute instance profile as NVML reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CiProfileInfo {
    pub id: u32,
    pub name: Option<String>,
    pub slice_count: u32,
    pub instance_count: u32,
    pub multiprocessor_count: u32,
}

/// `nvmlGpuInstanceGetInfo`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GiInfo {
    pub id: u32,
    pub profile_id: u32,
    pub placement: Placement,
}

/// `nvmlComputeInstanceGetInfo_v2`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CiInfo {
    pub id: u32,
    pub profile_id: u32,
    pub placement: Placement,
}

/// A GPU instance handle, valid while the `Nvml` it came from lives.
pub struct GpuInstance<'nvml> {
    handle: nvmlGpuInstance_t,
    nvml: &'nvml Nvml,
}

/// A compute instance handle, valid while the `Nvml` it came from lives.
pub struct ComputeInstance<'nvml> {
    handle: nvmlComputeInstance_t,
    nvml: &'nvml Nvml,
}

/// The `NVML_STRUCT_VERSION(…)` word versioned structs carry (nvml.h).
fn struct_version<T>(version: u32) -> u32 {
    (std::mem::size_of::<T>() as u32) | (version << 24)
}

fn raw_device(device: &Device) -> nvmlDevice_t {
    // SAFETY: `handle` only hands out the handle; it stays valid while `device`
    // (and its `Nvml`) lives, which outlasts every call below that uses it.
    unsafe { device.handle() }
}

fn name_from(bytes: &[c_char]) -> Option<String> {
    if !bytes.contains(&0) {
        return None;
    }
    // SAFETY: the slice holds a NUL (checked above), so the C string ends inside it.
    let text = unsafe { CStr::from_ptr(bytes.as_ptr()) };
    Some(text.to_string_lossy().into_owned()).filter(|s| !s.is_empty())
}

/// Profile `index` (an `NVML_GPU_INSTANCE_PROFILE_*` value), with its name when the
/// driver has the versioned call. `NotSupported` when the GPU lacks that profile.
pub fn gpu_instance_profile(device: &Device, index: u32) -> Result<GiProfileInfo, NvmlError> {
    let lib = device.nvml().lib();
    if let Ok(sym) = nvml_sym(lib.nvmlDeviceGetGpuInstanceProfileInfoV.as_ref()) {
        // SAFETY: an all-zero struct of plain integers and chars is a valid value.
        let mut info: nvmlGpuInstanceProfileInfo_v2_t = unsafe { std::mem::zeroed() };
        info.version = struct_version::<nvmlGpuInstanceProfileInfo_v2_t>(2);
        // SAFETY: valid device handle and a pointer to a local v2 struct whose version
        // word says so, as the function requires.
        nvml_try(unsafe { sym(raw_device(device), index, &mut info) })?;
        return Ok(GiProfileInfo {
            id: info.id,
            name: name_from(&info.name),
            slice_count: info.sliceCount,
            instance_count: info.instanceCount,
            multiprocessor_count: info.multiprocessorCount,
            memory_mib: info.memorySizeMB,
        });
    }
    let sym = nvml_sym(lib.nvmlDeviceGetGpuInstanceProfileInfo.as_ref())?;
    // SAFETY: an all-zero struct of plain integers is a valid value.
    let mut info: nvmlGpuInstanceProfileInfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid device handle and a pointer to a local struct.
    nvml_try(unsafe { sym(raw_device(device), index, &mut info) })?;
    Ok(GiProfileInfo {
        id: info.id,
        name: None,
        slice_count: info.sliceCount,
        instance_count: info.instanceCount,
        multiprocessor_count: info.multiprocessorCount,
        memory_mib: info.memorySizeMB,
    })
}

/// Every placement of a profile, used or free (`nvmlDeviceGetGpuInstancePossiblePlacements_v2`).
pub fn possible_placements(device: &Device, profile_id: u32) -> Result<Vec<Placement>, NvmlError> {
    let sym = nvml_sym(
        device
            .nvml()
            .lib()
            .nvmlDeviceGetGpuInstancePossiblePlacements_v2
            .as_ref(),
    )?;
    let mut count: c_uint = 0;
    // SAFETY: a null list asks for the number of placements only.
    nvml_try(unsafe {
        sym(
            raw_device(device),
            profile_id,
            std::ptr::null_mut(),
            &mut count,
        )
    })?;
    let mut list = vec![nvmlGpuInstancePlacement_t { start: 0, size: 0 }; count as usize];
    let mut filled = count;
    // SAFETY: `list` holds `count` entries, the number NVML just reported; `filled`
    // carries that capacity in and the number written out.
    nvml_try(unsafe {
        sym(
            raw_device(device),
            profile_id,
            list.as_mut_ptr(),
            &mut filled,
        )
    })?;
    list.truncate(filled.min(count) as usize);
    Ok(list
        .into_iter()
        .map(|p| Placement {
            start: p.start,
            size: p.size,
        })
        .collect())
}

/// The GPU instances of one profile. `capacity` is the profile's instance count
/// (NVML writes up to that many handles).
pub fn gpu_instances<'nvml>(
    device: &Device<'nvml>,
    profile_id: u32,
    capacity: u32,
) -> Result<Vec<GpuInstance<'nvml>>, NvmlError> {
    let nvml = device.nvml();
    let sym = nvml_sym(nvml.lib().nvmlDeviceGetGpuInstances.as_ref())?;
    let mut handles: Vec<nvmlGpuInstance_t> = vec![std::ptr::null_mut(); capacity.max(1) as usize];
    let mut count = handles.len() as c_uint;
    // SAFETY: `handles` has room for `count` entries (at least the profile's instance
    // count, as NVML requires); NVML writes `count` back.
    nvml_try(unsafe {
        sym(
            raw_device(device),
            profile_id,
            handles.as_mut_ptr(),
            &mut count,
        )
    })?;
    handles.truncate((count as usize).min(handles.len()));
    Ok(handles
        .into_iter()
        .map(|handle| GpuInstance { handle, nvml })
        .collect())
}

/// Create a GPU instance of `profile_id` at `placement`.
pub fn create_gpu_instance_at<'nvml>(
    device: &Device<'nvml>,
    profile_id: u32,
    placement: Placement,
) -> Result<GpuInstance<'nvml>, NvmlError> {
    let nvml = device.nvml();
    let sym = nvml_sym(nvml.lib().nvmlDeviceCreateGpuInstanceWithPlacement.as_ref())?;
    let wanted = nvmlGpuInstancePlacement_t {
        start: placement.start,
        size: placement.size,
    };
    let mut handle: nvmlGpuInstance_t = std::ptr::null_mut();
    // SAFETY: valid device handle, a pointer to a local placement and to a local handle.
    nvml_try(unsafe { sym(raw_device(device), profile_id, &wanted, &mut handle) })?;
    Ok(GpuInstance { handle, nvml })
}

/// For a MIG device handle: its GPU instance id and compute instance id.
pub fn mig_device_ids(mig_device: &Device) -> Result<(u32, u32), NvmlError> {
    let lib = mig_device.nvml().lib();
    let gi_sym = nvml_sym(lib.nvmlDeviceGetGpuInstanceId.as_ref())?;
    let ci_sym = nvml_sym(lib.nvmlDeviceGetComputeInstanceId.as_ref())?;
    let (mut gi, mut ci): (c_uint, c_uint) = (0, 0);
    // SAFETY: valid device handle and pointers to local integers.
    nvml_try(unsafe { gi_sym(raw_device(mig_device), &mut gi) })?;
    // SAFETY: as above.
    nvml_try(unsafe { ci_sym(raw_device(mig_device), &mut ci) })?;
    Ok((gi, ci))
}

impl<'nvml> GpuInstance<'nvml> {
    pub fn info(&self) -> Result<GiInfo, NvmlError> {
        let sym = nvml_sym(self.nvml.lib().nvmlGpuInstanceGetInfo.as_ref())?;
        // SAFETY: an all-zero struct of integers and null handles is a valid value.
        let mut info: nvmlGpuInstanceInfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: a handle NVML gave us and a pointer to a local struct.
        nvml_try(unsafe { sym(self.handle, &mut info) })?;
        Ok(GiInfo {
            id: info.id,
            profile_id: info.profileId,
            placement: Placement {
                start: info.placement.start,
                size: info.placement.size,
            },
        })
    }

    /// Destroy this GPU instance; its compute instances must be gone (`InUse` otherwise).
    pub fn destroy(self) -> Result<(), NvmlError> {
        let sym = nvml_sym(self.nvml.lib().nvmlGpuInstanceDestroy.as_ref())?;
        // SAFETY: a handle NVML gave us; `self` is consumed, so it is not used again.
        nvml_try(unsafe { sym(self.handle) })
    }

    /// Compute instance profile `index` (an `NVML_COMPUTE_INSTANCE_PROFILE_*` value).
    pub fn compute_instance_profile(&self, index: u32) -> Result<CiProfileInfo, NvmlError> {
        let lib = self.nvml.lib();
        let engine = NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED;
        if let Ok(sym) = nvml_sym(lib.nvmlGpuInstanceGetComputeInstanceProfileInfoV.as_ref()) {
            // SAFETY: an all-zero struct of plain integers and chars is a valid value.
            let mut info: nvmlComputeInstanceProfileInfo_v2_t = unsafe { std::mem::zeroed() };
            info.version = struct_version::<nvmlComputeInstanceProfileInfo_v2_t>(2);
            // SAFETY: a handle NVML gave us and a local v2 struct marked as such.
            nvml_try(unsafe { sym(self.handle, index, engine, &mut info) })?;
            return Ok(CiProfileInfo {
                id: info.id,
                name: name_from(&info.name),
                slice_count: info.sliceCount,
                instance_count: info.instanceCount,
                multiprocessor_count: info.multiprocessorCount,
            });
        }
        let sym = nvml_sym(lib.nvmlGpuInstanceGetComputeInstanceProfileInfo.as_ref())?;
        // SAFETY: an all-zero struct of plain integers is a valid value.
        let mut info: nvmlComputeInstanceProfileInfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: a handle NVML gave us and a pointer to a local struct.
        nvml_try(unsafe { sym(self.handle, index, engine, &mut info) })?;
        Ok(CiProfileInfo {
            id: info.id,
            name: None,
            slice_count: info.sliceCount,
            instance_count: info.instanceCount,
            multiprocessor_count: info.multiprocessorCount,
        })
    }

    /// The compute instances of one profile; `capacity` is its instance count.
    pub fn compute_instances(
        &self,
        profile_id: u32,
        capacity: u32,
    ) -> Result<Vec<ComputeInstance<'nvml>>, NvmlError> {
        let sym = nvml_sym(self.nvml.lib().nvmlGpuInstanceGetComputeInstances.as_ref())?;
        let mut handles: Vec<nvmlComputeInstance_t> =
            vec![std::ptr::null_mut(); capacity.max(1) as usize];
        let mut count = handles.len() as c_uint;
        // SAFETY: `handles` has room for `count` entries (the profile's instance count).
        nvml_try(unsafe { sym(self.handle, profile_id, handles.as_mut_ptr(), &mut count) })?;
        handles.truncate((count as usize).min(handles.len()));
        Ok(handles
            .into_iter()
            .map(|handle| ComputeInstance {
                handle,
                nvml: self.nvml,
            })
            .collect())
    }

    pub fn create_compute_instance(
        &self,
        profile_id: u32,
    ) -> Result<ComputeInstance<'nvml>, NvmlError> {
        let sym = nvml_sym(
            self.nvml
                .lib()
                .nvmlGpuInstanceCreateComputeInstance
                .as_ref(),
        )?;
        let mut handle: nvmlComputeInstance_t = std::ptr::null_mut();
        // SAFETY: a handle NVML gave us and a pointer to a local handle.
        nvml_try(unsafe { sym(self.handle, profile_id, &mut handle) })?;
        Ok(ComputeInstance {
            handle,
            nvml: self.nvml,
        })
    }
}

impl ComputeInstance<'_> {
    pub fn info(&self) -> Result<CiInfo, NvmlError> {
        let sym = nvml_sym(self.nvml.lib().nvmlComputeInstanceGetInfo_v2.as_ref())?;
        // SAFETY: an all-zero struct of integers and null handles is a valid value.
        let mut info: nvmlComputeInstanceInfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: a handle NVML gave us and a pointer to a local struct.
        nvml_try(unsafe { sym(self.handle, &mut info) })?;
        Ok(CiInfo {
            id: info.id,
            profile_id: info.profileId,
            placement: Placement {
                start: info.placement.start,
                size: info.placement.size,
            },
        })
    }

    /// Destroy this compute instance (`InUse` while a process runs in it).
    pub fn destroy(self) -> Result<(), NvmlError> {
        let sym = nvml_sym(self.nvml.lib().nvmlComputeInstanceDestroy.as_ref())?;
        // SAFETY: a handle NVML gave us; `self` is consumed, so it is not used again.
        nvml_try(unsafe { sym(self.handle) })
    }
}
