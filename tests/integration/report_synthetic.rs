//! A synthetic 100,000-job `squeue` listing in the compact format, made by a
//! generator that keeps its own tally of what it wrote; the report's
//! aggregation must arrive at the same numbers.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use chrono::{NaiveDateTime, TimeDelta};
use yolo_sched::report::queue::QueueAggregator;
use yolo_sched::report::Filter;
use yolo_sched::slurm::squeue::SEPARATOR;
use yolo_sched::slurm::time;

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len() as u64) as usize]
    }
}

/// What the generator wrote, tallied independently of the code under test.
#[derive(Debug, Default)]
struct Tally {
    lines: u64,
    running: u64,
    pending: u64,
    /// (partition, type) → [running jobs, pending jobs, running slices, pending slices]
    rows: BTreeMap<(String, String), [u64; 4]>,
    reasons: BTreeMap<String, u64>,
    never_runnable: u64,
    /// type → every pending job's wait, one entry per array task
    waits: BTreeMap<String, Vec<i64>>,
    oldest: Option<(NaiveDateTime, String)>,
    /// (user, account, type) → slices held
    held: BTreeMap<(String, String, String), u64>,
}

const PENDING_REASONS: [&str; 8] = [
    "Resources",
    "Priority",
    "Priority",
    "Dependency",
    "DependencyNeverSatisfied",
    "BadConstraints",
    "ReqNodeNotAvail, UnavailableNodes:node[3-4]",
    "QOSMaxJobsPerUserLimit",
];

fn generate(jobs: usize, seed: u64, now: NaiveDateTime) -> (String, Tally) {
    let mut rng = Rng(seed);
    let mut out = String::with_capacity(jobs * 140);
    let mut t = Tally::default();
    for i in 0..jobs {
        let id = 1000 + i as u64;
        let user = format!("u{:02}", rng.below(64));
        let account = if rng.below(10) == 0 {
            String::new()
        } else {
            format!("acct{}", &user[1..2])
        };
        let partition = rng.pick(&[
            "gpu", "gpu", "gpu", "gpu", "gpu", "gpu", "gpu", "cpu", "cpu", "gpu,cpu",
        ]);
        let submitted = now - TimeDelta::seconds(rng.below(7 * 86_400) as i64);
        let roll = rng.below(100);
        let state = match roll {
            0..=44 => "RUNNING",
            45..=49 => "COMPLETING",
            50..=84 => "PENDING",
            85..=87 => "REQUEUE_HOLD",
            88..=93 => "COMPLETED",
            94..=96 => "FAILED",
            _ => "CANCELLED",
        };
        let running = matches!(state, "RUNNING" | "COMPLETING");
        let pending = matches!(state, "PENDING" | "REQUEUE_HOLD");
        // Pending arrays: one line for many tasks.
        let (job_id, tasks_in_line) = if pending && rng.below(10) == 0 {
            let first = rng.below(5);
            let count = 1 + rng.below(40);
            if rng.below(2) == 0 {
                (format!("{id}_[{first}-{}%4]", first + count - 1), count)
            } else {
                (
                    format!("{id}_[{first},{}-{}]", first + 10, first + 9 + count),
                    count + 1,
                )
            }
        } else if running && rng.below(10) == 0 {
            (format!("{id}_{}", rng.below(8)), 1)
        } else {
            (id.to_string(), 1)
        };
        let nodes = 1 + rng.below(2);
        let tasks = 1 + rng.below(4);
        let count = 1 + rng.below(2);
        let (mut per_node, mut per_job, mut per_task, mut alloc) = (
            "N/A".to_string(),
            "N/A".to_string(),
            "N/A".to_string(),
            "cpu=1,node=1,billing=1".to_string(),
        );
        // The type and slices per job the tally expects.
        let (kind, slices): (&str, u64) = match rng.below(6) {
            0 => {
                per_node = format!("gres:gpu:1g.5gb:{count}");
                ("gpu:1g.5gb", count * nodes)
            }
            1 => {
                per_job = format!("gres:gpu:2g.10gb:{count}");
                ("gpu:2g.10gb", count)
            }
            2 => {
                per_task = format!("gres/gpu:3g.20gb={count}");
                ("gpu:3g.20gb", count * tasks)
            }
            3 => {
                per_node = "gres:gpu:1".to_string();
                if running {
                    alloc = format!("cpu=1,gres/gpu:1g.5gb={nodes},gres/gpu={nodes},node={nodes}");
                    ("gpu:1g.5gb", nodes)
                } else {
                    ("gpu", nodes)
                }
            }
            4 => {
                per_node = format!("gres:shard:{count}");
                ("shard", count * nodes)
            }
            _ => ("none", 0),
        };
        let reason = if pending {
            rng.pick(&PENDING_REASONS)
        } else if running {
            "None"
        } else {
            "NonZeroExitCode"
        };
        let dependency = if reason.starts_with("Dependency") {
            format!("afterok:{}(failed)", id - 1)
        } else {
            "(null)".to_string()
        };
        let fields = [
            job_id.as_str(),
            state,
            partition,
            &user,
            if account.is_empty() {
                "(null)"
            } else {
                &account
            },
            &submitted.format("%Y-%m-%dT%H:%M:%S").to_string(),
            &nodes.to_string(),
            &tasks.to_string(),
            &per_node,
            &per_job,
            &per_task,
            &alloc,
            &dependency,
            reason,
        ];
        for f in fields {
            out.push_str(f);
            out.push(SEPARATOR);
        }
        out.push('\n');
        t.lines += 1;

        if running {
            t.running += 1;
            let r = t.rows.entry((partition.into(), kind.into())).or_default();
            r[0] += 1;
            r[2] += slices;
            if kind != "none" {
                *t.held.entry((user, account, kind.into())).or_default() += slices;
            }
        } else if pending {
            t.pending += tasks_in_line;
            let r = t.rows.entry((partition.into(), kind.into())).or_default();
            r[1] += tasks_in_line;
            r[3] += slices * tasks_in_line;
            let code = reason.split(',').next().unwrap();
            *t.reasons.entry(code.into()).or_default() += tasks_in_line;
            if matches!(code, "DependencyNeverSatisfied" | "BadConstraints") {
                t.never_runnable += tasks_in_line;
            }
            let wait = (now - submitted).num_seconds();
            let w = t.waits.entry(kind.into()).or_default();
            w.extend(std::iter::repeat_n(wait, tasks_in_line as usize));
            if t.oldest.as_ref().is_none_or(|(s, _)| submitted < *s) {
                t.oldest = Some((submitted, job_id.clone()));
            }
        }
    }
    (out, t)
}

fn lower_median(values: &mut [i64]) -> i64 {
    values.sort_unstable();
    values[(values.len() - 1) / 2]
}

#[test]
fn hundred_thousand_jobs_aggregate_to_the_generators_numbers() {
    let now = time::parse_time("2026-11-30T12:00:00").unwrap();
    let (listing, mut expect) = generate(100_000, 0x5eed_1234_abcd_ef01, now);
    assert!(listing.len() > 10_000_000, "{} bytes", listing.len());

    let mut agg = QueueAggregator::new(now, Filter::default());
    agg.add_text(&listing);
    let (q, held, _) = agg.finish();

    assert_eq!(q.unparsed_lines, 0, "{:?}", q.first_unparsed);
    assert_eq!(q.running_jobs, expect.running);
    assert_eq!(q.pending_jobs, expect.pending);
    assert!(
        expect.running > 40_000 && expect.pending > 40_000,
        "{expect:?}"
    );

    let rows: BTreeMap<(String, String), [u64; 4]> = q
        .by_partition_type
        .iter()
        .map(|r| {
            (
                (r.partition.clone(), r.kind.clone()),
                [
                    r.running_jobs,
                    r.pending_jobs,
                    r.running_slices,
                    r.pending_slices,
                ],
            )
        })
        .collect();
    assert_eq!(rows, expect.rows);

    let reasons: BTreeMap<String, u64> = q
        .pending_reasons
        .iter()
        .map(|r| (r.reason.clone(), r.jobs))
        .collect();
    assert_eq!(reasons, expect.reasons);
    assert_eq!(q.never_runnable_jobs, expect.never_runnable);
    assert_eq!(q.never_runnable.len(), 100, "listed: the oldest 100");
    assert!(q
        .never_runnable
        .windows(2)
        .all(|w| w[0].submitted <= w[1].submitted));

    for t in &q.by_type {
        let expected = expect.waits.get_mut(&t.kind).map(|w| lower_median(w));
        assert_eq!(t.median_wait_seconds, expected, "median wait of {}", t.kind);
    }
    let (oldest_at, oldest_id) = expect.oldest.unwrap();
    let oldest = q.oldest_pending.unwrap();
    assert_eq!(oldest.job_id, oldest_id);
    assert_eq!(oldest.wait_seconds, (now - oldest_at).num_seconds());

    let held: BTreeMap<(String, String, String), u64> = held
        .into_iter()
        .map(|h| ((h.user, h.account, h.kind), h.slices))
        .collect();
    assert_eq!(held, expect.held);
}

#[test]
fn a_user_filter_keeps_only_that_users_jobs() {
    let now = time::parse_time("2026-11-30T12:00:00").unwrap();
    let (listing, _) = generate(5_000, 42, now);
    let (all, _) = yolo_sched::report::queue::aggregate(&listing, now, Filter::default());
    let mut sum = 0;
    for u in 0..64 {
        let f = Filter {
            user: Some(format!("u{u:02}")),
            ..Filter::default()
        };
        sum += yolo_sched::report::queue::aggregate(&listing, now, f)
            .0
            .running_jobs;
    }
    assert_eq!(sum, all.running_jobs);
}

/// Writes a listing for benchmarks (`YOLO_SCHED_SYNTH_OUT=<file>
/// YOLO_SCHED_SYNTH_JOBS=100000 cargo test --test integration write_listing`);
/// without the variable, a small one in a temporary directory. Either way the
/// written listing is read back and must hold what the generator counted.
#[test]
fn write_listing() {
    let dir = tempfile::tempdir().unwrap();
    let path = std::env::var("YOLO_SCHED_SYNTH_OUT")
        .unwrap_or_else(|_| dir.path().join("listing.txt").display().to_string());
    let jobs: usize = std::env::var("YOLO_SCHED_SYNTH_JOBS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2_000);
    let now = chrono::Local::now().naive_local();
    let (listing, t) = generate(jobs, 7, now);
    std::fs::write(&path, &listing).unwrap();
    let mut summary = String::new();
    let _ = writeln!(summary, "running {} pending {}", t.running, t.pending);
    std::fs::write(format!("{path}.expected"), &summary).unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), listing);
    assert_eq!(listing.lines().count(), jobs, "one line per job");
    assert_eq!(
        std::fs::read_to_string(format!("{path}.expected")).unwrap(),
        summary
    );
}
