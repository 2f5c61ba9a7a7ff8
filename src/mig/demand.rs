//! What `auto` plans for: the pending queue, by the GRES type each job asks
//! for, and the instances of those types that other nodes already offer.
//!
//! The cost of a queue is simulated, not estimated: jobs start in queue order,
//! each on the `count` instances of its type that free up first (instances on
//! other nodes free up when their running job's time is up, this node's are
//! free at once), and the cost is the number of jobs that can never start and
//! the sum of the others' waits. That is the quantity the replay measures
//! (`bench/replay/`), so the objective and the measurement agree.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use serde::Serialize;

use super::profile::normalize_profile_name;

/// Pending jobs `auto` reads at most (from squeue or a demand file): the
/// simulation is linear in them, and a bigger queue changes no layout.
pub const MAX_JOBS: u64 = 200_000;

/// The longest time limit and the latest arrival a demand file may give: 366
/// days, in seconds. `advise --demand-out` writes within it.
pub const MAX_SECONDS: u64 = 366 * 86_400;

/// The most instances one line of a demand file may ask for.
pub const MAX_COUNT: u32 = 64;

/// The longest GRES type a demand file may name.
pub const MAX_TYPE_CHARS: usize = 64;

/// Letters, digits, `.`, `_`, `+`, `-`, 1 to [`MAX_TYPE_CHARS`] of them.
fn type_chars(kind: &str) -> bool {
    !kind.is_empty()
        && kind.len() <= MAX_TYPE_CHARS
        && kind
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '+' | '-'))
}

/// Whether a demand file may name `kind` as a GRES type: [`type_chars`], and
/// not all digits (that is an untyped count).
pub fn is_type_name(kind: &str) -> bool {
    type_chars(kind) && !kind.chars().all(|c| c.is_ascii_digit())
}

/// One pending job: `count` instances of its type for `seconds`, pending from
/// `arrival_s` seconds from now (0: pending now; a demand file may give later
/// arrivals, e.g. a trace).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Request {
    pub count: u32,
    pub seconds: u64,
    pub arrival_s: u64,
}

/// The pending queue by GRES type, and what other nodes offer of each type.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Demand {
    /// Pending jobs per type (normalized profile name, or a whole-GPU type
    /// such as `a100`), in queue order (priority, then submission).
    queues: BTreeMap<String, Vec<Request>>,
    /// Instances of each type on other usable nodes: seconds until each is
    /// free (0 = idle now).
    elsewhere: BTreeMap<String, Vec<u64>>,
    /// Instances of each type on this node that the plan does not change (a
    /// GPU without MIG, or one another layout entry selects): free now.
    fixed: BTreeMap<String, u32>,
}

/// The cost of one type's queue: jobs that never start, then the sum of waits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct QueueCost {
    pub never_start: u64,
    pub wait_s: u128,
}

impl std::ops::Add for QueueCost {
    type Output = QueueCost;
    fn add(self, o: QueueCost) -> QueueCost {
        QueueCost {
            never_start: self.never_start + o.never_start,
            wait_s: self.wait_s + o.wait_s,
        }
    }
}

impl Demand {
    pub fn new() -> Demand {
        Demand::default()
    }

    /// One more pending job of type `kind` asking for `count` instances for
    /// `seconds`. A request for no instance asks for nothing and is dropped.
    pub fn add(&mut self, kind: &str, count: u32, seconds: u64) {
        self.add_arriving(kind, count, seconds, 0);
    }

    /// As `add`, for a job that becomes pending `arrival_s` seconds from now.
    /// Jobs of a type are kept in arrival order (queue order among equals).
    pub fn add_arriving(&mut self, kind: &str, count: u32, seconds: u64, arrival_s: u64) {
        if count == 0 {
            return;
        }
        let request = Request {
            count,
            seconds,
            arrival_s,
        };
        let queue = match self.queues.get_mut(kind) {
            Some(q) => q,
            None => self.queues.entry(normalize_profile_name(kind)).or_default(),
        };
        // Stable: a later arrival goes after every job that arrives no later.
        let at = queue.partition_point(|r| r.arrival_s <= arrival_s);
        queue.insert(at, request);
    }

    /// `jobs` pending jobs of one instance each, an hour long (tests, benches).
    pub fn add_jobs(&mut self, kind: &str, jobs: u64) {
        for _ in 0..jobs {
            self.add(kind, 1, 3600);
        }
    }

    /// An instance of `kind` on another node, free in `free_in_s` seconds.
    pub fn offer_elsewhere(&mut self, kind: &str, free_in_s: u64) {
        self.elsewhere
            .entry(normalize_profile_name(kind))
            .or_default()
            .push(free_in_s);
    }

    /// `n` instances of `kind` on this node that the plan leaves as they are.
    pub fn offer_fixed(&mut self, kind: &str, n: u32) {
        if n > 0 {
            *self.fixed.entry(normalize_profile_name(kind)).or_default() += n;
        }
    }

    /// Instances of `kind` on this node that the plan does not change.
    pub fn fixed(&self, kind: &str) -> u32 {
        self.fixed
            .get(&normalize_profile_name(kind))
            .copied()
            .unwrap_or(0)
    }

    /// Pending jobs of `kind`.
    pub fn jobs(&self, kind: &str) -> u64 {
        self.queue(kind).len() as u64
    }

    pub fn queue(&self, kind: &str) -> &[Request] {
        self.queues
            .get(&normalize_profile_name(kind))
            .map_or(&[], Vec::as_slice)
    }

    /// Instances of `kind` on other nodes.
    pub fn elsewhere(&self, kind: &str) -> &[u64] {
        self.elsewhere
            .get(&normalize_profile_name(kind))
            .map_or(&[], Vec::as_slice)
    }

    /// Types with pending jobs, and how many.
    pub fn iter(&self) -> impl Iterator<Item = (&str, u64)> {
        self.queues
            .iter()
            .filter(|(_, q)| !q.is_empty())
            .map(|(k, q)| (k.as_str(), q.len() as u64))
    }

    /// No pending job.
    pub fn is_empty(&self) -> bool {
        self.queues.values().all(Vec::is_empty)
    }

    pub fn total(&self) -> u64 {
        self.queues.values().map(|q| q.len() as u64).sum()
    }

    /// The cost of `kind`'s queue when the plan gives this node `here`
    /// instances of it (besides the fixed ones).
    pub fn cost(&self, kind: &str, here: u32) -> QueueCost {
        queue_cost(
            self.queue(kind),
            self.elsewhere(kind),
            here.saturating_add(self.fixed(kind)),
        )
    }

    /// Parse a demand file: CSV with the header `gres,time_limit_s,jobs`, one
    /// line per kind of pending job (`gpu:1g.5gb:1,3600,40`); `jobs` may be
    /// left out (1); `#` starts a comment line. Errors name the line.
    pub fn parse_file(text: &str, origin: &str) -> Result<Demand, String> {
        let mut demand = Demand::new();
        let mut lines = text
            .lines()
            .enumerate()
            .map(|(i, l)| (i + 1, l.trim()))
            .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'));
        let Some((n, header)) = lines.next() else {
            return Err(format!(
                "{origin}: empty; expected the header `gres,time_limit_s,jobs` and one line per kind of pending job"
            ));
        };
        let columns: Vec<&str> = header.split(',').map(str::trim).collect();
        let known: [&[&str]; 3] = [
            &["gres", "time_limit_s"],
            &["gres", "time_limit_s", "jobs"],
            &["gres", "time_limit_s", "jobs", "submit_s"],
        ];
        if !known.contains(&columns.as_slice()) {
            return Err(format!(
                "{origin}:{n}: header is `{}`; expected `gres,time_limit_s,jobs` \
                 (and optionally `,submit_s`)",
                clip(header)
            ));
        }
        let mut total = 0u64;
        for (n, line) in lines {
            let fields: Vec<&str> = line.split(',').map(str::trim).collect();
            if fields.len() != columns.len() {
                return Err(format!(
                    "{origin}:{n}: {} field(s); expected {} (`{}`)",
                    fields.len(),
                    columns.len(),
                    columns.join(",")
                ));
            }
            let (kind, count) = parse_gres(fields[0])
                .map_err(|e| format!("{origin}:{n}: gres `{}`: {e}", clip(fields[0])))?;
            let seconds: u64 = fields[1]
                .parse()
                .ok()
                .filter(|s| (1..=MAX_SECONDS).contains(s))
                .ok_or_else(|| {
                    format!(
                        "{origin}:{n}: time_limit_s `{}`: expected whole seconds from 1 to 31622400 (366 days)",
                        clip(fields[1])
                    )
                })?;
            let jobs: u64 = match fields.get(2) {
                None | Some(&"") => 1,
                Some(v) => v.parse().ok().filter(|j| *j >= 1).ok_or_else(|| {
                    format!(
                        "{origin}:{n}: jobs `{}`: expected a whole number of jobs, at least 1",
                        clip(v)
                    )
                })?,
            };
            let arrival: u64 = match fields.get(3) {
                None | Some(&"") => 0,
                Some(v) => v
                    .parse()
                    .ok()
                    .filter(|s| *s <= MAX_SECONDS)
                    .ok_or_else(|| {
                        format!(
                            "{origin}:{n}: submit_s `{}`: expected whole seconds from now, 0 to 31622400",
                            clip(v)
                        )
                    })?,
            };
            total = total.saturating_add(jobs);
            if total > MAX_JOBS {
                return Err(format!(
                    "{origin}:{n}: more than {MAX_JOBS} pending jobs in all; a queue that long plans \
                     the same layout as a sample of it: scale the `jobs` column down"
                ));
            }
            for _ in 0..jobs {
                demand.add_arriving(&kind, count, seconds, arrival);
            }
        }
        Ok(demand)
    }
}

/// `gpu:1g.5gb:2` → (`1g.5gb`, 2); `gpu:a100` → (`a100`, 1).
fn parse_gres(value: &str) -> Result<(String, u32), String> {
    let mut parts = value.split(':');
    if parts.next() != Some("gpu") {
        return Err("expected `gpu:<type>:<count>`, e.g. `gpu:1g.5gb:1` or `gpu:a100:1`".into());
    }
    let kind = parts
        .next()
        .filter(|k| type_chars(k))
        .ok_or("expected a GRES type after `gpu:` (letters, digits, `.`, `_`, `+`, `-`)")?;
    if kind.chars().all(|c| c.is_ascii_digit()) {
        return Err("an untyped request (`gpu:N`) fits any type; name the type".into());
    }
    let count = match parts.next() {
        None => 1,
        Some(c) => c
            .parse::<u32>()
            .ok()
            .filter(|c| (1..=MAX_COUNT).contains(c))
            .ok_or("the count after the type must be 1 to 64")?,
    };
    if parts.next().is_some() {
        return Err("expected `gpu:<type>:<count>`".into());
    }
    Ok((kind.to_string(), count))
}

fn clip(s: &str) -> String {
    crate::text::shown(s, crate::text::SHOWN_CHARS)
}

/// Start `queue` in order on `here` fresh instances plus `elsewhere` (each
/// free after its seconds), each job no earlier than its arrival; its wait is
/// its start minus its arrival. A job needing more instances than exist never
/// starts; it does not hold the others back (Slurm's backfill would start them).
pub fn queue_cost(queue: &[Request], elsewhere: &[u64], here: u32) -> QueueCost {
    let mut cost = QueueCost::default();
    schedule(queue, elsewhere, here, |job, start| match start {
        Some(start) => cost.wait_s += u128::from(start - job.arrival_s),
        None => cost.never_start += 1,
    });
    cost
}

/// The one queue rule of [`queue_cost`], telling `started` each job's start
/// (`None`: it never starts), in queue order. The layout advisor reads every
/// start; `auto` only their sum.
pub fn schedule(
    queue: &[Request],
    elsewhere: &[u64],
    here: u32,
    mut started: impl FnMut(&Request, Option<u64>),
) {
    let mut free: BinaryHeap<Reverse<u64>> = elsewhere.iter().map(|&s| Reverse(s)).collect();
    free.extend(std::iter::repeat_n(Reverse(0), here as usize));
    let mut taken = Vec::new();
    for job in queue {
        let count = job.count as usize;
        if count > free.len() {
            started(job, None);
            continue;
        }
        if count == 1 {
            // The common case: one sift of the heap's top instead of pop and push.
            if let Some(mut top) = free.peek_mut() {
                let start = top.0.max(job.arrival_s);
                *top = Reverse(start.saturating_add(job.seconds));
                started(job, Some(start));
            }
            continue;
        }
        taken.clear();
        for _ in 0..count {
            if let Some(Reverse(t)) = free.pop() {
                taken.push(t);
            }
        }
        let start = taken.iter().copied().max().unwrap_or(0).max(job.arrival_s);
        let end = start.saturating_add(job.seconds);
        free.extend(std::iter::repeat_n(Reverse(end), count));
        started(job, Some(start));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jobs(n: usize, seconds: u64) -> Vec<Request> {
        vec![
            Request {
                count: 1,
                seconds,
                arrival_s: 0
            };
            n
        ]
    }

    #[test]
    fn waits_are_summed_in_queue_order() {
        // 5 one-hour jobs on 2 instances: starts 0,0,1h,1h,2h.
        let c = queue_cost(&jobs(5, 3600), &[], 2);
        assert_eq!(
            c,
            QueueCost {
                never_start: 0,
                wait_s: 4 * 3600
            }
        );
        // No instance: nothing starts.
        assert_eq!(queue_cost(&jobs(3, 60), &[], 0).never_start, 3);
        // An instance elsewhere, busy for 10 minutes more, serves them too.
        let c = queue_cost(&jobs(2, 60), &[600], 0);
        assert_eq!(
            c,
            QueueCost {
                never_start: 0,
                wait_s: 600 + 660
            }
        );
    }

    #[test]
    fn a_job_asking_for_several_instances_waits_for_all_of_them() {
        let q = [
            Request {
                count: 1,
                seconds: 100,
                arrival_s: 0,
            },
            Request {
                count: 2,
                seconds: 50,
                arrival_s: 0,
            },
            Request {
                count: 3,
                seconds: 10,
                arrival_s: 0,
            },
        ];
        // Two instances: the first job holds one until 100, the pair starts then;
        // the triple can never start.
        assert_eq!(
            queue_cost(&q, &[], 2),
            QueueCost {
                never_start: 1,
                wait_s: 100
            }
        );
    }

    #[test]
    fn jobs_that_arrive_later_wait_from_their_arrival() {
        let mut d = Demand::new();
        // One instance; a one-hour job now, another arriving after 90 minutes
        // (no wait), a third arriving at 30 minutes (waits 30 minutes).
        d.add_arriving("1g.5gb", 1, 3600, 0);
        d.add_arriving("1g.5gb", 1, 3600, 5400);
        d.add_arriving("1g.5gb", 1, 3600, 1800);
        let arrivals: Vec<u64> = d.queue("1g.5gb").iter().map(|r| r.arrival_s).collect();
        assert_eq!(arrivals, [0, 1800, 5400], "kept in arrival order");
        // 0; 1800 → starts 3600 (waits 1800); 5400 → free at 7200 (waits 1800).
        assert_eq!(
            d.cost("1g.5gb", 1),
            QueueCost {
                never_start: 0,
                wait_s: 3600
            }
        );
        assert_eq!(d.cost("1g.5gb", 2), QueueCost::default());
        let f = Demand::parse_file(
            "gres,time_limit_s,jobs,submit_s\ngpu:1g.5gb:1,3600,2,7200\n",
            "d.csv",
        )
        .unwrap();
        assert_eq!(f.queue("1g.5gb")[1].arrival_s, 7200);
        let e = Demand::parse_file(
            "gres,time_limit_s,jobs,submit_s\ngpu:1g.5gb:1,60,1,-5\n",
            "d.csv",
        )
        .unwrap_err();
        assert!(e.contains("d.csv:2: submit_s `-5`"), "{e}");
    }

    #[test]
    fn demand_files_parse_with_positions() {
        let d = Demand::parse_file(
            "# from last week\ngres,time_limit_s,jobs\ngpu:1g.5gb:1,3600,3\ngpu:a100:2,600\n",
            "d.csv",
        );
        // The second line has two fields where three were declared.
        assert!(d.unwrap_err().starts_with("d.csv:4: 2 field(s)"));
        let d = Demand::parse_file(
            "gres,time_limit_s,jobs\ngpu:1g.5gb:1,3600,3\ngpu:a100:2,600,1\n",
            "d.csv",
        )
        .unwrap();
        assert_eq!(d.jobs("1g.5gb"), 3);
        assert_eq!(
            d.queue("a100"),
            [Request {
                count: 2,
                seconds: 600,
                arrival_s: 0
            }]
        );
        for (bad, want) in [
            ("gres,time\n", "d.csv:1: header"),
            (
                "gres,time_limit_s,jobs\ngpu:2,60,1\n",
                "d.csv:2: gres `gpu:2`: an untyped",
            ),
            (
                "gres,time_limit_s,jobs\nshard:1,60,1\n",
                "expected `gpu:<type>:<count>`",
            ),
            (
                "gres,time_limit_s,jobs\ngpu:1g.5gb:1,inf,1\n",
                "time_limit_s `inf`",
            ),
            (
                "gres,time_limit_s,jobs\ngpu:1g.5gb:1,0,1\n",
                "time_limit_s `0`",
            ),
            ("gres,time_limit_s,jobs\ngpu:1g.5gb:1,60,-1\n", "jobs `-1`"),
            (
                "gres,time_limit_s,jobs\ngpu:1g.5gb:1,60,999999999999\n",
                "more than 200000",
            ),
            (
                "gres,time_limit_s,jobs\ngpu:1g;rm:1,60,1\n",
                "expected a GRES type",
            ),
            ("", "d.csv: empty"),
        ] {
            let e = Demand::parse_file(bad, "d.csv").unwrap_err();
            assert!(e.contains(want), "{bad:?}: {e}");
        }
    }
}
