//! The report as data: what every output format renders, and what `--format
//! json` prints as is. The JSON schema (docs/report.md) is this file; a change
//! that renames or removes a field must raise `SCHEMA_VERSION`.

use serde::Serialize;

/// Version of the JSON document. Adding a field keeps it; renaming, removing
/// or changing the meaning of one raises it.
pub const SCHEMA_VERSION: u32 = 1;

/// The five sections, in the order they are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Section {
    Inventory,
    Queue,
    Usage,
    Runs,
    RightSizing,
    Advice,
}

impl Section {
    pub const ALL: [Section; 6] = [
        Section::Inventory,
        Section::Queue,
        Section::Usage,
        Section::Runs,
        Section::RightSizing,
        Section::Advice,
    ];

    /// The name used on the command line, in JSON keys (with `_`) and headings.
    pub fn name(self) -> &'static str {
        match self {
            Section::Inventory => "inventory",
            Section::Queue => "queue",
            Section::Usage => "usage",
            Section::Runs => "runs",
            Section::RightSizing => "right-sizing",
            Section::Advice => "advice",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub schema_version: u32,
    /// When the report was made (RFC 3339, local offset).
    pub generated_at: String,
    /// The same as Unix seconds (Prometheus); not part of the JSON.
    #[serde(skip)]
    pub generated_unix: i64,
    pub filters: Filters,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inventory: Option<Inventory>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue: Option<Queue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runs: Option<Runs>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub right_sizing: Option<RightSizing>,
    /// The layout advisor's short form (`yolo-sched advise`), only where
    /// accounting answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub advice: Option<LayoutAdvice>,
    /// The runs' leaderboard (`compare`), made for `--format html`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leaderboard: Option<crate::compare::Board>,
    /// Per-epoch training curves of the leaderboard's rows (`--format html`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub curves: Vec<Curve>,
    /// Rows with a curve that the page leaves out (only the best rows of each
    /// dataset are drawn).
    #[serde(skip_serializing_if = "is_zero")]
    pub curves_omitted: u64,
    /// The searches (`[tune]`) among the runs: each one's trials, for the
    /// page's plot of the objective per trial and the best so far.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub searches: Vec<SearchPlot>,
}

/// One search's trials as its last ask or tell job recorded them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchPlot {
    pub run_id: String,
    pub summary: crate::rundir::search::Summary,
}

/// Last week's GPU demand, what waited, and whether each node is cut as
/// `yolo-sched advise` would cut it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LayoutAdvice {
    pub window_seconds: i64,
    /// Typed GPU jobs of the window.
    pub jobs: u64,
    /// Accounting's own figures: jobs that waited over a minute, their
    /// GPU-hours, and the mean wait of the jobs that started.
    pub jobs_waited: u64,
    pub waited_gpu_hours: f64,
    pub measured_mean_wait_s: f64,
    /// The simulated mean wait of the window's jobs as the nodes are cut now,
    /// and as advised.
    pub predicted_mean_wait_s: f64,
    pub advised_mean_wait_s: f64,
    pub nodes: Vec<NodeAdvice>,
    /// Where the jobs' needs came from (measured, gpumem, asked) and the
    /// measurements refused.
    pub needs: crate::advise::need::Needs,
    /// Site-wide right-sizing: per user and per account, the jobs that
    /// asked for more than they used (at most [`OVERSIZED_SHOWN`] of each).
    pub oversized: Vec<crate::advise::need::Oversized>,
    /// Why there is no advice (a node whose model its GRES types do not name…).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The most users and the most accounts the report's advice lists.
pub const OVERSIZED_SHOWN: usize = 50;

impl LayoutAdvice {
    /// The short form of the advisor's report.
    pub fn from_advice(r: &crate::advise::Report, window_seconds: i64) -> LayoutAdvice {
        let mean = |name: &str| {
            r.advice
                .setups
                .iter()
                .find(|s| s.name == name)
                .map_or(0.0, |s| s.outcome.mean_wait_s)
        };
        let nodes = r
            .nodes
            .iter()
            .filter(|n| n.geometry.is_some())
            .map(|n| {
                let now = n.layout_words().join("; ");
                let step = r.advice.steps.iter().find(|s| s.node == n.name);
                NodeAdvice {
                    node: n.name.clone(),
                    advised: step.is_none(),
                    advised_layout: step.map_or_else(|| now.clone(), |s| s.gpus.join("; ")),
                    now,
                }
            })
            .collect();
        LayoutAdvice {
            window_seconds,
            jobs: r.counted.jobs,
            jobs_waited: r.measured.waited,
            waited_gpu_hours: r.measured.waited_gpu_hours,
            measured_mean_wait_s: r.measured.mean_wait_s,
            predicted_mean_wait_s: mean("current"),
            advised_mean_wait_s: if r.advice.changes {
                mean("auto")
            } else {
                mean("current")
            },
            nodes,
            needs: r.needs.clone(),
            oversized: ["user", "account"]
                .iter()
                .flat_map(|by| {
                    r.rightsizing
                        .iter()
                        .filter(move |o| o.by == *by)
                        .take(OVERSIZED_SHOWN)
                })
                .cloned()
                .collect(),
            error: None,
        }
    }

    /// No advice, and why.
    pub fn failed(window_seconds: i64, error: String) -> LayoutAdvice {
        LayoutAdvice {
            window_seconds,
            jobs: 0,
            jobs_waited: 0,
            waited_gpu_hours: 0.0,
            measured_mean_wait_s: 0.0,
            predicted_mean_wait_s: 0.0,
            advised_mean_wait_s: 0.0,
            nodes: Vec::new(),
            needs: Default::default(),
            oversized: Vec::new(),
            error: Some(error),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeAdvice {
    pub node: String,
    /// Its layout is the advised one.
    pub advised: bool,
    /// Its GPUs now, and as advised.
    pub now: String,
    pub advised_layout: String,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One training variant's `results.csv`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Curve {
    /// The leaderboard row's id (`<run>` or `<run>/train-N`).
    pub id: String,
    pub epochs: Vec<crate::rundir::results::Epoch>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Filters {
    pub partition: Option<String>,
    pub user: Option<String>,
    pub account: Option<String>,
    /// Start of the usage window (RFC 3339).
    pub since: String,
    pub window_seconds: i64,
}

// ------------------------------------------------------------------ inventory

#[derive(Debug, Clone, Default, Serialize)]
pub struct Inventory {
    pub nodes: Vec<NodeRow>,
    /// Per GRES type over the listed nodes.
    pub totals: Vec<TypeTotal>,
}

#[derive(Debug, Clone, Serialize)]
pub struct NodeRow {
    pub node: String,
    /// `idle`, `mixed`, `allocated`, `drained`, `draining`, `down`, … (lower case).
    pub state: String,
    /// Why an administrator or Slurm took the node out; null when none.
    pub reason: Option<String>,
    pub partitions: Vec<String>,
    pub gres: Vec<GresCount>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GresCount {
    /// GRES key: `gpu:1g.5gb` (a MIG profile), `gpu:a100` (a whole GPU), `shard:a100`.
    #[serde(rename = "type")]
    pub kind: String,
    pub total: u64,
    pub allocated: u64,
    pub free: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TypeTotal {
    #[serde(rename = "type")]
    pub kind: String,
    pub total: u64,
    pub allocated: u64,
    pub free: u64,
    /// Free on nodes that accept jobs (not drained, draining, down, …).
    pub free_usable: u64,
}

// ------------------------------------------------------------------ queue

#[derive(Debug, Clone, Default, Serialize)]
pub struct Queue {
    /// Jobs holding an allocation (RUNNING, COMPLETING, SUSPENDED, …); array tasks count one each.
    pub running_jobs: u64,
    /// Jobs waiting (PENDING and requeued/held variants); pending array tasks count one each.
    pub pending_jobs: u64,
    pub by_partition_type: Vec<QueueRow>,
    pub by_type: Vec<TypeWait>,
    pub pending_reasons: Vec<ReasonCount>,
    pub oldest_pending: Option<PendingJob>,
    /// Count of pending jobs that can never start (see `never_runnable`).
    pub never_runnable_jobs: u64,
    /// Up to 100 of them, oldest first.
    pub never_runnable: Vec<StuckJob>,
    /// Lines of squeue output that could not be read (a newer Slurm?); 0 normally.
    pub unparsed_lines: u64,
    pub first_unparsed: Option<String>,
}

/// Jobs per partition and GRES type. A job asking for two types counts in
/// both rows; jobs without GRES have type `none`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QueueRow {
    pub partition: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub running_jobs: u64,
    pub pending_jobs: u64,
    /// Slices (GRES units) held by the running jobs.
    pub running_slices: u64,
    /// Slices the pending jobs ask for.
    pub pending_slices: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TypeWait {
    #[serde(rename = "type")]
    pub kind: String,
    pub running_jobs: u64,
    pub pending_jobs: u64,
    /// Median time pending jobs of this type have waited since submission.
    pub median_wait_seconds: Option<i64>,
    /// Pending jobs of this type by how long they have waited, one count per
    /// bucket of `WAIT_BUCKETS`.
    pub wait_buckets: Vec<u64>,
    pub oldest_pending: Option<PendingJob>,
}

/// Upper bounds (seconds, exclusive) and labels of the wait buckets; the last is open.
pub const WAIT_BUCKETS: [(i64, &str); 6] = [
    (60, "< 1 min"),
    (600, "1-10 min"),
    (3600, "10-60 min"),
    (6 * 3600, "1-6 h"),
    (24 * 3600, "6-24 h"),
    (i64::MAX, ">= 24 h"),
];

/// The bucket of a wait in `WAIT_BUCKETS`.
pub fn wait_bucket(seconds: i64) -> usize {
    WAIT_BUCKETS
        .iter()
        .position(|(upper, _)| seconds < *upper)
        .unwrap_or(WAIT_BUCKETS.len() - 1)
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReasonCount {
    /// Slurm's reason code (`Resources`, `Dependency`, …).
    pub reason: String,
    /// The same in plain words.
    pub description: String,
    pub jobs: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PendingJob {
    pub job_id: String,
    pub user: String,
    pub partition: String,
    /// Submission time as Slurm prints it (cluster local time).
    pub submitted: String,
    pub wait_seconds: i64,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StuckJob {
    pub job_id: String,
    /// Array tasks the line stands for (1 for a plain job).
    pub jobs: u64,
    pub user: String,
    pub account: String,
    pub partition: String,
    pub types: Vec<String>,
    pub reason: String,
    pub description: String,
    /// Slurm's dependency text, e.g. `afterok:14(failed)`; empty when none.
    pub dependency: String,
    pub submitted: String,
}

// ------------------------------------------------------------------ usage

#[derive(Debug, Clone, Serialize)]
pub struct Usage {
    pub accounting: AccountingState,
    pub window_seconds: i64,
    /// Per user, account and GRES type: slices held now, and slice-hours in the window.
    pub rows: Vec<UsageRow>,
    /// Slices in use per type over the window, from the same sacct call; null
    /// when accounting is not available.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub series: Option<UsageSeries>,
}

/// Average slices in use per GRES type, in equal buckets from the window's start.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UsageSeries {
    pub bucket_seconds: i64,
    pub buckets: usize,
    pub by_type: Vec<TypeSeries>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TypeSeries {
    #[serde(rename = "type")]
    pub kind: String,
    /// Slice-seconds in each bucket divided by its length.
    pub slices: Vec<f64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AccountingState {
    /// `ok`: sacct answered; `disabled`: the cluster keeps no accounting;
    /// `failed`: sacct did not answer (see message).
    pub status: AccountingStatus,
    pub message: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AccountingStatus {
    Ok,
    Disabled,
    Failed,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UsageRow {
    pub user: String,
    /// Empty when the job has none.
    pub account: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub slices_held: u64,
    /// Slice-hours inside the window; null when accounting is not available.
    pub slice_hours: Option<f64>,
}

// ------------------------------------------------------------------ runs

#[derive(Debug, Clone, Default, Serialize)]
pub struct Runs {
    /// Where the run manifests were read from.
    pub dir: String,
    pub runs: u64,
    pub by_state: Vec<StateCount>,
    /// Each run's state, as `list` and `status` give it (same model).
    pub by_run: Vec<RunRow>,
    /// The stage name that failed in most runs; null when none failed.
    pub most_failing_stage: Option<StageFailures>,
    pub failing_stages: Vec<StageFailures>,
    /// Manifest files that could not be read, with the reason.
    pub unreadable: Vec<Unreadable>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StateCount {
    pub state: String,
    pub runs: u64,
}

/// One run: its state word (`RunState::word`), the stage the state names
/// (null for `pending`, `completed`, `unknown`), and the state in words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunRow {
    pub run_id: String,
    pub name: String,
    pub state: String,
    pub stage: Option<String>,
    pub description: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StageFailures {
    pub stage: String,
    pub failures: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unreadable {
    pub path: String,
    pub error: String,
}

// ------------------------------------------------------------------ right-sizing

#[derive(Debug, Clone, Default, Serialize)]
pub struct RightSizing {
    /// Stages that recorded a memory figure and a requested profile.
    pub stages_with_data: u64,
    /// What data there was, or why there was none.
    pub note: String,
    pub hints: Vec<Hint>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hint {
    pub run_id: String,
    pub stage: String,
    pub job_id: Option<String>,
    /// The profile the stage asked for (`2g.10gb`).
    pub requested: String,
    /// `measured` (peak recorded by the run) or `estimate`.
    pub basis: String,
    pub memory_gib: f64,
    /// The smallest profile in the inventory whose usable memory holds it.
    pub suggested: String,
    pub suggested_usable_gib: f64,
}
