//! Acting on jobs and nodes: `scancel`, `scontrol release`, `scontrol
//! update` of a node and of a job's dependency, and the two queries node-setup makes of one node.
//! The argument lists live here, so callers say what they want done.

use anyhow::Result;

use super::Slurm;

fn id_list(ids: &[u64]) -> Vec<String> {
    ids.iter().map(u64::to_string).collect()
}

/// Cancel jobs in one call, quietly for jobs that already ended (retried
/// on transient errors). An array id stands for all its tasks.
pub fn cancel(slurm: &Slurm, ids: &[u64]) -> Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    let ids = id_list(ids);
    let mut args = vec!["--quiet"];
    args.extend(ids.iter().map(String::as_str));
    slurm.run_retrying("scancel", &args)?;
    Ok(())
}

/// Cancel jobs in one call (retried on transient errors, as `cancel` is)
/// and say what `scancel` complained of: `None` when it took every job,
/// else its stderr, where the caller reads the per-job refusals
/// (`Access/permission denied`). `quiet` leaves out jobs that already
/// ended; without it they are named (`Invalid job id specified`).
pub fn cancel_answer(slurm: &Slurm, ids: &[u64], quiet: bool) -> Result<Option<String>> {
    let ids = id_list(ids);
    let mut args: Vec<&str> = if quiet { vec!["--quiet"] } else { vec![] };
    args.extend(ids.iter().map(String::as_str));
    match slurm.run_retrying("scancel", &args) {
        Ok(_) => Ok(None),
        Err(e) => match e.downcast_ref::<super::CommandFailed>() {
            Some(failed) => Ok(Some(failed.stderr.clone())),
            None => Err(e),
        },
    }
}

/// Release held jobs in one call.
pub fn release(slurm: &Slurm, ids: &[u64]) -> Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    slurm.run_retrying("scontrol", &["release", &id_list(ids).join(",")])?;
    Ok(())
}

/// Drain `node` with `reason` (also: change a drained node's reason).
pub fn drain_node(slurm: &Slurm, node: &str, reason: &str) -> Result<()> {
    let name = format!("NodeName={node}");
    let reason = format!("Reason={reason}");
    slurm.run_retrying("scontrol", &["update", &name, "State=DRAIN", &reason])?;
    Ok(())
}

/// Resume `node`.
pub fn resume_node(slurm: &Slurm, node: &str) -> Result<()> {
    let name = format!("NodeName={node}");
    slurm.run_retrying("scontrol", &["update", &name, "State=RESUME"])?;
    Ok(())
}

/// A job's comment as slurmctld holds it now (`squeue -h -j J`, the job
/// queries' one field list, `squeue::jobs::FIELDS`, read by
/// `squeue::parse_jobs`); `None` when the job is no longer known. Asked
/// once, not retried: the job agent asks from inside the job and must never
/// wait on a busy controller.
pub fn job_comment(slurm: &Slurm, job_id: &str) -> Result<Option<String>> {
    let format = super::squeue::jobs::format();
    let out = slurm.run("squeue", &["-h", "-j", job_id, &format])?;
    Ok(super::squeue::parse_jobs(&out.stdout_str())
        .into_iter()
        .next()
        .map(|(_, facts)| facts.comment))
}

/// Set a job's comment (`scontrol update JobId=J Comment=…`): its owner may
/// while the job runs; Slurm 22.05 refuses it once the job has ended
/// ("Job has already finished"), cancelled or timed out included. Once,
/// not retried.
pub fn set_comment(slurm: &Slurm, job_id: &str, comment: &str) -> Result<()> {
    let id = format!("JobId={job_id}");
    let comment = format!("Comment={comment}");
    slurm.run("scontrol", &["update", &id, &comment])?;
    Ok(())
}

/// Set a pending job's dependency (`scontrol update JobId=J
/// Dependency=afterany:1:2`), replacing the one it had: a search's tell job
/// made to wait for a trial's new job too. Retried on transient errors (the
/// same value set twice is the same).
pub fn set_dependency(slurm: &Slurm, job_id: &str, dependency: &str) -> Result<()> {
    let id = format!("JobId={job_id}");
    let dependency = format!("Dependency={dependency}");
    slurm.run_retrying("scontrol", &["update", &id, &dependency])?;
    Ok(())
}

/// Job ids running or completing on `node`.
pub fn jobs_on(slurm: &Slurm, node: &str) -> Result<Vec<String>> {
    let out = slurm.stdout("squeue", &["-h", "-w", node, "-t", "R,CG", "-o", "%A"])?;
    Ok(out
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect())
}

/// The node's state and reason (`sinfo -h -N -n <node> -o '%T|%E'`), e.g.
/// `("drained", "yolo-sched node-setup: …")`; `None` when Slurm does not know it.
pub fn node_state_and_reason(slurm: &Slurm, node: &str) -> Result<Option<(String, String)>> {
    let out = slurm.stdout("sinfo", &["-h", "-N", "-n", node, "-o", "%T|%E"])?;
    Ok(parse_state_line(&out))
}

fn parse_state_line(out: &str) -> Option<(String, String)> {
    let line = out.lines().find(|l| !l.trim().is_empty())?;
    let (state, reason) = line.split_once('|')?;
    Some((state.trim().to_string(), reason.trim().to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_line_is_state_and_reason() {
        assert_eq!(
            parse_state_line("drained|yolo-sched node-setup: applying\n"),
            Some(("drained".into(), "yolo-sched node-setup: applying".into()))
        );
        assert_eq!(parse_state_line("\n"), None);
        assert_eq!(parse_state_line("idle"), None);
    }
}
