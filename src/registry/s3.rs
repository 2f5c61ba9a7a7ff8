//! An S3 registry's place (`Backend` on a bucket, or on object_store's
//! in-memory store in tests): a record's writer is the user it names, which
//! nothing can check (docs/registry.md, "Threat model"); a version record is
//! created with `PutMode::Create` (S3's `If-None-Match: *`); many records
//! are read through the listing index `index/records`, a cache whose entries
//! are used only when their MD5 is the ETag the listing gives.

use std::collections::BTreeMap;

use anyhow::Result;

use super::backend::{Backend, LIST_CONCURRENCY};
use super::record::{ModelRecord, MAX_RECORD};
use crate::objstore::Store;

/// The listing index of an S3 registry (`S3::read_records`): records'
/// bytes, each used only when its MD5 is the ETag the listing gives.
const LISTING_INDEX: &str = "index/records";
/// The largest listing index read.
const MAX_INDEX: u64 = 256 << 20;
/// Fewer records than this are read one by one (no index).
const INDEX_FROM: usize = 64;

/// A registry in an object store (S3, or memory in tests).
#[derive(Debug)]
pub(crate) struct S3 {
    store: Store,
    /// The key of the listing index (below the registry's prefix).
    index: String,
}

impl S3 {
    /// The registry under the key prefix `base` of `store`.
    pub(crate) fn new(store: Store, base: &str) -> S3 {
        S3 {
            store,
            index: format!("{base}{LISTING_INDEX}"),
        }
    }
}

impl Backend for S3 {
    fn store(&self) -> &Store {
        &self.store
    }

    /// `claimed` itself: nothing on S3 says who wrote an object.
    fn writer(&self, _key: &str, claimed: &str, _did: &str) -> Result<String, String> {
        Ok(claimed.to_string())
    }

    /// `PutMode::Create`.
    fn put_record(&self, key: &str, bytes: Vec<u8>, _r: &ModelRecord) -> Result<bool> {
        self.store.put_new(key, bytes)
    }

    /// Nothing: the bucket policy is the site's (docs/registry.md).
    fn enforcement_notes(&self, _r: &ModelRecord) -> Vec<String> {
        vec![]
    }

    /// The records at `keys` (each as `Store::get_bytes` gives it), in
    /// order. A listing of many records first reads the listing
    /// index (`index/records`, one object): a record's bytes there are
    /// used only when their MD5 is the ETag the listing (`etags`) gives for
    /// its key, i.e. when they are the bytes the store holds; the rest are
    /// read, in parallel, and the index is written again with what the
    /// listing vouches for (best effort: a user who may not write it only
    /// reads more). The index is a cache anyone with the key could write;
    /// what it says is never taken on its word. Keys under `scope` that the
    /// new index does not hold are dropped from it.
    fn read_records(
        &self,
        keys: &[String],
        etags: &BTreeMap<String, String>,
        scope: &str,
    ) -> Vec<Result<Option<Vec<u8>>>> {
        if keys.len() < INDEX_FROM {
            return self.store.get_many(keys, MAX_RECORD, LIST_CONCURRENCY);
        }
        let index_key = &self.index;
        let mut index = self
            .store
            .get_bytes(index_key, MAX_INDEX)
            .ok()
            .flatten()
            .map(|b| parse_index(&b))
            .unwrap_or_default();
        let mut out: Vec<Option<Result<Option<Vec<u8>>>>> = keys
            .iter()
            .map(|k| {
                let bytes = index.get(k)?;
                let tag = etags.get(k)?;
                etag_is_md5_of(tag, bytes).then(|| Ok(Some(bytes.clone())))
            })
            .collect();
        let missing: Vec<usize> = (0..keys.len()).filter(|i| out[*i].is_none()).collect();
        if missing.is_empty() {
            return out.into_iter().flatten().collect();
        }
        let wanted: Vec<String> = missing.iter().map(|i| keys[*i].clone()).collect();
        let got = self.store.get_many(&wanted, MAX_RECORD, LIST_CONCURRENCY);
        for (i, r) in missing.into_iter().zip(got) {
            out[i] = Some(r);
        }
        index.retain(|k, _| !k.starts_with(scope));
        for (k, r) in keys.iter().zip(&out) {
            if let (Some(Ok(Some(bytes))), Some(tag)) = (r, etags.get(k)) {
                if etag_is_md5_of(tag, bytes) && !k.contains(['\t', '\n']) {
                    index.insert(k.clone(), bytes.clone());
                }
            }
        }
        let _ = self.store.put_bytes(index_key, render_index(&index));
        out.into_iter().flatten().collect()
    }
}

/// The first line of the listing index. Then, per record, `KEY\tLENGTH\n`,
/// its bytes and `\n` (framed, so reading it costs no parsing of the
/// records themselves; they are parsed as if read from the store).
const INDEX_HEADER: &[u8] = b"yolo-sched listing index 1\n";

/// The records of a listing index; anything malformed is an empty index
/// (every record is then read from the store).
pub(super) fn parse_index(bytes: &[u8]) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let Some(mut rest) = bytes.strip_prefix(INDEX_HEADER) else {
        return out;
    };
    while !rest.is_empty() {
        let Some(nl) = rest.iter().position(|b| *b == b'\n') else {
            return BTreeMap::new();
        };
        let head = std::str::from_utf8(&rest[..nl]).ok();
        let Some((key, len)) = head.and_then(|h| h.split_once('\t')) else {
            return BTreeMap::new();
        };
        let body = &rest[nl + 1..];
        match len.parse::<usize>() {
            Ok(len) if body.len() > len && body[len] == b'\n' => {
                out.insert(key.to_string(), body[..len].to_vec());
                rest = &body[len + 1..];
            }
            _ => return BTreeMap::new(),
        }
    }
    out
}

/// A listing index of `records` (`parse_index` reads it).
pub(super) fn render_index(records: &BTreeMap<String, Vec<u8>>) -> Vec<u8> {
    let mut out = INDEX_HEADER.to_vec();
    for (key, bytes) in records {
        out.extend_from_slice(format!("{key}\t{}\n", bytes.len()).as_bytes());
        out.extend_from_slice(bytes);
        out.push(b'\n');
    }
    out
}

/// Whether the ETag `tag` (as a listing gives it, quoted or not) is the MD5
/// of `bytes`: the object put in one request holds these bytes. A multipart
/// ETag (`…-N`) never is.
fn etag_is_md5_of(tag: &str, bytes: &[u8]) -> bool {
    use md5::Digest;
    let tag = tag.trim_matches('"');
    tag.len() == 32
        && tag.eq_ignore_ascii_case(&crate::objstore::store::hex(&md5::Md5::digest(bytes)))
}
