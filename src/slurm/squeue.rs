//! Jobs of a run from one `squeue -j <ids> --Format=…` call; the user's
//! tagged jobs; an account's or user's jobs: one field set ([`FORMAT`]) and
//! one parser ([`parse_jobs`]) for all three. The report's listing of every
//! job is `slurm::listing` (its own compact fields, borrowed, for a queue of
//! 10^5 jobs), and node-setup's queue `slurm::queue` (arrays expanded, by
//! priority).
//!
//! In 22.05 `squeue --json` ignores `-j` and `-t` and prints every job with
//! 111 fields; a delimited `--Format` honours both and costs the controller
//! and us a fraction of that, so queries about a run use it.

use anyhow::Result;
use chrono::{DateTime, Utc};

use super::time::{parse_time, to_utc};
use super::Slurm;

/// Filters passed to `squeue` (and the report's `sacct`) so that slurmctld
/// sends less (a single user makes squeue ask for that user's jobs only).
/// The parsers filter again, because older clients or stand-ins may ignore them.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub user: Option<String>,
    pub partition: Option<String>,
    pub account: Option<String>,
}

/// The fields of every job query of this module, in order, the comment
/// last: it is the one field that may hold `|`. Each ends with `|`, which no
/// other field value contains (job names are checked when specs are read;
/// reasons and states are words).
pub const FORMAT: &str = "JobID:|,ArrayJobID:|,ArrayTaskID:|,State:|,Reason:|,TimeUsed:|,TimeLimit:|,NodeList:|,tres-per-node:|,exit_code:|,Name:|,UserName:|,Account:|,SubmitTime:|,StartTime:|,EndTime:|,WorkDir:|,Comment:|";

/// How many fields [`FORMAT`] names.
const COLUMNS: usize = 18;

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

fn opt(s: &str) -> String {
    super::value::present(s).to_string()
}

/// The most task ids one list expands to (Slurm's largest `MaxArraySize`
/// is 4,000,001).
pub const MAX_TASKS: u64 = 4_000_001;

/// Expand `4-9%2`, `[1,3,5-6]`, `0-10:2`, `7` into task ids (throttle suffix
/// dropped) by the one range rule (`gres::hostlist::spans`); empty for
/// anything else (`N/A`, a list past [`MAX_TASKS`] or past 32-bit ids).
pub fn parse_task_list(s: &str) -> Vec<u32> {
    let s = s.trim().trim_start_matches('[').trim_end_matches(']');
    let s = s.split('%').next().unwrap_or("");
    crate::gres::hostlist::indices(s, MAX_TASKS)
        .ok()
        .and_then(|ids| ids.into_iter().map(|i| u32::try_from(i).ok()).collect())
        .unwrap_or_default()
}

/// The queue row of a line's first 11 fields; `None` without an array id.
fn row_of(f: &[&str]) -> Option<QueueRow> {
    let array_job_id = f[1].trim().parse().ok()?;
    // Slurm prints the raw wait status: exit code in the high byte.
    let exit_code = f[9]
        .trim()
        .parse::<i32>()
        .ok()
        .map(|raw| if raw > 255 { raw >> 8 } else { raw });
    Some(QueueRow {
        job_id: f[0].trim().to_string(),
        array_job_id,
        tasks: if opt(f[2]).is_empty() {
            Vec::new()
        } else {
            parse_task_list(f[2])
        },
        state: f[3].trim().to_string(),
        reason: opt(f[4]),
        time_used: f[5].trim().to_string(),
        time_limit: f[6].trim().to_string(),
        nodes: opt(f[7]),
        gres: opt(f[8]),
        exit_code,
        name: f[10].trim().to_string(),
    })
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
    let text = slurm.stdout("squeue", &["--me", "-h", "-O", FORMAT])?;
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

/// Parse `squeue -h -O FORMAT`: each job as the queue row `status` reads,
/// with its facts. Lines without every field are skipped.
pub fn parse_jobs(text: &str) -> Vec<(QueueRow, JobFacts)> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.splitn(COLUMNS, '|').collect();
            if f.len() < COLUMNS {
                return None;
            }
            let row = row_of(&f[..11])?;
            let state = row.state.clone();
            // Pending and running jobs carry the expected start and end
            // (`states::classify`: waiting or running).
            use super::states::{classify, Class};
            let finished = !matches!(classify(&state), Class::Waiting | Class::Running);
            let started = (state != "PENDING")
                .then(|| parse_time(f[14]).and_then(to_utc))
                .flatten();
            let facts = JobFacts {
                job_id: row.job_id.clone(),
                array_job_id: row.array_job_id,
                state,
                name: row.name.clone(),
                user: opt(f[11]),
                account: opt(f[12]),
                submitted: parse_time(f[13]).and_then(to_utc),
                started,
                ended: finished
                    .then(|| parse_time(f[15]).and_then(to_utc))
                    .flatten(),
                gres: row.gres.trim_start_matches("gres:").to_string(),
                workdir: opt(f[16]),
                comment: opt(f[17].strip_suffix('|').unwrap_or(f[17])),
            };
            Some((row, facts))
        })
        .collect()
}

/// Every job of `who` that slurmctld still knows and lets the caller see
/// (`PrivateData`), in one call.
pub fn by_who(slurm: &Slurm, who: &Who) -> Result<Vec<(QueueRow, JobFacts)>> {
    let mut args = vec!["-h", "-t", "all", "-O", FORMAT];
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
    let out = slurm.run_raw("squeue", &["-h", "-t", "all", "-j", &list, "-O", FORMAT])?;
    if !out.status.success() {
        let err = out.stderr_str();
        // Every id purged: slurmctld answers "Invalid job id specified".
        if err.contains("Invalid job id") {
            return Ok(Vec::new());
        }
        return Err(super::CommandFailed {
            command: crate::process::display_command(
                "squeue",
                &["-h", "-t", "all", "-j", &list, "-O", FORMAT],
            ),
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
    use super::*;

    /// A line of `FORMAT` for a job, its reason and comment.
    fn line(id: &str, state: &str, reason: &str, comment: &str) -> String {
        format!("{id}|{id}|N/A|{state}|{reason}|0:00|1:00:00|||0|n|u|a|2026-12-01T17:26:20|N/A|N/A|/tmp|{comment}|\n")
    }

    #[test]
    fn tagged_rows_fold_arrays_and_keep_comments_with_bars() {
        let text = [
            line("12", "PENDING", "JobHeldUser", "yolo-sched:r-1:ab:train"),
            line("12", "PENDING", "JobHeldUser", "yolo-sched:r-1:ab:train"),
            line("13", "RUNNING", "None", "yolo-sched:r-1:ab:export"),
            line("14", "PENDING", "Priority", "someone|else"),
            line("15", "PENDING", "JobHeldUser", "yolo-sched:odd|comment"),
            line("16", "PENDING", "Priority", "(null)"),
        ]
        .concat();
        let t = tagged(&parse_jobs(&text), "yolo-sched:");
        assert_eq!(t.len(), 3, "{t:?}");
        assert_eq!((t[0].job_id, t[0].held), (12, true));
        assert_eq!((t[1].job_id, t[1].held), (13, false));
        assert_eq!(t[2].comment, "yolo-sched:odd|comment");
    }

    #[test]
    fn recorded_rows_parse() {
        let facts = "u|a|2026-12-01T17:26:20|N/A|N/A|/tmp|(null)|";
        let text = format!(
            "21|21|N/A|RUNNING|None|0:01|UNLIMITED|node1|gres:gpu:1g.5gb:1|(null)|yolo.train|{facts}\n\
             22|21|FAILED|NonZeroExitCode|\n\
             30_[2-5%2]|30|2-5%2|PENDING|JobArrayTaskLimit|0:00|1:00:00|||gres:gpu:1g.5gb:1|r.train|{facts}\n\
             30_1|30|1|COMPLETED|None|0:05|1:00:00|node2|gres:gpu:1g.5gb:1|768|r.train|{facts}\n"
        );
        let rows: Vec<QueueRow> = parse_jobs(&text).into_iter().map(|(r, _)| r).collect();
        assert_eq!(rows.len(), 3, "the short line is skipped");
        assert_eq!(rows[0].state, "RUNNING");
        assert_eq!(rows[0].reason, "");
        assert_eq!(rows[0].gres, "gres:gpu:1g.5gb:1");
        assert_eq!(rows[1].tasks, vec![2, 3, 4, 5]);
        assert_eq!(rows[1].reason, "JobArrayTaskLimit");
        assert_eq!(rows[2].exit_code, Some(3));
        assert_eq!(rows[2].tasks, vec![1]);
    }

    #[test]
    fn rows_by_who_are_queue_rows_with_facts() {
        let text = "\
31|31|N/A|RUNNING|None|0:05|1:00:00|node1|gres:gpu:1g.5gb:1|0|pcb.train|ys-bob|vision|2026-12-01T17:26:20|2026-12-01T17:26:21|2026-12-01T18:26:21|/home/ys-bob/runs/pcb|yolo-sched:pcb-1:ab:train|
32|32|N/A|PENDING|Dependency|0:00|1:00:00|||(null)|pcb.export|ys-bob|vision|2026-12-01T17:26:20|N/A|N/A|/home/ys-bob/runs/pcb|yolo-sched:pcb-1:ab:export|
";
        let rows = parse_jobs(text);
        assert_eq!(rows.len(), 2, "{rows:?}");
        let (q, f) = &rows[0];
        assert_eq!(
            (q.state.as_str(), q.gres.as_str()),
            ("RUNNING", "gres:gpu:1g.5gb:1")
        );
        assert_eq!(f.gres, "gpu:1g.5gb:1");
        assert_eq!((f.user.as_str(), f.account.as_str()), ("ys-bob", "vision"));
        assert!(f.started.is_some());
        assert_eq!(f.ended, None, "a running job's end is only expected");
        assert_eq!(f.comment, "yolo-sched:pcb-1:ab:train");
        let (q, f) = &rows[1];
        assert_eq!(q.reason, "Dependency");
        assert_eq!((f.started, f.gres.as_str()), (None, ""));
    }

    #[test]
    fn task_lists() {
        assert_eq!(parse_task_list("4-6%2"), vec![4, 5, 6]);
        assert_eq!(parse_task_list("[1,3,7-8]"), vec![1, 3, 7, 8]);
        assert_eq!(parse_task_list("N/A"), Vec::<u32>::new());
        assert_eq!(parse_task_list("0-3,5"), vec![0, 1, 2, 3, 5]);
        assert_eq!(parse_task_list("1-7:3%1"), vec![1, 4, 7], "a step");
        assert_eq!(parse_task_list("(null)"), Vec::<u32>::new());
        assert_eq!(parse_task_list(""), Vec::<u32>::new());
        assert_eq!(parse_task_list("0-4294967296"), Vec::<u32>::new());
    }
}
