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
    /// Stdout as text without copying it (a lossy copy only when it is not
    /// UTF-8): a report's listing can be many megabytes.
    pub fn into_text(self) -> String {
        String::from_utf8(self.stdout)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
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
    /// It printed more than [`MAX_STDOUT`] bytes.
    TooMuchOutput { command: String, limit: usize },
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
            RunError::TooMuchOutput { command, limit } => write!(
                f,
                "`{command}` printed more than {} MiB; its answer was not used",
                limit >> 20
            ),
        }
    }
}

impl std::error::Error for RunError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RunError::Spawn { source, .. } => Some(source),
            RunError::Timeout { .. } | RunError::TooMuchOutput { .. } => None,
        }
    }
}

/// A command line as a user could paste it into a shell.
pub fn display_command<S: AsRef<OsStr>>(program: &str, args: &[S]) -> String {
    let mut out = crate::shell::quote(program);
    for arg in args {
        out.push(' ');
        // Messages only: a 70 KB argument is shown by its head.
        let arg = arg.as_ref().to_string_lossy();
        out.push_str(&crate::shell::quote(&crate::text::clip_to(&arg, 512)));
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
    let (out_tx, out_rx) = mpsc::channel();
    let (err_tx, err_rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = out_tx.send(read_capped(&mut stdout, MAX_STDOUT));
    });
    thread::spawn(move || {
        let _ = err_tx.send(read_capped(&mut stderr, MAX_STDERR));
    });

    // A waiter thread reaps the child, so its end is seen at once rather than
    // at the next poll; the time limit is a timeout on that thread's answer.
    let pid = child.id();
    let deadline = start + limit;
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    let timed_out = || {
        kill_group(pid);
        RunError::Timeout {
            command: command_line.clone(),
            limit,
        }
    };
    let status = match rx.recv_timeout(limit) {
        Ok(Ok(status)) => status,
        Ok(Err(source)) => {
            return Err(RunError::Spawn {
                command: command_line,
                source,
            })
        }
        Err(_) => return Err(timed_out()),
    };
    // The child has exited, but a helper it left in the background may still
    // hold its stdout or stderr open: the same deadline bounds the pipes. On
    // expiry the group is killed; a helper that left the group is abandoned
    // with its reader thread rather than waited for.
    let remaining = || deadline.saturating_duration_since(Instant::now());
    let stdout = out_rx.recv_timeout(remaining()).map_err(|_| timed_out())?;
    let stderr = err_rx.recv_timeout(remaining()).map_err(|_| timed_out())?;
    if stdout.1 {
        return Err(RunError::TooMuchOutput {
            command: command_line,
            limit: MAX_STDOUT,
        });
    }
    Ok(Captured {
        status,
        stdout: stdout.0,
        stderr: stderr.0,
        elapsed: start.elapsed(),
    })
}

/// The most of a child's stdout kept: far above any Slurm answer of a big
/// cluster (`squeue --json` of 100,000 jobs is about 300 MiB), far below what
/// would exhaust a login node. More is an error, not a silently cut answer.
pub const MAX_STDOUT: usize = 1 << 30;
/// The most of a child's stderr kept; the rest is read and dropped, so a
/// chatty client can neither block on a full pipe nor fill memory or the
/// terminal (error messages cut it shorter still).
pub const MAX_STDERR: usize = 1 << 20;

/// Read a pipe to its end, keeping at most `cap` bytes; whether more came.
fn read_capped(pipe: &mut impl Read, cap: usize) -> (Vec<u8>, bool) {
    let mut kept = Vec::new();
    let mut chunk = [0u8; 64 * 1024];
    let mut over = false;
    loop {
        match pipe.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                let room = cap.saturating_sub(kept.len());
                kept.extend_from_slice(&chunk[..n.min(room)]);
                over |= n > room;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    (kept, over)
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
    fn a_helper_holding_stdout_does_not_outlast_the_limit() {
        // The client exits at once but leaves a child with its stdout open:
        // in its process group (killed), or in a session of its own
        // (abandoned, not waited for).
        for script in ["sleep 30 & echo 42", "setsid sleep 30 & echo 42"] {
            let start = Instant::now();
            let err =
                run_with_timeout("sh", &["-c", script], Duration::from_millis(500)).unwrap_err();
            assert!(matches!(err, RunError::Timeout { .. }), "{script}: {err}");
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "{script}: {:?}",
                start.elapsed()
            );
        }
    }

    #[test]
    fn stderr_is_capped_and_drained() {
        let out = run_with_timeout(
            "sh",
            &["-c", "head -c 5000000 /dev/zero >&2; echo done"],
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!(out.stderr.len(), MAX_STDERR);
        assert_eq!(out.stdout_str(), "done\n");
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
