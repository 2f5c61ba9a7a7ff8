//! Turning a `Report` into text: the sections as named tables (shared by the
//! table and CSV formats), and the Prometheus exposition.
//!
//! `selection` is what `--section` keeps; `tables` builds the named tables
//! that `text` and `csv` print; `prometheus` and `html` render the report
//! directly.

pub(crate) mod csv;
pub(crate) mod html;
pub(crate) mod prometheus;
mod selection;
pub(crate) mod tables;
pub(crate) mod text;

pub use selection::Selection;
pub use tables::{tables, Style, TableData};
