//! Submitting batch jobs.

use anyhow::{bail, Result};

use super::Slurm;

/// A Slurm job id (for an array, the array's id).
pub type JobId = u64;

/// Parse `sbatch --parsable` output: `123` or `123;cluster`.
pub fn parse_parsable(stdout: &str) -> Option<JobId> {
    let first = stdout.lines().find(|l| !l.trim().is_empty())?;
    first.split(';').next()?.trim().parse().ok()
}

/// Run `sbatch --parsable ARGS…` and return the job id. Transient controller
/// errors are retried: a refused submission creates no job, so a retry cannot
/// duplicate one.
pub fn submit(slurm: &Slurm, args: &[&str]) -> Result<JobId> {
    let mut full = vec!["--parsable"];
    full.extend_from_slice(args);
    let out = slurm.run_retrying("sbatch", &full)?;
    match parse_parsable(&out.stdout_str()) {
        Some(id) => Ok(id),
        None => bail!(
            "`sbatch` succeeded but printed no job id (stdout: {:?})",
            out.stdout_str()
        ),
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
