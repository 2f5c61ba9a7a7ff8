//! `yolo-sched models`: the shared library of validated models (docs/registry.md):
//! publish a completed run's model, import base weights, list, show, pull
//! (checksum-verified), tag and remove versions, collect removed versions
//! and unnamed blobs (`gc`).

use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, Subcommand};
use serde::Serialize;

use super::args::JsonArg;
use super::runs::Audit;
use super::Context;
use crate::error::invalid;
use crate::names::model::{ModelRef, Selector};
use crate::registry::{self, Caller, ModelRecord, Registry, Right, SiteRegistry};

#[derive(Debug, Args)]
#[command(after_help = "\
The registry is the site's `[registry] url`: \"file:///shared/yolo-models\" or
\"s3://bucket/prefix\" (credentials as for the backup: AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL, or an AWS_PROFILE). Versions never change;
tags move. A spec trains from a version with `model = \"registry:NAME[@N|@TAG]\"`.
A version is read by its Slurm account's members and coordinators, Slurm operators
and its publisher, or by everyone when published --public; tags and removal are for
its publisher, the account's coordinators and operators.
See docs/registry.md.

Examples:
  yolo-sched models publish pcb-20261201T120000-1a2b --name pcb-detector --note \"March images\"
  yolo-sched models import /shared/weights/yolov8n.pt --name yolov8n --public
  yolo-sched models list --json
  yolo-sched models pull pcb-detector@production --to ./models
  yolo-sched models tag pcb-detector@3 production")]
pub struct ModelsArgs {
    #[command(subcommand)]
    pub action: Action,
}

#[derive(Debug, Subcommand)]
pub enum Action {
    /// Publish a completed run's model (best.pt, best.onnx, args.yaml, results.csv) as a new version.
    Publish(PublishArgs),
    /// Bring in base weights (an Ultralytics checkpoint file) as a new version.
    Import(ImportArgs),
    /// List the models and their versions.
    List(ListArgs),
    /// Show one version's record.
    Show(ShowArgs),
    /// Copy a version's files into a directory, checksum-verified.
    Pull(PullArgs),
    /// Point a tag (e.g. `production`) at a version.
    Tag(TagArgs),
    /// Remove a version (its publisher, a coordinator of its account, or an operator; runs that name it by number keep reading it).
    Remove(RemoveArgs),
    /// Delete removed versions and blobs no version names, once their grace is over (root).
    Gc(GcArgs),
}

/// The flags publish and import share.
#[derive(Debug, Args)]
pub struct VersionArgs {
    /// A note shown with the version (one line, at most 1000 characters).
    #[arg(long, value_name = "TEXT")]
    pub note: Option<String>,
    /// Readable by every user, not only the account's members, coordinators and Slurm operators.
    #[arg(long)]
    pub public: bool,
    /// The Slurm account the version belongs to; you must be a member (default: SLURM_JOB_ACCOUNT, SBATCH_ACCOUNT, else your default account).
    #[arg(long, value_name = "NAME")]
    pub account: Option<String>,
    /// Check and say what would be published; upload nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub output: JsonArg,
}

#[derive(Debug, Args)]
#[command(after_help = "\
The run's training must have finished (results.csv reached the epochs of args.yaml) and
weights/best.pt must pass the checkpoint check (a complete torch zip; never unpickled).
Files that are links, or lie outside the run directory, are refused.

Exit status: 0 published, 1 the registry failed, 2 invalid input (nothing published).")]
pub struct PublishArgs {
    /// The run: the id `submit` printed, a unique prefix of it, or the run directory.
    #[arg(value_name = "RUN")]
    pub run: String,
    /// The model's name (default: the run's name).
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// A sweep's variant (its training directory train-N).
    #[arg(long, value_name = "N")]
    pub variant: Option<u32>,
    #[command(flatten)]
    pub common: VersionArgs,
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The checkpoint file (e.g. yolov8n.pt copied onto the cluster once).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// The model's name.
    #[arg(long, value_name = "NAME")]
    pub name: String,
    #[command(flatten)]
    pub common: VersionArgs,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only this model's versions.
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Only versions of this Slurm account.
    #[arg(long, value_name = "NAME")]
    pub account: Option<String>,
    /// Include removed versions.
    #[arg(long)]
    pub all: bool,
    #[command(flatten)]
    pub output: JsonArg,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// `NAME` (the newest version), `NAME@3` or `NAME@TAG`.
    #[arg(value_name = "NAME[@VERSION]")]
    pub model: String,
    #[command(flatten)]
    pub output: JsonArg,
}

#[derive(Debug, Args)]
pub struct PullArgs {
    /// `NAME` (the newest version), `NAME@3` or `NAME@TAG`.
    #[arg(value_name = "NAME[@VERSION]")]
    pub model: String,
    /// The directory to copy the files into (made if missing).
    #[arg(long, value_name = "DIR")]
    pub to: PathBuf,
    /// Only the weights file.
    #[arg(long)]
    pub weights_only: bool,
    /// Make DIR mode 0700 and refuse one that another user could change (a
    /// directory on the way writable by others without the sticky bit, or
    /// owned by someone else): the stage scripts' node-local copy, which the
    /// trainer loads after it was verified.
    #[arg(long)]
    pub private: bool,
    /// Say what would be copied; write nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub output: JsonArg,
}

#[derive(Debug, Args)]
pub struct TagArgs {
    /// The version: `NAME@3`.
    #[arg(value_name = "NAME@VERSION")]
    pub model: String,
    /// The tag (a word, not a number): `production`.
    #[arg(value_name = "TAG")]
    pub tag: String,
    /// Say what would change; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub output: JsonArg,
}

#[derive(Debug, Args)]
pub struct RemoveArgs {
    /// The version: `NAME@3`.
    #[arg(value_name = "NAME@VERSION")]
    pub model: String,
    /// Say what would change; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub output: JsonArg,
}

#[derive(Debug, Args)]
#[command(after_help = "\
Deletes the version record of each version removed at least --keep-removed ago (runs that
name it by number read it until then) and the older tag moves to it, then every blob no
remaining version names that was written at least --keep-unnamed ago (a publisher uploads
blobs before its record; a killed one leaves blobs no record names). The removal record
stays: the number is never given again and `show NAME@N` says the version was collected.
Kept, with the reason: a version a tag points at now (move the tag first), records that
are not valid (reported, never deleted) and the blobs they mention. Durations: 30d, 12h,
90m, 1d12h, 0s. A --keep-unnamed shorter than an hour plus the longest publication is
safe only while nobody publishes.

Examples:
  yolo-sched models gc --dry-run                   # what would go, as any user
  sudo yolo-sched models gc                        # removed 30 days ago, unnamed for 24 hours
  sudo yolo-sched models gc --keep-removed 7d --json

Exit status: 0 done (also when nothing was due), 1 a deletion or the registry failed, or
not root (only --dry-run works as any user), 2 invalid input (nothing deleted).")]
pub struct GcArgs {
    /// How long a removed version stays readable by number after its removal.
    #[arg(long, value_name = "DURATION", default_value = "30d")]
    pub keep_removed: String,
    /// How long a blob no version names is kept after it was written.
    #[arg(long, value_name = "DURATION", default_value = "24h")]
    pub keep_unnamed: String,
    /// Say what would be deleted; delete nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub output: JsonArg,
}

pub fn run(ctx: &mut Context, args: &ModelsArgs) -> Result<i32> {
    match &args.action {
        Action::Publish(a) => publish(ctx, a),
        Action::Import(a) => import(ctx, a),
        Action::List(a) => list(ctx, a),
        Action::Show(a) => show(ctx, a),
        Action::Pull(a) => pull(ctx, a),
        Action::Tag(a) => tag(ctx, a),
        Action::Remove(a) => remove(ctx, a),
        Action::Gc(a) => gc(ctx, a),
    }
}

fn open(ctx: &mut Context) -> Result<Registry> {
    let site = SiteRegistry::from_site(ctx.site()?)?;
    Registry::open(site.require()?)
}

fn parse_ref(text: &str) -> Result<ModelRef> {
    ModelRef::parse(text).map_err(invalid)
}

/// `NAME@N`, exactly.
fn exact(text: &str) -> Result<(String, u32)> {
    let r = parse_ref(text)?;
    match r.selector {
        Selector::Version(v) => Ok((r.name, v)),
        _ => Err(invalid(format!(
            "`{}` names no version: expected NAME@VERSION such as `{}@3`",
            crate::text::echo(text),
            r.name
        ))),
    }
}

fn publisher(name: &str, common: &VersionArgs) -> Result<registry::Publisher> {
    crate::names::model::check_name(name).map_err(invalid)?;
    if let Some(n) = &common.note {
        crate::names::model::check_note(n).map_err(invalid)?;
    }
    if let Some(a) = &common.account {
        crate::names::model::check_account(a).map_err(|e| invalid(format!("--account: {e}")))?;
    }
    let caller = Caller::current();
    registry::Publisher::under_account(
        name,
        common.note.clone(),
        common.public,
        common.account.clone(),
        &caller,
    )
}

#[derive(Serialize)]
struct PublishOut<'a> {
    dry_run: bool,
    model: &'a ModelRecord,
}

fn finish_publish(
    ctx: &mut Context,
    reg: Option<&Registry>,
    draft: ModelRecord,
    paths: &[PathBuf],
    common: &VersionArgs,
    command: &str,
) -> Result<i32> {
    let Some(reg) = reg else {
        if common.output.json {
            ctx.printer.json(&PublishOut {
                dry_run: true,
                model: &draft,
            })?;
        } else {
            ctx.printer.line(format!(
                "would publish {} as the next version of `{}` ({})",
                files_line(&draft),
                draft.name,
                draft
                    .metrics
                    .map50_95
                    .map_or("no mAP50-95".into(), |m| format!("mAP50-95 {m:.4}"))
            ))?;
        }
        return Ok(0);
    };
    for note in reg.enforcement_notes(&draft) {
        ctx.printer.warn(note);
    }
    let record =
        Audit::of(command).done_with(ctx, registry::commit(reg, draft, paths), |r, rec| {
            rec.detail = Some(format!("{} {}", r.id(), reg.url))
        })?;
    if common.output.json {
        ctx.printer.json(&PublishOut {
            dry_run: false,
            model: &record,
        })?;
    } else {
        ctx.printer.line(format!(
            "published {} ({}) to {}",
            record.id(),
            files_line(&record),
            reg.url
        ))?;
    }
    Ok(0)
}

fn files_line(r: &ModelRecord) -> String {
    r.files
        .iter()
        .map(|f| format!("{} {}", f.name, crate::dataset::human_bytes(f.size)))
        .collect::<Vec<_>>()
        .join(", ")
}

fn publish(ctx: &mut Context, args: &PublishArgs) -> Result<i32> {
    let manifest = crate::run::query::find_run(&args.run)?;
    let name = args.name.clone().unwrap_or_else(|| manifest.name.clone());
    let who = publisher(&name, &args.common)?;
    let reg = if args.common.dry_run {
        None
    } else {
        Some(open(ctx)?)
    };
    let snap = registry::Snapshot::new()?;
    let (draft, paths) = registry::draft_from_run(&manifest, args.variant, &who, &snap)?;
    finish_publish(
        ctx,
        reg.as_ref(),
        draft,
        &paths,
        &args.common,
        "models publish",
    )
}

fn import(ctx: &mut Context, args: &ImportArgs) -> Result<i32> {
    let who = publisher(&args.name, &args.common)?;
    let reg = if args.common.dry_run {
        None
    } else {
        Some(open(ctx)?)
    };
    let snap = registry::Snapshot::new()?;
    let (draft, paths) = registry::draft_from_file(&args.file, &who, &snap)?;
    finish_publish(
        ctx,
        reg.as_ref(),
        draft,
        &paths,
        &args.common,
        "models import",
    )
}

#[derive(Serialize)]
struct ListedOut<'a> {
    #[serde(flatten)]
    record: &'a ModelRecord,
    tags: &'a [String],
    removed: bool,
}

#[derive(Serialize)]
struct ListOut<'a> {
    registry: &'a str,
    models: Vec<ListedOut<'a>>,
    problems: &'a [String],
    /// Versions the caller may not read (not listed).
    hidden: usize,
}

fn metric(m: Option<f64>) -> String {
    m.map_or("-".into(), |v| format!("{v:.4}"))
}

fn list(ctx: &mut Context, args: &ListArgs) -> Result<i32> {
    if let Some(n) = &args.name {
        crate::names::model::check_name(n).map_err(invalid)?;
    }
    super::args::check_name("--account", &args.account)?;
    let reg = open(ctx)?;
    let listing = reg.list(args.name.as_deref(), &Caller::current())?;
    let problems = listing.problems;
    let shown: Vec<_> = listing
        .versions
        .iter()
        .filter(|l| args.all || !l.removed)
        .filter(|l| {
            args.account
                .as_ref()
                .is_none_or(|a| l.record.account.as_ref() == Some(a))
        })
        .collect();
    if args.output.json {
        ctx.printer.json(&ListOut {
            registry: &reg.url,
            models: shown
                .iter()
                .map(|l| ListedOut {
                    record: &l.record,
                    tags: &l.tags,
                    removed: l.removed,
                })
                .collect(),
            problems: &problems,
            hidden: listing.hidden,
        })?;
    } else if shown.is_empty() {
        ctx.printer.note(format!("no models in {}", reg.url));
    } else {
        let mut table = ctx.printer.table(&[
            "MODEL", "TAGS", "USER", "ACCOUNT", "CREATED", "mAP50-95", "mAP50", "DATASET", "NOTE",
        ]);
        for l in &shown {
            let r = &l.record;
            table.add_row(vec![
                format!("{}{}", r.id(), if l.removed { " (removed)" } else { "" }),
                l.tags.join(","),
                crate::text::echo(&r.user),
                match (r.account.as_deref(), r.public) {
                    (Some(a), true) => format!("{} (public)", crate::text::echo(a)),
                    (Some(a), false) => crate::text::echo(a),
                    (None, true) => "(public)".into(),
                    (None, false) => "-".into(),
                },
                r.created_at.format("%Y-%m-%d %H:%M").to_string(),
                metric(r.metrics.map50_95),
                metric(r.metrics.map50),
                r.fingerprint
                    .as_deref()
                    .map_or("-".into(), |f| crate::text::shown(f, 12)),
                r.note
                    .as_deref()
                    .map_or(String::new(), |n| crate::text::shown(n, 40)),
            ]);
        }
        ctx.printer.line(table)?;
    }
    for p in &problems {
        ctx.printer.warn(format!("not listed: {p}"));
    }
    if listing.hidden > 0 && !args.output.json {
        ctx.printer.note(format!(
            "{} version(s) of other accounts are not shown: they are not public, and you are not a member of their account",
            listing.hidden
        ));
    }
    Ok(0)
}

fn show(ctx: &mut Context, args: &ShowArgs) -> Result<i32> {
    let r = parse_ref(&args.model)?;
    let reg = open(ctx)?;
    let l = reg.resolve(&r, &Caller::current())?;
    if args.output.json {
        ctx.printer.json(&ListedOut {
            record: &l.record,
            tags: &l.tags,
            removed: l.removed,
        })?;
        return Ok(0);
    }
    let rec = &l.record;
    let mut lines = vec![
        format!("{}{}", rec.id(), if l.removed { " (removed)" } else { "" }),
        format!("  tags:        {}", l.tags.join(", ")),
        format!(
            "  published:   {} by {}{}",
            rec.created_at.to_rfc3339(),
            crate::text::echo(&rec.user),
            rec.account.as_deref().map_or(String::new(), |a| format!(
                " (account {})",
                crate::text::echo(a)
            ))
        ),
        format!(
            "  readable by: {}",
            match (rec.public, &rec.account) {
                (true, _) => "everyone".to_string(),
                (false, Some(a)) => format!(
                    "members and coordinators of `{}`, Slurm operators, {}",
                    crate::text::echo(a),
                    crate::text::echo(&rec.user)
                ),
                (false, None) => format!("{}, Slurm operators", crate::text::echo(&rec.user)),
            }
        ),
    ];
    if let Some(n) = &rec.note {
        lines.push(format!("  note:        {}", crate::text::shown(n, 200)));
    }
    match rec.source.kind.as_str() {
        "run" => lines.push(format!(
            "  from run:    {}{}",
            rec.source
                .run_id
                .as_deref()
                .map_or("-".into(), crate::text::echo),
            rec.source
                .variant
                .map_or(String::new(), |v| format!(" (variant {v})"))
        )),
        _ => lines.push(format!(
            "  imported:    {}",
            rec.source
                .file
                .as_deref()
                .map_or("-".into(), crate::text::echo)
        )),
    }
    if let Some(p) = &rec.parent {
        lines.push(format!("  parent:      {}", crate::text::echo(p)));
    }
    lines.push(format!(
        "  metrics:     mAP50-95 {}  mAP50 {}  precision {}  recall {}",
        metric(rec.metrics.map50_95),
        metric(rec.metrics.map50),
        metric(rec.metrics.precision),
        metric(rec.metrics.recall)
    ));
    if let Some(f) = &rec.fingerprint {
        lines.push(format!("  dataset:     {}", crate::text::echo(f)));
    }
    if rec.ultralytics.is_some() || rec.torch.is_some() {
        let v = |v: &Option<String>| v.as_deref().map_or("-".into(), crate::text::echo);
        lines.push(format!(
            "  trained on:  Ultralytics {}, torch {}",
            v(&rec.ultralytics),
            v(&rec.torch)
        ));
    }
    for f in &rec.files {
        lines.push(format!(
            "  file:        {} {} sha256:{}",
            f.name,
            crate::dataset::human_bytes(f.size),
            f.sha256
        ));
    }
    for line in lines {
        ctx.printer.line(line)?;
    }
    Ok(0)
}

#[derive(Serialize)]
struct PullOut {
    model: String,
    dry_run: bool,
    files: Vec<PathBuf>,
}

fn pull(ctx: &mut Context, args: &PullArgs) -> Result<i32> {
    super::args::check_path_len("--to", &args.to)?;
    let r = parse_ref(&args.model)?;
    let reg = open(ctx)?;
    let l = reg.resolve(&r, &Caller::current())?;
    if l.removed {
        ctx.printer.warn(format!(
            "{} is removed; it stays readable by number until `gc`",
            l.record.id()
        ));
    }
    let files: Vec<_> = l
        .record
        .files
        .iter()
        .filter(|f| !args.weights_only || f.role == "weights")
        .collect();
    let mut out = PullOut {
        model: l.record.id(),
        dry_run: args.dry_run,
        files: vec![],
    };
    if args.dry_run {
        out.files = files.iter().map(|f| args.to.join(&f.name)).collect();
    } else {
        if args.private {
            crate::fsutil::private_dir(&args.to)?;
        } else {
            std::fs::create_dir_all(&args.to).map_err(|e| {
                crate::fsutil::io_error(
                    e,
                    format!("creating {}", crate::text::echo_path(&args.to)),
                    &args.to,
                )
            })?;
        }
        for f in files {
            out.files.push(reg.pull_file(f, &args.to)?);
        }
    }
    if args.output.json {
        ctx.printer.json(&out)?;
    } else {
        let verb = if args.dry_run { "would copy" } else { "copied" };
        for f in &out.files {
            ctx.printer.line(format!(
                "{verb} {} {}",
                out.model,
                crate::text::echo_path(f)
            ))?;
        }
    }
    Ok(0)
}

#[derive(Serialize)]
struct Changed {
    model: String,
    tag: Option<String>,
    dry_run: bool,
    changed: bool,
}

fn tag(ctx: &mut Context, args: &TagArgs) -> Result<i32> {
    let (name, version) = exact(&args.model)?;
    crate::names::model::check_tag(&args.tag).map_err(invalid)?;
    let (reg, caller, l) = managed(ctx, &name, version, "models tag")?;
    let mut out = Changed {
        model: l.record.id(),
        tag: Some(args.tag.clone()),
        dry_run: args.dry_run,
        changed: !l.tags.contains(&args.tag),
    };
    if !args.dry_run && out.changed {
        Audit::of("models tag")
            .detail(format!("{}@{version} {} {}", name, args.tag, reg.url))
            .done(ctx, reg.tag(&name, version, &args.tag, &caller))?;
    }
    if args.output.json {
        out.changed &= !args.dry_run;
        ctx.printer.json(&out)?;
    } else if !out.changed {
        ctx.printer
            .line(format!("{} is tagged {} already", out.model, args.tag))?;
    } else {
        let verb = if args.dry_run { "would tag" } else { "tagged" };
        ctx.printer
            .line(format!("{verb} {} {}", out.model, args.tag))?;
    }
    Ok(0)
}

/// `name@version`, which the caller may tag or remove; a refusal goes to
/// the audit trail too (an attempt on another account's model is worth knowing).
fn managed(
    ctx: &mut Context,
    name: &str,
    version: u32,
    command: &str,
) -> Result<(Registry, Caller, registry::Listed)> {
    let reg = open(ctx)?;
    let caller = Caller::current();
    let l = reg.resolve(
        &ModelRef {
            name: name.to_string(),
            selector: Selector::Version(version),
        },
        &caller,
    )?;
    if let Err(e) = caller.require(&l.record, Right::Manage) {
        return Err(Audit::of(command)
            .detail(format!("{} {}", l.record.id(), reg.url))
            .refused(ctx, e));
    }
    Ok((reg, caller, l))
}

fn remove(ctx: &mut Context, args: &RemoveArgs) -> Result<i32> {
    let (name, version) = exact(&args.model)?;
    let (reg, caller, l) = managed(ctx, &name, version, "models remove")?;
    let mut out = Changed {
        model: l.record.id(),
        tag: None,
        dry_run: args.dry_run,
        changed: !l.removed,
    };
    if !args.dry_run && out.changed {
        out.changed = Audit::of("models remove")
            .detail(format!("{}@{version} {}", name, reg.url))
            .done(ctx, reg.remove(&name, version, &caller))?;
    }
    if args.output.json {
        out.changed &= !args.dry_run;
        ctx.printer.json(&out)?;
    } else if !out.changed {
        ctx.printer
            .line(format!("{} is removed already", out.model))?;
    } else {
        let verb = if args.dry_run {
            "would remove"
        } else {
            "removed"
        };
        ctx.printer.line(format!(
            "{verb} {} (runs that name it by number keep reading it)",
            out.model
        ))?;
    }
    Ok(0)
}

#[derive(Serialize)]
struct GcOut<'a> {
    registry: &'a str,
    #[serde(flatten)]
    outcome: &'a registry::gc::Outcome,
}

fn gc(ctx: &mut Context, args: &GcArgs) -> Result<i32> {
    let keep = |flag: &str, text: &str| {
        crate::report::window::duration(text).map_err(|e| invalid(format!("{flag}: {e}")))
    };
    let keep_removed = keep("--keep-removed", &args.keep_removed)?;
    let keep_unnamed = keep("--keep-unnamed", &args.keep_unnamed)?;
    // Deletion changes what every user of the registry reads: an
    // administrator's (root's) act. Looking is anyone's.
    if !args.dry_run && !nix::unistd::geteuid().is_root() {
        return Err(crate::error::with_hint(
            crate::error::typed(
                crate::error::Kind::NotRoot,
                "models gc deletes shared records and files and must run as root",
            ),
            "try `sudo yolo-sched models gc …`; --dry-run works as any user",
        ));
    }
    let reg = open(ctx)?;
    let result = registry::gc::run(
        &reg,
        &Caller::current(),
        keep_removed,
        keep_unnamed,
        args.dry_run,
    );
    let result = if args.dry_run {
        result
    } else {
        Audit::of("models gc").done_with(ctx, result, |o, rec| {
            if !o.errors.is_empty() {
                rec.outcome = o.errors.join("; ");
            }
            rec.detail = Some(format!(
                "{} versions ({}), {} blobs, {} bytes {}",
                o.versions.len(),
                o.versions
                    .iter()
                    .map(|v| v.model.as_str())
                    .collect::<Vec<_>>()
                    .join(" "),
                o.blobs.len(),
                o.bytes_freed,
                reg.url
            ));
        })
    };
    let o = result?;
    if args.output.json {
        ctx.printer.json(&GcOut {
            registry: &reg.url,
            outcome: &o,
        })?;
    } else {
        let verb = if o.dry_run { "would delete" } else { "deleted" };
        for v in &o.versions {
            ctx.printer.line(format!(
                "{verb} {} (removed {})",
                v.model,
                v.removed_at.format("%Y-%m-%d %H:%M UTC")
            ))?;
        }
        for m in &o.tag_moves {
            ctx.printer.line(format!(
                "{verb} the move #{} of tag {} to {}",
                m.seq, m.tag, m.model
            ))?;
        }
        for b in &o.blobs {
            ctx.printer.line(format!(
                "{verb} blob {} ({}, named by no version, written {})",
                b.sha256,
                crate::dataset::human_bytes(b.bytes),
                b.last_modified.format("%Y-%m-%d %H:%M UTC")
            ))?;
        }
        for k in &o.kept {
            ctx.printer.line(format!(
                "kept {}: {}{}",
                // Object keys come from the store's listing: escaped.
                crate::text::shown(&k.what, crate::text::PATH_CHARS),
                k.reason,
                k.until.map_or(String::new(), |u| format!(
                    " (until {})",
                    u.format("%Y-%m-%d %H:%M UTC")
                ))
            ))?;
        }
        ctx.printer.line(format!(
            "{} {} in {} ({} versions, {} tag moves, {} blobs; {} blobs in use)",
            if o.dry_run { "would free" } else { "freed" },
            crate::dataset::human_bytes(o.bytes_freed),
            reg.url,
            o.versions.len(),
            o.tag_moves.len(),
            o.blobs.len(),
            o.blobs_in_use
        ))?;
    }
    for p in &o.problems {
        ctx.printer.warn(format!(
            "not valid, left alone: {}",
            crate::text::shown(p, crate::text::PATH_CHARS)
        ));
    }
    for n in &o.notes {
        ctx.printer.note(n.clone());
    }
    for e in &o.errors {
        ctx.printer.warn(e);
    }
    Ok(if o.errors.is_empty() { 0 } else { 1 })
}
