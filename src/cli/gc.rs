//! `yolo-sched gc`: undo or finish submissions that were interrupted.

use anyhow::Result;
use clap::Args;
use serde::Serialize;

use super::args::JsonArg;
use super::Context;
use crate::run::journal::{self, Recovered};

#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  yolo-sched gc               # undo submissions that were killed half-way
  yolo-sched gc --dry-run     # say what would be done
  yolo-sched gc --json

A submission (or resume) that is killed before it has released its chain leaves
held jobs and perhaps a manifest. Every submission keeps a journal entry under
$XDG_STATE_HOME/yolo-sched/submissions/ until it is done, and its jobs carry its
token in --comment. gc finds the entries whose process is gone, cancels the held
jobs they left (or, when their release had begun, releases the rest) and removes
the manifest of a run that never started, so its workdir can be submitted again.
submit, resume, status, list, watch and cancel do the same before they start;
gc does it on demand. Submissions made on another host are left to that host.")]
pub struct GcArgs {
    /// Say what would be done; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub output: JsonArg,
}

#[derive(Debug, Serialize)]
struct GcOut<'a> {
    dry_run: bool,
    recovered: &'a [Recovered],
    in_progress: usize,
    problems: &'a [String],
}

pub fn run(ctx: &mut Context, args: &GcArgs) -> Result<i32> {
    let recovery = journal::recover(&ctx.slurm, args.dry_run)?;
    if args.output.json {
        ctx.printer.json(&GcOut {
            dry_run: args.dry_run,
            recovered: &recovery.recovered,
            in_progress: recovery.in_progress,
            problems: &recovery.problems,
        })?;
    } else {
        for r in &recovery.recovered {
            ctx.printer.line(r.describe(args.dry_run))?;
        }
        if recovery.recovered.is_empty() {
            ctx.printer.line("no interrupted submission found")?;
        }
        if recovery.in_progress > 0 {
            ctx.printer.line(format!(
                "{} submission(s) still in progress here or made on another host: left alone",
                recovery.in_progress
            ))?;
        }
        for p in &recovery.problems {
            ctx.printer.warn(p);
        }
    }
    Ok(if recovery.problems.is_empty() { 0 } else { 1 })
}

/// Before a run command: undo what an interrupted submission left (or, for
/// a command that only looks, say what `gc` would do). Never fails the
/// command: its own Slurm calls tell their story.
pub fn recover_before(ctx: &mut Context, act: bool) {
    match journal::recover(&ctx.slurm, !act) {
        Ok(recovery) => {
            for r in &recovery.recovered {
                if act {
                    ctx.printer.note(r.describe(false));
                } else {
                    ctx.printer
                        .note(format!("{}; `yolo-sched gc` does it", r.describe(true)));
                }
            }
            for p in &recovery.problems {
                ctx.printer.warn(p);
            }
        }
        Err(e) => ctx.printer.warn(format!(
            "interrupted submissions were not checked: {e:#}; `yolo-sched gc` tries again"
        )),
    }
}
