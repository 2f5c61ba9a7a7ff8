//! A `file://` registry's Unix permissions, so the shared file system
//! enforces what `access` decides (docs/registry.md, "On a shared file
//! system"):
//!
//! - directories yolo-sched creates are `1777` (anyone publishes, nobody
//!   deletes or replaces another's record: the sticky bit), except
//!   `blobs/sha256`, `1733`: a blob is found only through a record naming it;
//! - a private version's record is `0640`, group the Unix group named as its
//!   Slurm account, given before the record has its name (`create_record`),
//!   so it is never readable by others, not even for a moment; a public one
//!   (and tag and removal records) is `0644`;
//! - blobs are `0644`: their names are SHA-256s nobody can list;
//! - every write, listing and deletion opens each directory on the way
//!   without following a link (`Store::local_shared`, `create_record`):
//!   anyone may plant a link in a `1777` directory.
//!
//! `UnixDir` is the registry's `Backend` on such a directory.
//!
//! Effects on the local file system only; each function says what it did not
//! manage to do rather than failing a publication that is otherwise sound.

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::backend::{Backend, LIST_CONCURRENCY};
use super::record::{ModelRecord, MAX_RECORD};
use crate::objstore::Store;

/// The mode of the directory `rel` (below the registry) when yolo-sched
/// makes it (set after creation: the umask would lock the next publisher
/// out). `Store::local_shared` makes them so.
pub fn dir_mode(rel: &Path) -> u32 {
    if rel == Path::new("blobs/sha256") {
        0o1733
    } else {
        0o1777
    }
}

/// Whether a registry directory of `mode` lets every user publish while
/// nobody replaces another's record: world-writable and sticky, as
/// `dir_mode` makes the registry's own directories (`doctor` asks).
pub fn anyone_publishes(mode: u32) -> bool {
    mode & 0o1002 == 0o1002
}

/// The Unix group a private version of `account` gets: the group named as
/// the account, when it exists and the publisher may give files to it (root,
/// or a member). `Err` says why not.
pub fn group_for(account: Option<&str>) -> Result<nix::unistd::Gid, String> {
    let Some(a) = account else {
        return Err("it has no account".into());
    };
    let g = match nix::unistd::Group::from_name(a) {
        Ok(Some(g)) => g,
        _ => return Err(format!("there is no Unix group `{a}` here")),
    };
    let mine = nix::unistd::geteuid().is_root()
        || nix::unistd::getegid() == g.gid
        || nix::unistd::getgroups().is_ok_and(|gs| gs.contains(&g.gid));
    if mine {
        Ok(g.gid)
    } else {
        Err(format!("you are not in the Unix group `{a}`"))
    }
}

/// Why the file system will not keep a version of `account` to the
/// account (`None`: it will, or the version is public).
pub fn enforcement_note(account: Option<&str>, public: bool) -> Option<String> {
    if public {
        return None;
    }
    group_for(account).err().map(|why| {
        format!(
            "its record will be readable by every user of the registry's file system ({why}); yolo-sched's own check keeps it to the account, as on S3 (docs/registry.md)"
        )
    })
}

/// Create the record `root/key` with `bytes` unless a file is there already
/// (`Ok(false)`), every directory on the way opened without following a
/// link (`fsutil::within::place`; missing ones made with `dir_mode`):
/// `PutMode::Create` of the local store, done here so the
/// record has its group and mode before anyone can open it. The bytes go to
/// a private temporary file beside it (mode 0600, then the account's group
/// and `0640`, or `0644` when `public` or the account has no group of its
/// own here: `group_for`), synced, then hard-linked to the record's name,
/// which fails when the name exists. A publisher killed at any point leaves
/// at worst a temporary file no listing reads (not `NNNNNNNN.json`).
pub fn create_record(
    root: &Path,
    key: &str,
    bytes: &[u8],
    account: Option<&str>,
    public: bool,
) -> Result<bool> {
    use std::io::Write;
    let shown = root.join(key);
    crate::fsutil::within::place(
        root,
        Path::new(key),
        &dir_mode,
        crate::fsutil::within::Place::New,
        &mut |f| {
            let mode = match (public, group_for(account)) {
                (false, Ok(gid)) => {
                    nix::unistd::fchown(&*f, None, Some(gid)).with_context(|| {
                        format!("giving {} its account's group", shown.display())
                    })?;
                    0o640
                }
                _ => 0o644,
            };
            f.write_all(bytes)
                .and_then(|()| f.set_permissions(std::fs::Permissions::from_mode(mode)))
                .and_then(|()| f.sync_all())
                .with_context(|| format!("writing {}", shown.display()))
        },
    )
}

/// A note when others can list `blobs/sha256` (an administrator made it so):
/// then a private version's files are readable by anyone who lists them.
pub fn listable_blobs_note(root: &Path) -> Option<String> {
    let dir = root.join("blobs/sha256");
    let mode = std::fs::metadata(&dir).ok()?.mode();
    (mode & 0o004 != 0).then(|| {
        format!(
            "{} is listable by every user, so a private version's files can be read by anyone who lists it; `chmod 1733` it (docs/registry.md)",
            dir.display()
        )
    })
}

/// The login name owning the file `root/key` (a `file://` record's real
/// writer), no link followed on the way; `None` when it cannot be read.
pub fn owner_of(root: &Path, key: &str) -> Option<String> {
    let uid = crate::fsutil::within::stat(root, Path::new(key)).ok()??.uid;
    Some(
        nix::unistd::User::from_uid(uid.into())
            .ok()
            .flatten()
            .map_or_else(|| uid.to_string(), |u| u.name),
    )
}

/// A registry in a directory of a shared file system (`file://`), where
/// anyone may plant entries: its store is `Store::local_shared` (every read,
/// write, listing and deletion through `fsutil::within`, no link followed,
/// directories made with `dir_mode`); a record's writer is its file's owner
/// (`owner_of`); a version record gets its account's group and mode before
/// it has its name (`create_record`).
#[derive(Debug)]
pub(crate) struct UnixDir {
    store: Store,
    root: PathBuf,
}

impl UnixDir {
    /// The registry in `dir`.
    pub(crate) fn open(dir: &Path) -> Result<UnixDir> {
        Ok(UnixDir {
            store: Store::local_shared(dir, dir_mode)?,
            root: dir.to_path_buf(),
        })
    }
}

impl Backend for UnixDir {
    fn store(&self) -> &Store {
        &self.store
    }

    /// The owner of the file `key`, who must be `claimed` or root: a record
    /// anyone could write in a shared directory must not speak for another
    /// user.
    fn writer(&self, key: &str, claimed: &str, did: &str) -> Result<String, String> {
        let owner = owner_of(&self.root, key)
            .ok_or_else(|| "the owner of its file cannot be read".to_string())?;
        if owner == claimed || owner == "root" {
            Ok(owner)
        } else {
            Err(format!(
                "says {} {did}, but its file belongs to {}",
                crate::text::echo(claimed),
                crate::text::echo(&owner)
            ))
        }
    }

    /// `create_record`: never readable by others meanwhile.
    fn put_record(&self, key: &str, bytes: Vec<u8>, r: &ModelRecord) -> Result<bool> {
        create_record(&self.root, key, &bytes, r.account.as_deref(), r.public)
    }

    /// Each at a time, through `fsutil::within` (no listing index).
    fn read_records(
        &self,
        keys: &[String],
        _etags: &BTreeMap<String, String>,
        _scope: &str,
    ) -> Vec<Result<Option<Vec<u8>>>> {
        self.store.get_many(keys, MAX_RECORD, LIST_CONCURRENCY)
    }

    /// A private version kept to its account only by yolo-sched's own check
    /// (no Unix group for it: `enforcement_note`), and blobs others can list
    /// (`listable_blobs_note`).
    fn enforcement_notes(&self, r: &ModelRecord) -> Vec<String> {
        let mut notes: Vec<String> = enforcement_note(r.account.as_deref(), r.public)
            .into_iter()
            .collect();
        if !r.public {
            notes.extend(listable_blobs_note(&self.root));
        }
        notes
    }
}
