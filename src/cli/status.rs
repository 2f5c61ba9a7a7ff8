//! `yolo-sched status` and `yolo-sched list`.

use anyhow::Result;
use clap::Args;
use serde::Serialize;

use super::args::{check_name, JsonArg, RunArg, WhoArgs};
use super::Context;
use crate::run::query;
use crate::run::status::{RunStatus, StageStatus, TaskState};

#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  yolo-sched status pcb-defects-20261130T150000-1a2b
  yolo-sched status pcb-defects-2026     # a unique prefix is enough
  yolo-sched status runs/pcb-defects     # or the run directory
  yolo-sched status RUN --tasks --json | jq '.stages[].tasks[] | select(.state==\"failed\")'

Exit status: 0 when the status was shown (also for a failed run), 1 when Slurm
could not be asked (the last known state from the job files is shown, marked stale),
2 for an unknown run id.")]
pub struct StatusArgs {
    #[command(flatten)]
    pub target: RunArg,
    /// One row per array task instead of a summary per stage.
    #[arg(long)]
    pub tasks: bool,
    #[command(flatten)]
    pub output: JsonArg,
}

#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  yolo-sched list
  yolo-sched list --json | jq -r '.[] | select(.state==\"failed\") | .run_id'
  yolo-sched list --account vision          # a team lead: the team's runs
  yolo-sched list --user alice --since 30d
  yolo-sched list --all-users               # every run Slurm shows you

Without --account, --user or --all-users: your own runs, from your run index.
With them, runs are found through Slurm: one squeue and one sacct, by the run id
in each job's comment. Slurm decides what you see (PrivateData): your own jobs,
those of the accounts you coordinate, or all of them for operators and admins.
Where you cannot read a run's directory, its row comes from Slurm's data alone
(stages, states, times, slices). Without accounting only runs with a job still
in the queue are found.")]
pub struct ListArgs {
    #[command(flatten)]
    pub output: JsonArg,
    /// At most this many runs, newest first.
    #[arg(long, default_value_t = 50)]
    pub limit: usize,
    /// Every run Slurm shows you, whoever submitted it.
    #[arg(long)]
    pub all_users: bool,
    #[command(flatten)]
    pub who: WhoArgs,
}

fn stage_summary(s: &StageStatus) -> String {
    if s.tasks.len() <= 1 {
        return s.state.word().to_string();
    }
    let parts: Vec<String> = s.counts.iter().map(|(k, n)| format!("{n} {k}")).collect();
    format!("{} ({})", s.state.word(), parts.join(", "))
}

/// One training's progress: epoch, best mAP so far, and the final
/// validation of best.pt once Ultralytics printed it.
fn one_progress(p: &crate::rundir::ultralytics::TrainProgress) -> String {
    let mut d = match p.epochs {
        Some(n) => format!("epoch {} of {n}", p.epoch),
        None => format!("epoch {}", p.epoch),
    };
    if let Some(b) = p.best_map50_95 {
        d.push_str(&format!(", best mAP50-95 {b:.3}"));
    }
    if let Some(v) = &p.final_validation {
        d.push_str(&format!("; val mAP50 {:.3}", v.map50));
        if let Some(ms) = v.inference_ms_per_image {
            d.push_str(&format!(", {ms:.1} ms/image"));
        }
    }
    d
}

/// The exported ONNX model, validated as deployed.
fn onnx_text(v: &crate::rundir::ultralytics::FinalValidation) -> String {
    match v.inference_ms_per_image {
        Some(ms) => format!("ONNX: mAP50 {:.3}, {ms:.1} ms/image", v.map50),
        None => format!("ONNX: mAP50 {:.3}", v.map50),
    }
}

fn progress_text(s: &StageStatus) -> Option<String> {
    if let [(_, v)] = s.exported_validation.as_slice() {
        return Some(onnx_text(v));
    }
    match s.progress.as_slice() {
        [] => None,
        [(_, p)] => Some(one_progress(p)),
        all => {
            let best = all
                .iter()
                .filter_map(|(_, p)| p.best_map50_95)
                .fold(None, |a: Option<f64>, b| Some(a.map_or(b, |a| a.max(b))));
            let epochs = all.iter().find_map(|(_, p)| p.epochs);
            let done: u32 = all.iter().map(|(_, p)| p.epoch).sum();
            let text = match epochs {
                Some(n) => format!(
                    "{done} of {} epochs over {} variants",
                    n as usize * s.tasks.len(),
                    s.tasks.len()
                ),
                None => format!("{done} epochs over {} variants", s.tasks.len()),
            };
            Some(match best {
                Some(b) => format!("{text}, best mAP50-95 {b:.3}"),
                None => text,
            })
        }
    }
}

pub fn print_status(
    printer: &crate::printer::Printer,
    st: &RunStatus,
    show_tasks: bool,
) -> Result<()> {
    let state = st.state.describe();
    let painted = match &st.state {
        crate::run::status::RunState::Completed => printer.paint(&state, "32"),
        crate::run::status::RunState::Failed { .. }
        | crate::run::status::RunState::Cancelled { .. }
        | crate::run::status::RunState::NeverRuns { .. } => printer.paint(&state, "31"),
        _ => printer.paint(&state, "33"),
    };
    printer.line(format!(
        "run {} ({}): {painted}{}",
        st.run_id,
        st.name,
        if st.stale {
            " [stale: Slurm did not answer]"
        } else {
            ""
        }
    ))?;
    let mut table = printer.table(&[
        "stage",
        "attempt",
        "job",
        "state",
        "elapsed / limit",
        "node",
        "gres",
        "slice",
        "exit",
        "detail",
    ]);
    for s in &st.stages {
        let rows: Vec<&crate::run::status::TaskStatus> = if show_tasks || s.tasks.len() == 1 {
            s.tasks.iter().collect()
        } else {
            vec![]
        };
        if rows.is_empty() {
            let detail = progress_text(s)
                .or_else(|| s.tasks.iter().find_map(|t| t.reason_text.clone()))
                .unwrap_or_default();
            table.add_row(vec![
                s.stage.clone(),
                s.attempt.to_string(),
                s.job_id
                    .map(|j| format!("{j} [{}]", s.tasks.len()))
                    .unwrap_or_default(),
                stage_summary(s),
                format!("- / {}", s.time_limit),
                String::new(),
                s.gres.clone().unwrap_or_else(|| "-".into()),
                String::new(),
                String::new(),
                detail,
            ]);
            continue;
        }
        for t in rows {
            let detail = if let Some(stop) = t.guard_stop() {
                // The memory guard's stop says more than the epochs reached.
                Some(stop.to_string())
            } else if s.stage == "train" && t.state != TaskState::Pending {
                s.progress
                    .iter()
                    .find(|(k, _)| *k == t.task)
                    .map(|(_, p)| one_progress(p))
            } else if s.stage == "export" {
                s.exported_validation
                    .iter()
                    .find(|(k, _)| *k == t.task)
                    .map(|(_, v)| onnx_text(v))
            } else {
                None
            }
            .or_else(|| t.reason_text.clone())
            .unwrap_or_default();
            table.add_row(vec![
                match t.task {
                    Some(i) => format!("{}[{i}]", s.stage),
                    None => s.stage.clone(),
                },
                s.attempt.to_string(),
                t.job_id.clone(),
                t.slurm_state
                    .clone()
                    .map(|x| x.to_lowercase())
                    .unwrap_or_else(|| t.state.word().to_string()),
                format!(
                    "{} / {}",
                    t.elapsed.clone().unwrap_or_else(|| "-".into()),
                    t.time_limit.clone().unwrap_or_else(|| s.time_limit.clone())
                ),
                t.node.clone().unwrap_or_default(),
                s.gres.clone().unwrap_or_else(|| "-".into()),
                t.slice.clone().unwrap_or_default(),
                t.exit_code.map(|c| c.to_string()).unwrap_or_default(),
                detail,
            ]);
        }
    }
    printer.line(&table)?;
    // A stage that moved to another slice on resume: each attempt and its slice.
    for s in &st.stages {
        let moved = s.attempts.windows(2).any(|w| w[0].gres != w[1].gres);
        if moved {
            let list: Vec<String> = s
                .attempts
                .iter()
                .map(|a| {
                    format!(
                        "attempt {} (job {}) on {}",
                        a.attempt,
                        a.job_id,
                        a.gres.as_deref().unwrap_or("no GPU")
                    )
                })
                .collect();
            printer.line(format!("{}: {}", s.stage, list.join(", ")))?;
        }
    }
    let now = chrono::Utc::now();
    for b in &st.backup {
        printer.line(format!("backup {}", b.line(now)))?;
    }
    if let Some(search) = &st.tune {
        print_trials(printer, st, search)?;
    }
    Ok(())
}

/// A search's trials: number, arguments, state, objective, epochs reached
/// (the training's own progress while it runs), best so far.
fn print_trials(
    printer: &crate::printer::Printer,
    st: &RunStatus,
    search: &crate::rundir::search::Summary,
) -> Result<()> {
    let train = st.stage("train");
    let mut table = printer.table(&[
        "trial",
        "batch",
        "state",
        "objective",
        "epochs",
        "best so far",
        "arguments",
    ]);
    for t in &search.trials {
        let task = train.and_then(|s| s.tasks.iter().find(|k| k.task == Some(t.trial)));
        // The study says running until its tell; the job says more meanwhile.
        let state = match (t.state.as_str(), task) {
            ("running", Some(k)) => format!("running ({})", k.state.word()),
            ("fail", _)
                if t.why
                    .as_deref()
                    .is_some_and(|w| w.contains("out of GPU memory")) =>
            {
                "fail (out of GPU memory)".to_string()
            }
            (s, _) => s.to_string(),
        };
        let epochs = train
            .and_then(|s| s.progress.iter().find(|(k, _)| *k == Some(t.trial)))
            .map_or(t.epochs, |(_, p)| p.epoch.max(t.epochs));
        let args: Vec<String> = t
            .params
            .iter()
            .map(|(k, v)| format!("{k}={}", crate::run::tune::short_value(v)))
            .collect();
        table.add_row(vec![
            t.trial.to_string(),
            t.batch.map(|b| b.to_string()).unwrap_or_default(),
            state,
            t.value
                .map(|v| format!("{v:.5}"))
                .unwrap_or_else(|| "-".into()),
            epochs.to_string(),
            t.best_so_far
                .map(|v| format!("{v:.5}"))
                .unwrap_or_else(|| "-".into()),
            args.join(" "),
        ]);
    }
    printer.line(format!(
        "search: {} of {} trials asked, {} per batch, sampler {}, {} ({}d)",
        search.trials.len(),
        search.trials_planned,
        search.parallel,
        search.sampler,
        search.objective,
        search.direction
    ))?;
    printer.line(&table)?;
    for t in search.trials.iter().filter(|t| t.why.is_some()) {
        printer.line(format!(
            "trial {}: {}",
            t.trial,
            t.why.as_deref().unwrap_or_default()
        ))?;
    }
    if let Some(b) = &search.best {
        printer.line(format!(
            "best: trial {} ({} = {}); `yolo-sched tune best {}` prints its arguments",
            b.trial, search.objective, b.value, st.run_id
        ))?;
    }
    Ok(())
}

/// `status --json` of a run found through Slurm: the run's status, and
/// whose it is and where its facts come from.
#[derive(Debug, Serialize)]
struct TeamStatus<'a> {
    #[serde(flatten)]
    status: &'a RunStatus,
    user: &'a str,
    account: &'a str,
    submitted_at: chrono::DateTime<chrono::Utc>,
    started_at: Option<chrono::DateTime<chrono::Utc>>,
    ended_at: Option<chrono::DateTime<chrono::Utc>>,
    facts: &'a crate::run::team::Facts,
}

pub fn run(ctx: &mut Context, args: &StatusArgs) -> Result<i32> {
    let (st, error) = match crate::run::team::locate(&ctx.slurm, &args.target.run)? {
        crate::run::team::Located::Own(mut manifest) => {
            query::run_status(&ctx.slurm, &mut manifest)
        }
        crate::run::team::Located::Team(run) => {
            // Found through Slurm just now: its status is already computed.
            let t = &run;
            if args.output.json {
                ctx.printer.json(&TeamStatus {
                    status: &t.status,
                    user: &t.user,
                    account: &t.account,
                    submitted_at: t.submitted_at,
                    started_at: t.started_at,
                    ended_at: t.ended_at,
                    facts: &t.facts,
                })?;
            } else {
                print_status(&ctx.printer, &t.status, args.tasks)?;
                let when = |d: Option<chrono::DateTime<chrono::Utc>>| {
                    d.map_or("-".to_string(), |d| {
                        d.format("%Y-%m-%d %H:%M:%S UTC").to_string()
                    })
                };
                ctx.printer.line(format!(
                    "user {}, account {}; submitted {}, started {}, ended {}",
                    t.user,
                    t.account,
                    when(Some(t.submitted_at)),
                    when(t.started_at),
                    when(t.ended_at)
                ))?;
                if let crate::run::team::Facts::Slurm { why } = &t.facts {
                    ctx.printer.line(format!(
                        "from Slurm's data only: the run directory cannot be read ({why})"
                    ))?;
                }
            }
            return Ok(0);
        }
    };
    if args.output.json {
        ctx.printer.json(&st)?;
    } else {
        print_status(&ctx.printer, &st, args.tasks)?;
    }
    if let Some(e) = error {
        ctx.printer.error_line(format!(
            "Slurm could not be asked; showing the last state the jobs recorded: {e}"
        ));
        return Ok(1);
    }
    Ok(0)
}

/// One run in `list --json`: the state flat (`"state": "failed"`), the
/// stage it names in its own field, and the submission time as the index
/// holds it (RFC 3339, UTC).
#[derive(Debug, Serialize)]
pub struct ListRow {
    pub run_id: String,
    pub user: String,
    pub name: String,
    pub submitted_at: chrono::DateTime<chrono::Utc>,
    /// `RunState::word`: pending, running, completed, failed, cancelled, never_runs, unknown.
    pub state: &'static str,
    /// The stage the state names (`failed (prepare)`); null for pending, completed, unknown.
    pub stage: Option<String>,
    /// Why a `never_runs` run cannot start.
    pub reason: Option<String>,
    /// The state in words, as the table shows it.
    pub description: String,
    /// The first stage that has not completed.
    pub current_stage: Option<String>,
    pub workdir: String,
    /// The Slurm account of the run's jobs (runs found through Slurm).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// Where the row's facts come from (runs found through Slurm): the
    /// run's manifest, or Slurm's data alone when it cannot be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub facts: Option<crate::run::team::Facts>,
}

impl ListRow {
    pub fn new(
        m: &crate::rundir::manifest::Manifest,
        submitted_at: chrono::DateTime<chrono::Utc>,
        st: &RunStatus,
    ) -> ListRow {
        ListRow {
            run_id: m.run_id.clone(),
            user: m.user.clone(),
            name: m.name.clone(),
            submitted_at,
            state: st.state.word(),
            stage: st.state.stage().map(str::to_string),
            reason: st.state.reason().map(str::to_string),
            description: st.state.describe(),
            current_stage: st
                .stages
                .iter()
                .find(|s| s.state != TaskState::Completed)
                .map(|s| s.stage.clone()),
            workdir: m.workdir.display().to_string(),
            account: None,
            facts: None,
        }
    }
}

pub fn list(ctx: &mut Context, args: &ListArgs) -> Result<i32> {
    let who = crate::slurm::squeue::Who {
        account: check_name("--account", &args.who.account)?,
        user: check_name("--user", &args.who.user)?,
    };
    if args.all_users || who != crate::slurm::squeue::Who::default() {
        return list_through_slurm(ctx, args, &who);
    }
    let index = query::index_entries()?;
    for w in &index.unreadable {
        ctx.printer.warn(w);
    }
    let entries = index.entries;
    let mut manifests = Vec::new();
    let mut submitted = Vec::new();
    let mut gone = 0;
    for e in entries.iter().take(args.limit) {
        let path = crate::rundir::manifest::Manifest::path_in(&e.workdir);
        if !path.exists() {
            // The run directory was removed: the run is gone, not broken.
            gone += 1;
            continue;
        }
        match crate::rundir::manifest::Manifest::load(&path) {
            Ok(mut m) => {
                // The job files are where the manifest was found (as in `report`).
                m.workdir = e.workdir.clone();
                manifests.push(m);
                submitted.push(e.submitted_at);
            }
            Err(err) => ctx.printer.warn(format!("run {}: {err:#}", e.run_id)),
        }
    }
    if gone > 0 {
        ctx.printer.note(format!(
            "yolo-sched: {gone} run(s) in the index have no run directory any more; not listed"
        ));
    }
    let refs: Vec<&crate::rundir::manifest::Manifest> = manifests.iter().collect();
    let view = query::ask_slurm(&ctx.slurm, &refs);
    let rows: Vec<ListRow> = manifests
        .iter()
        .zip(submitted)
        .map(|(m, at)| {
            let st = crate::run::status::of_run(m, &view.rows, &view.acct, view.reachable);
            ListRow::new(m, at, &st)
        })
        .collect();
    if args.output.json {
        ctx.printer.json(&rows)?;
    } else if rows.is_empty() {
        ctx.printer
            .line("no runs yet: submit one with `yolo-sched submit spec.toml`")?;
    } else {
        let headers = vec![
            "run id",
            "name",
            "submitted (UTC)",
            "state",
            "current stage",
        ];

        let mut table = ctx.printer.table(&headers);
        for r in &rows {
            let row = vec![
                r.run_id.clone(),
                r.name.clone(),
                r.submitted_at.format("%Y-%m-%d %H:%M").to_string(),
                r.description.clone(),
                r.current_stage.clone().unwrap_or_default(),
            ];
            table.add_row(row);
        }
        ctx.printer.line(&table)?;
    }
    if let Some(e) = view.error {
        ctx.printer.error_line(format!(
            "Slurm could not be asked; states are the last the jobs recorded: {e}"
        ));
        return Ok(1);
    }
    Ok(0)
}

/// `list --account/--user/--all-users`: the runs Slurm shows the caller.
fn list_through_slurm(
    ctx: &mut Context,
    args: &ListArgs,
    who: &crate::slurm::squeue::Who,
) -> Result<i32> {
    let since = crate::report::window::since_utc(&args.who.since, chrono::Utc::now())
        .map_err(crate::error::invalid)?;
    let team = crate::run::team::find(&ctx.slurm, who, since)?;
    if team.accounting_off {
        ctx.printer.note(
            "yolo-sched: Slurm keeps no job accounting here: only runs with a job still in the queue are listed",
        );
    }
    let rows: Vec<ListRow> = team
        .runs
        .iter()
        .take(args.limit)
        .map(|r| {
            let mut row = ListRow::new(&r.manifest, r.submitted_at, &r.status);
            row.user = r.user.clone();
            row.account = Some(r.account.clone());
            row.facts = Some(r.facts.clone());
            row
        })
        .collect();
    if args.output.json {
        ctx.printer.json(&rows)?;
        return Ok(0);
    }
    if rows.is_empty() {
        let whose = match (&who.account, &who.user) {
            (Some(a), Some(u)) => format!("of user {u} in account {a} "),
            (Some(a), None) => format!("of account {a} "),
            (None, Some(u)) => format!("of user {u} "),
            (None, None) => String::new(),
        };
        ctx.printer.line(format!(
            "no runs {whose}that Slurm shows you since {} (Slurm shows you your own jobs, those of the accounts you coordinate, or all jobs if you are an operator)",
            since.format("%Y-%m-%d %H:%M UTC")
        ))?;
        return Ok(0);
    }
    let mut table = ctx.printer.table(&[
        "run id",
        "user",
        "account",
        "name",
        "submitted (UTC)",
        "state",
        "current stage",
    ]);
    let mut from_slurm = 0;
    for r in &rows {
        let mut id = r.run_id.clone();
        if matches!(r.facts, Some(crate::run::team::Facts::Slurm { .. })) {
            from_slurm += 1;
            id.push_str(" *");
        }
        table.add_row(vec![
            id,
            r.user.clone(),
            r.account.clone().unwrap_or_default(),
            r.name.clone(),
            r.submitted_at.format("%Y-%m-%d %H:%M").to_string(),
            r.description.clone(),
            r.current_stage.clone().unwrap_or_default(),
        ]);
    }
    ctx.printer.line(&table)?;
    if from_slurm > 0 {
        ctx.printer.line(format!(
            "* {from_slurm} run(s) whose run directory you cannot read: shown from Slurm's data (stages, states, times, slices)"
        ))?;
    }
    Ok(0)
}
