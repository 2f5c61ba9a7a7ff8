//! The runs section: the caller's yolo-sched runs by state, the stage that
//! fails most, and the memory figures right-sizing needs.
//!
//! Nothing here decides what state a run is in. Each run goes through
//! `run::status::of_run`, the model `status`, `watch` and `list` use, fed
//! with what the report already has: its `squeue` listing (`-t all`, so it
//! holds every job slurmctld still knows, finished ones included) turned into
//! the same queue rows `status` reads, plus, for run jobs that left the
//! queue, the rows of one `sacct -j` call (`run::query::sacct_rows`, the call
//! `status` makes). What is left here is reading the run index, picking the
//! runs' jobs out of the listing, and counting.
//!
//! What it reads: `<runs dir>/<run_id>.json`, the index entries `submit`
//! writes (`rundir::manifest::IndexEntry`), each pointing at
//! `<workdir>/manifest.json` (`rundir::manifest::Manifest`).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};

use super::model::{RunRow, Runs, StageFailures, StateCount, Unreadable};
use crate::run::status::{AcctRow, RunStatus, TaskState};
use crate::rundir::manifest::{IndexEntry, Manifest as RunManifest};
use crate::slurm::squeue::listing::{parse_line, QueueLine};
use crate::slurm::squeue::read::{leading_id, parse_task_list};
use crate::slurm::squeue::{QueueRow, SEPARATOR};

/// One stage as far as the report cares.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stage {
    pub name: String,
    /// The stage's state as `status` names it (`completed`, `failed`, …).
    pub state: String,
    /// The latest attempt's Slurm job id (the array job id for arrays).
    pub job_id: Option<String>,
    /// Array tasks (1 when not an array).
    pub tasks: u64,
    /// The MIG profile or GRES type asked for (`1g.5gb`).
    pub profile: Option<String>,
    /// How many of it (several whole GPUs of one node: `gpu:h100:4` → 4; 0
    /// without a GPU).
    pub gpus: u64,
    /// Per GPU on several GPUs (the batch split over them).
    pub estimate_gib: Option<f64>,
    /// Peak GPU memory the run measured, when it recorded one.
    pub peak_gib: Option<f64>,
}

/// One run as the report sees it: its state from `run::status`, and its stages.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Manifest {
    pub run_id: String,
    pub name: String,
    /// `RunState::word`: `completed`, `failed`, `cancelled`, `never_runs`, …
    pub state: String,
    /// The stage the state names (`cancelled (train)`), when it names one.
    pub stage: Option<String>,
    /// `RunState::describe`, as `list` prints it.
    pub description: String,
    pub workdir: Option<PathBuf>,
    pub stages: Vec<Stage>,
}

/// `gpu:1g.5gb:1` or `gres:gpu:1g.5gb:1` → `1g.5gb`; untyped `gpu:1` → none
/// (no profile to compare).
fn profile_of(gres: &str) -> Option<String> {
    let item = crate::slurm::gres::parse_item(gres)?;
    (item.name == "gpu").then_some(item.kind).flatten()
}

/// The runs in an index directory, sorted by file name, and the entries that
/// could not be read. A missing directory means no runs, not an error.
pub fn load(dir: &Path) -> (Vec<RunManifest>, Vec<Unreadable>) {
    let mut manifests = Vec::new();
    let mut unreadable = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return (manifests, unreadable),
        Err(e) => {
            unreadable.push(Unreadable {
                path: dir.display().to_string(),
                error: e.to_string(),
            });
            return (manifests, unreadable);
        }
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    for path in paths {
        // Bounded and regular only: an entry linked to /dev/zero or a FIFO is skipped.
        let entry = crate::fsutil::read_regular(&path, crate::rundir::manifest::INDEX_ENTRY_LIMIT)
            .map_err(|e| e.root_cause().to_string())
            .and_then(|t| {
                serde_json::from_str::<IndexEntry>(&t)
                    .map_err(|e| format!("not a run index entry: {e}"))
            });
        let entry = match entry {
            Ok(e) => e,
            Err(error) => {
                unreadable.push(Unreadable {
                    path: path.display().to_string(),
                    error,
                });
                continue;
            }
        };
        let manifest_path = RunManifest::path_in(&entry.workdir);
        match RunManifest::load(&manifest_path) {
            // The job files are where the manifest was found, as for `list`
            // (a run directory may have been moved since).
            Ok(mut m) => {
                m.workdir = entry.workdir;
                manifests.push(m);
            }
            Err(e) => unreadable.push(Unreadable {
                path: manifest_path.display().to_string(),
                error: format!("{:#}", e.root_cause()),
            }),
        }
    }
    (manifests, unreadable)
}

/// Every job id of every attempt of these runs (as `status` asks `squeue`).
pub fn job_ids(manifests: &[RunManifest]) -> Vec<u64> {
    let set: BTreeSet<u64> = manifests.iter().flat_map(|m| m.all_job_ids()).collect();
    set.into_iter().collect()
}

/// A listing line as the queue row `run::status` reads. The listing has no
/// elapsed time, node or exit code; nothing about a state depends on them.
pub fn queue_row(q: &QueueLine) -> Option<QueueRow> {
    let array_job_id = leading_id(q.job_id)?;
    let tasks = match q.job_id.split_once('_') {
        Some((_, rest)) => parse_task_list(rest),
        None => Vec::new(),
    };
    Some(QueueRow {
        job_id: q.job_id.to_string(),
        array_job_id,
        tasks,
        state: q.state.to_string(),
        reason: q.reason.to_string(),
        time_used: String::new(),
        time_limit: String::new(),
        nodes: String::new(),
        gres: q.tres_per_node.to_string(),
        exit_code: None,
        name: String::new(),
    })
}

/// The listing lines of these jobs, as queue rows. Other lines are skipped
/// after reading their job id only.
pub fn queue_rows(listing: &str, ids: &[u64]) -> Vec<QueueRow> {
    if ids.is_empty() {
        return Vec::new();
    }
    let wanted: HashSet<u64> = ids.iter().copied().collect();
    listing
        .lines()
        .filter(|l| {
            let id = l.split(SEPARATOR).next().unwrap_or("");
            leading_id(id).is_some_and(|id| wanted.contains(&id))
        })
        .filter_map(|l| parse_line(l).ok())
        .filter_map(|q| queue_row(&q))
        .collect()
}

/// Job ids no queue row stands for: these are the ones `sacct` is asked about.
pub fn missing(ids: &[u64], rows: &[QueueRow]) -> Vec<u64> {
    let present: HashSet<u64> = rows.iter().map(|r| r.array_job_id).collect();
    ids.iter()
        .copied()
        .filter(|id| !present.contains(id))
        .collect()
}

/// Each run's status from the one run model (reads each run's job files).
pub fn statuses(manifests: &[RunManifest], rows: &[QueueRow], acct: &[AcctRow]) -> Vec<RunStatus> {
    manifests
        .iter()
        .map(|m| crate::run::status::of_run(m, rows, acct, true))
        .collect()
}

/// The report's view of one run: its state and stages from `status`, its
/// profiles and memory estimate from the manifest. The run's estimate
/// belongs to the first stage that asked for a GPU profile.
pub fn view(manifest: &RunManifest, status: &RunStatus) -> Manifest {
    let mut estimate = manifest.estimate_gib.filter(|g| g.is_finite() && *g >= 0.0);
    let stages = manifest
        .stages
        .iter()
        .map(|s| {
            let profile = s.gres.as_deref().and_then(profile_of);
            let gpus = s
                .gres
                .as_deref()
                .and_then(crate::plan::resources::GpuAsk::parse)
                .map_or(0, |g| g.gpus());
            let state = status
                .stage(&s.stage)
                .map_or(TaskState::Unknown, |st| st.state);
            Stage {
                name: s.stage.clone(),
                state: state.word().to_string(),
                job_id: s.latest().map(|a| a.job_id.to_string()),
                tasks: s.tasks.max(1) as u64,
                estimate_gib: profile.as_ref().and_then(|_| estimate.take()),
                profile,
                gpus,
                peak_gib: None,
            }
        })
        .collect();
    Manifest {
        run_id: manifest.run_id.clone(),
        name: manifest.name.clone(),
        state: status.state.word().to_string(),
        stage: status.state.stage().map(str::to_string),
        description: status.state.describe(),
        workdir: Some(manifest.workdir.clone()),
        stages,
    }
}

/// Runs by state, each run's state, and failing stages.
pub fn summarise(dir: &Path, runs: &[Manifest], unreadable: Vec<Unreadable>) -> Runs {
    let mut by_state: BTreeMap<String, u64> = BTreeMap::new();
    let mut failures: BTreeMap<String, u64> = BTreeMap::new();
    for m in runs {
        *by_state.entry(m.state.clone()).or_default() += 1;
        let failed: BTreeSet<&str> = m
            .stages
            .iter()
            .filter(|s| s.state == TaskState::Failed.word() || s.state == TaskState::Lost.word())
            .map(|s| s.name.as_str())
            .collect();
        for name in failed {
            *failures.entry(name.to_string()).or_default() += 1;
        }
    }
    let mut failing_stages: Vec<StageFailures> = failures
        .into_iter()
        .map(|(stage, failures)| StageFailures { stage, failures })
        .collect();
    failing_stages.sort_by(|a, b| b.failures.cmp(&a.failures).then(a.stage.cmp(&b.stage)));
    Runs {
        dir: dir.display().to_string(),
        runs: runs.len() as u64,
        by_state: by_state
            .into_iter()
            .map(|(state, runs)| StateCount { state, runs })
            .collect(),
        by_run: runs
            .iter()
            .map(|m| RunRow {
                run_id: m.run_id.clone(),
                name: m.name.clone(),
                state: m.state.clone(),
                stage: m.stage.clone(),
                description: m.description.clone(),
            })
            .collect(),
        most_failing_stage: failing_stages.first().cloned(),
        failing_stages,
        unreadable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listing_lines_become_queue_rows() {
        let sep = SEPARATOR;
        let line = |id: &str, state: &str, reason: &str| {
            format!(
                "{id}{sep}{state}{sep}gpu{sep}u{sep}a{sep}2026-11-30T15:09:06{sep}1{sep}1{sep}\
                 gres:gpu:1g.5gb:1{sep}{sep}{sep}{sep}{sep}{reason}{sep}"
            )
        };
        let listing = [
            line("15", "CANCELLED", "None"),
            line("16_3", "RUNNING", "None"),
            line("16_[4-6%2]", "PENDING", "JobArrayTaskLimit"),
            line("99", "RUNNING", "None"),
        ]
        .join("\n");
        let rows = queue_rows(&listing, &[15, 16, 17]);
        assert_eq!(rows.len(), 3, "job 99 is not a run's");
        assert_eq!((rows[0].array_job_id, rows[0].tasks.clone()), (15, vec![]));
        assert_eq!(rows[0].state, "CANCELLED");
        assert_eq!((rows[1].array_job_id, rows[1].tasks.clone()), (16, vec![3]));
        assert_eq!(rows[2].tasks, vec![4, 5, 6]);
        assert_eq!(rows[2].reason, "JobArrayTaskLimit");
        assert_eq!(rows[2].gres, "gres:gpu:1g.5gb:1");
        assert_eq!(missing(&[15, 16, 17], &rows), vec![17]);
    }

    #[test]
    fn profiles() {
        assert_eq!(profile_of("gpu:2g.10gb:1").as_deref(), Some("2g.10gb"));
        assert_eq!(profile_of("gres:gpu:1g.5gb:1").as_deref(), Some("1g.5gb"));
        assert_eq!(profile_of("gpu:1"), None);
    }

    #[test]
    fn missing_directory_is_zero_runs() {
        let (m, u) = load(Path::new("/nonexistent/yolo-sched/runs"));
        assert!(m.is_empty() && u.is_empty());
    }
}
