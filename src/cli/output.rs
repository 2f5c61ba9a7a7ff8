//! Terminal output: colour decisions, tables, JSON.

use std::io::{IsTerminal, Write};

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
    /// Colour on stdout: `always`, or `auto` on a terminal without `NO_COLOR` and `TERM=dumb`.
    pub fn enabled_for_stdout(self) -> bool {
        match self {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => {
                std::io::stdout().is_terminal()
                    && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
                    && std::env::var("TERM").map(|t| t != "dumb").unwrap_or(true)
            }
        }
    }
}

/// A table that fits the terminal on a TTY and uses plain ASCII when piped.
pub fn new_table(headers: &[&str]) -> Table {
    let mut table = Table::new();
    if std::io::stdout().is_terminal() {
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

/// Print a value as pretty JSON on stdout.
pub fn print_json<T: Serialize>(value: &T) -> Result<()> {
    // Serialize first so that a closed pipe surfaces as an io::Error (ends quietly).
    let text = serde_json::to_string_pretty(value)?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}")?;
    Ok(())
}

/// Print a line on stdout (a broken pipe becomes an error that ends quietly).
pub fn println(line: impl std::fmt::Display) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    Ok(())
}

/// Wrap `text` in an ANSI colour when `on`.
pub fn paint(text: &str, code: &str, on: bool) -> String {
    if on {
        format!("\x1b[{code}m{text}\x1b[0m")
    } else {
        text.to_string()
    }
}
