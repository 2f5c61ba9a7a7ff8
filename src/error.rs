//! Error kinds, the exit status each maps to, and how an error is printed.
//!
//! Most code returns `anyhow::Result`. Failures that need an exit status other
//! than a plain runtime failure travel as typed errors (`Kind`) inside the
//! `anyhow::Error` chain; `exit_code_for` is the one place that maps them to
//! the documented statuses (`docs/exit-codes.md`). A `hint` can ride along the
//! chain and is printed after the causes.

use std::fmt;

/// Documented exit statuses (see `docs/exit-codes.md`).
pub mod exit {
    /// Success.
    pub const OK: i32 = 0;
    /// A runtime failure: Slurm unreachable, a job refused, NVML failed, a check failed.
    pub const FAILURE: i32 = 1;
    /// Invalid input: a bad spec, flag, layout or argument. Nothing was changed.
    pub const INVALID_INPUT: i32 = 2;
}

/// What kind of failure an error is, where the kind decides the exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Input the user gave is wrong; nothing was changed.
    InvalidInput,
    /// The command needs root (node-setup --apply).
    NotRoot,
}

impl Kind {
    /// The documented exit status of this kind: the one `match`.
    pub fn exit_code(self) -> i32 {
        match self {
            Kind::InvalidInput => exit::INVALID_INPUT,
            Kind::NotRoot => exit::FAILURE,
        }
    }
}

/// A typed error: its kind and message.
#[derive(Debug)]
pub struct Typed {
    pub kind: Kind,
    pub message: String,
}

impl fmt::Display for Typed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Typed {}

/// Input the user gave is wrong; nothing was changed. Exit status 2.
pub type InvalidInput = Typed;

/// An error of `kind` with `message`.
pub fn typed(kind: Kind, message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Typed {
        kind,
        message: message.into(),
    })
}

/// Make an exit-status-2 error from a message.
pub fn invalid(message: impl Into<String>) -> anyhow::Error {
    typed(Kind::InvalidInput, message)
}

/// What to try next, carried in the chain and printed as `hint:` after the causes.
#[derive(Debug)]
pub struct Hint(pub String);

impl fmt::Display for Hint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// `err` with a hint attached.
pub fn with_hint(err: anyhow::Error, hint: impl Into<String>) -> anyhow::Error {
    err.context(Hint(hint.into()))
}

/// The kind of an error: the first typed error found in its chain.
pub fn kind_of(err: &anyhow::Error) -> Option<Kind> {
    err.chain()
        .find_map(|cause| cause.downcast_ref::<Typed>().map(|t| t.kind))
}

/// The exit status for an error: the first typed kind found in its chain decides.
pub fn exit_code_for(err: &anyhow::Error) -> i32 {
    kind_of(err).map_or(exit::FAILURE, Kind::exit_code)
}

/// The lines to print for an error: `error: <message>`, then each cause once
/// under `Caused by:` (a cause whose text the line above already contains is
/// not repeated), then the hint.
pub fn describe(err: &anyhow::Error) -> Vec<String> {
    let mut messages: Vec<String> = Vec::new();
    // A hint is context: found by downcasting the whole error, skipped in the chain.
    let hints: Vec<String> = err
        .downcast_ref::<Hint>()
        .map(|h| h.0.clone())
        .into_iter()
        .collect();
    for cause in err.chain() {
        let text = cause.to_string();
        if hints.contains(&text) {
            continue;
        }
        if messages.last().is_some_and(|prev| prev.contains(&text)) {
            continue;
        }
        messages.push(text);
    }
    let mut lines = Vec::new();
    let mut it = messages.into_iter();
    lines.push(format!("error: {}", it.next().unwrap_or_default()));
    let causes: Vec<String> = it.collect();
    if !causes.is_empty() {
        lines.push("Caused by:".to_string());
        lines.extend(causes.into_iter().map(|c| format!("  {c}")));
    }
    lines.extend(hints.into_iter().map(|h| format!("hint: {h}")));
    lines
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
    fn every_kind_has_its_documented_status() {
        for (kind, code) in [(Kind::InvalidInput, 2), (Kind::NotRoot, 1)] {
            let err = typed(kind, "x").context("outer");
            assert_eq!(exit_code_for(&err), code, "{kind:?}");
            assert_eq!(kind_of(&err), Some(kind));
        }
    }

    #[test]
    fn causes_are_printed_once_and_hints_last() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file or directory");
        let err = with_hint(
            anyhow::Error::new(io)
                .context("reading spec.toml: No such file or directory")
                .context("loading the spec"),
            "check the path",
        );
        assert_eq!(
            describe(&err),
            [
                "error: loading the spec",
                "Caused by:",
                "  reading spec.toml: No such file or directory",
                "hint: check the path"
            ]
        );
        assert_eq!(describe(&anyhow::anyhow!("plain")), ["error: plain"]);
    }

    #[test]
    fn broken_pipe_is_detected_through_context() {
        let io = std::io::Error::new(std::io::ErrorKind::BrokenPipe, "pipe");
        let err = anyhow::Error::new(io).context("writing table");
        assert!(is_broken_pipe(&err));
        assert!(!is_broken_pipe(&anyhow::anyhow!("other")));
    }
}
