//! `yolo-sched validate`: check a spec without touching Slurm.

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use serde_json::json;

use super::output;
use super::Context;
use crate::error::{self, exit};
use crate::spec::{self, SpecError};

#[derive(Debug, Args)]
#[command(after_help = "\
Checks everything that can be checked without the cluster: keys and types, `yolo train`
arguments against the Ultralytics list, imgsz, batch, GPU requests, Slurm times and memory
sizes, the sweep, and that the dataset YAML exists. `submit` runs the same checks first,
plus those that need the cluster (array size, GPU types that exist).

Exit status: 0 valid (warnings allowed), 2 invalid (every error is listed with file:line:column).

Examples:
  yolo-sched validate examples/pcb/spec.toml
  yolo-sched validate spec.toml --json | jq '.errors[] | \"\\(.line): \\(.message)\"'
  for s in specs/*.toml; do yolo-sched validate \"$s\" || echo \"$s is broken\"; done")]
pub struct ValidateArgs {
    /// The spec file (TOML, format version 1; see docs/spec.md).
    #[arg(value_name = "SPEC")]
    pub spec: PathBuf,

    /// Print the result as JSON (the spec with defaults filled in, or the errors).
    #[arg(long)]
    pub json: bool,
}

pub fn run(ctx: &mut Context, args: &ValidateArgs) -> Result<i32> {
    let checked = spec::read_checked(&args.spec)?;
    match checked {
        Ok(spec) => {
            let stages = spec.stages();
            let variants = spec.variant_count();
            if args.json {
                output::print_json(&json!({
                    "ok": true,
                    "file": spec.origin.file,
                    "run": spec.run.name,
                    "stages": stages,
                    "variants": variants,
                    "hash": spec.hash_hex(),
                    "warnings": spec.origin.warnings,
                    "errors": [],
                    "spec": spec,
                }))?;
            } else {
                print_warnings(ctx, &spec.origin.warnings);
                output::println(format!(
                    "ok: {}, {} stage{} ({}), {} variant{}",
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
                ))?;
            }
            Ok(exit::OK)
        }
        Err(errors) if args.json => {
            output::print_json(&json!({
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
    let color = match ctx.global.color {
        output::ColorChoice::Always => true,
        output::ColorChoice::Never => false,
        output::ColorChoice::Auto => {
            std::io::stderr().is_terminal()
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
                && std::env::var("TERM").map_or(true, |t| t != "dumb")
        }
    };
    for w in warnings {
        eprintln!("{}: {w}", output::paint("warning", "33", color));
    }
}
