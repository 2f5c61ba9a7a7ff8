//! `yolo-sched tune`: a search's results (`[tune]`, docs/spec.md).

use anyhow::Result;
use clap::{Args, Subcommand};
use serde::Serialize;

use super::args::{JsonArg, RunArg};
use super::Context;

#[derive(Debug, Args)]
pub struct TuneArgs {
    #[command(subcommand)]
    pub command: TuneCommand,
}

#[derive(Debug, Subcommand)]
pub enum TuneCommand {
    /// The best trial's arguments as a spec snippet (`[train.args]`).
    #[command(after_help = "\
Reads the search's summary in the run directory (tune/trials.json, written by
each tell job), so it answers while the search runs: the best so far.
Exit status 1 when no trial has given an objective yet.

Examples:
  yolo-sched tune best pcb-tune-20261203T170000-ab12
  yolo-sched tune best runs/pcb-tune --json | jq .params")]
    Best {
        #[command(flatten)]
        target: RunArg,
        #[command(flatten)]
        output: JsonArg,
    },
}

#[derive(Debug, Serialize)]
struct BestJson<'a> {
    run_id: &'a str,
    trial: u32,
    objective: &'a str,
    direction: &'a str,
    value: Option<f64>,
    params: &'a serde_json::Map<String, serde_json::Value>,
    trials_done: usize,
    trials_planned: u32,
    best_hyperparameters: String,
}

pub fn run(ctx: &mut Context, args: &TuneArgs) -> Result<i32> {
    match &args.command {
        TuneCommand::Best { target, output } => {
            let manifest = crate::run::query::find_run(&target.run)?;
            let best = crate::run::tune::best(&manifest)?;
            let Some(best) = best else {
                ctx.printer.error_line(format!(
                    "run {}: no trial has given an objective yet",
                    manifest.run_id
                ));
                return Ok(1);
            };
            if output.json {
                ctx.printer.json(&BestJson {
                    run_id: &manifest.run_id,
                    trial: best.trial.trial,
                    objective: &best.summary.objective,
                    direction: &best.summary.direction,
                    value: best.trial.value,
                    params: &best.trial.params,
                    trials_done: best
                        .summary
                        .trials
                        .iter()
                        .filter(|t| t.value.is_some())
                        .count(),
                    trials_planned: best.summary.trials_planned,
                    best_hyperparameters: best.yaml.display().to_string(),
                })?;
            } else {
                ctx.printer.line(best.snippet.trim_end())?;
            }
            Ok(0)
        }
    }
}
