//! Thin wrappers over `crate::printer` for the call sites not yet moved to
//! `Context::printer`: `status`/`list` (`cli/status.rs`) and `cancel`
//! (`cli/runs.rs`), which are being reworked elsewhere. New code prints
//! through the `Printer`; delete this file once those callers do too.

use anyhow::Result;
use comfy_table::Table;
use serde::Serialize;

pub use crate::printer::paint;
use crate::printer::ColorChoice;

/// A table styled for stdout (fits a terminal, plain ASCII when piped).
pub fn new_table(headers: &[&str]) -> Table {
    use std::io::IsTerminal;
    crate::printer::table_for(headers, std::io::stdout().is_terminal())
}

/// Print a value as pretty JSON on stdout.
pub fn print_json<T: Serialize>(value: &T) -> Result<()> {
    crate::printer::Printer::new(ColorChoice::Never).json(value)
}

/// Print a line on stdout (a broken pipe becomes an error that ends quietly).
pub fn println(line: impl std::fmt::Display) -> Result<()> {
    crate::printer::Printer::new(ColorChoice::Never).line(line)
}
