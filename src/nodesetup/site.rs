//! The `[node_setup]` section of the site file and node-setup's defaults.

use std::path::PathBuf;

use serde::Deserialize;

use crate::mig::LayoutDefs;

/// `[node_setup]` of the site file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SiteSection {
    /// Named layouts (`[node_setup.layouts.<name>]`, docs/mig-layouts.md).
    pub layouts: LayoutDefs,
    /// Command that makes Slurm pick up the new gres.conf (default `scontrol reconfigure`).
    pub reconfigure_command: Option<String>,
    /// GPU reset command for `--reset`; `{index}` is the GPU index.
    pub reset_command: Option<String>,
    /// gres.conf path (default /etc/slurm/gres.conf).
    pub gres_conf: Option<PathBuf>,
    /// Seconds to wait for jobs on a drained node (default 3600).
    pub drain_timeout: Option<u64>,
}

pub const DEFAULT_RECONFIGURE: &str = "scontrol reconfigure";
pub const DEFAULT_RESET: &str = "nvidia-smi --gpu-reset -i {index}";
pub const DEFAULT_GRES_CONF: &str = "/etc/slurm/gres.conf";
