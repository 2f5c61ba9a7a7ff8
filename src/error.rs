//! Error kinds that decide the process exit status.
//!
//! Most code returns `anyhow::Result`. Two kinds of failure need a different exit
//! status than a plain runtime failure, so they travel as typed errors inside the
//! `anyhow::Error` chain and `exit_code_for` finds them there.

use std::fmt;

/// Documented exit statuses (see `docs/exit-codes.md`).
pub mod exit {
    /// Success.
    pub const OK: i32 = 0;
    /// A runtime failure: Slurm unreachable, a job refused, NVML failed, a check failed.
    pub const FAILURE: i32 = 1;
    /// Invalid input: a bad spec, flag, layout or argument. Nothing was changed.
    pub const INVALID_INPUT: i32 = 2;
    /// The subcommand exists in the interface but is not built yet.
    pub const NOT_BUILT: i32 = 3;
}

/// Input the user gave is wrong; nothing was changed. Exit status 2.
#[derive(Debug)]
pub struct InvalidInput {
    pub message: String,
}

impl fmt::Display for InvalidInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for InvalidInput {}

/// Make an exit-status-2 error from a message.
pub fn invalid(message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(InvalidInput {
        message: message.into(),
    })
}

/// A subcommand that is declared but not built yet. Exit status 3.
#[derive(Debug)]
pub struct NotBuilt {
    pub what: &'static str,
}

impl fmt::Display for NotBuilt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`yolo-sched {}` is not built yet in this version; nothing was done",
            self.what
        )
    }
}

impl std::error::Error for NotBuilt {}

/// The exit status for an error: the first typed kind found in its chain decides.
pub fn exit_code_for(err: &anyhow::Error) -> i32 {
    for cause in err.chain() {
        if cause.downcast_ref::<InvalidInput>().is_some() {
            return exit::INVALID_INPUT;
        }
        if cause.downcast_ref::<NotBuilt>().is_some() {
            return exit::NOT_BUILT;
        }
    }
    exit::FAILURE
}

/// True when the error is a broken pipe (`yolo-sched … | head`), which is a normal way to end.
pub fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[test]
    fn invalid_input_maps_to_2_even_under_context() {
        let err = Err::<(), _>(invalid("bad key"))
            .context("reading spec.toml")
            .unwrap_err();
        assert_eq!(exit_code_for(&err), exit::INVALID_INPUT);
        assert_eq!(format!("{err:#}"), "reading spec.toml: bad key");
    }

    #[test]
    fn plain_errors_map_to_1() {
        let err = anyhow::anyhow!("slurmctld did not answer");
        assert_eq!(exit_code_for(&err), exit::FAILURE);
    }

    #[test]
    fn not_built_maps_to_3() {
        let err = anyhow::Error::new(NotBuilt { what: "report" });
        assert_eq!(exit_code_for(&err), exit::NOT_BUILT);
        assert!(err.to_string().contains("not built yet"));
    }

    #[test]
    fn broken_pipe_is_detected_through_context() {
        let io = std::io::Error::new(std::io::ErrorKind::BrokenPipe, "pipe");
        let err = anyhow::Error::new(io).context("writing table");
        assert!(is_broken_pipe(&err));
        assert!(!is_broken_pipe(&anyhow::anyhow!("other")));
    }
}
