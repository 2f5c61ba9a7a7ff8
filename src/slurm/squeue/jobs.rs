//! The job queries: a run's jobs (`squeue -j <ids>`), the user's tagged
//! jobs, an account's or user's jobs, and one job's comment: one field list
//! ([`FIELDS`]) and one parser ([`parse_jobs`]) for all of them.
//!
//! In 22.05 `squeue --json` ignores `-j` and `-t` and prints every job with
//! 111 fields; a delimited `--Format` honours both and costs the controller
//! and us a fraction of that, so queries about a run use it.

use anyhow::Result;
use chrono::{DateTime, Utc};

use super::fields::{format_arg, free_text_last, split, Field};
use super::read;
use crate::slurm::Slurm;

/// The fields of every job query, in the order [`parse_jobs`] reads them:
/// what `status` reads of a job (its row) and what a run found through
/// Slurm is made of (its facts). The two free fields come last, the comment
/// (the user's text, yolo-sched's tag) after the reason.
///
/// The first is `JobArrayID`: `12` for a plain job, `12_3` for an array's
/// task and `12_[4-9%2]` for its pending tasks, what [`QueueRow::job_id`]
/// holds (`JobID` prints a task's own number, `13`, from which no task is
/// read; 22.05, checked on the local cluster).
pub const FIELDS: [Field; 18] = [
    Field::JobArrayId,
    Field::ArrayJobId,
    Field::ArrayTaskId,
    Field::State,
    Field::TimeUsed,
    Field::TimeLimit,
    Field::NodeList,
    Field::TresPerNode,
    Field::ExitCode,
    Field::Name,
    Field::UserName,
    Field::Account,
    Field::SubmitTime,
    Field::StartTime,
    Field::EndTime,
    Field::WorkDir,
    Field::Reason,
    Field::Comment,
];

const _: () = assert!(free_text_last(&FIELDS));

/// The job queries' `--Format=` argument ([`FIELDS`]).
pub fn format() -> String {
    format_arg(&FIELDS)
}

/// One line of `squeue`: a job, an array task, or a pending array's remaining tasks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueRow {
    /// `12`, `12_3`, or `12_[4-9%2]`.
    pub job_id: String,
    /// The array's id (the job id for a plain job).
    pub array_job_id: u64,
    /// The task ids this row stands for; empty for a plain job.
    pub tasks: Vec<u32>,
    pub state: String,
    pub reason: String,
    pub time_used: String,
    pub time_limit: String,
    pub nodes: String,
    pub gres: String,
    /// Exit code of the job's script, when it has one.
    pub exit_code: Option<i32>,
    pub name: String,
}

/// A queued job of the calling user whose comment starts with a prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tagged {
    /// The job id (an array's id for its tasks).
    pub job_id: u64,
    /// Held by a user hold (`--hold`, `scontrol hold`).
    pub held: bool,
    pub comment: String,
}

/// The jobs of `rows` whose comment starts with `prefix`: one per job, array
/// tasks folded into their array.
pub fn tagged(rows: &[(QueueRow, JobFacts)], prefix: &str) -> Vec<Tagged> {
    let mut out: Vec<Tagged> = Vec::new();
    for (row, facts) in rows {
        if !facts.comment.starts_with(prefix) {
            continue;
        }
        let held = row.reason == "JobHeldUser";
        match out.iter_mut().find(|t| t.job_id == row.array_job_id) {
            // An array is held while any of its tasks is.
            Some(t) => t.held |= held,
            None => out.push(Tagged {
                job_id: row.array_job_id,
                held,
                comment: facts.comment.clone(),
            }),
        }
    }
    out
}

/// The calling user's queued jobs whose comment starts with `prefix`, in one call.
pub fn tagged_mine(slurm: &Slurm, prefix: &str) -> Result<Vec<Tagged>> {
    let text = slurm.stdout("squeue", &["--me", "-h", &format()])?;
    Ok(tagged(&parse_jobs(&text), prefix))
}

/// Whose jobs to find: an account, a user, both, or (neither) every job
/// Slurm lets the caller see. Values are single names (checked by the caller).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Who {
    pub account: Option<String>,
    pub user: Option<String>,
}

/// Who, where and when of one job (or array task, or pending array), as
/// `squeue` or `sacct` tell it: what a run found through Slurm is made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobFacts {
    /// `12`, `12_3`, or `12_[4-9%2]`.
    pub job_id: String,
    pub array_job_id: u64,
    pub state: String,
    pub name: String,
    pub user: String,
    pub account: String,
    /// The job's working directory (`--chdir`; a yolo-sched job's run directory).
    pub workdir: String,
    pub comment: String,
    pub submitted: Option<DateTime<Utc>>,
    pub started: Option<DateTime<Utc>>,
    pub ended: Option<DateTime<Utc>>,
    /// `gpu:1g.5gb:1`, empty for a CPU job.
    pub gres: String,
}

/// One line of [`FIELDS`] as the queue row `status` reads and the job's
/// facts; `None` for a line without every field or without an array id.
fn job_of(line: &str) -> Option<(QueueRow, JobFacts)> {
    let [job_id, array_job_id, task_id, state, time_used, time_limit, nodes, gres, exit_code, name, user, account, submitted, started, ended, workdir, reason, comment] =
        split(line, &FIELDS).ok()?;
    let row = QueueRow {
        job_id: read::word(job_id).to_string(),
        array_job_id: read::word(array_job_id).parse().ok()?,
        tasks: read::parse_task_list(task_id),
        state: read::word(state).to_string(),
        reason: read::text(reason).to_string(),
        time_used: read::word(time_used).to_string(),
        time_limit: read::word(time_limit).to_string(),
        nodes: read::text(nodes).to_string(),
        gres: read::text(gres).to_string(),
        exit_code: read::exit_code(exit_code),
        name: read::word(name).to_string(),
    };
    // Pending and running jobs carry the expected start and end
    // (`states::classify`: waiting or running).
    use crate::slurm::states::{classify, Class};
    let finished = !matches!(classify(&row.state), Class::Waiting | Class::Running);
    let facts = JobFacts {
        job_id: row.job_id.clone(),
        array_job_id: row.array_job_id,
        state: row.state.clone(),
        name: row.name.clone(),
        user: read::text(user).to_string(),
        account: read::text(account).to_string(),
        submitted: read::instant(submitted),
        started: (row.state != "PENDING")
            .then(|| read::instant(started))
            .flatten(),
        ended: finished.then(|| read::instant(ended)).flatten(),
        gres: row.gres.trim_start_matches("gres:").to_string(),
        workdir: read::text(workdir).to_string(),
        comment: read::text(comment).to_string(),
    };
    Some((row, facts))
}

/// Parse the lines of a job query ([`FIELDS`]): each job as the queue row
/// `status` reads, with its facts. Lines without every field are skipped.
pub fn parse_jobs(text: &str) -> Vec<(QueueRow, JobFacts)> {
    text.lines().filter_map(job_of).collect()
}

/// Every job of `who` that slurmctld still knows and lets the caller see
/// (`PrivateData`), in one call.
pub fn by_who(slurm: &Slurm, who: &Who) -> Result<Vec<(QueueRow, JobFacts)>> {
    let format = format();
    let mut args = vec!["-h", "-t", "all", format.as_str()];
    if let Some(a) = &who.account {
        args.extend(["-A", a.as_str()]);
    }
    if let Some(u) = &who.user {
        args.extend(["-u", u.as_str()]);
    }
    let text = slurm.stdout("squeue", &args)?;
    Ok(parse_jobs(&text))
}

/// Every job (and array task) with these ids that slurmctld still knows, in one call.
pub fn jobs(slurm: &Slurm, ids: &[u64]) -> Result<Vec<QueueRow>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let list: Vec<String> = ids.iter().map(u64::to_string).collect();
    let list = list.join(",");
    let format = format();
    let args = ["-h", "-t", "all", "-j", &list, &format];
    let out = slurm.run_raw("squeue", &args)?;
    if !out.status.success() {
        let err = out.stderr_str();
        // Every id purged: slurmctld answers "Invalid job id specified".
        if err.contains("Invalid job id") {
            return Ok(Vec::new());
        }
        return Err(crate::slurm::CommandFailed {
            command: crate::process::display_command("squeue", &args),
            status: crate::process::describe_status(&out.status),
            stderr: err,
        }
        .into());
    }
    Ok(parse_jobs(&out.stdout_str())
        .into_iter()
        .map(|(row, _)| row)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::super::fields::SEPARATOR;
    use super::*;

    /// A line of [`FIELDS`]: these values, the rest a running plain job's.
    fn line(set: &[(Field, &str)]) -> String {
        let default = |f: Field| match f {
            Field::JobArrayId | Field::ArrayJobId => "21",
            Field::ArrayTaskId | Field::StartTime | Field::EndTime => "N/A",
            Field::State => "RUNNING",
            Field::TimeUsed => "0:01",
            Field::TimeLimit => "1:00:00",
            Field::NodeList => "node1",
            Field::TresPerNode => "gres:gpu:1g.5gb:1",
            Field::ExitCode => "0",
            Field::Name => "yolo.train",
            Field::UserName => "u",
            Field::Account => "a",
            Field::SubmitTime => "2026-12-01T17:26:20",
            Field::WorkDir => "/tmp",
            Field::Reason => "None",
            _ => "(null)",
        };
        let mut s = String::new();
        for f in FIELDS {
            let value = set
                .iter()
                .find(|(g, _)| *g == f)
                .map_or(default(f), |(_, v)| v);
            s.push_str(value);
            s.push(SEPARATOR);
        }
        s.push('\n');
        s
    }

    /// A job, its state, reason and comment.
    fn job(id: &str, state: &str, reason: &str, comment: &str) -> String {
        line(&[
            (Field::JobArrayId, id),
            (Field::ArrayJobId, id),
            (Field::State, state),
            (Field::Reason, reason),
            (Field::Comment, comment),
        ])
    }

    #[test]
    fn tagged_rows_fold_arrays_and_keep_comments_with_separators() {
        let text = [
            job("12", "PENDING", "JobHeldUser", "yolo-sched:r-1:ab:train"),
            job("12", "PENDING", "JobHeldUser", "yolo-sched:r-1:ab:train"),
            job("13", "RUNNING", "None", "yolo-sched:r-1:ab:export"),
            job("14", "PENDING", "Priority", "someone\u{1f}else|too"),
            job(
                "15",
                "PENDING",
                "JobHeldUser",
                "yolo-sched:odd\u{1f}comment",
            ),
            job("16", "PENDING", "Priority", "(null)"),
        ]
        .concat();
        let t = tagged(&parse_jobs(&text), "yolo-sched:");
        assert_eq!(t.len(), 3, "{t:?}");
        assert_eq!((t[0].job_id, t[0].held), (12, true));
        assert_eq!((t[1].job_id, t[1].held), (13, false));
        assert_eq!(t[2].comment, "yolo-sched:odd\u{1f}comment");
    }

    #[test]
    fn rows_of_plain_jobs_arrays_and_tasks() {
        let text = [
            line(&[(Field::TimeLimit, "UNLIMITED"), (Field::ExitCode, "(null)")]),
            "22\u{1f}21\u{1f}FAILED\u{1f}NonZeroExitCode\u{1f}\n".to_string(),
            line(&[
                (Field::JobArrayId, "30_[2-5%2]"),
                (Field::ArrayJobId, "30"),
                (Field::ArrayTaskId, "2-5%2"),
                (Field::State, "PENDING"),
                (Field::NodeList, ""),
                (Field::Reason, "JobArrayTaskLimit"),
            ]),
            line(&[
                (Field::JobArrayId, "30_1"),
                (Field::ArrayJobId, "30"),
                (Field::ArrayTaskId, "1"),
                (Field::State, "COMPLETED"),
                (Field::ExitCode, "768"),
            ]),
        ]
        .concat();
        let rows: Vec<QueueRow> = parse_jobs(&text).into_iter().map(|(r, _)| r).collect();
        assert_eq!(rows.len(), 3, "the short line is skipped");
        assert_eq!(rows[0].state, "RUNNING");
        assert_eq!(rows[0].reason, "");
        assert_eq!(rows[0].gres, "gres:gpu:1g.5gb:1");
        assert_eq!(rows[0].exit_code, None);
        assert_eq!(rows[1].tasks, vec![2, 3, 4, 5]);
        assert_eq!(rows[1].reason, "JobArrayTaskLimit");
        assert_eq!(rows[1].nodes, "");
        assert_eq!(rows[2].exit_code, Some(3));
        assert_eq!(rows[2].tasks, vec![1]);
        assert_eq!(rows[1].job_id, "30_[2-5%2]");
        assert_eq!(rows[2].job_id, "30_1");
    }

    #[test]
    fn rows_by_who_are_queue_rows_with_facts() {
        let bob = [
            (Field::UserName, "ys-bob"),
            (Field::Account, "vision"),
            (Field::WorkDir, "/home/ys-bob/runs/pcb"),
        ];
        let running = [
            (Field::JobArrayId, "31"),
            (Field::ArrayJobId, "31"),
            (Field::Name, "pcb.train"),
            (Field::StartTime, "2026-12-01T17:26:21"),
            (Field::EndTime, "2026-12-01T18:26:21"),
            (Field::Comment, "yolo-sched:pcb-1:ab:train"),
        ];
        let pending = [
            (Field::JobArrayId, "32"),
            (Field::ArrayJobId, "32"),
            (Field::State, "PENDING"),
            (Field::TimeUsed, "0:00"),
            (Field::NodeList, ""),
            (Field::TresPerNode, ""),
            (Field::ExitCode, "(null)"),
            (Field::Name, "pcb.export"),
            (Field::Reason, "Dependency"),
            (Field::Comment, "yolo-sched:pcb-1:ab:export"),
        ];
        let text = [
            line(&[&bob[..], &running[..]].concat()),
            line(&[&bob[..], &pending[..]].concat()),
        ]
        .concat();
        let rows = parse_jobs(&text);
        assert_eq!(rows.len(), 2, "{rows:?}");
        let (q, f) = &rows[0];
        assert_eq!(
            (q.state.as_str(), q.gres.as_str()),
            ("RUNNING", "gres:gpu:1g.5gb:1")
        );
        assert_eq!(f.gres, "gpu:1g.5gb:1");
        assert_eq!((f.user.as_str(), f.account.as_str()), ("ys-bob", "vision"));
        assert_eq!(f.workdir, "/home/ys-bob/runs/pcb");
        assert!(f.started.is_some());
        assert_eq!(f.ended, None, "a running job's end is only expected");
        assert_eq!(f.comment, "yolo-sched:pcb-1:ab:train");
        let (q, f) = &rows[1];
        assert_eq!(q.reason, "Dependency");
        assert_eq!((f.started, f.gres.as_str()), (None, ""));
    }

    #[test]
    fn the_job_queries_ask_for_their_fields_by_name() {
        let arg = format();
        assert!(
            arg.starts_with("--Format=JobArrayID:\u{1f},ArrayJobID:\u{1f},"),
            "{arg}"
        );
        assert!(arg.ends_with(",Reason:\u{1f},Comment:\u{1f}"), "{arg}");
    }
}
