//! Settings: the site file, environment variables, and their precedence.
//!
//! Precedence, highest first: command-line flags > `YOLO_SCHED_*` environment
//! variables > the site file (`/etc/yolo-sched/site.toml`) > built-in defaults.
//! clap resolves flags against the environment; this module supplies the
//! layers below.

pub(crate) mod site;

pub use site::{Site, SITE_ENV};
