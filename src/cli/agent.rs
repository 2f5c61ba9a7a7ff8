//! `yolo-sched agent`: the job agent the GPU stage scripts start beside the
//! trainer. Thin: it gathers the options and hands them to `agent::run`.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use clap::Args;

use super::args::{JsonArg, NvmlLibArg};
use super::Context;
use crate::agent::{self, GuardPolicy, GuardSite, Options};
use crate::error::invalid;
use crate::rundir::manifest::Manifest;

#[derive(Debug, Args)]
#[command(after_help = "\
Started by the train script (templates/train.sh.j2) in the background beside the trainer;
you do not normally run it yourself. It reads the memory of the job's own device(s) (the
MIG slice or GPUs Slurm gave the job: CUDA_VISIBLE_DEVICES, or where Slurm renumbered it
(ConstrainDevices), SLURM_STEP_GPUS/SLURM_JOB_GPUS through the node's gres.conf; where that
cannot be known it warns and never stops) every [guard] interval_s seconds, keeps the series in
<workdir>/state/<stage>[.<task>].memory.csv, writes per-job gauges to the site's
[guard] textfile_dir, and runs the memory guard: a warning at warn_fraction of the slice,
and on sustained growth over growth_mb_per_min (or over the job's share of a shared GPU)
TERM to the trainer, the grace period, then KILL, with the reason in
<workdir>/state/<stage>[.<task>].guard.json, the job log and the audit log. It ends when the
trainer exits, when its stdin closes (--stdin-eof), or after --samples. Its failure never
fails the job. See docs/agent.md.

Exit status: 0 when it ran (whatever the guard decided), 1 when it could not start
(no NVML, no such device), 2 for invalid input.

Examples:
  yolo-sched agent --workdir runs/demo --stage train --pid 4242 --stdin-eof
  CUDA_VISIBLE_DEVICES=MIG-4a2b36b7-8d1c-5f43-9a4e-2c0d6b3e7f10 \\
    yolo-sched agent --workdir runs/demo --stage train --samples 5 --dry-run --json")]
pub struct AgentArgs {
    /// The run directory (holds manifest.json and state/).
    #[arg(long, value_name = "DIR")]
    pub workdir: PathBuf,

    /// The stage the agent watches (`train`, `val`).
    #[arg(long, value_name = "STAGE", default_value = "train")]
    pub stage: String,

    /// The array task (default: SLURM_ARRAY_TASK_ID).
    #[arg(long, value_name = "N")]
    pub task: Option<u32>,

    /// The trainer's process id: the guard stops it, and the agent ends with it.
    #[arg(long, value_name = "PID", value_parser = clap::value_parser!(i32).range(1..))]
    pub pid: Option<i32>,

    /// The Ultralytics run directory whose results.csv gives the epoch and mAP (default: <workdir>/<stage>[-<task>] for train).
    #[arg(long, value_name = "DIR")]
    pub save_dir: Option<PathBuf>,

    /// The devices to watch, as NVML names them: MIG-<uuid>, GPU-<uuid> or NVML indices (default: the job's own, from CUDA_VISIBLE_DEVICES, SLURM_STEP_GPUS/SLURM_JOB_GPUS and gres.conf).
    #[arg(long, value_name = "LIST")]
    pub devices: Option<String>,

    /// The node's gres.conf, which maps Slurm's GRES indices to devices (default: the site's [node_setup] gres_conf, else /etc/slurm/gres.conf).
    #[arg(long, value_name = "FILE")]
    pub gres_conf: Option<PathBuf>,

    /// Root for /proc/driver/nvidia-caps/mig-minors (tests; default /).
    #[arg(long, value_name = "DIR", hide = true)]
    pub sysroot: Option<PathBuf>,

    /// The job's share of a shared GPU, 0 to 1 (default: SLURM_SHARDS_ON_NODE over [guard] shards_per_gpu).
    #[arg(long, value_name = "FRACTION", value_parser = parse_share)]
    pub share: Option<f64>,

    /// A search's trial resumed from its checkpoint (requeued, or moved to a
    /// bigger slice): the epochs its results.csv had when this job started,
    /// whose rungs of successive halving its earlier job's agent decided and
    /// which are not judged again. The train script sets it.
    #[arg(
        long,
        value_name = "N",
        env = "YOLO_SCHED_EPOCHS_BEFORE",
        default_value_t = 0
    )]
    pub epochs_before: u32,

    /// End when stdin reaches end of file (the train script keeps it open while it runs).
    #[arg(long)]
    pub stdin_eof: bool,

    /// Stop after this many samples.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub samples: Option<u64>,

    /// Sample and decide, but change nothing: no files, no metrics, no audit record, and the guard only says what it would stop.
    #[arg(long)]
    pub dry_run: bool,

    #[command(flatten)]
    pub nvml_lib: NvmlLibArg,

    #[command(flatten)]
    pub output: JsonArg,
}

fn parse_share(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 1.0 => Ok(v),
        _ => Err(format!("{s:?} is not a fraction above 0 and at most 1")),
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// The job's own devices (`agent::devices::resolve`) from `--devices` or
/// `CUDA_VISIBLE_DEVICES`, Slurm's GRES indices and the node's gres.conf
/// with `mig-minors`. A `CUDA_VISIBLE_DEVICES` that lists no device is an
/// error, which the agent treats as a device it cannot open.
fn job_devices(args: &AgentArgs, site: &crate::config::Site) -> Result<agent::devices::Mapping> {
    use crate::agent::devices::{gres_units, resolve, JobGres};
    use crate::nodesetup::site::{SiteSection, DEFAULT_GRES_CONF};
    let visible = args
        .devices
        .clone()
        .or_else(|| env("CUDA_VISIBLE_DEVICES"))
        .unwrap_or_default();
    let gres_indices = ["SLURM_STEP_GPUS", "SLURM_JOB_GPUS"]
        .into_iter()
        .find_map(|var| env(var).map(|v| (var, v)));
    // The map is read only where it is needed: indices in a Slurm job.
    let units = if args.devices.is_none() && gres_indices.is_some() {
        let path = args
            .gres_conf
            .clone()
            .or_else(|| {
                site.section::<SiteSection>("node_setup")
                    .ok()
                    .and_then(|s| s.gres_conf)
            })
            // Where Slurm itself reads it: beside slurm.conf.
            .or_else(|| env("SLURM_CONF").map(|c| Path::new(&c).with_file_name("gres.conf")))
            .unwrap_or_else(|| PathBuf::from(DEFAULT_GRES_CONF));
        let node = env("SLURMD_NODENAME")
            .map(Ok)
            .unwrap_or_else(crate::identity::short_host_name);
        let sysroot = args.sysroot.clone().unwrap_or_else(|| PathBuf::from("/"));
        let minors = crate::fsutil::read_regular(
            &crate::gres::mig_minors_path(&sysroot),
            crate::gres::CONF_LIMIT,
        )
        .ok()
        .and_then(|t| crate::gres::MigMinors::parse(&t, "mig-minors").ok());
        match (
            crate::fsutil::read_regular(&path, crate::gres::CONF_LIMIT),
            node,
        ) {
            (Err(e), _) => Err(format!("{}: {e:#}", path.display())),
            (_, Err(e)) => Err(format!("this node's name is unknown: {e:#}")),
            (Ok(text), Ok(node)) => match crate::gres::parse(&text, &path.display().to_string()) {
                Err(e) => Err(format!("{e:#}")),
                Ok(conf) => gres_units(&conf, &node, minors.as_ref())
                    .map_err(|e| format!("{}: {e}", path.display())),
            },
        }
    } else {
        Ok(Vec::new())
    };
    resolve(&JobGres {
        visible: &visible,
        explicit: args.devices.is_some(),
        gres_indices: gres_indices.as_ref().map(|(var, v)| (*var, v.as_str())),
        units: units.as_deref().map_err(Clone::clone),
    })
}

pub fn run(ctx: &mut Context, args: &AgentArgs) -> Result<i32> {
    if crate::spec::StageKind::from_name(&args.stage).is_none() {
        return Err(invalid(format!(
            "--stage {:?} is not a stage; expected one of: prepare, train, val, export",
            args.stage
        )));
    }
    let manifest = Manifest::load(&Manifest::path_in(&args.workdir))
        .map_err(|e| invalid(format!("{e:#} (is --workdir a run directory?)")))?;
    let site = ctx.site()?;
    let section = GuardSite::from_site(site)?;
    let mut notes = Vec::new();
    let (spec_guard, tune) = match crate::spec::parse(&manifest.spec_text, "manifest.json (spec)") {
        Ok(spec) => (spec.guard, spec.tune),
        Err(_) => {
            notes.push(
                "the run's spec does not parse here; the site's [guard] settings apply".to_string(),
            );
            (Default::default(), None)
        }
    };
    // Limits were checked at submission; a site that tightened since wins.
    let mut policy = match GuardPolicy::resolve(&section, &spec_guard) {
        Ok(p) => p,
        Err(over) => {
            let keys: Vec<&str> = over.iter().map(|o| o.key.as_str()).collect();
            notes.push(format!(
                "the spec's {} went past the site's limits since submission; the site's [guard] settings apply",
                keys.join(", ")
            ));
            GuardPolicy::resolve(&section, &Default::default())
                .map_err(|_| invalid("the site's [guard] section cannot be resolved"))?
        }
    };
    let mut audit = crate::audit::Trail::from_site(site).ok();
    if args.dry_run {
        policy.may_stop = false;
        policy.textfile_dir = None;
        audit = None;
    }
    let task = args
        .task
        .or_else(|| env("SLURM_ARRAY_TASK_ID").and_then(|t| t.parse().ok()));
    let devices = job_devices(args, site).map_err(|e| format!("{e:#}"));
    let shards: Option<u32> = env("SLURM_SHARDS_ON_NODE").and_then(|s| s.parse().ok());
    let share = agent::policy::share_of(args.share, shards, policy.shards_per_gpu);
    // Shards mean other jobs on the GPU, known share or not.
    let shared = share.is_some() || shards.is_some_and(|n| n > 0);
    let save_dir = args.save_dir.clone().or_else(|| {
        (args.stage == "train").then(|| args.workdir.join(crate::rundir::layout::train_dir(task)))
    });
    let job_id = env("SLURM_JOB_ID").unwrap_or_default();
    // A search's trial with [tune] early_stop: its rule and its batch.
    let prune = match (&tune, task) {
        (Some(t), Some(trial)) if args.stage == "train" => {
            t.early_stop.map(|rule| agent::run::PruneSetup {
                rule,
                direction: t.direction,
                objective: t.objective.clone(),
                trial,
                batch: t.batch_trials(trial / t.parallel.max(1)),
                epochs_before: args.epochs_before,
            })
        }
        _ => None,
    };
    if let Some(p) = &prune {
        notes.push(format!(
            "early stopping of trial {}: {} rule from epoch {}, with at least {} trial(s) to compare{}",
            p.trial,
            p.rule.rule.name(),
            p.rule.min_epochs,
            p.rule.min_trials,
            match p.rule.rule {
                crate::spec::PruneRule::Halving => format!(", eta {}", p.rule.eta),
                crate::spec::PruneRule::Median => String::new(),
            }
        ));
    }
    let opts = Options {
        workdir: args.workdir.clone(),
        run_id: manifest.run_id.clone(),
        stage: args.stage.clone(),
        task,
        pid: args.pid,
        devices,
        library: crate::nvml::library_path(args.nvml_lib.path.as_ref()),
        policy,
        share,
        shared,
        array_job_id: env("SLURM_ARRAY_JOB_ID").unwrap_or_else(|| job_id.clone()),
        job_id,
        user: crate::identity::current_user(),
        account: env("SLURM_JOB_ACCOUNT").unwrap_or_default(),
        save_dir,
        stop_on_stdin_eof: args.stdin_eof,
        max_samples: args.samples,
        audit,
        write_files: !args.dry_run,
        // Inside a Slurm job (not a test's or a user's shell that only sets
        // SLURM_JOB_ID), the measurement goes into the job's comment.
        carrier: (!args.dry_run
            && env("SLURM_JOB_ID").is_some()
            && env("SLURM_CLUSTER_NAME").is_some())
        .then(crate::slurm::Slurm::from_env),
        prune,
    };
    let printer = &ctx.printer;
    let mut log = |line: &str| {
        printer.note(format!(
            "{} yolo-sched agent: {line}",
            chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ")
        ))
    };
    for n in &notes {
        log(n);
    }
    // Duties beside the guard: the checkpoint backup of a training with one.
    let mut duties: Vec<Box<dyn agent::AgentDuty>> = Vec::new();
    if let (Some(dir), false) = (&opts.save_dir, args.dry_run) {
        match crate::backup::duty::BackupDuty::for_save_dir(dir) {
            Ok(Some(duty)) => duties.push(Box::new(duty)),
            Ok(None) => {}
            Err(e) => log(&format!(
                "backup: warning: checkpoints are not backed up: {e:#}"
            )),
        }
    }
    let outcome = agent::run::run(&opts, &mut duties, &mut log)
        .context("the job agent could not start; the job runs on without it")?;
    if args.output.json {
        ctx.printer.json(&outcome)?;
    }
    Ok(0)
}
