//! Training specs (format v1): the typed form, parsing with positions, and validation.
//!
//! `parse` is pure (text in, `Spec` or every error out); `load` reads the file,
//! parses it and checks that the files it names exist. Checks that need the
//! cluster (array size against `MaxArraySize`, GPU types that exist) belong to the
//! planner, which reports them with `Spec::error_at` so they look the same.
//!
//! The reader is in `parse/`; `load` holds `parse`, `load` and `read_checked`;
//! `paths` resolves and checks the paths a spec names (`check_paths`,
//! `resolve_weights`, `Spec::resolve`).

pub(crate) mod args;
mod document;
pub(crate) mod error;
pub(crate) mod guard;
mod load;
mod parse;
mod paths;
pub(crate) mod types;
pub mod ultralytics;
pub(crate) mod values;

pub use crate::suggest::closest;
pub use document::Spec;
pub use error::{Location, SpecError, SpecErrors};
pub use load::{load, parse, read_checked, MAX_SPEC_BYTES};
pub use parse::backup::SpecBackup;
pub use parse::tune::{
    default_space, Direction, Dist, EarlyStop, PruneRule, Sampler, Tune, TuneParam,
    DEFAULT_OBJECTIVE, DEFAULT_SPACE, DEFAULT_SPACE_FROM, MAX_BATCHES, MAX_CHOICES, MAX_TRIALS,
};
pub use parse::{DEFAULT_EXPORT_FORMATS, MAX_VARIANTS};
pub use paths::{apply_default_model, check_paths, resolve_weights, WeightsSource};
pub use types::*;

#[cfg(test)]
mod tests;
