//! The fixture: the hardware of one fake node (GPU models, their MIG tables, the GPUs
//! installed and the processes running on them), read from JSON and checked.
//!
//! The fixture describes the world outside the driver and never changes while a
//! library instance runs; what the driver changes (MIG mode, instances) lives in
//! the state file (`state.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::Deserialize;

/// `NVML_GPU_INSTANCE_PROFILE_COUNT` of the NVML 13 header: profile indices are below it.
pub const GPU_INSTANCE_PROFILE_INDEX_LIMIT: u32 = 17;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fixture {
    /// Free text: where the numbers come from.
    #[serde(default)]
    pub comment: Option<String>,
    #[serde(default = "default_driver_version")]
    pub driver_version: String,
    /// `nvmlSystemGetCudaDriverVersion_v2`, e.g. 12040 for CUDA 12.4.
    #[serde(default = "default_cuda_version")]
    pub cuda_driver_version: i32,
    /// Mutating calls need euid 0, as on a real driver.
    #[serde(default = "yes")]
    pub require_root: bool,
    /// Treat the caller as non-root even when euid is 0 (tests run as root).
    #[serde(default)]
    pub simulate_non_root: bool,
    /// GPU models by a short key that `gpus[].model` refers to.
    pub models: BTreeMap<String, GpuModel>,
    pub gpus: Vec<GpuSpec>,
    /// Time zero of every `memory_curve`, in Unix seconds. Absent: the
    /// modification time of the fixture file, so a test that writes the
    /// fixture starts the clock.
    #[serde(default)]
    pub memory_clock_start: Option<f64>,
    /// Time zero as loaded (`memory_clock_start`, else the file's mtime).
    #[serde(skip)]
    pub clock_origin: f64,
}

/// One kind of GPU: its name, memory and MIG table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuModel {
    #[serde(default)]
    pub comment: Option<String>,
    /// `nvmlDeviceGetName`, e.g. "NVIDIA A100-SXM4-40GB".
    pub name: String,
    pub memory_mib: u64,
    /// Absent: the model cannot do MIG (nvmlDeviceGetMigMode answers NOT_SUPPORTED).
    #[serde(default)]
    pub mig: Option<MigSpec>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigSpec {
    /// Memory slices placements are counted in (8 on A100/H100/H200).
    #[serde(default = "eight")]
    pub memory_slices: u32,
    /// Compute slices (GPCs) the instances share (7 on A100/H100/H200).
    #[serde(default = "seven")]
    pub compute_slices: u32,
    /// `nvmlDeviceGetMaxMigDeviceCount`.
    #[serde(default = "seven")]
    pub max_mig_devices: u32,
    /// A mode change is only recorded as pending until the GPU is reset
    /// (activation status NVML_ERROR_RESET_REQUIRED); see `fake-nvml-ctl reset`.
    #[serde(default)]
    pub mode_change_requires_reset: bool,
    pub profiles: Vec<GiProfileSpec>,
    /// Pairs of placements the hardware refuses to hold at the same time even though
    /// their memory slices do not overlap (A100/H100: 4g at 0 with 3g at 4).
    #[serde(default)]
    pub conflicting_placements: Vec<[PlacementRef; 2]>,
}

/// One GPU instance profile, as `nvidia-smi mig -lgip` / `-lgipp` show it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GiProfileSpec {
    /// The `NVML_GPU_INSTANCE_PROFILE_*` index callers pass to ProfileInfo.
    pub index: u32,
    /// The profile id Create*/Placements take (19 for 1g, 0 for 7g …).
    pub id: u32,
    /// Without the "MIG " prefix, e.g. "1g.5gb" or "1g.5gb+me".
    pub name: String,
    pub slice_count: u32,
    pub instance_count: u32,
    pub multiprocessor_count: u32,
    pub memory_mib: u64,
    pub placement_starts: Vec<u32>,
    pub placement_size: u32,
    #[serde(default)]
    pub copy_engines: u32,
    #[serde(default)]
    pub decoders: u32,
    #[serde(default)]
    pub encoders: u32,
    #[serde(default)]
    pub jpegs: u32,
    #[serde(default)]
    pub ofas: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlacementRef {
    pub profile_id: u32,
    pub start: u32,
}

/// One installed GPU.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuSpec {
    /// Key into `models`.
    pub model: String,
    /// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx".
    pub uuid: String,
    /// `/dev/nvidia<minor>`; need not equal the index.
    pub minor: u32,
    #[serde(default)]
    pub pci_bus_id: Option<String>,
    /// Logical CPUs close to the GPU (`nvmlDeviceGetCpuAffinity`) as a Linux cpu list
    /// such as "0-15,32-47"; empty: NOT_SUPPORTED.
    #[serde(default)]
    pub cpu_affinity: String,
    /// MIG mode when the state file is first created.
    #[serde(default)]
    pub mig_enabled: bool,
    /// Overrides the model's `mode_change_requires_reset` for this GPU.
    #[serde(default)]
    pub mode_change_requires_reset: Option<bool>,
    /// Instances that exist when the state file is first created.
    #[serde(default)]
    pub gpu_instances: Vec<InitialGpuInstance>,
    /// Compute processes running on this GPU (re-read at every nvmlInit).
    #[serde(default)]
    pub processes: Vec<ProcessSpec>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InitialGpuInstance {
    pub profile_id: u32,
    pub start: u32,
    /// Compute instances by profile id; absent: one compute instance spanning the GPU instance.
    #[serde(default)]
    pub compute_instance_profile_ids: Option<Vec<u32>>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessSpec {
    pub pid: u32,
    /// Memory the process holds; with `memory_curve`, only its value before the curve is read.
    #[serde(default)]
    pub used_memory_mib: u64,
    /// Memory over time: `[[seconds, MiB], ...]`, seconds since the fixture's
    /// clock start, strictly increasing. Read linearly interpolated at the wall
    /// time of each call; before the first point the first value holds, after
    /// the last point the last. Lets a test drive a leak or a steady job.
    #[serde(default)]
    pub memory_curve: Option<Vec<(f64, f64)>>,
    /// Set for a process inside a MIG device; it only exists while that instance does.
    #[serde(default)]
    pub gpu_instance_id: Option<u32>,
    #[serde(default)]
    pub compute_instance_id: Option<u32>,
}

impl ProcessSpec {
    /// MiB held `t` seconds after the clock start.
    pub fn used_mib_at(&self, t: f64) -> u64 {
        let Some(curve) = self.memory_curve.as_deref().filter(|c| !c.is_empty()) else {
            return self.used_memory_mib;
        };
        let (t0, v0) = curve[0];
        if t <= t0 {
            return v0 as u64;
        }
        for w in curve.windows(2) {
            let ((ta, va), (tb, vb)) = (w[0], w[1]);
            if t <= tb {
                return (va + (vb - va) * (t - ta) / (tb - ta)) as u64;
            }
        }
        curve[curve.len() - 1].1 as u64
    }

    fn check(&self) -> Result<(), String> {
        let Some(curve) = &self.memory_curve else {
            return Ok(());
        };
        if curve.is_empty() {
            return Err("memory_curve: empty; give at least one [seconds, MiB] point".into());
        }
        for (i, (t, v)) in curve.iter().enumerate() {
            if !t.is_finite() || !v.is_finite() || *v < 0.0 {
                return Err(format!(
                    "memory_curve[{i}]: [{t}, {v}] is not [finite seconds, MiB >= 0]"
                ));
            }
            if i > 0 && *t <= curve[i - 1].0 {
                return Err(format!(
                    "memory_curve[{i}]: times must increase ({t} after {})",
                    curve[i - 1].0
                ));
            }
        }
        Ok(())
    }
}

fn default_driver_version() -> String {
    "550.54.15".to_string()
}
fn default_cuda_version() -> i32 {
    12040
}
fn yes() -> bool {
    true
}
fn eight() -> u32 {
    8
}
fn seven() -> u32 {
    7
}

impl Fixture {
    /// Read and check a fixture file; the error names the file and the problem.
    pub fn load(path: &Path) -> Result<Fixture, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read fixture {}: {e}", path.display()))?;
        let mut fixture =
            Self::parse(&text).map_err(|e| format!("fixture {}: {e}", path.display()))?;
        fixture.clock_origin = match fixture.memory_clock_start {
            Some(t) => t,
            None => std::fs::metadata(path)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0.0, |d| d.as_secs_f64()),
        };
        Ok(fixture)
    }

    /// Seconds since the clock start of the memory curves (negative before it).
    pub fn clock_now(&self) -> f64 {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        now - self.clock_origin
    }

    pub fn parse(text: &str) -> Result<Fixture, String> {
        let fixture: Fixture = serde_json::from_str(text).map_err(|e| e.to_string())?;
        fixture.check()?;
        Ok(fixture)
    }

    /// The model of GPU `index`; `check` guarantees it exists.
    pub fn model_of(&self, gpu: &GpuSpec) -> &GpuModel {
        &self.models[&gpu.model]
    }

    fn check(&self) -> Result<(), String> {
        for (key, model) in &self.models {
            if let Some(mig) = &model.mig {
                mig.check().map_err(|e| format!("models.{key}.mig: {e}"))?;
            }
        }
        let mut uuids = BTreeSet::new();
        let mut minors = BTreeSet::new();
        for (i, gpu) in self.gpus.iter().enumerate() {
            let at = format!("gpus[{i}]");
            let model = self.models.get(&gpu.model).ok_or_else(|| {
                format!(
                    "{at}.model: no model {:?} (models: {})",
                    gpu.model,
                    self.models.keys().cloned().collect::<Vec<_>>().join(", ")
                )
            })?;
            if !gpu.uuid.starts_with("GPU-") || gpu.uuid.len() + 1 > 80 {
                return Err(format!(
                    "{at}.uuid: {:?} must look like GPU-<uuid>",
                    gpu.uuid
                ));
            }
            parse_cpu_list(&gpu.cpu_affinity).map_err(|e| format!("{at}.cpu_affinity: {e}"))?;
            for (j, p) in gpu.processes.iter().enumerate() {
                p.check().map_err(|e| format!("{at}.processes[{j}].{e}"))?;
            }
            if !uuids.insert(gpu.uuid.clone()) {
                return Err(format!("{at}.uuid: {} is used twice", gpu.uuid));
            }
            if !minors.insert(gpu.minor) {
                return Err(format!("{at}.minor: {} is used twice", gpu.minor));
            }
            if model.mig.is_none() && (gpu.mig_enabled || !gpu.gpu_instances.is_empty()) {
                return Err(format!(
                    "{at}: model {} cannot do MIG, so mig_enabled/gpu_instances are not allowed",
                    gpu.model
                ));
            }
            if !gpu.gpu_instances.is_empty() && !gpu.mig_enabled {
                return Err(format!(
                    "{at}.gpu_instances: instances need mig_enabled: true"
                ));
            }
        }
        Ok(())
    }
}

impl GpuSpec {
    /// The CPUs of `cpu_affinity` (checked when the fixture was loaded).
    pub fn cpus(&self) -> Vec<u32> {
        parse_cpu_list(&self.cpu_affinity).unwrap_or_default()
    }
}

/// "0-3,8,10-11" → [0, 1, 2, 3, 8, 10, 11].
pub fn parse_cpu_list(text: &str) -> Result<Vec<u32>, String> {
    let mut cpus = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad = || format!("{part:?} is not a CPU number or range like 0-15");
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (
                a.parse::<u32>().map_err(|_| bad())?,
                b.parse::<u32>().map_err(|_| bad())?,
            ),
            None => {
                let n = part.parse::<u32>().map_err(|_| bad())?;
                (n, n)
            }
        };
        if lo > hi || hi >= 4096 {
            return Err(bad());
        }
        cpus.extend(lo..=hi);
    }
    Ok(cpus)
}

impl MigSpec {
    pub fn profile_by_id(&self, id: u32) -> Option<&GiProfileSpec> {
        self.profiles.iter().find(|p| p.id == id)
    }

    fn check(&self) -> Result<(), String> {
        if self.memory_slices == 0 || !self.memory_slices.is_power_of_two() {
            return Err(format!(
                "memory_slices {} must be a power of two",
                self.memory_slices
            ));
        }
        let mut ids = BTreeSet::new();
        let mut indices = BTreeSet::new();
        for p in &self.profiles {
            let at = format!("profile {} (id {})", p.name, p.id);
            if p.index >= GPU_INSTANCE_PROFILE_INDEX_LIMIT {
                return Err(format!(
                    "{at}: index {} is not an NVML_GPU_INSTANCE_PROFILE_* value (< {GPU_INSTANCE_PROFILE_INDEX_LIMIT})",
                    p.index
                ));
            }
            if !ids.insert(p.id) || !indices.insert(p.index) {
                return Err(format!("{at}: id or index used twice"));
            }
            if p.name.starts_with("MIG ") {
                return Err(format!("{at}: write the name without the \"MIG \" prefix"));
            }
            let size = p.placement_size;
            if size == 0 || !size.is_power_of_two() || size > self.memory_slices {
                return Err(format!(
                    "{at}: placement_size {size} must be a power of two up to {}",
                    self.memory_slices
                ));
            }
            if p.slice_count == 0 || p.slice_count > self.compute_slices {
                return Err(format!(
                    "{at}: slice_count {} must be 1..={}",
                    p.slice_count, self.compute_slices
                ));
            }
            if p.placement_starts.is_empty() {
                return Err(format!("{at}: placement_starts is empty"));
            }
            for &s in &p.placement_starts {
                if s % size != 0 || s + size > self.memory_slices {
                    return Err(format!(
                        "{at}: start {s} is not aligned to size {size} inside {} memory slices",
                        self.memory_slices
                    ));
                }
            }
            if p.instance_count == 0 {
                return Err(format!("{at}: instance_count must be at least 1"));
            }
        }
        for pair in &self.conflicting_placements {
            for r in pair {
                let ok = self
                    .profile_by_id(r.profile_id)
                    .is_some_and(|p| p.placement_starts.contains(&r.start));
                if !ok {
                    return Err(format!(
                        "conflicting_placements: profile {} has no placement starting at {}",
                        r.profile_id, r.start
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"{
        "models": {"v100": {"name": "Tesla V100-SXM2-32GB", "memory_mib": 32768}},
        "gpus": [{"model": "v100", "uuid": "GPU-00000000-0000-0000-0000-000000000001", "minor": 0}]
    }"#;

    #[test]
    fn minimal_fixture_has_defaults() {
        let f = Fixture::parse(MINIMAL).unwrap();
        assert!(f.require_root);
        assert!(!f.simulate_non_root);
        assert_eq!(f.gpus.len(), 1);
        assert!(f.model_of(&f.gpus[0]).mig.is_none());
    }

    #[test]
    fn unknown_model_is_named() {
        let text = MINIMAL.replace("\"model\": \"v100\"", "\"model\": \"a100\"");
        let err = Fixture::parse(&text).unwrap_err();
        assert!(
            err.contains("gpus[0].model") && err.contains("a100"),
            "{err}"
        );
    }

    #[test]
    fn unknown_keys_are_refused() {
        let text = MINIMAL.replace("\"minor\": 0", "\"minor\": 0, \"minr\": 1");
        let err = Fixture::parse(&text).unwrap_err();
        assert!(err.contains("minr"), "{err}");
    }

    #[test]
    fn cpu_lists_parse_like_sysfs() {
        assert_eq!(
            parse_cpu_list("0-3,8, 10-11").unwrap(),
            vec![0, 1, 2, 3, 8, 10, 11]
        );
        assert_eq!(parse_cpu_list("").unwrap(), Vec::<u32>::new());
        assert!(parse_cpu_list("3-1").is_err());
        assert!(parse_cpu_list("a").is_err());
    }

    #[test]
    fn misaligned_placement_is_refused() {
        let text = r#"{
            "models": {"x": {"name": "X", "memory_mib": 1000, "mig": {"profiles": [
                {"index": 1, "id": 14, "name": "2g.10gb", "slice_count": 2, "instance_count": 3,
                 "multiprocessor_count": 28, "memory_mib": 9984, "placement_starts": [1], "placement_size": 2}
            ]}}},
            "gpus": [{"model": "x", "uuid": "GPU-1", "minor": 0}]
        }"#;
        let err = Fixture::parse(text).unwrap_err();
        assert!(err.contains("not aligned"), "{err}");
    }

    #[test]
    fn instances_without_mig_mode_are_refused() {
        let text = MINIMAL.replace(
            "\"minor\": 0",
            "\"minor\": 0, \"gpu_instances\": [{\"profile_id\": 19, \"start\": 0}]",
        );
        let err = Fixture::parse(&text).unwrap_err();
        assert!(err.contains("cannot do MIG"), "{err}");
    }
}
