//! Queue figures and slices held now, aggregated line by line from the
//! compact `squeue` listing, so memory grows with the number of distinct
//! partitions, types and users, not with the number of jobs (apart from one
//! number per pending job for the median wait).

use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use chrono::NaiveDateTime;

use super::model::{PendingJob, Queue, QueueRow, ReasonCount, StuckJob, TypeWait};
use super::reasons;
use crate::slurm::squeue::listing::{self, Phase, QueueLine};
use crate::slurm::squeue::{Filter, SEPARATOR};

/// The type key of jobs that ask for no GRES.
pub const NO_GRES: &str = "none";
/// How many never-runnable jobs are listed (all are counted).
pub const STUCK_LISTED: usize = 100;

#[derive(Debug, Default, Clone, Copy)]
struct RowCounts {
    running_jobs: u64,
    pending_jobs: u64,
    running_slices: u64,
    pending_slices: u64,
}

#[derive(Debug, Clone)]
struct Oldest {
    submitted: NaiveDateTime,
    job: PendingJob,
}

/// Slices held now per (user, account, type): the live half of Usage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    pub user: String,
    pub account: String,
    pub kind: String,
    pub slices: u64,
}

/// Feeds on lines, keeps only aggregates.
pub struct QueueAggregator {
    now: NaiveDateTime,
    filter: Filter,
    running_jobs: u64,
    pending_jobs: u64,
    /// Key: partition, separator, type.
    rows: HashMap<String, RowCounts>,
    /// Per type: (wait seconds, how many jobs waited that long).
    waits: HashMap<String, Vec<(i64, u64)>>,
    oldest_by_type: HashMap<String, Oldest>,
    oldest: Option<Oldest>,
    reasons: HashMap<String, u64>,
    stuck_count: u64,
    stuck: Vec<StuckJob>,
    /// Key: user, separator, account, separator, type.
    held: HashMap<String, u64>,
    unparsed: u64,
    first_unparsed: Option<String>,
    key: String,
    /// Phase per job id (array job id for arrays), when asked for.
    job_phases: Option<HashMap<u64, Phase>>,
    /// Slices per job by request: queues repeat a few request shapes.
    slice_cache: HashMap<String, Rc<[(String, u64)]>>,
}

/// Distinct request shapes remembered; beyond this they are worked out each time.
const SLICE_CACHE_LIMIT: usize = 10_000;

impl QueueAggregator {
    /// `now` is the cluster's local time (Slurm prints local times).
    pub fn new(now: NaiveDateTime, filter: Filter) -> Self {
        QueueAggregator {
            now,
            filter,
            running_jobs: 0,
            pending_jobs: 0,
            rows: HashMap::new(),
            waits: HashMap::new(),
            oldest_by_type: HashMap::new(),
            oldest: None,
            reasons: HashMap::new(),
            stuck_count: 0,
            stuck: Vec::new(),
            held: HashMap::new(),
            unparsed: 0,
            first_unparsed: None,
            key: String::new(),
            job_phases: None,
            slice_cache: HashMap::new(),
        }
    }

    /// Also remember every queued job id and its phase (for run states),
    /// before filters apply.
    pub fn keep_job_phases(mut self) -> Self {
        self.job_phases = Some(HashMap::new());
        self
    }

    /// Read a whole listing.
    pub fn add_text(&mut self, text: &str) {
        for line in text.lines() {
            self.add_line(line);
        }
    }

    /// Read one line; lines that do not parse are counted, not fatal.
    pub fn add_line(&mut self, line: &str) {
        if line.trim().is_empty() {
            return;
        }
        match listing::parse_line(line) {
            Ok(q) => self.add(&q),
            Err(err) => {
                self.unparsed += 1;
                if self.first_unparsed.is_none() {
                    let shown = crate::text::clip_to(line, 200);
                    self.first_unparsed = Some(format!("{err}: {shown:?}"));
                }
            }
        }
    }

    fn wanted(&self, q: &QueueLine<'_>) -> bool {
        self.filter.user.as_deref().is_none_or(|u| q.user == u)
            && self
                .filter
                .account
                .as_deref()
                .is_none_or(|a| q.account == a)
            && self
                .filter
                .partition
                .as_deref()
                .is_none_or(|p| q.partition.split(',').any(|x| x == p))
    }

    pub fn add(&mut self, q: &QueueLine<'_>) {
        if q.phase == Phase::Ended {
            return;
        }
        if let Some(phases) = &mut self.job_phases {
            let base = q.job_id.split('_').next().unwrap_or(q.job_id);
            if let Ok(id) = base.parse::<u64>() {
                let slot = phases.entry(id).or_insert(q.phase);
                if q.phase == Phase::Running {
                    *slot = Phase::Running;
                }
            }
        }
        if !self.wanted(q) {
            return;
        }
        let slices = self.slices(q);
        match q.phase {
            Phase::Running => self.add_running(q, &slices),
            Phase::Pending => self.add_pending(q, &slices),
            Phase::Ended => {}
        }
    }

    /// `listing::slices_per_job`, or `none` for jobs without GRES, remembered
    /// per request shape.
    fn slices(&mut self, q: &QueueLine<'_>) -> Rc<[(String, u64)]> {
        use std::fmt::Write as _;
        self.key.clear();
        let alloc = if q.phase == Phase::Running {
            q.tres_alloc
        } else {
            ""
        };
        let _ = write!(
            self.key,
            "{}:{}:{:?}",
            q.phase == Phase::Running,
            q.nodes,
            q.tasks
        );
        for part in [q.tres_per_node, q.tres_per_job, q.tres_per_task, alloc] {
            self.key.push(SEPARATOR);
            self.key.push_str(part);
        }
        if let Some(hit) = self.slice_cache.get(self.key.as_str()) {
            return Rc::clone(hit);
        }
        let mut slices = listing::slices_per_job(q);
        if slices.is_empty() {
            slices.push((NO_GRES.to_string(), 0));
        }
        let slices: Rc<[(String, u64)]> = slices.into();
        if self.slice_cache.len() < SLICE_CACHE_LIMIT {
            self.slice_cache
                .insert(self.key.clone(), Rc::clone(&slices));
        }
        slices
    }

    fn row(&mut self, partition: &str, kind: &str) -> &mut RowCounts {
        self.key.clear();
        self.key.push_str(partition);
        self.key.push(SEPARATOR);
        self.key.push_str(kind);
        if !self.rows.contains_key(self.key.as_str()) {
            self.rows.insert(self.key.clone(), RowCounts::default());
        }
        self.rows
            .get_mut(self.key.as_str())
            .expect("inserted above")
    }

    fn add_running(&mut self, q: &QueueLine<'_>, slices: &[(String, u64)]) {
        self.running_jobs = self.running_jobs.saturating_add(q.jobs);
        for (kind, count) in slices {
            let row = self.row(q.partition, kind);
            row.running_jobs = row.running_jobs.saturating_add(q.jobs);
            row.running_slices = row
                .running_slices
                .saturating_add(count.saturating_mul(q.jobs));
            if kind == NO_GRES {
                continue;
            }
            self.key.clear();
            for part in [q.user, q.account, kind.as_str()] {
                self.key.push_str(part);
                self.key.push(SEPARATOR);
            }
            match self.held.get_mut(self.key.as_str()) {
                Some(n) => *n = n.saturating_add(count.saturating_mul(q.jobs)),
                None => {
                    self.held
                        .insert(self.key.clone(), count.saturating_mul(q.jobs));
                }
            }
        }
    }

    fn add_pending(&mut self, q: &QueueLine<'_>, slices: &[(String, u64)]) {
        self.pending_jobs = self.pending_jobs.saturating_add(q.jobs);
        let code = reasons::code(q.reason);
        match self.reasons.get_mut(code) {
            Some(n) => *n = n.saturating_add(q.jobs),
            None => {
                self.reasons.insert(code.to_string(), q.jobs);
            }
        }
        let wait = q.submitted.map(|s| (self.now - s).num_seconds().max(0));
        for (kind, count) in slices {
            let row = self.row(q.partition, kind);
            row.pending_jobs = row.pending_jobs.saturating_add(q.jobs);
            row.pending_slices = row
                .pending_slices
                .saturating_add(count.saturating_mul(q.jobs));
            if let Some(wait) = wait {
                match self.waits.get_mut(kind.as_str()) {
                    Some(v) => v.push((wait, q.jobs)),
                    None => {
                        self.waits.insert(kind.clone(), vec![(wait, q.jobs)]);
                    }
                }
            }
        }
        if let Some(submitted) = q.submitted {
            let older = |o: &Option<&Oldest>| o.is_none_or(|o| submitted < o.submitted);
            let candidate = || Oldest {
                submitted,
                job: PendingJob {
                    job_id: q.job_id.to_string(),
                    user: q.user.to_string(),
                    partition: q.partition.to_string(),
                    submitted: submitted.format("%Y-%m-%dT%H:%M:%S").to_string(),
                    wait_seconds: (self.now - submitted).num_seconds().max(0),
                    reason: code.to_string(),
                },
            };
            if older(&self.oldest.as_ref()) {
                self.oldest = Some(candidate());
            }
            for (kind, _) in slices {
                if older(&self.oldest_by_type.get(kind.as_str())) {
                    self.oldest_by_type.insert(kind.clone(), candidate());
                }
            }
        }
        if reasons::never_runnable(code) {
            self.stuck_count = self.stuck_count.saturating_add(q.jobs);
            self.stuck.push(StuckJob {
                job_id: q.job_id.to_string(),
                jobs: q.jobs,
                user: q.user.to_string(),
                account: q.account.to_string(),
                partition: q.partition.to_string(),
                types: slices.iter().map(|(k, _)| k.clone()).collect(),
                reason: code.to_string(),
                description: reasons::describe(code),
                dependency: q.dependency.to_string(),
                submitted: q
                    .submitted
                    .map(|s| s.format("%Y-%m-%dT%H:%M:%S").to_string())
                    .unwrap_or_default(),
            });
            // Keep the oldest few without holding all of them.
            if self.stuck.len() > 4 * STUCK_LISTED {
                trim_stuck(&mut self.stuck);
            }
        }
    }

    /// The queue figures, the slices held now per user, and the job phases
    /// (empty unless `keep_job_phases` was called).
    pub fn finish(self) -> (Queue, Vec<Held>, HashMap<u64, Phase>) {
        let mut rows: Vec<QueueRow> = self
            .rows
            .iter()
            .map(|(key, c)| {
                let (partition, kind) = key.split_once(SEPARATOR).unwrap_or((key, ""));
                QueueRow {
                    partition: partition.to_string(),
                    kind: kind.to_string(),
                    running_jobs: c.running_jobs,
                    pending_jobs: c.pending_jobs,
                    running_slices: c.running_slices,
                    pending_slices: c.pending_slices,
                }
            })
            .collect();
        rows.sort_by(|a, b| (&a.partition, &a.kind).cmp(&(&b.partition, &b.kind)));

        let mut per_type: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        for r in &rows {
            let e = per_type.entry(r.kind.clone()).or_default();
            e.0 = e.0.saturating_add(r.running_jobs);
            e.1 = e.1.saturating_add(r.pending_jobs);
        }
        let mut waits = self.waits;
        let mut oldest_by_type = self.oldest_by_type;
        let by_type = per_type
            .into_iter()
            .map(|(kind, (running, pending))| TypeWait {
                wait_buckets: waits.get(&kind).map(|w| buckets(w)).unwrap_or_default(),
                median_wait_seconds: waits.get_mut(&kind).and_then(|w| weighted_median(w)),
                oldest_pending: oldest_by_type.remove(&kind).map(|o| o.job),
                kind,
                running_jobs: running,
                pending_jobs: pending,
            })
            .collect();

        let mut pending_reasons: Vec<ReasonCount> = self
            .reasons
            .into_iter()
            .map(|(reason, jobs)| ReasonCount {
                description: reasons::describe(&reason),
                reason,
                jobs,
            })
            .collect();
        pending_reasons.sort_by(|a, b| b.jobs.cmp(&a.jobs).then(a.reason.cmp(&b.reason)));

        let mut stuck = self.stuck;
        trim_stuck(&mut stuck);

        let mut held: Vec<Held> = self
            .held
            .into_iter()
            .map(|(key, slices)| {
                let mut parts = key.split(SEPARATOR);
                let mut next = || parts.next().unwrap_or("").to_string();
                Held {
                    user: next(),
                    account: next(),
                    kind: next(),
                    slices,
                }
            })
            .collect();
        held.sort_by(|a, b| (&a.user, &a.account, &a.kind).cmp(&(&b.user, &b.account, &b.kind)));

        let queue = Queue {
            running_jobs: self.running_jobs,
            pending_jobs: self.pending_jobs,
            by_partition_type: rows,
            by_type,
            pending_reasons,
            oldest_pending: self.oldest.map(|o| o.job),
            never_runnable_jobs: self.stuck_count,
            never_runnable: stuck,
            unparsed_lines: self.unparsed,
            first_unparsed: self.first_unparsed,
        };
        (queue, held, self.job_phases.unwrap_or_default())
    }
}

/// Oldest first (by submission, then job id), at most `STUCK_LISTED`.
fn trim_stuck(stuck: &mut Vec<StuckJob>) {
    stuck.sort_by(|a, b| {
        (&a.submitted, a.job_id.len(), &a.job_id).cmp(&(&b.submitted, b.job_id.len(), &b.job_id))
    });
    stuck.truncate(STUCK_LISTED);
}

/// The median of values with weights (lower median for an even total).
pub fn weighted_median(values: &mut [(i64, u64)]) -> Option<i64> {
    let total: u64 = values.iter().fold(0u64, |t, (_, w)| t.saturating_add(*w));
    if total == 0 {
        return None;
    }
    values.sort_unstable_by_key(|(v, _)| *v);
    let target = total.div_ceil(2);
    let mut seen = 0u64;
    for (v, w) in values.iter() {
        seen = seen.saturating_add(*w);
        if seen >= target {
            return Some(*v);
        }
    }
    None
}

/// Weighted counts of waits per `model::WAIT_BUCKETS` bucket.
pub fn buckets(values: &[(i64, u64)]) -> Vec<u64> {
    let mut out = vec![0; super::model::WAIT_BUCKETS.len()];
    for (v, w) in values {
        out[super::model::wait_bucket(*v)] += w;
    }
    out
}

/// Aggregate a whole listing in one call.
pub fn aggregate(text: &str, now: NaiveDateTime, filter: Filter) -> (Queue, Vec<Held>) {
    let mut agg = QueueAggregator::new(now, filter);
    agg.add_text(text);
    let (queue, held, _) = agg.finish();
    (queue, held)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_saturate_instead_of_wrapping() {
        let line = |id: &str| {
            let cols = [
                id,
                "PENDING",
                "gpu",
                "u",
                "a",
                "N/A",
                "1",
                "1",
                "gres:gpu:1g.5gb:18446744073709551615",
                "N/A",
                "N/A",
                "",
                "(null)",
                "Resources",
            ];
            let mut s = String::new();
            for c in cols {
                s.push_str(c);
                s.push(crate::slurm::squeue::SEPARATOR);
            }
            s
        };
        let text = format!(
            "{}\n{}\n",
            line("7_[0-18446744073709551615]"),
            line("8_[0-18446744073709551615]")
        );
        let now = chrono::NaiveDate::from_ymd_opt(2026, 12, 1)
            .unwrap()
            .and_hms_opt(0, 0, 0)
            .unwrap();
        let (queue, _) = aggregate(&text, now, Filter::default());
        assert_eq!(queue.unparsed_lines, 0, "{:?}", queue.first_unparsed);
        assert_eq!(queue.pending_jobs, u64::MAX);
        assert_eq!(queue.by_partition_type[0].pending_slices, u64::MAX);
    }

    #[test]
    fn wait_buckets_count_tasks() {
        assert_eq!(buckets(&[]), [0; 6]);
        assert_eq!(
            buckets(&[(0, 1), (59, 2), (60, 1), (3600, 4), (90_000, 1)]),
            [3, 1, 0, 4, 0, 1]
        );
    }

    #[test]
    fn medians() {
        assert_eq!(weighted_median(&mut []), None);
        assert_eq!(weighted_median(&mut [(5, 1)]), Some(5));
        assert_eq!(weighted_median(&mut [(9, 1), (1, 1), (5, 1)]), Some(5));
        assert_eq!(weighted_median(&mut [(1, 1), (2, 1)]), Some(1));
        // Ten tasks waiting 100 s outweigh two jobs waiting 1 s.
        assert_eq!(weighted_median(&mut [(1, 2), (100, 10)]), Some(100));
    }
}
