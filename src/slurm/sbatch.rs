//! Submitting batch jobs.

use anyhow::anyhow;

use super::Slurm;

/// A Slurm job id (for an array, the array's id).
pub type JobId = u64;

/// Parse `sbatch --parsable` output: `123` or `123;cluster`.
pub fn parse_parsable(stdout: &str) -> Option<JobId> {
    let first = stdout.lines().find(|l| !l.trim().is_empty())?;
    first.split(';').next()?.trim().parse().ok()
}

/// What one `sbatch` call came to.
#[derive(Debug)]
pub enum Answer {
    /// Slurm accepted the job and said its id.
    Accepted(JobId),
    /// Slurm said no (or sbatch could not be started): no job was created.
    Refused(anyhow::Error),
    /// No telling: a timeout, a lost connection, an answer without an id.
    /// A job may exist; look for it by its submission token before retrying.
    Unknown(anyhow::Error),
}

/// The full argument list of a submission: what the real call runs and what
/// a dry run prints.
pub fn command_args(args: &[String]) -> Vec<String> {
    let mut full = vec!["--parsable".to_string()];
    full.extend_from_slice(args);
    full
}

/// Run `sbatch --parsable ARGS…` once. Never retried here: a controller that
/// times out may still have queued the job, so only the caller, who can
/// look the job up by its token, may decide to try again.
pub fn try_submit(slurm: &Slurm, args: &[String]) -> Answer {
    let full = command_args(args);
    let refs: Vec<&str> = full.iter().map(String::as_str).collect();
    match slurm.run("sbatch", &refs) {
        Ok(out) => match parse_parsable(&out.stdout_str()) {
            Some(id) => Answer::Accepted(id),
            None => Answer::Unknown(anyhow!(
                "`sbatch` succeeded but printed no job id (stdout: {:?})",
                crate::text::clip(&out.stdout_str())
            )),
        },
        Err(e) => {
            if let Some(failed) = e.downcast_ref::<super::CommandFailed>() {
                if super::runner::is_transient(&failed.stderr) {
                    return Answer::Unknown(e);
                }
                return Answer::Refused(e);
            }
            match e.downcast_ref::<crate::process::RunError>() {
                Some(crate::process::RunError::Spawn { .. }) => Answer::Refused(e),
                _ => Answer::Unknown(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parsable_forms() {
        assert_eq!(parse_parsable("42\n"), Some(42));
        assert_eq!(parse_parsable("42;yolo\n"), Some(42));
        assert_eq!(parse_parsable("\n"), None);
        assert_eq!(parse_parsable("Submitted batch job 42"), None);
    }
}
