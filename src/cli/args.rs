//! Arguments several subcommands share, each defined once and flattened in
//! (`#[command(flatten)]`), so their names and help cannot drift apart.

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
