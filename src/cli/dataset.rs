//! `yolo-sched dataset check`: check (and optionally cache) an Ultralytics dataset.

use std::path::PathBuf;

use anyhow::{Context as _, Result};
use clap::{Args, Subcommand};

use super::args::JsonArg;
use super::Context;
use crate::dataset::{self, CheckOptions, Report, Severity};
use crate::error::exit;

#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  yolo-sched dataset check examples/pcb/dataset/data.yaml
  yolo-sched dataset check data.yaml --json --summary summary.json")]
pub struct DatasetArgs {
    #[command(subcommand)]
    pub command: DatasetCommand,
}

#[derive(Debug, Subcommand)]
pub enum DatasetCommand {
    /// Check every image and label file of a dataset YAML; optionally copy it to local storage.
    Check(CheckArgs),
}

#[derive(Debug, Args)]
#[command(after_help = "\
Reads the dataset YAML as Ultralytics does (path, train, val, test, names or nc, kpt_shape;
image directories or .txt image lists; labels found by replacing /images/ with /labels/),
then checks every image header and every label line: `class cx cy w h` or a polygon
`class x1 y1 x2 y2 …`, values in [0, 1], classes below the number of names.

Images without a label file are background images, as for Ultralytics (counted, not errors).
Unreadable images and malformed labels, which Ultralytics would drop, are errors.

Exit status: 0 usable (warnings allowed), 2 errors found or the YAML is wrong,
1 the copy to --cache failed. The prepare stage runs this, so training never starts
on a broken dataset.

Examples:
  yolo-sched dataset check datasets/pcb.yaml
  yolo-sched dataset check data.yaml --json | jq '.splits.train.per_class'
  yolo-sched dataset check data.yaml --summary runs/pcb/prepare/summary.json
  DATA=$(yolo-sched dataset check data.yaml --cache \"/local/ssd/$USER\" | tail -n 1)")]
pub struct CheckArgs {
    /// The Ultralytics dataset YAML.
    #[arg(value_name = "DATA_YAML")]
    pub data: PathBuf,

    #[command(flatten)]
    pub output: JsonArg,

    /// Also write the JSON report to FILE (atomically, also when errors are found).
    #[arg(long, value_name = "FILE")]
    pub summary: Option<PathBuf>,

    /// When the dataset has no error, copy it under DIR and print the copy's YAML
    /// path as the last line (reuses an identical copy).
    #[arg(long, value_name = "DIR")]
    pub cache: Option<PathBuf>,

    /// Files read in parallel (default: one per CPU, at most 16).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub threads: usize,
}

/// Errors and warnings shown in the terminal; the JSON report has up to
/// `dataset::MAX_FINDINGS` of each.
const SHOWN_FINDINGS: usize = 20;

pub fn run(ctx: &mut Context, args: &DatasetArgs) -> Result<i32> {
    match &args.command {
        DatasetCommand::Check(check) => run_check(ctx, check),
    }
}

fn run_check(ctx: &Context, args: &CheckArgs) -> Result<i32> {
    let opts = CheckOptions {
        threads: args.threads,
        cache: args.cache.clone(),
    };
    if let Some(path) = &args.summary {
        // Refused before any work; a missing directory is created afterwards.
        if let Err(e) = crate::fsutil::check_target(path, "--summary") {
            if !e.contains("does not exist") {
                return Err(crate::error::invalid(e));
            }
        }
    }
    let report = dataset::run_check(&args.data, &opts)?;
    if let Some(path) = &args.summary {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let mut json = serde_json::to_vec_pretty(&report)?;
        json.push(b'\n');
        crate::fsutil::write_atomic(path, &json, 0o644)?;
    }
    if args.output.json {
        ctx.printer.json(&report)?;
    } else {
        print_report(ctx, &report)?;
    }
    if !report.ok {
        ctx.printer.error_line(format!(
            "dataset {} has {} error{}; fix them before training",
            report.data,
            report.errors,
            if report.errors == 1 { "" } else { "s" }
        ));
        return Ok(exit::INVALID_INPUT);
    }
    Ok(exit::OK)
}

fn print_report(ctx: &Context, r: &Report) -> Result<()> {
    ctx.printer.line(format!(
        "dataset {} (root {}), {} class{}",
        r.data,
        r.root,
        r.nc,
        if r.nc == 1 { "" } else { "es" }
    ))?;
    let mut splits = ctx.printer.table(&[
        "split",
        "images",
        "labelled",
        "background",
        "corrupt",
        "objects",
        "size",
    ]);
    for (name, s) in &r.splits {
        splits.add_row(vec![
            name.clone(),
            s.images.to_string(),
            s.labelled.to_string(),
            s.background.to_string(),
            s.corrupt.to_string(),
            s.instances.to_string(),
            dataset::human_bytes(s.bytes),
        ]);
    }
    ctx.printer.line(&splits)?;
    let mut headers = vec!["class".to_string()];
    headers.extend(r.splits.keys().cloned());
    let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
    let mut classes = ctx.printer.table(&headers);
    for (id, name) in r.names.iter().enumerate() {
        let mut row = vec![format!("{id} {name}")];
        for s in r.splits.values() {
            let c = &s.per_class[id];
            row.push(format!("{} in {} images", c.instances, c.images));
        }
        classes.add_row(row);
    }
    ctx.printer.line(&classes)?;
    for (sev, word, code) in [
        (Severity::Error, "error", "31"),
        (Severity::Warning, "warning", "33"),
    ] {
        let of_sev: Vec<_> = r.findings.iter().filter(|f| f.severity == sev).collect();
        let total = if sev == Severity::Error {
            r.errors
        } else {
            r.warnings
        };
        for f in of_sev.iter().take(SHOWN_FINDINGS) {
            // File names are the dataset's: a name with a newline must not
            // print a line of its own (a forged `ok:`).
            let file = crate::text::shown(&f.file, 4096);
            let place = match f.line {
                Some(l) => format!("{file}:{l}"),
                None => file,
            };
            ctx.printer.line(format!(
                "{}: {place}: {}",
                ctx.printer.paint(word, code),
                crate::text::shown(&f.message, 4096)
            ))?;
        }
        if total > SHOWN_FINDINGS {
            ctx.printer.line(format!(
                "… and {} more {word}s (all counted in --json / --summary)",
                total - SHOWN_FINDINGS
            ))?;
        }
    }
    if r.ok {
        ctx.printer.line(format!(
            "ok: the dataset can be trained on ({} warning{})",
            r.warnings,
            if r.warnings == 1 { "" } else { "s" }
        ))?;
    }
    if let Some(c) = &r.cache {
        ctx.printer.line(format!(
            "{} {}",
            if c.copied {
                "cached a copy in"
            } else {
                "reused the cached copy in"
            },
            c.dir
        ))?;
        // Last line: the YAML to train from (scripts read it with `tail -n 1`).
        ctx.printer.line(&c.data)?;
    }
    Ok(())
}
