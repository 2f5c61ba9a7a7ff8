//! Last weeks' GPU jobs from Slurm's accounting, and the demand they make.
//!
//! One `sacct` call (`slurm::sacct::window`) gives every allocation of the
//! window, one line per job or array task (each read by
//! `slurm::sacct::window_row`); this module reads those lines one at a time from any reader ([`read`]: each line at most [`MAX_LINE_BYTES`],
//! at most [`MAX_LINES`] of them read) and folds each job straight into what
//! advise needs of it, so memory is the demand (a few dozen bytes per typed
//! job), not the input: the jobs that asked for a typed GPU become a
//! [`Demand`] that arrives over time, each job pending from its submission,
//! running for the time it actually ran.
//!
//! A line that is not a line of `sacct --parsable2` output of [`FIELDS`] (a
//! field missing, another order, binary) stops the read with its number and
//! what was expected: a saved file of something else must not read as a quiet
//! window. What node-setup cannot plan from (a run or a limit past 366 days,
//! more than 64 instances, a type name it refuses, a submission after the
//! window) is clamped or left out here, and counted, so the demand file
//! advise writes is one node-setup reads.

use std::io::BufRead;

use chrono::NaiveDateTime;
use serde::Serialize;

use crate::mig::demand::{is_type_name, MAX_COUNT, MAX_SECONDS};
use crate::mig::Demand;
use crate::slurm::squeue::read::gres_in_tres;

/// The fields asked of `sacct`: the window query's
/// (`slurm::sacct::window_row` reads them).
pub const FIELDS: &str = crate::slurm::sacct::WINDOW_FIELDS;
const COLUMNS: usize = crate::slurm::sacct::WINDOW_COLUMNS;
const OLD_COLUMNS: usize = crate::slurm::sacct::WINDOW_OLD_COLUMNS;

/// The most lines read; a busy site's week is 10^4–10^5 GPU jobs. Lines
/// past it are counted ([`Skipped::past_limit`]), not read.
pub const MAX_LINES: u64 = 2_000_000;

/// The longest line read: a line of sacct's twelve fields is a few hundred
/// bytes; a longer one is not sacct's.
pub const MAX_LINE_BYTES: usize = 64 << 10;

/// What one job asked for in GPUs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "ask")]
pub enum GpuAsk {
    /// `count` instances of one type: a MIG profile (`1g.5gb`) or a whole GPU (`a100`).
    Typed { kind: String, count: u32 },
    /// `gpu:N` without a type: any instance fits, so it changes no layout.
    Untyped { count: u32 },
    /// Shares of a whole GPU (`shard:N`).
    Shards { count: u32 },
}

/// One GPU job of the window as accounting recorded it, borrowed from its line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PastJob<'a> {
    pub id: &'a str,
    pub partition: &'a str,
    pub account: &'a str,
    pub user: &'a str,
    /// `TRESUsageInMax` (empty on a 12-field line).
    pub usage_max: &'a str,
    /// The job's comment as accounting stored it (empty on a 12-field line).
    pub comment: &'a str,
    /// The base state (`COMPLETED`, `CANCELLED`, `RUNNING`, `PENDING`…).
    pub state: &'a str,
    pub ask: GpuAsk,
    pub submit: NaiveDateTime,
    pub start: Option<NaiveDateTime>,
    pub end: Option<NaiveDateTime>,
    pub elapsed_s: u64,
    /// The time limit, seconds; `None` when unlimited.
    pub limit_s: Option<u64>,
}

impl PastJob<'_> {
    /// In one of `partitions` (a job may name several), or any when empty.
    pub fn in_partitions(&self, partitions: &[String]) -> bool {
        partitions.is_empty()
            || self
                .partition
                .split(',')
                .any(|p| partitions.iter().any(|w| w == p))
    }
}

/// Lines that gave no GPU job, by why.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Skipped {
    /// Jobs that asked for no GPU.
    pub no_gpu: u64,
    /// Lines past [`MAX_LINES`]: not read, their jobs left out.
    pub past_limit: u64,
    /// GPU jobs that ended before the window's start (an output of a wider
    /// window, such as the report's one query for its usage and its advice):
    /// not the window's, left out.
    #[serde(skip_serializing_if = "is_zero")]
    pub before_window: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A line that is not one of `sacct --parsable2` output of [`FIELDS`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    /// 1-based.
    pub line: u64,
    /// What is wrong, the line as an excerpt, and what was expected.
    pub why: String,
}

/// Why [`read`] stopped.
#[derive(Debug)]
pub enum ReadError {
    Io(std::io::Error),
    Line(Unreadable),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Io(e) => write!(f, "{e}"),
            ReadError::Line(u) => write!(f, "line {}: {}", u.line, u.why),
        }
    }
}

impl std::error::Error for ReadError {}

/// What [`read`] is asked: the window, the partitions (all when empty), and
/// whether to keep the replay's trace (`--trace-out`).
#[derive(Debug, Clone, Copy)]
pub struct Window<'a> {
    pub since: NaiveDateTime,
    pub until: NaiveDateTime,
    pub partitions: &'a [String],
    pub trace: bool,
}

/// The window's jobs for the replay (`bench/replay/`, its CSV rows without
/// the header), and how many the format cannot hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trace {
    pub rows: String,
    pub left_out: u64,
}

/// The window's GPU jobs as advise uses them.
#[derive(Debug, Clone, Default)]
pub struct History {
    /// The typed jobs as a demand arriving over time from the window's start.
    pub demand: Demand,
    pub counted: Counted,
    pub measured: Measured,
    pub skipped: Skipped,
    /// With [`Window::trace`].
    pub trace: Option<Trace>,
    /// The typed jobs of `demand`, one by one, with their needs
    /// (`advise::need`): what the plan is made from.
    pub jobs: super::need::Jobs,
    /// Where the needs came from.
    pub needs: super::need::Needs,
    /// Seconds of every measured wait, for the mean.
    waits_s: f64,
}

/// Read `sacct --parsable2 --noheader --format=FIELDS` output line by line:
/// memory holds one line and the jobs' demand, never the input.
pub fn read(mut input: impl BufRead, window: &Window<'_>) -> Result<History, ReadError> {
    let mut h = History {
        trace: window.trace.then(Trace::default),
        ..History::default()
    };
    let mut buf = Vec::with_capacity(1024);
    let mut number = 0u64;
    let mut read = 0u64;
    loop {
        buf.clear();
        let got = std::io::Read::take(&mut input, MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut buf)
            .map_err(ReadError::Io)?;
        if got == 0 {
            break;
        }
        number += 1;
        let bad = |why: String| ReadError::Line(Unreadable { line: number, why });
        if buf.len() > MAX_LINE_BYTES && buf.last() != Some(&b'\n') {
            // The last field, the comment, is the job owner's to write and may
            // be long: the line is read without it (the rest skipped, a
            // bounded chunk at a time) and the comment counted as refused.
            if let Some(cut) = comment_start(&buf) {
                skip_line(&mut input).map_err(ReadError::Io)?;
                buf.truncate(cut);
                h.needs.refused.malformed += 1;
                buf.push(b'\n');
            } else {
                return Err(bad(format!(
                    "longer than {MAX_LINE_BYTES} bytes ({}…); a line of sacct's output is a few \
                 hundred",
                    excerpt(&String::from_utf8_lossy(&buf[..80]))
                )));
            }
        }
        let bytes = buf.strip_suffix(b"\n").unwrap_or(&buf);
        let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
        if bytes.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        read += 1;
        if read > MAX_LINES {
            h.skipped.past_limit += 1;
            continue;
        }
        let line = std::str::from_utf8(bytes).map_err(|e| {
            let at = e.valid_up_to();
            bad(format!(
                "not text (byte 0x{:02x} at byte {} of the line: `{}`); {}",
                bytes[at],
                at + 1,
                excerpt(&String::from_utf8_lossy(bytes)),
                expected()
            ))
        })?;
        match parse_line(line).map_err(bad)? {
            Some(job) => h.add(&job, window),
            None => h.skipped.no_gpu += 1,
        }
    }
    if h.measured.started > 0 {
        h.measured.mean_wait_s = h.waits_s / h.measured.started as f64;
    }
    Ok(h)
}

/// Where the comment (the last of [`COLUMNS`] fields) starts in a line's
/// first bytes, when they hold every field before it.
fn comment_start(line: &[u8]) -> Option<usize> {
    line.iter()
        .enumerate()
        .filter(|(_, b)| **b == b'|')
        .nth(COLUMNS - 2)
        .map(|(i, _)| i + 1)
}

/// Read to the end of the line, a bounded chunk at a time.
fn skip_line(input: &mut impl BufRead) -> std::io::Result<()> {
    loop {
        let chunk = input.fill_buf()?;
        if chunk.is_empty() {
            return Ok(());
        }
        match chunk.iter().position(|b| *b == b'\n') {
            Some(i) => {
                input.consume(i + 1);
                return Ok(());
            }
            None => {
                let n = chunk.len();
                input.consume(n);
            }
        }
    }
}

/// [`read`] over text in memory (tests, a captured sacct output).
pub fn parse(text: &str, window: &Window<'_>) -> Result<History, ReadError> {
    read(text.as_bytes(), window)
}

/// A line as a message shows it: 80 characters, escaped.
fn excerpt(line: &str) -> String {
    crate::text::shown(line, 80)
}

/// What a line must be, for messages.
fn expected() -> String {
    format!("expected the {COLUMNS} fields {FIELDS}, in that order, separated by `|`, or the first {OLD_COLUMNS} of them (sacct -X --parsable2 --noheader --format=…)")
}

/// One line: a GPU job, `None` for a job that asked for no GPU, or why the
/// line is not one of [`FIELDS`].
fn parse_line(line: &str) -> Result<Option<PastJob<'_>>, String> {
    use crate::slurm::sacct::{window_row, RowError};
    let row = window_row(line).map_err(|e| {
        let c: Vec<&str> = line.splitn(COLUMNS, '|').collect();
        match e {
            RowError::Columns(n) => format!("{n} field(s) (`{}`); {}", excerpt(line), expected()),
            RowError::Submit => format!(
                "field 6 (Submit) is `{}`, not a time YYYY-MM-DDTHH:MM:SS (`{}`); {}",
                excerpt(c[5]),
                excerpt(line),
                expected()
            ),
            RowError::Elapsed => format!(
                "field 9 (ElapsedRaw) is `{}`, not whole seconds (`{}`); {}",
                excerpt(c[8]),
                excerpt(line),
                expected()
            ),
        }
    })?;
    // The allocation names the type Slurm gave an untyped request, but the
    // request is what any layout must serve; the allocation only fills in a
    // job that never recorded its request.
    let ask = gpu_ask(row.req_tres).or_else(|| gpu_ask(row.alloc_tres));
    let Some(ask) = ask else {
        return Ok(None);
    };
    Ok(Some(PastJob {
        id: row.id,
        partition: row.partition,
        account: row.account,
        user: row.user,
        usage_max: row.usage_max,
        comment: row.comment,
        state: row.state,
        ask,
        submit: row.submit,
        start: row.start,
        end: row.end,
        elapsed_s: row.elapsed_s,
        limit_s: row.limit_s,
    }))
}

/// The GPU part of a TRES list: a typed request wins over the untyped total
/// Slurm records beside it (`gres/gpu:1g.5gb=1,gres/gpu=1`).
fn gpu_ask(tres: &str) -> Option<GpuAsk> {
    let items = gres_in_tres(tres);
    let count = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
    if let Some(typed) = items
        .iter()
        .find(|i| i.name == "gpu" && i.kind.is_some() && i.count > 0)
    {
        return Some(GpuAsk::Typed {
            kind: crate::mig::profile::normalize_profile_name(
                typed.kind.as_deref().unwrap_or_default(),
            ),
            count: count(typed.count),
        });
    }
    if let Some(untyped) = items.iter().find(|i| i.name == "gpu" && i.count > 0) {
        return Some(GpuAsk::Untyped {
            count: count(untyped.count),
        });
    }
    items
        .iter()
        .find(|i| i.name == "shard" && i.count > 0)
        .map(|s| GpuAsk::Shards {
            count: count(s.count),
        })
}

/// How the window's jobs became demand, for the reader of the advice.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Counted {
    /// Typed jobs in the demand.
    pub jobs: u64,
    /// Of those, still running at the window's end: counted with their run time so far.
    pub running: u64,
    /// Of those, still pending: counted with their time limit (a day when unlimited).
    pub pending: u64,
    /// Of those, ran or were limited to more than 366 days, or asked for more
    /// than 64 instances: counted as 366 days and 64 instances, the most a
    /// demand file (node-setup) holds.
    pub clamped: u64,
    /// Cancelled before they started: they held nothing and are left out.
    pub cancelled_pending: u64,
    /// Untyped GPU requests: they fit any instance, so they change no layout; left out.
    pub untyped: u64,
    /// Shard requests (shares of whole GPUs): left out.
    pub shards: u64,
    /// Outside the partitions or nodes asked about.
    pub elsewhere: u64,
    /// Typed with a type no node can offer (not letters, digits, `.`, `_`,
    /// `+`, `-`, or longer than 64): left out.
    pub bad_type: u64,
    /// Submitted after the window's end: left out.
    pub after_window: u64,
}

/// An unlimited pending job counts as a day, as `auto` counts one.
const UNLIMITED_S: u64 = 24 * 3600;

/// Whole seconds from `from` to `to`, 0 when `to` is earlier.
fn secs(from: NaiveDateTime, to: NaiveDateTime) -> u64 {
    u64::try_from((to - from).num_seconds()).unwrap_or(0)
}

impl History {
    /// Fold one GPU job in: the demand, the measured waits, the trace.
    fn add(&mut self, job: &PastJob<'_>, w: &Window<'_>) {
        if job.end.is_some_and(|end| end < w.since) {
            self.skipped.before_window += 1;
            return;
        }
        if !job.in_partitions(w.partitions) {
            self.counted.elsewhere += 1;
            return;
        }
        self.measure(job);
        if let Some(trace) = &mut self.trace {
            match trace_row(job, w) {
                Some(row) => trace.rows.push_str(&row),
                None => trace.left_out += 1,
            }
        }
        let c = &mut self.counted;
        let (kind, count) = match &job.ask {
            GpuAsk::Typed { kind, count } => (kind, *count),
            GpuAsk::Untyped { .. } => {
                c.untyped += 1;
                return;
            }
            GpuAsk::Shards { .. } => {
                c.shards += 1;
                return;
            }
        };
        if !is_type_name(kind) {
            c.bad_type += 1;
            return;
        }
        if job.submit > w.until {
            c.after_window += 1;
            return;
        }
        let seconds = match (job.start, job.end) {
            (None, _) if job.state == "PENDING" => {
                c.pending += 1;
                job.limit_s.unwrap_or(UNLIMITED_S)
            }
            (None, _) => {
                c.cancelled_pending += 1;
                return;
            }
            (Some(start), None) => {
                c.running += 1;
                secs(start, w.until)
            }
            (Some(_), Some(_)) => job.elapsed_s,
        }
        .max(1);
        if seconds > MAX_SECONDS || count > MAX_COUNT {
            c.clamped += 1;
        }
        // The window is at most 366 days (`advise::run`), so is the arrival.
        let arrival = secs(w.since, job.submit).min(MAX_SECONDS);
        let (count, seconds) = (count.min(MAX_COUNT), seconds.min(MAX_SECONDS));
        self.demand.add_arriving(kind, count, seconds, arrival);
        c.jobs += 1;
        let (need_mib, source) = super::need::need_of(
            job.id,
            kind,
            job.comment,
            job.usage_max,
            &mut self.needs.refused,
        );
        let hours = seconds as f64 * f64::from(count) * super::simulate::gpu_share(kind) / 3600.0;
        let covered = match source {
            super::need::Source::Measured => &mut self.needs.measured,
            super::need::Source::Gpumem => &mut self.needs.gpumem,
            super::need::Source::Asked => &mut self.needs.asked,
        };
        covered.jobs += 1;
        covered.gpu_hours += hours;
        if source != super::need::Source::Measured
            && crate::slurm::comment::parse_comment(job.comment).is_some()
        {
            self.needs.tagged_unmeasured += 1;
        }
        let jobs = &mut self.jobs;
        let need = super::need::JobNeed {
            kind: jobs.kinds.id(kind),
            user: jobs.users.id(job.user),
            account: jobs.accounts.id(job.account),
            count,
            seconds,
            arrival_s: arrival,
            need_mib: need_mib.unwrap_or(0),
            wait_s: job.start.map(|s| secs(job.submit, s)),
            source,
        };
        jobs.list.push(need);
    }

    fn measure(&mut self, job: &PastJob<'_>) {
        let (GpuAsk::Typed { kind, count }, Some(start)) = (&job.ask, job.start) else {
            return;
        };
        let m = &mut self.measured;
        let wait = (start - job.submit).num_seconds().max(0);
        m.started += 1;
        self.waits_s += wait as f64;
        if wait > WAITED_S {
            m.waited += 1;
            m.waited_gpu_hours +=
                job.elapsed_s as f64 * f64::from(*count) * super::simulate::gpu_share(kind)
                    / 3600.0;
        }
    }
}

/// One row of the replay's trace: a typed job of one instance at its
/// submission, running as long as it ran, needing what its type holds less
/// the planner's 10 % headroom (so the replay's planner asks the same type),
/// a whole GPU as `gpu_fraction` 1. `None` for a job the format cannot hold
/// (several instances, untyped, never started, a type no built-in model has,
/// submitted after the window).
fn trace_row(job: &PastJob<'_>, w: &Window<'_>) -> Option<String> {
    let GpuAsk::Typed { kind, count: 1 } = &job.ask else {
        return None;
    };
    let (Some(_), Some(memory_mib)) = (job.start, super::simulate::memory_of(kind)) else {
        return None;
    };
    if job.submit > w.until {
        return None;
    }
    let submit_s = secs(w.since, job.submit);
    let duration_s = job.elapsed_s.clamp(1, MAX_SECONDS);
    let whole = !kind.contains("g.");
    let (mem, fraction) = if whole {
        (String::new(), "1".to_string())
    } else {
        // Hundredths of a GiB, rounded down, under the type's usable memory / 1.1.
        let gib = (memory_mib as f64 / 1024.0 / 1.1 * 100.0).floor() / 100.0;
        (format!("{gib:.2}"), String::new())
    };
    let user: String = job
        .user
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '@' | '-'))
        .take(64)
        .collect();
    Some(format!(
        "{submit_s},{duration_s},{mem},{fraction},{}\n",
        if user.is_empty() { "unknown" } else { &user }
    ))
}

/// What accounting itself says of the window's waits: the typed GPU jobs
/// that started, how many waited more than a minute (start − submit), and
/// the GPU-hours those held (a profile `Ng.*` is N/7 of a GPU).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Measured {
    pub started: u64,
    pub waited: u64,
    pub waited_gpu_hours: f64,
    pub mean_wait_s: f64,
}

/// A wait shorter than this is Slurm's own latency, not a queue.
pub const WAITED_S: i64 = 60;

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> NaiveDateTime {
        crate::slurm::time::parse_time(s).unwrap()
    }

    const SAMPLE: &str = "\
101|gpu|vision|alice|COMPLETED|2026-12-01T10:00:00|2026-12-01T10:00:05|2026-12-01T11:00:05|3600|120|billing=1,cpu=1,gres/gpu:1g.5gb=1,gres/gpu=1,mem=4133M,node=1|billing=1,cpu=1,gres/gpu:1g.5gb=1,gres/gpu=1,mem=4133M,node=1
102_3|gpu|vision|bob|CANCELLED by 1000|2026-12-01T10:10:00|Unknown|Unknown|0|60|billing=1,cpu=1,gres/gpu:a100=1,gres/gpu=1,node=1|
103|gpu|nlp|carol|RUNNING|2026-12-01T10:20:00|2026-12-01T10:30:00|Unknown|1800|UNLIMITED|cpu=8,gres/gpu=1,node=1|cpu=8,gres/gpu:a100=1,gres/gpu=1,node=1

104|cpu|nlp|carol|COMPLETED|2026-12-01T10:20:00|2026-12-01T10:20:01|2026-12-01T10:30:00|599|30|cpu=2,mem=4G,node=1|cpu=2,mem=4G,node=1
105|gpu|nlp|dave|PENDING|2026-12-01T11:00:00|Unknown|Unknown|0|240|cpu=2,gres/gpu:3g.20gb=2,node=1|
106|gpu|nlp|dave|RUNNING|2026-12-01T11:00:00|2026-12-01T11:30:00|Unknown|0|240|cpu=2,gres/gpu:2g.10gb=1,node=1|
107|gpu|nlp|erin|COMPLETED|2026-12-01T11:00:00|2026-12-01T11:00:00|2026-12-01T11:10:00|600|20|cpu=1,gres/shard=2,node=1|
";

    fn window(partitions: &[String]) -> Window<'_> {
        Window {
            since: t("2026-12-01T09:00:00"),
            until: t("2026-12-01T12:00:00"),
            partitions,
            trace: true,
        }
    }

    #[test]
    fn jobs_that_ended_before_the_window_are_left_out() {
        let text = "\
201|gpu|vision|alice|COMPLETED|2026-12-01T07:00:00|2026-12-01T07:00:05|2026-12-01T08:00:05|3600|120|cpu=1,gres/gpu:1g.5gb=1|cpu=1,gres/gpu:1g.5gb=1
202|gpu|vision|alice|COMPLETED|2026-12-01T08:00:00|2026-12-01T08:00:05|2026-12-01T09:30:05|5400|120|cpu=1,gres/gpu:1g.5gb=1|cpu=1,gres/gpu:1g.5gb=1
";
        let h = parse(text, &window(&[])).unwrap();
        assert_eq!(h.skipped.before_window, 1);
        assert_eq!(h.counted.jobs, 1, "the job that ran into the window counts");
    }

    #[test]
    fn jobs_become_demand_with_their_arrivals_and_real_run_times() {
        let h = parse(SAMPLE, &window(&[])).unwrap();
        assert_eq!(
            h.skipped,
            Skipped {
                no_gpu: 1,
                past_limit: 0,
                before_window: 0
            }
        );
        assert_eq!(
            h.counted,
            Counted {
                jobs: 3,
                running: 1,
                pending: 1,
                cancelled_pending: 1,
                untyped: 1,
                shards: 1,
                ..Counted::default()
            }
        );
        let d = &h.demand;
        // Ran an hour (not its two-hour limit), pending from 10:00.
        assert_eq!(d.queue("1g.5gb")[0].seconds, 3600);
        assert_eq!(d.queue("1g.5gb")[0].arrival_s, 3600);
        // Still pending: its four-hour limit, two instances.
        let p = d.queue("3g.20gb")[0];
        assert_eq!((p.count, p.seconds, p.arrival_s), (2, 4 * 3600, 7200));
        // Still running: from 11:30 to the window's end.
        assert_eq!(d.queue("2g.10gb")[0].seconds, 1800);
        // The untyped request's allocation (a100) is not its request.
        assert!(d.queue("a100").is_empty());
        // Another partition is left out and counted.
        let other = ["other".to_string()];
        let h = parse(SAMPLE, &window(&other)).unwrap();
        assert!(h.demand.is_empty());
        assert_eq!(h.counted.elsewhere, 6);
    }

    #[test]
    fn accountings_own_waits_are_measured() {
        let m = parse(SAMPLE, &window(&[])).unwrap().measured;
        // Typed and started: 101 (5 s), 106 (30 min on a 2g.10gb: 2/7 GPU).
        assert_eq!((m.started, m.waited), (2, 1));
        assert!((m.mean_wait_s - (5.0 + 1800.0) / 2.0).abs() < 1e-9);
        assert!(
            m.waited_gpu_hours.abs() < 1e-9,
            "106 has run 0 s so far: {m:?}"
        );
    }

    /// Issue 32, item 8: a saved output of 11 fields, of another field
    /// order, or binary is not a quiet window: the read stops at the line,
    /// saying what it expected.
    #[test]
    fn a_line_that_is_not_sacct_output_stops_the_read_at_its_number() {
        let good = SAMPLE.lines().next().unwrap();
        let eleven = "1|gpu|a|u|COMPLETED|2026-12-01T10:00:00|2026-12-01T10:00:00|2026-12-01T10:01:00|60|5|gres/gpu:1g.5gb=1";
        // The same job with User and Submit swapped.
        let order = "1|gpu|a|2026-12-01T10:00:00|COMPLETED|u|2026-12-01T10:00:00|2026-12-01T10:01:00|60|5|gres/gpu:1g.5gb=1|";
        let elapsed = "1|gpu|a|u|COMPLETED|2026-12-01T10:00:00|2026-12-01T10:00:00|2026-12-01T10:01:00|UNLIMITED|5|gres/gpu:1g.5gb=1|";
        for (bad, said) in [
            (eleven.to_string(), "11 field(s)"),
            (order.to_string(), "field 6 (Submit) is `u`"),
            (elapsed.to_string(), "field 9 (ElapsedRaw) is `UNLIMITED`"),
            (
                "\u{1b}[2J\u{7}".to_string(),
                "1 field(s) (`\\u{1b}[2J\\u{7}`)",
            ),
        ] {
            let text = format!("{good}\n\n{bad}\n{good}\n");
            let e = parse(&text, &window(&[])).unwrap_err();
            let ReadError::Line(u) = &e else {
                panic!("{e}")
            };
            assert_eq!(u.line, 3, "{e}");
            assert!(u.why.contains(said), "{bad:?}: {e}");
            assert!(u.why.contains(FIELDS), "{e}");
            assert!(!u.why.chars().any(char::is_control), "{e}");
        }
        let mut binary = format!("{good}\n").into_bytes();
        binary.extend_from_slice(b"\x7fELF\x02\x01\x01\x00\xff\xfe|x\n");
        let e = read(&binary[..], &window(&[])).unwrap_err().to_string();
        assert!(e.starts_with("line 2: not text (byte 0xff"), "{e}");
        let long = format!("{good}\n{}\n", "x".repeat(MAX_LINE_BYTES + 1));
        let e = parse(&long, &window(&[])).unwrap_err().to_string();
        assert!(e.starts_with("line 2: longer than 65536 bytes"), "{e}");
        assert!(e.len() < 400, "{e}");
        // An empty window is no error: no job, nothing to say.
        let h = parse("\n", &window(&[])).unwrap();
        assert_eq!((h.counted.jobs, h.skipped.no_gpu), (0, 0));
    }

    /// Issue 32, item 9: lines past the limit are counted, not kept, and
    /// memory holds one line at a time (a reader that never ends is read to
    /// its end in bounded memory: here 2,000,100 short lines).
    #[test]
    fn lines_past_the_limit_are_counted_not_read() {
        struct Lines {
            left: u64,
            line: &'static [u8],
            at: usize,
        }
        impl std::io::Read for Lines {
            fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
                if self.left == 0 {
                    return Ok(0);
                }
                let n = (self.line.len() - self.at).min(out.len());
                out[..n].copy_from_slice(&self.line[self.at..self.at + n]);
                self.at += n;
                if self.at == self.line.len() {
                    self.at = 0;
                    self.left -= 1;
                }
                Ok(n)
            }
        }
        let input = std::io::BufReader::new(Lines {
            left: MAX_LINES + 100,
            line: b"1|cpu|a|u|COMPLETED|2026-12-01T10:00:00|Unknown|Unknown|0|5|cpu=1|cpu=1\n",
            at: 0,
        });
        let h = read(input, &window(&[])).unwrap();
        assert_eq!(h.skipped.no_gpu, MAX_LINES);
        assert_eq!(h.skipped.past_limit, 100);
    }

    /// Issue 34: the comment's measurement and gpumem become each job's
    /// need, in that order; a measurement that names another job, or whose
    /// numbers are out of bounds, is refused and counted; a 12-field line
    /// (an output saved before advise read needs) is every job as asked.
    #[test]
    fn needs_come_from_the_comment_then_gpumem_then_the_type() {
        let line = |id: &str, usage: &str, comment: &str| {
            format!(
                "{id}|gpu|vision|alice|COMPLETED|2026-12-01T10:00:00|2026-12-01T10:00:00|2026-12-01T11:00:00|3600|120|gres/gpu:a100=1|gres/gpu:a100=1|{usage}|{comment}\n"
            )
        };
        let carrier = |job: &str, peak: &str| {
            format!("yolo-sched:r-1:ab:train ysneed=1;job={job};slice=a100;epochs=3;peak_mib={peak}/40960")
        };
        let text = [
            line("201", "", &carrier("201", "6144")),
            // Slurm 23.02+ with NVML: TRESUsageInMax in its own units.
            line("202", "cpu=00:10:00,gres/gpumem=6G,gres/gpuutil=80,mem=2G", ""),
            // The measurement wins over gpumem.
            line("203", "gres/gpumem=30G", &carrier("203", "2048")),
            line("204", "", "yolo-sched:r-1:ab:train"),
            line("205", "", &carrier("999", "100")),
            line("206", "", &carrier("206", "-5")),
            line("207", "", &carrier("207", "1000000000000000000000000000000")),
            line("208", "", &format!("{}\u{1b}[2J", carrier("208", "100"))),
            // More than an a100 holds: not this job's.
            line("209", "", &carrier("209", "60000").replace("40960", "81920")),
            // A comment with `|` in it stays one field.
            line("210", "", "odd|comment"),
            "211|gpu|vision|bob|COMPLETED|2026-12-01T10:00:00|2026-12-01T10:00:00|2026-12-01T11:00:00|3600|120|gres/gpu:a100=1|gres/gpu:a100=1\n".to_string(),
        ]
        .concat();
        let h = parse(&text, &window(&[])).unwrap();
        let n = &h.needs;
        assert_eq!(
            (n.measured.jobs, n.gpumem.jobs, n.asked.jobs),
            (2, 1, 8),
            "{n:?}"
        );
        assert!((n.measured.gpu_hours - 2.0).abs() < 1e-9, "{n:?}");
        assert_eq!(
            (
                n.refused.other_job,
                n.refused.bad_number,
                n.refused.malformed
            ),
            (1, 3, 1),
            "{n:?}"
        );
        assert_eq!(n.tagged_unmeasured, 6, "204 and the five refused");
        let need = |i: usize| h.jobs.list[i].need_mib;
        assert_eq!((need(0), need(1), need(2), need(3)), (6759, 6759, 2253, 0));
        // Planned on an A100-40GB: the measured and gpumem jobs fit 1g.10gb
        // (2g.10gb's memory is larger), the rest stay whole.
        let a100 = crate::mig::builtin::a100_40gb();
        let mut needs = h.needs.clone();
        let (demand, fits) = crate::advise::need::plan(&h.jobs, &[&a100], &mut needs);
        assert_eq!(demand.queue("1g.10gb").len(), 2);
        assert_eq!(demand.queue("1g.5gb").len(), 1, "2 GiB + 10 % fits 1g.5gb");
        assert_eq!(demand.queue("a100").len(), 8);
        assert_eq!(fits[0], "1g.10gb");
        assert_eq!(needs.smaller.jobs, 3);
        let o = crate::advise::need::oversized(&h.jobs, &fits, &|_| Some(0.0));
        let alice = o
            .iter()
            .find(|o| o.by == "user" && o.name == "alice")
            .unwrap();
        assert_eq!((alice.jobs, alice.measured_jobs), (3, 3), "{o:?}");
        assert!((alice.gpu_hours_asked - 3.0).abs() < 1e-9, "{o:?}");
        assert!(alice.gpu_hours_fit < 1.0, "{o:?}");
        assert_eq!(alice.moves.get("a100 → 1g.10gb"), Some(&2), "{o:?}");
        assert!(o.iter().any(|o| o.by == "account" && o.name == "vision"));
        assert!(!o.iter().any(|o| o.name == "bob"), "bob measured nothing");
    }

    /// Issue 32, item 7: what node-setup could not read of a job is clamped
    /// or left out here, and counted.
    #[test]
    fn jobs_past_what_a_demand_file_holds_are_clamped_or_left_out() {
        let job = |elapsed: &str, limit: &str, submit: &str, tres: &str| {
            format!(
                "9|gpu|a|u|COMPLETED|{submit}|2026-12-01T10:00:00|2026-12-01T11:00:00|{elapsed}|{limit}|{tres}|\n"
            )
        };
        let ok = "2026-12-01T10:00:00";
        let text = [
            job("34560000", "60", ok, "gres/gpu:1g.5gb=1"),
            job("60", "99999999999999999999", ok, "gres/gpu:1g.5gb=65"),
            job("60", "60", ok, "gres/gpu:1g.5gb=4294967296"),
            job("60", "60", "9999-12-31T23:59:59", "gres/gpu:1g.5gb=1"),
            job("60", "60", ok, "gres/gpu:1g\u{1b}[31m.5gb=1"),
            job("60", "60", ok, "gres/gpu=18446744073709551616"),
            job("60", "60", ok, &format!("gres/gpu:{}=1", "x".repeat(65))),
        ]
        .concat();
        let h = parse(&text, &window(&[])).unwrap();
        let c = &h.counted;
        assert_eq!(
            (c.jobs, c.clamped, c.after_window, c.bad_type, c.untyped),
            (3, 3, 1, 2, 0),
            "{c:?}"
        );
        assert_eq!(h.skipped.no_gpu, 1, "2^64 GPUs is no count, and no type");
        for r in h.demand.queue("1g.5gb") {
            assert!(r.count <= MAX_COUNT && r.seconds <= MAX_SECONDS, "{r:?}");
        }
        assert_eq!(h.demand.queue("1g.5gb")[0].seconds, MAX_SECONDS);
        assert_eq!(h.demand.queue("1g.5gb")[1].count, MAX_COUNT);
    }
}
