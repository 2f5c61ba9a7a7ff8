//! `submit` as a library workflow: a spec becomes a planned, rendered, held,
//! recorded and released chain of jobs, or nothing at all.
//!
//! Order of effects, each undone if a later one fails:
//! 1. everything is read and checked (spec, site policy, cluster, workdir,
//!    plan, templates) before the first change;
//! 2. the scripts are written (all or none, `fsutil::write_atomic_all`);
//! 3. the submission journal is begun (`journal`), so a kill from here on is
//!    found and undone by the next command;
//! 4. every stage is submitted held, tagged with the journal's token (`chain`);
//! 5. the manifest and index entry are written; failing that, the jobs are
//!    cancelled and the manifest removed, so the workdir is free again;
//! 6. the chain is released in one call; failing that, it is cancelled and
//!    the manifest removed;
//! 7. the journal is finished.
//!
//! A dry run stops after step 2 and returns the `sbatch` argument lists that
//! step 4 would run, made by the same function (`chain::sbatch_args_with`).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use chrono::{DateTime, Utc};

use super::chain::{self, JobRequest, SubmittedJob};
use super::journal::{self, Journal, Phase, Purpose};
use crate::audit::{AuditRecord, Paths};
use crate::config::Site;
use crate::error::invalid;
use crate::plan::{self, stage_name, Plan, Policy};
use crate::render::scripts::{render_all, RenderInput, StageScript};
use crate::render::Templates;
use crate::rundir::manifest::{self, Attempt, Manifest, StageRecord};
use crate::slurm::Slurm;
use crate::spec::{Spec, SpecErrors};

/// What to submit and how.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    pub spec: &'a Path,
    /// `--workdir`, instead of the spec's `[run] workdir`.
    pub workdir: Option<&'a Path>,
    /// A directory of templates overriding the built-in ones, and what named
    /// it (`--templates`, `YOLO_SCHED_TEMPLATES`; errors say which).
    pub templates: Option<(&'a Path, &'a str)>,
    /// The `yolo` command the stages run.
    pub yolo: &'a str,
    /// `[tune]`: the Python (with Optuna) of the ask and tell jobs; `None`:
    /// the one beside `yolo`, else `python3`.
    pub python: Option<&'a str>,
    pub dry_run: bool,
}

/// One stage's job: submitted (with its id) or, on a dry run, as it would be.
#[derive(Debug, Clone)]
pub struct Job {
    pub stage: crate::spec::StageKind,
    pub job_id: Option<u64>,
    /// The `--array` this job was submitted with when it is not the stage's
    /// own (a search's batches); `None`: the stage's.
    pub array: Option<String>,
    pub depends_on: Vec<u64>,
    /// `afterok:12`, or on a dry run `afterok:<prepare>`.
    pub dependency: Option<String>,
    pub script: PathBuf,
    /// The whole `sbatch` argument list (after the program name).
    pub sbatch_args: Vec<String>,
}

/// A submission that went through (or a dry run of one).
#[derive(Debug)]
pub struct Outcome {
    pub run_id: String,
    pub dry_run: bool,
    pub workdir: PathBuf,
    pub plan: Plan,
    pub jobs: Vec<Job>,
}

/// Submit a spec: see the module doc for the order of effects. `record` is
/// given the audit record of a real submission, whatever its outcome.
pub fn submit(
    slurm: &Slurm,
    site: &Site,
    req: &Request<'_>,
    record: &mut dyn FnMut(&AuditRecord),
) -> Result<Outcome> {
    let ready = read_and_check(slurm, site, req)?;
    // Checkpoint backup (docs/backup.md): settings checked, and the store tried
    // unless --dry-run, before anything is written or submitted.
    let backup = crate::backup::preflight(site, &ready.spec, &ready.run_id, !req.dry_run)?;
    let scripts = render_scripts(&ready, req)?;
    let requests = write_run_files(&ready, &scripts, backup.as_ref())?;

    if req.dry_run {
        let jobs = dry_run_jobs(&ready.run_id, &requests)?;
        return Ok(Outcome {
            run_id: ready.run_id,
            dry_run: true,
            workdir: ready.workdir,
            plan: ready.plan,
            jobs,
        });
    }

    ensure_room_for_the_run(req, &ready, &requests)?;
    let (journal, submitted) = submit_held(slurm, &ready, &requests, record)?;
    let (journal, manifest) = record_the_run(slurm, req, &ready, &submitted, journal)?;
    release_the_chain(slurm, &ready, &submitted, journal, &manifest, record)?;

    let jobs = submitted
        .iter()
        .zip(&requests)
        .map(|(j, r)| Job {
            stage: j.stage,
            job_id: Some(j.job_id),
            array: r.array.clone(),
            depends_on: j.depends_on.clone(),
            dependency: j.dependency.clone(),
            script: r.script.clone(),
            sbatch_args: Vec::new(),
        })
        .collect();
    Ok(Outcome {
        run_id: ready.run_id,
        dry_run: false,
        workdir: ready.workdir,
        plan: ready.plan,
        jobs,
    })
}

/// What step 1 read and checked before the first change, and the run's name.
struct Ready {
    spec: Spec,
    templates: Templates,
    paths: Paths,
    registry: crate::names::model::Resolved,
    workdir: PathBuf,
    plan: Plan,
    /// When the run was submitted, and its id made from that.
    now: DateTime<Utc>,
    run_id: String,
}

/// Step 1: the spec, the templates, the site's checks, the cluster, a free
/// workdir and the plan, all before the first change; then the run's id.
fn read_and_check(slurm: &Slurm, site: &Site, req: &Request<'_>) -> Result<Ready> {
    let spec = crate::spec::load(req.spec)?;
    // A bad template directory is refused before Slurm is asked anything.
    let templates = Templates::from_source(req.templates)?;
    let Checked {
        spec,
        policy,
        paths,
        registry,
    } = check(site, spec, req.workdir)?.map_err(|e| invalid(e.to_string()))?;
    let cluster = crate::slurm::cluster::fetch(slurm)
        .context("asking Slurm for the cluster's nodes, partitions and limits")?;
    let workdir = resolve_workdir(&spec, req.workdir)?;
    if !req.dry_run {
        // A submission killed half-way into this workdir is undone first, so
        // its manifest does not block this one.
        let _ = journal::recover(slurm, false);
    }
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
    let mut plan =
        plan::plan(&spec, &workdir, &cluster, &policy).map_err(|e| invalid(e.to_string()))?;
    // The spec's own warnings (`validate` shows them too) come first.
    plan.warnings
        .splice(0..0, spec.origin.warnings.iter().map(|w| w.to_string()));

    let now = Utc::now();
    let run_id = manifest::new_run_id(&spec.run.name, now);
    Ok(Ready {
        spec,
        templates,
        paths,
        registry,
        workdir,
        plan,
        now,
        run_id,
    })
}

/// Every stage's script, rendered with this binary, the `yolo` command and
/// the spec's directory.
fn render_scripts(ready: &Ready, req: &Request<'_>) -> Result<Vec<StageScript>> {
    let exe =
        std::env::current_exe().context("finding the yolo-sched binary for the prepare stage")?;
    let base_dir = absolute(&ready.spec.origin.base_dir)?;
    render_all(
        &ready.templates,
        &RenderInput {
            spec: &ready.spec,
            plan: &ready.plan,
            run_id: &ready.run_id,
            yolo_sched: &exe,
            yolo: req.yolo,
            base_dir: &base_dir,
            font: ready.paths.yolo_font.as_deref(),
            models: &ready.registry,
            python: req.python,
        },
    )
}

/// Step 2: the run's directories, its scripts (and a search's program and
/// settings) all or none, the backup settings; then the jobs to submit.
fn write_run_files(
    ready: &Ready,
    scripts: &[StageScript],
    backup: Option<&crate::backup::RunBackup>,
) -> Result<Vec<JobRequest>> {
    let (spec, workdir) = (&ready.spec, &ready.workdir);
    use crate::rundir::layout::{LOGS, SCRIPTS, STATE};
    for sub in [SCRIPTS, LOGS, STATE] {
        let dir = workdir.join(sub);
        std::fs::create_dir_all(&dir).map_err(|e| {
            crate::fsutil::io_error(e, format!("creating {}", dir.display()), workdir)
        })?;
    }
    let script_paths: Vec<PathBuf> = scripts
        .iter()
        .map(|s| workdir.join(SCRIPTS).join(&s.file_name))
        .collect();
    let mut files: Vec<(&Path, &[u8], u32)> = scripts
        .iter()
        .zip(&script_paths)
        .map(|(s, p)| (p.as_path(), s.text.as_bytes(), 0o755))
        .collect();
    // A search's program and settings, beside the scripts.
    let tune_files = match &spec.tune {
        Some(t) => Some((
            workdir.join(crate::rundir::layout::TUNE_PROGRAM),
            workdir.join(crate::rundir::layout::TUNE_SETTINGS),
            super::tune::settings_json(spec, t, &ready.run_id)?,
        )),
        None => None,
    };
    if let Some((program, settings, text)) = &tune_files {
        files.push((program.as_path(), super::tune::PROGRAM.as_bytes(), 0o755));
        files.push((settings.as_path(), text.as_bytes(), 0o644));
    }
    crate::fsutil::write_atomic_all(&files)?;
    if let Some(b) = backup {
        b.save(workdir)?;
    }
    let mut requests = Vec::new();
    for (script, path) in scripts.iter().zip(script_paths) {
        let stage = ready
            .plan
            .stage(script.kind)
            .expect("scripts come from the plan");
        requests.push(JobRequest {
            kind: script.kind,
            script: path,
            workdir: workdir.clone(),
            array: None,
            after: stage.depends_on.iter().map(|d| (d.stage, d.kind)).collect(),
            export: vec![],
            overrides: vec![],
        });
    }
    if let Some(t) = &spec.tune {
        requests = super::tune::expand(t, requests);
    }
    Ok(requests)
}

/// A full disk is found before anything is submitted: the manifest (its
/// size with the longest job ids), and in the state directory the journal
/// entry (and its rewrite), the index entry and the audit line.
fn ensure_room_for_the_run(
    req: &Request<'_>,
    ready: &Ready,
    requests: &[JobRequest],
) -> Result<()> {
    let placeholder: Vec<SubmittedJob> = requests
        .iter()
        .map(|r| SubmittedJob {
            stage: r.kind,
            job_id: u64::MAX,
            array: r.array.clone(),
            dependency: Some(format!("afterok:{}", u64::MAX)),
            depends_on: vec![u64::MAX; r.after.len()],
        })
        .collect();
    let mut sized = build_manifest(
        req.spec,
        &ready.spec,
        &ready.plan,
        &ready.run_id,
        &ready.workdir,
        &placeholder,
        ready.now,
    )?;
    (sized.model_ref, sized.model_refs) = ready.registry.manifest_refs();
    let manifest_len = serde_json::to_vec_pretty(&sized)?.len() as u64;
    let state = manifest::state_dir()?;
    crate::fsutil::ensure_room(&[
        (ready.workdir.as_path(), &[manifest_len]),
        (state.as_path(), &[4096, 4096, 4096, 4096]),
    ])
    .context("nothing was submitted: the run's files would not fit")?;
    Ok(())
}

/// Steps 3 and 4: the journal begun, every stage submitted held; on failure
/// the journal is forgotten if nothing was queued, and the failure recorded.
fn submit_held(
    slurm: &Slurm,
    ready: &Ready,
    requests: &[JobRequest],
    record: &mut dyn FnMut(&AuditRecord),
) -> Result<(Journal, Vec<SubmittedJob>)> {
    let mut journal = Journal::begin(Purpose::Submit, &ready.run_id, &ready.workdir)?;
    match chain::submit_held(slurm, requests, &mut journal) {
        Ok(s) => Ok((journal, s)),
        Err(e) => {
            finish_if_clean(slurm, journal);
            record(&AuditRecord::new(
                "submit",
                Some(&ready.run_id),
                vec![],
                &format!("{e:#}"),
            ));
            Err(e)
        }
    }
}

/// Step 5: the manifest and index entry; failing that, the held jobs are
/// cancelled and the manifest removed, so the workdir is free again.
fn record_the_run(
    slurm: &Slurm,
    req: &Request<'_>,
    ready: &Ready,
    submitted: &[SubmittedJob],
    mut journal: Journal,
) -> Result<(Journal, Manifest)> {
    let mut manifest = build_manifest(
        req.spec,
        &ready.spec,
        &ready.plan,
        &ready.run_id,
        &ready.workdir,
        submitted,
        ready.now,
    )?;
    (manifest.model_ref, manifest.model_refs) = ready.registry.manifest_refs();
    if let Err(e) = manifest
        .save()
        .and_then(|()| journal.set_phase(Phase::Recorded))
    {
        // Without a manifest (or its index entry) nobody could find these jobs
        // again: take them back, and leave no manifest of a run that never ran,
        // so the workdir can be submitted again.
        let what = chain::roll_back(slurm, submitted);
        let cleanup = match manifest.discard() {
            Ok(()) => String::new(),
            Err(d) => format!("; {d:#}"),
        };
        finish_if_clean(slurm, journal);
        return Err(e.context(format!("{what}{cleanup}")));
    }
    Ok((journal, manifest))
}

/// Steps 6 and 7: the chain released in one call and the outcome recorded;
/// failing that, the chain was cancelled and the manifest is removed; then
/// the journal is finished.
fn release_the_chain(
    slurm: &Slurm,
    ready: &Ready,
    submitted: &[SubmittedJob],
    mut journal: Journal,
    manifest: &Manifest,
    record: &mut dyn FnMut(&AuditRecord),
) -> Result<()> {
    let released = chain::release(slurm, submitted);
    let ids: Vec<u64> = submitted.iter().map(|j| j.job_id).collect();
    let outcome = match &released {
        Ok(()) => "ok".to_string(),
        Err(e) => format!("{e:#}"),
    };
    record(&AuditRecord::new(
        "submit",
        Some(&ready.run_id),
        ids,
        &outcome,
    ));
    if let Err(e) = released {
        // The chain was cancelled: leave no run behind that points at it.
        let cleanup = match manifest.discard() {
            Ok(()) => String::new(),
            Err(d) => format!("; {d:#}"),
        };
        finish_if_clean(slurm, journal);
        return Err(e.context(cleanup));
    }
    let _ = journal.set_phase(Phase::Released);
    journal.finish();
    Ok(())
}

/// After a failed submission that was rolled back: forget the journal only
/// when the queue holds nothing of it; otherwise the next command's recovery
/// finds what a lost `sbatch` answer may yet have queued.
pub(crate) fn finish_if_clean(slurm: &Slurm, journal: Journal) {
    if matches!(chain::any_left(slurm, &journal), Ok(false)) {
        journal.finish();
    }
}

/// The `sbatch` argument lists of a dry run, with `<prepare>`, `<train>` …
/// where Slurm's ids would be, and a dry-run token in the comment.
fn dry_run_jobs(run_id: &str, requests: &[JobRequest]) -> Result<Vec<Job>> {
    let mut jobs = Vec::new();
    for req in requests {
        let comment = crate::slurm::comment::comment(run_id, "<token>", stage_name(req.kind));
        let (args, dependency) =
            chain::sbatch_args_with(req, &comment, |s| Some(format!("<{}>", stage_name(s))))?;
        jobs.push(Job {
            stage: req.kind,
            job_id: None,
            array: req.array.clone(),
            depends_on: vec![],
            dependency,
            script: req.script.clone(),
            sbatch_args: crate::slurm::sbatch::command_args(&args),
        });
    }
    Ok(jobs)
}

/// The spec's models as paths the jobs can open, from the site's weights
/// directory and download policy (`spec::resolve_weights`); the problems found.
/// A spec that passed every check `validate` and `submit` make before Slurm
/// is asked, with what they found on the way.
pub struct Checked {
    pub spec: Spec,
    pub policy: Policy,
    pub paths: Paths,
    /// The `registry:` models, each resolved to one exact version (per
    /// variant for a sweep over `model`).
    pub registry: crate::names::model::Resolved,
}

/// The one check of a parsed spec against the site, shared by `validate` and
/// `submit` so that neither accepts what the other refuses: the site's
/// sections (policy, audit, guard, backup, registry), the spec's guard and
/// backup within the site's limits, the default model, the `registry:` models,
/// the weights and the spec's workdir (unless `--workdir` replaces it). `Ok(Err(..))`:
/// the spec's own mistakes, all of them; `Err`: a site file that is wrong, or
/// a registry that cannot be read.
pub fn check(
    site: &Site,
    mut spec: Spec,
    workdir_flag: Option<&Path>,
) -> Result<Result<Checked, SpecErrors>> {
    let policy = Policy::from_site(site)?;
    // Where the record of a submission goes, checked before any change.
    crate::audit::Trail::from_site(site)?;
    // The memory guard's settings (spec [guard] within the site's limits).
    crate::agent::check_spec(site, &spec)?;
    // The backup place (the store itself is tried by `submit` only).
    crate::backup::check(site, &spec)?;
    let paths: Paths = site.section("paths")?;
    let has_registry = crate::registry::SiteRegistry::from_site(site)?
        .url
        .is_some();
    let mut errors: Vec<crate::spec::SpecError> =
        crate::spec::apply_default_model(&mut spec, policy.defaults.model.as_deref())
            .into_iter()
            .collect();
    // The `registry:` models (`[train] model`, `[sweep] model`): each one
    // exact version, its blobs checked (the registry is read, nothing written).
    let registry = if errors.is_empty() {
        crate::registry::spec::resolve_in_spec(site, &mut spec)?
    } else {
        crate::names::model::Resolved::default()
    };
    errors.extend(resolve_weights(&mut spec, &policy, &paths, has_registry));
    if !has_registry && spec.tune.as_ref().is_some_and(|t| t.publish.is_some()) {
        errors.push(spec.error_at(
            "tune.publish",
            "the search would publish its best model, but this site has no model registry",
            Some(
                "the site file needs `[registry] url = \"file:///shared/yolo-models\"` (docs/registry.md), or remove publish"
                    .into(),
            ),
        ));
    }
    if workdir_flag.is_none() {
        errors.extend(workdir_errors(&spec));
    }
    if !errors.is_empty() {
        return Ok(Err(SpecErrors::new(&spec.origin.file, errors)));
    }
    Ok(Ok(Checked {
        spec,
        policy,
        paths,
        registry,
    }))
}

pub fn resolve_weights(
    spec: &mut Spec,
    policy: &Policy,
    paths: &Paths,
    registry: bool,
) -> Vec<crate::spec::SpecError> {
    crate::spec::resolve_weights(
        spec,
        &crate::spec::WeightsSource {
            cache: paths.weights.as_deref(),
            downloads_allowed: policy.defaults.download_weights.unwrap_or(false),
            registry,
        },
    )
}

/// Make a spec's workdir absolute: `$VAR`s from the environment, relative
/// paths against the spec's directory. Errors are invalid input located at
/// `run.workdir` (or naming `--workdir`), the same for `validate` and `submit`.
pub fn resolve_workdir(spec: &Spec, flag: Option<&Path>) -> Result<PathBuf> {
    workdir_checked(spec, flag).map_err(|e| match flag {
        Some(_) => invalid(format!("--workdir: {}", e.message)),
        None => invalid(crate::spec::SpecErrors::new(&spec.origin.file, vec![e]).to_string()),
    })
}

/// The spec's own workdir problems, for `validate` (empty when it is usable).
pub fn workdir_errors(spec: &Spec) -> Vec<crate::spec::SpecError> {
    workdir_checked(spec, None).err().into_iter().collect()
}

fn workdir_checked(spec: &Spec, flag: Option<&Path>) -> Result<PathBuf, crate::spec::SpecError> {
    let at = |message: String, help: &str| spec.error_at("run.workdir", message, Some(help.into()));
    let raw = match flag {
        Some(p) => p.to_path_buf(),
        None => PathBuf::from(spec.run.workdir.expand(|n| std::env::var(n).ok()).map_err(
            |var| {
                at(
                    format!("uses ${var}, which is not set in this environment"),
                    "set it before submitting, or write the path out",
                )
            },
        )?),
    };
    let cwd = || std::env::current_dir().map_err(|e| at(format!("the current directory: {e}"), ""));
    let base = if flag.is_some() {
        cwd()?
    } else if spec.origin.base_dir.is_absolute() {
        spec.origin.base_dir.clone()
    } else {
        cwd()?.join(&spec.origin.base_dir)
    };
    let abs = normalize(&if raw.is_absolute() {
        raw
    } else {
        base.join(raw)
    });
    let shown = abs.display().to_string();
    let allowed = "choose a path of letters, digits and . _ - / + @";
    if crate::shell::quote(&shown) != shown {
        return Err(at(
            format!(
                "the run directory {:?} contains characters that #SBATCH lines cannot carry \
                 safely (spaces, quotes, `$`, `#`, …)",
                crate::text::shown(&shown, crate::text::SHOWN_CHARS)
            ),
            allowed,
        ));
    }
    if shown.contains('%') {
        // sbatch expands %j, %x, %u … in --output and --error, so the logs
        // would land somewhere else than the run directory.
        return Err(at(
            format!(
                "the run directory {:?} contains `%`, which sbatch expands in log paths (%j is the job id)",
                crate::text::clip(&shown)
            ),
            allowed,
        ));
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

fn build_manifest(
    spec_path: &Path,
    spec: &Spec,
    plan: &Plan,
    run_id: &str,
    workdir: &Path,
    submitted: &[SubmittedJob],
    now: DateTime<Utc>,
) -> Result<Manifest> {
    let spec_text = crate::fsutil::read_regular(spec_path, crate::spec::MAX_SPEC_BYTES)?;
    let stages = plan
        .stages
        .iter()
        .map(|s| {
            // One job per stage, or for a search one per batch: each an attempt.
            let jobs = submitted.iter().filter(|j| j.stage == s.kind);
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
                    // A search's later asks wait for the tell before them.
                    .chain((s.kind == crate::spec::StageKind::Ask).then(|| "tell".to_string()))
                    .collect(),
                script: format!("scripts/{}.sh", stage_name(s.kind)),
                attempts: jobs
                    .enumerate()
                    .map(|(i, j)| Attempt {
                        attempt: i as u32 + 1,
                        job_id: j.job_id,
                        array: j
                            .array
                            .clone()
                            .or_else(|| s.array.as_ref().map(|a| a.slurm_value())),
                        dependency: j.dependency.clone(),
                        submitted_at: now,
                        gres: None,
                    })
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
        model_ref: None,
        model_refs: Vec::new(),
        stages,
    })
}
