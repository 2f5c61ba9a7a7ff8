//! `yolo-sched backup`: the checkpoint backup by hand and from the train
//! script. The job agent will run the sync loop itself; until then the train
//! script starts `backup sync --watch` beside the trainer.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use anyhow::Result;
use clap::{Args, Subcommand};
use serde::Serialize;

use super::args::{JsonArg, RunArg};
use super::Context;
use crate::backup::{self, Backup, BackupEvent};
use crate::error::invalid;

#[derive(Debug, Args)]
#[command(after_help = "\
The run's backup place is decided at submission from the site's `[backup]` and the
spec's `[backup]` and saved in <workdir>/state/backup/settings.json. Endpoint, region
and credentials come from AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID and
AWS_SECRET_ACCESS_KEY (or an AWS_PROFILE of ~/.aws/credentials). See docs/backup.md.

Examples:
  yolo-sched backup sync runs/pcb/train --once
  yolo-sched backup sync runs/pcb/train --watch --pid 4242
  yolo-sched backup restore runs/pcb/train --dry-run
  yolo-sched backup status pcb-20261201T120000-1a2b --json")]
pub struct BackupArgs {
    #[command(subcommand)]
    pub action: Action,
}

#[derive(Debug, Subcommand)]
pub enum Action {
    /// Upload weights/last.pt, best.pt, results.csv and args.yaml when they changed and are complete.
    Sync(SyncArgs),
    /// Bring back missing or damaged weights from the backup (checksum-verified).
    Restore(RestoreArgs),
    /// Show a run's last backup and its lag.
    Status(StatusArgs),
}

#[derive(Debug, Args)]
#[command(after_help = "\
Exit status: 0 when everything ready was backed up (or the run has no backup), 1 when
the store failed (--once), 2 when SAVE_DIR is not a training directory of a run.
With --watch the store's failures are warnings: it keeps trying and exits 0.

Examples:
  yolo-sched backup sync runs/pcb/train --once
  yolo-sched backup sync runs/pcb/train --dry-run
  yolo-sched backup sync runs/pcb/train-3 --watch --pid \"$child\"")]
pub struct SyncArgs {
    /// The Ultralytics training directory, `<workdir>/train` or `<workdir>/train-<task>`.
    #[arg(value_name = "SAVE_DIR")]
    pub save_dir: PathBuf,
    /// One pass: wait until the files are stable, upload, verify, exit (the default).
    #[arg(long, conflicts_with = "watch")]
    pub once: bool,
    /// Keep looking every `--interval` seconds until `--pid` exits (or forever).
    #[arg(long)]
    pub watch: bool,
    /// With --watch: the trainer's process id; when it exits, one last pass, then exit.
    #[arg(long, value_name = "PID", requires = "watch", value_parser = clap::value_parser!(i32).range(1..))]
    pub pid: Option<i32>,
    /// Seconds between looks (default: the run's setting, from the site's `[backup] interval`).
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub interval: Option<u64>,
    /// Say what would be uploaded, upload nothing.
    #[arg(long, conflicts_with = "watch")]
    pub dry_run: bool,
    #[command(flatten)]
    pub output: JsonArg,
}

#[derive(Debug, Args)]
#[command(after_help = "\
`weights/last.pt` and `weights/best.pt` are restored when missing or not a complete
checkpoint; with last.pt also its results.csv (so the epoch count matches) and a missing
args.yaml. An object whose SHA-256 differs from the backup's manifest is never written.

Exit status: 0 when done (also when nothing needed restoring, or the run has no backup),
1 when the store could not be read, 2 when SAVE_DIR is not a training directory of a run.

Examples:
  yolo-sched backup restore runs/pcb/train
  yolo-sched backup restore runs/pcb/train --dry-run --json")]
pub struct RestoreArgs {
    /// The Ultralytics training directory, `<workdir>/train` or `<workdir>/train-<task>`.
    #[arg(value_name = "SAVE_DIR")]
    pub save_dir: PathBuf,
    /// Say what would be restored, write nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub output: JsonArg,
}

#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  yolo-sched backup status pcb-20261201T120000-1a2b
  yolo-sched backup status runs/pcb --json | jq '.dirs[].lag_s'")]
pub struct StatusArgs {
    #[command(flatten)]
    pub target: RunArg,
    #[command(flatten)]
    pub output: JsonArg,
}

pub fn run(ctx: &mut Context, args: &BackupArgs) -> Result<i32> {
    match &args.action {
        Action::Sync(a) => sync(ctx, a),
        Action::Restore(a) => restore(ctx, a),
        Action::Status(a) => status(ctx, a),
    }
}

fn check_save_dir(p: &Path) -> Result<PathBuf> {
    let abs = std::path::absolute(p)
        .map_err(|e| invalid(format!("{}: {e}", crate::text::echo_path(p))))?;
    let parent_ok = abs
        .parent()
        .is_some_and(|w| crate::rundir::manifest::Manifest::path_in(w).is_file());
    if !parent_ok {
        return Err(invalid(format!(
            "{} is not the training directory of a run: expected <workdir>/train or <workdir>/train-<task>, beside the run's manifest.json",
            crate::text::echo_path(p)
        )));
    }
    Ok(abs)
}

/// A job-log line: `yolo-sched: backup: …`.
fn say(ctx: &Context, event: &BackupEvent) {
    let line = format!("yolo-sched: backup: {event}");
    if matches!(
        event,
        BackupEvent::StoreFailed { .. } | BackupEvent::Mismatch { .. }
    ) {
        ctx.printer.warn(format!(
            "backup: {}",
            event.to_string().trim_start_matches("warning: ")
        ));
    } else {
        let _ = ctx.printer.line(line);
    }
}

#[derive(Serialize)]
struct SyncOut {
    url: Option<String>,
    dry_run: bool,
    uploaded: Vec<String>,
    would_upload: Vec<String>,
    warnings: Vec<String>,
}

fn sync(ctx: &mut Context, args: &SyncArgs) -> Result<i32> {
    let save_dir = check_save_dir(&args.save_dir)?;
    let Some((settings, url)) = backup::sync::settings_for(&save_dir)? else {
        if args.output.json {
            ctx.printer.json(&SyncOut {
                url: None,
                dry_run: args.dry_run,
                uploaded: vec![],
                would_upload: vec![],
                warnings: vec![],
            })?;
        } else {
            ctx.printer
                .note("this run has no checkpoint backup (no [backup] url for it at submission)");
        }
        return Ok(0);
    };
    if args.dry_run {
        let record = backup::record::record_path(&save_dir)
            .and_then(|p| backup::record::Record::load(&p).ok().flatten())
            .unwrap_or_default();
        let view = backup::record::view("", &save_dir, &record, SystemTime::now());
        if args.output.json {
            ctx.printer.json(&SyncOut {
                url: Some(url.to_string()),
                dry_run: true,
                uploaded: vec![],
                would_upload: view.behind,
                warnings: vec![],
            })?;
        } else if view.behind.is_empty() {
            ctx.printer
                .line(format!("{url}: in sync; nothing to upload"))?;
        } else {
            for f in view.behind {
                ctx.printer
                    .line(format!("would upload {f} to {}", url.key(&f)))?;
            }
        }
        return Ok(0);
    }
    let store =
        match crate::objstore::Store::s3(&url, &crate::objstore::Credentials::from_process()) {
            Ok(s) => s,
            Err(e) if args.watch => {
                // Never fail the training: say why there is no backup and stop.
                ctx.printer
                    .warn(format!("backup: no checkpoint backup for this job: {e:#}"));
                return Ok(0);
            }
            Err(e) => return Err(e),
        };
    let mut b = Backup::new(&save_dir, url.clone(), store);
    let settle = Duration::from_secs(2);
    if !args.watch {
        let events = b.sync_now(settle, Duration::from_secs(600));
        let failed: Vec<String> = events
            .iter()
            .filter(|e| {
                matches!(
                    e,
                    BackupEvent::StoreFailed { .. } | BackupEvent::Mismatch { .. }
                )
            })
            .map(|e| e.to_string())
            .collect();
        if args.output.json {
            ctx.printer.json(&SyncOut {
                url: Some(url.to_string()),
                dry_run: false,
                uploaded: events
                    .iter()
                    .filter_map(|e| match e {
                        BackupEvent::Uploaded { file, .. } => Some(file.clone()),
                        _ => None,
                    })
                    .collect(),
                would_upload: vec![],
                warnings: failed.clone(),
            })?;
        } else {
            for e in &events {
                say(ctx, e);
            }
            if events.is_empty() {
                ctx.printer.line(format!("{url}: in sync"))?;
            }
        }
        return Ok(if failed.is_empty() { 0 } else { 1 });
    }
    let interval = Duration::from_secs(args.interval.unwrap_or(settings.interval));
    ctx.printer.line(format!(
        "yolo-sched: backup: watching {} every {} s, to {url}",
        save_dir.display(),
        interval.as_secs()
    ))?;
    loop {
        let started = Instant::now();
        for e in b.tick(SystemTime::now()) {
            say(ctx, &e);
        }
        if let Some(pid) = args.pid {
            if !alive(pid) {
                for e in b.sync_now(settle, Duration::from_secs(300)) {
                    say(ctx, &e);
                }
                ctx.printer
                    .line("yolo-sched: backup: the trainer has exited; last pass done")?;
                return Ok(0);
            }
        }
        // Sleep in short steps so the trainer's exit is noticed quickly.
        while started.elapsed() < interval {
            std::thread::sleep(Duration::from_millis(250).min(interval));
            if args.pid.is_some_and(|p| !alive(p)) {
                break;
            }
        }
    }
}

fn alive(pid: i32) -> bool {
    use nix::errno::Errno;
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) {
        Ok(()) => true,
        Err(Errno::EPERM) => true,
        Err(_) => false,
    }
}

fn restore(ctx: &mut Context, args: &RestoreArgs) -> Result<i32> {
    let save_dir = check_save_dir(&args.save_dir)?;
    match backup::restore(&save_dir, args.dry_run)? {
        None => {
            if args.output.json {
                ctx.printer.json(&serde_json::json!({ "url": null }))?;
            } else {
                ctx.printer
                    .note("this run has no checkpoint backup; nothing to restore");
            }
        }
        Some(out) => {
            if args.output.json {
                ctx.printer.json(&out)?;
            } else if args.dry_run {
                if out.restored.is_empty() {
                    ctx.printer
                        .line(format!("nothing to restore from {}", out.url))?;
                }
                for f in &out.restored {
                    ctx.printer
                        .line(format!("would restore {f} from {}", out.url))?;
                }
            } else {
                for line in out.lines() {
                    match line.strip_prefix("warning: ") {
                        Some(w) => ctx.printer.warn(format!("backup: {w}")),
                        None => ctx.printer.line(format!("yolo-sched: backup: {line}"))?,
                    }
                }
            }
        }
    }
    Ok(0)
}

#[derive(Serialize)]
struct StatusOut {
    run_id: String,
    url: Option<String>,
    dirs: Vec<backup::BackupView>,
}

fn status(ctx: &Context, args: &StatusArgs) -> Result<i32> {
    let manifest = crate::run::query::find_run(&args.target.run)?;
    let settings = backup::RunBackup::load(&manifest.workdir)?;
    let dirs = backup::views(&manifest.workdir, SystemTime::now());
    if args.output.json {
        ctx.printer.json(&StatusOut {
            run_id: manifest.run_id.clone(),
            url: settings.map(|s| s.url.to_string()),
            dirs,
        })?;
        return Ok(0);
    }
    match settings {
        None => ctx
            .printer
            .line(format!("run {}: no checkpoint backup", manifest.run_id))?,
        Some(s) => {
            ctx.printer
                .line(format!("run {}: backup to {}", manifest.run_id, s.url))?;
            if dirs.is_empty() {
                ctx.printer.line("nothing backed up yet")?;
            }
            let now = chrono::Utc::now();
            for d in dirs {
                ctx.printer.line(d.line(now))?;
            }
        }
    }
    Ok(0)
}
