//! Turning a `Report` into text: the sections as named tables (shared by the
//! table and CSV formats), and the Prometheus exposition.
//!
//! `selection` is what `--section` keeps; `tables` builds the named tables
//! that `text` and `csv` print; `prometheus` and `html` render the report
//! directly.

pub mod csv;
pub mod html;
pub mod prometheus;
mod selection;
mod tables;
pub mod text;

pub use selection::{Selection, TABLES};
pub use tables::{human_duration, tables, Style, TableData, USAGE_ROWS_SHOWN};
