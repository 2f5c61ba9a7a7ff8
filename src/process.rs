//! Running an external command with a timeout, capturing its output.
//!
//! Every child runs in its own process group so that a timeout kills the
//! whole tree (a Slurm client can fork helpers). stdout and stderr are read on
//! their own threads so a chatty child never blocks on a full pipe.

use std::ffi::OsStr;
use std::fmt;
use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// What a finished command left behind.
#[derive(Debug, Clone)]
pub struct Captured {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub elapsed: Duration,
}

impl Captured {
    pub fn stdout_str(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
    pub fn stderr_str(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
}

/// Why a command could not be run to completion.
#[derive(Debug)]
pub enum RunError {
    /// The program could not be started (not on PATH, not executable).
    Spawn {
        command: String,
        source: std::io::Error,
    },
    /// It ran past its time limit and was killed.
    Timeout { command: String, limit: Duration },
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::Spawn { command, source } => {
                write!(f, "could not run `{command}`: {source}")
            }
            RunError::Timeout { command, limit } => write!(
                f,
                "`{command}` did not finish within {} s and was killed",
                limit.as_secs_f64()
            ),
        }
    }
}

impl std::error::Error for RunError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RunError::Spawn { source, .. } => Some(source),
            RunError::Timeout { .. } => None,
        }
    }
}

/// A command line as a user could paste it into a shell.
pub fn display_command<S: AsRef<OsStr>>(program: &str, args: &[S]) -> String {
    let mut out = crate::shell::quote(program);
    for arg in args {
        out.push(' ');
        out.push_str(&crate::shell::quote(&arg.as_ref().to_string_lossy()));
    }
    out
}

/// Changes to the environment a child gets: variables set, then variables removed.
#[derive(Debug, Clone, Copy, Default)]
pub struct EnvChanges<'a> {
    pub set: &'a [(&'a str, &'a str)],
    pub remove: &'a [&'a str],
}

/// Run `program args…` with no stdin, capture its output, kill it (and its
/// process group) when it outlives `limit`.
pub fn run_with_timeout<S: AsRef<OsStr>>(
    program: &str,
    args: &[S],
    limit: Duration,
) -> Result<Captured, RunError> {
    run_with_timeout_env(program, args, limit, EnvChanges::default())
}

/// `run_with_timeout` with changes to the child's environment (never to ours:
/// changing this process's environment is racy once threads run).
pub fn run_with_timeout_env<S: AsRef<OsStr>>(
    program: &str,
    args: &[S],
    limit: Duration,
    env: EnvChanges<'_>,
) -> Result<Captured, RunError> {
    run_with_input(program, args, limit, env, None)
}

/// `run_with_timeout_env` with `input` written to the child's stdin (then
/// closed); `None` gives it no stdin at all. The time limit covers the write.
pub fn run_with_input<S: AsRef<OsStr>>(
    program: &str,
    args: &[S],
    limit: Duration,
    env: EnvChanges<'_>,
    input: Option<Vec<u8>>,
) -> Result<Captured, RunError> {
    let command_line = display_command(program, args);
    let mut cmd = Command::new(program);
    for (k, v) in env.set {
        cmd.env(k, v);
    }
    for k in env.remove {
        cmd.env_remove(k);
    }
    cmd.args(args)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let start = Instant::now();
    let mut child = cmd.spawn().map_err(|source| RunError::Spawn {
        command: command_line.clone(),
        source,
    })?;
    let mut stdout = child.stdout.take().expect("stdout was piped");
    let mut stderr = child.stderr.take().expect("stderr was piped");
    if let (Some(bytes), Some(mut stdin)) = (input, child.stdin.take()) {
        // A thread, so a child that never reads cannot block us past the limit;
        // dropping `stdin` at its end closes the pipe (EOF for the child).
        thread::spawn(move || {
            let _ = stdin.write_all(&bytes);
        });
    }
    let out_reader = thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stdout.read_to_end(&mut buf);
        buf
    });
    let err_reader = thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stderr.read_to_end(&mut buf);
        buf
    });

    // A waiter thread reaps the child, so its end is seen at once rather than
    // at the next poll; the time limit is a timeout on that thread's answer.
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    let status = match rx.recv_timeout(limit) {
        Ok(Ok(status)) => status,
        Ok(Err(source)) => {
            return Err(RunError::Spawn {
                command: command_line,
                source,
            })
        }
        Err(_) => {
            kill_group(pid);
            let _ = rx.recv();
            let _ = out_reader.join();
            let _ = err_reader.join();
            return Err(RunError::Timeout {
                command: command_line,
                limit,
            });
        }
    };
    let stdout = out_reader.join().unwrap_or_default();
    let stderr = err_reader.join().unwrap_or_default();
    Ok(Captured {
        status,
        stdout,
        stderr,
        elapsed: start.elapsed(),
    })
}

fn kill_group(pid: u32) {
    use nix::sys::signal::{killpg, Signal};
    use nix::unistd::Pid;
    if let Ok(raw) = i32::try_from(pid) {
        let _ = killpg(Pid::from_raw(raw), Signal::SIGKILL);
    }
}

/// A short description of how a process ended: "exit status 3" or "killed by signal 9".
pub fn describe_status(status: &ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        _ => "unknown status".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captures_stdout_stderr_and_status() {
        let out = run_with_timeout(
            "sh",
            &["-c", "echo out; echo err >&2; exit 3"],
            Duration::from_secs(5),
        )
        .unwrap();
        assert_eq!(out.stdout_str(), "out\n");
        assert_eq!(out.stderr_str(), "err\n");
        assert_eq!(out.status.code(), Some(3));
        assert_eq!(describe_status(&out.status), "exit status 3");
    }

    #[test]
    fn timeout_kills_the_whole_group() {
        let start = Instant::now();
        let err = run_with_timeout(
            "sh",
            &["-c", "sleep 30 & sleep 30"],
            Duration::from_millis(300),
        )
        .unwrap_err();
        assert!(matches!(err, RunError::Timeout { .. }), "{err}");
        assert!(start.elapsed() < Duration::from_secs(5));
        assert!(err.to_string().contains("sleep 30"));
    }

    #[test]
    fn missing_program_is_a_spawn_error() {
        let err = run_with_timeout::<&str>("/nonexistent/sinfo", &[], Duration::from_secs(1))
            .unwrap_err();
        assert!(matches!(err, RunError::Spawn { .. }));
        assert!(err.to_string().contains("/nonexistent/sinfo"));
    }

    #[test]
    fn large_output_does_not_deadlock() {
        let out = run_with_timeout(
            "sh",
            &[
                "-c",
                "head -c 1000000 /dev/zero; head -c 300000 /dev/zero >&2",
            ],
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!(out.stdout.len(), 1_000_000);
        assert_eq!(out.stderr.len(), 300_000);
    }
}
