//! Running Slurm client commands.

use std::fmt;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Result;

use crate::process::{self, Captured};

/// Environment variable: seconds before a Slurm command is killed (default 30).
pub const TIMEOUT_ENV: &str = "YOLO_SCHED_SLURM_TIMEOUT";
/// Environment variable: append every Slurm command line run to this file
/// (used by tests and benchmarks to count calls).
pub const TRACE_ENV: &str = "YOLO_SCHED_SLURM_TRACE";

static CALLS: AtomicUsize = AtomicUsize::new(0);

/// Environment variables that make Slurm clients print other fields, other
/// time formats or fewer jobs than asked for. They are a user's settings for
/// interactive use; yolo-sched parses the clients' documented defaults, so
/// every client it runs gets them removed.
pub const CLIENT_OVERRIDES: [&str; 14] = [
    "SQUEUE_ACCOUNT",
    "SQUEUE_FORMAT",
    "SQUEUE_FORMAT2",
    "SQUEUE_LICENSES",
    "SQUEUE_NAMES",
    "SQUEUE_PARTITION",
    "SQUEUE_QOS",
    "SQUEUE_SORT",
    "SQUEUE_STATES",
    "SQUEUE_USERS",
    "SACCT_FORMAT",
    "SINFO_FORMAT",
    "SINFO_PARTITION",
    "SINFO_SORT",
];

/// ISO 8601 times from every client, whatever the user's SLURM_TIME_FORMAT.
const CLIENT_SETTINGS: [(&str, &str); 1] = [("SLURM_TIME_FORMAT", "standard")];

/// A Slurm command that ran and failed.
#[derive(Debug)]
pub struct CommandFailed {
    pub command: String,
    pub status: String,
    pub stderr: String,
}

impl fmt::Display for CommandFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let stderr = self.stderr.trim();
        if stderr.is_empty() {
            write!(
                f,
                "`{}` failed ({}) and printed nothing on stderr",
                self.command, self.status
            )
        } else {
            // A client's stderr can be megabytes; the first lines say why.
            let stderr = crate::text::head(stderr, 2000);
            write!(f, "`{}` failed ({}): {}", self.command, self.status, stderr)
        }
    }
}

impl std::error::Error for CommandFailed {}

/// Messages slurmctld gives when it is busy or restarting; worth a retry.
pub fn is_transient(stderr: &str) -> bool {
    const TRANSIENT: [&str; 5] = [
        "Socket timed out",
        "Resource temporarily unavailable",
        "Unable to contact slurm controller",
        "Slurm temporarily unable to accept job",
        "Connection refused",
    ];
    TRANSIENT.iter().any(|t| stderr.contains(t))
}

/// How Slurm commands are run: their time limit and where calls are traced.
#[derive(Debug, Clone)]
pub struct Slurm {
    pub timeout: Duration,
    trace: Option<PathBuf>,
    /// How many times a transient controller error is retried.
    pub retries: u32,
    /// The first pause between retries; it doubles each time.
    pub retry_pause: Duration,
}

impl Default for Slurm {
    fn default() -> Self {
        Self::from_env()
    }
}

impl Slurm {
    /// Settings from `YOLO_SCHED_SLURM_TIMEOUT` and `YOLO_SCHED_SLURM_TRACE`.
    pub fn from_env() -> Self {
        // A value that is not a usable number of seconds falls back to the
        // default here; the CLI refuses it first (`timeout_from_env`).
        let timeout = timeout_from_env()
            .ok()
            .flatten()
            .unwrap_or(Duration::from_secs(30));
        let trace = std::env::var_os(TRACE_ENV)
            .filter(|s| !s.is_empty())
            .map(PathBuf::from);
        Slurm {
            timeout,
            trace,
            retries: 4,
            retry_pause: Duration::from_millis(500),
        }
    }

    /// Number of Slurm commands this process has run.
    pub fn calls_made() -> usize {
        CALLS.load(Ordering::Relaxed)
    }

    /// Run a command once; a non-zero exit is returned as `Ok` for the caller to judge.
    pub fn run_raw(&self, program: &str, args: &[&str]) -> Result<Captured> {
        self.run_raw_input(program, args, None)
    }

    /// `run_raw` with `input` on the child's stdin (`scontrol` reads several
    /// commands from it in one process: one call, not one per question).
    fn run_raw_input(&self, program: &str, args: &[&str], input: Option<&str>) -> Result<Captured> {
        CALLS.fetch_add(1, Ordering::Relaxed);
        if let Some(path) = &self.trace {
            if let Ok(mut f) = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
            {
                // One write per line: with O_APPEND, concurrent callers (the
                // report runs its commands side by side) never interleave.
                let mut line = process::display_command(program, args);
                if let Some(input) = input {
                    // What it was asked on stdin, on the same line.
                    line.push_str(" <<< ");
                    line.push_str(&input.lines().collect::<Vec<_>>().join("; "));
                }
                line.push('\n');
                let _ = f.write_all(line.as_bytes());
            }
        }
        let env = process::EnvChanges {
            set: &CLIENT_SETTINGS,
            remove: &CLIENT_OVERRIDES,
        };
        Ok(process::run_with_input(
            program,
            args,
            self.timeout,
            env,
            input.map(|i| i.as_bytes().to_vec()),
        )?)
    }

    /// Run a command; a non-zero exit becomes a `CommandFailed` error.
    pub fn run(&self, program: &str, args: &[&str]) -> Result<Captured> {
        self.run_input(program, args, None)
    }

    fn run_input(&self, program: &str, args: &[&str], input: Option<&str>) -> Result<Captured> {
        let out = self.run_raw_input(program, args, input)?;
        if out.status.success() {
            Ok(out)
        } else {
            Err(CommandFailed {
                command: process::display_command(program, args),
                status: process::describe_status(&out.status),
                stderr: out.stderr_str(),
            }
            .into())
        }
    }

    /// Like `run`, but retries transient controller errors with back-off.
    /// Only for commands that are safe to repeat (queries, or a submission
    /// that Slurm refused outright).
    pub fn run_retrying(&self, program: &str, args: &[&str]) -> Result<Captured> {
        self.run_retrying_input(program, args, None)
    }

    fn run_retrying_input(
        &self,
        program: &str,
        args: &[&str],
        input: Option<&str>,
    ) -> Result<Captured> {
        let mut pause = self.retry_pause;
        let mut attempt = 0;
        loop {
            match self.run_input(program, args, input) {
                Err(err) if attempt < self.retries && is_transient_error(&err) => {
                    attempt += 1;
                    std::thread::sleep(pause);
                    pause *= 2;
                }
                other => return other,
            }
        }
    }

    /// Run and return stdout as a string.
    pub fn stdout(&self, program: &str, args: &[&str]) -> Result<String> {
        Ok(self.run_retrying(program, args)?.stdout_str())
    }

    /// `stdout` of a query that reads its commands from stdin (retried likewise).
    pub fn stdout_with_input(&self, program: &str, args: &[&str], input: &str) -> Result<String> {
        Ok(self
            .run_retrying_input(program, args, Some(input))?
            .stdout_str())
    }
}

/// `YOLO_SCHED_SLURM_TIMEOUT`: seconds, more than 0 and at most a day.
/// `Ok(None)` when unset; `Err` says what is wrong with the value.
pub fn timeout_from_env() -> Result<Option<Duration>, String> {
    let Ok(raw) = std::env::var(TIMEOUT_ENV) else {
        return Ok(None);
    };
    let secs: f64 = raw
        .trim()
        .parse()
        .map_err(|_| format!("{TIMEOUT_ENV}={raw:?} is not a number of seconds"))?;
    if !(secs.is_finite() && secs > 0.0 && secs <= 86_400.0) {
        return Err(format!(
            "{TIMEOUT_ENV}={raw:?} is outside (0, 86400] seconds"
        ));
    }
    Duration::try_from_secs_f64(secs)
        .map(Some)
        .map_err(|e| format!("{TIMEOUT_ENV}={raw:?}: {e}"))
}

fn is_transient_error(err: &anyhow::Error) -> bool {
    err.downcast_ref::<CommandFailed>()
        .is_some_and(|f| is_transient(&f.stderr))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_names_command_and_stderr() {
        let slurm = Slurm::from_env();
        let err = slurm
            .run(
                "sh",
                &[
                    "-c",
                    "echo 'sbatch: error: Invalid partition name specified' >&2; exit 1",
                ],
            )
            .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("sh -c"), "{text}");
        assert!(text.contains("exit status 1"), "{text}");
        assert!(text.contains("Invalid partition name"), "{text}");
    }

    #[test]
    fn transient_errors_are_recognised() {
        assert!(is_transient(
            "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation"
        ));
        assert!(is_transient("error: Resource temporarily unavailable"));
        assert!(!is_transient(
            "sbatch: error: Invalid generic resource (gres) specification"
        ));
    }

    #[test]
    fn transient_errors_are_retried_then_succeed() {
        let dir = tempfile::tempdir().unwrap();
        let counter = dir.path().join("n");
        let script = format!(
            "n=$(cat {c} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {c}; \
             if [ $n -lt 3 ]; then echo 'Socket timed out on send/recv operation' >&2; exit 1; fi; echo ok",
            c = counter.display()
        );
        let slurm = Slurm {
            retry_pause: Duration::from_millis(1),
            ..Slurm::from_env()
        };
        let out = slurm.run_retrying("sh", &["-c", &script]).unwrap();
        assert_eq!(out.stdout_str(), "ok\n");
        assert_eq!(std::fs::read_to_string(&counter).unwrap().trim(), "3");
    }

    #[test]
    fn permanent_errors_are_not_retried() {
        let dir = tempfile::tempdir().unwrap();
        let counter = dir.path().join("n");
        let script = format!(
            "echo x >> {}; echo 'Invalid account' >&2; exit 1",
            counter.display()
        );
        let slurm = Slurm {
            retry_pause: Duration::from_millis(1),
            ..Slurm::from_env()
        };
        assert!(slurm.run_retrying("sh", &["-c", &script]).is_err());
        assert_eq!(
            std::fs::read_to_string(&counter).unwrap().lines().count(),
            1
        );
    }
}
