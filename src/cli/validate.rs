//! `yolo-sched validate`: check a spec without touching Slurm.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use serde_json::json;

use super::args::JsonArg;
use super::Context;
use crate::error::{self, exit};
use crate::spec::{self, SpecError};

#[derive(Debug, Args)]
#[command(after_help = "\
Checks everything that can be checked without the cluster: keys and types, `yolo train`
arguments against the Ultralytics list, imgsz, batch, GPU requests, Slurm times and memory
sizes, the sweep, and that the dataset YAML exists. Where Slurm answers, it also plans the
run against the cluster as `submit` would (GPU types that exist, array size, and whether
some node can ever give each stage its CPUs, memory, GPU and time); where it does not, it
says that check was not made. `--no-cluster` skips it.

Exit status: 0 valid (warnings allowed), 2 invalid (every error is listed with file:line:column).

Examples:
  yolo-sched validate examples/pcb/spec.toml
  yolo-sched validate spec.toml --json | jq '.errors[] | \"\\(.line): \\(.message)\"'
  for s in specs/*.toml; do yolo-sched validate \"$s\" || echo \"$s is broken\"; done")]
pub struct ValidateArgs {
    /// The spec file (TOML, format version 1; see docs/spec.md).
    #[arg(value_name = "SPEC")]
    pub spec: PathBuf,

    #[command(flatten)]
    pub output: JsonArg,

    /// Do not ask Slurm: check the spec on its own.
    #[arg(long)]
    pub no_cluster: bool,
}

/// Plan the spec against the cluster as submit would. `Ok(Err(why))` when
/// the cluster could not be asked (the check was not made).
fn check_against_cluster(
    ctx: &mut Context,
    spec: &spec::Spec,
) -> Result<Result<Result<(), spec::SpecErrors>, String>> {
    let policy = crate::plan::Policy::from_site(ctx.site()?)?;
    let cluster = match crate::slurm::cluster::fetch(&ctx.slurm) {
        Ok(c) => c,
        Err(e) => return Ok(Err(format!("{e:#}"))),
    };
    let workdir = crate::run::submit::resolve_workdir(spec, None)
        .unwrap_or_else(|_| spec.origin.base_dir.clone());
    Ok(Ok(
        crate::plan::plan(spec, &workdir, &cluster, &policy).map(|_| ())
    ))
}

pub fn run(ctx: &mut Context, args: &ValidateArgs) -> Result<i32> {
    // The site file is checked as submit checks it, whatever the spec holds.
    crate::plan::Policy::from_site(ctx.site()?)?;
    crate::run::audit::Trail::from_site(ctx.site()?)?;
    crate::backup::SiteBackup::from_site(ctx.site()?)?;
    let has_registry = crate::registry::SiteRegistry::from_site(ctx.site()?)?
        .url
        .is_some();
    let mut checked = spec::read_checked(&args.spec)?;
    if let Ok(spec) = &mut checked {
        let policy = crate::plan::Policy::from_site(ctx.site()?)?;
        crate::agent::check_spec(ctx.site()?, spec)?;
        // The backup place as submit checks it (the store is not asked).
        crate::backup::check(ctx.site()?, spec)?;
        let paths: crate::run::audit::Paths = ctx.site()?.section("paths")?;
        let missing = spec::apply_default_model(spec, policy.defaults.model.as_deref());
        if missing.is_none() {
            // A `registry:` model as submit resolves it (the registry is read, nothing written).
            crate::registry::spec::resolve_in_spec(ctx.site()?, spec)?;
        }
        let mut errors = crate::run::submit::resolve_weights(spec, &policy, &paths, has_registry);
        errors.extend(missing);
        errors.extend(crate::run::submit::workdir_errors(spec));
        if !errors.is_empty() {
            checked = Err(spec::SpecErrors::new(&spec.origin.file, errors));
        }
    }
    let mut cluster_note: Option<String> = None;
    if let (Ok(spec), false) = (&checked, args.no_cluster) {
        match check_against_cluster(ctx, spec)? {
            Ok(Ok(())) => {}
            Ok(Err(errors)) => checked = Err(errors),
            Err(why) => cluster_note = Some(why),
        }
    }
    let cluster_checked = !args.no_cluster && cluster_note.is_none();
    match checked {
        Ok(spec) => {
            let stages = spec.stages();
            let variants = spec.variant_count();
            if args.output.json {
                ctx.printer.json(&json!({
                    "ok": true,
                    "file": spec.origin.file,
                    "run": spec.run.name,
                    "stages": stages,
                    "variants": variants,
                    "hash": spec.hash_hex(),
                    "warnings": spec.origin.warnings,
                    "errors": [],
                    "cluster_checked": cluster_checked,
                    "cluster_not_checked_because": cluster_note,
                    "spec": spec,
                }))?;
            } else {
                print_warnings(ctx, &spec.origin.warnings);
                if let Some(why) = &cluster_note {
                    ctx.printer.note(format!(
                        "yolo-sched: note: not checked against the cluster (Slurm did not answer: {why}); \
                         `submit` will check it"
                    ));
                }
                ctx.printer.line(format!(
                    "ok: {}, {} stage{} ({}), {} variant{}{}",
                    spec.run.name,
                    stages.len(),
                    plural(stages.len() as u64),
                    stages
                        .iter()
                        .map(|s| s.name())
                        .collect::<Vec<_>>()
                        .join(" → "),
                    variants,
                    plural(variants),
                    if cluster_checked {
                        "; fits the cluster"
                    } else {
                        ""
                    },
                ))?;
            }
            Ok(exit::OK)
        }
        Err(errors) if args.output.json => {
            ctx.printer.json(&json!({
                "ok": false,
                "file": errors.file,
                "errors": errors.errors,
                "warnings": [],
            }))?;
            Ok(exit::INVALID_INPUT)
        }
        Err(errors) => Err(error::invalid(errors.to_string())),
    }
}

fn plural(n: u64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

fn print_warnings(ctx: &Context, warnings: &[SpecError]) {
    for w in warnings {
        ctx.printer.warn(w);
    }
}
