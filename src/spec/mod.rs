//! Training specs (format v1): the typed form, parsing with positions, and validation.

pub mod error;
pub mod types;
pub mod ultralytics;

pub use error::{Location, SpecError, SpecErrors};
pub use types::*;
