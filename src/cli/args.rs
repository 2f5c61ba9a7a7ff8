//! Arguments several subcommands share, each defined once and flattened in
//! (`#[command(flatten)]`), so their names and help cannot drift apart.

use std::path::PathBuf;

use clap::Args;

/// `--json`.
#[derive(Debug, Clone, Copy, Default, Args)]
pub struct JsonArg {
    /// Print JSON instead of text (field names are stable; see docs/cli.md).
    #[arg(long)]
    pub json: bool,
}

/// The run a command acts on.
#[derive(Debug, Clone, Args)]
pub struct RunArg {
    /// The run: the id `submit` printed, a unique prefix of it, or the run directory.
    #[arg(value_name = "RUN")]
    pub run: String,
}

/// `--nvml-lib` (doctor, node-setup).
#[derive(Debug, Clone, Default, Args)]
pub struct NvmlLibArg {
    /// The NVML library, e.g. `/usr/lib64/libnvidia-ml.so.1` (default: YOLO_SCHED_NVML_LIB, else the driver's `libnvidia-ml.so.1`).
    #[arg(long = "nvml-lib", value_name = "PATH")]
    pub path: Option<PathBuf>,
}
