//! Reading a spec: TOML with positions → `Spec`, collecting every error on the way.
//!
//! The TOML is parsed into `toml::de::DeTable`, which keeps the byte span of every
//! key and value, and walked by hand so that each problem can name its line,
//! column and key path, and so that all problems are reported at once.
//!
//! `cx` is the error-collecting reader every table reader writes to; `keys` the
//! keys of each table; `root` the whole file; `tables` (`[run]`, `[train]`,
//! `args`), `resources`, `stages`, `sweep`, `tune` and `backup` one part each.

pub(crate) mod backup;
mod cx;
mod keys;
mod resources;
mod root;
mod stages;
mod sweep;
mod tables;
pub(crate) mod tune;

// `backup` reads through the reader as `super::Cx`.
use cx::Cx;
pub use keys::{DEFAULT_EXPORT_FORMATS, MAX_VARIANTS};
pub(super) use root::parse_spec;
