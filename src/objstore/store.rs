//! The object store: `object_store`'s S3 client (or its in-memory store in
//! unit tests, or a local directory) behind a small synchronous API. A tokio
//! current-thread runtime lives inside; callers stay synchronous.
//!
//! Endpoint, region and credentials come only from the AWS conventions:
//! `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`/`AWS_SESSION_TOKEN`,
//! `AWS_REGION`/`AWS_DEFAULT_REGION`, `AWS_ENDPOINT_URL_S3`/`AWS_ENDPOINT_URL`,
//! else the profile `AWS_PROFILE` (default `default`) of
//! `~/.aws/credentials` (`AWS_SHARED_CREDENTIALS_FILE`) and `~/.aws/config`
//! (`AWS_CONFIG_FILE`). None of them is ever written anywhere.

use std::io::Read;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use futures_util::StreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path as ObjPath;
use object_store::{
    BackoffConfig, ClientOptions, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload,
    RetryConfig, WriteMultipart,
};
use sha2::{Digest, Sha256};

use crate::names::backup_url::BackupUrl;

/// Files at least this large go up in parts of this size.
pub(crate) const PART: usize = 8 << 20;
/// The largest object read back into memory (restore, manifest).
pub const MAX_OBJECT: u64 = 8 << 30;

/// One object as a listing shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectInfo {
    pub key: String,
    pub size: u64,
    /// The store's time (S3's `Last-Modified`; the file's mtime for `file://`).
    pub last_modified: chrono::DateTime<chrono::Utc>,
    /// S3's ETag as the listing gives it (the MD5 of an object put in one
    /// request); `None` for `file://`.
    pub e_tag: Option<String>,
}

impl From<object_store::ObjectMeta> for ObjectInfo {
    fn from(m: object_store::ObjectMeta) -> ObjectInfo {
        ObjectInfo {
            key: m.location.to_string(),
            size: m.size,
            last_modified: m.last_modified,
            e_tag: m.e_tag,
        }
    }
}

/// Why an upload did not happen or did not count.
#[derive(Debug)]
pub enum PutError {
    /// The file changed while it was read: try again when it is stable.
    Changed,
    /// What was read back differs from what was sent: the object is not used.
    Mismatch { sent: String, stored: String },
    /// The store failed (unreachable, refused, ...).
    Store(anyhow::Error),
}

/// Endpoint, region and credentials, from the environment and the AWS files.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Credentials {
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
    pub session_token: Option<String>,
    pub region: Option<String>,
    pub endpoint: Option<String>,
    /// Where the keys came from, for messages (never the keys themselves).
    pub source: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The keys never reach a log, even through `{:?}`.
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id.as_ref().map(|_| "…"))
            .field("region", &self.region)
            .field("endpoint", &self.endpoint)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

/// The keys of one section of an AWS INI file (`[default]`, `[profile x]`).
fn ini_section(text: &str, names: &[String]) -> Vec<(String, String)> {
    let mut inside = false;
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || line.starts_with(';') || line.is_empty() {
            continue;
        }
        if let Some(h) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let h = h.trim();
            inside = names.iter().any(|n| n == h);
            continue;
        }
        if inside {
            if let Some((k, v)) = line.split_once('=') {
                out.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
            }
        }
    }
    out
}

impl Credentials {
    /// Gather them from `env` (a lookup, `std::env::var` in real use) and the
    /// AWS files under `home`. Variables win over files.
    pub fn gather(env: &dyn Fn(&str) -> Option<String>, home: Option<&Path>) -> Credentials {
        let get = |k: &str| env(k).filter(|v| !v.is_empty());
        let profile = get("AWS_PROFILE").unwrap_or_else(|| "default".into());
        let file = |var: &str, name: &str| {
            get(var)
                .map(std::path::PathBuf::from)
                .or_else(|| home.map(|h| h.join(".aws").join(name)))
                .and_then(|p| crate::fsutil::read_regular(&p, 1 << 20).ok())
                .unwrap_or_default()
        };
        let creds_file = file("AWS_SHARED_CREDENTIALS_FILE", "credentials");
        let config_file = file("AWS_CONFIG_FILE", "config");
        let from_creds = ini_section(&creds_file, std::slice::from_ref(&profile));
        let config_names = if profile == "default" {
            vec!["default".to_string(), "profile default".to_string()]
        } else {
            vec![format!("profile {profile}")]
        };
        let from_config = ini_section(&config_file, &config_names);
        let in_files = |key: &str| {
            from_creds
                .iter()
                .chain(&from_config)
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
        };
        let mut c = Credentials::default();
        if let (Some(id), Some(secret)) = (get("AWS_ACCESS_KEY_ID"), get("AWS_SECRET_ACCESS_KEY")) {
            c.access_key_id = Some(id);
            c.secret_access_key = Some(secret);
            c.session_token = get("AWS_SESSION_TOKEN");
            c.source = "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY".into();
        } else if let (Some(id), Some(secret)) = (
            in_files("aws_access_key_id"),
            in_files("aws_secret_access_key"),
        ) {
            c.access_key_id = Some(id);
            c.secret_access_key = Some(secret);
            c.session_token = in_files("aws_session_token");
            c.source = format!("profile `{profile}` of the AWS credentials files");
        }
        c.region = get("AWS_REGION")
            .or_else(|| get("AWS_DEFAULT_REGION"))
            .or_else(|| in_files("region"));
        c.endpoint = get("AWS_ENDPOINT_URL_S3")
            .or_else(|| get("AWS_ENDPOINT_URL"))
            .or_else(|| in_files("endpoint_url"));
        c
    }

    /// From this process's environment and `$HOME`.
    pub fn from_process() -> Credentials {
        let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
        Credentials::gather(&|k| std::env::var(k).ok(), home.as_deref())
    }
}

/// A bucket behind the synchronous API.
#[derive(Clone)]
pub struct Store {
    inner: Arc<dyn ObjectStore>,
    runtime: Arc<tokio::runtime::Runtime>,
    /// What messages call the store (`s3://bucket`), never credentials.
    pub name: String,
    /// Scrubbed from messages: the endpoint stays out of logs.
    endpoint: Option<String>,
    /// The directory of a local store (`file://`), where the registry sets
    /// Unix modes and groups itself.
    root: Option<std::path::PathBuf>,
    /// The mode of a directory a local store makes, by its path below `root`.
    dir_mode: fn(&Path) -> u32,
}

fn plain_dir_mode(_: &Path) -> u32 {
    0o755
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Store({})", self.name)
    }
}

fn runtime() -> Result<Arc<tokio::runtime::Runtime>> {
    Ok(Arc::new(
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the I/O runtime of the backup client")?,
    ))
}

impl Store {
    /// The S3 bucket of `url`, with `creds`. Requests time out (connect 5 s,
    /// request 300 s) and are retried at most twice within 20 s, so a store
    /// that does not answer costs a bounded time.
    pub fn s3(url: &BackupUrl, creds: &Credentials) -> Result<Store> {
        let (Some(id), Some(secret)) = (&creds.access_key_id, &creds.secret_access_key) else {
            bail!(
                "no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or a profile in ~/.aws/credentials (AWS_PROFILE)"
            );
        };
        // object_store's HTTP client uses rustls without a crypto provider
        // of its own (ring is chosen in Cargo.toml, not aws-lc-rs): install
        // ring's for the process. An error means one is installed already.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut options = ClientOptions::new()
            .with_connect_timeout(Duration::from_secs(5))
            .with_timeout(Duration::from_secs(300));
        let mut b = AmazonS3Builder::new()
            .with_bucket_name(&url.bucket)
            .with_access_key_id(id)
            .with_secret_access_key(secret)
            .with_region(creds.region.clone().unwrap_or_else(|| "us-east-1".into()))
            .with_retry(RetryConfig {
                backoff: BackoffConfig {
                    init_backoff: Duration::from_millis(200),
                    max_backoff: Duration::from_secs(5),
                    base: 2.0,
                },
                max_retries: 2,
                retry_timeout: Duration::from_secs(20),
            });
        if let Some(t) = &creds.session_token {
            b = b.with_token(t);
        }
        if let Some(e) = &creds.endpoint {
            if e.starts_with("http://") {
                options = options.with_allow_http(true);
            }
            b = b.with_endpoint(e.trim_end_matches('/'));
        }
        let s3 = b
            .with_client_options(options)
            .build()
            .map_err(|e| anyhow!("setting up the S3 client for s3://{}: {e}", url.bucket))?;
        Ok(Store {
            inner: Arc::new(s3),
            runtime: runtime()?,
            name: format!("s3://{}", url.bucket),
            endpoint: creds
                .endpoint
                .as_ref()
                .map(|e| e.trim_end_matches('/').to_string()),
            root: None,
            dir_mode: plain_dir_mode,
        })
    }

    /// An in-memory store (unit tests, benchmarks).
    pub fn memory() -> Result<Store> {
        Ok(Store {
            inner: Arc::new(InMemory::new()),
            runtime: runtime()?,
            name: "memory".into(),
            endpoint: None,
            root: None,
            dir_mode: plain_dir_mode,
        })
    }

    /// A directory of the local (or shared) file system as a store
    /// (`file://`), directories it makes mode 0755 (less the umask).
    pub fn local(dir: &Path) -> Result<Store> {
        Store::local_shared(dir, plain_dir_mode)
    }

    /// A directory of a shared file system as a store (`file://`) where
    /// anyone may plant entries: every object is read, written, listed and
    /// deleted through `fsutil::within`, each directory on the way opened
    /// without following a link (a planted link is refused, or skipped by a
    /// listing, never followed); an object is written to a private staged
    /// file beside its name and renamed (or, for `put_new`, hard-linked,
    /// which fails when the key exists) into place, so a reader never sees
    /// half an object. Directories it makes get `dir_mode` of their path
    /// below `dir`.
    pub fn local_shared(dir: &Path, dir_mode: fn(&Path) -> u32) -> Result<Store> {
        // Kept as `inner` for the type's sake: every operation of a store
        // with a `root` goes through `fsutil::within` instead.
        let fs = LocalFileSystem::new_with_prefix(dir)
            .map_err(|e| anyhow!("opening {} as a store: {e}", dir.display()))?;
        Ok(Store {
            inner: Arc::new(fs),
            runtime: runtime()?,
            name: format!("file://{}", dir.display()),
            endpoint: None,
            root: Some(dir.to_path_buf()),
            dir_mode,
        })
    }

    /// Put `key` in a local store under `root` (`fsutil::within::place`),
    /// mode 0644.
    fn put_local(
        &self,
        root: &Path,
        key: &str,
        how: crate::fsutil::within::Place,
        fill: &mut dyn FnMut(&mut std::fs::File) -> Result<()>,
    ) -> Result<bool> {
        use std::os::unix::fs::PermissionsExt;
        Self::path(key)?;
        crate::fsutil::within::place(root, Path::new(key), &self.dir_mode, how, &mut |f| {
            fill(f)?;
            f.set_permissions(std::fs::Permissions::from_mode(0o644))?;
            f.sync_all()
                .map_err(|e| crate::fsutil::io_error(e, format!("writing {key}"), root))
        })
    }

    /// The size and time of `key` in a local store, no link followed.
    fn stat_local(&self, root: &Path, key: &str) -> Result<Option<ObjectInfo>> {
        Self::path(key)?;
        Ok(crate::fsutil::within::stat(root, Path::new(key))
            .map_err(|e| self.local_error(e, key))?
            .map(|f| ObjectInfo {
                key: key.to_string(),
                size: f.size,
                last_modified: f.modified,
                e_tag: None,
            }))
    }

    /// A local store's error: a permission refusal marked `Refused`, the
    /// key escaped.
    fn local_error(&self, e: anyhow::Error, key: &str) -> anyhow::Error {
        let key = crate::text::shown(key, crate::text::PATH_CHARS);
        if crate::fsutil::within::os_code(&e) == Some(nix::libc::EACCES) {
            anyhow::Error::new(Refused(format!(
                "{}: permission denied: {key}: {e:#}",
                self.name
            )))
        } else {
            e.context(format!("{}: {key}", self.name))
        }
    }

    /// Read a local store's object in chunks into `sink`, at most `limit`
    /// bytes: its size, or `None` when it is not there. The file is opened
    /// without following a link and without blocking on a FIFO, and must be
    /// a regular file: anyone may create files in a shared registry's
    /// directories, and what they put where an object is expected must
    /// neither be followed nor hang the reader.
    fn read_local(
        &self,
        key: &str,
        limit: u64,
        sink: &mut dyn FnMut(&[u8]) -> Result<()>,
    ) -> Result<Option<u64>> {
        use std::io::Read;
        let root = self
            .root
            .as_ref()
            .context("read_local is for local stores")?;
        Self::path(key)?;
        let f = match crate::fsutil::within::open_read(root, Path::new(key)) {
            Ok(f) => f,
            Err(e) if crate::fsutil::within::not_found(&e) => return Ok(None),
            Err(e) if crate::fsutil::within::is_refused(&e) => bail!(
                "{}: {} is not a regular file (a symbolic link, or one on its way); it is not read",
                self.name,
                crate::text::shown(key, crate::text::PATH_CHARS)
            ),
            Err(e) => return Err(self.local_error(e, key)),
        };
        let mut f = f;
        let meta = f
            .metadata()
            .with_context(|| format!("{}: reading {key}", self.name))?;
        if !meta.is_file() {
            bail!("{}: {key} is not a regular file; it is not read", self.name);
        }
        if meta.len() > limit {
            bail!("{key} is {} bytes; at most {limit} are read", meta.len());
        }
        let mut buf = vec![0u8; 1 << 20];
        let mut total = 0u64;
        loop {
            let n = f
                .read(&mut buf)
                .with_context(|| format!("{}: reading {key}", self.name))?;
            if n == 0 {
                return Ok(Some(total));
            }
            total += n as u64;
            if total > limit {
                bail!("{key} grew past {limit} bytes while being read");
            }
            sink(&buf[..n])?;
        }
    }

    /// Create `key` with `bytes` unless an object is there already
    /// (`PutMode::Create`: S3's `If-None-Match: *`, the local store's link):
    /// `Ok(true)` when this call created it, `Ok(false)` when it existed.
    pub fn put_new(&self, key: &str, bytes: Vec<u8>) -> Result<bool> {
        if let Some(root) = &self.root {
            return self.put_local(root, key, crate::fsutil::within::Place::New, &mut |f| {
                std::io::Write::write_all(f, &bytes).map_err(Into::into)
            });
        }
        let p = Self::path(key)?;
        let opts = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        match self
            .runtime
            .block_on(self.inner.put_opts(&p, PutPayload::from(bytes), opts))
        {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. })
            | Err(object_store::Error::Precondition { .. }) => Ok(false),
            Err(e) => Err(self.error(e)),
        }
    }

    /// The size of the object at `key`; `None` when there is none.
    pub fn size_of(&self, key: &str) -> Result<Option<u64>> {
        if let Some(root) = &self.root {
            return Ok(self.stat_local(root, key)?.map(|o| o.size));
        }
        let p = Self::path(key)?;
        match self.runtime.block_on(self.inner.head(&p)) {
            Ok(meta) => Ok(Some(meta.size)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.error(e)),
        }
    }

    /// Stream the object at `key` into `to`, hashing it: its SHA-256 and
    /// size, or `None` when there is no such object. At most `limit` bytes.
    pub fn get_into(
        &self,
        key: &str,
        to: &mut dyn std::io::Write,
        limit: u64,
    ) -> Result<Option<(String, u64)>> {
        let mut h = Sha256::new();
        let got = self.read_chunks(key, limit, &mut |chunk| {
            h.update(chunk);
            to.write_all(chunk)
                .with_context(|| format!("writing {key} out"))
        })?;
        Ok(got.map(|size| (hex(&h.finalize()), size)))
    }

    /// Read the object at `key` in chunks into `sink`, at most `limit` bytes:
    /// its size, or `None` when there is none. The one read of an object
    /// (`read_local` for a local store), which `get_into`, `get_bytes` and
    /// `sha256_of` consume each their own way.
    fn read_chunks(
        &self,
        key: &str,
        limit: u64,
        sink: &mut dyn FnMut(&[u8]) -> Result<()>,
    ) -> Result<Option<u64>> {
        if self.root.is_some() {
            return self.read_local(key, limit, sink);
        }
        self.runtime.block_on(async {
            let Some(got) = self.get_within(key, limit).await? else {
                return Ok(None);
            };
            let mut total = 0u64;
            let mut stream = got.into_stream();
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|e| self.error(e))?;
                total += chunk.len() as u64;
                if total > limit {
                    bail!("{key} grew past {limit} bytes while being read");
                }
                sink(&chunk)?;
            }
            Ok(Some(total))
        })
    }

    /// The object store's answer for `key`, refused when it says the object
    /// is over `limit` bytes; `None` when there is none. Both remote reads
    /// (`read_chunks`, `get_many`) start here and still count what arrives.
    async fn get_within(&self, key: &str, limit: u64) -> Result<Option<object_store::GetResult>> {
        let got = match self.inner.get(&Self::path(key)?).await {
            Ok(g) => g,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(self.error(e)),
        };
        if got.meta.size > limit {
            bail!("{key} is {} bytes; at most {limit} are read", got.meta.size);
        }
        Ok(Some(got))
    }

    fn path(key: &str) -> Result<ObjPath> {
        ObjPath::parse(key).map_err(|e| anyhow!("object key {key:?}: {e}"))
    }

    /// Write small bytes (the manifest) to `key`.
    pub fn put_bytes(&self, key: &str, bytes: Vec<u8>) -> Result<()> {
        if let Some(root) = &self.root {
            return self
                .put_local(root, key, crate::fsutil::within::Place::Replace, &mut |f| {
                    std::io::Write::write_all(f, &bytes).map_err(Into::into)
                })
                .map(|_| ());
        }
        let p = Self::path(key)?;
        self.runtime
            .block_on(self.inner.put(&p, PutPayload::from(bytes)))
            .map_err(|e| self.error(e))?;
        Ok(())
    }

    /// The object at `key`, at most `limit` bytes; `None` when there is none.
    pub fn get_bytes(&self, key: &str, limit: u64) -> Result<Option<Vec<u8>>> {
        let mut out = Vec::new();
        let got = self.read_chunks(key, limit, &mut |chunk| {
            out.extend_from_slice(chunk);
            Ok(())
        })?;
        Ok(got.map(|_| out))
    }

    /// The objects at `keys` (at most `limit` bytes each), in order, with up
    /// to `concurrency` requests in flight: what `get_bytes` gives for each.
    pub fn get_many(
        &self,
        keys: &[String],
        limit: u64,
        concurrency: usize,
    ) -> Vec<Result<Option<Vec<u8>>>> {
        if self.root.is_some() {
            return keys.iter().map(|k| self.get_bytes(k, limit)).collect();
        }
        let one = |key: String| async move {
            let Some(got) = self.get_within(&key, limit).await? else {
                return Ok(None);
            };
            let bytes = got.bytes().await.map_err(|e| self.error(e))?;
            if bytes.len() as u64 > limit {
                bail!("{key} grew past {limit} bytes while being read");
            }
            Ok(Some(bytes.to_vec()))
        };
        self.runtime.block_on(
            futures_util::stream::iter(keys.iter().cloned().map(one))
                .buffered(concurrency.max(1))
                .collect(),
        )
    }

    /// SHA-256 of the object at `key`, streamed.
    pub fn sha256_of(&self, key: &str) -> Result<String> {
        let mut h = Sha256::new();
        self.read_chunks(key, u64::MAX, &mut |chunk| {
            h.update(chunk);
            Ok(())
        })?
        .ok_or_else(|| anyhow!("{}: {key} is not there", self.name))?;
        Ok(hex(&h.finalize()))
    }

    /// The keys of every object under `prefix` (a key prefix ending in `/`,
    /// or empty for the whole bucket), sorted.
    pub fn list(&self, prefix: &str) -> Result<Vec<String>> {
        Ok(self.list_meta(prefix)?.into_iter().map(|o| o.key).collect())
    }

    /// Every object under `prefix` (as `list`) with its size and the store's
    /// last-modified time, sorted by key.
    pub fn list_meta(&self, prefix: &str) -> Result<Vec<ObjectInfo>> {
        Ok(self.list_checked(prefix)?.0)
    }

    /// `list_meta`, and what a local store's listing did not go into: a link
    /// (never followed), a name that is not UTF-8, a directory that cannot be
    /// read (`fsutil::within::walk`), each with its key (raw: escape it to
    /// show it). An S3 listing skips nothing.
    pub fn list_checked(
        &self,
        prefix: &str,
    ) -> Result<(Vec<ObjectInfo>, Vec<crate::fsutil::within::Skipped>)> {
        let trimmed = prefix.trim_end_matches('/');
        if let Some(root) = &self.root {
            let walk = crate::fsutil::within::walk(root, Path::new(trimmed), 8)
                .map_err(|e| self.local_error(e, trimmed))?;
            let key = |rel: &str| match (trimmed.is_empty(), rel.is_empty()) {
                (true, _) => rel.to_string(),
                (false, true) => trimmed.to_string(),
                (false, false) => format!("{trimmed}/{rel}"),
            };
            let files = walk
                .files
                .into_iter()
                .map(|f| ObjectInfo {
                    key: key(&f.rel),
                    size: f.size,
                    last_modified: f.modified,
                    e_tag: None,
                })
                .collect();
            let skipped = walk
                .skipped
                .into_iter()
                .map(|mut s| {
                    s.rel = key(&s.rel);
                    s
                })
                .collect();
            return Ok((files, skipped));
        }
        let p = (!trimmed.is_empty())
            .then(|| Self::path(trimmed))
            .transpose()?;
        self.runtime.block_on(async {
            let mut stream = self.inner.list(p.as_ref());
            let mut out = Vec::new();
            while let Some(meta) = stream.next().await {
                out.push(ObjectInfo::from(meta.map_err(|e| self.error(e))?));
            }
            out.sort_by(|a, b| a.key.cmp(&b.key));
            Ok((out, vec![]))
        })
    }

    /// The size and last-modified time of the object at `key`; `None` when
    /// there is none.
    pub fn head(&self, key: &str) -> Result<Option<ObjectInfo>> {
        if let Some(root) = &self.root {
            return self.stat_local(root, key);
        }
        let p = Self::path(key)?;
        match self.runtime.block_on(self.inner.head(&p)) {
            Ok(meta) => Ok(Some(ObjectInfo::from(meta))),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.error(e)),
        }
    }

    /// Delete `key` (nothing there is fine); a local store's file is
    /// removed without following a link at any step (a link on the way is
    /// refused: nothing is deleted through it).
    pub fn delete(&self, key: &str) -> Result<()> {
        if let Some(root) = &self.root {
            Self::path(key)?;
            return crate::fsutil::within::remove(root, Path::new(key))
                .map_err(|e| self.local_error(e, key));
        }
        let p = Self::path(key)?;
        match self.runtime.block_on(self.inner.delete(&p)) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.error(e)),
        }
    }

    /// Upload the local file `snapshot` (`size` bytes, SHA-256 `sent`) to
    /// `key`, then read it back and hash it; a mismatch deletes the object.
    pub(crate) fn put_snapshot(
        &self,
        snapshot: &Path,
        size: u64,
        sent: &str,
        key: &str,
    ) -> Result<(), PutError> {
        let path = Self::path(key).map_err(PutError::Store)?;
        let failed = |e| PutError::Store(self.error(e));
        if let Some(root) = &self.root {
            let mut file = std::fs::File::open(snapshot)
                .with_context(|| format!("opening {}", snapshot.display()))
                .map_err(PutError::Store)?;
            self.put_local(root, key, crate::fsutil::within::Place::Replace, &mut |f| {
                std::io::copy(&mut file, f)
                    .map(|_| ())
                    .map_err(|e| crate::fsutil::io_error(e, format!("writing {key}"), root))
            })
            .map_err(PutError::Store)?;
        } else {
            self.runtime.block_on(async {
                let mut file = std::fs::File::open(snapshot)
                    .with_context(|| format!("opening {}", snapshot.display()))
                    .map_err(PutError::Store)?;
                if size < PART as u64 {
                    let mut bytes = Vec::with_capacity(size as usize);
                    file.read_to_end(&mut bytes)
                        .map_err(|e| PutError::Store(e.into()))?;
                    self.inner
                        .put(&path, PutPayload::from(bytes))
                        .await
                        .map_err(failed)?;
                } else {
                    let upload = self.inner.put_multipart(&path).await.map_err(failed)?;
                    let mut writer = WriteMultipart::new_with_chunk_size(upload, PART);
                    let mut buf = vec![0u8; PART];
                    loop {
                        let n = file.read(&mut buf).map_err(|e| PutError::Store(e.into()))?;
                        if n == 0 {
                            break;
                        }
                        if let Err(e) = writer.wait_for_capacity(2).await {
                            return Err(failed(e));
                        }
                        writer.write(&buf[..n]);
                    }
                    writer.finish().await.map_err(failed)?;
                }
                Ok(())
            })?;
        }
        let stored = self.sha256_of(key).map_err(PutError::Store)?;
        if stored != sent {
            let _ = self.delete(key);
            return Err(PutError::Mismatch {
                sent: sent.to_string(),
                stored,
            });
        }
        Ok(())
    }
}

impl Store {
    /// An object-store error in words, marked as refused credentials where the
    /// store said so (so preflight can tell a typo in a key from a network
    /// fault), with the endpoint replaced by the variable's name.
    fn error(&self, e: object_store::Error) -> anyhow::Error {
        // Keys from a listing may hold control characters: escaped.
        let scrub = |text: String| {
            let text = match &self.endpoint {
                Some(ep) if !ep.is_empty() => {
                    let host = ep.split_once("://").map_or(ep.as_str(), |(_, h)| h);
                    text.replace(ep.as_str(), "$AWS_ENDPOINT_URL")
                        .replace(host, "$AWS_ENDPOINT_URL")
                }
                _ => text,
            };
            crate::text::shown(&text, 4000)
        };
        match e {
            object_store::Error::PermissionDenied { .. }
            | object_store::Error::Unauthenticated { .. } => anyhow::Error::new(Refused(scrub(
                format!("{} refused the request: {e}", self.name),
            ))),
            // The local store's "unable to open" carries the file system's
            // refusal (a record of another account's group) as its source.
            other if denied_by_os(&other) => anyhow::Error::new(Refused(scrub(format!(
                "{}: permission denied: {other}",
                self.name
            )))),
            other => anyhow!(scrub(format!("{}: {other}", self.name))),
        }
    }
}

/// Whether the error's causes hold an I/O permission refusal.
fn denied_by_os(e: &object_store::Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(c) = cause {
        if c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::PermissionDenied)
        {
            return true;
        }
        cause = c.source();
    }
    false
}

/// The store refused the credentials or the request (HTTP 401/403).
#[derive(Debug)]
pub struct Refused(pub String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

/// Lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// SHA-256 of a local file, streamed (the registry's pull checks a file
/// already there with it; tests check uploads against it).
pub fn sha256_file(path: &Path) -> Result<String> {
    let mut f = crate::fsutil::open_regular(path, crate::fsutil::Links::Follow)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f
            .read(&mut buf)
            .with_context(|| format!("reading {}", path.display()))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex(&h.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An `https://` endpoint gets a real TLS handshake (ring's provider,
    /// installed by `Store::s3`): the first bytes the server sees are a TLS
    /// handshake record, and a server that then hangs up is an error, not a
    /// panic for a missing crypto provider.
    #[test]
    fn an_https_endpoint_speaks_tls() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut first = [0u8; 3];
            conn.read_exact(&mut first).unwrap();
            first
        });
        let url = BackupUrl::parse("s3://bucket/prefix").unwrap();
        let creds = Credentials {
            access_key_id: Some("k".into()),
            secret_access_key: Some("s".into()),
            endpoint: Some(format!("https://127.0.0.1:{port}")),
            ..Credentials::default()
        };
        let store = Store::s3(&url, &creds).unwrap();
        assert!(store.size_of("x").is_err());
        let first = server.join().unwrap();
        // ContentType handshake (22), then TLS's legacy record version 3.x.
        assert_eq!(first[..2], [0x16, 0x03], "{first:?}");
    }

    #[test]
    fn credentials_prefer_variables_then_the_profile() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(".aws")).unwrap();
        std::fs::write(
            dir.path().join(".aws/credentials"),
            "[default]\naws_access_key_id = FILEKEY\naws_secret_access_key = FILESECRET\n[team]\naws_access_key_id=TEAMKEY\naws_secret_access_key=TEAMSECRET\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join(".aws/config"),
            "[default]\nregion = eu-west-1\n[profile team]\nregion = us-west-2\nendpoint_url = http://127.0.0.1:8333\n",
        )
        .unwrap();
        let none = |_: &str| None;
        let c = Credentials::gather(&none, Some(dir.path()));
        assert_eq!(c.access_key_id.as_deref(), Some("FILEKEY"));
        assert_eq!(c.region.as_deref(), Some("eu-west-1"));
        assert_eq!(c.endpoint, None);
        let team = |k: &str| (k == "AWS_PROFILE").then(|| "team".to_string());
        let c = Credentials::gather(&team, Some(dir.path()));
        assert_eq!(c.access_key_id.as_deref(), Some("TEAMKEY"));
        assert_eq!(c.endpoint.as_deref(), Some("http://127.0.0.1:8333"));
        let vars = |k: &str| match k {
            "AWS_ACCESS_KEY_ID" => Some("ENVKEY".to_string()),
            "AWS_SECRET_ACCESS_KEY" => Some("ENVSECRET".to_string()),
            "AWS_ENDPOINT_URL" => Some("http://h:1".to_string()),
            _ => None,
        };
        let c = Credentials::gather(&vars, Some(dir.path()));
        assert_eq!(c.access_key_id.as_deref(), Some("ENVKEY"));
        assert_eq!(c.endpoint.as_deref(), Some("http://h:1"));
        let shown = format!("{c:?}");
        assert!(
            !shown.contains("ENVKEY") && !shown.contains("ENVSECRET"),
            "{shown}"
        );
    }
}
