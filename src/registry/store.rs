//! The registry's objects, through `backup::Store` (the one object-store
//! client: object_store's S3 client or its local store):
//!
//! - `blobs/sha256/<hex>`: each file once, under its SHA-256; written and
//!   read back verified before any record names it.
//! - `models/<name>/versions/<NNNNNNNN>.json`: a version record, created with
//!   `PutMode::Create` (S3 `If-None-Match: *`; the local store's hard link), then
//!   read back: a publisher whose record is not there with its own
//!   `publish_id` takes the next number. Two publishers never share a version.
//! - `models/<name>/tags/<tag>/<NNNNNNNN>.json`: a tag's moves; the highest wins.
//! - `models/<name>/removed/<NNNNNNNN>.json`: a removal.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};

use super::access::{Caller, Right};
use super::names::{ModelRef, Selector};
use super::record::{FileEntry, ModelRecord, Removal, TagMove, FORMAT, MAX_RECORD};
use super::url::RegistryUrl;
use crate::backup::store::{PutError, MAX_OBJECT};
use crate::backup::{Credentials, Store};
use crate::error::{invalid, with_hint};

/// Whether `e` is the store refusing the caller (S3's 403, a file the
/// caller's Unix permissions do not open).
pub fn is_denied(e: &anyhow::Error) -> bool {
    e.chain()
        .any(|c| c.downcast_ref::<crate::backup::store::Refused>().is_some())
}

/// How many version numbers one publication tries before it gives up.
const MAX_TRIES: u32 = 1000;
/// A blob already there is uploaded again when it is older than this (its
/// time refreshed for `gc`'s grace; see `put_blob`).
pub const BLOB_REFRESH: chrono::TimeDelta = chrono::TimeDelta::hours(1);
/// Records read at once by `list`.
const LIST_CONCURRENCY: usize = 32;

/// An open registry.
#[derive(Debug, Clone)]
pub struct Registry {
    store: Store,
    /// The key prefix (`prefix/` of an S3 URL, empty otherwise).
    base: String,
    /// What messages call it.
    pub url: String,
}

/// Every record key under `models/`, sorted out by kind.
#[derive(Debug, Default)]
pub struct Index {
    pub versions: BTreeMap<String, BTreeSet<u32>>,
    pub tags: BTreeMap<String, BTreeMap<String, u32>>,
    pub removed: BTreeMap<String, BTreeSet<u32>>,
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

fn number(file: &str) -> Option<u32> {
    let n = file.strip_suffix(".json")?;
    (n.len() == 8 && n.chars().all(|c| c.is_ascii_digit()))
        .then(|| n.parse().ok())
        .flatten()
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
                    store,
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
                    store: Store::local(dir)?,
                    base: String::new(),
                    url: url.to_string(),
                })
            }
        }
    }

    /// A registry on `store` under `base` (tests, benchmarks).
    pub fn on(store: Store, base: &str) -> Registry {
        Registry {
            url: store.name.clone(),
            store,
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

    /// One listing of the records (of `name`, or of every model).
    pub fn index(&self, name: Option<&str>) -> Result<Index> {
        let prefix = match name {
            Some(n) => self.key(&format!("models/{n}/")),
            None => self.key("models/"),
        };
        let models = self.key("models/");
        let mut idx = Index::default();
        for key in self.store.list(&prefix)? {
            let Some(rest) = key.strip_prefix(&models) else {
                continue;
            };
            let parts: Vec<&str> = rest.split('/').collect();
            match parts.as_slice() {
                [n, "versions", f] => {
                    if let Some(v) = number(f) {
                        idx.versions.entry(n.to_string()).or_default().insert(v);
                    }
                }
                [n, "tags", t, f] => {
                    if let Some(seq) = number(f) {
                        let e = idx
                            .tags
                            .entry(n.to_string())
                            .or_default()
                            .entry(t.to_string())
                            .or_default();
                        *e = (*e).max(seq);
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
        let Some(bytes) = self.store.get_bytes(&key, MAX_RECORD)? else {
            return Ok(None);
        };
        self.parse_record(&key, &bytes, name, v).map(Some)
    }

    /// A stored record checked: valid, the one its key names, and on
    /// `file://` written by the user it names (or root). A record anyone
    /// could write in a shared directory must not speak for another user.
    fn parse_record(&self, key: &str, bytes: &[u8], name: &str, v: u32) -> Result<ModelRecord> {
        let r = ModelRecord::from_stored(bytes, name, v).map_err(|e| anyhow!(e))?;
        if let Some(owner) = self
            .store
            .local_path(key)
            .and_then(|p| super::unix::owner_of(&p))
        {
            if owner != r.user && owner != "root" {
                bail!(
                    "record {name}@{v} says {} published it, but its file belongs to {}; it is not used",
                    crate::text::echo(&r.user),
                    crate::text::echo(&owner)
                );
            }
        }
        Ok(r)
    }

    fn tag_move(&self, name: &str, tag: &str, seq: u32) -> Result<Option<TagMove>> {
        let key = self.key(&format!("models/{name}/tags/{tag}/{seq:08}.json"));
        let Some(bytes) = self.store.get_bytes(&key, MAX_RECORD)? else {
            return Ok(None);
        };
        let t: TagMove = serde_json::from_slice(&bytes)
            .map_err(|e| anyhow!("tag record {name}@{tag} #{seq} is not valid: {e}"))?;
        if t.name != name || t.tag != tag || t.seq != seq {
            bail!("tag record stored as {name}@{tag} #{seq} names another; it is not used");
        }
        Ok(Some(t))
    }

    /// Each tag of `name` and the version it points at now.
    pub fn tags(&self, idx: &Index, name: &str) -> Result<BTreeMap<String, u32>> {
        let mut out = BTreeMap::new();
        for (tag, seq) in idx.tags.get(name).into_iter().flatten() {
            if let Some(t) = self.tag_move(name, tag, *seq)? {
                out.insert(tag.clone(), t.version);
            }
        }
        Ok(out)
    }

    /// Every version (of `name`, or of all models) that `caller` may read,
    /// with its tags, oldest first; records that are not valid are left out
    /// and said in `problems`, those the caller may not read are counted.
    pub fn list(&self, name: Option<&str>, caller: &Caller) -> Result<Listing> {
        let idx = self.index(name)?;
        let mut out = Listing::default();
        for (n, versions) in &idx.versions {
            let tags = self.tags(&idx, n)?;
            let removed = idx.removed.get(n);
            let keys: Vec<String> = versions.iter().map(|v| self.version_key(n, *v)).collect();
            let got = self.store.get_many(&keys, MAX_RECORD, LIST_CONCURRENCY);
            for (v, bytes) in versions.iter().zip(got) {
                let key = self.version_key(n, *v);
                let record = bytes.and_then(|b| match b {
                    None => Ok(None),
                    Some(b) => self.parse_record(&key, &b, n, *v).map(Some),
                });
                match record {
                    Ok(Some(record)) if caller.check(&record, Right::Read).is_err() => {
                        out.hidden += 1;
                    }
                    Ok(Some(record)) => out.versions.push(Listed {
                        tags: tags
                            .iter()
                            .filter(|(_, tv)| *tv == v)
                            .map(|(t, _)| t.clone())
                            .collect(),
                        removed: removed.is_some_and(|r| r.contains(v)),
                        record,
                    }),
                    Ok(None) => {}
                    Err(e) if is_denied(&e) => out.hidden += 1,
                    Err(e) => out.problems.push(format!("{e:#}")),
                }
            }
        }
        Ok(out)
    }

    /// The leaderboard rows of every version `caller` may read that is not
    /// removed, and the records that could not be read.
    pub(crate) fn board_rows(
        &self,
        caller: &Caller,
    ) -> Result<(Vec<crate::compare::Row>, Vec<String>)> {
        let listing = self.list(None, caller)?;
        Ok((
            listing
                .versions
                .iter()
                .filter(|l| !l.removed)
                .map(|l| l.record.board_row())
                .collect(),
            listing.problems,
        ))
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
            let names = self.names()?;
            let list = if names.is_empty() {
                "the registry holds no models yet (`yolo-sched models publish` or `import` adds one)"
                    .to_string()
            } else {
                format!(
                    "the models are {}",
                    crate::suggest::ticked_list(names.iter().take(20).map(String::as_str))
                )
            };
            return Err(invalid(format!(
                "no model `{}` in the registry {}{}; {list}",
                crate::text::echo(&r.name),
                self.url,
                crate::suggest::did_you_mean(&r.name, names.iter().map(String::as_str)),
            )));
        };
        let removed = idx.removed.get(&r.name).cloned().unwrap_or_default();
        let tags = self.tags(&idx, &r.name)?;
        let listed = |record: ModelRecord| Listed {
            tags: tags
                .iter()
                .filter(|(_, tv)| **tv == record.version)
                .map(|(t, _)| t.clone())
                .collect(),
            removed: removed.contains(&record.version),
            record,
        };
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
            Selector::Tag(t) => *tags.get(t).ok_or_else(|| {
                invalid(format!(
                    "model `{}` has no tag `{t}`{}{}",
                    r.name,
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
            })?,
            Selector::Latest => {
                // Newest first: the usual answer costs one record read; an
                // outsider's search goes on in concurrent batches.
                let candidates: Vec<u32> = versions
                    .iter()
                    .rev()
                    .filter(|v| !removed.contains(v))
                    .copied()
                    .collect();
                let mut first_refusal = None;
                let (mut start, mut batch) = (0, 1);
                while start < candidates.len() {
                    let chunk = &candidates[start..(start + batch).min(candidates.len())];
                    let keys: Vec<String> = chunk
                        .iter()
                        .map(|v| self.version_key(&r.name, *v))
                        .collect();
                    let got = self.store.get_many(&keys, MAX_RECORD, LIST_CONCURRENCY);
                    for (v, fetched) in chunk.iter().zip(got) {
                        match self.judge(&r.name, *v, fetched, caller)? {
                            Ok(record) => return Ok(listed(record)),
                            Err(refusal) => {
                                first_refusal.get_or_insert(refusal);
                            }
                        }
                    }
                    start += chunk.len();
                    batch = LIST_CONCURRENCY;
                }
                return Err(match first_refusal {
                    Some(refusal) => with_hint(
                        invalid(format!(
                            "no version of model `{}` is readable by you: the newest, {}",
                            r.name, refusal.0
                        )),
                        refusal.1,
                    ),
                    None => invalid(format!(
                        "every version of model `{}` is removed; name one by number (`{}@{}`)",
                        r.name,
                        r.name,
                        versions.last().copied().unwrap_or(1)
                    )),
                });
            }
        };
        if matches!(r.selector, Selector::Tag(_)) && removed.contains(&v) {
            return Err(invalid(format!(
                "tag `{r}` points at version {v}, which is removed; move the tag (`yolo-sched models tag`)"
            )));
        }
        match self.readable(&r.name, v, caller)? {
            Ok(record) => Ok(listed(record)),
            Err((refusal, hint)) => Err(with_hint(invalid(refusal), hint)),
        }
    }

    /// Version `v` of `name` if `caller` may read it, else the refusal and
    /// its hint. A record the file system does not let the caller read (a
    /// `file://` registry's account group) is a refusal too.
    fn readable(
        &self,
        name: &str,
        v: u32,
        caller: &Caller,
    ) -> Result<std::result::Result<ModelRecord, (String, String)>> {
        let fetched = self.store.get_bytes(&self.version_key(name, v), MAX_RECORD);
        self.judge(name, v, fetched, caller)
    }

    /// `readable` of a record already fetched.
    fn judge(
        &self,
        name: &str,
        v: u32,
        fetched: Result<Option<Vec<u8>>>,
        caller: &Caller,
    ) -> Result<std::result::Result<ModelRecord, (String, String)>> {
        let key = self.version_key(name, v);
        let record = match fetched.and_then(|b| match b {
            Some(b) => self.parse_record(&key, &b, name, v).map(Some),
            None => Ok(None),
        }) {
            Ok(Some(record)) => record,
            Ok(None) => bail!("record {name}@{v} vanished while being read"),
            Err(e) if is_denied(&e) => {
                return Ok(Err((
                    format!("{name}@{v}: the registry's file system does not let you read its record ({e:#})"),
                    "a `file://` registry keeps a private version to the Unix group named as its account; if Slurm's accounts let you read it, ask an administrator to add you to that group (docs/registry.md)".to_string(),
                )))
            }
            Err(e) => return Err(e),
        };
        Ok(match caller.check(&record, Right::Read) {
            Ok(_) => Ok(record),
            Err(refusal) => Err((refusal, caller.hint(&record, Right::Read))),
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
        if let Some(there) = self.store.head(&key)? {
            let fresh = chrono::Utc::now() - there.last_modified < BLOB_REFRESH;
            if fresh && there.size == size && self.store.sha256_of(&key)? == sha {
                return Ok(());
            }
        }
        self.ensure_parents(&key)?;
        self.store
            .put_snapshot(path, size, sha, &key)
            .map_err(|e| match e {
                PutError::Store(e) => e,
                PutError::Mismatch { sent, stored } => anyhow!(
                    "the blob stored at {key} reads back as SHA-256 {stored}, not {sent}; it was deleted"
                ),
                PutError::Changed => anyhow!("{} changed while it was uploaded", path.display()),
            })?;
        match self.store.local_path(&key) {
            Some(p) => super::unix::open_blob(&p),
            None => Ok(()),
        }
    }

    /// Whether every file `r` names is there as a blob of the right size.
    pub fn check_blobs(&self, r: &ModelRecord) -> Result<()> {
        for f in &r.files {
            match self.store.size_of(&self.blob_key(&f.sha256))? {
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
        let first = last(&idx.versions).max(last(&idx.removed)) + 1;
        for next in first..first + MAX_TRIES {
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

    /// For a `file://` registry, make `key`'s missing directories with the
    /// registry's modes (`unix::ensure_parents`).
    fn ensure_parents(&self, key: &str) -> Result<()> {
        match (&self.local_root(), self.store.local_path(key)) {
            (Some(root), Some(_)) => super::unix::ensure_parents(root, key),
            _ => Ok(()),
        }
    }

    /// The registry's directory when it is `file://`.
    fn local_root(&self) -> Option<PathBuf> {
        self.store.local_path("")
    }

    /// Create the version record `key` (create-if-absent). On `file://` the
    /// record gets its account's group and mode before it has its name
    /// (`unix::create_record`): never readable by others meanwhile.
    fn put_record(&self, key: &str, bytes: Vec<u8>, r: &ModelRecord) -> Result<bool> {
        let Some(path) = self.store.local_path(key) else {
            return self.store.put_new(key, bytes);
        };
        self.ensure_parents(key)?;
        super::unix::create_record(&path, &bytes, r.account.as_deref(), r.public)
    }

    /// What a `file://` registry's file system will not enforce for `r`
    /// (said before publishing; nothing for S3, whose bucket policy is the
    /// site's, docs/registry.md).
    pub fn enforcement_notes(&self, r: &ModelRecord) -> Vec<String> {
        let Some(root) = self.local_root() else {
            return vec![];
        };
        let mut notes: Vec<String> = super::unix::enforcement_note(r.account.as_deref(), r.public)
            .into_iter()
            .collect();
        if !r.public {
            notes.extend(super::unix::listable_blobs_note(&root));
        }
        notes
    }

    /// Point `tag` of `name` at `version` (which must exist and not be removed).
    pub fn tag(&self, name: &str, version: u32, tag: &str, user: &str) -> Result<TagMove> {
        let idx = self.index(Some(name))?;
        if !idx.versions.get(name).is_some_and(|v| v.contains(&version)) {
            return Err(invalid(format!("model `{name}` has no version {version}")));
        }
        if idx.removed.get(name).is_some_and(|r| r.contains(&version)) {
            return Err(invalid(format!(
                "{name}@{version} is removed; tag another version"
            )));
        }
        let first = idx
            .tags
            .get(name)
            .and_then(|t| t.get(tag))
            .copied()
            .unwrap_or(0)
            + 1;
        for seq in first..first + MAX_TRIES {
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
            self.ensure_parents(&key)?;
            if self.store.put_new(&key, serde_json::to_vec_pretty(&t)?)?
                && self.tag_move(name, tag, seq)?.as_ref() == Some(&t)
            {
                return Ok(t);
            }
        }
        bail!("could not record the tag `{tag}` after {MAX_TRIES} tries")
    }

    /// Mark `name@version` removed. `Ok(false)` when it was removed already.
    pub fn remove(&self, name: &str, version: u32, user: &str) -> Result<bool> {
        let r = Removal {
            format: FORMAT,
            name: name.to_string(),
            version,
            user: user.to_string(),
            time: chrono::Utc::now(),
        };
        let key = self.key(&format!("models/{name}/removed/{version:08}.json"));
        self.ensure_parents(&key)?;
        self.store.put_new(&key, serde_json::to_vec_pretty(&r)?)
    }

    /// Copy the file `f` into `dir` as `f.name`, verified: written to a
    /// temporary file beside it, hashed as it arrives, renamed into place only
    /// when its SHA-256 and size are the record's. A file already there with
    /// that content is kept.
    pub fn pull_file(&self, f: &FileEntry, dir: &Path) -> Result<PathBuf> {
        let dest = dir.join(&f.name);
        if dest.is_file()
            && crate::backup::store::sha256_file(&dest).ok().as_deref() == Some(f.sha256.as_str())
        {
            return Ok(dest);
        }
        let tmp = dir.join(format!(
            ".{}.yolo-sched-pull.{}",
            f.name,
            std::process::id()
        ));
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags_nofollow()
            .open(&tmp)
            .map_err(|e| crate::fsutil::io_error(e, format!("creating {}", tmp.display()), dir))?;
        let got = self
            .store
            .get_into(&self.blob_key(&f.sha256), &mut out, MAX_OBJECT);
        let result = match got {
            Ok(Some((sha, size))) if sha == f.sha256 && size == f.size => out
                .flush()
                .and_then(|()| out.sync_all())
                .map_err(|e| anyhow!("writing {}: {e}", tmp.display()))
                .and_then(|()| {
                    std::fs::rename(&tmp, &dest)
                        .with_context(|| format!("renaming into {}", dest.display()))
                }),
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
        };
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result.map(|()| dest)
    }

    /// The store (tests and benchmarks corrupt or delete objects through it).
    pub fn store(&self) -> &Store {
        &self.store
    }
}

trait NoFollow {
    fn custom_flags_nofollow(&mut self) -> &mut Self;
}

impl NoFollow for std::fs::OpenOptions {
    fn custom_flags_nofollow(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
            .mode(0o644)
    }
}
