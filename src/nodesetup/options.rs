//! What node-setup is told: flags, environment and site file, resolved.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::gres::render::RenderOptions;

/// Everything node-setup needs to know, resolved from flags, environment and site file.
#[derive(Debug, Clone)]
pub struct Options {
    pub nvml_lib: OsString,
    /// Root for `/dev`, `/proc` and `/run` paths (`/` on a real node).
    pub sysroot: PathBuf,
    pub gres_conf: PathBuf,
    pub node: String,
    pub slurm_include: Option<PathBuf>,
    pub use_slurm: bool,
    pub reconfigure_cmd: String,
    /// Reset command (`{index}` replaced by the GPU index) when `--reset` is given.
    pub reset_cmd: Option<String>,
    pub force: bool,
    pub drain_timeout: Duration,
    /// `--demand FILE`: plan `auto` from this queue instead of the live one.
    pub demand_file: Option<PathBuf>,
}

impl Options {
    pub(super) fn render_options(&self) -> RenderOptions {
        RenderOptions {
            device_root: (self.sysroot != Path::new("/")).then(|| self.sysroot.clone()),
        }
    }
}
