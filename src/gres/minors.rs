//! `/proc/driver/nvidia-caps/mig-minors`: the device minors of MIG capability files.
//!
//! The driver lists one line per capability: `config 1`, `monitor 2`,
//! `gpu<minor>/gi<gi>/access <N>` and `gpu<minor>/gi<gi>/ci<ci>/access <M>`;
//! `/dev/nvidia-caps/nvidia-cap<N>` is the file for that capability. Slurm's
//! NVML plugin reads the same file (`gpu_nvml.c` `_nvml_get_mig_minor_numbers`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

/// Where the file lives, relative to the root (`--sysroot` in tests).
pub const MIG_MINORS: &str = "proc/driver/nvidia-caps/mig-minors";

/// The path of `mig-minors` under `sysroot` (`/` on a real node).
pub fn mig_minors_path(sysroot: &Path) -> PathBuf {
    sysroot.join(MIG_MINORS)
}

/// Parsed `mig-minors`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MigMinors {
    /// `(gpu minor, gi)` → minor of the GPU-instance access file.
    gi: BTreeMap<(u32, u32), u32>,
    /// `(gpu minor, gi, ci)` → minor of the compute-instance access file.
    ci: BTreeMap<(u32, u32, u32), u32>,
    pub config: Option<u32>,
    pub monitor: Option<u32>,
}

impl MigMinors {
    /// Parse the file's text; `origin` names it in messages. A malformed line
    /// is a runtime error (the driver wrote it), naming file and line.
    pub fn parse(text: &str, origin: &str) -> Result<MigMinors> {
        let mut out = MigMinors::default();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() {
                continue;
            }
            let at = format!("{origin}:{}", i + 1);
            let (key, value) = match line.split_whitespace().collect::<Vec<_>>().as_slice() {
                [k, v] => (*k, *v),
                _ => bail!("{at}: expected `<capability> <minor>`, found {line:?}"),
            };
            let minor: u32 = value
                .parse()
                .map_err(|_| anyhow::anyhow!("{at}: minor {value:?} is not a number"))?;
            match key {
                "config" => out.config = Some(minor),
                "monitor" => out.monitor = Some(minor),
                _ => match parse_capability(key) {
                    Some((gpu, gi, None)) => {
                        out.gi.insert((gpu, gi), minor);
                    }
                    Some((gpu, gi, Some(ci))) => {
                        out.ci.insert((gpu, gi, ci), minor);
                    }
                    None => bail!(
                        "{at}: unknown capability {key:?} (expected gpu<N>/gi<N>/access or gpu<N>/gi<N>/ci<N>/access)"
                    ),
                },
            }
        }
        Ok(out)
    }

    /// Minor of `/dev/nvidia-caps/nvidia-cap<N>` for GPU instance `gi` on the GPU with `gpu_minor`.
    pub fn gi(&self, gpu_minor: u32, gi: u32) -> Option<u32> {
        self.gi.get(&(gpu_minor, gi)).copied()
    }

    /// Minor for compute instance `ci` of GPU instance `gi`.
    pub fn ci(&self, gpu_minor: u32, gi: u32, ci: u32) -> Option<u32> {
        self.ci.get(&(gpu_minor, gi, ci)).copied()
    }

    /// Render the file as the driver does, for fixtures: config, monitor, then
    /// each GPU instance followed by its compute instances.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if let Some(c) = self.config {
            out.push_str(&format!("config {c}\n"));
        }
        if let Some(m) = self.monitor {
            out.push_str(&format!("monitor {m}\n"));
        }
        for (&(gpu, gi), minor) in &self.gi {
            out.push_str(&format!("gpu{gpu}/gi{gi}/access {minor}\n"));
            for (&(_, _, ci), m) in self.ci.range((gpu, gi, 0)..=(gpu, gi, u32::MAX)) {
                out.push_str(&format!("gpu{gpu}/gi{gi}/ci{ci}/access {m}\n"));
            }
        }
        out
    }

    /// The capability `/dev/nvidia-caps/nvidia-cap<minor>` stands for:
    /// `(gpu minor, gi, None)` for a GPU instance's access file,
    /// `(gpu minor, gi, Some(ci))` for a compute instance's.
    pub fn capability(&self, minor: u32) -> Option<(u32, u32, Option<u32>)> {
        self.ci
            .iter()
            .find(|(_, &m)| m == minor)
            .map(|(&(gpu, gi, ci), _)| (gpu, gi, Some(ci)))
            .or_else(|| {
                self.gi
                    .iter()
                    .find(|(_, &m)| m == minor)
                    .map(|(&(gpu, gi), _)| (gpu, gi, None))
            })
    }

    /// Record a GPU-instance minor (for fixtures and tests).
    pub fn insert_gi(&mut self, gpu_minor: u32, gi: u32, minor: u32) {
        self.gi.insert((gpu_minor, gi), minor);
    }

    /// Record a compute-instance minor (for fixtures and tests).
    pub fn insert_ci(&mut self, gpu_minor: u32, gi: u32, ci: u32, minor: u32) {
        self.ci.insert((gpu_minor, gi, ci), minor);
    }
}

/// `gpu0/gi1/access` → (0, 1, None); `gpu0/gi1/ci2/access` → (0, 1, Some(2)).
fn parse_capability(key: &str) -> Option<(u32, u32, Option<u32>)> {
    let parts: Vec<&str> = key.split('/').collect();
    let num = |s: &str, prefix: &str| s.strip_prefix(prefix)?.parse::<u32>().ok();
    match parts.as_slice() {
        [gpu, gi, "access"] => Some((num(gpu, "gpu")?, num(gi, "gi")?, None)),
        [gpu, gi, ci, "access"] => Some((num(gpu, "gpu")?, num(gi, "gi")?, Some(num(ci, "ci")?))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Shape as on a real node (mig-minors lists every possible capability).
    const TEXT: &str =
        "config 1\nmonitor 2\ngpu0/gi0/access 3\ngpu0/gi0/ci0/access 4\ngpu0/gi0/ci1/access 5\n\
gpu4/gi7/access 606\ngpu4/gi7/ci0/access 607\n";

    #[test]
    fn reads_gi_and_ci_minors() {
        let m = MigMinors::parse(TEXT, "mig-minors").unwrap();
        assert_eq!((m.config, m.monitor), (Some(1), Some(2)));
        assert_eq!(m.gi(4, 7), Some(606));
        assert_eq!(m.ci(4, 7, 0), Some(607));
        assert_eq!(m.ci(0, 0, 1), Some(5));
        assert_eq!(m.gi(1, 0), None);
        assert_eq!(m.capability(606), Some((4, 7, None)));
        assert_eq!(m.capability(607), Some((4, 7, Some(0))));
        assert_eq!(m.capability(1), None, "config is no instance");
        assert_eq!(m.render(), TEXT, "renders back the same text");
    }

    #[test]
    fn bad_lines_name_file_and_line() {
        for (text, needle) in [
            (
                "config 1\ngpu0/gi0/acces 3\n",
                "mig-minors:2: unknown capability",
            ),
            ("gpu0/gi0/access x\n", "mig-minors:1: minor \"x\""),
            ("gpu0/gi0/access\n", "mig-minors:1: expected"),
            ("gpuX/gi0/access 1\n", "unknown capability"),
        ] {
            let err = MigMinors::parse(text, "mig-minors").unwrap_err();
            assert!(err.to_string().contains(needle), "{text:?}: {err}");
        }
    }

    #[test]
    fn path_under_a_sysroot() {
        assert_eq!(
            mig_minors_path(Path::new("/tmp/root")),
            Path::new("/tmp/root/proc/driver/nvidia-caps/mig-minors")
        );
        assert_eq!(
            mig_minors_path(Path::new("/")),
            Path::new("/proc/driver/nvidia-caps/mig-minors")
        );
    }
}
