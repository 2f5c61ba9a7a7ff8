//! `yolo-sched doctor`.

use anyhow::Result;
use clap::Args;

use comfy_table::{Cell, Color};

use super::args::{JsonArg, NvmlLibArg};
use super::Context;
use crate::doctor::{self, Status};

#[derive(Debug, Args)]
#[command(after_help = "\
Exit status: 0 when the environment is usable (warnings allowed), 1 when a check failed.

Examples:
  yolo-sched doctor
  yolo-sched doctor --json | jq '.gres'
  yolo-sched doctor --nvml-lib /opt/nvidia/lib64/libnvidia-ml.so.1")]
pub struct DoctorArgs {
    #[command(flatten)]
    pub output: JsonArg,

    #[command(flatten)]
    pub nvml_lib: NvmlLibArg,
}

pub fn run(ctx: &mut Context, args: &DoctorArgs) -> Result<i32> {
    let mut report = doctor::gather(&ctx.slurm, args.nvml_lib.path.as_ref());
    report.checks.extend(doctor::registry_checks(ctx.site()?));
    report.usable = !report.checks.iter().any(|c| c.status == Status::Fail);
    if args.output.json {
        ctx.printer.json(&report)?;
    } else {
        let color = ctx.color();
        if !ctx.printer.out_is_terminal() {
            // Piped: one plain line per check (a table would be as wide as the
            // longest detail, hundreds of columns).
            for c in &report.checks {
                let word = match c.status {
                    Status::Ok => "ok",
                    Status::Info => "info",
                    Status::Warn => "warn",
                    Status::Fail => "FAIL",
                };
                ctx.printer
                    .line(format!("{word:<4}  {}: {}", c.name, c.detail))?;
            }
            ctx.printer.line(if report.usable {
                "usable: yes"
            } else {
                "usable: no (see the FAIL lines)"
            })?;
            return Ok(if report.usable { 0 } else { 1 });
        }
        let mut table = ctx.printer.table(&["check", "status", "detail"]);
        if color {
            table.enforce_styling();
        }
        for c in &report.checks {
            let (word, hue) = match c.status {
                Status::Ok => ("ok", Color::Green),
                Status::Info => ("info", Color::Cyan),
                Status::Warn => ("warn", Color::Yellow),
                Status::Fail => ("FAIL", Color::Red),
            };
            // Styled cells keep the column widths right (escape codes take no room).
            let status = if color {
                Cell::new(word).fg(hue)
            } else {
                Cell::new(word)
            };
            table.add_row(vec![Cell::new(&c.name), status, Cell::new(&c.detail)]);
        }
        ctx.printer.line(&table)?;
        ctx.printer.line(if report.usable {
            "usable: yes"
        } else {
            "usable: no (see the FAIL rows)"
        })?;
    }
    Ok(if report.usable { 0 } else { 1 })
}
