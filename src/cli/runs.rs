//! `yolo-sched cancel`, `resume`, `logs` and `audit`: acting on a whole run.

use std::io::Write;

use anyhow::{Context as _, Result};
use chrono::Utc;
use clap::Args;
use serde::Serialize;

use super::args::{JsonArg, RunArg};
use super::Context;
use crate::audit::{self, AuditRecord};
use crate::error::invalid;
use crate::run::{query, resume};

#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  yolo-sched cancel pcb-defects-20261130T150000-1a2b
  yolo-sched cancel RUN --dry-run      # say what would be cancelled

Cancels every job of the run still queued or running, in one scancel call.
Cancelling a run that has nothing left to cancel succeeds and says so.
A run that is not yours is found through Slurm by its id; Slurm decides who may
cancel it (its owner, a coordinator of its account, an operator or admin).
A refusal is exit status 1 and says what was and was not cancelled.")]
pub struct CancelArgs {
    #[command(flatten)]
    pub target: RunArg,
    /// Say what would be cancelled; cancel nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub output: JsonArg,
}

#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  yolo-sched resume pcb-defects-20261130T150000-1a2b
  yolo-sched resume RUN --dry-run
  yolo-sched resume RUN --yolo /opt/ultralytics/bin/yolo   # run another yolo from now on
  yolo-sched resume RUN --gpu bigger    # after CUDA out of memory: the next larger slice
  yolo-sched resume RUN --gpu 2g.10gb   # training on this slice from now on

Resubmits the first stage that did not complete and everything after it, for the
sweep variants that need it; completed stages are reused. Training continues from
weights/last.pt. Refuses while the run is still active, or when the output of a
completed stage it needs is gone. Exit status 2 when there is nothing to resume.")]
pub struct ResumeArgs {
    #[command(flatten)]
    pub target: RunArg,
    /// Say what would be resubmitted; submit nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// The `yolo` command the resubmitted stages run, instead of the one named at submit time.
    #[arg(long, value_name = "CMD", env = "YOLO_SCHED_YOLO")]
    pub yolo: Option<String>,
    /// Train on another GPU from now on: `bigger` (the next larger slice the
    /// cluster has, then whole GPUs, then more GPUs of one node where the
    /// site's `[pools.exclusive] max_gpus` allows) or a type (`2g.10gb`,
    /// `a100`, `a100:2` for two of one node). CPUs and memory become the new
    /// slice's share of the node.
    #[arg(long, value_name = "PROFILE")]
    pub gpu: Option<String>,
    /// Used by the train script of a run with `on_oom = "resume-bigger"`: this
    /// job is ending after running out of memory; resume after it.
    #[arg(long, value_name = "JOBID", hide = true, requires = "gpu")]
    pub escalating_job: Option<u64>,
    /// With --escalating-job: the most moves to a bigger slice (`on_oom_steps`).
    #[arg(
        long,
        value_name = "N",
        hide = true,
        default_value_t = 2,
        requires = "escalating_job"
    )]
    pub max_steps: u32,
    #[command(flatten)]
    pub output: JsonArg,
}

#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  yolo-sched logs RUN                 # the train stage's output
  yolo-sched logs RUN prepare
  yolo-sched logs RUN train --task 3  # one variant of a sweep
  yolo-sched logs RUN train -f        # follow until the stage ends")]
pub struct LogsArgs {
    #[command(flatten)]
    pub target: RunArg,
    /// prepare, train, val or export (default: train).
    #[arg(default_value = "train")]
    pub stage: String,
    /// The array task (sweep variant) of an array stage.
    #[arg(long)]
    pub task: Option<u32>,
    /// Keep printing what the stage writes until it ends.
    #[arg(short, long)]
    pub follow: bool,
}

#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  yolo-sched audit
  yolo-sched audit --user alice --since 24h
  yolo-sched audit --run pcb-defects-20261130T150000-1a2b --json

Reads your own audit log. With the site's [audit] syslog = true every record also
goes to syslog, where users cannot rewrite it; administrators query it there
(journalctl -t yolo-sched; see docs/configuration.md).")]
pub struct AuditArgs {
    /// Only records of this user (login name).
    #[arg(long)]
    pub user: Option<String>,
    /// Run id (or prefix).
    #[arg(long)]
    pub run: Option<String>,
    /// Only records newer than this: `30m`, `24h`, `1d12h`, a local `2026-11-29T08:00`, or RFC 3339.
    #[arg(long)]
    pub since: Option<String>,
    #[command(flatten)]
    pub output: JsonArg,
}

/// Record a state-changing command; a failure to record is a warning, not a failure of the command.
pub fn record(ctx: &mut Context, rec: &AuditRecord) {
    let trail = match ctx.site().and_then(audit::Trail::from_site) {
        Ok(t) => t,
        Err(e) => {
            ctx.printer.warn(format!("no audit trail: {e:#}"));
            return;
        }
    };
    for problem in trail.record(rec) {
        ctx.printer.warn(problem);
    }
}

/// The audit record of one state-changing action, built before it and
/// recorded with its result: `Audit::of("models tag").detail(…).done(ctx,
/// reg.tag(…))?`. The outcome is `ok` or the error (`{e:#}`); `done_with`
/// lets a success say more (its job ids, a detail only a success knows, an
/// outcome of its own); `refused` records a refusal before the action. A
/// failure to record is a warning (as [`record`]), never the command's.
pub struct Audit(AuditRecord);

impl Audit {
    /// A record of `command`, outcome `ok` until the result says otherwise.
    pub fn of(command: &str) -> Audit {
        Audit(AuditRecord::new(command, None, Vec::new(), "ok"))
    }

    /// The run acted on.
    pub fn run(mut self, run_id: &str) -> Audit {
        self.0.run_id = Some(run_id.to_string());
        self
    }

    /// What was acted on, recorded whatever the result.
    pub fn detail(mut self, detail: String) -> Audit {
        self.0.detail = Some(detail);
        self
    }

    /// Record `result` and hand it back.
    pub fn done<T>(self, ctx: &mut Context, result: Result<T>) -> Result<T> {
        self.done_with(ctx, result, |_, _| {})
    }

    /// Record `result`, a success as `success` fills in the record, and hand
    /// the result back.
    pub fn done_with<T>(
        mut self,
        ctx: &mut Context,
        result: Result<T>,
        success: impl FnOnce(&T, &mut AuditRecord),
    ) -> Result<T> {
        match &result {
            Ok(done) => success(done, &mut self.0),
            Err(e) => self.0.outcome = format!("{e:#}"),
        }
        // The time of the outcome, as a record built after the action had it.
        self.0.time = Utc::now();
        record(ctx, &self.0);
        result
    }

    /// Record the refusal `e` (`refused: …`) and hand it back.
    pub fn refused(mut self, ctx: &mut Context, e: anyhow::Error) -> anyhow::Error {
        self.0.outcome = format!("refused: {e:#}");
        self.0.time = Utc::now();
        record(ctx, &self.0);
        e
    }
}

#[derive(Debug, Serialize)]
struct CancelOut {
    run_id: String,
    cancelled: Vec<u64>,
    dry_run: bool,
}

pub fn cancel(ctx: &mut Context, args: &CancelArgs) -> Result<i32> {
    // A team member's run is found through Slurm; Slurm decides whether
    // the caller may cancel it.
    let manifest = match crate::run::team::locate(&ctx.slurm, &args.target.run)? {
        crate::run::team::Located::Own(m) => *m,
        crate::run::team::Located::Team(run) => run.manifest,
    };
    audit::Trail::from_site(ctx.site()?)?;
    let slurm = ctx.slurm.clone();
    let (result, audit) = crate::run::cancel::cancel(&slurm, &manifest, args.dry_run);
    if let Some(r) = &audit {
        record(ctx, r);
    }
    let done = result?;
    if args.output.json {
        ctx.printer.json(&CancelOut {
            run_id: done.run_id.clone(),
            cancelled: done.job_ids.clone(),
            dry_run: done.dry_run,
        })?;
    } else if done.job_ids.is_empty() {
        ctx.printer.line(format!(
            "run {}: nothing to cancel ({})",
            done.run_id, done.state
        ))?;
    } else {
        let list: Vec<String> = done.job_ids.iter().map(u64::to_string).collect();
        let verb = if done.dry_run {
            "would cancel"
        } else {
            "cancelled"
        };
        ctx.printer.line(format!(
            "run {}: {verb} job(s) {} ({})",
            done.run_id,
            list.join(", "),
            done.stages.join(", ")
        ))?;
    }
    Ok(0)
}

#[derive(Debug, Serialize)]
struct ResumeOut {
    run_id: String,
    dry_run: bool,
    stages: Vec<String>,
    tasks: Option<Vec<u32>>,
    /// The train stage's new GPU (`--gpu`).
    gpu: Option<crate::run::escalate::GpuChange>,
    jobs: Vec<crate::run::chain::SubmittedJob>,
}

pub fn resume_run(ctx: &mut Context, args: &ResumeArgs) -> Result<i32> {
    let mut manifest = query::find_run(&args.target.run)?;
    audit::Trail::from_site(ctx.site()?)?;
    let _lock = resume::lock_run(&manifest)?;
    // Read again under the lock: another resume may just have finished.
    manifest = crate::rundir::manifest::Manifest::load(
        &crate::rundir::manifest::Manifest::path_in(&manifest.workdir),
    )?;
    let (mut st, error) = query::run_status(&ctx.slurm, &mut manifest);
    if let Some(e) = error {
        return Err(anyhow::anyhow!(
            "cannot resume run {}: Slurm did not answer: {e}",
            manifest.run_id
        ));
    }
    if let (Some(job), false) = (args.escalating_job, args.dry_run) {
        crate::run::escalate::prepare_from_job(
            &ctx.slurm,
            &manifest,
            &mut st,
            job,
            args.max_steps,
        )?;
    }
    if let Some(y) = &args.yolo {
        if y.is_empty() || y.contains(',') || y.chars().any(char::is_control) {
            return Err(crate::error::invalid(format!(
                "--yolo `{}`: expected a command path without commas or control characters \
                 (Slurm's --export splits its value at commas)",
                crate::text::echo(y)
            )));
        }
    }
    let plan = resume::plan_resume(&manifest, &st)?;
    let cluster = crate::slurm::cluster::fetch(&ctx.slurm)
        .context("asking Slurm for the cluster's nodes, partitions and limits")?;
    resume::check_fit(&manifest, &plan, &cluster)?;
    let gpu = match &args.gpu {
        Some(g) => {
            let wanted = crate::run::escalate::GpuWanted::parse(g)?;
            let policy = crate::plan::Policy::from_site(ctx.site()?)?;
            let mut change =
                crate::run::escalate::gpu_change(&manifest, &cluster, &policy, &wanted)?;
            change.after_job = args.escalating_job;
            Some(change)
        }
        None => None,
    };
    let jobs = if args.dry_run {
        Vec::new()
    } else {
        let result = resume::execute(
            &ctx.slurm,
            &mut manifest,
            &plan,
            args.yolo.as_deref(),
            gpu.as_ref(),
        );
        Audit::of("resume")
            .run(&manifest.run_id)
            .done_with(ctx, result, |jobs, rec| {
                rec.job_ids = jobs.iter().map(|j| j.job_id).collect();
            })?
    };
    if args.output.json {
        ctx.printer.json(&ResumeOut {
            run_id: manifest.run_id.clone(),
            dry_run: args.dry_run,
            stages: plan.stages.clone(),
            tasks: plan.tasks.clone(),
            gpu: gpu.clone(),
            jobs,
        })?;
        return Ok(0);
    }
    if let Some(change) = &gpu {
        ctx.printer.line(format!(
            "training {} on {} instead of {} ({} CPUs, {} memory)",
            if args.dry_run { "would run" } else { "runs" },
            change.gres,
            change.from.as_deref().unwrap_or("no GPU"),
            change.cpus,
            change.mem
        ))?;
    }
    let variants = match &plan.tasks {
        Some(t) => format!(
            " for variant(s) {}",
            t.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
        ),
        None => String::new(),
    };
    if args.dry_run {
        ctx.printer.line(format!(
            "run {}: would resubmit {}{variants}",
            manifest.run_id,
            plan.stages.join(" → ")
        ))?;
    } else {
        let ids: Vec<String> = jobs
            .iter()
            .map(|j| format!("{} {}", crate::plan::stage_name(j.stage), j.job_id))
            .collect();
        ctx.printer.line(format!(
            "run {}: resubmitted {}{variants} as attempt {}",
            manifest.run_id,
            ids.join(", "),
            manifest.stages[plan.from].attempts.len()
        ))?;
    }
    Ok(0)
}

pub fn logs(ctx: &mut Context, args: &LogsArgs) -> Result<i32> {
    // A team member's run too, where its run directory can be read (an
    // administrator reads every log).
    let manifest = match crate::run::team::locate(&ctx.slurm, &args.target.run)? {
        crate::run::team::Located::Own(m) => *m,
        crate::run::team::Located::Team(r) => {
            if let crate::run::team::Facts::Slurm { why } = &r.facts {
                return Err(anyhow::anyhow!(
                    "run {} is {}'s and its run directory cannot be read ({why}): its logs are there",
                    r.manifest.run_id,
                    r.user
                ));
            }
            r.manifest
        }
    };
    let mut out = std::io::stdout().lock();
    crate::run::logs::show(
        &ctx.slurm,
        &manifest,
        &args.stage,
        args.task,
        args.follow,
        &mut |bytes| {
            out.write_all(bytes)?;
            out.flush()?;
            Ok(())
        },
    )?;
    Ok(0)
}

pub fn audit_cmd(ctx: &mut Context, args: &AuditArgs) -> Result<i32> {
    let path = audit::Trail::from_site(ctx.site()?)?
        .file
        .unwrap_or(audit::log_path(ctx.site()?)?);
    let (records, bad) = audit::read(&path)?;
    for line in &bad {
        ctx.printer.warn(format!(
            "{}:{line}: not an audit record; skipped",
            path.display()
        ));
    }
    let since = args
        .since
        .as_deref()
        .map(|s| crate::report::window::since_utc(s, Utc::now()).map_err(invalid))
        .transpose()?;
    let selected: Vec<&AuditRecord> = records
        .iter()
        .filter(|r| args.user.as_ref().is_none_or(|u| &r.user == u))
        .filter(|r| {
            args.run.as_ref().is_none_or(|id| {
                r.run_id
                    .as_ref()
                    .is_some_and(|x| x.starts_with(id.as_str()))
            })
        })
        .filter(|r| since.is_none_or(|t| r.time >= t))
        .collect();
    if args.output.json {
        ctx.printer.json(&selected)?;
        return Ok(0);
    }
    let mut table = ctx.printer.table(&[
        "time (UTC)",
        "user",
        "host",
        "command",
        "run",
        "jobs",
        "outcome",
    ]);
    for r in &selected {
        table.add_row(vec![
            r.time.format("%Y-%m-%d %H:%M:%S").to_string(),
            r.user.clone(),
            r.host.clone(),
            r.command.clone(),
            r.run_id.clone().unwrap_or_default(),
            r.job_ids
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(","),
            r.outcome.clone(),
        ]);
    }
    ctx.printer
        .line(&table)
        .with_context(|| "printing the audit log")?;
    Ok(0)
}
