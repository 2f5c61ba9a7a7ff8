//! The exported NVML C functions. Each one turns its raw pointers into Rust
//! references once (the only `unsafe` here), then asks the loaded driver.
//! Handles are opaque numbers: a tag in the top byte and the GPU index + 1 or the
//! instance's serial below it, so a handle to a destroyed instance stays invalid.

#![allow(non_snake_case)]

use std::ffi::{c_char, c_int, c_uint, c_ulong, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Mutex;

use nvml_wrapper_sys::bindings::{
    nvmlComputeInstanceInfo_t, nvmlComputeInstancePlacement_t, nvmlComputeInstanceProfileInfo_t,
    nvmlComputeInstanceProfileInfo_v2_t, nvmlComputeInstanceProfileInfo_v3_t,
    nvmlComputeInstance_t, nvmlDevice_t, nvmlGpuInstanceInfo_t, nvmlGpuInstancePlacement_t,
    nvmlGpuInstanceProfileInfo_t, nvmlGpuInstanceProfileInfo_v2_t, nvmlGpuInstanceProfileInfo_v3_t,
    nvmlGpuInstance_t, nvmlMemory_t, nvmlMemory_v2_t, nvmlPciInfo_t, nvmlProcessInfo_v1_t,
    nvmlProcessInfo_v2_t, nvmlReturn_t,
};

use crate::driver::Driver;
use crate::fixture::GiProfileSpec;
use crate::model::{
    code_name, CiProfile, Code, Scope, ARGUMENT_VERSION_MISMATCH, INSUFFICIENT_SIZE,
    INVALID_ARGUMENT, NOT_FOUND, NOT_SUPPORTED, NO_PERMISSION, SUCCESS, UNINITIALIZED, UNKNOWN,
};

/// The driver while at least one nvmlInit is not matched by nvmlShutdown.
struct Loaded {
    users: u32,
    driver: Driver,
}

static LOADED: Mutex<Option<Loaded>> = Mutex::new(None);

const MIB: u64 = 1024 * 1024;
/// `NVML_VALUE_NOT_AVAILABLE` for a process's instance ids outside MIG.
const NO_VALUE: c_uint = 0xFFFF_FFFF;

// ---------------------------------------------------------------- handles

const TAG_SHIFT: u32 = 56;
const TAG_GPU: u64 = 1;
const TAG_MIG: u64 = 2;
const TAG_GI: u64 = 3;
const TAG_CI: u64 = 4;

fn encode<T>(tag: u64, value: u64) -> *mut T {
    ((tag << TAG_SHIFT) | value) as usize as *mut T
}

fn decode<T>(handle: *mut T, tag: u64) -> Result<u64, Code> {
    let raw = handle as usize as u64;
    if raw >> TAG_SHIFT == tag {
        Ok(raw & ((1 << TAG_SHIFT) - 1))
    } else {
        Err(INVALID_ARGUMENT)
    }
}

/// What an `nvmlDevice_t` names.
#[derive(Clone, Copy)]
enum Dev {
    Gpu(usize),
    /// A MIG device: its GPU, GPU instance id and compute instance (by serial and id).
    Mig {
        gpu: usize,
        gi: u32,
        ci: u32,
        ci_serial: u64,
    },
}

impl Driver {
    fn dev(&self, handle: nvmlDevice_t) -> Result<Dev, Code> {
        if let Ok(v) = decode(handle, TAG_GPU) {
            let i = (v as usize).checked_sub(1).ok_or(INVALID_ARGUMENT)?;
            return if i < self.machine.gpu_count() {
                Ok(Dev::Gpu(i))
            } else {
                Err(INVALID_ARGUMENT)
            };
        }
        let serial = decode(handle, TAG_MIG)?;
        let (gpu, gi, ci) = self.machine.find_ci(serial)?;
        Ok(Dev::Mig {
            gpu,
            gi: gi.id,
            ci: ci.id,
            ci_serial: serial,
        })
    }

    /// A physical GPU; MIG device handles are refused.
    fn gpu(&self, handle: nvmlDevice_t) -> Result<usize, Code> {
        match self.dev(handle)? {
            Dev::Gpu(i) => Ok(i),
            Dev::Mig { .. } => Err(INVALID_ARGUMENT),
        }
    }

    fn parent(&self, handle: nvmlDevice_t) -> Result<usize, Code> {
        match self.dev(handle)? {
            Dev::Gpu(i) | Dev::Mig { gpu: i, .. } => Ok(i),
        }
    }
}

fn gpu_handle(index: usize) -> nvmlDevice_t {
    encode(TAG_GPU, index as u64 + 1)
}

// ---------------------------------------------------------------- plumbing

/// Run `f` on the loaded driver (freshened from the state file); panics become UNKNOWN.
fn with_driver(f: impl FnOnce(&mut Driver) -> Result<(), Code>) -> nvmlReturn_t {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let mut guard = LOADED.lock().unwrap_or_else(|p| p.into_inner());
        let loaded = guard.as_mut().ok_or(UNINITIALIZED)?;
        loaded.driver.refresh();
        f(&mut loaded.driver)
    }));
    match outcome {
        Ok(Ok(())) => SUCCESS,
        Ok(Err(code)) => code,
        Err(_) => UNKNOWN,
    }
}

fn out<T>(p: Option<&mut T>) -> Result<&mut T, Code> {
    p.ok_or(INVALID_ARGUMENT)
}

/// Copy `s` and its NUL into a caller's buffer.
fn put_str(buf: Option<&mut [c_char]>, s: &str) -> Result<(), Code> {
    let buf = buf.ok_or(INVALID_ARGUMENT)?;
    if s.len() + 1 > buf.len() {
        return Err(INSUFFICIENT_SIZE);
    }
    for (dst, src) in buf.iter_mut().zip(s.bytes()) {
        *dst = src as c_char;
    }
    buf[s.len()] = 0;
    Ok(())
}

/// Copy a short name into a fixed-size C array field.
fn put_name(field: &mut [c_char], s: &str) {
    field.fill(0);
    let room = field.len() - 1;
    for (dst, src) in field.iter_mut().take(room).zip(s.bytes()) {
        *dst = src as c_char;
    }
}

/// Fill a caller's list. `count` holds the capacity on input when non-zero
/// (callers that trust NVML's "large enough" contract pass 0) and the number of
/// entries on output; a null list only asks for the number.
fn put_list<T: Copy>(list: *mut T, count: Option<&mut c_uint>, items: &[T]) -> Result<(), Code> {
    let count = out(count)?;
    let n = items.len() as c_uint;
    if list.is_null() {
        *count = n;
        return Ok(());
    }
    if *count != 0 && *count < n {
        *count = n;
        return Err(INSUFFICIENT_SIZE);
    }
    // SAFETY: the caller passed a buffer for at least `n` entries (NVML's contract,
    // checked against `count` above when the caller stated a capacity).
    let slots = unsafe { std::slice::from_raw_parts_mut(list, items.len()) };
    slots.copy_from_slice(items);
    *count = n;
    Ok(())
}

/// The version word NVML puts in front of a versioned struct.
fn struct_version<T>(version: u32) -> c_uint {
    (std::mem::size_of::<T>() as u32) | (version << 24)
}

// ---------------------------------------------------------------- init

fn init() -> nvmlReturn_t {
    let outcome = catch_unwind(|| {
        let mut guard = LOADED.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(loaded) = guard.as_mut() {
            loaded.users += 1;
            return SUCCESS;
        }
        match Driver::from_env() {
            Ok(driver) => {
                *guard = Some(Loaded { users: 1, driver });
                SUCCESS
            }
            Err(code) => code,
        }
    });
    outcome.unwrap_or(UNKNOWN)
}

#[no_mangle]
pub extern "C" fn nvmlInit_v2() -> nvmlReturn_t {
    init()
}

#[no_mangle]
pub extern "C" fn nvmlInit() -> nvmlReturn_t {
    init()
}

#[no_mangle]
pub extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> nvmlReturn_t {
    init()
}

#[no_mangle]
pub extern "C" fn nvmlShutdown() -> nvmlReturn_t {
    let mut guard = LOADED.lock().unwrap_or_else(|p| p.into_inner());
    match guard.as_mut() {
        None => UNINITIALIZED,
        Some(loaded) => {
            loaded.users -= 1;
            if loaded.users == 0 {
                *guard = None;
            }
            SUCCESS
        }
    }
}

#[no_mangle]
pub extern "C" fn nvmlErrorString(result: nvmlReturn_t) -> *const c_char {
    let text: &'static CStr = match code_name(result) {
        "Success" => c"Success",
        "Uninitialized" => c"Uninitialized",
        "Invalid Argument" => c"Invalid Argument",
        "Not Supported" => c"Not Supported",
        "Insufficient Permissions" => c"Insufficient Permissions",
        "Already Initialized" => c"Already Initialized",
        "Not Found" => c"Not Found",
        "Insufficient Size" => c"Insufficient Size",
        "Driver Not Loaded" => c"Driver Not Loaded",
        "Reset Required" => c"Reset Required",
        "In use by another client" => c"In use by another client",
        "Insufficient Resources" => c"Insufficient Resources",
        "Argument Version Mismatch" => c"Argument Version Mismatch",
        _ => c"Unknown Error",
    };
    text.as_ptr()
}

// ---------------------------------------------------------------- system

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(
    version: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: `version` is null or valid for `length` bytes.
    let buf = unsafe { slice_out(version, length) };
    with_driver(|d| put_str(buf, &d.machine.fixture.driver_version))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetNVMLVersion(
    version: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: `version` is null or valid for `length` bytes.
    let buf = unsafe { slice_out(version, length) };
    with_driver(|d| {
        let cuda_major = d.machine.fixture.cuda_driver_version / 1000;
        put_str(
            buf,
            &format!("{cuda_major}.{}", d.machine.fixture.driver_version),
        )
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion_v2(version: *mut c_int) -> nvmlReturn_t {
    // SAFETY: NVML's contract: `version` is null or valid for a write.
    let version = unsafe { version.as_mut() };
    with_driver(|d| {
        *out(version)? = d.machine.fixture.cuda_driver_version;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion(version: *mut c_int) -> nvmlReturn_t {
    // SAFETY: same contract as the _v2 function it forwards to.
    unsafe { nvmlSystemGetCudaDriverVersion_v2(version) }
}

/// A caller's character buffer, or None for a null pointer.
///
/// # Safety
/// `ptr` must be null or valid for writes of `len` bytes for the rest of the call.
unsafe fn slice_out<'a>(ptr: *mut c_char, len: c_uint) -> Option<&'a mut [c_char]> {
    if ptr.is_null() {
        None
    } else {
        // SAFETY: non-null and valid for `len` bytes per this function's contract.
        Some(unsafe { std::slice::from_raw_parts_mut(ptr, len as usize) })
    }
}

// ---------------------------------------------------------------- devices

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> nvmlReturn_t {
    // SAFETY: NVML's contract: `count` is null or valid for a write.
    let count = unsafe { count.as_mut() };
    with_driver(|d| {
        *out(count)? = d.machine.gpu_count() as c_uint;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(
    index: c_uint,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: `device` is null or valid for a write.
    let device = unsafe { device.as_mut() };
    with_driver(|d| {
        let device = out(device)?;
        if index as usize >= d.machine.gpu_count() {
            return Err(INVALID_ARGUMENT);
        }
        // nvml.h: the count covers every GPU, and a handle to one the
        // caller may not open (a cgroup's devices controller) is refused.
        if !d.may_open_gpu(index as usize) {
            return Err(NO_PERMISSION);
        }
        *device = gpu_handle(index as usize);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByUUID(
    uuid: *const c_char,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: `uuid` is null or a NUL-terminated string and
    // `device` is null or valid for a write.
    let (uuid, device) = unsafe {
        (
            (!uuid.is_null()).then(|| CStr::from_ptr(uuid)),
            device.as_mut(),
        )
    };
    with_driver(|d| {
        let uuid = uuid
            .ok_or(INVALID_ARGUMENT)?
            .to_str()
            .map_err(|_| INVALID_ARGUMENT)?;
        let device = out(device)?;
        let m = &d.machine;
        for gpu in 0..m.gpu_count() {
            if m.spec(gpu).uuid == uuid {
                if !d.may_open_gpu(gpu) {
                    return Err(NO_PERMISSION);
                }
                *device = gpu_handle(gpu);
                return Ok(());
            }
            for (gi, ci) in m.mig_devices(gpu) {
                if m.mig_device_uuid(gpu, gi, ci) == uuid {
                    if !d.may_open_mig(gpu, gi.id, ci.id) {
                        return Err(NO_PERMISSION);
                    }
                    *device = encode(TAG_MIG, ci.serial);
                    return Ok(());
                }
            }
        }
        Err(NOT_FOUND)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetName(
    device: nvmlDevice_t,
    name: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: `name` is null or valid for `length` bytes.
    let buf = unsafe { slice_out(name, length) };
    with_driver(|d| {
        let text = match d.dev(device)? {
            Dev::Gpu(i) => d.machine.model(i).name.clone(),
            Dev::Mig { gpu, ci_serial, .. } => {
                let (_, gi, ci) = d.machine.find_ci(ci_serial)?;
                d.machine.mig_device_name(gpu, gi, ci)
            }
        };
        put_str(buf, &text)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUUID(
    device: nvmlDevice_t,
    uuid: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: `uuid` is null or valid for `length` bytes.
    let buf = unsafe { slice_out(uuid, length) };
    with_driver(|d| {
        let text = match d.dev(device)? {
            Dev::Gpu(i) => d.machine.spec(i).uuid.clone(),
            Dev::Mig { gpu, ci_serial, .. } => {
                let (_, gi, ci) = d.machine.find_ci(ci_serial)?;
                d.machine.mig_device_uuid(gpu, gi, ci)
            }
        };
        put_str(buf, &text)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMinorNumber(
    device: nvmlDevice_t,
    minor: *mut c_uint,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: `minor` is null or valid for a write.
    let minor = unsafe { minor.as_mut() };
    with_driver(|d| {
        *out(minor)? = d.machine.spec(d.parent(device)?).minor;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetIndex(
    device: nvmlDevice_t,
    index: *mut c_uint,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: `index` is null or valid for a write.
    let index = unsafe { index.as_mut() };
    with_driver(|d| {
        *out(index)? = d.gpu(device)? as c_uint;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v3(
    device: nvmlDevice_t,
    pci: *mut nvmlPciInfo_t,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: `pci` is null or valid for a write.
    let pci = unsafe { pci.as_mut() };
    with_driver(|d| {
        let pci = out(pci)?;
        let gpu = d.parent(device)?;
        let bus_id = d
            .machine
            .spec(gpu)
            .pci_bus_id
            .clone()
            .ok_or(NOT_SUPPORTED)?;
        // "DDDDDDDD:BB:DD.F"
        let field = |range: std::ops::Range<usize>| {
            bus_id
                .get(range)
                .and_then(|s| u32::from_str_radix(s, 16).ok())
                .unwrap_or(0)
        };
        pci.domain = field(0..8);
        pci.bus = field(9..11);
        pci.device = field(12..14);
        pci.pciDeviceId = 0;
        pci.pciSubSystemId = 0;
        put_name(&mut pci.busId, &bus_id);
        put_name(&mut pci.busIdLegacy, bus_id.get(4..).unwrap_or(&bus_id));
        Ok(())
    })
}

/// Total and used bytes of a device (a MIG device: its GPU instance's memory).
fn memory(d: &Driver, device: nvmlDevice_t) -> Result<(u64, u64), Code> {
    let m = &d.machine;
    let now = m.fixture.clock_now();
    match d.dev(device)? {
        Dev::Gpu(i) => {
            let used = m
                .processes(i, Scope::Gpu)
                .iter()
                .map(|p| p.used_mib_at(now))
                .sum::<u64>();
            Ok((m.model(i).memory_mib * MIB, used * MIB))
        }
        Dev::Mig {
            gpu,
            gi,
            ci,
            ci_serial,
        } => {
            let (_, gi_state, _) = m.find_ci(ci_serial)?;
            let total = m.gi_profile_by_id(gpu, gi_state.profile_id)?.memory_mib;
            let used = m
                .processes(gpu, Scope::Mig { gi, ci })
                .iter()
                .map(|p| p.used_mib_at(now))
                .sum::<u64>();
            Ok((total * MIB, used * MIB))
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(
    device: nvmlDevice_t,
    memory_out: *mut nvmlMemory_t,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: `memory_out` is null or valid for a write.
    let info = unsafe { memory_out.as_mut() };
    with_driver(|d| {
        let info = out(info)?;
        let (total, used) = memory(d, device)?;
        info.total = total;
        info.used = used;
        info.free = total.saturating_sub(used);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(
    device: nvmlDevice_t,
    memory_out: *mut nvmlMemory_v2_t,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: `memory_out` is null or valid for a read and a write.
    let info = unsafe { memory_out.as_mut() };
    with_driver(|d| {
        let info = out(info)?;
        if info.version != struct_version::<nvmlMemory_v2_t>(2) {
            return Err(ARGUMENT_VERSION_MISMATCH);
        }
        let (total, used) = memory(d, device)?;
        info.total = total;
        info.reserved = 0;
        info.used = used;
        info.free = total.saturating_sub(used);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCpuAffinity(
    device: nvmlDevice_t,
    cpu_set_size: c_uint,
    cpu_set: *mut c_ulong,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: `cpu_set` is null or valid for `cpu_set_size` words.
    let words = unsafe {
        (!cpu_set.is_null()).then(|| std::slice::from_raw_parts_mut(cpu_set, cpu_set_size as usize))
    };
    with_driver(|d| {
        let words = words.ok_or(INVALID_ARGUMENT)?;
        let cpus = d.machine.spec(d.parent(device)?).cpus();
        if cpus.is_empty() {
            return Err(NOT_SUPPORTED);
        }
        let bits = c_ulong::BITS;
        words.fill(0);
        for cpu in cpus {
            if let Some(w) = words.get_mut((cpu / bits) as usize) {
                *w |= 1 << (cpu % bits);
            }
        }
        Ok(())
    })
}

fn processes_v2(d: &Driver, device: nvmlDevice_t) -> Result<Vec<nvmlProcessInfo_v2_t>, Code> {
    let (gpu, scope) = match d.dev(device)? {
        Dev::Gpu(i) => (i, Scope::Gpu),
        Dev::Mig { gpu, gi, ci, .. } => (gpu, Scope::Mig { gi, ci }),
    };
    let now = d.machine.fixture.clock_now();
    Ok(d.machine
        .processes(gpu, scope)
        .iter()
        .map(|p| nvmlProcessInfo_v2_t {
            pid: p.pid,
            usedGpuMemory: p.used_mib_at(now) * MIB,
            gpuInstanceId: p.gpu_instance_id.unwrap_or(NO_VALUE),
            computeInstanceId: p.compute_instance_id.unwrap_or(NO_VALUE),
        })
        .collect())
}

/// Processes into a caller's array of `infoCount` entries.
fn put_processes<T: Copy>(
    count: Option<&mut c_uint>,
    infos: *mut T,
    items: &[T],
) -> Result<(), Code> {
    let count = out(count)?;
    let n = items.len() as c_uint;
    if n > *count || (infos.is_null() && n > 0) {
        *count = n;
        return Err(INSUFFICIENT_SIZE);
    }
    if n > 0 {
        // SAFETY: `infos` is non-null and holds `*count >= n` entries (NVML's contract).
        let slots = unsafe { std::slice::from_raw_parts_mut(infos, items.len()) };
        slots.copy_from_slice(items);
    }
    *count = n;
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    device: nvmlDevice_t,
    info_count: *mut c_uint,
    infos: *mut nvmlProcessInfo_v2_t,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: `info_count` is null or valid for a read and a write.
    let count = unsafe { info_count.as_mut() };
    with_driver(|d| put_processes(count, infos, &processes_v2(d, device)?))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v2(
    device: nvmlDevice_t,
    info_count: *mut c_uint,
    infos: *mut nvmlProcessInfo_v2_t,
) -> nvmlReturn_t {
    // SAFETY: the same contract as _v3, whose struct layout this version shares.
    unsafe { nvmlDeviceGetComputeRunningProcesses_v3(device, info_count, infos) }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses(
    device: nvmlDevice_t,
    info_count: *mut c_uint,
    infos: *mut nvmlProcessInfo_v1_t,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: `info_count` is null or valid for a read and a write.
    let count = unsafe { info_count.as_mut() };
    with_driver(|d| {
        let v1: Vec<nvmlProcessInfo_v1_t> = processes_v2(d, device)?
            .iter()
            .map(|p| nvmlProcessInfo_v1_t {
                pid: p.pid,
                usedGpuMemory: p.usedGpuMemory,
            })
            .collect();
        put_processes(count, infos, &v1)
    })
}

// ---------------------------------------------------------------- MIG mode

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigMode(
    device: nvmlDevice_t,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: both are null or valid for a write.
    let (current, pending) = unsafe { (current.as_mut(), pending.as_mut()) };
    with_driver(|d| {
        let (c, p) = d.machine.mig_mode(d.gpu(device)?)?;
        *out(current)? = c as c_uint;
        *out(pending)? = p as c_uint;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceSetMigMode(
    device: nvmlDevice_t,
    mode: c_uint,
    activation_status: *mut nvmlReturn_t,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: `activation_status` is null or valid for a write.
    let status = unsafe { activation_status.as_mut() };
    with_driver(|d| {
        let status = out(status)?;
        let gpu = d.gpu(device)?;
        *status = d.mutate(|m| m.set_mig_mode(gpu, mode))?;
        Ok(())
    })
}

// ---------------------------------------------------------------- GPU instance profiles

fn fill_gi_profile_v1(info: &mut nvmlGpuInstanceProfileInfo_t, p: &GiProfileSpec) {
    info.id = p.id;
    info.isP2pSupported = 0;
    info.sliceCount = p.slice_count;
    info.instanceCount = p.instance_count;
    info.multiprocessorCount = p.multiprocessor_count;
    info.copyEngineCount = p.copy_engines;
    info.decoderCount = p.decoders;
    info.encoderCount = p.encoders;
    info.jpegCount = p.jpegs;
    info.ofaCount = p.ofas;
    info.memorySizeMB = p.memory_mib;
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceProfileInfo(
    device: nvmlDevice_t,
    profile: c_uint,
    info: *mut nvmlGpuInstanceProfileInfo_t,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: `info` is null or valid for a write.
    let info = unsafe { info.as_mut() };
    with_driver(|d| {
        let info = out(info)?;
        let p = d.machine.gi_profile_by_index(d.gpu(device)?, profile)?;
        fill_gi_profile_v1(info, p);
        Ok(())
    })
}

/// Fill a versioned (v2 or v3) GPU instance profile struct, as its version word says.
///
/// # Safety
/// `info` must be null or point to a struct of the version written in its first word.
unsafe fn fill_gi_profile_versioned(
    info: *mut nvmlGpuInstanceProfileInfo_v2_t,
    p: &GiProfileSpec,
) -> Result<(), Code> {
    if info.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    // SAFETY: every version starts with the version word.
    let version = unsafe { info.cast::<c_uint>().read() };
    let name = format!("MIG {}", p.name);
    if version == struct_version::<nvmlGpuInstanceProfileInfo_v2_t>(2) {
        // SAFETY: the caller's struct is a v2 one, per its version word.
        let v2 = unsafe { &mut *info };
        v2.id = p.id;
        v2.isP2pSupported = 0;
        v2.sliceCount = p.slice_count;
        v2.instanceCount = p.instance_count;
        v2.multiprocessorCount = p.multiprocessor_count;
        v2.copyEngineCount = p.copy_engines;
        v2.decoderCount = p.decoders;
        v2.encoderCount = p.encoders;
        v2.jpegCount = p.jpegs;
        v2.ofaCount = p.ofas;
        v2.memorySizeMB = p.memory_mib;
        put_name(&mut v2.name, &name);
        Ok(())
    } else if version == struct_version::<nvmlGpuInstanceProfileInfo_v3_t>(3) {
        // SAFETY: the caller's struct is a v3 one, per its version word.
        let v3 = unsafe { &mut *info.cast::<nvmlGpuInstanceProfileInfo_v3_t>() };
        v3.id = p.id;
        v3.sliceCount = p.slice_count;
        v3.instanceCount = p.instance_count;
        v3.multiprocessorCount = p.multiprocessor_count;
        v3.copyEngineCount = p.copy_engines;
        v3.decoderCount = p.decoders;
        v3.encoderCount = p.encoders;
        v3.jpegCount = p.jpegs;
        v3.ofaCount = p.ofas;
        v3.memorySizeMB = p.memory_mib;
        put_name(&mut v3.name, &name);
        v3.capabilities = 0;
        Ok(())
    } else {
        Err(ARGUMENT_VERSION_MISMATCH)
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceProfileInfoV(
    device: nvmlDevice_t,
    profile: c_uint,
    info: *mut nvmlGpuInstanceProfileInfo_v2_t,
) -> nvmlReturn_t {
    with_driver(|d| {
        let p = d.machine.gi_profile_by_index(d.gpu(device)?, profile)?;
        // SAFETY: NVML's contract: `info` is null or a versioned profile struct.
        unsafe { fill_gi_profile_versioned(info, p) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceProfileInfoByIdV(
    device: nvmlDevice_t,
    profile_id: c_uint,
    info: *mut nvmlGpuInstanceProfileInfo_v2_t,
) -> nvmlReturn_t {
    with_driver(|d| {
        let p = d.machine.gi_profile_by_id(d.gpu(device)?, profile_id)?;
        // SAFETY: NVML's contract: `info` is null or a versioned profile struct.
        unsafe { fill_gi_profile_versioned(info, p) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstancePossiblePlacements_v2(
    device: nvmlDevice_t,
    profile_id: c_uint,
    placements: *mut nvmlGpuInstancePlacement_t,
    count: *mut c_uint,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: `count` is null or valid for a read and a write.
    let count = unsafe { count.as_mut() };
    with_driver(|d| {
        let items: Vec<nvmlGpuInstancePlacement_t> = d
            .machine
            .gi_placements(d.gpu(device)?, profile_id)?
            .into_iter()
            .map(|(start, size)| nvmlGpuInstancePlacement_t { start, size })
            .collect();
        put_list(placements, count, &items)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceRemainingCapacity(
    device: nvmlDevice_t,
    profile_id: c_uint,
    count: *mut c_uint,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: `count` is null or valid for a write.
    let count = unsafe { count.as_mut() };
    with_driver(|d| {
        *out(count)? = d
            .machine
            .gi_remaining_capacity(d.gpu(device)?, profile_id)?;
        Ok(())
    })
}

// ---------------------------------------------------------------- GPU instances

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceCreateGpuInstance(
    device: nvmlDevice_t,
    profile_id: c_uint,
    gpu_instance: *mut nvmlGpuInstance_t,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: `gpu_instance` is null or valid for a write.
    let gi = unsafe { gpu_instance.as_mut() };
    with_driver(|d| {
        let gi = out(gi)?;
        let gpu = d.gpu(device)?;
        let serial = d.mutate(|m| m.create_gi(gpu, profile_id, None))?;
        *gi = encode(TAG_GI, serial);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceCreateGpuInstanceWithPlacement(
    device: nvmlDevice_t,
    profile_id: c_uint,
    placement: *const nvmlGpuInstancePlacement_t,
    gpu_instance: *mut nvmlGpuInstance_t,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: `placement` is null or valid for a read and
    // `gpu_instance` null or valid for a write.
    let (placement, gi) = unsafe { (placement.as_ref().copied(), gpu_instance.as_mut()) };
    with_driver(|d| {
        let gi = out(gi)?;
        let placement = placement.ok_or(INVALID_ARGUMENT)?;
        let gpu = d.gpu(device)?;
        let wanted_size = d
            .machine
            .gi_profile_by_id(gpu, profile_id)
            .map(|p| p.placement_size);
        if wanted_size.is_ok_and(|s| s != placement.size) {
            return Err(INVALID_ARGUMENT);
        }
        let serial = d.mutate(|m| m.create_gi(gpu, profile_id, Some(placement.start)))?;
        *gi = encode(TAG_GI, serial);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn nvmlGpuInstanceDestroy(gpu_instance: nvmlGpuInstance_t) -> nvmlReturn_t {
    with_driver(|d| {
        let serial = decode(gpu_instance, TAG_GI)?;
        d.mutate(|m| m.destroy_gi(serial))
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstances(
    device: nvmlDevice_t,
    profile_id: c_uint,
    gpu_instances: *mut nvmlGpuInstance_t,
    count: *mut c_uint,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: `count` is null or valid for a read and a write.
    let count = unsafe { count.as_mut() };
    with_driver(|d| {
        if gpu_instances.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        let handles: Vec<nvmlGpuInstance_t> = d
            .machine
            .gi_list(d.gpu(device)?, profile_id)?
            .iter()
            .map(|g| encode(TAG_GI, g.serial))
            .collect();
        put_list(gpu_instances, count, &handles)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceById(
    device: nvmlDevice_t,
    id: c_uint,
    gpu_instance: *mut nvmlGpuInstance_t,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: `gpu_instance` is null or valid for a write.
    let gi = unsafe { gpu_instance.as_mut() };
    with_driver(|d| {
        let gi = out(gi)?;
        *gi = encode(TAG_GI, d.machine.gi_by_id(d.gpu(device)?, id)?.serial);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlGpuInstanceGetInfo(
    gpu_instance: nvmlGpuInstance_t,
    info: *mut nvmlGpuInstanceInfo_t,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: `info` is null or valid for a write.
    let info = unsafe { info.as_mut() };
    with_driver(|d| {
        let info = out(info)?;
        let (gpu, gi) = d.machine.find_gi(decode(gpu_instance, TAG_GI)?)?;
        info.device = gpu_handle(gpu);
        info.id = gi.id;
        info.profileId = gi.profile_id;
        info.placement = nvmlGpuInstancePlacement_t {
            start: gi.start,
            size: gi.size,
        };
        Ok(())
    })
}

// ---------------------------------------------------------------- compute instances

fn gi_serial(gpu_instance: nvmlGpuInstance_t) -> Result<u64, Code> {
    decode(gpu_instance, TAG_GI)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlGpuInstanceGetComputeInstanceProfileInfo(
    gpu_instance: nvmlGpuInstance_t,
    profile: c_uint,
    eng_profile: c_uint,
    info: *mut nvmlComputeInstanceProfileInfo_t,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: `info` is null or valid for a write.
    let info = unsafe { info.as_mut() };
    with_driver(|d| {
        let info = out(info)?;
        let p = d
            .machine
            .ci_profile(gi_serial(gpu_instance)?, profile, eng_profile)?;
        info.id = p.id;
        info.sliceCount = p.slice_count;
        info.instanceCount = p.instance_count;
        info.multiprocessorCount = p.multiprocessor_count;
        info.sharedCopyEngineCount = 0;
        info.sharedDecoderCount = 0;
        info.sharedEncoderCount = 0;
        info.sharedJpegCount = 0;
        info.sharedOfaCount = 0;
        Ok(())
    })
}

/// Fill a versioned (v2 or v3) compute instance profile struct.
///
/// # Safety
/// `info` must be null or point to a struct of the version written in its first word.
unsafe fn fill_ci_profile_versioned(
    info: *mut nvmlComputeInstanceProfileInfo_v2_t,
    p: &CiProfile,
) -> Result<(), Code> {
    if info.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    // SAFETY: every version starts with the version word.
    let version = unsafe { info.cast::<c_uint>().read() };
    let name = format!("MIG {}", p.name);
    if version == struct_version::<nvmlComputeInstanceProfileInfo_v2_t>(2) {
        // SAFETY: the caller's struct is a v2 one, per its version word.
        let v2 = unsafe { &mut *info };
        v2.id = p.id;
        v2.sliceCount = p.slice_count;
        v2.instanceCount = p.instance_count;
        v2.multiprocessorCount = p.multiprocessor_count;
        put_name(&mut v2.name, &name);
        Ok(())
    } else if version == struct_version::<nvmlComputeInstanceProfileInfo_v3_t>(3) {
        // SAFETY: the caller's struct is a v3 one, per its version word.
        let v3 = unsafe { &mut *info.cast::<nvmlComputeInstanceProfileInfo_v3_t>() };
        v3.id = p.id;
        v3.sliceCount = p.slice_count;
        v3.instanceCount = p.instance_count;
        v3.multiprocessorCount = p.multiprocessor_count;
        put_name(&mut v3.name, &name);
        v3.capabilities = 0;
        Ok(())
    } else {
        Err(ARGUMENT_VERSION_MISMATCH)
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlGpuInstanceGetComputeInstanceProfileInfoV(
    gpu_instance: nvmlGpuInstance_t,
    profile: c_uint,
    eng_profile: c_uint,
    info: *mut nvmlComputeInstanceProfileInfo_v2_t,
) -> nvmlReturn_t {
    with_driver(|d| {
        let p = d
            .machine
            .ci_profile(gi_serial(gpu_instance)?, profile, eng_profile)?;
        // SAFETY: NVML's contract: `info` is null or a versioned profile struct.
        unsafe { fill_ci_profile_versioned(info, &p) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlGpuInstanceGetComputeInstanceRemainingCapacity(
    gpu_instance: nvmlGpuInstance_t,
    profile_id: c_uint,
    count: *mut c_uint,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: `count` is null or valid for a write.
    let count = unsafe { count.as_mut() };
    with_driver(|d| {
        *out(count)? = d
            .machine
            .ci_remaining_capacity(gi_serial(gpu_instance)?, profile_id)?;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlGpuInstanceGetComputeInstancePossiblePlacements(
    gpu_instance: nvmlGpuInstance_t,
    profile_id: c_uint,
    placements: *mut nvmlComputeInstancePlacement_t,
    count: *mut c_uint,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: `count` is null or valid for a read and a write.
    let count = unsafe { count.as_mut() };
    with_driver(|d| {
        let items: Vec<nvmlComputeInstancePlacement_t> = d
            .machine
            .ci_placements(gi_serial(gpu_instance)?, profile_id)?
            .into_iter()
            .map(|(start, size)| nvmlComputeInstancePlacement_t { start, size })
            .collect();
        put_list(placements, count, &items)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlGpuInstanceCreateComputeInstance(
    gpu_instance: nvmlGpuInstance_t,
    profile_id: c_uint,
    compute_instance: *mut nvmlComputeInstance_t,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: `compute_instance` is null or valid for a write.
    let ci = unsafe { compute_instance.as_mut() };
    with_driver(|d| {
        let ci = out(ci)?;
        let gi = gi_serial(gpu_instance)?;
        let serial = d.mutate(|m| m.create_ci(gi, profile_id, None))?;
        *ci = encode(TAG_CI, serial);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlGpuInstanceCreateComputeInstanceWithPlacement(
    gpu_instance: nvmlGpuInstance_t,
    profile_id: c_uint,
    placement: *const nvmlComputeInstancePlacement_t,
    compute_instance: *mut nvmlComputeInstance_t,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: `placement` is null or valid for a read and
    // `compute_instance` null or valid for a write.
    let (placement, ci) = unsafe { (placement.as_ref().copied(), compute_instance.as_mut()) };
    with_driver(|d| {
        let ci = out(ci)?;
        let placement = placement.ok_or(INVALID_ARGUMENT)?;
        let gi = gi_serial(gpu_instance)?;
        let fits = d
            .machine
            .ci_placements(gi, profile_id)?
            .contains(&(placement.start, placement.size));
        if !fits {
            return Err(INVALID_ARGUMENT);
        }
        let serial = d.mutate(|m| m.create_ci(gi, profile_id, Some(placement.start)))?;
        *ci = encode(TAG_CI, serial);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn nvmlComputeInstanceDestroy(
    compute_instance: nvmlComputeInstance_t,
) -> nvmlReturn_t {
    with_driver(|d| {
        let serial = decode(compute_instance, TAG_CI)?;
        d.mutate(|m| m.destroy_ci(serial))
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlGpuInstanceGetComputeInstances(
    gpu_instance: nvmlGpuInstance_t,
    profile_id: c_uint,
    compute_instances: *mut nvmlComputeInstance_t,
    count: *mut c_uint,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: `count` is null or valid for a read and a write.
    let count = unsafe { count.as_mut() };
    with_driver(|d| {
        if compute_instances.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        let handles: Vec<nvmlComputeInstance_t> = d
            .machine
            .ci_list(gi_serial(gpu_instance)?, profile_id)?
            .iter()
            .map(|c| encode(TAG_CI, c.serial))
            .collect();
        put_list(compute_instances, count, &handles)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlGpuInstanceGetComputeInstanceById(
    gpu_instance: nvmlGpuInstance_t,
    id: c_uint,
    compute_instance: *mut nvmlComputeInstance_t,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: `compute_instance` is null or valid for a write.
    let ci = unsafe { compute_instance.as_mut() };
    with_driver(|d| {
        let ci = out(ci)?;
        *ci = encode(
            TAG_CI,
            d.machine.ci_by_id(gi_serial(gpu_instance)?, id)?.serial,
        );
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlComputeInstanceGetInfo_v2(
    compute_instance: nvmlComputeInstance_t,
    info: *mut nvmlComputeInstanceInfo_t,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: `info` is null or valid for a write.
    let info = unsafe { info.as_mut() };
    with_driver(|d| {
        let info = out(info)?;
        let (gpu, gi, ci) = d.machine.find_ci(decode(compute_instance, TAG_CI)?)?;
        info.device = gpu_handle(gpu);
        info.gpuInstance = encode(TAG_GI, gi.serial);
        info.id = ci.id;
        info.profileId = ci.profile_id;
        info.placement = nvmlComputeInstancePlacement_t {
            start: ci.start,
            size: ci.size,
        };
        Ok(())
    })
}

// ---------------------------------------------------------------- MIG device handles

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceIsMigDeviceHandle(
    device: nvmlDevice_t,
    is_mig: *mut c_uint,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: `is_mig` is null or valid for a write.
    let is_mig = unsafe { is_mig.as_mut() };
    with_driver(|d| {
        *out(is_mig)? = matches!(d.dev(device)?, Dev::Mig { .. }) as c_uint;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceId(
    device: nvmlDevice_t,
    id: *mut c_uint,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: `id` is null or valid for a write.
    let id = unsafe { id.as_mut() };
    with_driver(|d| match d.dev(device)? {
        Dev::Mig { gi, .. } => {
            *out(id)? = gi;
            Ok(())
        }
        Dev::Gpu(_) => Err(NOT_SUPPORTED),
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeInstanceId(
    device: nvmlDevice_t,
    id: *mut c_uint,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: `id` is null or valid for a write.
    let id = unsafe { id.as_mut() };
    with_driver(|d| match d.dev(device)? {
        Dev::Mig { ci, .. } => {
            *out(id)? = ci;
            Ok(())
        }
        Dev::Gpu(_) => Err(NOT_SUPPORTED),
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMaxMigDeviceCount(
    device: nvmlDevice_t,
    count: *mut c_uint,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: `count` is null or valid for a write.
    let count = unsafe { count.as_mut() };
    with_driver(|d| {
        *out(count)? = d.machine.mig(d.gpu(device)?)?.max_mig_devices;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigDeviceHandleByIndex(
    device: nvmlDevice_t,
    index: c_uint,
    mig_device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: `mig_device` is null or valid for a write.
    let mig_device = unsafe { mig_device.as_mut() };
    with_driver(|d| {
        let mig_device = out(mig_device)?;
        let gpu = d.gpu(device)?;
        let mig = d.machine.mig(gpu)?;
        if index >= mig.max_mig_devices {
            return Err(INVALID_ARGUMENT);
        }
        if !d.machine.gpu_state(gpu).mig_current {
            return Err(NOT_SUPPORTED);
        }
        let (gi, ci) = *d
            .machine
            .mig_devices(gpu)
            .get(index as usize)
            .ok_or(NOT_FOUND)?;
        if !d.may_open_mig(gpu, gi.id, ci.id) {
            return Err(NO_PERMISSION);
        }
        *mig_device = encode(TAG_MIG, ci.serial);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetDeviceHandleFromMigDeviceHandle(
    mig_device: nvmlDevice_t,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: `device` is null or valid for a write.
    let device = unsafe { device.as_mut() };
    with_driver(|d| match d.dev(mig_device)? {
        Dev::Mig { gpu, .. } => {
            *out(device)? = gpu_handle(gpu);
            Ok(())
        }
        Dev::Gpu(_) => Err(INVALID_ARGUMENT),
    })
}
