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
//! - blobs are `0644`: their names are SHA-256s nobody can list.
//!
//! Effects on the local file system only; each function says what it did not
//! manage to do rather than failing a publication that is otherwise sound.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// The mode of the directory `rel` (below the registry) when yolo-sched makes it.
fn dir_mode(rel: &Path) -> u32 {
    if rel == Path::new("blobs/sha256") {
        0o1733
    } else {
        0o1777
    }
}

/// Make the missing directories between `root` and the file `key` with the
/// registry's modes (object_store would make them with the umask's, which
/// would lock the next publisher out).
pub fn ensure_parents(root: &Path, key: &str) -> Result<()> {
    let Some(parent) = Path::new(key).parent() else {
        return Ok(());
    };
    let mut rel = PathBuf::new();
    for part in parent.components() {
        rel.push(part);
        let dir = root.join(&rel);
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {
                // Set after creation: the umask does not apply to chmod.
                std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(dir_mode(&rel)))
                    .with_context(|| format!("setting the mode of {}", dir.display()))?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                return Err(crate::fsutil::io_error(
                    e,
                    format!("creating {}", dir.display()),
                    root,
                ))
            }
        }
    }
    Ok(())
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

/// Create the record `path` with `bytes` unless a file is there already
/// (`Ok(false)`): `PutMode::Create` of the local store, done here so the
/// record has its group and mode before anyone can open it. The bytes go to
/// a private temporary file beside it (mode 0600, then the account's group
/// and `0640`, or `0644` when `public` or the account has no group of its
/// own here: `group_for`), synced, then hard-linked to the record's name,
/// which fails when the name exists. A publisher killed at any point leaves
/// at worst a temporary file no listing reads (not `NNNNNNNN.json`).
pub fn create_record(
    path: &Path,
    bytes: &[u8],
    account: Option<&str>,
    public: bool,
) -> Result<bool> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let dir = path.parent().context("a record has a directory")?;
    let tmp = dir.join(format!(
        ".{}.{}.{}.tmp",
        path.file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
        std::process::id(),
        super::publish::rand_hex(6)
    ));
    let write = || -> Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
            .open(&tmp)
            .with_context(|| format!("creating {}", tmp.display()))?;
        let mode = match (public, group_for(account)) {
            (false, Ok(gid)) => {
                nix::unistd::fchown(&f, None, Some(gid))
                    .with_context(|| format!("giving {} its account's group", tmp.display()))?;
                0o640
            }
            _ => 0o644,
        };
        f.write_all(bytes)
            .and_then(|()| f.set_permissions(std::fs::Permissions::from_mode(mode)))
            .and_then(|()| f.sync_all())
            .with_context(|| format!("writing {}", tmp.display()))
    };
    let created = write().and_then(|()| match std::fs::hard_link(&tmp, path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(crate::fsutil::io_error(
            e,
            format!("creating {}", path.display()),
            dir,
        )),
    });
    let _ = std::fs::remove_file(&tmp);
    created
}

/// A blob readable by all who know its name (ours only: another's is theirs
/// to keep).
pub fn open_blob(path: &Path) -> Result<()> {
    let meta =
        std::fs::symlink_metadata(path).with_context(|| format!("reading {}", path.display()))?;
    if meta.uid() == nix::unistd::geteuid().as_raw() && meta.mode() & 0o777 != 0o644 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644))
            .with_context(|| format!("setting the mode of {}", path.display()))?;
    }
    Ok(())
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

/// The login name owning the file at `path` (a `file://` record's real
/// publisher), `None` when it cannot be read.
pub fn owner_of(path: &Path) -> Option<String> {
    let uid = std::fs::symlink_metadata(path).ok()?.uid();
    Some(
        nix::unistd::User::from_uid(uid.into())
            .ok()
            .flatten()
            .map_or_else(|| uid.to_string(), |u| u.name),
    )
}
