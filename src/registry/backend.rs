//! Where a registry's objects live: `Backend`, what `Registry` asks of the
//! place, with its two implementations, `s3::S3` (an S3 bucket, or
//! object_store's in-memory store in tests) and `unix::UnixDir` (a
//! directory of a shared file system, `file://`). What every place does the
//! same way (bounded reads, listings, verified blobs, create-if-absent,
//! deletions) goes through its `objstore::Store`; what differs is said by
//! each implementation: who wrote a record, how a version record is
//! created, how many records are read at once, and what the place does not
//! enforce (docs/registry.md, "Threat model").

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;

use super::record::ModelRecord;
use crate::fsutil::within::Skipped;
use crate::objstore::store::{ObjectInfo, PutError};
use crate::objstore::Store;

/// Records read at once (`Registry::list`, `NAME@latest`).
pub(super) const LIST_CONCURRENCY: usize = 32;

/// The objects' place, as the registry uses it.
pub(crate) trait Backend: std::fmt::Debug + Send + Sync {
    /// The store the objects are in (on `file://`, `Store::local_shared`:
    /// every step through `fsutil::within`, no link followed).
    fn store(&self) -> &Store;

    /// Who wrote the record at `key`, which names `claimed` as its writer;
    /// `did` is what the record says its writer did (`published it`).
    /// `Err` says why the record is not taken as `claimed`'s.
    fn writer(&self, key: &str, claimed: &str, did: &str) -> Result<String, String>;

    /// Create the version record `key` holding `bytes` (of `r`) unless one
    /// is there: `Ok(true)` when this call created it.
    fn put_record(&self, key: &str, bytes: Vec<u8>, r: &ModelRecord) -> Result<bool>;

    /// The records at `keys` (each as `get` gives it), in order; `etags`
    /// are the listing's, `scope` the key prefix listed.
    fn read_records(
        &self,
        keys: &[String],
        etags: &BTreeMap<String, String>,
        scope: &str,
    ) -> Vec<Result<Option<Vec<u8>>>>;

    /// What the place will not enforce for `r` (said before publishing).
    fn enforcement_notes(&self, r: &ModelRecord) -> Vec<String>;

    /// Every object under `prefix`, and what the listing did not go into (a
    /// link, never followed; a name that is not UTF-8; a directory that
    /// cannot be read), each with its key (raw).
    fn list(&self, prefix: &str) -> Result<(Vec<ObjectInfo>, Vec<Skipped>)> {
        self.store().list_checked(prefix)
    }

    /// The object at `key`, at most `limit` bytes; `None` when there is none.
    fn get(&self, key: &str, limit: u64) -> Result<Option<Vec<u8>>> {
        self.store().get_bytes(key, limit)
    }

    /// The objects at `keys`, as `get` gives each, with up to `concurrency`
    /// requests in flight.
    fn get_many(
        &self,
        keys: &[String],
        limit: u64,
        concurrency: usize,
    ) -> Vec<Result<Option<Vec<u8>>>> {
        self.store().get_many(keys, limit, concurrency)
    }

    /// Stream the object at `key` into `to` (at most `limit` bytes): its
    /// SHA-256 and size, or `None` when there is none.
    fn get_into(
        &self,
        key: &str,
        to: &mut dyn std::io::Write,
        limit: u64,
    ) -> Result<Option<(String, u64)>> {
        self.store().get_into(key, to, limit)
    }

    /// The size and time of the object at `key`; `None` when there is none.
    fn head(&self, key: &str) -> Result<Option<ObjectInfo>> {
        self.store().head(key)
    }

    /// The size of the object at `key`; `None` when there is none.
    fn size_of(&self, key: &str) -> Result<Option<u64>> {
        self.store().size_of(key)
    }

    /// The SHA-256 of the object at `key`.
    fn sha256_of(&self, key: &str) -> Result<String> {
        self.store().sha256_of(key)
    }

    /// Create `key` with `bytes` unless an object is there (create-if-absent):
    /// `Ok(true)` when this call created it.
    fn put_new(&self, key: &str, bytes: Vec<u8>) -> Result<bool> {
        self.store().put_new(key, bytes)
    }

    /// Upload the local file `path` (`size` bytes, SHA-256 `sha`) to `key`,
    /// read back and hashed; a mismatch deletes the object.
    fn put_blob(&self, path: &Path, size: u64, sha: &str, key: &str) -> Result<(), PutError> {
        self.store().put_snapshot(path, size, sha, key)
    }

    /// Delete `key` (nothing there is fine).
    fn delete(&self, key: &str) -> Result<()> {
        self.store().delete(key)
    }
}
