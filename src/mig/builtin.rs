//! Built-in MIG geometries of the GPU models the project knows, for planning without NVML.
//!
//! Sources (see `docs/mig-layouts.md` and `shared/reference/mig-and-gres.md` §2.8):
//! profile ids, instance counts, usable memory and SMs from `nvidia-smi mig -lgip`
//! output quoted in NVIDIA forum thread 170488 (A100-40GB), `NVIDIA/mig-parted#97`
//! (A100-80GB), `stackhpc/ansible-slurm-appliance` docs/mig.md (H100-80GB) and
//! `NVIDIA/mig-parted#120` (H200); placements from `nvidia-smi mig -lgipp`, identical
//! on all four (`NVIDIA/go-nvml` `pkg/nvml/mock/gpus/a100.go`). Memory moves a little
//! between drivers: on a node, read the geometry from NVML instead.

use super::profile::{GpuGeometry, Profile};

/// Start slices of the 8-slice placement table shared by A100, H100 and H200.
const STARTS_1G: &[u8] = &[0, 1, 2, 3, 4, 5, 6];
const STARTS_1G_2X: &[u8] = &[0, 2, 4, 6];
const STARTS_2G: &[u8] = &[0, 2, 4];
const STARTS_3G: &[u8] = &[0, 4];
const STARTS_FULL: &[u8] = &[0];

/// Usable memory and SMs of one model's seven standard profiles, smallest first:
/// 1g, 1g+me, 1g with twice the memory, 2g, 3g, 4g, 7g.
struct Table {
    model: &'static str,
    names: [&'static str; 7],
    gib_hundredths: [u64; 7],
    sms: [u32; 7],
}

fn build(t: &Table) -> GpuGeometry {
    // (profile id, compute slices, placement size, max instances, starts), in `names` order.
    const SHAPE: [(u32, u8, u8, u8, &[u8]); 7] = [
        (19, 1, 1, 7, STARTS_1G),
        (20, 1, 1, 1, STARTS_1G),
        (15, 1, 2, 4, STARTS_1G_2X),
        (14, 2, 2, 3, STARTS_2G),
        (9, 3, 4, 2, STARTS_3G),
        (5, 4, 4, 1, STARTS_FULL),
        (0, 7, 8, 1, STARTS_FULL),
    ];
    let profiles = SHAPE
        .iter()
        .enumerate()
        .map(|(i, &(id, compute, size, max, starts))| Profile {
            name: t.names[i].to_string(),
            id,
            compute_slices: compute,
            memory_slices: size,
            max_instances: max,
            // nvidia-smi prints GiB with two decimals; 19.62 is 19.625 rounded.
            memory_mib: gib_hundredths_to_mib(t.gib_hundredths[i]),
            sms: t.sms[i],
            placement_starts: starts.to_vec(),
        })
        .collect();
    GpuGeometry::new(t.model, profiles).expect("built-in MIG tables are consistent (unit-tested)")
}

/// 4.75 GiB → 4864 MiB; x.62 is read as x.625 (nvidia-smi rounds 19.625 to 19.62).
fn gib_hundredths_to_mib(h: u64) -> u64 {
    let adjusted = if h % 100 == 62 { h * 10 + 5 } else { h * 10 };
    adjusted * 1024 / 1000
}

/// NVIDIA A100-SXM4-40GB.
pub fn a100_40gb() -> GpuGeometry {
    build(&Table {
        model: "NVIDIA A100-SXM4-40GB",
        names: [
            "1g.5gb",
            "1g.5gb+me",
            "1g.10gb",
            "2g.10gb",
            "3g.20gb",
            "4g.20gb",
            "7g.40gb",
        ],
        gib_hundredths: [475, 475, 962, 975, 1962, 1962, 3950],
        sms: [14, 14, 14, 28, 42, 56, 98],
    })
}

/// NVIDIA A100-SXM4-80GB (the PCIe 80GB card has the same profiles).
pub fn a100_80gb() -> GpuGeometry {
    build(&Table {
        model: "NVIDIA A100-SXM4-80GB",
        names: [
            "1g.10gb",
            "1g.10gb+me",
            "1g.20gb",
            "2g.20gb",
            "3g.40gb",
            "4g.40gb",
            "7g.80gb",
        ],
        gib_hundredths: [950, 950, 1950, 1950, 3925, 3925, 7850],
        sms: [14, 14, 14, 28, 42, 56, 98],
    })
}

/// NVIDIA H100 80GB HBM3 (SXM).
pub fn h100_80gb() -> GpuGeometry {
    build(&Table {
        model: "NVIDIA H100 80GB HBM3",
        names: [
            "1g.10gb",
            "1g.10gb+me",
            "1g.20gb",
            "2g.20gb",
            "3g.40gb",
            "4g.40gb",
            "7g.80gb",
        ],
        gib_hundredths: [975, 975, 1962, 1962, 3950, 3950, 7925],
        sms: [16, 16, 26, 32, 60, 64, 132],
    })
}

/// NVIDIA H200 (141GB HBM3e).
pub fn h200() -> GpuGeometry {
    build(&Table {
        model: "NVIDIA H200",
        names: [
            "1g.18gb",
            "1g.18gb+me",
            "1g.35gb",
            "2g.35gb",
            "3g.71gb",
            "4g.71gb",
            "7g.141gb",
        ],
        gib_hundredths: [1600, 1600, 3225, 3225, 6950, 6950, 13975],
        sms: [16, 16, 26, 32, 60, 64, 132],
    })
}

/// Every built-in geometry.
pub fn all() -> Vec<GpuGeometry> {
    vec![a100_40gb(), a100_80gb(), h100_80gb(), h200()]
}

/// The built-in geometry for an NVML device name such as `NVIDIA A100-SXM4-40GB`
/// or `NVIDIA H200 141GB HBM3e`, when the project knows that model.
pub fn lookup(nvml_name: &str) -> Option<GpuGeometry> {
    let n = nvml_name.to_ascii_uppercase();
    if n.contains("A100") && n.contains("40GB") {
        Some(a100_40gb())
    } else if n.contains("A100") && n.contains("80GB") {
        Some(a100_80gb())
    } else if n.contains("H100") && n.contains("80GB") {
        Some(h100_80gb())
    } else if n.contains("H200") && !n.contains("NVL") {
        Some(h200())
    } else {
        None
    }
}

/// Every profile name of every built-in model, for "did you mean" before a GPU is known.
pub fn known_profile_names() -> Vec<String> {
    let mut names: Vec<String> = all()
        .iter()
        .flat_map(|g| g.profiles().iter().map(|p| p.name.clone()))
        .collect();
    names.sort();
    names.dedup();
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_build_and_match_the_reference() {
        for g in all() {
            assert_eq!(g.memory_slices(), 8, "{}", g.model());
            assert_eq!(g.compute_slices(), 7, "{}", g.model());
            assert_eq!(g.profiles().len(), 7);
        }
        let a = a100_40gb();
        let p = a.profile("1g.5gb").unwrap();
        assert_eq!(
            (p.id, p.memory_mib, p.sms, p.max_instances),
            (19, 4864, 14, 7)
        );
        assert_eq!(a.profile("3g.20gb").unwrap().memory_mib, 20096);
        assert_eq!(a.profile("7g.40gb").unwrap().memory_mib, 40448);
        let h = h200();
        assert_eq!(h.profile("1g.18gb").unwrap().memory_mib, 16384);
        assert_eq!(h.profile("7g.141gb").unwrap().memory_mib, 143104);
        assert_eq!(h.profile("3g.71gb").unwrap().placement_starts, [0, 4]);
    }

    #[test]
    fn lookup_by_nvml_name() {
        assert_eq!(
            lookup("NVIDIA A100-SXM4-40GB").unwrap().model(),
            "NVIDIA A100-SXM4-40GB"
        );
        assert_eq!(
            lookup("NVIDIA A100 80GB PCIe").unwrap().model(),
            "NVIDIA A100-SXM4-80GB"
        );
        assert_eq!(
            lookup("NVIDIA H100 80GB HBM3").unwrap().model(),
            "NVIDIA H100 80GB HBM3"
        );
        assert_eq!(
            lookup("NVIDIA H200 141GB HBM3e").unwrap().model(),
            "NVIDIA H200"
        );
        assert!(lookup("Tesla V100-SXM2-16GB").is_none());
        assert!(
            lookup("NVIDIA H200 NVL").is_none(),
            "H200 NVL has other profiles"
        );
    }
}
