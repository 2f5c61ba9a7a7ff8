//! Checkpoint backup to S3-compatible storage (docs/backup.md).
//!
//! - `config`: the site's `[backup]`, the spec's within it, and one run's
//!   settings saved at submission (`state/backup/settings.json`).
//! - `store`: what a backup puts in the object store (`objstore::Store`, the
//!   client it shares with the registry): a file's `Stamp` and the verified
//!   `put_file`.
//! - `sync`: `Backup::tick`, the loop-friendly upload of stable, complete files.
//! - `restore`: missing or damaged weights back from the bucket, checksum-verified.
//! - `record`: the manifest object in the bucket and the record `status` reads.
//!
//! Effects: network (the store), files in the run directory; nothing printed.
//!
//! `preflight` checks the store before a submission (`preflight`,
//! `check_store`); `restore` (the function here) restores a run's training
//! directory through its saved settings (`restore::restore_run`).

pub(crate) mod config;
pub(crate) mod duty;
mod preflight;
pub(crate) mod record;
pub(crate) mod restore;
pub(crate) mod store;
pub(crate) mod sync;

#[cfg(test)]
mod tests;

pub use config::{RunBackup, SiteBackup};
pub use preflight::{check, check_store, preflight};
pub use record::{views, BackupView};
pub use restore::{restore_run as restore, RestoreOutcome};
pub use sync::{Backup, BackupEvent};
