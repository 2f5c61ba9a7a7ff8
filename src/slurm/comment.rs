//! The tag yolo-sched puts in each job's `--comment`
//! (`yolo-sched:RUN:TOKEN:STAGE`), which finds a run's jobs through Slurm
//! (`squeue::tagged_mine`, `run::team`, `advise`'s history) and a lost
//! submission's jobs (`run::journal`). What follows the first space is the
//! job agent's measurement (`advise::need`).

/// What every job comment of yolo-sched starts with.
pub const COMMENT_PREFIX: &str = "yolo-sched:";

/// The `--comment` of one stage's job.
pub fn comment(run_id: &str, token: &str, stage: &str) -> String {
    format!("{COMMENT_PREFIX}{run_id}:{token}:{stage}")
}

/// What a job's comment says: the run, and (for jobs submitted with a
/// journal) the submission token and stage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tag<'a> {
    pub run_id: &'a str,
    pub token: Option<&'a str>,
    pub stage: Option<&'a str>,
}

pub fn parse_comment(c: &str) -> Option<Tag<'_>> {
    // What follows the first space is the job agent's measurement
    // (`advise::need`), not part of the tag.
    let c = c.split(' ').next().unwrap_or(c);
    let rest = c.strip_prefix(COMMENT_PREFIX)?;
    let mut parts = rest.splitn(3, ':');
    let run_id = parts.next().filter(|r| !r.is_empty())?;
    Some(Tag {
        run_id,
        token: parts.next(),
        stage: parts.next(),
    })
}
