//! Last weeks' GPU jobs from Slurm's accounting, and the demand they make.
//!
//! One `sacct` call (`slurm::sacct::history`) gives every allocation of the
//! window, one line per job or array task; this module reads those lines
//! (pure, streaming, bounded) and turns the jobs that asked for a typed GPU
//! into a [`Demand`] that arrives over time: each job pending from its
//! submission, running for the time it actually ran.

use chrono::NaiveDateTime;
use serde::Serialize;

use crate::mig::Demand;
use crate::slurm::listing::{gres_in_tres, parse_time};

/// The fields asked of `sacct`, in the order [`parse_line`] reads them.
/// The TRES columns hold `,` and `=` but never `|`.
pub const FIELDS: &str =
    "JobIDRaw,Partition,Account,User,State,Submit,Start,End,ElapsedRaw,TimelimitRaw,ReqTRES,AllocTRES";
const COLUMNS: usize = 12;

/// The most lines read; a busy site's week is 10^4–10^5 GPU jobs.
pub const MAX_LINES: usize = 2_000_000;

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

/// One GPU job of the window as accounting recorded it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PastJob {
    pub id: String,
    pub partition: String,
    pub account: String,
    pub user: String,
    /// The base state (`COMPLETED`, `CANCELLED`, `RUNNING`, `PENDING`…).
    pub state: String,
    pub ask: GpuAsk,
    pub submit: NaiveDateTime,
    pub start: Option<NaiveDateTime>,
    pub end: Option<NaiveDateTime>,
    pub elapsed_s: u64,
    /// The time limit, seconds; `None` when unlimited.
    pub limit_s: Option<u64>,
}

impl PastJob {
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
    /// Lines without every field or with a submission time that is no time.
    pub unreadable: u64,
    /// Lines past [`MAX_LINES`].
    pub past_limit: u64,
}

/// The window's GPU jobs and what was skipped.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct History {
    pub jobs: Vec<PastJob>,
    pub skipped: Skipped,
}

/// Read `sacct --parsable2 --noheader --format=FIELDS` output.
pub fn parse(text: &str) -> History {
    let mut h = History::default();
    for (n, line) in text.lines().filter(|l| !l.trim().is_empty()).enumerate() {
        if n >= MAX_LINES {
            h.skipped.past_limit += 1;
            continue;
        }
        match parse_line(line) {
            Line::Job(job) => h.jobs.push(*job),
            Line::NoGpu => h.skipped.no_gpu += 1,
            Line::Unreadable => h.skipped.unreadable += 1,
        }
    }
    h
}

enum Line {
    Job(Box<PastJob>),
    NoGpu,
    Unreadable,
}

fn parse_line(line: &str) -> Line {
    let c: Vec<&str> = line.splitn(COLUMNS, '|').collect();
    if c.len() != COLUMNS {
        return Line::Unreadable;
    }
    let Some(submit) = parse_time(c[5]) else {
        return Line::Unreadable;
    };
    // The allocation names the type Slurm gave an untyped request, but the
    // request is what any layout must serve; the allocation only fills in a
    // job that never recorded its request.
    let ask = gpu_ask(c[10]).or_else(|| gpu_ask(c[11]));
    let Some(ask) = ask else {
        return Line::NoGpu;
    };
    Line::Job(Box::new(PastJob {
        id: c[0].to_string(),
        partition: c[1].to_string(),
        account: c[2].to_string(),
        user: c[3].to_string(),
        state: c[4]
            .split_whitespace()
            .next()
            .unwrap_or("")
            .trim_end_matches('+')
            .to_string(),
        ask,
        submit,
        start: parse_time(c[6]),
        end: parse_time(c[7]),
        elapsed_s: c[8].trim().parse().unwrap_or(0),
        limit_s: c[9]
            .trim()
            .parse::<u64>()
            .ok()
            .map(|m| m.saturating_mul(60)),
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
    /// Cancelled before they started: they held nothing and are left out.
    pub cancelled_pending: u64,
    /// Untyped GPU requests: they fit any instance, so they change no layout; left out.
    pub untyped: u64,
    /// Shard requests (shares of whole GPUs): left out.
    pub shards: u64,
    /// Outside the partitions or nodes asked about.
    pub elsewhere: u64,
}

/// An unlimited pending job counts as a day, as `auto` counts one.
const UNLIMITED_S: u64 = 24 * 3600;

/// The typed jobs of `history` in `partitions` (all when empty) as a demand
/// arriving over time from `since`; `until` ends the jobs still running.
pub fn demand(
    history: &History,
    since: NaiveDateTime,
    until: NaiveDateTime,
    partitions: &[String],
) -> (Demand, Counted) {
    let mut demand = Demand::new();
    let mut counted = Counted::default();
    let secs = |from: NaiveDateTime, to: NaiveDateTime| {
        u64::try_from((to - from).num_seconds()).unwrap_or(0)
    };
    for job in &history.jobs {
        if !job.in_partitions(partitions) {
            counted.elsewhere += 1;
            continue;
        }
        let (kind, count) = match &job.ask {
            GpuAsk::Typed { kind, count } => (kind, *count),
            GpuAsk::Untyped { .. } => {
                counted.untyped += 1;
                continue;
            }
            GpuAsk::Shards { .. } => {
                counted.shards += 1;
                continue;
            }
        };
        let seconds = match (job.start, job.end) {
            (None, _) if job.state == "PENDING" => {
                counted.pending += 1;
                job.limit_s.unwrap_or(UNLIMITED_S)
            }
            (None, _) => {
                counted.cancelled_pending += 1;
                continue;
            }
            (Some(start), None) => {
                counted.running += 1;
                secs(start, until)
            }
            (Some(_), Some(_)) => job.elapsed_s,
        }
        .max(1);
        demand.add_arriving(kind, count, seconds, secs(since, job.submit));
        counted.jobs += 1;
    }
    (demand, counted)
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

/// [`Measured`] over the typed jobs of `history` in `partitions` (all when empty).
pub fn measured(history: &History, partitions: &[String]) -> Measured {
    let mut m = Measured::default();
    let mut total = 0.0;
    for job in &history.jobs {
        let (GpuAsk::Typed { kind, count }, Some(start), true) =
            (&job.ask, job.start, job.in_partitions(partitions))
        else {
            continue;
        };
        let wait = (start - job.submit).num_seconds().max(0);
        m.started += 1;
        total += wait as f64;
        if wait > WAITED_S {
            m.waited += 1;
            m.waited_gpu_hours +=
                job.elapsed_s as f64 * f64::from(*count) * super::simulate::gpu_share(kind)
                    / 3600.0;
        }
    }
    if m.started > 0 {
        m.mean_wait_s = total / m.started as f64;
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> NaiveDateTime {
        parse_time(s).unwrap()
    }

    const SAMPLE: &str = "\
101|gpu|vision|alice|COMPLETED|2026-12-01T10:00:00|2026-12-01T10:00:05|2026-12-01T11:00:05|3600|120|billing=1,cpu=1,gres/gpu:1g.5gb=1,gres/gpu=1,mem=4133M,node=1|billing=1,cpu=1,gres/gpu:1g.5gb=1,gres/gpu=1,mem=4133M,node=1
102_3|gpu|vision|bob|CANCELLED by 1000|2026-12-01T10:10:00|Unknown|Unknown|0|60|billing=1,cpu=1,gres/gpu:a100=1,gres/gpu=1,node=1|
103|gpu|nlp|carol|RUNNING|2026-12-01T10:20:00|2026-12-01T10:30:00|Unknown|1800|UNLIMITED|cpu=8,gres/gpu=1,node=1|cpu=8,gres/gpu:a100=1,gres/gpu=1,node=1
104|cpu|nlp|carol|COMPLETED|2026-12-01T10:20:00|2026-12-01T10:20:01|2026-12-01T10:30:00|599|30|cpu=2,mem=4G,node=1|cpu=2,mem=4G,node=1
105|gpu|nlp|dave|PENDING|2026-12-01T11:00:00|Unknown|Unknown|0|240|cpu=2,gres/gpu:3g.20gb=2,node=1|
106|gpu|nlp|dave|RUNNING|2026-12-01T11:00:00|2026-12-01T11:30:00|Unknown|0|240|cpu=2,gres/gpu:2g.10gb=1,node=1|
107|gpu|nlp|erin|COMPLETED|2026-12-01T11:00:00|2026-12-01T11:00:00|2026-12-01T11:10:00|600|20|cpu=1,gres/shard=2,node=1|
broken line
108|gpu|x|y|COMPLETED|yesterday|Unknown|Unknown|0|1|gres/gpu:1g.5gb=1|
";

    #[test]
    fn a_window_of_accounting_reads_as_typed_untyped_and_shard_jobs() {
        let h = parse(SAMPLE);
        assert_eq!(h.jobs.len(), 6);
        assert_eq!(h.skipped.no_gpu, 1);
        assert_eq!(h.skipped.unreadable, 2);
        assert_eq!(
            h.jobs[0].ask,
            GpuAsk::Typed {
                kind: "1g.5gb".into(),
                count: 1
            }
        );
        assert_eq!(h.jobs[1].id, "102_3");
        assert_eq!(h.jobs[1].state, "CANCELLED");
        // The request was untyped; the allocation's a100 is not the request.
        assert_eq!(h.jobs[2].ask, GpuAsk::Untyped { count: 1 });
        assert_eq!(h.jobs[2].limit_s, None);
        assert_eq!(h.jobs[3].limit_s, Some(240 * 60));
        assert_eq!(h.jobs[5].ask, GpuAsk::Shards { count: 2 });
    }

    #[test]
    fn jobs_become_demand_with_their_arrivals_and_real_run_times() {
        let h = parse(SAMPLE);
        let since = t("2026-12-01T09:00:00");
        let until = t("2026-12-01T12:00:00");
        let (d, c) = demand(&h, since, until, &[]);
        assert_eq!(
            c,
            Counted {
                jobs: 3,
                running: 1,
                pending: 1,
                cancelled_pending: 1,
                untyped: 1,
                shards: 1,
                elsewhere: 0
            }
        );
        // Ran an hour (not its two-hour limit), pending from 10:00.
        assert_eq!(d.queue("1g.5gb")[0].seconds, 3600);
        assert_eq!(d.queue("1g.5gb")[0].arrival_s, 3600);
        // Still pending: its four-hour limit, two instances.
        let p = d.queue("3g.20gb")[0];
        assert_eq!((p.count, p.seconds, p.arrival_s), (2, 4 * 3600, 7200));
        // Still running: from 11:30 to the window's end.
        assert_eq!(d.queue("2g.10gb")[0].seconds, 1800);
        // Another partition is left out and counted.
        let (d, c) = demand(&h, since, until, &["other".into()]);
        assert!(d.is_empty());
        assert_eq!(c.elsewhere, 6);
    }

    #[test]
    fn accountings_own_waits_are_measured() {
        let h = parse(SAMPLE);
        let m = measured(&h, &[]);
        // Typed and started: 101 (5 s), 106 (30 min on a 2g.10gb: 2/7 GPU).
        assert_eq!((m.started, m.waited), (2, 1));
        assert!((m.mean_wait_s - (5.0 + 1800.0) / 2.0).abs() < 1e-9);
        assert!(
            m.waited_gpu_hours.abs() < 1e-9,
            "106 has run 0 s so far: {m:?}"
        );
    }

    #[test]
    fn a_line_missing_a_field_is_unreadable() {
        let line = "1|gpu|a|u|COMPLETED|2026-12-01T10:00:00|2026-12-01T10:00:00|2026-12-01T10:01:00|60|5|gres/gpu:1g.5gb=1\n";
        let mut text = String::new();
        for _ in 0..3 {
            text.push_str(line);
        }
        let h = parse(&text);
        assert_eq!(h.jobs.len(), 0, "11 fields are not 12");
        assert_eq!(h.skipped.unreadable, 3);
    }
}
