//! The one part of `report` with effects: the Slurm commands, the manifests, the clock.

use std::path::PathBuf;

use anyhow::{Context, Result};
use chrono::{Local, NaiveDateTime, TimeZone};

use super::leaderboard::leaderboard;
use super::model::{self, AccountingState, AccountingStatus, Report, Section};
use super::render::Selection;
use super::usage::usage_rows;
use super::{inventory, queue, rightsizing, runs, sacct};
use crate::slurm::squeue::Filter;
use crate::slurm::Slurm;

/// What to report on.
#[derive(Debug, Clone)]
pub struct Options {
    pub selection: Selection,
    pub filter: Filter,
    /// Start of the usage window, cluster local time.
    pub since: NaiveDateTime,
    /// Where run manifests are; `None`: there is no state directory.
    pub runs_dir: Option<PathBuf>,
    /// Also build the runs' leaderboard and training curves (`--format html`);
    /// needs the runs section.
    pub leaderboard: bool,
    /// Find the runs through Slurm (`--account`/`--user` without
    /// `--runs-dir`): every run of the filter's account or user that Slurm
    /// shows the caller, not only the caller's own index.
    pub runs_through_slurm: bool,
    /// Rows ranked beside the runs' on the leaderboard (the model registry's versions).
    pub extra_rows: Vec<crate::compare::Row>,
}

/// A local time as RFC 3339 with the offset in force then.
fn rfc3339(local: NaiveDateTime) -> String {
    Local
        .from_local_datetime(&local)
        .earliest()
        .map(|t| t.to_rfc3339())
        .unwrap_or_else(|| local.format("%Y-%m-%dT%H:%M:%S").to_string())
}

/// Run the Slurm commands the selection needs and build the report. Fails
/// (without side effects) when `sinfo` or `squeue` cannot be run; a failing
/// `sacct` only makes slice-hours unavailable.
pub fn gather(slurm: &Slurm, opts: &Options) -> Result<Report> {
    let started = Local::now();
    let now = started.naive_local();
    let sel = &opts.selection;

    // The three commands run side by side: each waits on a daemon (slurmctld,
    // slurmdbd), and the report takes as long as the slowest instead of the sum.
    // No retries: a report runs every few minutes, and a busy controller is
    // better served by the next run than by repeated queries now.
    let (nodes, listing, accounting) = std::thread::scope(|scope| {
        let accounting = (sel.has(Section::Usage) || sel.has(Section::Advice))
            .then(|| scope.spawn(|| ask_accounting(slurm, opts, now)));
        let listing = scope.spawn(|| crate::slurm::squeue::listing::fetch(slurm, &opts.filter));
        let nodes = crate::slurm::sinfo::nodes_once(slurm);
        let listing = listing.join();
        let accounting = accounting.map(|h| h.join());
        (nodes, listing, accounting)
    });
    let nodes = nodes.context("cannot read the nodes from Slurm")?;
    let listing = listing
        .map_err(|_| anyhow::anyhow!("the squeue reader panicked"))?
        .context("cannot read the job queue from Slurm")?;
    let accounting = accounting
        .transpose()
        .map_err(|_| anyhow::anyhow!("the sacct reader panicked"))?;

    // The runs and their jobs' lines, picked out before the listing is dropped.
    let manifests_needed = sel.has(Section::Runs) || sel.has(Section::RightSizing);
    // No accounting (the window query found out): sacct is not asked again.
    if accounting
        .as_ref()
        .is_some_and(|a| a.state.status == AccountingStatus::Disabled)
    {
        crate::run::query::note_accounting_off();
    }
    let team = if opts.runs_through_slurm && manifests_needed {
        Some(runs_through_slurm(slurm, opts)?)
    } else {
        None
    };
    let (run_manifests, unreadable) = match (&team, &opts.runs_dir, manifests_needed) {
        (Some(t), _, true) => (t.runs.iter().map(|r| r.manifest.clone()).collect(), vec![]),
        (None, Some(dir), true) => runs::load(dir),
        _ => (Vec::new(), Vec::new()),
    };
    let run_ids = runs::job_ids(&run_manifests);
    let run_rows = runs::queue_rows(&listing, &run_ids);

    let mut aggregator = queue::QueueAggregator::new(now, opts.filter.clone());
    aggregator.add_text(&listing);
    drop(listing);
    let (queue, held, _) = aggregator.finish();

    let inventory = inventory::build(&nodes, opts.filter.partition.as_deref());

    let (usage, accounting) = match accounting {
        Some(Accounting {
            state,
            parsed,
            stdout,
        }) => {
            let answered = (state.status == AccountingStatus::Ok).then_some(stdout);
            let usage = sel
                .has(Section::Usage)
                .then(|| usage_section(state, parsed, held, (now - opts.since).num_seconds()));
            (usage, answered)
        }
        None => (None, None),
    };

    // Run jobs that left the queue: one `sacct -j`, as `status` asks it,
    // unless the window query just found that there is no accounting.
    let gone = runs::missing(&run_ids, &run_rows);
    let statuses = match &team {
        Some(t) => t.runs.iter().map(|r| r.status.clone()).collect(),
        None => {
            let acct = if gone.is_empty() || !sel.has(Section::Runs) {
                Vec::new()
            } else {
                crate::run::query::sacct_rows(slurm, &gone)
            };
            runs::statuses(&run_manifests, &run_rows, &acct)
        }
    };
    let manifests: Vec<runs::Manifest> = run_manifests
        .iter()
        .zip(&statuses)
        .map(|(m, st)| runs::view(m, st))
        .collect();
    let super::leaderboard::Leaderboard {
        board: leaderboard,
        curves,
        omitted: curves_omitted,
        searches,
    } = if opts.leaderboard && sel.has(Section::Runs) {
        leaderboard(&run_manifests, &statuses, &opts.extra_rows)?
    } else {
        super::leaderboard::Leaderboard {
            board: None,
            curves: Vec::new(),
            omitted: 0,
            searches: Vec::new(),
        }
    };
    let runs = sel.has(Section::Runs).then(|| {
        let dir = match &team {
            Some(_) => PathBuf::from("slurm"),
            None => opts.runs_dir.clone().unwrap_or_default(),
        };
        runs::summarise(&dir, &manifests, unreadable)
    });
    let right_sizing = sel.has(Section::RightSizing).then(|| {
        let types: Vec<String> = inventory
            .totals
            .iter()
            .filter_map(|t| t.kind.strip_prefix("gpu:").map(str::to_string))
            .collect();
        rightsizing::hints(&manifests, &types)
    });

    let advice = accounting
        .as_ref()
        .filter(|_| sel.has(Section::Advice))
        .map(|stdout| layout_advice(opts, now, stdout, &nodes));

    Ok(Report {
        schema_version: model::SCHEMA_VERSION,
        generated_at: started.to_rfc3339(),
        generated_unix: started.timestamp(),
        filters: model::Filters {
            partition: opts.filter.partition.clone(),
            user: opts.filter.user.clone(),
            account: opts.filter.account.clone(),
            since: rfc3339(opts.since),
            window_seconds: (now - opts.since).num_seconds(),
        },
        inventory: sel.has(Section::Inventory).then_some(inventory),
        queue: sel.has(Section::Queue).then_some(queue),
        usage,
        runs,
        right_sizing,
        advice,
        leaderboard,
        curves,
        curves_omitted,
        searches,
    })
}

/// The runs through Slurm (`--account`, `--user`): one more squeue and one
/// sacct, whatever their number.
fn runs_through_slurm(slurm: &Slurm, opts: &Options) -> Result<crate::run::team::Team> {
    let who = crate::slurm::squeue::Who {
        account: opts.filter.account.clone(),
        user: opts.filter.user.clone(),
    };
    let since = Local
        .from_local_datetime(&opts.since)
        .earliest()
        .map(|t| t.with_timezone(&chrono::Utc))
        .unwrap_or_else(chrono::Utc::now);
    crate::run::team::find(slurm, &who, since).context("cannot find the runs through Slurm")
}

/// The usage section: slices held now and slice-hours in the window, with
/// the window's series per type.
fn usage_section(
    accounting: AccountingState,
    parsed: Option<sacct::Parsed>,
    held: Vec<queue::Held>,
    window_seconds: i64,
) -> model::Usage {
    let series = parsed.as_ref().map(|p| model::UsageSeries {
        bucket_seconds: p.bucket_seconds,
        buckets: sacct::SERIES_BUCKETS,
        by_type: p
            .series
            .iter()
            .map(|(kind, secs)| model::TypeSeries {
                kind: kind.clone(),
                slices: secs
                    .iter()
                    .map(|s| (s / p.bucket_seconds as f64 * 100.0).round() / 100.0)
                    .collect(),
            })
            .collect(),
    });
    let mut u = usage_rows(accounting, parsed.map(|p| p.hours), held, window_seconds);
    u.series = series;
    u
}

/// The window the advice looks at: last week, whatever `--since` says.
pub const ADVICE_WINDOW_DAYS: i64 = 7;

/// The layout advisor's short form, where accounting answered, from the
/// report's own `sacct` rows and `sinfo` nodes: no Slurm call of its own. A
/// failure of the advisor itself (a node whose model its types do not name)
/// is said in the section, not raised: the rest of the report stands.
fn layout_advice(
    opts: &Options,
    now: NaiveDateTime,
    sacct_stdout: &[u8],
    nodes: &[crate::slurm::node::Node],
) -> model::LayoutAdvice {
    let since = now - chrono::Duration::days(ADVICE_WINDOW_DAYS);
    let options = crate::advise::Options {
        since,
        until: now,
        partition: opts.filter.partition.clone(),
        account: opts.filter.account.clone(),
        nodes: Vec::new(),
        gpu_model: None,
        sacct_file: None,
        trace: false,
    };
    let window_seconds = (now - since).num_seconds();
    let partitions: Vec<String> = options.partition.iter().cloned().collect();
    let window = crate::advise::history::Window {
        since,
        until: now,
        partitions: &partitions,
        trace: false,
    };
    let known = crate::slurm::sinfo::partitions(nodes);
    let advised = crate::advise::history_of_sacct(sacct_stdout, &window).and_then(|history| {
        let nodes = crate::advise::Nodes {
            nodes,
            partitions: &known,
        };
        crate::advise::from_history(&options, history, nodes, None)
    });
    match advised {
        Ok(r) => model::LayoutAdvice::from_advice(&r, window_seconds),
        Err(e) => model::LayoutAdvice::failed(window_seconds, format!("{e:#}")),
    }
}

/// What the report's one `sacct` found: the accounting's state, the usage
/// section's slice-hours (with that section), and the output, kept for the
/// layout advice where accounting answered.
struct Accounting {
    state: AccountingState,
    parsed: Option<sacct::Parsed>,
    stdout: Vec<u8>,
}

/// The report's one `sacct`: the allocations of the usage window and, with
/// the advice, of the advice's week too (every user's: the advice is about
/// the nodes, the usage rows are filtered to the user again). Its failure is
/// reported, not raised.
fn ask_accounting(slurm: &Slurm, opts: &Options, now: NaiveDateTime) -> Accounting {
    let advice = opts.selection.has(Section::Advice);
    let mut since = opts.since;
    let mut filter = opts.filter.clone();
    if advice {
        since = since.min(now - chrono::Duration::days(ADVICE_WINDOW_DAYS));
        filter.user = None;
    }
    let query = crate::slurm::sacct::Window {
        since,
        until: None,
        filter: &filter,
    };
    let failed = |state| Accounting {
        state,
        parsed: None,
        stdout: Vec::new(),
    };
    match crate::slurm::sacct::window(slurm, &query) {
        Ok(out) if out.status.success() => {
            let parsed = opts.selection.has(Section::Usage).then(|| {
                sacct::parse(
                    &String::from_utf8_lossy(&out.stdout),
                    opts.since,
                    now,
                    &opts.filter,
                )
            });
            let message = parsed
                .as_ref()
                .filter(|p| p.unparsed_lines > 0)
                .map(|p| format!("{} sacct line(s) could not be read", p.unparsed_lines));
            Accounting {
                state: AccountingState {
                    status: AccountingStatus::Ok,
                    message,
                },
                parsed,
                stdout: if advice { out.stdout } else { Vec::new() },
            }
        }
        Ok(out) => failed(sacct::failure_state(
            &out.stderr_str(),
            &crate::process::describe_status(&out.status),
        )),
        Err(err) => failed(AccountingState {
            status: AccountingStatus::Failed,
            message: Some(format!("{err:#}")),
        }),
    }
}
