//! Ultralytics detection datasets: the dataset YAML, a check of every image and
//! label file (as Ultralytics would read them), and a cached copy on local storage.
//!
//! Semantics follow Ultralytics (`ultralytics/data/utils.py`): an image without a
//! label file, or with an empty one, is a background image (counted, not an
//! error); an unreadable image or a malformed label line makes Ultralytics drop the
//! image, which is an error here so that training never starts on a broken dataset.
//!
//! `run` ties the parts together (`run_check`); `bytes` words sizes.

mod bytes;
pub(crate) mod cache;
pub(crate) mod check;
pub(crate) mod config;
pub(crate) mod fingerprint;
pub mod image;
pub(crate) mod labels;
mod run;

pub use bytes::human_bytes;
pub use check::{CacheInfo, ClassCount, Finding, Report, Severity, SplitStats, MAX_FINDINGS};
pub use config::{label_path, ConfigErrors, DataConfig, Source};
pub use run::{run_check, CheckOptions};
