//! The registry's objects, through its `Backend` (`s3::S3`, or
//! `unix::UnixDir` for `file://`, whose store follows no link at any step):
//!
//! - `blobs/sha256/<hex>`: each file once, under its SHA-256; written and
//!   read back verified before any record names it.
//! - `models/<name>/versions/<NNNNNNNN>.json`: a version record, created with
//!   `PutMode::Create` (S3 `If-None-Match: *`; the local store's hard link), then
//!   read back: a publisher whose record is not there with its own
//!   `publish_id` takes the next number. Two publishers never share a version.
//! - `models/<name>/tags/<tag>/<NNNNNNNN>.json`: a tag's moves; the highest
//!   that is obeyed wins (`Model`).
//! - `models/<name>/removed/<NNNNNNNN>.json`: a removal, obeyed only when
//!   its writer may remove the version (`Model`).
//! - `index/records` (S3): the listing index, a cache whose entries are used
//!   only when their MD5 is the listed ETag (`Registry::read_many`, `s3`).
//!
//! What is not a valid entry (a link, a bad name, an unreadable directory, a
//! record that does not parse or speaks for another user) is skipped and
//! said in `problems`, never obeyed (docs/registry.md, "Threat model").

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};

use super::access::{Caller, Right};
use super::backend::{Backend, LIST_CONCURRENCY};
use super::record::{FileEntry, ModelRecord, Removal, TagMove, FORMAT, MAX_RECORD};
use super::s3::S3;
use super::unix::UnixDir;
use super::url::RegistryUrl;
use crate::error::{invalid, with_hint};
use crate::names::model::{check_name, check_tag};
use crate::names::model::{ModelRef, Selector};
use crate::objstore::store::{PutError, MAX_OBJECT};
use crate::objstore::{Credentials, Store};

/// Whether `e` is the store refusing the caller (S3's 403, a file the
/// caller's Unix permissions do not open).
pub fn is_denied(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<crate::objstore::store::Refused>()
            .is_some()
    })
}

/// How many version numbers one publication tries before it gives up.
const MAX_TRIES: u32 = 1000;
/// A blob already there is uploaded again when it is older than this (its
/// time refreshed for `gc`'s grace; see `put_blob`).
pub const BLOB_REFRESH: chrono::TimeDelta = chrono::TimeDelta::hours(1);

/// An open registry.
#[derive(Debug, Clone)]
pub struct Registry {
    /// Where the objects are (S3, or a shared directory).
    backend: Arc<dyn Backend>,
    /// The key prefix (`prefix/` of an S3 URL, empty otherwise).
    base: String,
    /// What messages call it.
    pub url: String,
}

/// Every record key under `models/`, sorted out by kind.
#[derive(Debug, Default)]
pub struct Index {
    pub versions: BTreeMap<String, BTreeSet<u32>>,
    /// Each tag's moves (their numbers).
    pub tags: BTreeMap<String, BTreeMap<String, BTreeSet<u32>>>,
    /// The versions a removal record is there for (obeyed only once checked:
    /// `Model::removed`).
    pub removed: BTreeMap<String, BTreeSet<u32>>,
    /// Entries the listing skipped (a link, a name that is not UTF-8 or not
    /// a valid model name or tag, a directory that cannot be read), escaped.
    pub problems: Vec<String>,
    /// Each record key's ETag, as S3's listing gives it.
    pub etags: BTreeMap<String, String>,
    /// The key prefix listed.
    pub prefix: String,
}

/// What `list` found.
#[derive(Debug, Default)]
pub struct Listing {
    /// The versions the caller may read.
    pub versions: Vec<Listed>,
    /// Records that are not valid (never used), in words.
    pub problems: Vec<String>,
    /// How many versions the caller may not read.
    pub hidden: usize,
}

impl Index {
    /// The highest move number of `name`'s tag `tag` (0: none).
    pub fn last_move(&self, name: &str, tag: &str) -> u32 {
        self.tags
            .get(name)
            .and_then(|t| t.get(tag))
            .and_then(|s| s.last().copied())
            .unwrap_or(0)
    }

    /// Whether `name@v` was garbage-collected: its removal record is there
    /// (kept by `gc` as a tombstone), its version record is not.
    pub fn collected(&self, name: &str, v: u32) -> bool {
        self.removed.get(name).is_some_and(|r| r.contains(&v))
            && !self.versions.get(name).is_some_and(|s| s.contains(&v))
    }
}

/// A version as listings show it.
#[derive(Debug, Clone)]
pub struct Listed {
    pub record: ModelRecord,
    pub tags: Vec<String>,
    pub removed: bool,
}

/// The number of a record's file name: `NNNNNNNN.json`, at least 8 digits
/// as `{n:08}` writes them (so a number past 99999999 is still seen: one
/// planted there must not hide every later record).
pub(super) fn number(file: &str) -> Option<u32> {
    let n = file.strip_suffix(".json")?;
    let v: u32 = n
        .bytes()
        .all(|c| c.is_ascii_digit())
        .then(|| n.parse().ok())
        .flatten()?;
    (format!("{v:08}") == n).then_some(v)
}

/// The numbers a new record may take after `last`, or why none is left.
fn next_numbers(last: u32, what: &str) -> Result<std::ops::Range<u32>> {
    match last.checked_add(MAX_TRIES + 1) {
        Some(end) => Ok(last + 1..end),
        None => bail!(
            "no number is left for {what}: a record numbered {last} is there (`yolo-sched models list --all` names it under `problems` when it is not valid); an administrator deletes it"
        ),
    }
}

impl Registry {
    /// Open the registry at `url`; credentials for `s3://` as for the backup.
    pub fn open(url: &RegistryUrl) -> Result<Registry> {
        match url {
            RegistryUrl::S3(u) => {
                let store = Store::s3(u, &Credentials::from_process())?;
                let base = if u.prefix.is_empty() {
                    String::new()
                } else {
                    format!("{}/", u.prefix)
                };
                Ok(Registry {
                    backend: Arc::new(S3::new(store, &base)),
                    base,
                    url: url.to_string(),
                })
            }
            RegistryUrl::File(dir) => {
                if !dir.is_dir() {
                    return Err(invalid(format!(
                        "the registry directory {} does not exist: an administrator creates it (docs/registry.md)",
                        crate::text::echo_path(dir)
                    )));
                }
                Ok(Registry {
                    backend: Arc::new(UnixDir::open(dir)?),
                    base: String::new(),
                    url: url.to_string(),
                })
            }
        }
    }

    /// A registry on the object store `store` (an S3 bucket, or memory)
    /// under `base` (tests, benchmarks).
    pub fn on(store: Store, base: &str) -> Registry {
        Registry {
            url: store.name.clone(),
            backend: Arc::new(S3::new(store, base)),
            base: base.to_string(),
        }
    }

    pub(super) fn key(&self, rel: &str) -> String {
        format!("{}{rel}", self.base)
    }

    pub fn blob_key(&self, sha256: &str) -> String {
        self.key(&format!("blobs/sha256/{sha256}"))
    }

    pub(super) fn version_key(&self, name: &str, v: u32) -> String {
        self.key(&format!("models/{name}/versions/{v:08}.json"))
    }

    /// One listing of the records (of `name`, or of every model). What is
    /// not a valid entry (a link, which is never followed; a name that is
    /// not UTF-8, not a valid model name or tag; a directory that cannot be
    /// read) is skipped and said, escaped, in `problems`.
    pub fn index(&self, name: Option<&str>) -> Result<Index> {
        let prefix = match name {
            Some(n) => self.key(&format!("models/{n}/")),
            None => self.key("models/"),
        };
        let models = self.key("models/");
        let mut idx = Index {
            prefix: prefix.clone(),
            ..Index::default()
        };
        let (objects, skipped) = self.backend.list(&prefix)?;
        let shown = |k: &str| crate::text::shown(k, crate::text::PATH_CHARS);
        for s in skipped {
            idx.problems
                .push(format!("{}: {}; skipped", shown(&s.rel), s.why));
        }
        let mut bad = BTreeSet::new();
        for o in objects {
            let Some(rest) = o.key.strip_prefix(&models) else {
                continue;
            };
            if let Some(tag) = &o.e_tag {
                idx.etags.insert(o.key.clone(), tag.clone());
            }
            let parts: Vec<&str> = rest.split('/').collect();
            if let Some(n) = parts.first().filter(|n| check_name(n).is_err()) {
                bad.insert(format!(
                    "{}: not a valid model name; skipped",
                    shown(&format!("{models}{n}"))
                ));
                continue;
            }
            match parts.as_slice() {
                [n, "versions", f] => {
                    if let Some(v) = number(f) {
                        idx.versions.entry(n.to_string()).or_default().insert(v);
                    }
                }
                [n, "tags", t, f] => {
                    if check_tag(t).is_err() {
                        bad.insert(format!(
                            "{}: not a valid tag; skipped",
                            shown(&format!("{models}{n}/tags/{t}"))
                        ));
                    } else if let Some(seq) = number(f) {
                        idx.tags
                            .entry(n.to_string())
                            .or_default()
                            .entry(t.to_string())
                            .or_default()
                            .insert(seq);
                    }
                }
                [n, "removed", f] => {
                    if let Some(v) = number(f) {
                        idx.removed.entry(n.to_string()).or_default().insert(v);
                    }
                }
                _ => {}
            }
        }
        idx.problems.extend(bad);
        Ok(idx)
    }

    /// The model names there are.
    pub fn names(&self) -> Result<Vec<String>> {
        Ok(self.index(None)?.versions.into_keys().collect())
    }

    /// Version `v` of `name`: `None` when there is no such record; `Err` when
    /// the record is there but not valid (it is never used).
    pub fn record(&self, name: &str, v: u32) -> Result<Option<ModelRecord>> {
        let key = self.version_key(name, v);
        let Some(bytes) = self.backend.get(&key, MAX_RECORD)? else {
            return Ok(None);
        };
        self.parse_record(&key, &bytes, name, v).map(Some)
    }

    /// A stored record checked: valid, the one its key names, and on
    /// `file://` written by the user it names (or root). A record anyone
    /// could write in a shared directory must not speak for another user.
    fn parse_record(&self, key: &str, bytes: &[u8], name: &str, v: u32) -> Result<ModelRecord> {
        let r = ModelRecord::from_stored(bytes, name, v).map_err(|e| anyhow!(e))?;
        self.writer(key, &r.user, "published it")
            .map_err(|e| anyhow!("record {name}@{v} {e}; it is not used"))?;
        Ok(r)
    }

    /// Who wrote the record at `key`, which names `claimed` as its writer:
    /// on `file://` its file's owner, who must be `claimed` or root; on S3
    /// `claimed` itself, which nothing can check (docs/registry.md, "Threat
    /// model").
    /// `did` is what the record says its writer did (`published it`).
    pub(super) fn writer(&self, key: &str, claimed: &str, did: &str) -> Result<String, String> {
        self.backend.writer(key, claimed, did)
    }

    /// A version record fetched (`fetched`), judged without regard to who
    /// asks; `Err` only when the store failed.
    fn fetched(&self, name: &str, v: u32, fetched: Result<Option<Vec<u8>>>) -> Result<Judged> {
        let key = self.version_key(name, v);
        match fetched {
            Ok(None) => Ok(Judged::Missing),
            Ok(Some(b)) => Ok(match self.parse_record(&key, &b, name, v) {
                Ok(r) => Judged::Valid(Box::new(r)),
                Err(e) => Judged::Invalid(format!("{e:#}")),
            }),
            Err(e) if is_denied(&e) => Ok(Judged::Denied(format!("{e:#}"))),
            Err(e) => Err(e),
        }
    }

    /// The tag move stored at `name`'s `tag` #`seq` if it is valid and the
    /// one its key names; `Ok(None)` when there is none.
    fn tag_move(&self, name: &str, tag: &str, seq: u32) -> Result<Option<TagMove>> {
        let key = self.tag_key(name, tag, seq);
        let Some(bytes) = self.backend.get(&key, MAX_RECORD)? else {
            return Ok(None);
        };
        parse_tag_move(&bytes, name, tag, seq).map(Some)
    }

    fn tag_key(&self, name: &str, tag: &str, seq: u32) -> String {
        self.key(&format!("models/{name}/tags/{tag}/{seq:08}.json"))
    }

    fn removal_key(&self, name: &str, v: u32) -> String {
        self.key(&format!("models/{name}/removed/{v:08}.json"))
    }

    /// The records at `keys` (each as `Store::get_bytes` gives it), in
    /// order: on S3 through the listing index, whose entries are used only
    /// when their MD5 is the ETag the listing (`etags`) gives (`s3`); keys
    /// under `scope` that the new index does not hold are dropped from it.
    pub(super) fn read_many(
        &self,
        keys: &[String],
        etags: &BTreeMap<String, String>,
        scope: &str,
    ) -> Vec<Result<Option<Vec<u8>>>> {
        self.backend.read_records(keys, etags, scope)
    }

    /// Each tag of `name` and the version it points at now (`Model::tags`).
    pub fn tags(&self, idx: &Index, name: &str, caller: &Caller) -> BTreeMap<String, u32> {
        Model::new(self, name, idx, caller).tags()
    }

    /// Every version (of `name`, or of all models) that `caller` may read,
    /// with its tags, oldest first; records that are not valid (and tag
    /// moves and removals not obeyed) are left out and said in `problems`,
    /// those the caller may not read are counted.
    pub fn list(&self, name: Option<&str>, caller: &Caller) -> Result<Listing> {
        let idx = self.index(name)?;
        let mut out = Listing {
            problems: idx.problems.clone(),
            ..Listing::default()
        };
        // Every record a listing usually needs, read at once: the versions,
        // each tag's newest move, the removals.
        let mut keys: Vec<(&str, String)> = Vec::new();
        for (n, versions) in &idx.versions {
            keys.extend(
                versions
                    .iter()
                    .map(|v| (n.as_str(), self.version_key(n, *v))),
            );
            for (tag, seqs) in idx.tags.get(n).into_iter().flatten() {
                keys.extend(seqs.last().map(|s| (n.as_str(), self.tag_key(n, tag, *s))));
            }
            for v in idx.removed.get(n).into_iter().flatten() {
                keys.push((n.as_str(), self.removal_key(n, *v)));
            }
        }
        let plain: Vec<String> = keys.iter().map(|(_, k)| k.clone()).collect();
        let mut read: BTreeMap<&str, Fetched> = BTreeMap::new();
        for ((n, k), got) in keys
            .into_iter()
            .zip(self.read_many(&plain, &idx.etags, &idx.prefix))
        {
            read.entry(n).or_default().insert(k, got);
        }
        for (n, versions) in &idx.versions {
            let m = Model::new(self, n, &idx, caller);
            *m.prefetched.borrow_mut() = read.remove(n.as_str()).unwrap_or_default();
            for v in versions {
                let got = m.get(&self.version_key(n, *v));
                m.remember(*v, self.fetched(n, *v, got)?);
            }
            let tags = m.tags();
            for v in versions {
                match m.version(*v)? {
                    Judged::Valid(record) if caller.check(&record, Right::Read).is_err() => {
                        out.hidden += 1;
                    }
                    Judged::Valid(record) => out.versions.push(Listed {
                        tags: tags
                            .iter()
                            .filter(|(_, tv)| *tv == v)
                            .map(|(t, _)| t.clone())
                            .collect(),
                        removed: m.removed(*v)?,
                        record: *record,
                    }),
                    Judged::Missing => {}
                    Judged::Denied(_) => out.hidden += 1,
                    Judged::Invalid(e) => out.problems.push(e),
                }
            }
            out.problems.extend(m.problems.into_inner());
        }
        Ok(out)
    }

    /// The one version `r` means, which `caller` may read. An unknown name
    /// is invalid input listing the names there are; `Latest` is the newest
    /// version that is not removed and that the caller may read; an exact
    /// version is found even when removed (runs that name it keep working).
    /// A version the caller may not read is invalid input with the reason:
    /// for them it is as good as absent, and nothing was changed.
    pub fn resolve(&self, r: &ModelRef, caller: &Caller) -> Result<Listed> {
        let idx = self.index(Some(&r.name))?;
        if let Selector::Version(v) = r.selector {
            if idx.collected(&r.name, v) {
                return Err(invalid(format!(
                    "{}@{v} was removed and garbage-collected (`yolo-sched models gc`): its record and files are gone; name another version",
                    r.name
                )));
            }
        }
        let Some(versions) = idx.versions.get(&r.name) else {
            return Err(self.no_such_model(&r.name));
        };
        let m = Model::new(self, &r.name, &idx, caller);
        let v = match &r.selector {
            Selector::Version(v) => {
                if !versions.contains(v) {
                    return Err(invalid(format!(
                        "model `{}` has no version {v}; its versions are 1 to {}",
                        r.name,
                        versions.last().copied().unwrap_or(0)
                    )));
                }
                *v
            }
            Selector::Tag(t) => tagged_version(&m, t)?,
            Selector::Latest => return self.latest_readable(&m, versions),
        };
        if matches!(r.selector, Selector::Tag(_)) && m.removed(v)? {
            return Err(invalid(format!(
                "tag `{r}` points at version {v}, which is removed; move the tag (`yolo-sched models tag`)"
            )));
        }
        readable_version(&m, v)
    }

    /// An unknown model name: invalid input listing (some of) the names there
    /// are, or saying there are none; a registry that cannot be read, as is.
    fn no_such_model(&self, name: &str) -> anyhow::Error {
        let names = match self.names() {
            Ok(names) => names,
            Err(e) => return e,
        };
        let list = if names.is_empty() {
            "the registry holds no models yet (`yolo-sched models publish` or `import` adds one)"
                .to_string()
        } else {
            format!(
                "the models are {}",
                crate::suggest::ticked_list(names.iter().take(20).map(String::as_str))
            )
        };
        invalid(format!(
            "no model `{}` in the registry {}{}; {list}",
            crate::text::echo(name),
            self.url,
            crate::suggest::did_you_mean(name, names.iter().map(String::as_str)),
        ))
    }

    /// `NAME@latest`: the newest version of `m` that is not removed and that
    /// the caller may read; else why not (the newest refusal, or none valid).
    fn latest_readable(&self, m: &Model, versions: &BTreeSet<u32>) -> Result<Listed> {
        let name = m.name;
        // Newest first: the usual answer costs one record read; an
        // outsider's search goes on in concurrent batches. A record
        // that is not valid (or another user's, on `file://`) is
        // skipped, as `list` skips it; so is a version whose removal
        // record is obeyed.
        let candidates: Vec<u32> = versions.iter().rev().copied().collect();
        let mut first_refusal = None;
        let (mut start, mut batch) = (0, 1);
        while start < candidates.len() {
            let chunk = &candidates[start..(start + batch).min(candidates.len())];
            let keys: Vec<String> = chunk.iter().map(|v| self.version_key(name, *v)).collect();
            let got = self.backend.get_many(&keys, MAX_RECORD, LIST_CONCURRENCY);
            for (v, fetched) in chunk.iter().zip(got) {
                m.remember(*v, self.fetched(name, *v, fetched)?);
            }
            for v in chunk {
                let judged = m.version(*v)?;
                if matches!(judged, Judged::Denied(_)) && m.idx.is_removed(name, *v) {
                    continue;
                }
                if m.removed(*v)? {
                    continue;
                }
                match judged {
                    Judged::Valid(record) => match m.caller.check(&record, Right::Read) {
                        Ok(_) => return listed(m, *record),
                        Err(refusal) => {
                            let hint = m.caller.hint(&record, Right::Read);
                            first_refusal.get_or_insert((refusal, hint));
                        }
                    },
                    Judged::Denied(e) => {
                        first_refusal.get_or_insert(denied_refusal(name, *v, &e));
                    }
                    Judged::Invalid(_) | Judged::Missing => {}
                }
            }
            start += chunk.len();
            batch = LIST_CONCURRENCY;
        }
        Err(match first_refusal {
            Some(refusal) => with_hint(
                invalid(format!(
                    "no version of model `{}` is readable by you: the newest, {}",
                    name, refusal.0
                )),
                refusal.1,
            ),
            None => invalid(format!(
                "every version of model `{}` is removed or not valid (`yolo-sched models list --all` shows them and the problems); name one by number (`{}@{}`)",
                name,
                name,
                versions.last().copied().unwrap_or(1)
            )),
        })
    }

    /// Store the local file `path` (SHA-256 `sha`, `size` bytes) as a blob,
    /// verified by reading it back. A blob that is already there with this
    /// content and was written within `BLOB_REFRESH` is kept (checked by
    /// hashing it); any other is uploaded again. The fresh time matters to
    /// `gc`, which deletes a blob no record names only once it is older than
    /// its grace (24 h by default): an old unnamed blob this publication is
    /// about to name must not look abandoned.
    pub fn put_blob(&self, path: &Path, sha: &str, size: u64) -> Result<()> {
        let key = self.blob_key(sha);
        if let Some(there) = self.backend.head(&key)? {
            let fresh = chrono::Utc::now() - there.last_modified < BLOB_REFRESH;
            if fresh && there.size == size && self.backend.sha256_of(&key)? == sha {
                return Ok(());
            }
        }
        self.backend
            .put_blob(path, size, sha, &key)
            .map_err(|e| match e {
                PutError::Store(e) => e,
                PutError::Mismatch { sent, stored } => anyhow!(
                    "the blob stored at {key} reads back as SHA-256 {stored}, not {sent}; it was deleted"
                ),
                PutError::Changed => anyhow!("{} changed while it was uploaded", path.display()),
            })
    }

    /// Whether every file `r` names is there as a blob of the right size.
    pub fn check_blobs(&self, r: &ModelRecord) -> Result<()> {
        for f in &r.files {
            match self.backend.size_of(&self.blob_key(&f.sha256))? {
                Some(s) if s == f.size => {}
                Some(s) => bail!(
                    "{}: the blob of {} is {s} bytes, the record says {}; the registry is damaged (run `yolo-sched models publish` again)",
                    r.id(),
                    f.name,
                    f.size
                ),
                None => bail!(
                    "{}: the blob of {} (SHA-256 {}) is missing from the registry; the version cannot be used",
                    r.id(),
                    f.name,
                    f.sha256
                ),
            }
        }
        Ok(())
    }

    /// Write `draft` as the next version of its name: its blobs must be there
    /// already (checked). Each try creates the next free number's record with
    /// `PutMode::Create` and reads it back; the record returned is the one stored.
    pub fn add_version(&self, mut draft: ModelRecord) -> Result<ModelRecord> {
        self.check_blobs(&draft)?;
        draft.format = FORMAT;
        // A garbage-collected version leaves its removal record: its number
        // is never given again (a run that names it must not get other weights).
        let idx = self.index(Some(&draft.name))?;
        let last = |m: &BTreeMap<String, BTreeSet<u32>>| {
            m.get(&draft.name)
                .and_then(|v| v.last().copied())
                .unwrap_or(0)
        };
        let last = last(&idx.versions).max(last(&idx.removed));
        for next in next_numbers(last, &format!("a version of `{}`", draft.name))? {
            draft.version = next;
            let key = self.version_key(&draft.name, next);
            let bytes = serde_json::to_vec_pretty(&draft)?;
            if self.put_record(&key, bytes, &draft)? {
                match self.record(&draft.name, next)? {
                    Some(stored) if stored.publish_id == draft.publish_id => return Ok(stored),
                    // Another publisher's record won the number after all
                    // (a store whose create is not atomic): take the next.
                    _ => {}
                }
            }
        }
        bail!(
            "could not find a free version number for `{}` after {MAX_TRIES} tries",
            draft.name
        )
    }

    /// Create the version record `key` (create-if-absent). On `file://` the
    /// record gets its account's group and mode before it has its name
    /// (`unix::create_record`): never readable by others meanwhile.
    fn put_record(&self, key: &str, bytes: Vec<u8>, r: &ModelRecord) -> Result<bool> {
        self.backend.put_record(key, bytes, r)
    }

    /// What a `file://` registry's file system will not enforce for `r`
    /// (said before publishing; nothing for S3, whose bucket policy is the
    /// site's, docs/registry.md).
    pub fn enforcement_notes(&self, r: &ModelRecord) -> Vec<String> {
        self.backend.enforcement_notes(r)
    }

    /// Point `tag` of `name` at `version` (which must exist and not be removed).
    pub fn tag(&self, name: &str, version: u32, tag: &str, caller: &Caller) -> Result<TagMove> {
        let user = caller.user.as_str();
        let idx = self.index(Some(name))?;
        if !idx.versions.get(name).is_some_and(|v| v.contains(&version)) {
            return Err(invalid(format!("model `{name}` has no version {version}")));
        }
        if Model::new(self, name, &idx, caller).removed(version)? {
            return Err(invalid(format!(
                "{name}@{version} is removed; tag another version"
            )));
        }
        for seq in next_numbers(idx.last_move(name, tag), &format!("a move of tag `{tag}`"))? {
            let t = TagMove {
                format: FORMAT,
                name: name.to_string(),
                tag: tag.to_string(),
                version,
                seq,
                user: user.to_string(),
                time: chrono::Utc::now(),
            };
            let key = self.key(&format!("models/{name}/tags/{tag}/{seq:08}.json"));
            if self.backend.put_new(&key, serde_json::to_vec_pretty(&t)?)?
                && self.tag_move(name, tag, seq)?.as_ref() == Some(&t)
            {
                return Ok(t);
            }
        }
        bail!("could not record the tag `{tag}` after {MAX_TRIES} tries")
    }

    /// Mark `name@version` removed. `Ok(false)` when it was removed already
    /// (by a removal record that is obeyed: `caller`'s check); a record there
    /// that is not obeyed (another user's, not valid) is an error naming it:
    /// an administrator deletes it.
    pub fn remove(&self, name: &str, version: u32, caller: &Caller) -> Result<bool> {
        let user = caller.user.as_str();
        let r = Removal {
            format: FORMAT,
            name: name.to_string(),
            version,
            user: user.to_string(),
            time: chrono::Utc::now(),
        };
        let key = self.key(&format!("models/{name}/removed/{version:08}.json"));
        if self.backend.put_new(&key, serde_json::to_vec_pretty(&r)?)? {
            return Ok(true);
        }
        let idx = self.index(Some(name))?;
        let m = Model::new(self, name, &idx, caller);
        if m.removed(version)? {
            return Ok(false);
        }
        bail!(
            "{name}@{version} cannot be marked removed: {} is there and is not obeyed ({}); an administrator deletes it (`rm`, or the S3 administrator's key), then remove again",
            crate::text::shown(&key, crate::text::PATH_CHARS),
            m.problems.into_inner().join("; ")
        )
    }

    /// Copy the file `f` into `dir` as `f.name`, verified: written to a
    /// temporary file beside it, hashed as it arrives, renamed into place only
    /// when its SHA-256 and size are the record's. A file already there with
    /// that content is kept.
    pub fn pull_file(&self, f: &FileEntry, dir: &Path) -> Result<PathBuf> {
        let dest = dir.join(&f.name);
        if dest.is_file()
            && crate::objstore::store::sha256_file(&dest).ok().as_deref() == Some(f.sha256.as_str())
        {
            return Ok(dest);
        }
        // Readable as a file the user made (0644 less the umask), as before.
        let mut tmp = crate::fsutil::temp_beside(&dest, 0o644)?;
        let got = self
            .backend
            .get_into(&self.blob_key(&f.sha256), tmp.file(), MAX_OBJECT);
        match got {
            Ok(Some((sha, size))) if sha == f.sha256 && size == f.size => {
                tmp.file()
                    .flush()
                    .map_err(|e| anyhow!("writing {}: {e}", tmp.path().display()))?;
                tmp.commit()
                    .with_context(|| format!("renaming into {}", dest.display()))?;
                Ok(dest)
            }
            Ok(Some((sha, size))) => Err(anyhow!(
                "the blob of {} is damaged: it reads as {size} bytes with SHA-256 {sha}, the record says {} bytes with {}; nothing was written",
                f.name,
                f.size,
                f.sha256
            )),
            Ok(None) => Err(anyhow!(
                "the blob of {} (SHA-256 {}) is missing from the registry; nothing was written",
                f.name,
                f.sha256
            )),
            Err(e) => Err(e),
        }
    }

    /// The store (tests and benchmarks corrupt or delete objects through it).
    pub fn store(&self) -> &Store {
        self.backend.store()
    }

    /// Where the objects are (`gc` lists, reads and deletes through it).
    pub(super) fn backend(&self) -> &dyn Backend {
        &*self.backend
    }
}

/// A version record as fetched, whoever asks.
#[derive(Debug, Clone)]
enum Judged {
    /// Valid, the one its key names and, on `file://`, written by the user
    /// it names (or root).
    Valid(Box<ModelRecord>),
    /// The store does not let the caller read it (a `file://` account group).
    Denied(String),
    /// Not valid: never used, said in `problems`.
    Invalid(String),
    Missing,
}

/// The refusal (and its hint) of a record the file system does not let the
/// caller read.
fn denied_refusal(name: &str, v: u32, e: &str) -> (String, String) {
    (
        format!("{name}@{v}: the registry's file system does not let you read its record ({e})"),
        "a `file://` registry keeps a private version to the Unix group named as its account; if Slurm's accounts let you read it, ask an administrator to add you to that group (docs/registry.md)".to_string(),
    )
}

/// A version as `resolve` answers it: its record, its tags, whether removed.
fn listed(m: &Model, record: ModelRecord) -> Result<Listed> {
    Ok(Listed {
        tags: m
            .tags()
            .into_iter()
            .filter(|(_, tv)| *tv == record.version)
            .map(|(t, _)| t)
            .collect(),
        removed: m.removed(record.version)?,
        record,
    })
}

/// The version tag `t` of `m` points at; an unknown tag is invalid input
/// naming the tags there are.
fn tagged_version(m: &Model, t: &str) -> Result<u32> {
    let tags = m.tags();
    tags.get(t).copied().ok_or_else(|| {
        invalid(format!(
            "model `{}` has no tag `{t}`{}{}",
            m.name,
            crate::suggest::did_you_mean(t, tags.keys().map(String::as_str)),
            if tags.is_empty() {
                "; it has no tags".to_string()
            } else {
                format!(
                    "; its tags are {}",
                    crate::suggest::ticked_list(tags.keys().map(String::as_str))
                )
            }
        ))
    })
}

/// Version `v` of `m` if the caller may read it; else invalid input with the
/// reason, or the record's problem.
fn readable_version(m: &Model, v: u32) -> Result<Listed> {
    match m.version(v)? {
        Judged::Valid(record) => match m.caller.check(&record, Right::Read) {
            Ok(_) => listed(m, *record),
            Err(refusal) => Err(with_hint(
                invalid(refusal),
                m.caller.hint(&record, Right::Read),
            )),
        },
        Judged::Denied(e) => {
            let (refusal, hint) = denied_refusal(m.name, v, &e);
            Err(with_hint(invalid(refusal), hint))
        }
        Judged::Invalid(e) => Err(anyhow!(e)),
        Judged::Missing => bail!("record {}@{v} vanished while being read", m.name),
    }
}

impl Index {
    /// Whether a removal record is there for `name@v` (obeyed or not).
    pub fn is_removed(&self, name: &str, v: u32) -> bool {
        self.removed.get(name).is_some_and(|r| r.contains(&v))
    }
}

/// One model's records as one command reads them: each version record read
/// at most once, tag moves and removals obeyed only when valid and written
/// by someone who may tag or remove the version they concern (its
/// publisher, a coordinator of its account, a Slurm operator, root:
/// `Caller::may_manage_as`), the writer being the file's owner on `file://`
/// and the user the record names on S3 (`Registry::writer`). What is not
/// obeyed is said in `problems`.
struct Model<'a> {
    reg: &'a Registry,
    name: &'a str,
    idx: &'a Index,
    caller: &'a Caller,
    versions: RefCell<BTreeMap<u32, Judged>>,
    tags: RefCell<Option<BTreeMap<String, u32>>>,
    removals: RefCell<BTreeMap<u32, bool>>,
    problems: RefCell<Vec<String>>,
    /// Records read already (`Registry::list` reads them at once), each
    /// taken once.
    prefetched: RefCell<Fetched>,
}

/// Records read, by key, each as `Store::get_bytes` gave it.
type Fetched = BTreeMap<String, Result<Option<Vec<u8>>>>;

impl<'a> Model<'a> {
    fn new(reg: &'a Registry, name: &'a str, idx: &'a Index, caller: &'a Caller) -> Model<'a> {
        Model {
            reg,
            name,
            idx,
            caller,
            versions: RefCell::default(),
            tags: RefCell::default(),
            removals: RefCell::default(),
            problems: RefCell::default(),
            prefetched: RefCell::default(),
        }
    }

    /// The record at `key`: prefetched, else read now.
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        match self.prefetched.borrow_mut().remove(key) {
            Some(got) => got,
            None => self.reg.backend.get(key, MAX_RECORD),
        }
    }

    /// Keep a version record fetched in a batch.
    fn remember(&self, v: u32, judged: Judged) {
        self.versions.borrow_mut().insert(v, judged);
    }

    /// Version `v`, read once.
    fn version(&self, v: u32) -> Result<Judged> {
        if let Some(j) = self.versions.borrow().get(&v) {
            return Ok(j.clone());
        }
        let key = self.reg.version_key(self.name, v);
        let j = self.reg.fetched(self.name, v, self.get(&key))?;
        self.remember(v, j.clone());
        Ok(j)
    }

    /// Whether `writer` (the record's claimed writer, checked on `file://`
    /// against the file `key`'s owner) may tag or remove version `v`.
    fn authorised(&self, key: &str, claimed: &str, v: u32) -> Result<Result<(), String>> {
        let record = match self.version(v)? {
            Judged::Valid(r) => *r,
            Judged::Denied(_) => {
                return Ok(Err(format!(
                    "the record of {}@{v} it concerns is not readable by you",
                    self.name
                )))
            }
            Judged::Invalid(_) => {
                return Ok(Err(format!(
                    "the record of {}@{v} it concerns is not valid",
                    self.name
                )))
            }
            Judged::Missing => {
                return Ok(Err(format!("there is no {}@{v}", self.name)));
            }
        };
        Ok(self
            .reg
            .writer(key, claimed, "wrote it")
            .and_then(|w| self.caller.may_manage_as(&w, &record)))
    }

    /// Whether `v` is removed: a removal record is there, valid, and
    /// written by someone who may remove it. One that is not is said in
    /// `problems` and not obeyed.
    fn removed(&self, v: u32) -> Result<bool> {
        if !self.idx.is_removed(self.name, v) {
            return Ok(false);
        }
        if let Some(r) = self.removals.borrow().get(&v) {
            return Ok(*r);
        }
        let name = self.name;
        let key = self.reg.removal_key(name, v);
        let verdict = match self.get(&key)? {
            None => Err(format!("the removal record of {name}@{v} vanished")),
            Some(bytes) => match serde_json::from_slice::<Removal>(&bytes) {
                Err(e) => Err(format!("the removal record of {name}@{v} is not valid: {e}")),
                Ok(r) if r.format != FORMAT || r.name != name || r.version != v => Err(format!(
                    "the removal record stored as {name}@{v} names another version, or has another format"
                )),
                Ok(r) => self
                    .authorised(&key, &r.user, v)?
                    .map_err(|e| format!("the removal record of {name}@{v}: {e}")),
            },
        };
        let removed = match verdict {
            Ok(()) => true,
            Err(e) => {
                self.problems
                    .borrow_mut()
                    .push(format!("{e}; the removal is not obeyed"));
                false
            }
        };
        self.removals.borrow_mut().insert(v, removed);
        Ok(removed)
    }

    /// Each tag and the version its newest obeyed move points at: a move
    /// that is not valid or whose writer may not tag that version is said
    /// in `problems` and passed over for the one before it.
    fn tags(&self) -> BTreeMap<String, u32> {
        if let Some(t) = self.tags.borrow().as_ref() {
            return t.clone();
        }
        let mut out = BTreeMap::new();
        let name = self.name;
        for (tag, seqs) in self.idx.tags.get(name).into_iter().flatten() {
            for seq in seqs.iter().rev() {
                let key = self.reg.tag_key(name, tag, *seq);
                let got = self
                    .get(&key)
                    .and_then(|b| b.map(|b| parse_tag_move(&b, name, tag, *seq)).transpose());
                let verdict = match got {
                    Ok(None) => continue,
                    Ok(Some(t)) => match self.version(t.version) {
                        // A version the caller cannot read: the tag points
                        // there (resolving it refuses), never further back.
                        Ok(Judged::Denied(_)) => Ok(t.version),
                        Ok(_) => match self.authorised(&key, &t.user, t.version) {
                            Ok(Ok(())) => Ok(t.version),
                            Ok(Err(e)) => Err(e),
                            Err(e) => Err(format!("{e:#}")),
                        },
                        Err(e) => Err(format!("{e:#}")),
                    },
                    Err(e) => Err(format!("{e:#}")),
                };
                match verdict {
                    Ok(v) => {
                        out.insert(tag.clone(), v);
                        break;
                    }
                    Err(e) => self.problems.borrow_mut().push(format!(
                        "tag move {name}@{tag} #{seq}: {e}; it is not obeyed"
                    )),
                }
            }
        }
        *self.tags.borrow_mut() = Some(out.clone());
        out
    }
}

/// A tag move's stored bytes, checked: valid, this format, the move its key
/// names.
fn parse_tag_move(bytes: &[u8], name: &str, tag: &str, seq: u32) -> Result<TagMove> {
    let t: TagMove =
        serde_json::from_slice(bytes).map_err(|e| anyhow!("its record is not valid: {e}"))?;
    if t.format != FORMAT || t.name != name || t.tag != tag || t.seq != seq {
        bail!("its record names another tag move, or has another format");
    }
    Ok(t)
}
