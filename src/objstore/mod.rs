//! The object-store client that the backup and the registry share
//! (docs/backup.md, docs/registry.md).
//!
//! - `store`: `Store`, object_store's S3 client on a tokio current-thread
//!   runtime (or its in-memory store, or a local directory: `Store::local`,
//!   and `Store::local_shared`, whose every step goes through
//!   `fsutil::within`) behind a small synchronous API: bounded reads,
//!   verified uploads, create-if-absent, listings; credentials from the AWS
//!   conventions only (`Credentials::gather`).
//!
//! Effects: network (the store), or the local directory of a local store;
//! nothing printed.

pub(crate) mod store;

pub use store::{Credentials, Store};
