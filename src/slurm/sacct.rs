//! Jobs that left the queue, from `sacct`: by id (what `status` asks for the
//! jobs of a run it knows) and by account or user (what `list --account`
//! asks to find runs it does not know yet).
//!
//! `sacct` answers from slurmdbd, which applies its own `PrivateData`: a
//! user sees their own jobs, a coordinator their accounts' jobs, operators
//! and admins every job. Nothing here second-guesses that.

use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Result;
use chrono::{DateTime, NaiveDateTime, Utc};

use super::squeue::{Filter, JobFacts, Who};
use super::time::parse_slurm_time;
use super::Slurm;
use crate::process::Captured;

/// A finished job as `sacct` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcctRow {
    /// `12` or `12_3`.
    pub job_id: String,
    pub state: String,
    pub exit_code: Option<i32>,
    pub node: String,
}

/// Set once `sacct` said there is no accounting: a long `watch` then stops
/// asking it every round.
static NO_ACCOUNTING: AtomicBool = AtomicBool::new(false);

/// Remember that this cluster keeps no accounting (another `sacct` call of
/// this process, such as the report's usage query, found out).
pub fn note_accounting_off() {
    NO_ACCOUNTING.store(true, Ordering::Relaxed);
}

/// Whether an earlier call of this process found accounting off.
pub fn accounting_known_off() -> bool {
    NO_ACCOUNTING.load(Ordering::Relaxed)
}

/// `sacct` for jobs that left the queue (at most one call); empty when
/// accounting is not there or the call fails.
pub fn by_ids(slurm: &Slurm, ids: &[u64]) -> Vec<AcctRow> {
    if ids.is_empty() || accounting_known_off() {
        return Vec::new();
    }
    let list: Vec<String> = ids.iter().map(u64::to_string).collect();
    let list = list.join(",");
    let Ok(out) = slurm.run_raw(
        "sacct",
        &[
            "-X",
            "-n",
            "-P",
            "-j",
            &list,
            "-o",
            "JobID,State,ExitCode,NodeList",
        ],
    ) else {
        return Vec::new();
    };
    if !out.status.success() {
        if super::states::accounting_off(&out.stderr_str()) {
            note_accounting_off();
        }
        return Vec::new();
    }
    parse_rows(&out.stdout_str())
}

/// Parse `sacct -X -n -P -o JobID,State,ExitCode,NodeList`.
pub fn parse_rows(text: &str) -> Vec<AcctRow> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('|').collect();
            if f.len() < 4 {
                return None;
            }
            Some(AcctRow {
                job_id: f[0].to_string(),
                state: f[1].to_string(),
                exit_code: f[2].split(':').next().and_then(|c| c.parse().ok()),
                node: f[3].to_string(),
            })
        })
        .collect()
}

/// The fields of `by_who`, the comment last: it is the one that may hold `|`.
const WHO_FIELDS: &str =
    "JobID,State,ExitCode,NodeList,JobName,User,Account,Submit,Start,End,ReqTRES,WorkDir,Comment";

/// What `by_who` found: accounting rows with their facts, or accounting off.
#[derive(Debug, Default)]
pub struct Found {
    pub rows: Vec<(AcctRow, JobFacts)>,
    /// The cluster keeps no accounting: only queued jobs can be found.
    pub accounting_off: bool,
}

/// Every job of `who` that Slurm lets the caller see, submitted since
/// `since`, in one call.
pub fn by_who(slurm: &Slurm, who: &Who, since: DateTime<Utc>) -> Result<Found> {
    if accounting_known_off() {
        return Ok(Found {
            rows: vec![],
            accounting_off: true,
        });
    }
    // sacct takes local time without a zone.
    let start = since
        .with_timezone(&chrono::Local)
        .format("%Y-%m-%dT%H:%M:%S")
        .to_string();
    let mut args: Vec<String> = [
        "-X", "-n", "-P", "-S", &start, "-E", "now", "-o", WHO_FIELDS,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    match &who.user {
        Some(u) => args.extend(["-u".to_string(), u.clone()]),
        None => args.push("-a".to_string()),
    }
    if let Some(a) = &who.account {
        args.extend(["-A".to_string(), a.clone()]);
    }
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = slurm.run_raw("sacct", &argv)?;
    if !out.status.success() {
        let err = out.stderr_str();
        if super::states::accounting_off(&err) {
            note_accounting_off();
            return Ok(Found {
                rows: vec![],
                accounting_off: true,
            });
        }
        return Err(super::CommandFailed {
            command: crate::process::display_command("sacct", &argv),
            status: crate::process::describe_status(&out.status),
            stderr: err,
        }
        .into());
    }
    Ok(Found {
        rows: parse_who(&out.stdout_str()),
        accounting_off: false,
    })
}

/// `gres/gpu:1g.5gb=1` in a TRES list → `gpu:1g.5gb:1` (the typed GPU
/// first, then shards, then an untyped GPU), as a manifest records `--gres`.
fn gres_of_tres(tres: &str) -> String {
    let items: Vec<(&str, &str)> = tres
        .split(',')
        .filter_map(|i| i.strip_prefix("gres/")?.split_once('='))
        .collect();
    let typed = items.iter().find(|(n, _)| n.starts_with("gpu:"));
    let shard = items.iter().find(|(n, _)| n.starts_with("shard"));
    let plain = items.iter().find(|(n, _)| *n == "gpu");
    typed
        .or(shard)
        .or(plain)
        .map(|(n, c)| format!("{n}:{c}"))
        .unwrap_or_default()
}

/// Parse `sacct -X -n -P -o WHO_FIELDS`. Lines without every field are skipped.
pub fn parse_who(text: &str) -> Vec<(AcctRow, JobFacts)> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.splitn(13, '|').collect();
            if f.len() < 13 {
                return None;
            }
            let array_job_id = f[0]
                .split('_')
                .next()
                .and_then(|id| id.parse::<u64>().ok())?;
            let row = AcctRow {
                job_id: f[0].to_string(),
                state: f[1].to_string(),
                exit_code: f[2].split(':').next().and_then(|c| c.parse().ok()),
                node: f[3].to_string(),
            };
            let facts = JobFacts {
                job_id: f[0].to_string(),
                array_job_id,
                state: f[1].to_string(),
                name: f[4].to_string(),
                user: f[5].to_string(),
                account: f[6].to_string(),
                submitted: parse_slurm_time(f[7]),
                started: parse_slurm_time(f[8]),
                ended: parse_slurm_time(f[9]),
                gres: gres_of_tres(f[10]),
                workdir: f[11].to_string(),
                comment: f[12].to_string(),
            };
            Some((row, facts))
        })
        .collect()
}

/// The fields the report's usage query asks for, in the order
/// [`usage_rows`] reads them.
pub const USAGE_FIELDS: &str = "JobID,User,Account,Partition,State,Start,End,AllocTRES";

/// How many columns [`USAGE_FIELDS`] names.
const USAGE_COLUMNS: usize = 8;

/// One allocation of the usage query, borrowing from its output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageRow<'a> {
    pub user: &'a str,
    pub account: &'a str,
    /// One partition, or a comma list.
    pub partition: &'a str,
    /// None when the job never started.
    pub start: Option<NaiveDateTime>,
    /// None while it still runs (`Unknown`).
    pub end: Option<NaiveDateTime>,
    /// `AllocTRES`: what it held.
    pub tres: &'a str,
}

/// The rows of the usage query's `--parsable2` output, in order; `None` for
/// a line without all [`USAGE_FIELDS`] (the caller counts those). The
/// allocation's TRES comes last, so a `|` inside it cannot shift a column.
pub fn usage_rows(text: &str) -> impl Iterator<Item = Option<UsageRow<'_>>> {
    text.lines().filter(|l| !l.trim().is_empty()).map(|line| {
        let mut cols = line.splitn(USAGE_COLUMNS, '|');
        let mut found = 0;
        let c: [&str; USAGE_COLUMNS] = std::array::from_fn(|_| {
            let col = cols.next();
            found += usize::from(col.is_some());
            col.unwrap_or("")
        });
        (found == USAGE_COLUMNS).then(|| UsageRow {
            user: c[1],
            account: c[2],
            partition: c[3],
            start: super::time::parse_time(c[5]),
            end: super::time::parse_time(c[6]),
            tres: c[7],
        })
    })
}

/// `sacct` arguments for jobs that held an allocation at any time between
/// `since` and now (both cluster local time), allocations only.
pub fn usage_args(since: NaiveDateTime, filter: &Filter) -> Vec<String> {
    let mut args = vec![
        "-X".to_string(),
        "--noheader".into(),
        "--parsable2".into(),
        format!("--starttime={}", since.format("%Y-%m-%dT%H:%M:%S")),
        "--endtime=now".into(),
        format!("--format={USAGE_FIELDS}"),
    ];
    match &filter.user {
        Some(user) => args.push(format!("--user={user}")),
        None => args.push("--allusers".into()),
    }
    if let Some(partition) = &filter.partition {
        args.push(format!("--partition={partition}"));
    }
    if let Some(account) = &filter.account {
        args.push(format!("--accounts={account}"));
    }
    args
}

/// The report's usage query, one `sacct`, not retried; a non-zero exit is
/// handed back, not raised, because the caller words what it means
/// (accounting off, slurmdbd down).
pub fn usage(slurm: &Slurm, since: NaiveDateTime, filter: &Filter) -> Result<Captured> {
    let args = usage_args(since, filter);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    slurm.run_raw("sacct", &args)
}

/// The layout advisor's query: every allocation of the window (one line per
/// job or array task, `advise::history::FIELDS`), one call, not retried; a
/// non-zero exit is handed back for the caller to word.
pub fn history(
    slurm: &Slurm,
    since: NaiveDateTime,
    until: NaiveDateTime,
    fields: &str,
    filter: &Filter,
) -> Result<Captured> {
    let mut args = vec![
        "-X".to_string(),
        "--noheader".into(),
        "--parsable2".into(),
        "--allusers".into(),
        format!("--starttime={}", since.format("%Y-%m-%dT%H:%M:%S")),
        format!("--endtime={}", until.format("%Y-%m-%dT%H:%M:%S")),
        format!("--format={fields}"),
    ];
    if let Some(partition) = &filter.partition {
        args.push(format!("--partition={partition}"));
    }
    if let Some(account) = &filter.account {
        args.push(format!("--accounts={account}"));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    slurm.run_raw("sacct", &args)
}

/// Whether `sacct` answers at all (slurmdbd is there): a query for the last
/// minute's allocations, whose rows are not read.
pub fn probe(slurm: &Slurm) -> bool {
    slurm
        .run_raw("sacct", &["-n", "-X", "-S", "now-1minutes", "-o", "JobID"])
        .map(|o| o.status.success())
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_asked_fields_are_the_usage_columns() {
        assert_eq!(USAGE_FIELDS.split(',').count(), USAGE_COLUMNS);
    }

    #[test]
    fn usage_rows_parse_and_short_lines_are_none() {
        let text = "7|alice|vision|gpu,debug|COMPLETED|2026-11-30T10:00:00|Unknown|cpu=1,gres/gpu:1g.5gb=1\n\
                    8|bob|vision|gpu\n\n";
        let rows: Vec<_> = usage_rows(text).collect();
        assert_eq!(rows.len(), 2);
        let r = rows[0].as_ref().unwrap();
        assert_eq!(
            (r.user, r.account, r.partition),
            ("alice", "vision", "gpu,debug")
        );
        assert!(r.start.is_some());
        assert_eq!(r.end, None);
        assert_eq!(r.tres, "cpu=1,gres/gpu:1g.5gb=1");
        assert!(rows[1].is_none());
    }

    #[test]
    fn rows_by_id_parse() {
        let rows = parse_rows(
            "12|COMPLETED|0:0|node1\n13_2|FAILED|3:0|node2\n14|CANCELLED by 0|0:0|None assigned\n",
        );
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[1].job_id, "13_2");
        assert_eq!(rows[1].exit_code, Some(3));
        assert_eq!(rows[2].state, "CANCELLED by 0");
    }

    #[test]
    fn rows_by_who_carry_user_account_workdir_slice_and_comment() {
        let text = "\
6420|CANCELLED by 1003|0:15|node1|pcb.train|ys-bob|vision|2026-12-01T17:26:20|2026-12-01T17:26:21|2026-12-01T17:28:00|billing=4,cpu=4,gres/gpu:1g.5gb=1,gres/gpu=1,mem=8000M,node=1|/home/ys-bob/runs/pcb|yolo-sched:pcb-1:ab:train
6421_3|PENDING|0:0|None assigned|x.export|ys-alice|vision|2026-12-01T17:26:20|Unknown|Unknown|billing=1,cpu=1,mem=1G,node=1|/tmp|odd|comment
short|line
";
        let rows = parse_who(text);
        assert_eq!(rows.len(), 2, "{rows:?}");
        let (r, f) = &rows[0];
        assert_eq!(r.state, "CANCELLED by 1003");
        assert_eq!((f.array_job_id, f.user.as_str()), (6420, "ys-bob"));
        assert_eq!(f.account, "vision");
        assert_eq!(f.gres, "gpu:1g.5gb:1");
        assert_eq!(f.workdir, "/home/ys-bob/runs/pcb");
        assert_eq!(f.comment, "yolo-sched:pcb-1:ab:train");
        assert!(f.submitted.is_some() && f.ended.is_some());
        let (_, f) = &rows[1];
        assert_eq!(f.array_job_id, 6421);
        assert_eq!(f.started, None);
        assert_eq!(f.gres, "");
        assert_eq!(f.comment, "odd|comment");
    }

    #[test]
    fn the_typed_gpu_is_the_slice() {
        assert_eq!(
            gres_of_tres("cpu=1,gres/gpu=1,gres/gpu:a100=1"),
            "gpu:a100:1"
        );
        assert_eq!(gres_of_tres("cpu=1,gres/shard=2"), "shard:2");
        assert_eq!(gres_of_tres("cpu=1,mem=1G"), "");
    }

    #[test]
    fn usage_arguments() {
        let t = |s: &str| NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S").unwrap();
        let a = usage_args(t("2026-11-29T15:00:00"), &Filter::default());
        assert!(a.contains(&"--starttime=2026-11-29T15:00:00".to_string()));
        assert!(a.contains(&"--allusers".to_string()));
        assert!(a.contains(&"-X".to_string()));
        let f = Filter {
            user: Some("alice".into()),
            ..Filter::default()
        };
        assert!(usage_args(t("2026-11-29T15:00:00"), &f).contains(&"--user=alice".to_string()));
    }
}
