//! The MIG geometry of one GPU model: its GPU-instance profiles and where each may be placed.
//!
//! A geometry is plain data, independent of NVML, so the planner can be tested
//! alone. `GpuGeometry::from_profile_infos` builds one from what NVML reports
//! on a node (profile info and possible placements); `builtin` holds tables for
//! the models the project knows, taken from `nvidia-smi mig -lgip/-lgipp`
//! output (see `docs/mig-layouts.md`).

use std::collections::BTreeSet;
use std::fmt;

use anyhow::{bail, Result};
use serde::Serialize;

/// Placements are kept as bit masks of memory slices in a `u32`.
pub const MAX_MEMORY_SLICES: u8 = 32;

/// One GPU-instance profile of a GPU model, such as `1g.5gb` on an A100-40GB.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Profile {
    /// The name without NVML's `MIG ` prefix, lower case: `1g.5gb`, `1g.5gb+me`.
    pub name: String,
    /// NVML GPU-instance profile id (`NVML_GPU_INSTANCE_PROFILE_*` value, e.g. 19 for 1g).
    pub id: u32,
    /// Compute slices (GPCs) an instance gets: the `1` of `1g.5gb`.
    pub compute_slices: u8,
    /// Memory slices one placement covers (the placement size).
    pub memory_slices: u8,
    /// How many instances of this profile fit on an empty GPU.
    pub max_instances: u8,
    /// Usable memory of one instance, in MiB.
    pub memory_mib: u64,
    /// Streaming multiprocessors of one instance.
    pub sms: u32,
    /// Memory slices at which an instance may start, ascending.
    pub placement_starts: Vec<u8>,
}

impl Profile {
    /// The memory slices an instance at `start` covers, as a bit mask.
    pub fn mask_at(&self, start: u8) -> u32 {
        slice_mask(start, self.memory_slices)
    }

    /// True for profiles with an attribute suffix (`+me`, `+gfx`, `-me`):
    /// they exist once per GPU and are not what plain layouts ask for.
    pub fn has_attributes(&self) -> bool {
        self.name.contains(['+', '-'])
    }
}

/// Bit mask of `size` memory slices from `start`.
pub(crate) fn slice_mask(start: u8, size: u8) -> u32 {
    let ones = if size >= 32 {
        u32::MAX
    } else {
        (1u32 << size) - 1
    };
    ones << start
}

/// A GPU model's MIG geometry: memory and compute slices and the profiles, largest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuGeometry {
    model: String,
    memory_slices: u8,
    compute_slices: u8,
    profiles: Vec<Profile>,
}

/// One GPU-instance profile as NVML reports it (`nvmlGpuInstanceProfileInfo_t` plus
/// `nvmlDeviceGetGpuInstancePossiblePlacements`), in NVML's own integer widths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileInfo {
    /// `MIG 1g.5gb` or `1g.5gb`.
    pub name: String,
    pub id: u32,
    /// `sliceCount`: compute slices.
    pub slice_count: u32,
    /// `instanceCount`: the most instances on an empty GPU.
    pub instance_count: u32,
    pub memory_mib: u64,
    /// `multiprocessorCount`.
    pub sms: u32,
    pub placements: Vec<PlacementInfo>,
}

/// One possible placement: `start` and `size` in memory slices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlacementInfo {
    pub start: u32,
    pub size: u32,
}

impl GpuGeometry {
    /// Build and check a geometry. Profiles are sorted largest first (placement
    /// size, then compute slices, then id), the order the planner tries them.
    ///
    /// The GPU's memory slices are the end of the furthest placement; its compute
    /// slices are those of the largest profile (7 of `7g.40gb` on an A100).
    pub fn new(model: impl Into<String>, mut profiles: Vec<Profile>) -> Result<GpuGeometry> {
        let model = model.into();
        if profiles.is_empty() {
            bail!("GPU model {model:?} reports no MIG profile with a placement");
        }
        let mut names = BTreeSet::new();
        let mut ids = BTreeSet::new();
        let mut memory_slices = 0u8;
        for p in &mut profiles {
            p.name = normalize_profile_name(&p.name);
            p.placement_starts.sort_unstable();
            p.placement_starts.dedup();
            if p.name.is_empty() {
                bail!(
                    "GPU model {model:?}: a MIG profile (id {}) has no name",
                    p.id
                );
            }
            if !names.insert(p.name.clone()) {
                bail!(
                    "GPU model {model:?}: MIG profile {} is listed twice",
                    p.name
                );
            }
            if !ids.insert(p.id) {
                bail!(
                    "GPU model {model:?}: MIG profile id {} is listed twice",
                    p.id
                );
            }
            if p.memory_slices == 0 || p.compute_slices == 0 || p.max_instances == 0 {
                bail!(
                    "GPU model {model:?}: MIG profile {} has zero slices or instances",
                    p.name
                );
            }
            if p.placement_starts.is_empty() {
                bail!(
                    "GPU model {model:?}: MIG profile {} has no placement",
                    p.name
                );
            }
            for &start in &p.placement_starts {
                let end = u16::from(start) + u16::from(p.memory_slices);
                if end > u16::from(MAX_MEMORY_SLICES) {
                    bail!(
                        "GPU model {model:?}: MIG profile {} placement {start}+{} goes past {} memory slices",
                        p.name,
                        p.memory_slices,
                        MAX_MEMORY_SLICES
                    );
                }
                memory_slices = memory_slices.max(end as u8);
            }
        }
        let compute_slices = profiles.iter().map(|p| p.compute_slices).max().unwrap_or(0);
        profiles.sort_by(|a, b| {
            b.memory_slices
                .cmp(&a.memory_slices)
                .then(b.compute_slices.cmp(&a.compute_slices))
                .then(a.has_attributes().cmp(&b.has_attributes()))
                .then(a.id.cmp(&b.id))
        });
        Ok(GpuGeometry {
            model,
            memory_slices,
            compute_slices,
            profiles,
        })
    }

    /// Build a geometry from NVML's profile info and possible placements. Profiles
    /// without placements (not supported by this GPU) are left out.
    pub fn from_profile_infos(model: &str, infos: &[ProfileInfo]) -> Result<GpuGeometry> {
        let mut profiles = Vec::new();
        for info in infos {
            if info.placements.is_empty() {
                continue;
            }
            let name = normalize_profile_name(&info.name);
            let size = info.placements[0].size;
            if let Some(odd) = info.placements.iter().find(|p| p.size != size) {
                bail!(
                    "GPU model {model:?}: MIG profile {name} has placements of different sizes ({size} and {})",
                    odd.size
                );
            }
            let narrow = |what: &str, v: u32| -> Result<u8> {
                u8::try_from(v).map_err(|_| {
                    anyhow::anyhow!(
                        "GPU model {model:?}: MIG profile {name}: {what} {v} is out of range"
                    )
                })
            };
            let mut starts = Vec::with_capacity(info.placements.len());
            for p in &info.placements {
                starts.push(narrow("placement start", p.start)?);
            }
            profiles.push(Profile {
                name: name.clone(),
                id: info.id,
                compute_slices: narrow("slice count", info.slice_count)?,
                memory_slices: narrow("placement size", size)?,
                max_instances: narrow("instance count", info.instance_count)?,
                memory_mib: info.memory_mib,
                sms: info.sms,
                placement_starts: starts,
            });
        }
        GpuGeometry::new(model, profiles)
    }

    /// The model name, e.g. `NVIDIA A100-SXM4-40GB`.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// Memory slices of the whole GPU (8 on A100, H100 and H200).
    pub fn memory_slices(&self) -> u8 {
        self.memory_slices
    }

    /// Compute slices of the whole GPU (7 on A100, H100 and H200).
    pub fn compute_slices(&self) -> u8 {
        self.compute_slices
    }

    /// The profiles, largest first.
    pub fn profiles(&self) -> &[Profile] {
        &self.profiles
    }

    /// The profile named `name` (case-insensitive, `MIG ` prefix allowed).
    pub fn profile(&self, name: &str) -> Option<&Profile> {
        let name = normalize_profile_name(name);
        self.profiles.iter().find(|p| p.name == name)
    }

    /// Position of a profile in `profiles()`.
    pub(crate) fn profile_index(&self, name: &str) -> Option<usize> {
        let name = normalize_profile_name(name);
        self.profiles.iter().position(|p| p.name == name)
    }

    /// Profile names, largest first, for messages.
    pub fn profile_names(&self) -> Vec<&str> {
        self.profiles.iter().map(|p| p.name.as_str()).collect()
    }
}

impl fmt::Display for GpuGeometry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({} memory slices, {} compute slices; profiles {})",
            self.model,
            self.memory_slices,
            self.compute_slices,
            self.profile_names().join(", ")
        )
    }
}

/// A MIG profile name taken apart: `<compute>g.<memory>gb` and NVIDIA's
/// attribute suffixes (`+me`, `-me`, `+gfx`, `+me.all`, …). The one check of
/// "is this a profile name" that specs, plans and layouts share.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileName {
    pub compute_slices: u32,
    pub memory_gb: u32,
    /// The suffix as written, e.g. `+me`; empty for a plain profile.
    pub attributes: String,
}

impl ProfileName {
    /// `1g.5gb`, `1g.10gb+me`, `1g.24gb-me`, `1g.23gb+gfx`, `1g.12gb+me.all`;
    /// `None` for anything else (lower case, as Slurm and NVML write them).
    /// Split at the first `+` or `-` after the memory size.
    pub fn parse(s: &str) -> Option<ProfileName> {
        let split = s.find(['+', '-']).unwrap_or(s.len());
        let (base, attributes) = s.split_at(split);
        let (g, mem) = base.split_once("g.")?;
        let mem = mem.strip_suffix("gb")?;
        let number = |t: &str| -> Option<u32> {
            (!t.is_empty() && t.len() <= 3 && t.bytes().all(|b| b.is_ascii_digit()))
                .then(|| t.parse().ok())
                .flatten()
                .filter(|n| *n > 0)
        };
        // Attribute suffixes: one or more `[+-]` then `[a-z0-9.]+` (`+me`,
        // `-me`, `+gfx`, `+me.all`, and what later drivers add in that form).
        let mut rest = attributes;
        while !rest.is_empty() {
            let after_sign = rest.strip_prefix(['+', '-'])?;
            let end = after_sign
                .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.'))
                .unwrap_or(after_sign.len());
            if end == 0 {
                return None;
            }
            rest = &after_sign[end..];
        }
        Some(ProfileName {
            compute_slices: number(g)?,
            memory_gb: number(mem)?,
            attributes: attributes.to_string(),
        })
    }
}

/// `MIG 1g.5gb` → `1g.5gb`; trims and lower-cases.
pub fn normalize_profile_name(name: &str) -> String {
    let trimmed = name.trim();
    let bare = match trimmed.get(..4) {
        Some(prefix) if prefix.eq_ignore_ascii_case("mig ") => &trimmed[4..],
        _ => trimmed,
    };
    bare.trim().to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(name: &str, id: u32, c: u32, n: u32, starts: &[u32], size: u32) -> ProfileInfo {
        ProfileInfo {
            name: name.into(),
            id,
            slice_count: c,
            instance_count: n,
            memory_mib: 1000,
            sms: 14 * c,
            placements: starts
                .iter()
                .map(|&s| PlacementInfo { start: s, size })
                .collect(),
        }
    }

    #[test]
    fn profile_names_with_every_attribute_form() {
        for ok in [
            "1g.5gb",
            "1g.10gb+me",
            "1g.24gb-me",
            "1g.23gb+gfx",
            "1g.12gb+me.all",
            "7g.141gb",
        ] {
            assert!(ProfileName::parse(ok).is_some(), "{ok}");
        }
        assert_eq!(
            ProfileName::parse("2g.35gb+me"),
            Some(ProfileName {
                compute_slices: 2,
                memory_gb: 35,
                attributes: "+me".into()
            })
        );
        for bad in [
            "a100",
            "1g.5g",
            "0g.5gb",
            "1g.5gb+",
            "1g.5gb+ME",
            "g.5gb",
            "1g.5gb me",
            "1234g.5gb",
        ] {
            assert!(ProfileName::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn from_profile_infos_sorts_largest_first_and_derives_slices() {
        let infos = vec![
            info("MIG 1g.5gb", 19, 1, 7, &[0, 1, 2, 3, 4, 5, 6], 1),
            info("MIG 7g.40gb", 0, 7, 1, &[0], 8),
            info("MIG 3g.20gb", 9, 3, 2, &[4, 0], 4),
            info("MIG 2g.10gb+me", 99, 2, 1, &[], 2),
        ];
        let g = GpuGeometry::from_profile_infos("NVIDIA A100-SXM4-40GB", &infos).unwrap();
        assert_eq!(g.profile_names(), ["7g.40gb", "3g.20gb", "1g.5gb"]);
        assert_eq!(g.memory_slices(), 8);
        assert_eq!(g.compute_slices(), 7);
        assert_eq!(g.profile("MIG 3G.20GB").unwrap().placement_starts, [0, 4]);
        assert!(
            g.profile("2g.10gb+me").is_none(),
            "profiles without placements are dropped"
        );
    }

    #[test]
    fn inconsistent_nvml_data_is_an_error_not_a_panic() {
        let mixed = ProfileInfo {
            placements: vec![
                PlacementInfo { start: 0, size: 2 },
                PlacementInfo { start: 2, size: 4 },
            ],
            ..info("1g.10gb", 15, 1, 4, &[], 2)
        };
        assert!(GpuGeometry::from_profile_infos("x", &[mixed]).is_err());
        let far = info("1g.5gb", 19, 1, 7, &[300], 1);
        assert!(GpuGeometry::from_profile_infos("x", &[far]).is_err());
        let past = info("1g.5gb", 19, 1, 7, &[31], 2);
        assert!(GpuGeometry::from_profile_infos("x", &[past]).is_err());
        let twice = [
            info("1g.5gb", 19, 1, 7, &[0], 1),
            info("MIG 1g.5gb", 20, 1, 1, &[0], 1),
        ];
        assert!(GpuGeometry::from_profile_infos("x", &twice).is_err());
        assert!(GpuGeometry::from_profile_infos("x", &[]).is_err());
    }

    #[test]
    fn masks_cover_the_placement() {
        assert_eq!(slice_mask(0, 8), 0xff);
        assert_eq!(slice_mask(4, 4), 0xf0);
        assert_eq!(slice_mask(6, 1), 0x40);
        assert_eq!(slice_mask(0, 32), u32::MAX);
    }

    #[test]
    fn names_are_normalized() {
        assert_eq!(normalize_profile_name(" MIG 1g.5gb "), "1g.5gb");
        assert_eq!(normalize_profile_name("3G.20GB"), "3g.20gb");
        assert_eq!(normalize_profile_name("mig"), "mig");
    }
}
