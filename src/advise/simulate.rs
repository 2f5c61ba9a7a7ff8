//! The window's jobs replayed, in simulation, on one set-up of the GPUs
//! (pure): what would have waited, for how long, and how full the GPUs were.
//!
//! A job asked for a type; what it needs is at most that type's memory. On
//! another set-up it asks for the smallest type offered there that holds as
//! much (what `gpu = "auto"` does at submission) and runs only on that type,
//! since Slurm matches GRES types exactly. Each type's queue then runs by the
//! rule `auto` optimises and the replay measures (`mig::demand::schedule`):
//! jobs in arrival order, each on the instances that free up first.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::mig::demand::schedule;
use crate::mig::{builtin, Demand, ProfileCounts, Request};

/// What one set-up would have done with the window's jobs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outcome {
    pub jobs: u64,
    /// Jobs no instance of the set-up holds, or that ask more instances than exist.
    pub never_run: u64,
    pub mean_wait_s: f64,
    pub p95_wait_s: u64,
    pub peak_concurrent: u64,
    /// Jobs running on average from the first arrival to the last end.
    pub mean_concurrent: f64,
    /// GPU-hours the jobs held (a profile `Ng.*` is N/7 of a GPU).
    pub gpu_hours_used: f64,
    /// GPU-hours the set-up offered over the same span.
    pub gpu_hours_offered: f64,
    /// First arrival to last end, seconds.
    pub span_s: u64,
    /// GPU memory the jobs that ran held (their instances' memory × hours),
    /// and the share of it they needed (their asked types' memory): a job
    /// moved to a bigger type holds more than it needs.
    pub memory_gib_hours_held: f64,
    pub memory_needed_share: f64,
    /// Per type of the demand: the jobs that ran and their summed wait,
    /// seconds (the advisor's per-user right-sizing reads it).
    #[serde(skip)]
    pub waits_by_kind: BTreeMap<String, (u64, f64)>,
}

impl Outcome {
    /// The mean wait of the jobs of one type of the demand that ran.
    pub fn mean_wait_of(&self, kind: &str) -> Option<f64> {
        self.waits_by_kind
            .get(kind)
            .filter(|(n, _)| *n > 0)
            .map(|(n, w)| w / *n as f64)
    }
}

impl Outcome {
    /// The order `auto` optimises: fewest never run, then least waiting.
    pub fn cost(&self) -> (u64, u128) {
        (
            self.never_run,
            (self.mean_wait_s * (self.jobs - self.never_run) as f64) as u128,
        )
    }
}

/// The memory a type holds, MiB: a MIG profile's, or a whole GPU's (its
/// largest profile, for the models yolo-sched knows). `None` for a type no
/// built-in model has (a `v100`): it serves only jobs that asked for it.
pub fn memory_of(kind: &str) -> Option<u64> {
    for g in builtin::all() {
        if let Some(p) = g.profile(kind) {
            return Some(p.memory_mib);
        }
        if crate::gres::render::gpu_type_name(g.model()) == kind {
            return g.profiles().iter().map(|p| p.memory_mib).max();
        }
    }
    None
}

/// The share of a GPU one instance of `kind` is: `Ng.*` is N/7, else 1.
pub fn gpu_share(kind: &str) -> f64 {
    match kind.split_once("g.") {
        Some((n, _)) => n.parse::<f64>().map_or(1.0, |n| n / 7.0),
        None => 1.0,
    }
}

/// Where a job that asked for `asked` runs on a set-up offering `offered`:
/// the type itself when offered; else the smallest offered type that holds
/// its memory (fewest GPU share among equals).
pub fn runs_on<'a>(asked: &str, offered: &'a ProfileCounts) -> Option<&'a str> {
    if offered.get(asked) > 0 {
        return offered.iter().find(|(k, _)| *k == asked).map(|(k, _)| k);
    }
    let need = memory_of(asked)?;
    offered
        .iter()
        .filter(|(_, n)| *n > 0)
        .filter_map(|(k, _)| memory_of(k).map(|m| (k, m)))
        .filter(|(_, m)| *m >= need)
        .min_by(|a, b| {
            a.1.cmp(&b.1)
                .then(gpu_share(a.0).total_cmp(&gpu_share(b.0)))
                .then(a.0.cmp(b.0))
        })
        .map(|(k, _)| k)
}

/// Replay `demand` on a set-up offering `offered` instances (every node's,
/// all free at the start).
pub fn simulate(demand: &Demand, offered: &ProfileCounts) -> Outcome {
    // Each asked type's jobs join the queue of the type they run on, in
    // arrival order (a stable merge keeps each type's queue order).
    let mut queues: BTreeMap<&str, Vec<Request>> = BTreeMap::new();
    // GiB-hours needed by the jobs of each queue that ran: summed below per
    // job through the asked type's memory.
    let mut need_of: BTreeMap<&str, Vec<(u64, f64, &str)>> = BTreeMap::new();
    let mut never_run = 0u64;
    let mut jobs = 0u64;
    for (asked, _) in demand.iter() {
        let q = demand.queue(asked);
        jobs += q.len() as u64;
        match runs_on(asked, offered) {
            Some(on) => {
                queues.entry(on).or_default().extend_from_slice(q);
                let need = memory_of(asked).or_else(|| memory_of(on)).unwrap_or(0) as f64 / 1024.0;
                need_of
                    .entry(on)
                    .or_default()
                    .extend(q.iter().map(|r| (r.arrival_s, need, asked)));
            }
            None => never_run += q.len() as u64,
        }
    }
    let mut waits: Vec<u64> = Vec::new();
    let mut events: Vec<(u64, i64)> = Vec::new();
    let (mut first, mut last) = (u64::MAX, 0u64);
    let mut used = 0.0;
    let (mut held_gib_h, mut needed_gib_h) = (0.0, 0.0);
    let mut waits_of: BTreeMap<&str, (u64, f64)> = BTreeMap::new();
    for (on, q) in &mut queues {
        // Sorted together, stably: each job keeps its asked type's memory.
        let mut paired: Vec<(Request, f64, &str)> = q
            .iter()
            .copied()
            .zip(
                need_of
                    .get(on)
                    .map_or(&[][..], Vec::as_slice)
                    .iter()
                    .map(|(_, n, k)| (*n, *k)),
            )
            .map(|(r, (n, k))| (r, n, k))
            .collect();
        paired.sort_by_key(|(r, _, _)| r.arrival_s);
        *q = paired.iter().map(|(r, _, _)| *r).collect();
        let needs: Vec<f64> = paired.iter().map(|(_, n, _)| *n).collect();
        let kinds: Vec<&str> = paired.iter().map(|(_, _, k)| *k).collect();
        let held = memory_of(on).unwrap_or(0) as f64 / 1024.0;
        let share = gpu_share(on);
        let mut index = 0usize;
        schedule(q, &[], offered.get(on), |job, start| {
            let need = needs.get(index).copied().unwrap_or(held);
            let kind = kinds.get(index).copied().unwrap_or(on);
            index += 1;
            first = first.min(job.arrival_s);
            match start {
                Some(start) => {
                    let end = start.saturating_add(job.seconds);
                    waits.push(start - job.arrival_s);
                    let w = waits_of.entry(kind).or_default();
                    w.0 += 1;
                    w.1 += (start - job.arrival_s) as f64;
                    events.push((start, 1));
                    events.push((end, -1));
                    last = last.max(end);
                    let hours = job.seconds as f64 * f64::from(job.count) / 3600.0;
                    used += hours * share;
                    held_gib_h += hours * held;
                    needed_gib_h += hours * need;
                }
                None => never_run += 1,
            }
        });
    }
    drop(need_of);
    // Ends before starts at the same moment: a slice freed is taken at once.
    events.sort_unstable();
    let (mut now, mut peak) = (0i64, 0i64);
    for (_, d) in &events {
        now += d;
        peak = peak.max(now);
    }
    let span_s = last.saturating_sub(if first == u64::MAX { 0 } else { first });
    waits.sort_unstable();
    let ran = waits.len();
    // Σ ends − Σ starts: the job-seconds run.
    let busy: f64 = events.iter().map(|(t, d)| -(*t as f64) * *d as f64).sum();
    let offered_gpus: f64 = offered
        .iter()
        .map(|(k, n)| gpu_share(k) * f64::from(n))
        .sum();
    Outcome {
        jobs,
        never_run,
        mean_wait_s: if ran == 0 {
            0.0
        } else {
            waits.iter().map(|&w| w as f64).sum::<f64>() / ran as f64
        },
        p95_wait_s: if ran == 0 {
            0
        } else {
            waits[(ran * 95).div_ceil(100).saturating_sub(1)]
        },
        peak_concurrent: u64::try_from(peak).unwrap_or(0),
        mean_concurrent: if span_s == 0 {
            0.0
        } else {
            busy / span_s as f64
        },
        gpu_hours_used: used,
        gpu_hours_offered: offered_gpus * span_s as f64 / 3600.0,
        span_s,
        memory_gib_hours_held: held_gib_h,
        memory_needed_share: if held_gib_h > 0.0 {
            needed_gib_h / held_gib_h
        } else {
            0.0
        },
        waits_by_kind: waits_of
            .into_iter()
            .map(|(k, w)| (k.to_string(), w))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(items: &[(&str, u32)]) -> ProfileCounts {
        let mut c = ProfileCounts::new();
        for (k, n) in items {
            c.add(k, *n);
        }
        c
    }

    #[test]
    fn a_job_runs_on_the_smallest_offered_type_that_holds_what_it_asked() {
        let all = counts(&[("1g.5gb", 7), ("3g.20gb", 2), ("a100", 1)]);
        assert_eq!(runs_on("1g.5gb", &all), Some("1g.5gb"));
        assert_eq!(runs_on("2g.10gb", &all), Some("3g.20gb"));
        assert_eq!(runs_on("7g.40gb", &all), Some("a100"));
        let small = counts(&[("1g.5gb", 7)]);
        assert_eq!(runs_on("a100", &small), None);
        // A type no model knows runs only on itself.
        assert_eq!(runs_on("v100", &all), None);
        assert_eq!(runs_on("v100", &counts(&[("v100", 1)])), Some("v100"));
    }

    #[test]
    fn waits_concurrency_and_gpu_hours_of_a_small_queue() {
        // Four one-hour 1g.5gb jobs at 0 on two instances: waits 0, 0, 1 h, 1 h.
        let mut d = Demand::new();
        for _ in 0..4 {
            d.add("1g.5gb", 1, 3600);
        }
        d.add("a100", 1, 600);
        let o = simulate(&d, &counts(&[("1g.5gb", 2)]));
        assert_eq!((o.jobs, o.never_run), (5, 1));
        assert_eq!(o.mean_wait_s, 1800.0);
        assert_eq!(o.p95_wait_s, 3600);
        assert_eq!(o.peak_concurrent, 2);
        assert_eq!(o.span_s, 7200);
        assert!((o.mean_concurrent - 2.0).abs() < 1e-9, "{o:?}");
        assert!((o.gpu_hours_used - 4.0 / 7.0).abs() < 1e-9);
        assert!((o.gpu_hours_offered - 2.0 * 2.0 / 7.0).abs() < 1e-9);
        assert!(
            (o.memory_needed_share - 1.0).abs() < 1e-9,
            "each ran on its own type"
        );
        // A whole GPU runs everything, one at a time, holding 8 times what a
        // 1g.5gb job needs (39.5 GiB against 4.75).
        let o = simulate(&d, &counts(&[("a100", 1)]));
        assert_eq!(o.never_run, 0);
        assert_eq!(o.peak_concurrent, 1);
        let small = memory_of("1g.5gb").unwrap() as f64;
        let whole = memory_of("a100").unwrap() as f64;
        let want = (4.0 * small + whole / 6.0) / (4.0 * whole + whole / 6.0);
        assert!((o.memory_needed_share - want).abs() < 1e-9, "{o:?}");
    }

    /// One rule for the advisor and `auto`: the waits the advisor reads sum
    /// to what `queue_cost` charges, on queues of every shape.
    #[test]
    fn the_advisor_and_auto_share_one_queue_rule() {
        let mut seed = 7u64;
        let mut next = |m: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % m
        };
        for _ in 0..200 {
            let mut q: Vec<Request> = (0..next(30))
                .map(|_| Request {
                    count: 1 + next(3) as u32,
                    seconds: 1 + next(7200),
                    arrival_s: next(7200),
                })
                .collect();
            q.sort_by_key(|r| r.arrival_s);
            let here = next(5) as u32;
            let (mut waits, mut never) = (0u128, 0u64);
            schedule(&q, &[], here, |j, s| match s {
                Some(s) => waits += u128::from(s - j.arrival_s),
                None => never += 1,
            });
            let c = crate::mig::demand::queue_cost(&q, &[], here);
            assert_eq!((c.never_start, c.wait_s), (never, waits));
        }
    }
}
