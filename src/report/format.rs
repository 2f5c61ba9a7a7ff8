//! The output formats and the report as text in one of them (pure).

use anyhow::Result;

use super::model::Report;
use super::render::{self, Selection};

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Json,
    Csv,
    Prometheus,
    /// One self-contained HTML page with charts (`render::html`).
    Html,
}

/// The report as text in one format.
pub fn render(
    report: &Report,
    format: Format,
    selection: &Selection,
    for_terminal: bool,
    color: bool,
) -> Result<String> {
    Ok(match format {
        Format::Json => {
            let mut s = serde_json::to_string_pretty(report)?;
            s.push('\n');
            s
        }
        Format::Table => render::text::render(
            &render::tables(report, selection, render::Style::Human),
            for_terminal,
            color,
        ),
        Format::Csv => render::csv::render(&render::tables(report, selection, render::Style::Raw)),
        Format::Prometheus => render::prometheus::render(report, selection, report.generated_unix),
        Format::Html => render::html::render(report),
    })
}
