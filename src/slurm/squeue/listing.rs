//! The report's listing of every job: one compact `squeue`, its arguments,
//! and its line parser.
//!
//! The report asks `squeue` for 14 fields ([`FIELDS`]) instead of
//! `squeue --json`: about 130 bytes a job instead of 2.8 KB, and no document
//! tree on either side (docs/report.md explains the choice and its
//! measurements). `Reason` comes last: it is the only free field the listing
//! reads, so a stray separator inside it cannot shift the other columns.
//! Lines are read borrowed ([`QueueLine`]), for queues of 10^5 jobs.

use anyhow::Result;
use chrono::NaiveDateTime;

use super::fields::{format_arg, free_text_last, split, Field, LineError};
use super::read;
use crate::slurm::Slurm;

/// Filters passed to `squeue` (and the report's `sacct`) so that slurmctld
/// sends less (a single user makes squeue ask for that user's jobs only).
/// The parsers filter again, because older clients or stand-ins may ignore them.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub user: Option<String>,
    pub partition: Option<String>,
    pub account: Option<String>,
}

/// The report's fields, in the order [`parse_line`] reads them: what the
/// queue, usage and runs sections count a job by, and no more (a job's
/// name, directory, times and comment would double the bytes of a listing
/// of 10^5 jobs and are read by no section). The recorded 22.05 listing
/// `tests/data/report/squeue-22.05-compact.txt` is in this order.
pub const FIELDS: [Field; 14] = [
    Field::JobArrayId,
    Field::State,
    Field::Partition,
    Field::UserName,
    Field::Account,
    Field::SubmitTime,
    Field::NumNodes,
    Field::NumTasks,
    Field::TresPerNode,
    Field::TresPerJob,
    Field::TresPerTask,
    Field::TresAlloc,
    Field::Dependency,
    Field::Reason,
];

const _: () = assert!(free_text_last(&FIELDS));

/// The listing's `--Format=` argument ([`FIELDS`]).
pub fn format() -> String {
    format_arg(&FIELDS)
}

/// The whole argument list of the report's listing. `-t all`: every job
/// slurmctld holds, classified by the caller; `-a`: hidden partitions too;
/// `-h`: no header.
pub fn args(filter: &Filter) -> Vec<String> {
    let mut args = vec!["-h".into(), "-a".into(), "-t".into(), "all".into()];
    args.push(format());
    if let Some(user) = &filter.user {
        args.push(format!("--user={user}"));
    }
    if let Some(partition) = &filter.partition {
        args.push(format!("--partition={partition}"));
    }
    if let Some(account) = &filter.account {
        args.push(format!("--account={account}"));
    }
    args
}

/// The report's listing, one `squeue`, not retried: a report runs every few
/// minutes, and a busy controller is better served by the next run.
pub fn fetch(slurm: &Slurm, filter: &Filter) -> Result<String> {
    let args = args(filter);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Ok(slurm.run("squeue", &args)?.into_text())
}

/// Where a job stands, as far as slices are concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Waiting to start (PENDING and the requeue/hold variants).
    Pending,
    /// Holding its allocation (RUNNING, COMPLETING, SUSPENDED, …).
    Running,
    /// Finished and only still listed until MinJobAge passes, or a state this
    /// version does not know.
    Ended,
}

/// Classify a long state name such as `RUNNING` (`slurm::states` decides
/// what each state means; this only folds its classes into three).
pub fn phase_of(state: &str) -> Phase {
    use crate::slurm::states::{classify, Class};
    match classify(state) {
        Class::Waiting => Phase::Pending,
        Class::Running => Phase::Running,
        _ => Phase::Ended,
    }
}

/// One line of the listing, borrowing from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueLine<'a> {
    /// `123`, `15_3`, or `15_[0-9%2]` for the pending rest of an array.
    pub job_id: &'a str,
    /// How many jobs the line stands for (array ranges count each task).
    pub jobs: u64,
    pub state: &'a str,
    pub phase: Phase,
    /// One partition, or a comma list when the job may run in several.
    pub partition: &'a str,
    pub user: &'a str,
    /// Empty when Slurm printed `(null)`.
    pub account: &'a str,
    pub submitted: Option<NaiveDateTime>,
    pub nodes: u64,
    pub tasks: Option<u64>,
    pub tres_per_node: &'a str,
    pub tres_per_job: &'a str,
    pub tres_per_task: &'a str,
    pub tres_alloc: &'a str,
    /// Empty when there is none.
    pub dependency: &'a str,
    pub reason: &'a str,
}

/// Parse one line of the listing.
pub fn parse_line(line: &str) -> Result<QueueLine<'_>, LineError> {
    let [job_id, state, partition, user, account, submitted, nodes, tasks, per_node, per_job, per_task, alloc, dependency, reason] =
        split(line, &FIELDS)?;
    let jobs = read::array_task_count(job_id)
        .filter(|_| job_id.starts_with(|c: char| c.is_ascii_digit()))
        .ok_or_else(|| LineError {
            message: format!("job id {job_id:?} is not a number or an array range"),
        })?;
    Ok(QueueLine {
        job_id,
        jobs,
        state,
        phase: phase_of(state),
        partition,
        user,
        account: read::text(account),
        submitted: read::stamp(submitted),
        nodes: read::count(nodes).filter(|n| *n > 0).unwrap_or(1),
        tasks: read::count(tasks),
        tres_per_node: read::text(per_node),
        tres_per_job: read::text(per_job),
        tres_per_task: read::text(per_task),
        tres_alloc: read::text(alloc),
        dependency: read::text(dependency),
        reason,
    })
}

/// The slices one job of this line holds (running) or asks for (pending), by
/// GRES key (`gpu:1g.5gb`, or `gpu` for an untyped request).
///
/// A running job's `tres-alloc` names the types it got when the site lists
/// typed GRES in `AccountingStorageTRES`; that wins, because it resolves
/// untyped requests. Otherwise the request decides: per node × nodes, per job,
/// per task × tasks, the largest of them for each type (Slurm honours all).
pub fn slices_per_job(line: &QueueLine<'_>) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = Vec::new();
    let mut add_max = |key: String, count: u64| match out.iter_mut().find(|(k, _)| *k == key) {
        Some((_, c)) => *c = (*c).max(count),
        None => out.push((key, count)),
    };
    if line.phase == Phase::Running {
        let alloc = read::gres_in_tres(line.tres_alloc);
        if alloc.iter().any(|g| g.kind.is_some()) {
            for g in alloc.into_iter().filter(|g| g.kind.is_some()) {
                add_max(g.key(), g.count);
            }
            return out;
        }
    }
    for g in read::gres_in_tres(line.tres_per_node) {
        add_max(g.key(), g.count.saturating_mul(line.nodes));
    }
    for g in read::gres_in_tres(line.tres_per_job) {
        add_max(g.key(), g.count);
    }
    for g in read::gres_in_tres(line.tres_per_task) {
        add_max(g.key(), g.count.saturating_mul(line.tasks.unwrap_or(1)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::fields::SEPARATOR;
    use super::*;

    fn line(cols: &[&str]) -> String {
        let mut s = String::new();
        for c in cols {
            s.push_str(c);
            s.push(SEPARATOR);
        }
        s
    }

    #[test]
    fn a_recorded_running_line() {
        let l = line(&[
            "6",
            "RUNNING",
            "gpu",
            "researcher",
            "yrep",
            "2026-11-30T15:09:06",
            "1",
            "1",
            "gres:gpu:2g.10gb:1",
            "N/A",
            "N/A",
            "cpu=1,node=1,billing=1",
            "(null)",
            "None",
        ]);
        let q = parse_line(&l).unwrap();
        assert_eq!(q.job_id, "6");
        assert_eq!(q.phase, Phase::Running);
        assert_eq!(q.user, "researcher");
        assert_eq!(q.account, "yrep");
        assert_eq!(q.reason, "None");
        assert_eq!(q.dependency, "");
        assert_eq!(q.submitted, read::stamp("2026-11-30T15:09:06"));
        assert_eq!(slices_per_job(&q), vec![("gpu:2g.10gb".to_string(), 1)]);
    }

    #[test]
    fn pending_array_counts_its_tasks() {
        let l = line(&[
            "15_[0-9%2]",
            "PENDING",
            "gpu",
            "root",
            "(null)",
            "2026-11-30T15:09:06",
            "1",
            "1",
            "gres:gpu:1g.5gb:1",
            "N/A",
            "N/A",
            "cpu=1",
            "afterok:7(unfulfilled)",
            "Dependency",
        ]);
        let q = parse_line(&l).unwrap();
        assert_eq!(q.jobs, 10);
        assert_eq!(q.account, "");
        assert_eq!(q.dependency, "afterok:7(unfulfilled)");
        assert_eq!(q.phase, Phase::Pending);
    }

    #[test]
    fn reason_may_contain_the_separator_and_commas() {
        let mut l = line(&[
            "7",
            "PENDING",
            "gpu",
            "u",
            "a",
            "N/A",
            "2",
            "4",
            "gres:gpu:1g.5gb:1",
            "N/A",
            "N/A",
            "",
            "(null)",
        ]);
        l.push_str("ReqNodeNotAvail, UnavailableNodes:node2\u{1f}odd\u{1f}");
        let q = parse_line(&l).unwrap();
        assert_eq!(q.reason, "ReqNodeNotAvail, UnavailableNodes:node2\u{1f}odd");
        assert_eq!(q.submitted, None);
        assert_eq!(slices_per_job(&q), vec![("gpu:1g.5gb".to_string(), 2)]);
    }

    #[test]
    fn short_or_foreign_lines_are_errors() {
        let err = parse_line("JOBID PARTITION NAME").unwrap_err();
        assert!(err.message.contains("expected 14 columns"), "{err}");
        let l = line(&[
            "abc", "RUNNING", "gpu", "u", "a", "", "1", "1", "", "", "", "", "", "None",
        ]);
        assert!(parse_line(&l).unwrap_err().message.contains("\"abc\""));
    }

    #[test]
    fn typed_allocation_wins_over_an_untyped_request() {
        let l = line(&[
            "12",
            "RUNNING",
            "gpu",
            "u",
            "a",
            "",
            "1",
            "1",
            "gres:gpu:1",
            "N/A",
            "N/A",
            "cpu=1,mem=4G,node=1,billing=1,gres/gpu:1g.5gb=1,gres/gpu=1",
            "",
            "None",
        ]);
        let q = parse_line(&l).unwrap();
        assert_eq!(slices_per_job(&q), vec![("gpu:1g.5gb".to_string(), 1)]);
        // Without typed TRES accounting the request is all there is.
        let l = line(&[
            "12",
            "RUNNING",
            "gpu",
            "u",
            "a",
            "",
            "1",
            "1",
            "gres:gpu:1",
            "N/A",
            "N/A",
            "cpu=1,node=1,billing=1",
            "",
            "None",
        ]);
        assert_eq!(
            slices_per_job(&parse_line(&l).unwrap()),
            vec![("gpu".to_string(), 1)]
        );
    }

    #[test]
    fn per_job_per_node_and_per_task_requests() {
        let l = line(&[
            "11",
            "PENDING",
            "gpu",
            "u",
            "a",
            "",
            "2",
            "3",
            "gres:shard:2",
            "gres:gpu:1g.5gb:1",
            "gres/gpu:2g.10gb=1",
            "",
            "",
            "Resources",
        ]);
        let q = parse_line(&l).unwrap();
        let mut s = slices_per_job(&q);
        s.sort();
        assert_eq!(
            s,
            vec![
                ("gpu:1g.5gb".to_string(), 1),
                ("gpu:2g.10gb".to_string(), 3),
                ("shard".to_string(), 4)
            ]
        );
    }

    #[test]
    fn no_val_task_count_is_unknown() {
        let l = line(&[
            "17",
            "FAILED",
            "gpu",
            "root",
            "yrep",
            "2026-11-30T15:09:08",
            "1",
            "4294967294",
            "gres:gpu:1g.5gb:5",
            "N/A",
            "N/A",
            "cpu=1",
            "(null)",
            "BadConstraints",
        ]);
        let q = parse_line(&l).unwrap();
        assert_eq!(q.tasks, None);
        assert_eq!(q.phase, Phase::Ended);
    }

    #[test]
    fn phases() {
        assert_eq!(phase_of("PENDING"), Phase::Pending);
        assert_eq!(phase_of("REQUEUE_HOLD"), Phase::Pending);
        assert_eq!(phase_of("COMPLETING"), Phase::Running);
        assert_eq!(phase_of("SUSPENDED"), Phase::Running);
        assert_eq!(phase_of("COMPLETED"), Phase::Ended);
        assert_eq!(phase_of("SOME_FUTURE_STATE"), Phase::Ended);
    }

    #[test]
    fn listing_format_names_every_field_with_the_separator() {
        let arg = super::format();
        assert!(arg.starts_with("--Format=JobArrayID:\u{1f},State:\u{1f},"));
        assert!(arg.ends_with(",Reason:\u{1f}"));
        assert_eq!(arg.matches(',').count(), super::FIELDS.len() - 1);
    }

    #[test]
    fn filters_become_arguments() {
        let f = super::Filter {
            user: Some("alice".into()),
            partition: Some("gpu".into()),
            account: None,
        };
        let a = super::args(&f);
        assert_eq!(&a[..4], ["-h", "-a", "-t", "all"]);
        assert!(a.contains(&"--user=alice".to_string()));
        assert!(a.contains(&"--partition=gpu".to_string()));
        assert!(!a.iter().any(|x| x.starts_with("--account")));
    }
}
