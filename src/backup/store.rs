//! What a backup puts in the object store (`objstore::store::Store`): a
//! local file's `Stamp` (what "unchanged" means) and `put_file`, the
//! verified upload of a file that must not change while it is read.

use std::io::Read;
use std::path::Path;
use std::time::Instant;

use anyhow::anyhow;
use sha2::{Digest, Sha256};

use crate::objstore::store::{hex, PutError, Store};

/// A stat of a local file: what "unchanged" means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Stamp {
    pub size: u64,
    /// Modification time, nanoseconds since the epoch.
    pub mtime_ns: i64,
}

impl Stamp {
    pub fn of(path: &Path) -> Option<Stamp> {
        let meta = std::fs::metadata(path).ok()?;
        if !meta.is_file() {
            return None;
        }
        use std::os::unix::fs::MetadataExt;
        Some(Stamp {
            size: meta.len(),
            mtime_ns: meta.mtime() * 1_000_000_000 + meta.mtime_nsec(),
        })
    }

    /// The stamp of `root/rel`, found without following a link below `root`
    /// (a link, a FIFO or a device is no file to back up).
    pub fn within(root: &Path, rel: &Path) -> Option<Stamp> {
        let meta = crate::fsutil::within::open_read(root, rel)
            .ok()?
            .metadata()
            .ok()?;
        use std::os::unix::fs::MetadataExt;
        meta.is_file().then(|| Stamp {
            size: meta.len(),
            mtime_ns: meta.mtime() * 1_000_000_000 + meta.mtime_nsec(),
        })
    }

    /// The modification time in seconds since the epoch.
    pub fn mtime_secs(&self) -> f64 {
        self.mtime_ns as f64 / 1e9
    }
}

/// What one upload did.
#[derive(Debug, Clone, PartialEq)]
pub struct Uploaded {
    pub sha256: String,
    pub size: u64,
    pub seconds: f64,
    /// The object key it is stored at (relative to the bucket).
    pub key: String,
}

/// Upload the file `root/rel` to `store` verified, to the key `key_for` gives its
/// SHA-256 (a key of its own for every content: an upload never
/// overwrites an object a manifest names). The file is first copied to
/// `root/snapshot` (local, fast) and hashed; if it no longer has the
/// `stamp` it had before, `Changed` (a torn copy never replaces a good
/// one). When its SHA-256 is `current`'s (the version the manifest names
/// already), nothing is sent and that key is kept. Else the snapshot goes
/// to its key and is read back and hashed again (else `Mismatch`, and the
/// object is deleted). Files are opened without following links
/// (`fsutil::within`). The snapshot is removed.
pub fn put_file(
    store: &Store,
    root: &Path,
    rel: &Path,
    stamp: Stamp,
    snapshot: &Path,
    current: Option<(&str, &str)>,
    key_for: &dyn Fn(&str) -> String,
) -> Result<Uploaded, PutError> {
    let started = Instant::now();
    let sent = snapshot_of(root, rel, stamp, snapshot)?;
    let result = match current {
        Some((sha, key)) if sha == sent => Ok(key.to_string()),
        _ => {
            let key = key_for(&sent);
            store
                .put_snapshot(&root.join(snapshot), stamp.size, &sent, &key)
                .map(|()| key)
        }
    };
    let _ = crate::fsutil::within::remove(root, snapshot);
    Ok(Uploaded {
        sha256: sent,
        size: stamp.size,
        seconds: started.elapsed().as_secs_f64(),
        key: result?,
    })
}

/// Copy `root/rel` to `root/snapshot`, hashing it; `Changed` when the file
/// is not the `stamp` it was, before or after (it was being written). Neither
/// is opened through a link.
fn snapshot_of(root: &Path, rel: &Path, stamp: Stamp, snapshot: &Path) -> Result<String, PutError> {
    let io = |e: std::io::Error, what: &Path| {
        PutError::Store(anyhow!("{}: {e}", root.join(what).display()))
    };
    if Stamp::within(root, rel) != Some(stamp) {
        return Err(PutError::Changed);
    }
    let mut from = crate::fsutil::within::open_read(root, rel).map_err(PutError::Store)?;
    let mut to = crate::fsutil::within::create(root, snapshot, 0o600).map_err(PutError::Store)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = from.read(&mut buf).map_err(|e| io(e, rel))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        std::io::Write::write_all(&mut to, &buf[..n]).map_err(|e| io(e, snapshot))?;
        total += n as u64;
    }
    if Stamp::within(root, rel) != Some(stamp) || total != stamp.size {
        let _ = crate::fsutil::within::remove(root, snapshot);
        return Err(PutError::Changed);
    }
    Ok(hex(&hasher.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objstore::store::{sha256_file, MAX_OBJECT, PART};

    #[test]
    fn verified_upload_of_small_and_multipart_files() {
        let store = Store::memory().unwrap();
        let dir = tempfile::tempdir().unwrap();
        for size in [10usize, PART * 2 + 123] {
            let p = dir.path().join("f");
            let data: Vec<u8> = (0..size).map(|i| (i * 7 % 251) as u8).collect();
            std::fs::write(&p, &data).unwrap();
            let stamp = Stamp::of(&p).unwrap();
            let key_for = |sha: &str| format!("x/versions/f/{sha}");
            let up = put_file(
                &store,
                dir.path(),
                Path::new("f"),
                stamp,
                Path::new("snap"),
                None,
                &key_for,
            )
            .unwrap();
            assert!(!dir.path().join("snap").exists());
            assert_eq!(up.sha256, sha256_file(&p).unwrap());
            assert_eq!(up.size, size as u64);
            assert_eq!(up.key, format!("x/versions/f/{}", up.sha256));
            assert_eq!(store.get_bytes(&up.key, MAX_OBJECT).unwrap().unwrap(), data);
            // The same content again: nothing sent, the same key.
            store.delete(&up.key).unwrap();
            let again = put_file(
                &store,
                dir.path(),
                Path::new("f"),
                stamp,
                Path::new("snap"),
                Some((&up.sha256, &up.key)),
                &key_for,
            )
            .unwrap();
            assert_eq!(again.key, up.key);
            assert_eq!(store.get_bytes(&up.key, 10).unwrap(), None);
        }
    }

    #[test]
    fn a_file_that_changed_since_its_stamp_is_not_uploaded() {
        let store = Store::memory().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"one").unwrap();
        let stamp = Stamp::of(&p).unwrap();
        std::fs::write(&p, b"one two").unwrap();
        assert!(matches!(
            put_file(
                &store,
                dir.path(),
                Path::new("f"),
                stamp,
                Path::new("snap"),
                None,
                &|_| "k".to_string()
            ),
            Err(PutError::Changed)
        ));
        assert_eq!(store.get_bytes("k", 100).unwrap(), None);
    }
}
