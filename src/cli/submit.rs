//! `yolo-sched submit`: a spec becomes a held, then released, chain of jobs.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use chrono::Utc;
use clap::Args;
use serde::Serialize;

use super::args::JsonArg;
use super::output;
use super::Context as CliContext;
use crate::error::invalid;
use crate::plan::{self, stage_name, Plan, Policy};
use crate::render::scripts::{render_all, RenderInput};
use crate::render::Templates;
use crate::run::manifest::{self, Attempt, Manifest, StageRecord};
use crate::run::submit::{self as submitter, JobRequest, SubmittedJob};
use crate::spec::Spec;

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
    #[serde(skip_serializing_if = "Option::is_none")]
    sbatch: Option<String>,
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

/// The spec's models as paths the jobs can open, from the site's weights
/// directory and download policy (`spec::resolve_weights`); the problems found.
pub fn resolve_weights(
    spec: &mut Spec,
    policy: &Policy,
    paths: &crate::run::audit::Paths,
) -> Vec<crate::spec::SpecError> {
    crate::spec::resolve_weights(
        spec,
        &crate::spec::WeightsSource {
            cache: paths.weights.as_deref(),
            downloads_allowed: policy.defaults.download_weights.unwrap_or(false),
        },
    )
}

/// Make a spec's workdir absolute: `$VAR`s from the environment, relative
/// paths against the spec's directory.
pub fn resolve_workdir(spec: &Spec, flag: Option<&Path>) -> Result<PathBuf> {
    let raw = match flag {
        Some(p) => p.to_path_buf(),
        None => PathBuf::from(spec.run.workdir.expand(|n| std::env::var(n).ok()).map_err(
            |var| {
                invalid(format!(
                    "{}: `run.workdir` uses ${var}, which is not set in this environment",
                    spec.origin.file
                ))
            },
        )?),
    };
    let base = if flag.is_some() {
        std::env::current_dir()?
    } else {
        absolute(&spec.origin.base_dir)?
    };
    let abs = if raw.is_absolute() {
        raw
    } else {
        base.join(raw)
    };
    let abs = normalize(&abs);
    let shown = abs.display().to_string();
    if crate::shell::quote(&shown) != shown {
        return Err(invalid(format!(
            "the run directory {shown:?} contains characters that #SBATCH lines cannot carry safely \
             (spaces, quotes, `$`, …); choose a path of letters, digits and . _ - / + @ %"
        )));
    }
    Ok(abs)
}

fn absolute(p: &Path) -> Result<PathBuf> {
    Ok(if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()?.join(p)
    })
}

/// Remove `.` and `..` components without touching the filesystem.
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

pub fn run(ctx: &mut CliContext, args: &SubmitArgs) -> Result<i32> {
    let mut spec = crate::spec::load(&args.spec)?;
    let policy = Policy::from_site(ctx.site()?)?;
    let paths: crate::run::audit::Paths = ctx.site()?.section("paths")?;
    let weights = resolve_weights(&mut spec, &policy, &paths);
    if !weights.is_empty() {
        return Err(invalid(
            crate::spec::SpecErrors::new(&spec.origin.file, weights).to_string(),
        ));
    }
    let cluster = crate::slurm::cluster::fetch(&ctx.slurm)
        .context("asking Slurm for the cluster's nodes, partitions and limits")?;
    let workdir = resolve_workdir(&spec, args.workdir.as_deref())?;
    let existing = Manifest::path_in(&workdir);
    if existing.exists() {
        let previous = Manifest::load(&existing)
            .map(|m| m.run_id)
            .unwrap_or_else(|_| "an unreadable run".into());
        return Err(invalid(format!(
            "{} already holds run {previous}: continue it with `yolo-sched resume {previous}`, \
             or give this run another `[run] workdir` (or --workdir)",
            workdir.display()
        )));
    }
    let plan =
        plan::plan(&spec, &workdir, &cluster, &policy).map_err(|e| invalid(e.to_string()))?;

    let now = Utc::now();
    let run_id = manifest::new_run_id(&spec.run.name, now);
    // Checkpoint backup (docs/backup.md): settings checked, and the store tried
    // unless --dry-run, before anything is written or submitted.
    let backup = crate::backup::preflight(ctx.site()?, &spec, &run_id, !args.dry_run)?;
    let templates = Templates::new(args.templates.as_deref())?;
    let exe =
        std::env::current_exe().context("finding the yolo-sched binary for the prepare stage")?;
    let base_dir = absolute(&spec.origin.base_dir)?;
    let scripts = render_all(
        &templates,
        &RenderInput {
            spec: &spec,
            plan: &plan,
            run_id: &run_id,
            yolo_sched: &exe,
            yolo: &args.yolo,
            base_dir: &base_dir,
            font: paths.yolo_font.as_deref(),
        },
    )?;

    for sub in ["scripts", "logs", "state"] {
        std::fs::create_dir_all(workdir.join(sub))
            .with_context(|| format!("creating {}", workdir.join(sub).display()))?;
    }
    let script_paths: Vec<PathBuf> = scripts
        .iter()
        .map(|s| workdir.join("scripts").join(&s.file_name))
        .collect();
    let files: Vec<(&Path, &[u8], u32)> = scripts
        .iter()
        .zip(&script_paths)
        .map(|(s, p)| (p.as_path(), s.text.as_bytes(), 0o755))
        .collect();
    crate::fsutil::write_atomic_all(&files)?;
    if let Some(b) = &backup {
        b.save(&workdir)?;
    }
    let mut requests = Vec::new();
    for (script, path) in scripts.iter().zip(script_paths) {
        let stage = plan.stage(script.kind).expect("scripts come from the plan");
        requests.push(JobRequest {
            kind: script.kind,
            script: path,
            array: None,
            after: stage.depends_on.iter().map(|d| (d.stage, d.kind)).collect(),
            export: vec![],
        });
    }

    if args.dry_run {
        let jobs = dry_run_jobs(&plan, &requests)?;
        return print_result(
            ctx,
            args,
            &plan,
            SubmitOut {
                run_id,
                dry_run: true,
                workdir: workdir.display().to_string(),
                gpu: plan.gpu.explanation.clone(),
                warnings: plan.warnings.clone(),
                resources: plan.stages.iter().map(|s| s.shaping.clone()).collect(),
                jobs,
            },
        );
    }

    let submitted = match submitter::submit_held(&ctx.slurm, &requests) {
        Ok(s) => s,
        Err(e) => {
            super::runs::record(
                ctx,
                &crate::run::audit::AuditRecord::new(
                    "submit",
                    Some(&run_id),
                    vec![],
                    &format!("{e:#}"),
                ),
            );
            return Err(e);
        }
    };
    let manifest = build_manifest(&args.spec, &spec, &plan, &run_id, &workdir, &submitted, now)?;
    if let Err(e) = manifest.save() {
        // Without a manifest (or its index entry) nobody could find these jobs
        // again: take them back, and leave no manifest of a run that never ran,
        // so the workdir can be submitted again.
        let what = submitter::roll_back(&ctx.slurm, &submitted);
        let cleanup = match manifest.discard() {
            Ok(()) => String::new(),
            Err(d) => format!("; {d:#}"),
        };
        return Err(e.context(format!("{what}{cleanup}")));
    }
    let released = submitter::release(&ctx.slurm, &submitted);
    let ids: Vec<u64> = submitted.iter().map(|j| j.job_id).collect();
    let outcome = match &released {
        Ok(()) => "ok".to_string(),
        Err(e) => format!("{e:#}"),
    };
    super::runs::record(
        ctx,
        &crate::run::audit::AuditRecord::new("submit", Some(&run_id), ids, &outcome),
    );
    if let Err(e) = released {
        // The chain was cancelled: leave no run behind that points at it.
        if let Err(d) = manifest.discard() {
            ctx.printer.warn(format!("{d:#}"));
        }
        return Err(e);
    }

    let jobs = submitted
        .iter()
        .map(|j| {
            let stage = plan
                .stage(j.stage)
                .expect("submitted stages come from the plan");
            JobOut {
                stage: stage_name(j.stage),
                job_id: Some(j.job_id),
                array: stage.array.as_ref().map(|a| a.slurm_value()),
                gres: stage.gres.clone(),
                partition: stage.partition.clone(),
                cpus: stage.cpus,
                mem: stage.mem.clone(),
                depends_on: j.depends_on.clone(),
                dependency: j.dependency.clone(),
                script: format!("scripts/{}.sh", stage_name(j.stage)),
                sbatch: None,
            }
        })
        .collect();
    print_result(
        ctx,
        args,
        &plan,
        SubmitOut {
            run_id,
            dry_run: false,
            workdir: workdir.display().to_string(),
            gpu: plan.gpu.explanation.clone(),
            warnings: plan.warnings.clone(),
            resources: plan.stages.iter().map(|s| s.shaping.clone()).collect(),
            jobs,
        },
    )
}

fn dry_run_jobs(plan: &Plan, requests: &[JobRequest]) -> Result<Vec<JobOut>> {
    // Placeholder ids stand for the ids Slurm would give: <prepare>, <train>, …
    let mut fake: Vec<SubmittedJob> = Vec::new();
    let mut jobs = Vec::new();
    for (i, req) in requests.iter().enumerate() {
        let (args, dependency, _) = submitter::sbatch_args(req, &fake)?;
        let placeholder = 1_000_000_000 + i as u64;
        fake.push(SubmittedJob {
            stage: req.kind,
            job_id: placeholder,
            array: None,
            dependency: None,
            depends_on: vec![],
        });
        let mut line = String::from("sbatch --parsable");
        for a in &args {
            line.push(' ');
            line.push_str(&crate::shell::quote(a));
        }
        for (j, earlier) in requests.iter().enumerate().take(i) {
            line = line.replace(
                &(1_000_000_000 + j as u64).to_string(),
                &format!("<{}>", stage_name(earlier.kind)),
            );
        }
        let dependency = dependency.map(|d| {
            let mut d = d;
            for (j, earlier) in requests.iter().enumerate().take(i) {
                d = d.replace(
                    &(1_000_000_000 + j as u64).to_string(),
                    &format!("<{}>", stage_name(earlier.kind)),
                );
            }
            d
        });
        let stage = plan.stage(req.kind).expect("requests come from the plan");
        jobs.push(JobOut {
            stage: stage_name(req.kind),
            job_id: None,
            array: stage.array.as_ref().map(|a| a.slurm_value()),
            gres: stage.gres.clone(),
            partition: stage.partition.clone(),
            cpus: stage.cpus,
            mem: stage.mem.clone(),
            depends_on: vec![],
            dependency,
            script: req.script.display().to_string(),
            sbatch: Some(line),
        });
    }
    Ok(jobs)
}

fn build_manifest(
    spec_path: &Path,
    spec: &Spec,
    plan: &Plan,
    run_id: &str,
    workdir: &Path,
    submitted: &[SubmittedJob],
    now: chrono::DateTime<Utc>,
) -> Result<Manifest> {
    let spec_text = std::fs::read_to_string(spec_path)
        .with_context(|| format!("reading {}", spec_path.display()))?;
    let stages = plan
        .stages
        .iter()
        .map(|s| {
            let job = submitted.iter().find(|j| j.stage == s.kind);
            StageRecord {
                stage: stage_name(s.kind).to_string(),
                job_name: s.job_name.clone(),
                partition: s.partition.clone(),
                gres: s.gres.clone(),
                time: s.time.clone(),
                cpus: s.cpus,
                mem: s.mem.clone(),
                tasks: s.array.as_ref().map_or(1, |a| a.tasks),
                depends_on: s
                    .depends_on
                    .iter()
                    .map(|d| stage_name(d.stage).to_string())
                    .collect(),
                script: format!("scripts/{}.sh", stage_name(s.kind)),
                attempts: job
                    .map(|j| Attempt {
                        attempt: 1,
                        job_id: j.job_id,
                        array: s.array.as_ref().map(|a| a.slurm_value()),
                        dependency: j.dependency.clone(),
                        submitted_at: now,
                    })
                    .into_iter()
                    .collect(),
            }
        })
        .collect();
    Ok(Manifest {
        schema_version: manifest::SCHEMA_VERSION,
        run_id: run_id.to_string(),
        name: spec.run.name.clone(),
        user: crate::identity::current_user(),
        host: crate::identity::host_name(),
        submitted_at: now,
        workdir: workdir.to_path_buf(),
        spec_file: absolute(spec_path)?,
        spec_hash: spec.hash_hex(),
        spec_text,
        variants: plan.variants,
        gpu_explanation: plan.gpu.explanation.clone(),
        estimate_gib: plan.estimate.as_ref().map(|e| e.needed_gib),
        stages,
    })
}

fn print_result(ctx: &CliContext, args: &SubmitArgs, plan: &Plan, out: SubmitOut) -> Result<i32> {
    if args.output.json {
        output::print_json(&out)?;
        return Ok(0);
    }
    let color = ctx.color();
    if args.explain || args.dry_run {
        output::println("GPU choice:")?;
        for line in &out.gpu {
            output::println(format!("  {line}"))?;
        }
        output::println("CPUs and memory (the slice's share of the node unless set):")?;
        for line in &out.resources {
            output::println(format!("  {line}"))?;
        }
    }
    for w in &out.warnings {
        ctx.printer.warn(w);
    }
    let mut table = output::new_table(&[
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
    output::println(&table)?;
    if out.dry_run {
        output::println(format!(
            "dry run: scripts written to {}/scripts; nothing submitted. sbatch lines:",
            out.workdir
        ))?;
        for j in &out.jobs {
            if let Some(line) = &j.sbatch {
                output::println(format!("  {line}"))?;
            }
        }
    } else {
        let id = output::paint(&out.run_id, "1", color);
        output::println(format!(
            "submitted run {id}: {} stage(s), {} variant(s), in {}",
            out.jobs.len(),
            plan.variants,
            out.workdir
        ))?;
        output::println(format!("follow it with: yolo-sched watch {}", out.run_id))?;
    }
    Ok(0)
}
