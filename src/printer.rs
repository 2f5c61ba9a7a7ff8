//! The terminal's one home: colour decided once per stream, the table style,
//! stdout lines and JSON, and stderr messages with one warning prefix.
//!
//! The CLI makes one `Printer` from `--color` and hands it to library code that
//! reports as it goes (node-setup's step log); everything else in the library
//! returns values and the CLI prints them. `Printer::capture` keeps the stderr
//! side in memory, so a library sequence can be tested in-process.

use std::fmt::Display;
use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex};

use anyhow::Result;
use comfy_table::{presets, ContentArrangement, Table};
use serde::Serialize;

/// `--color` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorChoice {
    Auto,
    Always,
    Never,
}

impl ColorChoice {
    /// Colour on a stream: `always`, or `auto` on a terminal without
    /// `NO_COLOR` and `TERM=dumb`.
    fn enabled(self, terminal: bool) -> bool {
        match self {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => {
                terminal
                    && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
                    && std::env::var("TERM").map(|t| t != "dumb").unwrap_or(true)
            }
        }
    }

    pub fn enabled_for_stdout(self) -> bool {
        self.enabled(std::io::stdout().is_terminal())
    }

    pub fn enabled_for_stderr(self) -> bool {
        self.enabled(std::io::stderr().is_terminal())
    }
}

/// Where stderr messages go.
#[derive(Debug, Clone)]
enum Sink {
    Stderr,
    Capture(Arc<Mutex<Vec<String>>>),
}

/// The terminal, as the CLI decided it.
#[derive(Debug, Clone)]
pub struct Printer {
    color_out: bool,
    color_err: bool,
    out_terminal: bool,
    err_terminal: bool,
    sink: Sink,
}

impl Printer {
    pub fn new(choice: ColorChoice) -> Printer {
        Printer {
            color_out: choice.enabled_for_stdout(),
            color_err: choice.enabled_for_stderr(),
            out_terminal: std::io::stdout().is_terminal(),
            err_terminal: std::io::stderr().is_terminal(),
            sink: Sink::Stderr,
        }
    }

    /// No colour, plain tables, stderr messages kept in the returned buffer.
    pub fn capture() -> (Printer, Arc<Mutex<Vec<String>>>) {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let printer = Printer {
            color_out: false,
            color_err: false,
            out_terminal: false,
            err_terminal: false,
            sink: Sink::Capture(buffer.clone()),
        };
        (printer, buffer)
    }

    /// Colour on stdout.
    pub fn color(&self) -> bool {
        self.color_out
    }

    /// Stdout is a terminal (tables fit its width).
    pub fn out_is_terminal(&self) -> bool {
        self.out_terminal
    }

    /// Stderr is a terminal, and stderr messages are not captured: progress
    /// bars may draw there.
    pub fn err_is_terminal(&self) -> bool {
        self.err_terminal && matches!(self.sink, Sink::Stderr)
    }

    /// A line on stdout (a broken pipe becomes an error that ends quietly).
    pub fn line(&self, line: impl Display) -> Result<()> {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{line}")?;
        Ok(())
    }

    /// Text already laid out (a report, CSV, a man page) on stdout, as is,
    /// flushed (a broken pipe becomes an error that ends quietly).
    pub fn text(&self, text: &str) -> Result<()> {
        let mut out = std::io::stdout().lock();
        out.write_all(text.as_bytes())?;
        out.flush()?;
        Ok(())
    }

    /// A value as pretty JSON on stdout.
    pub fn json<T: Serialize>(&self, value: &T) -> Result<()> {
        // Serialize first so that a closed pipe surfaces as an io::Error.
        let text = serde_json::to_string_pretty(value)?;
        self.line(text)
    }

    /// A table styled for stdout.
    pub fn table(&self, headers: &[&str]) -> Table {
        table_for(headers, self.out_terminal)
    }

    /// `text` painted for stdout.
    pub fn paint(&self, text: &str, code: &str) -> String {
        paint(text, code, self.color_out)
    }

    /// A message on stderr, as it is.
    pub fn note(&self, line: impl Display) {
        let line = line.to_string();
        match &self.sink {
            Sink::Stderr => {
                let _ = writeln!(std::io::stderr().lock(), "{line}");
            }
            Sink::Capture(buffer) => buffer.lock().unwrap_or_else(|p| p.into_inner()).push(line),
        }
    }

    /// `yolo-sched: warning: <message>` on stderr, the one warning prefix.
    pub fn warn(&self, message: impl Display) {
        self.note(format!(
            "yolo-sched: {}: {message}",
            paint("warning", "33", self.color_err)
        ));
    }

    /// `yolo-sched: error: <message>` on stderr for a failure the command
    /// reports and survives (its exit status says the rest).
    pub fn error_line(&self, message: impl Display) {
        self.note(format!(
            "yolo-sched: {}: {message}",
            paint("error", "31", self.color_err)
        ));
    }

    /// `yolo-sched: error: <message>`, then each cause once as `Caused by:`,
    /// then a `hint:` line when the error carries one.
    pub fn error(&self, err: &anyhow::Error) {
        for line in crate::error::describe(err) {
            let line = match line.strip_prefix("error: ") {
                Some(rest) => format!(
                    "yolo-sched: {}: {rest}",
                    paint("error", "31", self.color_err)
                ),
                None => line,
            };
            self.note(line);
        }
    }
}

/// A table that fits the terminal (`terminal`) or plain ASCII for a pipe or file.
pub fn table_for(headers: &[&str], terminal: bool) -> Table {
    let mut table = Table::new();
    if terminal {
        table.load_style(presets::UTF8_FULL_CONDENSED);
        table.set_content_arrangement(ContentArrangement::Dynamic);
        // A terminal that reports no usable width (0 columns under some
        // pseudo-terminals) would squeeze every column to one character.
        if table.width().is_none_or(|w| w < 40) {
            table.set_content_arrangement(ContentArrangement::Disabled);
        }
    } else {
        table.load_style(presets::ASCII_MARKDOWN);
        table.set_content_arrangement(ContentArrangement::Disabled);
    }
    table.set_header(headers.iter().copied());
    table
}

/// Wrap `text` in an ANSI colour when `on`.
pub fn paint(text: &str, code: &str, on: bool) -> String {
    if on {
        format!("\x1b[{code}m{text}\x1b[0m")
    } else {
        text.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warnings_have_one_prefix_and_no_colour_when_captured() {
        let (p, buf) = Printer::capture();
        p.warn("the sky is low");
        p.note("plain");
        assert_eq!(
            *buf.lock().unwrap(),
            ["yolo-sched: warning: the sky is low", "plain"]
        );
        assert_eq!(paint("x", "1", true), "\x1b[1mx\x1b[0m");
        assert_eq!(paint("x", "1", false), "x");
    }
}
