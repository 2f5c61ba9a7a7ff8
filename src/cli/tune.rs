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
    /// Used by a search's train script with `on_oom = "resume-bigger"`: the
    /// trial's job `--job` is ending out of GPU memory; move the trial to the
    /// next larger slice, and make its batch's tell job wait for it too.
    #[command(hide = true)]
    Escalate {
        #[command(flatten)]
        target: RunArg,
        /// The trial (its array task).
        #[arg(long)]
        trial: u32,
        /// The trial's job that ran out of memory (its array's id).
        #[arg(long)]
        job: u64,
        /// The most moves of one trial (`on_oom_steps`).
        #[arg(long, default_value_t = 2)]
        max_steps: u32,
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
        TuneCommand::Escalate {
            target,
            trial,
            job,
            max_steps,
        } => escalate(ctx, &target.run, *trial, *job, *max_steps),
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

/// `tune escalate`: under the run's lock, with the manifest read under it.
fn escalate(ctx: &mut Context, run: &str, trial: u32, job: u64, max_steps: u32) -> Result<i32> {
    use anyhow::Context as _;
    let found = crate::run::query::find_run(run)?;
    crate::audit::Trail::from_site(ctx.site()?)?;
    let _lock = crate::run::resume::lock_run_waiting(&found, std::time::Duration::from_secs(120))?;
    let mut manifest = crate::rundir::manifest::Manifest::load(
        &crate::rundir::manifest::Manifest::path_in(&found.workdir),
    )?;
    let cluster = crate::slurm::cluster::fetch(&ctx.slurm)
        .context("asking Slurm for the cluster's nodes, partitions and limits")?;
    let policy = crate::plan::Policy::from_site(ctx.site()?)?;
    let slurm = ctx.slurm.clone();
    let result = crate::run::tune_oom::move_trial(
        &slurm,
        &mut manifest,
        &cluster,
        &policy,
        trial,
        job,
        max_steps,
    );
    let (ids, outcome) = match &result {
        Ok(m) => (vec![m.job_id], "ok".to_string()),
        Err(e) => (vec![], format!("{e:#}")),
    };
    super::runs::record(
        ctx,
        &crate::audit::AuditRecord::new("tune escalate", Some(&manifest.run_id), ids, &outcome),
    );
    let moved = result?;
    ctx.printer.line(format!(
        "trial {} moves from {} to {} as job {} (move {}); the tell job {} of batch {} waits for it too ({})",
        moved.trial,
        moved.from.as_deref().unwrap_or("its GPU"),
        moved.gres,
        moved.job_id,
        moved.moves,
        moved.tell_job,
        moved.batch,
        moved.tell_dependency
    ))?;
    Ok(0)
}
