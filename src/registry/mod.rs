//! The shared library of validated models (docs/registry.md): a site's
//! `[registry] url` (`file://` or `s3://`), content-addressed blobs under their
//! SHA-256, immutable version records, tags that move by new records.
//!
//! - `url`: the site's `[registry]` and its URL.
//! - `access`: who reads, tags and removes a version, from Slurm's accounts.
//! - `names`: model names, tags, notes, references (`NAME@3`, `NAME@production`).
//! - `record`: the JSON records (version, tag move, removal).
//! - `store`: `Registry`, the objects through its `Backend`: list, resolve,
//!   verified blob upload and pull, versions created with create-if-absent
//!   semantics.
//! - `backend`: `Backend`, the objects' place as the registry uses it, over
//!   `objstore::Store` (the one object-store client); `s3::S3` (with the
//!   listing index) and `unix::UnixDir` (a shared `file://` directory)
//!   implement it.
//! - `spec`: a spec's `model = "registry:NAME[@N|@TAG]"` resolved at submission.
//! - `unix`: a `file://` registry's Unix modes and groups (the account's
//!   group), and `UnixDir`.
//! - `publish`: what a version holds, from a completed run or an imported checkpoint.
//! - `gc`: removed versions and unnamed blobs deleted after their grace.
//!
//! Effects: network or the shared directory (the store), a private snapshot
//! directory under `$TMPDIR`, files written by `pull`; nothing printed.

pub mod access;
pub(crate) mod backend;
pub mod gc;
pub(crate) mod publish;
pub(crate) mod record;
pub(crate) mod s3;
pub mod spec;
pub(crate) mod store;
pub(crate) mod unix;
pub(crate) mod url;

#[cfg(test)]
mod tests;

pub use access::{Caller, Reads, Right};
pub use publish::{commit, draft_from_file, draft_from_run, Publisher, Snapshot};
pub use record::{FileEntry, Metrics, ModelRecord};
pub use store::{Listed, Registry};
pub use unix::{
    anyone_publishes as unix_anyone_publishes, group_for as unix_group_for,
    listable_blobs_note as unix_listable_blobs_note,
};
pub use url::{RegistryUrl, SiteRegistry};
