//! `yolo-sched submit`: a spec becomes a held, then released, chain of jobs.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use serde::Serialize;

use super::args::JsonArg;
use super::Context as CliContext;
use crate::plan::{stage_name, Plan};
use crate::run::submit::Request;

#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  yolo-sched submit spec.toml
  yolo-sched submit spec.toml --dry-run --explain     # scripts and sbatch lines, nothing submitted
  yolo-sched submit sweep.toml --json | jq -r .run_id
  YOLO_SCHED_YOLO=/opt/ultralytics/bin/yolo yolo-sched submit spec.toml

The scripts are written to <workdir>/scripts, Slurm output to <workdir>/logs,
the manifest to <workdir>/manifest.json. Exit status 2 when the spec is invalid
or does not fit the cluster (nothing is submitted), 1 when Slurm refuses a stage
(what was submitted is cancelled).")]
pub struct SubmitArgs {
    /// The training spec (TOML, format v1).
    pub spec: PathBuf,

    /// Write the scripts and print the plan and the exact sbatch command lines; submit nothing.
    #[arg(long)]
    pub dry_run: bool,

    /// Show how the GPU was chosen (memory estimate → slice).
    #[arg(long)]
    pub explain: bool,

    #[command(flatten)]
    pub output: JsonArg,

    /// Use this run directory instead of the spec's `[run] workdir`.
    #[arg(long, value_name = "DIR")]
    pub workdir: Option<PathBuf>,

    /// Directory of templates that override the built-in ones, file by file.
    #[arg(long, value_name = "DIR", env = "YOLO_SCHED_TEMPLATES")]
    pub templates: Option<PathBuf>,

    /// The `yolo` command the stages run.
    #[arg(
        long,
        value_name = "CMD",
        env = "YOLO_SCHED_YOLO",
        default_value = "yolo"
    )]
    pub yolo: String,

    /// `[tune]`: the Python (with Optuna 5) the search's ask and tell jobs
    /// run; default: the python3 beside the `yolo` command, else `python3`.
    #[arg(long, value_name = "PATH", env = "YOLO_SCHED_PYTHON")]
    pub python: Option<String>,
}

/// What named the template directory: the flag when it is on the command
/// line (clap lets it win over the environment), else the variable.
fn templates_source() -> &'static str {
    let flag = std::env::args_os().skip(1).any(|a| {
        let a = a.to_string_lossy();
        a == "--templates" || a.starts_with("--templates=")
    });
    if flag {
        crate::render::TEMPLATES_FLAG
    } else {
        crate::render::TEMPLATES_ENV
    }
}

#[derive(Debug, Serialize)]
struct JobOut {
    stage: &'static str,
    job_id: Option<u64>,
    array: Option<String>,
    gres: Option<String>,
    partition: Option<String>,
    cpus: u32,
    mem: String,
    depends_on: Vec<u64>,
    dependency: Option<String>,
    script: String,
    /// The `sbatch` command line a dry run would run, as one shell line.
    #[serde(skip_serializing_if = "Option::is_none")]
    sbatch: Option<String>,
    /// The same as an argument list (after `sbatch`).
    #[serde(skip_serializing_if = "Option::is_none")]
    sbatch_args: Option<Vec<String>>,
}

#[derive(Debug, Serialize)]
struct SubmitOut {
    run_id: String,
    dry_run: bool,
    workdir: String,
    gpu: Vec<String>,
    warnings: Vec<String>,
    /// How each stage's CPUs and memory were chosen.
    resources: Vec<String>,
    jobs: Vec<JobOut>,
}

pub fn run(ctx: &mut CliContext, args: &SubmitArgs) -> Result<i32> {
    let site = ctx.site()?.clone();
    let request = Request {
        spec: &args.spec,
        workdir: args.workdir.as_deref(),
        templates: args.templates.as_deref().map(|d| (d, templates_source())),
        yolo: &args.yolo,
        python: args.python.as_deref(),
        dry_run: args.dry_run,
    };
    let slurm = ctx.slurm.clone();
    let mut audit = Vec::new();
    let result =
        crate::run::submit::submit(&slurm, &site, &request, &mut |r| audit.push(r.clone()));
    for r in &audit {
        super::runs::record(ctx, r);
    }
    let outcome = result?;
    let plan = &outcome.plan;
    let jobs = outcome
        .jobs
        .iter()
        .map(|j| {
            let stage = plan.stage(j.stage).expect("jobs come from the plan");
            let dry = !j.sbatch_args.is_empty();
            JobOut {
                stage: stage_name(j.stage),
                job_id: j.job_id,
                array: j
                    .array
                    .clone()
                    .or_else(|| stage.array.as_ref().map(|a| a.slurm_value())),
                gres: stage.gres.clone(),
                partition: stage.partition.clone(),
                cpus: stage.cpus,
                mem: stage.mem.clone(),
                depends_on: j.depends_on.clone(),
                dependency: j.dependency.clone(),
                script: if dry {
                    j.script.display().to_string()
                } else {
                    format!("scripts/{}.sh", stage_name(j.stage))
                },
                sbatch: dry.then(|| shell_line("sbatch", &j.sbatch_args)),
                sbatch_args: dry.then(|| j.sbatch_args.clone()),
            }
        })
        .collect();
    print_result(
        ctx,
        args,
        plan,
        SubmitOut {
            run_id: outcome.run_id.clone(),
            dry_run: outcome.dry_run,
            workdir: outcome.workdir.display().to_string(),
            gpu: plan.gpu.explanation.clone(),
            warnings: plan.warnings.clone(),
            resources: plan.stages.iter().map(|s| s.shaping.clone()).collect(),
            jobs,
        },
    )
}

fn print_result(ctx: &CliContext, args: &SubmitArgs, plan: &Plan, out: SubmitOut) -> Result<i32> {
    if args.output.json {
        ctx.printer.json(&out)?;
        return Ok(0);
    }
    if args.explain || args.dry_run {
        ctx.printer.line("GPU choice:")?;
        for line in &out.gpu {
            ctx.printer.line(format!("  {line}"))?;
        }
        ctx.printer
            .line("CPUs and memory (the slice's share of the node unless set):")?;
        for line in &out.resources {
            ctx.printer.line(format!("  {line}"))?;
        }
    }
    for w in &out.warnings {
        ctx.printer.warn(w);
    }
    let mut table = ctx.printer.table(&[
        "stage",
        "job id",
        "array",
        "gres",
        "cpus",
        "mem",
        "partition",
        "after",
    ]);
    for j in &out.jobs {
        table.add_row(vec![
            j.stage.to_string(),
            j.job_id
                .map(|i| i.to_string())
                .unwrap_or_else(|| "-".into()),
            j.array.clone().unwrap_or_else(|| "-".into()),
            j.gres.clone().unwrap_or_else(|| "-".into()),
            j.cpus.to_string(),
            j.mem.clone(),
            j.partition.clone().unwrap_or_else(|| "(default)".into()),
            j.dependency.clone().unwrap_or_else(|| "-".into()),
        ]);
    }
    ctx.printer.line(&table)?;
    if out.dry_run {
        ctx.printer.line(format!(
            "dry run: scripts written to {}/scripts; nothing submitted. sbatch lines:",
            out.workdir
        ))?;
        for j in &out.jobs {
            if let Some(line) = &j.sbatch {
                ctx.printer.line(format!("  {line}"))?;
            }
        }
    } else {
        let id = ctx.printer.paint(&out.run_id, "1");
        ctx.printer.line(format!(
            "submitted run {id}: {} stage(s), {} variant(s), in {}",
            out.jobs.len(),
            plan.variants,
            out.workdir
        ))?;
        ctx.printer
            .line(format!("follow it with: yolo-sched watch {}", out.run_id))?;
    }
    Ok(0)
}

/// A command as one line a user can paste into a shell.
fn shell_line(program: &str, args: &[String]) -> String {
    let mut line = program.to_string();
    for a in args {
        line.push(' ');
        line.push_str(&crate::shell::quote(a));
    }
    line
}
