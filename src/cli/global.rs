//! The options every subcommand accepts, in a file of their own: the
//! context every command builds reads them, and the clap definitions of the
//! subcommands (`command.rs`) include them, so neither leads back to the other.

use std::path::PathBuf;

use clap::Args;

/// Options every subcommand accepts.
#[derive(Debug, Clone, Args)]
pub struct GlobalArgs {
    /// Site file to read instead of /etc/yolo-sched/site.toml.
    #[arg(long, global = true, env = crate::config::SITE_ENV, value_name = "FILE")]
    pub site: Option<PathBuf>,

    /// When to colour output: auto (a terminal without NO_COLOR), always or never.
    #[arg(
        long,
        global = true,
        value_name = "WHEN",
        default_value = "auto",
        env = "YOLO_SCHED_COLOR"
    )]
    pub color: crate::printer::ColorChoice,
}
