//! The apply steps' names, their log on stderr, and the test hook that pauses after one.

use std::time::Duration;

use crate::printer::Printer;

/// Test hook: stop (sleep) right after the named step so a test can kill the
/// process there. Names: see `STEPS`, plus `create-1` (after the first instance).
pub const PAUSE_ENV: &str = "YOLO_SCHED_NODE_SETUP_PAUSE_AFTER";

/// The apply steps, in order; `step N/M` in the log counts these.
pub const STEPS: [&str; 14] = [
    "lock",
    "topology",
    "plan",
    "processes",
    "drain",
    "jobs",
    "destroy",
    "mode",
    "create",
    "verify",
    "gres",
    "include",
    "reconfigure",
    "resume",
];

/// Logs `node-setup: step N/M: …` through the printer and remembers what was done.
pub(super) struct Log<'a> {
    pub(super) printer: &'a Printer,
    pub(super) current: usize,
    pub(super) done: Vec<String>,
}

impl Log<'_> {
    pub(super) fn step(&mut self, name: &str, what: &str) {
        self.current = STEPS.iter().position(|s| *s == name).map_or(0, |i| i + 1);
        self.printer.note(format!(
            "node-setup: step {}/{}: {what}",
            self.current,
            STEPS.len()
        ));
    }

    pub(super) fn did(&mut self, what: impl Into<String>) {
        let what = what.into();
        self.printer.note(format!("node-setup:   {what}"));
        self.done.push(what);
    }

    pub(super) fn name(&self) -> &'static str {
        self.current
            .checked_sub(1)
            .and_then(|i| STEPS.get(i))
            .copied()
            .unwrap_or("start")
    }
}

/// The test hook behind `PAUSE_ENV`.
pub(super) fn pause_point(printer: &Printer, name: &str) {
    if std::env::var(PAUSE_ENV).is_ok_and(|v| v == name) {
        printer.note(format!("node-setup: paused after {name} ({PAUSE_ENV})"));
        std::thread::sleep(Duration::from_secs(3600));
    }
}
