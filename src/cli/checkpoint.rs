//! `yolo-sched checkpoint`: can an Ultralytics run directory be resumed?
//! The train script asks before it runs `yolo train resume`.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use super::args::JsonArg;
use super::Context;
use crate::error::invalid;
use crate::rundir::checkpoint;

#[derive(Debug, Args)]
#[command(after_help = "\
Prints one line whose first word is the state: `missing` (no weights/last.pt),
`incomplete` (last.pt is truncated or not a torch checkpoint), `finished` (results.csv
reached the epochs of args.yaml: resuming would start an unrelated default training),
or `resumable`. Exit status 0 whatever the state; 2 when RUN_DIR is not a directory.

Examples:
  yolo-sched checkpoint runs/pcb-demo/train
  yolo-sched checkpoint runs/sweep/train-3 --json")]
pub struct CheckpointArgs {
    /// The Ultralytics run directory (holds weights/, args.yaml, results.csv).
    #[arg(value_name = "RUN_DIR")]
    pub run_dir: PathBuf,

    #[command(flatten)]
    pub output: JsonArg,
}

pub fn run(ctx: &Context, args: &CheckpointArgs) -> Result<i32> {
    if !args.run_dir.is_dir() {
        return Err(invalid(format!(
            "{} is not a directory (expected an Ultralytics run directory such as <workdir>/train)",
            crate::text::echo_path(&args.run_dir)
        )));
    }
    let state = checkpoint::state(&args.run_dir);
    if args.output.json {
        ctx.printer.json(&state)?;
    } else {
        ctx.printer.line(state.line())?;
    }
    Ok(0)
}
