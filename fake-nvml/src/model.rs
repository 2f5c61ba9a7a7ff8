//! The driver's MIG state machine, free of FFI and files: MIG mode with a pending
//! state, GPU instances on memory-slice placements, compute instances on compute
//! slices, the capacity and overlap rules, processes that keep instances busy, and
//! the permission rule. Every operation either succeeds or leaves the state as it
//! was, and answers with the NVML return code a driver would give.

use nvml_wrapper_sys::bindings as nv;

use crate::fixture::{Fixture, GiProfileSpec, GpuModel, GpuSpec, MigSpec, ProcessSpec};
use crate::state::{CiState, GiState, GpuState, NodeState, STATE_FORMAT};

/// An `nvmlReturn_t`.
pub type Code = nv::nvmlReturn_t;

pub const SUCCESS: Code = nv::nvmlReturn_enum_NVML_SUCCESS;
pub const UNINITIALIZED: Code = nv::nvmlReturn_enum_NVML_ERROR_UNINITIALIZED;
pub const INVALID_ARGUMENT: Code = nv::nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
pub const NOT_SUPPORTED: Code = nv::nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED;
pub const NO_PERMISSION: Code = nv::nvmlReturn_enum_NVML_ERROR_NO_PERMISSION;
pub const NOT_FOUND: Code = nv::nvmlReturn_enum_NVML_ERROR_NOT_FOUND;
pub const INSUFFICIENT_SIZE: Code = nv::nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE;
pub const DRIVER_NOT_LOADED: Code = nv::nvmlReturn_enum_NVML_ERROR_DRIVER_NOT_LOADED;
pub const RESET_REQUIRED: Code = nv::nvmlReturn_enum_NVML_ERROR_RESET_REQUIRED;
pub const IN_USE: Code = nv::nvmlReturn_enum_NVML_ERROR_IN_USE;
pub const INSUFFICIENT_RESOURCES: Code = nv::nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_RESOURCES;
pub const ARGUMENT_VERSION_MISMATCH: Code =
    nv::nvmlReturn_enum_NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
pub const UNKNOWN: Code = nv::nvmlReturn_enum_NVML_ERROR_UNKNOWN;

/// A compute instance profile, derived from the GPU instance it would live in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CiProfile {
    /// `NVML_COMPUTE_INSTANCE_PROFILE_*`; NVML uses the same number as the id.
    pub id: u32,
    pub slice_count: u32,
    pub instance_count: u32,
    pub multiprocessor_count: u32,
    /// Without the "MIG " prefix: "3g.20gb" for the full one, "1c.3g.20gb" otherwise.
    pub name: String,
    pub placement_starts: Vec<u32>,
}

/// (compute slices, NVML_COMPUTE_INSTANCE_PROFILE_* value) pairs.
const CI_SLICES: [(u32, u32); 7] = [
    (1, nv::NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE),
    (2, nv::NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE),
    (3, nv::NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE),
    (4, nv::NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE),
    (6, nv::NVML_COMPUTE_INSTANCE_PROFILE_6_SLICE),
    (7, nv::NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE),
    (8, nv::NVML_COMPUTE_INSTANCE_PROFILE_8_SLICE),
];

/// Where a process or query is scoped: the whole GPU or one MIG device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Gpu,
    Mig { gi: u32, ci: u32 },
}

#[derive(Debug, Clone)]
pub struct Machine {
    pub fixture: Fixture,
    pub state: NodeState,
    /// Whether the caller counts as root for `require_root`.
    pub caller_is_root: bool,
}

impl Machine {
    /// A machine in the fixture's initial state.
    pub fn new(fixture: Fixture, caller_is_root: bool) -> Result<Machine, String> {
        let state = initial_state(&fixture)?;
        Ok(Machine {
            fixture,
            state,
            caller_is_root,
        })
    }

    /// True when `state` belongs to this fixture's GPUs (same UUIDs in the same order).
    pub fn state_fits(fixture: &Fixture, state: &NodeState) -> bool {
        state.format == STATE_FORMAT
            && state.gpus.len() == fixture.gpus.len()
            && state
                .gpus
                .iter()
                .zip(&fixture.gpus)
                .all(|(s, f)| s.uuid == f.uuid)
    }

    pub fn gpu_count(&self) -> usize {
        self.fixture.gpus.len()
    }

    pub fn spec(&self, gpu: usize) -> &GpuSpec {
        &self.fixture.gpus[gpu]
    }

    pub fn model(&self, gpu: usize) -> &GpuModel {
        self.fixture.model_of(&self.fixture.gpus[gpu])
    }

    pub fn gpu_state(&self, gpu: usize) -> &GpuState {
        &self.state.gpus[gpu]
    }

    /// The MIG table, or NOT_SUPPORTED for a GPU without MIG.
    pub fn mig(&self, gpu: usize) -> Result<&MigSpec, Code> {
        self.model(gpu).mig.as_ref().ok_or(NOT_SUPPORTED)
    }

    /// The MIG table of a GPU whose MIG mode is currently on (NOT_SUPPORTED otherwise).
    fn mig_on(&self, gpu: usize) -> Result<&MigSpec, Code> {
        let mig = self.mig(gpu)?;
        if self.state.gpus[gpu].mig_current {
            Ok(mig)
        } else {
            Err(NOT_SUPPORTED)
        }
    }

    fn require_root(&self) -> Result<(), Code> {
        if self.fixture.require_root && !self.caller_is_root {
            Err(NO_PERMISSION)
        } else {
            Ok(())
        }
    }

    fn requires_reset(&self, gpu: usize) -> bool {
        let spec = self.spec(gpu);
        spec.mode_change_requires_reset.unwrap_or_else(|| {
            self.model(gpu)
                .mig
                .as_ref()
                .is_some_and(|m| m.mode_change_requires_reset)
        })
    }

    // ------------------------------------------------------------ MIG mode

    pub fn mig_mode(&self, gpu: usize) -> Result<(bool, bool), Code> {
        self.mig(gpu)?;
        let s = &self.state.gpus[gpu];
        Ok((s.mig_current, s.mig_pending))
    }

    /// nvmlDeviceSetMigMode: the call's own code, and on success the activation status.
    /// The pending mode always takes the request; the current one follows at once
    /// unless processes run on the GPU (IN_USE) or the GPU needs a reset (RESET_REQUIRED).
    /// Turning MIG off while instances exist is refused with IN_USE.
    pub fn set_mig_mode(&mut self, gpu: usize, mode: u32) -> Result<Code, Code> {
        self.mig(gpu)?;
        let want = match mode {
            nv::NVML_DEVICE_MIG_ENABLE => true,
            nv::NVML_DEVICE_MIG_DISABLE => false,
            _ => return Err(INVALID_ARGUMENT),
        };
        self.require_root()?;
        if !want && !self.state.gpus[gpu].gpu_instances.is_empty() {
            return Err(IN_USE);
        }
        let busy = !self.processes(gpu, Scope::Gpu).is_empty();
        let needs_reset = self.requires_reset(gpu);
        let s = &mut self.state.gpus[gpu];
        s.mig_pending = want;
        if s.mig_current == want {
            return Ok(SUCCESS);
        }
        if busy {
            return Ok(IN_USE);
        }
        if needs_reset {
            return Ok(RESET_REQUIRED);
        }
        s.mig_current = want;
        Ok(SUCCESS)
    }

    /// What a GPU reset does: the pending mode becomes current and every instance is
    /// gone. Refused while processes run on the GPU, like `nvidia-smi -r`.
    pub fn reset_gpu(&mut self, gpu: usize) -> Result<(), String> {
        if gpu >= self.gpu_count() {
            return Err(format!(
                "no GPU {gpu}: the fixture has {} GPUs",
                self.gpu_count()
            ));
        }
        let busy = self.processes(gpu, Scope::Gpu);
        if !busy.is_empty() {
            let pids: Vec<String> = busy.iter().map(|p| p.pid.to_string()).collect();
            return Err(format!(
                "GPU {gpu} is in use by processes {}; remove them from the fixture first",
                pids.join(", ")
            ));
        }
        let s = &mut self.state.gpus[gpu];
        s.mig_current = s.mig_pending;
        s.gpu_instances.clear();
        Ok(())
    }

    /// What a reboot does: every GPU as after a reset, whatever runs on it.
    pub fn reboot(&mut self) {
        for s in &mut self.state.gpus {
            s.mig_current = s.mig_pending;
            s.gpu_instances.clear();
        }
    }

    // ------------------------------------------------------------ GPU instance profiles

    /// Profile by `NVML_GPU_INSTANCE_PROFILE_*` index. Works whatever the MIG mode,
    /// on any MIG-capable GPU (nvml.h: NOT_SUPPORTED only without MIG or profile).
    pub fn gi_profile_by_index(&self, gpu: usize, index: u32) -> Result<&GiProfileSpec, Code> {
        if index >= crate::fixture::GPU_INSTANCE_PROFILE_INDEX_LIMIT {
            return Err(INVALID_ARGUMENT);
        }
        let mig = self.mig(gpu)?;
        mig.profiles
            .iter()
            .find(|p| p.index == index)
            .ok_or(NOT_SUPPORTED)
    }

    pub fn gi_profile_by_id(&self, gpu: usize, id: u32) -> Result<&GiProfileSpec, Code> {
        self.mig(gpu)?.profile_by_id(id).ok_or(NOT_SUPPORTED)
    }

    /// All placements of a profile, used or not (MIG mode must be on).
    pub fn gi_placements(&self, gpu: usize, profile_id: u32) -> Result<Vec<(u32, u32)>, Code> {
        let mig = self.mig_on(gpu)?;
        let p = mig.profile_by_id(profile_id).ok_or(NOT_SUPPORTED)?;
        Ok(p.placement_starts
            .iter()
            .map(|&s| (s, p.placement_size))
            .collect())
    }

    /// Why a GPU instance of `profile` at `start` cannot be added now, if it cannot.
    fn gi_refusal(&self, gpu: usize, profile: &GiProfileSpec, start: u32) -> Option<Code> {
        let mig = self.mig(gpu).ok()?;
        let existing = &self.state.gpus[gpu].gpu_instances;
        let same_profile = existing
            .iter()
            .filter(|g| g.profile_id == profile.id)
            .count();
        if same_profile >= profile.instance_count as usize {
            return Some(INSUFFICIENT_RESOURCES);
        }
        let end = start + profile.placement_size;
        if existing
            .iter()
            .any(|g| start < g.start + g.size && g.start < end)
        {
            return Some(INSUFFICIENT_RESOURCES);
        }
        let conflicts = mig.conflicting_placements.iter().any(|[a, b]| {
            let pairs = [(a, b), (b, a)];
            pairs.iter().any(|(mine, other)| {
                mine.profile_id == profile.id
                    && mine.start == start
                    && existing
                        .iter()
                        .any(|g| g.profile_id == other.profile_id && g.start == other.start)
            })
        });
        if conflicts {
            return Some(INSUFFICIENT_RESOURCES);
        }
        let used: u32 = existing
            .iter()
            .filter_map(|g| mig.profile_by_id(g.profile_id))
            .map(|p| p.slice_count)
            .sum();
        if used + profile.slice_count > mig.compute_slices {
            return Some(INSUFFICIENT_RESOURCES);
        }
        None
    }

    pub fn gi_remaining_capacity(&self, gpu: usize, profile_id: u32) -> Result<u32, Code> {
        let mig = self.mig_on(gpu)?;
        let p = mig.profile_by_id(profile_id).ok_or(NOT_SUPPORTED)?;
        // Simulate filling the free placements one after another on a scratch copy.
        let mut scratch = self.clone();
        let mut count = 0;
        while let Some(start) = scratch.free_gi_start(gpu, p) {
            scratch.insert_gi(gpu, p, start);
            count += 1;
        }
        Ok(count)
    }

    /// The placement a create without placement takes: the free one with the highest
    /// start, which keeps the low slices free for the larger profiles.
    fn free_gi_start(&self, gpu: usize, p: &GiProfileSpec) -> Option<u32> {
        p.placement_starts
            .iter()
            .rev()
            .copied()
            .find(|&s| self.gi_refusal(gpu, p, s).is_none())
    }

    fn insert_gi(&mut self, gpu: usize, p: &GiProfileSpec, start: u32) -> u64 {
        let memory_slices = self.mig(gpu).map(|m| m.memory_slices).unwrap_or(8);
        let serial = self.take_serial();
        let gis = &mut self.state.gpus[gpu].gpu_instances;
        gis.push(GiState {
            id: gi_id_for(memory_slices, start, p.placement_size),
            profile_id: p.id,
            start,
            size: p.placement_size,
            serial,
            compute_instances: Vec::new(),
        });
        gis.sort_by_key(|g| g.id);
        serial
    }

    fn take_serial(&mut self) -> u64 {
        let s = self.state.next_serial;
        self.state.next_serial += 1;
        s
    }

    /// nvmlDeviceCreateGpuInstance(WithPlacement); returns the new instance's serial.
    pub fn create_gi(
        &mut self,
        gpu: usize,
        profile_id: u32,
        start: Option<u32>,
    ) -> Result<u64, Code> {
        self.mig(gpu)?;
        self.require_root()?;
        let mig = self.mig_on(gpu)?;
        let p = mig.profile_by_id(profile_id).ok_or(NOT_SUPPORTED)?.clone();
        let start = match start {
            Some(s) => {
                if !p.placement_starts.contains(&s) {
                    return Err(INVALID_ARGUMENT);
                }
                if let Some(code) = self.gi_refusal(gpu, &p, s) {
                    return Err(code);
                }
                s
            }
            None => self.free_gi_start(gpu, &p).ok_or(INSUFFICIENT_RESOURCES)?,
        };
        Ok(self.insert_gi(gpu, &p, start))
    }

    /// nvmlGpuInstanceDestroy: refused while compute instances or processes use it.
    pub fn destroy_gi(&mut self, serial: u64) -> Result<(), Code> {
        let (gpu, gi) = self.find_gi(serial)?;
        self.require_root()?;
        if !gi.compute_instances.is_empty() {
            return Err(IN_USE);
        }
        let id = gi.id;
        if self
            .processes(gpu, Scope::Gpu)
            .iter()
            .any(|p| p.gpu_instance_id == Some(id))
        {
            return Err(IN_USE);
        }
        self.state.gpus[gpu]
            .gpu_instances
            .retain(|g| g.serial != serial);
        Ok(())
    }

    /// GPU instances of one profile, by id.
    pub fn gi_list(&self, gpu: usize, profile_id: u32) -> Result<Vec<&GiState>, Code> {
        let mig = self.mig_on(gpu)?;
        mig.profile_by_id(profile_id).ok_or(NOT_SUPPORTED)?;
        Ok(self.state.gpus[gpu]
            .gpu_instances
            .iter()
            .filter(|g| g.profile_id == profile_id)
            .collect())
    }

    pub fn gi_by_id(&self, gpu: usize, id: u32) -> Result<&GiState, Code> {
        self.mig_on(gpu)?;
        self.state.gpus[gpu]
            .gpu_instances
            .iter()
            .find(|g| g.id == id)
            .ok_or(NOT_FOUND)
    }

    /// The GPU instance a handle's serial names; INVALID_ARGUMENT once destroyed.
    pub fn find_gi(&self, serial: u64) -> Result<(usize, &GiState), Code> {
        self.state
            .gpus
            .iter()
            .enumerate()
            .filter(|(_, s)| s.mig_current)
            .find_map(|(i, s)| {
                s.gpu_instances
                    .iter()
                    .find(|g| g.serial == serial)
                    .map(|g| (i, g))
            })
            .ok_or(INVALID_ARGUMENT)
    }

    // ------------------------------------------------------------ compute instances

    /// Compute instance profiles a GPU instance offers.
    pub fn ci_profiles(&self, gpu: usize, gi_profile: &GiProfileSpec) -> Vec<CiProfile> {
        let Ok(mig) = self.mig(gpu) else {
            return Vec::new();
        };
        let g = gi_profile.slice_count;
        let one_slice_sms = mig
            .profiles
            .iter()
            .filter(|p| p.slice_count == 1)
            .map(|p| p.multiprocessor_count)
            .min()
            .unwrap_or(gi_profile.multiprocessor_count / g);
        CI_SLICES
            .iter()
            .filter(|(c, _)| *c == g || (*c <= 4 && *c < g))
            .map(|&(c, id)| {
                let step = c.next_power_of_two();
                let starts: Vec<u32> = (0..g)
                    .step_by(step as usize)
                    .filter(|s| s + c <= g)
                    .collect();
                CiProfile {
                    id,
                    slice_count: c,
                    instance_count: starts.len() as u32,
                    multiprocessor_count: if c == g {
                        gi_profile.multiprocessor_count
                    } else {
                        (c * one_slice_sms).min(gi_profile.multiprocessor_count)
                    },
                    name: if c == g {
                        gi_profile.name.clone()
                    } else {
                        format!("{c}c.{}", gi_profile.name)
                    },
                    placement_starts: starts,
                }
            })
            .collect()
    }

    fn gi_profile_of(&self, gpu: usize, gi: &GiState) -> Result<GiProfileSpec, Code> {
        self.gi_profile_by_id(gpu, gi.profile_id).cloned()
    }

    /// Compute instance profile by its `NVML_COMPUTE_INSTANCE_PROFILE_*` index.
    pub fn ci_profile(&self, gi_serial: u64, index: u32, engine: u32) -> Result<CiProfile, Code> {
        if engine != nv::NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
            || index >= nv::NVML_COMPUTE_INSTANCE_PROFILE_COUNT
        {
            return Err(INVALID_ARGUMENT);
        }
        let (gpu, gi) = self.find_gi(gi_serial)?;
        let gp = self.gi_profile_of(gpu, gi)?;
        self.ci_profiles(gpu, &gp)
            .into_iter()
            .find(|c| c.id == index)
            .ok_or(NOT_SUPPORTED)
    }

    fn ci_profile_by_id(
        &self,
        gi_serial: u64,
        id: u32,
    ) -> Result<(usize, GiState, CiProfile), Code> {
        let (gpu, gi) = self.find_gi(gi_serial)?;
        let gp = self.gi_profile_of(gpu, gi)?;
        let cp = self
            .ci_profiles(gpu, &gp)
            .into_iter()
            .find(|c| c.id == id)
            .ok_or(NOT_SUPPORTED)?;
        Ok((gpu, gi.clone(), cp))
    }

    pub fn ci_placements(
        &self,
        gi_serial: u64,
        ci_profile_id: u32,
    ) -> Result<Vec<(u32, u32)>, Code> {
        let (_, _, cp) = self.ci_profile_by_id(gi_serial, ci_profile_id)?;
        Ok(cp
            .placement_starts
            .iter()
            .map(|&s| (s, cp.slice_count))
            .collect())
    }

    fn ci_fits(gi: &GiState, cp: &CiProfile, start: u32) -> bool {
        let same = gi
            .compute_instances
            .iter()
            .filter(|c| c.profile_id == cp.id)
            .count();
        let end = start + cp.slice_count;
        same < cp.instance_count as usize
            && !gi
                .compute_instances
                .iter()
                .any(|c| start < c.start + c.size && c.start < end)
    }

    pub fn ci_remaining_capacity(&self, gi_serial: u64, ci_profile_id: u32) -> Result<u32, Code> {
        let (_, gi, cp) = self.ci_profile_by_id(gi_serial, ci_profile_id)?;
        let mut scratch = gi;
        let mut count = 0;
        while let Some(&s) = cp
            .placement_starts
            .iter()
            .find(|&&s| Self::ci_fits(&scratch, &cp, s))
        {
            scratch.compute_instances.push(CiState {
                id: u32::MAX - count,
                profile_id: cp.id,
                start: s,
                size: cp.slice_count,
                serial: 0,
            });
            count += 1;
        }
        Ok(count)
    }

    /// nvmlGpuInstanceCreateComputeInstance(WithPlacement); returns the new serial.
    pub fn create_ci(
        &mut self,
        gi_serial: u64,
        ci_profile_id: u32,
        start: Option<u32>,
    ) -> Result<u64, Code> {
        let (gpu, gi, cp) = self.ci_profile_by_id(gi_serial, ci_profile_id)?;
        self.require_root()?;
        let start = match start {
            Some(s) if !cp.placement_starts.contains(&s) => return Err(INVALID_ARGUMENT),
            Some(s) if !Self::ci_fits(&gi, &cp, s) => return Err(INSUFFICIENT_RESOURCES),
            Some(s) => s,
            None => *cp
                .placement_starts
                .iter()
                .find(|&&s| Self::ci_fits(&gi, &cp, s))
                .ok_or(INSUFFICIENT_RESOURCES)?,
        };
        let id = (0..)
            .find(|id| !gi.compute_instances.iter().any(|c| c.id == *id))
            .expect("a free compute instance id");
        let serial = self.take_serial();
        let target = self.state.gpus[gpu]
            .gpu_instances
            .iter_mut()
            .find(|g| g.serial == gi_serial)
            .expect("found above");
        target.compute_instances.push(CiState {
            id,
            profile_id: cp.id,
            start,
            size: cp.slice_count,
            serial,
        });
        target.compute_instances.sort_by_key(|c| c.id);
        Ok(serial)
    }

    /// nvmlComputeInstanceDestroy: refused while a process runs in it.
    pub fn destroy_ci(&mut self, serial: u64) -> Result<(), Code> {
        let (gpu, gi, ci) = self.find_ci(serial)?;
        self.require_root()?;
        let scope = Scope::Mig {
            gi: gi.id,
            ci: ci.id,
        };
        if self
            .processes(gpu, scope)
            .iter()
            .any(|p| p.compute_instance_id == Some(ci.id))
        {
            return Err(IN_USE);
        }
        let gi_serial = gi.serial;
        for g in &mut self.state.gpus[gpu].gpu_instances {
            if g.serial == gi_serial {
                g.compute_instances.retain(|c| c.serial != serial);
            }
        }
        Ok(())
    }

    pub fn ci_list(&self, gi_serial: u64, ci_profile_id: u32) -> Result<Vec<&CiState>, Code> {
        self.ci_profile_by_id(gi_serial, ci_profile_id)?;
        let (_, gi) = self.find_gi(gi_serial)?;
        Ok(gi
            .compute_instances
            .iter()
            .filter(|c| c.profile_id == ci_profile_id)
            .collect())
    }

    pub fn ci_by_id(&self, gi_serial: u64, id: u32) -> Result<&CiState, Code> {
        let (_, gi) = self.find_gi(gi_serial)?;
        gi.compute_instances
            .iter()
            .find(|c| c.id == id)
            .ok_or(NOT_FOUND)
    }

    /// The compute instance a handle's serial names, with its GPU and GPU instance.
    pub fn find_ci(&self, serial: u64) -> Result<(usize, &GiState, &CiState), Code> {
        self.state
            .gpus
            .iter()
            .enumerate()
            .filter(|(_, s)| s.mig_current)
            .find_map(|(i, s)| {
                s.gpu_instances.iter().find_map(|g| {
                    g.compute_instances
                        .iter()
                        .find(|c| c.serial == serial)
                        .map(|c| (i, g, c))
                })
            })
            .ok_or(INVALID_ARGUMENT)
    }

    // ------------------------------------------------------------ MIG devices, processes

    /// MIG devices (one per compute instance) in NVML's index order: by GPU
    /// instance id, then compute instance id. Empty while MIG mode is off.
    pub fn mig_devices(&self, gpu: usize) -> Vec<(&GiState, &CiState)> {
        let s = &self.state.gpus[gpu];
        if !s.mig_current {
            return Vec::new();
        }
        s.gpu_instances
            .iter()
            .flat_map(|g| g.compute_instances.iter().map(move |c| (g, c)))
            .collect()
    }

    /// `nvmlDeviceGetName` of a MIG device, e.g. "NVIDIA A100-SXM4-40GB MIG 1g.5gb".
    pub fn mig_device_name(&self, gpu: usize, gi: &GiState, ci: &CiState) -> String {
        let parent = &self.model(gpu).name;
        let profile = self
            .gi_profile_by_id(gpu, gi.profile_id)
            .ok()
            .and_then(|gp| {
                self.ci_profiles(gpu, gp)
                    .into_iter()
                    .find(|c| c.id == ci.profile_id)
            })
            .map(|c| c.name)
            .unwrap_or_else(|| "unknown".to_string());
        format!("{parent} MIG {profile}")
    }

    /// `MIG-<uuid>`: stable for one instance, new when the instance is created again.
    pub fn mig_device_uuid(&self, gpu: usize, gi: &GiState, ci: &CiState) -> String {
        let seed = format!("{}/{}/{}/{}", self.spec(gpu).uuid, gi.id, ci.id, ci.serial);
        let a = fnv1a(seed.as_bytes(), 0xcbf2_9ce4_8422_2325);
        let b = fnv1a(seed.as_bytes(), 0x8422_2325_cbf2_9ce4);
        let hex = format!("{a:016x}{b:016x}");
        format!(
            "MIG-{}-{}-{}-{}-{}",
            &hex[0..8],
            &hex[8..12],
            &hex[12..16],
            &hex[16..20],
            &hex[20..32]
        )
    }

    /// Processes visible in `scope`. A process placed in an instance exists only
    /// while that instance does (and MIG mode is on).
    pub fn processes(&self, gpu: usize, scope: Scope) -> Vec<&ProcessSpec> {
        let s = &self.state.gpus[gpu];
        let instance_exists = |gi: u32, ci: Option<u32>| {
            s.mig_current
                && s.gpu_instances.iter().any(|g| {
                    g.id == gi && ci.is_none_or(|ci| g.compute_instances.iter().any(|c| c.id == ci))
                })
        };
        self.spec(gpu)
            .processes
            .iter()
            .filter(|p| match (p.gpu_instance_id, scope) {
                (None, Scope::Gpu) => true,
                (None, Scope::Mig { .. }) => false,
                (Some(gi), Scope::Gpu) => instance_exists(gi, p.compute_instance_id),
                (
                    Some(gi),
                    Scope::Mig {
                        gi: want_gi,
                        ci: want_ci,
                    },
                ) => {
                    gi == want_gi
                        && p.compute_instance_id.is_none_or(|ci| ci == want_ci)
                        && instance_exists(gi, p.compute_instance_id)
                }
            })
            .collect()
    }
}

/// GPU instance ids follow the placement: the node of a binary tree over the
/// memory slices (0 = whole GPU, 1-2 = halves, 3-6 = quarters, 7-14 = eighths on
/// an 8-slice GPU), which is why `mig-minors` lists gi0..gi14.
pub fn gi_id_for(memory_slices: u32, start: u32, size: u32) -> u32 {
    (memory_slices / size - 1) + start / size
}

fn fnv1a(bytes: &[u8], basis: u64) -> u64 {
    bytes.iter().fold(basis, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The state a fixture starts in: its MIG modes and initial instances.
pub fn initial_state(fixture: &Fixture) -> Result<NodeState, String> {
    let mut machine = Machine {
        fixture: fixture.clone(),
        state: NodeState {
            format: STATE_FORMAT,
            next_serial: 1,
            gpus: fixture
                .gpus
                .iter()
                .map(|g| GpuState {
                    uuid: g.uuid.clone(),
                    mig_current: g.mig_enabled,
                    mig_pending: g.mig_enabled,
                    gpu_instances: Vec::new(),
                })
                .collect(),
        },
        caller_is_root: true,
    };
    for (i, gpu) in fixture.gpus.iter().enumerate() {
        for (j, gi) in gpu.gpu_instances.iter().enumerate() {
            let at = format!("gpus[{i}].gpu_instances[{j}]");
            let serial = machine
                .create_gi(i, gi.profile_id, Some(gi.start))
                .map_err(|c| {
                    format!(
                        "{at}: cannot create profile {} at {}: {}",
                        gi.profile_id,
                        gi.start,
                        code_name(c)
                    )
                })?;
            let ci_ids = match &gi.compute_instance_profile_ids {
                Some(ids) => ids.clone(),
                None => {
                    let gp = machine
                        .gi_profile_by_id(i, gi.profile_id)
                        .map_err(|c| code_name(c).to_string())?;
                    let full = machine
                        .ci_profiles(i, gp)
                        .into_iter()
                        .find(|c| c.slice_count == gp.slice_count)
                        .ok_or_else(|| format!("{at}: no full compute instance profile"))?;
                    vec![full.id]
                }
            };
            for ci in ci_ids {
                machine.create_ci(serial, ci, None).map_err(|c| {
                    format!(
                        "{at}: cannot create compute instance profile {ci}: {}",
                        code_name(c)
                    )
                })?;
            }
        }
    }
    Ok(machine.state)
}

/// The name NVML's nvmlErrorString gives a code.
pub fn code_name(code: Code) -> &'static str {
    match code {
        SUCCESS => "Success",
        UNINITIALIZED => "Uninitialized",
        INVALID_ARGUMENT => "Invalid Argument",
        NOT_SUPPORTED => "Not Supported",
        NO_PERMISSION => "Insufficient Permissions",
        nv::nvmlReturn_enum_NVML_ERROR_ALREADY_INITIALIZED => "Already Initialized",
        NOT_FOUND => "Not Found",
        INSUFFICIENT_SIZE => "Insufficient Size",
        DRIVER_NOT_LOADED => "Driver Not Loaded",
        RESET_REQUIRED => "Reset Required",
        IN_USE => "In use by another client",
        INSUFFICIENT_RESOURCES => "Insufficient Resources",
        ARGUMENT_VERSION_MISMATCH => "Argument Version Mismatch",
        _ => "Unknown Error",
    }
}
