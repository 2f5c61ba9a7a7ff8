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
use super::time::{format_time, parse_time, to_utc};
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
    let Ok(out) = slurm.run_raw("sacct", &["-X", "-n", "-P", "-j", &list, "-o", JOB_FIELDS]) else {
        return Vec::new();
    };
    if !out.status.success() {
        if super::states::accounting_off(&out.stderr_str()) {
            note_accounting_off();
        }
        return Vec::new();
    }
    parse_jobs(&out.stdout_str())
        .into_iter()
        .map(|(row, _)| row)
        .collect()
}

/// The fields of every job query (`by_ids`, `by_who`), in the order
/// [`parse_jobs`] reads them, the comment last: it is the one that may hold `|`.
pub const JOB_FIELDS: &str =
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
    let start = format_time(since.with_timezone(&chrono::Local).naive_local());
    let mut args: Vec<String> = [
        "-X", "-n", "-P", "-S", &start, "-E", "now", "-o", JOB_FIELDS,
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
        rows: parse_jobs(&out.stdout_str()),
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

/// Parse `sacct -X -n -P -o JOB_FIELDS`, the one parser of sacct's job
/// queries. Lines without every field are skipped.
pub fn parse_jobs(text: &str) -> Vec<(AcctRow, JobFacts)> {
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
                submitted: parse_time(f[7]).and_then(to_utc),
                started: parse_time(f[8]).and_then(to_utc),
                ended: parse_time(f[9]).and_then(to_utc),
                gres: gres_of_tres(f[10]),
                workdir: f[11].to_string(),
                comment: f[12].to_string(),
            };
            Some((row, facts))
        })
        .collect()
}

/// The fields of every query for the allocations of a window (the report's
/// usage section and the layout advisor, `advise::history`), in the order
/// [`window_row`] reads them. The TRES columns hold `,` and `=` but never
/// `|`; the comment may, so it is last (what the job agent measured,
/// `advise::need`).
pub const WINDOW_FIELDS: &str = "JobIDRaw,Partition,Account,User,State,Submit,Start,End,ElapsedRaw,TimelimitRaw,ReqTRES,AllocTRES,TRESUsageInMax,Comment";

/// How many columns [`WINDOW_FIELDS`] names.
pub const WINDOW_COLUMNS: usize = 14;

/// A saved output of the first twelve fields (before advise read needs) is
/// still read: its jobs are planned from what they asked.
pub const WINDOW_OLD_COLUMNS: usize = 12;

/// One allocation of a window query, borrowing from its line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowRow<'a> {
    /// `JobIDRaw`: the job's own id (an array task's too).
    pub id: &'a str,
    /// One partition, or a comma list.
    pub partition: &'a str,
    pub account: &'a str,
    pub user: &'a str,
    /// The base state ([`super::states::base`]: `CANCELLED by 0` → `CANCELLED`).
    pub state: &'a str,
    pub submit: NaiveDateTime,
    /// None when the job never started.
    pub start: Option<NaiveDateTime>,
    /// None while it still runs (`Unknown`).
    pub end: Option<NaiveDateTime>,
    pub elapsed_s: u64,
    /// `TimelimitRaw` in seconds; `None` when unlimited (`UNLIMITED`,
    /// `Partition_Limit`, `INVALID`).
    pub limit_s: Option<u64>,
    /// `ReqTRES`: what it asked for.
    pub req_tres: &'a str,
    /// `AllocTRES`: what it held.
    pub alloc_tres: &'a str,
    /// `TRESUsageInMax` (empty on a 12-field line).
    pub usage_max: &'a str,
    /// The job's comment as accounting stored it (empty on a 12-field line).
    pub comment: &'a str,
}

/// Why a line is not one of a window query's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowError {
    /// Neither [`WINDOW_COLUMNS`] nor [`WINDOW_OLD_COLUMNS`] fields: how many.
    Columns(usize),
    /// Field 6 (`Submit`) is not a time stamp.
    Submit,
    /// Field 9 (`ElapsedRaw`) is not whole seconds.
    Elapsed,
}

/// Whole seconds or minutes as sacct's `*Raw` fields print them: digits
/// (past u64 saturates), else `None` (`UNLIMITED`, `Partition_Limit`,
/// `INVALID`, empty).
fn raw_count(s: &str) -> Option<u64> {
    let s = s.trim();
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(s.parse().unwrap_or(u64::MAX))
}

/// Parse one line of a window query's `--parsable2` output ([`WINDOW_FIELDS`],
/// or the first [`WINDOW_OLD_COLUMNS`] of them).
pub fn window_row(line: &str) -> Result<WindowRow<'_>, RowError> {
    let c: Vec<&str> = line.splitn(WINDOW_COLUMNS, '|').collect();
    if c.len() != WINDOW_COLUMNS && c.len() != WINDOW_OLD_COLUMNS {
        return Err(RowError::Columns(c.len()));
    }
    let submit = parse_time(c[5]).ok_or(RowError::Submit)?;
    let elapsed_s = raw_count(c[8]).ok_or(RowError::Elapsed)?;
    Ok(WindowRow {
        id: c[0],
        partition: c[1],
        account: c[2],
        user: c[3],
        state: super::states::base(c[4]),
        submit,
        start: parse_time(c[6]),
        end: parse_time(c[7]),
        elapsed_s,
        // TimelimitRaw is minutes.
        limit_s: raw_count(c[9]).map(|m| m.saturating_mul(60)),
        req_tres: c[10],
        alloc_tres: c[11],
        usage_max: c.get(12).copied().unwrap_or(""),
        comment: c.get(13).copied().unwrap_or(""),
    })
}

/// A query for every allocation (one line per job or array task) that was
/// held or waited at any time of a window, cluster local time.
#[derive(Debug, Clone, Copy)]
pub struct Window<'a> {
    pub since: NaiveDateTime,
    /// `None`: now.
    pub until: Option<NaiveDateTime>,
    /// A user's jobs, or (no user) every user's; in a partition, an account.
    pub filter: &'a Filter,
}

/// `sacct` arguments of a [`Window`] query, [`WINDOW_FIELDS`], allocations only.
pub fn window_args(w: &Window<'_>) -> Vec<String> {
    let mut args = vec![
        "-X".to_string(),
        "--noheader".into(),
        "--parsable2".into(),
        format!("--starttime={}", format_time(w.since)),
        match w.until {
            Some(until) => format!("--endtime={}", format_time(until)),
            None => "--endtime=now".into(),
        },
        format!("--format={WINDOW_FIELDS}"),
    ];
    match &w.filter.user {
        Some(user) => args.push(format!("--user={user}")),
        None => args.push("--allusers".into()),
    }
    if let Some(partition) = &w.filter.partition {
        args.push(format!("--partition={partition}"));
    }
    if let Some(account) = &w.filter.account {
        args.push(format!("--accounts={account}"));
    }
    args
}

/// The one query for the allocations of a window: one `sacct`, not retried;
/// a non-zero exit is handed back, not raised, because the caller words what
/// it means (accounting off, slurmdbd down).
pub fn window(slurm: &Slurm, w: &Window<'_>) -> Result<Captured> {
    let args = window_args(w);
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
    fn the_asked_fields_are_the_window_columns() {
        assert_eq!(WINDOW_FIELDS.split(',').count(), WINDOW_COLUMNS);
    }

    #[test]
    fn window_rows_read_slurm_s_odd_values() {
        let line = "7|gpu,debug|vision|alice|CANCELLED by 1000|2026-11-30T09:59:00|2026-11-30T10:00:00|Unknown|3600|Partition_Limit|cpu=1,gres/gpu:1g.5gb=1|cpu=1,gres/gpu:1g.5gb=1|gres/gpumem=100M|yolo-sched:r|odd";
        let r = window_row(line).unwrap();
        assert_eq!((r.id, r.user, r.account), ("7", "alice", "vision"));
        assert_eq!(r.partition, "gpu,debug");
        assert_eq!(r.state, "CANCELLED", "the base word");
        assert!(r.start.is_some());
        assert_eq!(r.end, None, "Unknown: still running");
        assert_eq!((r.elapsed_s, r.limit_s), (3600, None));
        assert_eq!(r.alloc_tres, "cpu=1,gres/gpu:1g.5gb=1");
        assert_eq!(r.comment, "yolo-sched:r|odd", "the comment keeps its bars");
        for limit in ["UNLIMITED", "INVALID", "Partition_Limit", "", "N/A"] {
            let l =
                format!("8|gpu|a|u|PENDING|2026-11-30T09:59:00|None|Unknown|0|{limit}|cpu=1|||");
            assert_eq!(window_row(&l).unwrap().limit_s, None, "{limit}");
        }
        let twelve = "9|gpu|a|u|COMPLETED+|2026-11-30T09:59:00|2026-11-30T10:00:00|2026-11-30T11:00:00|3600|60|cpu=1|cpu=1";
        let r = window_row(twelve).unwrap();
        assert_eq!(
            (r.state, r.limit_s, r.comment),
            ("COMPLETED", Some(3600), "")
        );
        assert_eq!(window_row("8|bob|vision|gpu"), Err(RowError::Columns(4)));
        let bad = "9|gpu|a|u|COMPLETED|Unknown|None|None|0|60|cpu=1|cpu=1";
        assert_eq!(window_row(bad), Err(RowError::Submit));
        let bad = "9|gpu|a|u|COMPLETED|2026-11-30T09:59:00|None|None|-1|60|cpu=1|cpu=1";
        assert_eq!(window_row(bad), Err(RowError::Elapsed));
    }

    #[test]
    fn rows_by_id_parse() {
        let facts = "n|u|a|2026-12-01T17:26:20|Unknown|Unknown|cpu=1|/tmp|";
        let rows = parse_jobs(&format!(
            "12|COMPLETED|0:0|node1|{facts}\n13_2|FAILED|3:0|node2|{facts}\n14|CANCELLED by 0|0:0|None assigned|{facts}\n"
        ));
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[1].0.job_id, "13_2");
        assert_eq!(rows[1].0.exit_code, Some(3));
        assert_eq!(rows[2].0.state, "CANCELLED by 0");
        assert_eq!(rows[2].0.node, "None assigned");
        assert_eq!(rows[0].1.started, None, "Unknown");
    }

    #[test]
    fn rows_by_who_carry_user_account_workdir_slice_and_comment() {
        let text = "\
6420|CANCELLED by 1003|0:15|node1|pcb.train|ys-bob|vision|2026-12-01T17:26:20|2026-12-01T17:26:21|2026-12-01T17:28:00|billing=4,cpu=4,gres/gpu:1g.5gb=1,gres/gpu=1,mem=8000M,node=1|/home/ys-bob/runs/pcb|yolo-sched:pcb-1:ab:train
6421_3|PENDING|0:0|None assigned|x.export|ys-alice|vision|2026-12-01T17:26:20|Unknown|Unknown|billing=1,cpu=1,mem=1G,node=1|/tmp|odd|comment
short|line
";
        let rows = parse_jobs(text);
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
    fn window_arguments() {
        let t = |s: &str| NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S").unwrap();
        let all = Filter::default();
        let w = Window {
            since: t("2026-11-29T15:00:00"),
            until: None,
            filter: &all,
        };
        let a = window_args(&w);
        assert!(a.contains(&"--starttime=2026-11-29T15:00:00".to_string()));
        assert!(a.contains(&"--endtime=now".to_string()));
        assert!(a.contains(&"--allusers".to_string()));
        assert!(a.contains(&"-X".to_string()));
        assert!(a.contains(&format!("--format={WINDOW_FIELDS}")));
        let f = Filter {
            user: Some("alice".into()),
            partition: Some("gpu".into()),
            ..Filter::default()
        };
        let w = Window {
            until: Some(t("2026-11-30T15:00:00")),
            filter: &f,
            ..w
        };
        let a = window_args(&w);
        assert!(a.contains(&"--user=alice".to_string()));
        assert!(a.contains(&"--partition=gpu".to_string()));
        assert!(a.contains(&"--endtime=2026-11-30T15:00:00".to_string()));
    }
}
