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

/// Whose runs to find through Slurm (`list`): by account or user, as far as
/// Slurm lets the caller see (`PrivateData`).
#[derive(Debug, Clone, Default, Args)]
pub struct WhoArgs {
    /// The runs of this Slurm account's jobs that Slurm shows you (a
    /// coordinator sees the account's, an operator everyone's).
    #[arg(long, value_name = "NAME")]
    pub account: Option<String>,
    /// The runs of this user's jobs that Slurm shows you.
    #[arg(long, value_name = "NAME")]
    pub user: Option<String>,
    /// With --account, --user or --all-users: how far back accounting is
    /// searched: `7d`, `24h`, a local `2026-11-29T08:00`, or RFC 3339.
    #[arg(long, value_name = "WHEN", default_value = "7d")]
    pub since: String,
}

/// A name handed to squeue/sacct as one filter value: one name, no list.
/// A path the system can take: at most 4095 bytes, each name at most 255
/// (PATH_MAX and NAME_MAX of Linux); a longer one is invalid input, echoed cut.
pub fn check_path_len(flag: &str, path: &std::path::Path) -> anyhow::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let long_name = path
        .components()
        .any(|c| c.as_os_str().as_bytes().len() > 255);
    if path.as_os_str().len() > 4095 || long_name {
        return Err(crate::error::invalid(format!(
            "{flag} {}: too long a path (at most 4095 bytes, each name at most 255)",
            crate::text::echo_path(path)
        )));
    }
    Ok(())
}

pub fn check_name(flag: &str, value: &Option<String>) -> anyhow::Result<Option<String>> {
    let Some(v) = value else {
        return Ok(None);
    };
    let bad = v.is_empty()
        || v.chars()
            .any(|c| c == ',' || c.is_whitespace() || c.is_control());
    if bad {
        return Err(crate::error::invalid(format!(
            "{flag} `{}`: expected one name without commas, spaces or control characters",
            crate::text::echo(v)
        )));
    }
    Ok(Some(v.clone()))
}
