//! Terminal output for the subcommands: thin wrappers over `crate::printer`,
//! kept for the call sites that print without a `Context` at hand.

use anyhow::Result;
use comfy_table::Table;
use serde::Serialize;

pub use crate::printer::{paint, ColorChoice};

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
