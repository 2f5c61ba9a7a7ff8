//! The files the NVIDIA kernel driver exposes about MIG, laid out under a test's
//! sysroot: `/proc/driver/nvidia-caps/mig-minors` (the fixed table of capability
//! minors Slurm reads), `/proc/driver/nvidia/capabilities/…/access` for the
//! instances that exist, and device nodes `/dev/nvidia<minor>`, `/dev/nvidiactl`
//! and `/dev/nvidia-caps/nvidia-cap<N>`.
//!
//! Device nodes are character devices when mknod is allowed (root), with majors
//! from Linux's local/experimental range so nothing pretends to be a real NVIDIA
//! device (real: 195 and a dynamic caps major); otherwise regular files.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use nix::sys::stat::{makedev, mknod, Mode, SFlag};

use crate::model::Machine;
use crate::state::write_atomically;

/// Major number of the fake `/dev/nvidia<minor>` and `/dev/nvidiactl` nodes.
pub const GPU_MAJOR: u64 = 241;
/// Major number of the fake `/dev/nvidia-caps/nvidia-cap<N>` nodes.
pub const CAPS_MAJOR: u64 = 242;
/// The driver's table covers this many GPU minors, GPU instances and compute instances.
const TABLE_GPUS: u32 = 32;
const TABLE_GIS: u32 = 15;
const TABLE_CIS: u32 = 8;
/// `/dev/nvidiactl` has minor 255 on real systems.
const CTL_MINOR: u64 = 255;

/// Capability minor of `gpu<minor>/gi<gi>/access`, as in the driver's table.
pub fn gi_cap_minor(gpu_minor: u32, gi: u32) -> u32 {
    3 + gpu_minor * TABLE_GIS * (1 + TABLE_CIS) + gi * (1 + TABLE_CIS)
}

/// Capability minor of `gpu<minor>/gi<gi>/ci<ci>/access`.
pub fn ci_cap_minor(gpu_minor: u32, gi: u32, ci: u32) -> u32 {
    gi_cap_minor(gpu_minor, gi) + 1 + ci
}

/// The whole `mig-minors` file: it lists every possible instance, existing or not.
pub fn mig_minors_text() -> String {
    let mut s = String::from("config 1\nmonitor 2\n");
    for gpu in 0..TABLE_GPUS {
        for gi in 0..TABLE_GIS {
            let _ = writeln!(s, "gpu{gpu}/gi{gi}/access {}", gi_cap_minor(gpu, gi));
            for ci in 0..TABLE_CIS {
                let _ = writeln!(
                    s,
                    "gpu{gpu}/gi{gi}/ci{ci}/access {}",
                    ci_cap_minor(gpu, gi, ci)
                );
            }
        }
    }
    s
}

/// Bring the sysroot in line with the machine's state.
pub fn publish(root: &Path, machine: &Machine) -> Result<(), String> {
    publish_inner(root, machine)
        .map_err(|e| format!("cannot update sysroot {}: {e}", root.display()))
}

fn publish_inner(root: &Path, machine: &Machine) -> std::io::Result<()> {
    let caps_proc = root.join("proc/driver/nvidia-caps");
    std::fs::create_dir_all(&caps_proc)?;
    let minors_path = caps_proc.join("mig-minors");
    let table = mig_minors_text();
    if std::fs::read_to_string(&minors_path).ok().as_deref() != Some(table.as_str()) {
        write_atomically(&minors_path, table.as_bytes())?;
    }

    let cap_root = root.join("proc/driver/nvidia/capabilities");
    std::fs::create_dir_all(cap_root.join("mig"))?;
    write_if_changed(&cap_root.join("mig/config"), &access_text(1))?;
    write_if_changed(&cap_root.join("mig/monitor"), &access_text(2))?;

    let dev = root.join("dev");
    let caps_dev = dev.join("nvidia-caps");
    std::fs::create_dir_all(&caps_dev)?;
    ensure_node(&dev.join("nvidiactl"), GPU_MAJOR, CTL_MINOR)?;
    let mut wanted_caps: BTreeSet<u32> = [1, 2].into();

    for gpu in 0..machine.gpu_count() {
        let minor = machine.spec(gpu).minor;
        ensure_node(
            &dev.join(format!("nvidia{minor}")),
            GPU_MAJOR,
            u64::from(minor),
        )?;
        let mig_dir = cap_root.join(format!("gpu{minor}/mig"));
        if mig_dir.exists() {
            std::fs::remove_dir_all(&mig_dir)?;
        }
        if !machine.gpu_state(gpu).mig_current {
            continue;
        }
        // Every GPU instance has its own capability, with or without compute instances.
        for gi in &machine.gpu_state(gpu).gpu_instances {
            let gi_minor = gi_cap_minor(minor, gi.id);
            let gi_dir = mig_dir.join(format!("gi{}", gi.id));
            std::fs::create_dir_all(&gi_dir)?;
            std::fs::write(gi_dir.join("access"), access_text(gi_minor))?;
            wanted_caps.insert(gi_minor);
            for ci in &gi.compute_instances {
                let ci_minor = ci_cap_minor(minor, gi.id, ci.id);
                let ci_dir = gi_dir.join(format!("ci{}", ci.id));
                std::fs::create_dir_all(&ci_dir)?;
                std::fs::write(ci_dir.join("access"), access_text(ci_minor))?;
                wanted_caps.insert(ci_minor);
            }
        }
    }

    for entry in std::fs::read_dir(&caps_dev)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let stale = name
            .strip_prefix("nvidia-cap")
            .and_then(|n| n.parse::<u32>().ok())
            .is_some_and(|n| !wanted_caps.contains(&n));
        if stale {
            std::fs::remove_file(entry.path())?;
        }
    }
    for n in &wanted_caps {
        ensure_node(
            &caps_dev.join(format!("nvidia-cap{n}")),
            CAPS_MAJOR,
            u64::from(*n),
        )?;
    }
    Ok(())
}

/// Content of a capability `access` file, as the driver writes it.
fn access_text(minor: u32) -> String {
    format!("DeviceFileMinor: {minor}\nDeviceFileMode: 292\nDeviceFileModify: 1\n")
}

fn write_if_changed(path: &Path, text: &str) -> std::io::Result<()> {
    if std::fs::read_to_string(path).ok().as_deref() == Some(text) {
        return Ok(());
    }
    std::fs::write(path, text)
}

/// A character device `major:minor` at `path`, or a regular file where mknod is not allowed.
fn ensure_node(path: &Path, major: u64, minor: u64) -> std::io::Result<()> {
    let want = makedev(major, minor);
    if let Ok(m) = std::fs::symlink_metadata(path) {
        if m.file_type().is_char_device() && m.rdev() == want {
            return Ok(());
        }
        if m.file_type().is_file() && !can_mknod() {
            return Ok(());
        }
        std::fs::remove_file(path)?;
    }
    match mknod(path, SFlag::S_IFCHR, Mode::from_bits_truncate(0o666), want) {
        Ok(()) => Ok(()),
        Err(nix::errno::Errno::EPERM) | Err(nix::errno::Errno::EACCES) => {
            std::fs::write(path, b"").map(|_| ())
        }
        Err(e) => Err(std::io::Error::from(e)),
    }
}

fn can_mknod() -> bool {
    nix::unistd::geteuid().is_root()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_matches_known_minors_from_real_systems() {
        // Values seen on real nodes (mig-and-gres.md): gpu4/gi7 → 606/607,
        // gpu0/gi12 → 111/112, gpu0/gi7 → 66/67, gpu0/gi2 → 21.
        assert_eq!(gi_cap_minor(4, 7), 606);
        assert_eq!(ci_cap_minor(4, 7, 0), 607);
        assert_eq!(gi_cap_minor(0, 12), 111);
        assert_eq!(ci_cap_minor(0, 12, 0), 112);
        assert_eq!(gi_cap_minor(0, 7), 66);
        assert_eq!(ci_cap_minor(0, 7, 0), 67);
        assert_eq!(gi_cap_minor(0, 2), 21);
        let text = mig_minors_text();
        assert!(text.starts_with("config 1\nmonitor 2\ngpu0/gi0/access 3\ngpu0/gi0/ci0/access 4\n"));
        assert!(text.contains("\ngpu4/gi7/access 606\ngpu4/gi7/ci0/access 607\n"));
        assert_eq!(text.lines().count(), 2 + 32 * 15 * 9);
        assert!(text.ends_with("gpu31/gi14/ci7/access 4322\n"));
    }
}
