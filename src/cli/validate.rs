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

/// Plan the spec against the cluster as submit would. `Err(why)` when the
/// cluster could not be asked (the check was not made).
fn check_against_cluster(
    ctx: &Context,
    checked: &crate::run::submit::Checked,
) -> std::result::Result<std::result::Result<(), spec::SpecErrors>, String> {
    let cluster = crate::slurm::cluster::fetch(&ctx.slurm).map_err(|e| format!("{e:#}"))?;
    let spec = &checked.spec;
    let workdir = crate::run::submit::resolve_workdir(spec, None)
        .unwrap_or_else(|_| spec.origin.base_dir.clone());
    Ok(crate::plan::plan(spec, &workdir, &cluster, &checked.policy).map(|_| ()))
}

pub fn run(ctx: &mut Context, args: &ValidateArgs) -> Result<i32> {
    // The site file is checked as submit checks it, whatever the spec holds.
    crate::plan::Policy::from_site(ctx.site()?)?;
    crate::audit::Trail::from_site(ctx.site()?)?;
    crate::backup::SiteBackup::from_site(ctx.site()?)?;
    crate::registry::SiteRegistry::from_site(ctx.site()?)?;
    // The spec's own checks, then the same `check` submit runs.
    let checked = match spec::read_checked(&args.spec)? {
        Ok(spec) => crate::run::submit::check(ctx.site()?, spec, None)?,
        Err(errors) => Err(errors),
    };
    let mut cluster_note: Option<String> = None;
    let checked = match (checked, args.no_cluster) {
        (Ok(c), false) => match check_against_cluster(ctx, &c) {
            Ok(Ok(())) => Ok(c.spec),
            Ok(Err(errors)) => Err(errors),
            Err(why) => {
                cluster_note = Some(why);
                Ok(c.spec)
            }
        },
        (Ok(c), true) => Ok(c.spec),
        (Err(e), _) => Err(e),
    };
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
