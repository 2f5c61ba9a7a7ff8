//! Writing files an administrator owns: atomically, checked, with a backup.
//!
//! `write_atomic_checked` writes a temporary file in the target's directory,
//! fsyncs it, sets its mode (and the old file's owner), reads it back and runs
//! the caller's check on what was actually written, then renames it over the
//! target and fsyncs the directory. A crash or a failed check at any point
//! leaves the old file as it was; at worst a `.<name>.yolo-sched-tmp.*` file
//! remains, which the next write ignores. `write_with_backup` first keeps a
//! timestamped copy of the old file.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{bail, Context, Result};

/// What `write_with_backup` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOutcome {
    /// The file already had exactly these bytes; nothing was written.
    Unchanged,
    /// The file was replaced (or created); `backup` holds the old content, if there was any.
    Written { backup: Option<PathBuf> },
}

/// Whether [`open_regular`] follows a symbolic link at the path it is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Links {
    /// Followed: a spec, a log or a data file a user named, perhaps through a link.
    Follow,
    /// Refused (`O_NOFOLLOW`): the file must be named itself (an imported
    /// checkpoint, where the name is what is recorded).
    Refuse,
}

/// Why [`open_regular`] gave no file.
#[derive(Debug)]
pub enum NotOpened {
    /// The open or its stat failed: nothing there, no permission, ….
    Io(std::io::Error),
    /// A symbolic link, with [`Links::Refuse`].
    Link,
    /// A FIFO, a device, a socket or a directory.
    NotRegular,
    /// Larger than the limit the caller reads.
    TooLarge { len: u64, limit: u64 },
}

/// A refusal of [`open_regular`], with the path; it converts into an
/// `anyhow::Error` (`{:#}` shows the OS's reason of an `Io`), and callers
/// with their own wording match on `why`.
#[derive(Debug)]
pub struct OpenError {
    pub path: PathBuf,
    pub why: NotOpened,
}

impl OpenError {
    /// Nothing is at the path (callers for which a missing file is no error).
    pub fn is_not_found(&self) -> bool {
        matches!(&self.why, NotOpened::Io(e) if e.kind() == std::io::ErrorKind::NotFound)
    }
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let path = self.path.display();
        match &self.why {
            NotOpened::Io(_) => write!(f, "opening {path}"),
            NotOpened::Link => write!(f, "{path} is a symbolic link; it is not followed"),
            NotOpened::NotRegular => write!(f, "{path} is not a regular file"),
            NotOpened::TooLarge { len, limit } => {
                write!(f, "{path} is {len} bytes; at most {limit} are read")
            }
        }
    }
}

impl std::error::Error for OpenError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.why {
            NotOpened::Io(e) => Some(e),
            _ => None,
        }
    }
}

/// Open a regular file for reading without blocking on what is not one: the
/// open is non-blocking (a FIFO planted where a log should be would otherwise
/// wait for a writer for ever) and the type is checked on the open file, so
/// a FIFO, a device or a directory is refused; with [`Links::Refuse`] a
/// symbolic link at `path` is refused too (`O_NOFOLLOW`). The file's offset
/// and flags are as `File::open` leaves them, apart from `O_NONBLOCK`, which
/// a regular file ignores. Every read of a file a user or another program
/// may have put in place opens through here (or `within::open_read` below a
/// run directory).
pub fn open_regular(path: &Path, links: Links) -> std::result::Result<File, OpenError> {
    let refused = |why| OpenError {
        path: path.to_path_buf(),
        why,
    };
    let mut flags = nix::fcntl::OFlag::O_NONBLOCK;
    if links == Links::Refuse {
        flags |= nix::fcntl::OFlag::O_NOFOLLOW;
    }
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(flags.bits())
        .open(path)
        .map_err(|e| {
            if links == Links::Refuse && e.raw_os_error() == Some(nix::libc::ELOOP) {
                refused(NotOpened::Link)
            } else {
                refused(NotOpened::Io(e))
            }
        })?;
    let meta = file.metadata().map_err(|e| refused(NotOpened::Io(e)))?;
    if !meta.is_file() {
        return Err(refused(NotOpened::NotRegular));
    }
    Ok(file)
}

/// [`open_regular`] for a file of at most `limit` bytes: a larger one is
/// refused without reading it. The caller reads at most `limit` bytes of it
/// ([`read_text`], or `take(limit)` for one read piece by piece:
/// `advise --sacct-file`).
pub fn open_regular_bounded(
    path: &Path,
    links: Links,
    limit: u64,
) -> std::result::Result<File, OpenError> {
    let file = open_regular(path, links)?;
    let len = file
        .metadata()
        .map_err(|e| OpenError {
            path: path.to_path_buf(),
            why: NotOpened::Io(e),
        })?
        .len();
    if len > limit {
        return Err(OpenError {
            path: path.to_path_buf(),
            why: NotOpened::TooLarge { len, limit },
        });
    }
    Ok(file)
}

/// Read a regular file of at most `limit` bytes as UTF-8 text. A FIFO, a
/// device or a directory is refused without blocking on it (the open is
/// non-blocking and the type is checked on the open file), and a file over
/// the limit is refused without reading it all. A link at `path` is followed.
pub fn read_regular(path: &Path, limit: u64) -> Result<String> {
    let file = open_regular_bounded(path, Links::Follow, limit)?;
    read_text(file, path, limit)
}

/// The rest of the open file `file` (shown as `path`) as UTF-8 text, at most
/// `limit` bytes: one larger (or grown past it while read) is refused, and
/// text that is not UTF-8 is refused at its line and column. For a file
/// opened by [`open_regular`] or `within::open_read`.
pub fn read_text(file: File, path: &Path, limit: u64) -> Result<String> {
    let mut bytes = Vec::new();
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("reading {}", path.display()))?;
    if bytes.len() as u64 > limit {
        bail!(
            "{} is larger than {limit} bytes (or grew while read); at most {limit} are read",
            path.display()
        );
    }
    String::from_utf8(bytes).map_err(|e| {
        let good = e.utf8_error().valid_up_to();
        let bytes = e.as_bytes();
        // Valid up to `good`, so this prefix is text.
        let before = std::str::from_utf8(&bytes[..good]).unwrap_or("");
        let line = before.matches('\n').count() + 1;
        let column = before[before.rfind('\n').map_or(0, |i| i + 1)..]
            .chars()
            .count()
            + 1;
        anyhow::anyhow!(
            "{}:{line}:{column}: not UTF-8 text (byte 0x{:02x} at offset {good})",
            path.display(),
            bytes[good]
        )
    })
}

/// At most `len` bytes of `file` from `offset` on (fewer where it ends
/// sooner): a bounded read of an open file, whatever its size says.
pub fn read_range(file: &mut File, offset: u64, len: u64) -> std::io::Result<Vec<u8>> {
    use std::io::{Seek, SeekFrom};
    file.seek(SeekFrom::Start(offset))?;
    let mut buf = Vec::new();
    file.take(len).read_to_end(&mut buf)?;
    Ok(buf)
}

/// Write `bytes` to `path` atomically with permission bits `mode`.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    write_atomic_checked(path, bytes, mode, |_| Ok(()))
}

/// Write `bytes` to `path` atomically, keeping an existing file's permission
/// bits (readers such as node_exporter's textfile collector rely on them); a
/// new file gets `new_mode`.
pub fn write_atomic_keep_mode(path: &Path, bytes: &[u8], new_mode: u32) -> Result<()> {
    let mode = fs::metadata(path)
        .ok()
        .filter(|m| m.is_file())
        .map_or(new_mode, |m| m.permissions().mode() & 0o7777);
    write_atomic(path, bytes, mode)
}

/// Check before any work that `path` can be written as a file: a file name in
/// an existing directory, and nothing there (through a symlink) but a regular
/// file. `what` names the flag in the message (`--output`).
pub fn check_target(path: &Path, what: &str) -> std::result::Result<(), String> {
    if path.file_name().is_none() {
        return Err(format!("{what} {}: not a file name", path.display()));
    }
    let dir = parent_dir(path);
    if !dir.is_dir() {
        return Err(format!(
            "{what} {}: directory {} does not exist",
            path.display(),
            dir.display()
        ));
    }
    match fs::metadata(path) {
        Ok(m) if m.is_dir() => Err(format!("{what} {}: is a directory", path.display())),
        Ok(m) if !m.is_file() => Err(format!(
            "{what} {}: exists and is not a regular file (a device, FIFO or socket); \
             it is not replaced",
            path.display()
        )),
        _ => Ok(()),
    }
}

/// Write `bytes` to `path` atomically with permission bits `mode`, replacing
/// the old file only if `check` accepts the bytes read back from the
/// temporary file. A symlink at `path` is followed: its target is replaced.
pub fn write_atomic_checked<F>(path: &Path, bytes: &[u8], mode: u32, check: F) -> Result<()>
where
    F: FnOnce(&[u8]) -> Result<()>,
{
    let dir = replace_file(path, bytes, mode, check)?;
    sync_dir(&dir)
}

/// Write several files atomically, each as `write_atomic`, and fsync each
/// directory once at the end rather than once per file (a submission's
/// stage scripts share one directory). Stops at the first failure; files
/// written before it stay written.
pub fn write_atomic_all(files: &[(&Path, &[u8], u32)]) -> Result<()> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    for (path, bytes, mode) in files {
        let dir = replace_file(path, bytes, *mode, |_| Ok(()))?;
        if !dirs.contains(&dir) {
            dirs.push(dir);
        }
    }
    dirs.iter().try_for_each(|d| sync_dir(d))
}

/// Everything of `write_atomic_checked` but the directory fsync; returns the directory.
fn replace_file<F>(path: &Path, bytes: &[u8], mode: u32, check: F) -> Result<PathBuf>
where
    F: FnOnce(&[u8]) -> Result<()>,
{
    let target = resolve(path)?;
    let dir = parent_dir(&target);
    let old_owner = match fs::metadata(&target) {
        Ok(meta) => {
            if !meta.is_file() {
                return Err(crate::error::invalid(format!(
                    "{} exists and is not a regular file; not replacing it",
                    target.display()
                )));
            }
            Some((meta.uid(), meta.gid()))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e).with_context(|| format!("reading {}", target.display())),
    };
    let mut tmp = temp_beside(&target, 0o600)?;
    tmp.file()
        .write_all(bytes)
        .map_err(|e| io_error(e, format!("writing {}", target.display()), &dir))?;
    tmp.file()
        .set_permissions(fs::Permissions::from_mode(mode))
        .with_context(|| format!("setting mode {mode:o} on {}", tmp.path().display()))?;
    if let Some((uid, gid)) = old_owner {
        // Keep the owner an admin chose; only root may give files away, and
        // a non-root writer already owns what it can write.
        if nix::unistd::geteuid().is_root() {
            std::os::unix::fs::fchown(tmp.file(), Some(uid), Some(gid))
                .with_context(|| format!("setting owner of {}", tmp.path().display()))?;
        }
    }
    tmp.file()
        .sync_all()
        .map_err(|e| io_error(e, format!("writing {}", target.display()), &dir))?;
    let mut written = Vec::with_capacity(bytes.len());
    File::open(tmp.path())
        .and_then(|mut f| f.read_to_end(&mut written))
        .with_context(|| format!("reading back {}", tmp.path().display()))?;
    if written != bytes {
        bail!("{} does not read back as written", tmp.path().display());
    }
    check(&written).with_context(|| {
        format!(
            "the new {} failed its check; the old file is unchanged",
            target.display()
        )
    })?;
    tmp.rename()
}

/// Replace `path` like `write_atomic_checked`, first copying the old file to
/// `<name>.<UTC timestamp>.bak` beside it. Identical content is left alone
/// (no write, no backup), so repeated runs do not pile up backups.
pub fn write_with_backup<F>(path: &Path, bytes: &[u8], mode: u32, check: F) -> Result<WriteOutcome>
where
    F: FnOnce(&[u8]) -> Result<()>,
{
    let target = resolve(path)?;
    let old = match fs::read(&target) {
        Ok(old) => Some(old),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e).with_context(|| format!("reading {}", target.display())),
    };
    if old.as_deref() == Some(bytes) {
        return Ok(WriteOutcome::Unchanged);
    }
    let backup = match &old {
        Some(content) => {
            let old_mode = fs::metadata(&target)
                .with_context(|| format!("reading {}", target.display()))?
                .permissions()
                .mode()
                & 0o7777;
            let backup = backup_path(&target)?;
            write_atomic(&backup, content, old_mode)
                .with_context(|| format!("keeping a backup of {}", target.display()))?;
            Some(backup)
        }
        None => None,
    };
    write_atomic_checked(&target, bytes, mode, check)?;
    Ok(WriteOutcome::Written { backup })
}

/// `dir/name.20260101T120000Z.bak`, with `-2`, `-3`, … if that exists already.
fn backup_path(target: &Path) -> Result<PathBuf> {
    let dir = parent_dir(target);
    let name = file_name(target)?;
    let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%SZ");
    let first = dir.join(format!("{name}.{stamp}.bak"));
    if !first.exists() {
        return Ok(first);
    }
    for n in 2..1000 {
        let candidate = dir.join(format!("{name}.{stamp}-{n}.bak"));
        if !candidate.exists() {
            return Ok(candidate);
        }
    }
    bail!("too many backups of {} this second", target.display())
}

/// Follow a symlink at `path` to the file it finally names, so the link
/// survives the rename.
fn resolve(path: &Path) -> Result<PathBuf> {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => fs::canonicalize(path)
            .with_context(|| format!("following the symlink {}", path.display())),
        _ => Ok(path.to_path_buf()),
    }
}

fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

fn file_name(path: &Path) -> Result<String> {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .with_context(|| format!("{} does not name a file", path.display()))
}

/// The one name of a temporary file beside `name` (the `n`th this process
/// made): `.<name>.yolo-sched-tmp.<pid>.<n>`, hidden, never a name a reader
/// of the directory takes for its own (a listing of `NNNNNNNN.json`, a
/// checkpoint), and recognisable as a leftover of a killed writer.
fn temp_name(name: &std::ffi::OsStr, n: u64) -> String {
    format!(
        ".{}.yolo-sched-tmp.{}.{n}",
        name.to_string_lossy(),
        std::process::id()
    )
}

/// The count that makes each temporary name of this process new.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A new temporary file beside `target` that will replace it: see [`temp_beside`].
#[derive(Debug)]
pub struct TempBeside {
    path: PathBuf,
    file: File,
    target: PathBuf,
    placed: bool,
}

/// A new temporary file in `target`'s directory, named by the one temporary
/// name, created exclusively without following a link (`O_CREAT | O_EXCL |
/// O_NOFOLLOW`) with permission bits `mode` (less the umask). The caller
/// writes it through [`TempBeside::file`], then [`TempBeside::commit`]s it:
/// fsync the file, rename it over `target`, fsync the directory. Until then
/// `target` is as it was, and a `TempBeside` dropped uncommitted (an error
/// on the way) removes its file. Every temporary-file-then-rename of a path
/// goes through here (below a run directory or a shared registry, through
/// `within::place`, which uses the same name).
pub fn temp_beside(target: &Path, mode: u32) -> Result<TempBeside> {
    let dir = parent_dir(target);
    let name = target
        .file_name()
        .with_context(|| format!("{} does not name a file", target.display()))?;
    for _ in 0..100 {
        let path = dir.join(temp_name(
            name,
            TEMP_COUNTER.fetch_add(1, Ordering::Relaxed),
        ));
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags((nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_CLOEXEC).bits())
            .open(&path)
        {
            Ok(file) => {
                return Ok(TempBeside {
                    path,
                    file,
                    target: target.to_path_buf(),
                    placed: false,
                })
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(io_error(
                    e,
                    format!("creating a temporary file in {}", dir.display()),
                    &dir,
                ))
            }
        }
    }
    bail!("could not create a temporary file in {}", dir.display())
}

impl TempBeside {
    /// The open temporary file, to write.
    pub fn file(&mut self) -> &mut File {
        &mut self.file
    }

    /// Where the temporary file is (for a message, or to read it back).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// fsync the file, rename it over the target and fsync the directory:
    /// the target is the new file, and stays so after a crash.
    pub fn commit(self) -> Result<()> {
        let dir = self.rename()?;
        sync_dir(&dir)
    }

    /// [`TempBeside::commit`] but the directory fsync (a caller that writes
    /// several files in one directory syncs it once); the directory.
    fn rename(mut self) -> Result<PathBuf> {
        let dir = parent_dir(&self.target);
        self.file
            .sync_all()
            .map_err(|e| io_error(e, format!("writing {}", self.target.display()), &dir))?;
        fs::rename(&self.path, &self.target).with_context(|| {
            format!(
                "renaming {} to {}",
                self.path.display(),
                self.target.display()
            )
        })?;
        self.placed = true;
        Ok(dir)
    }
}

impl Drop for TempBeside {
    fn drop(&mut self) {
        if !self.placed {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// The last `limit` bytes of a file, as text (job logs can be large). Only a
/// regular file is read: a FIFO or device planted at a log's name gives
/// `None` at once instead of a wait for a writer.
pub fn read_tail(path: &Path, limit: u64) -> Option<String> {
    let mut f = open_regular(path, Links::Follow).ok()?;
    let len = f.metadata().ok()?.len();
    let buf = read_range(&mut f, len.saturating_sub(limit), limit).ok()?;
    Some(String::from_utf8_lossy(&buf).into_owned())
}

/// Writes (and reads) inside a directory that never follow a symbolic link
/// below it: every directory between `root` and the file is opened with
/// `O_NOFOLLOW | O_DIRECTORY` relative to the one before (`openat`), so a
/// link planted anywhere inside (`weights -> /home/x`, `last.pt ->
/// ~/.bashrc`, `state/backup -> /etc`) is refused, not followed, even if it
/// appears between a check and the write. `root` itself (the run directory
/// the user named) is followed as given. The file is replaced by a rename
/// in its directory, which replaces a name, never what a link points to.
pub mod within {
    use std::ffi::OsStr;
    use std::fs::File;
    use std::io::Write;
    use std::os::fd::OwnedFd;
    use std::os::unix::fs::PermissionsExt;
    use std::path::{Component, Path, PathBuf};

    use anyhow::{Context, Result};
    use nix::errno::Errno;
    use nix::fcntl::{openat, renameat, AtFlags, OFlag};
    use nix::sys::stat::{fchmod, fstatat, mkdirat, Mode, SFlag};
    use nix::unistd::{linkat, unlinkat, UnlinkatFlags};

    /// A link (or something not a directory or regular file) where a run's
    /// file or directory should be: nothing was written or read through it.
    #[derive(Debug)]
    pub struct LinkRefused(pub String);

    impl std::fmt::Display for LinkRefused {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(&self.0)
        }
    }

    impl std::error::Error for LinkRefused {}

    /// Whether `e` (at any depth of its context) is a `LinkRefused`.
    pub fn is_refused(e: &anyhow::Error) -> bool {
        e.downcast_ref::<LinkRefused>().is_some()
    }

    /// The refusal as an invalid-input error (exit 2) that `is_refused` knows.
    fn refused(message: String) -> anyhow::Error {
        crate::error::invalid(message.clone()).context(LinkRefused(message))
    }

    fn what_is(dir: &OwnedFd, name: &OsStr, shown: &Path) -> String {
        let at = crate::text::shown(&shown.display().to_string(), 200);
        match fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFLNK => {
                format!(
                    "{at} is a symbolic link; yolo-sched never writes or reads through a link inside a run directory or a shared registry (remove the link, or put a real file or directory there)"
                )
            }
            _ => format!("{at} is not a regular file or directory; it is left alone"),
        }
    }

    fn names(rel: &Path) -> Result<Vec<&OsStr>> {
        rel.components()
            .map(|c| match c {
                Component::Normal(n) => Ok(n),
                _ => Err(crate::error::invalid(format!(
                    "{}: expected a plain relative path inside the run directory",
                    rel.display()
                ))),
            })
            .collect()
    }

    fn open_root(root: &Path) -> Result<OwnedFd> {
        openat(
            nix::fcntl::AT_FDCWD,
            root,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .with_context(|| format!("opening the directory {}", root.display()))
    }

    /// The directory `root/rel`, every step below `root` opened without
    /// following a link; missing directories are made (mode 0755) when `create`.
    pub fn open_dir(root: &Path, rel: &Path, create: bool) -> Result<OwnedFd> {
        steps(root, rel, if create { Make::Umask } else { Make::No })
    }

    /// How `steps` treats a missing directory.
    #[derive(Clone, Copy)]
    enum Make<'a> {
        /// It is not made (an error, or nothing there).
        No,
        /// Made with mode 0755 less the umask (a run directory's).
        Umask,
        /// Made with the mode this gives its path below the root, set after
        /// creation (the umask does not apply): a shared directory's.
        Mode(&'a dyn Fn(&Path) -> u32),
    }

    /// The directory `root/rel`, every step below `root` opened without
    /// following a link, missing directories made as `make` says.
    fn steps(root: &Path, rel: &Path, make: Make) -> Result<OwnedFd> {
        let mut dir = open_root(root)?;
        let mut shown = root.to_path_buf();
        let mut below = PathBuf::new();
        for name in names(rel)? {
            shown.push(name);
            below.push(name);
            let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
            let mut next = openat(&dir, name, flags, Mode::empty());
            let mut made = false;
            if matches!(next, Err(Errno::ENOENT)) && !matches!(make, Make::No) {
                let mode = match make {
                    Make::Mode(_) => 0o700,
                    _ => 0o755,
                };
                match mkdirat(&dir, name, Mode::from_bits_truncate(mode)) {
                    Ok(()) => made = true,
                    Err(Errno::EEXIST) => {}
                    Err(e) => {
                        return Err(super::io_error(
                            e.into(),
                            format!("creating {}", shown.display()),
                            &shown,
                        ))
                    }
                }
                next = openat(&dir, name, flags, Mode::empty());
            }
            if matches!(next, Err(Errno::EACCES)) {
                // A directory one may pass through but not list (a shared
                // registry's `blobs/sha256`, mode 1733): a path-only handle
                // serves as the base of the next step; links are still refused.
                next = openat(
                    &dir,
                    name,
                    OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                    Mode::empty(),
                );
            }
            dir = match next {
                Ok(fd) => fd,
                Err(Errno::ELOOP | Errno::ENOTDIR) => {
                    return Err(refused(what_is(&dir, name, &shown)))
                }
                Err(e) => {
                    return Err(std::io::Error::from(e))
                        .with_context(|| format!("opening {}", shown.display()))
                }
            };
            if let (true, Make::Mode(mode_of)) = (made, make) {
                fchmod(&dir, Mode::from_bits_truncate(mode_of(&below)))
                    .with_context(|| format!("setting the mode of {}", shown.display()))?;
            }
        }
        Ok(dir)
    }

    /// What `place` does when the name is taken.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Place {
        /// Create if absent: a hard link, which fails when the name exists
        /// (`Ok(false)`).
        New,
        /// Replace what is there by name (a rename: a link there is
        /// replaced, never followed).
        Replace,
    }

    /// Put a file at `root/rel` without following a link at any step below
    /// `root`: missing directories are made with the mode `dir_mode` gives
    /// their path below `root` (set after creation, the umask aside); the
    /// file is first a private temporary file beside its name (mode 0600),
    /// which `fill` writes (and gives its mode, group, sync); then it is
    /// linked (`Place::New`) or renamed (`Place::Replace`) to its name and the
    /// directory synced. `Ok(false)`: `Place::New` found the name taken. For
    /// shared directories (a `file://` registry) where anyone may have put
    /// a link on the way. The temporary file never outlives the call.
    pub fn place(
        root: &Path,
        rel: &Path,
        dir_mode: &dyn Fn(&Path) -> u32,
        how: Place,
        fill: &mut dyn FnMut(&mut File) -> Result<()>,
    ) -> Result<bool> {
        let (parent, name) = split(rel)?;
        let dir = steps(root, parent, Make::Mode(dir_mode))?;
        put_in(&dir, &root.join(parent), name, how, fill)
    }

    /// `place` in the open directory `dir` (shown as `dir_shown`).
    fn put_in(
        dir: &OwnedFd,
        dir_shown: &Path,
        name: &OsStr,
        how: Place,
        fill: &mut dyn FnMut(&mut File) -> Result<()>,
    ) -> Result<bool> {
        let shown = dir_shown.join(name);
        let mut tmp_name = None;
        for _ in 0..100 {
            let n = super::TEMP_COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let candidate = super::temp_name(name, n);
            match openat(
                dir,
                candidate.as_str(),
                OFlag::O_WRONLY
                    | OFlag::O_CREAT
                    | OFlag::O_EXCL
                    | OFlag::O_NOFOLLOW
                    | OFlag::O_CLOEXEC,
                Mode::from_bits_truncate(0o600),
            ) {
                Ok(fd) => {
                    tmp_name = Some((candidate, File::from(fd)));
                    break;
                }
                Err(Errno::EEXIST) => continue,
                Err(e) => {
                    return Err(super::io_error(
                        e.into(),
                        format!("creating a temporary file in {}", dir_shown.display()),
                        dir_shown,
                    ))
                }
            }
        }
        let Some((tmp, mut file)) = tmp_name else {
            anyhow::bail!(
                "could not create a temporary file in {}",
                dir_shown.display()
            );
        };
        let result = (|| -> Result<bool> {
            fill(&mut file)?;
            let placed = match how {
                Place::New => match linkat(dir, tmp.as_str(), dir, name, AtFlags::empty()) {
                    Ok(()) => true,
                    Err(Errno::EEXIST) => false,
                    Err(e) => {
                        return Err(super::io_error(
                            e.into(),
                            format!("creating {}", shown.display()),
                            dir_shown,
                        ))
                    }
                },
                Place::Replace => {
                    renameat(dir, tmp.as_str(), dir, name)
                        .with_context(|| format!("renaming into {}", shown.display()))?;
                    true
                }
            };
            if placed {
                File::from(dir.try_clone()?)
                    .sync_all()
                    .with_context(|| format!("syncing directory {}", dir_shown.display()))?;
            }
            Ok(placed)
        })();
        let _ = unlinkat(dir, tmp.as_str(), UnlinkatFlags::NoRemoveDir);
        result
    }

    /// A file `walk` found.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct Found {
        /// Its path below the walked directory, `/`-separated.
        pub rel: String,
        pub size: u64,
        pub modified: chrono::DateTime<chrono::Utc>,
        /// Its owner.
        pub uid: u32,
    }

    /// Something `walk` did not go into or list, and why.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct Skipped {
        /// Its path below the walked directory (not UTF-8 parts replaced),
        /// raw: escape it before showing it.
        pub rel: String,
        /// The directory could not be read (permissions): what is below it
        /// is unknown.
        pub unread: bool,
        pub why: String,
    }

    /// What `walk` found.
    #[derive(Debug, Clone, Default)]
    pub struct Walk {
        pub files: Vec<Found>,
        pub skipped: Vec<Skipped>,
    }

    /// Every regular file below `root/rel`, sorted, no link followed: each
    /// directory is opened `O_NOFOLLOW` from the one before. What is not a
    /// directory or regular file (a link: a loop, a link to a large tree),
    /// a name that is not UTF-8, a directory that cannot be read and what is
    /// deeper than `depth` are not gone into: they are `skipped`, and the
    /// rest is listed. Nothing at `root/rel` is an empty walk; a link or an
    /// unreadable directory there is one skipped entry. For shared
    /// directories where anyone may plant entries.
    pub fn walk(root: &Path, rel: &Path, depth: usize) -> Result<Walk> {
        let mut out = Walk::default();
        let top = match steps(root, rel, Make::No) {
            Ok(fd) => fd,
            Err(e) if is_refused(&e) => {
                out.skipped.push(Skipped {
                    rel: String::new(),
                    unread: false,
                    why: format!("{e:#}"),
                });
                return Ok(out);
            }
            Err(e) => {
                return match os_code(&e) {
                    Some(code) if code == Errno::ENOENT as i32 => Ok(out),
                    Some(code) if code == Errno::EACCES as i32 => {
                        out.skipped.push(Skipped {
                            rel: String::new(),
                            unread: true,
                            why: "permission denied".into(),
                        });
                        Ok(out)
                    }
                    _ => Err(e),
                }
            }
        };
        walk_in(top, String::new(), depth, &mut out);
        out.files.sort_by(|a, b| a.rel.cmp(&b.rel));
        Ok(out)
    }

    fn walk_in(dir: OwnedFd, at: String, depth: usize, out: &mut Walk) {
        let join = |name: &str| {
            if at.is_empty() {
                name.to_string()
            } else {
                format!("{at}/{name}")
            }
        };
        let probe = match dir.try_clone() {
            Ok(fd) => fd,
            Err(e) => {
                out.skipped.push(Skipped {
                    rel: at.clone(),
                    unread: true,
                    why: e.to_string(),
                });
                return;
            }
        };
        let mut entries = match nix::dir::Dir::from_fd(dir) {
            Ok(d) => d,
            Err(e) => {
                out.skipped.push(Skipped {
                    rel: at.clone(),
                    unread: true,
                    why: e.desc().to_string(),
                });
                return;
            }
        };
        let mut subdirs = Vec::new();
        for entry in entries.iter() {
            let entry = match entry {
                Ok(e) => e,
                Err(e) => {
                    out.skipped.push(Skipped {
                        rel: at.clone(),
                        unread: true,
                        why: e.desc().to_string(),
                    });
                    break;
                }
            };
            let bytes = entry.file_name().to_bytes();
            if bytes == b"." || bytes == b".." {
                continue;
            }
            let Ok(name) = std::str::from_utf8(bytes) else {
                out.skipped.push(Skipped {
                    rel: join(&String::from_utf8_lossy(bytes)),
                    unread: false,
                    why: "its name is not UTF-8".into(),
                });
                continue;
            };
            let st = match fstatat(&probe, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                Err(Errno::ENOENT) => continue,
                Err(e) => {
                    out.skipped.push(Skipped {
                        rel: join(name),
                        unread: true,
                        why: e.desc().to_string(),
                    });
                    continue;
                }
            };
            match SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT {
                SFlag::S_IFREG => out.files.push(Found {
                    rel: join(name),
                    size: st.st_size as u64,
                    modified: chrono::DateTime::from_timestamp(
                        st.st_mtime,
                        st.st_mtime_nsec as u32,
                    )
                    .unwrap_or_default(),
                    uid: st.st_uid,
                }),
                SFlag::S_IFDIR => subdirs.push(name.to_string()),
                SFlag::S_IFLNK => out.skipped.push(Skipped {
                    rel: join(name),
                    unread: false,
                    why: "a symbolic link; not followed".into(),
                }),
                _ => out.skipped.push(Skipped {
                    rel: join(name),
                    unread: false,
                    why: "not a regular file or directory".into(),
                }),
            }
        }
        for name in subdirs {
            let rel = join(&name);
            if depth == 0 {
                out.skipped.push(Skipped {
                    rel,
                    unread: false,
                    why: "deeper than the layout goes".into(),
                });
                continue;
            }
            match openat(
                &probe,
                name.as_str(),
                OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                Mode::empty(),
            ) {
                Ok(fd) => walk_in(fd, rel, depth - 1, out),
                Err(Errno::ENOENT) => {}
                Err(e) => out.skipped.push(Skipped {
                    rel,
                    unread: e == Errno::EACCES,
                    why: e.desc().to_string(),
                }),
            }
        }
    }

    fn split(rel: &Path) -> Result<(&Path, &OsStr)> {
        let name = rel.file_name().ok_or_else(|| {
            crate::error::invalid(format!("{}: does not name a file", rel.display()))
        })?;
        Ok((rel.parent().unwrap_or(Path::new("")), name))
    }

    /// Refuse a link or a non-regular file at `name` in `dir`; `Ok(false)`
    /// when there is nothing there.
    fn check_name(dir: &OwnedFd, name: &OsStr, shown: &Path) -> Result<bool> {
        match fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFREG => {
                Ok(true)
            }
            Ok(_) => Err(refused(what_is(dir, name, shown))),
            Err(Errno::ENOENT) => Ok(false),
            Err(e) => {
                Err(std::io::Error::from(e)).with_context(|| format!("reading {}", shown.display()))
            }
        }
    }

    /// Whether `root/rel` could be written by `write` without following a
    /// link: `Err` says which link (or odd file) is in the way. Nothing is made.
    pub fn check(root: &Path, rel: &Path) -> Result<()> {
        let (parent, name) = split(rel)?;
        let mut shown = root.to_path_buf();
        let mut dir = open_root(root)?;
        for step in names(parent)? {
            shown.push(step);
            match openat(
                &dir,
                step,
                OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                Mode::empty(),
            ) {
                Ok(fd) => dir = fd,
                // Missing: `write` makes it, nothing in the way.
                Err(Errno::ENOENT) => return Ok(()),
                Err(Errno::ELOOP | Errno::ENOTDIR) => {
                    return Err(refused(what_is(&dir, step, &shown)))
                }
                Err(e) => {
                    return Err(std::io::Error::from(e))
                        .with_context(|| format!("opening {}", shown.display()))
                }
            }
        }
        check_name(&dir, name, &root.join(rel)).map(|_| ())
    }

    /// Open `root/rel` for reading, refusing a link anywhere below `root`
    /// (and a FIFO or device, without blocking on it).
    pub fn open_read(root: &Path, rel: &Path) -> Result<File> {
        let (parent, name) = split(rel)?;
        let dir = open_dir(root, parent, false)?;
        let shown = root.join(rel);
        let fd = openat(
            &dir,
            name,
            OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            Errno::ELOOP => refused(what_is(&dir, name, &shown)),
            e => anyhow::Error::new(std::io::Error::from(e))
                .context(format!("opening {}", shown.display())),
        })?;
        let file = File::from(fd);
        if !file.metadata()?.is_file() {
            return Err(refused(what_is(&dir, name, &shown)));
        }
        Ok(file)
    }

    /// A new file at `root/rel` for writing (mode `mode`), replacing what is
    /// there by name (a link is removed, never followed); missing directories
    /// are made. For scratch files of yolo-sched's own (upload snapshots).
    pub fn create(root: &Path, rel: &Path, mode: u32) -> Result<File> {
        let (parent, name) = split(rel)?;
        let dir = open_dir(root, parent, true)?;
        let shown = root.join(rel);
        match unlinkat(&dir, name, UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => {}
            Err(e) => {
                return Err(std::io::Error::from(e))
                    .with_context(|| format!("removing {}", shown.display()))
            }
        }
        let fd = openat(
            &dir,
            name,
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(mode),
        )
        .map_err(|e| super::io_error(e.into(), format!("creating {}", shown.display()), &shown))?;
        Ok(File::from(fd))
    }

    /// Remove the file `root/rel` (a link is removed itself); nothing there is fine.
    pub fn remove(root: &Path, rel: &Path) -> Result<()> {
        let (parent, name) = split(rel)?;
        let dir = match open_dir(root, parent, false) {
            Ok(d) => d,
            Err(_) if check(root, rel).is_ok() => return Ok(()),
            Err(e) => return Err(e),
        };
        match unlinkat(&dir, name, UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => Ok(()),
            Err(e) => Err(std::io::Error::from(e))
                .with_context(|| format!("removing {}", root.join(rel).display())),
        }
    }

    /// Write `bytes` to `root/rel` atomically (temporary file, fsync, rename,
    /// directory fsync) with mode `mode`, making missing directories. A link
    /// at the file or at any directory below `root` is refused (`LinkRefused`,
    /// exit 2) and left as it is; so is anything not a regular file.
    pub fn write(root: &Path, rel: &Path, bytes: &[u8], mode: u32) -> Result<()> {
        let (parent, name) = split(rel)?;
        let dir = open_dir(root, parent, true)?;
        let shown = root.join(rel);
        let dir_shown: PathBuf = root.join(parent);
        check_name(&dir, name, &shown)?;
        put_in(&dir, &dir_shown, name, Place::Replace, &mut |file| {
            file.write_all(bytes).map_err(|e| {
                super::io_error(e, format!("writing {}", shown.display()), &dir_shown)
            })?;
            file.set_permissions(std::fs::Permissions::from_mode(mode))
                .with_context(|| format!("setting mode {mode:o} on {}", shown.display()))?;
            file.sync_all()
                .map_err(|e| super::io_error(e, format!("writing {}", shown.display()), &dir_shown))
        })
        .map(|_| ())
    }

    /// The size and time of the regular file `root/rel`, no link followed
    /// at any step; `None` when nothing is there. A link or anything not a
    /// regular file there is refused (`LinkRefused`).
    pub fn stat(root: &Path, rel: &Path) -> Result<Option<Found>> {
        let (parent, name) = split(rel)?;
        let dir = match steps(root, parent, Make::No) {
            Ok(d) => d,
            Err(e) if not_found(&e) => return Ok(None),
            Err(e) => return Err(e),
        };
        let shown = root.join(rel);
        match fstatat(&dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFREG => {
                Ok(Some(Found {
                    rel: rel.to_string_lossy().into_owned(),
                    size: st.st_size as u64,
                    modified: chrono::DateTime::from_timestamp(
                        st.st_mtime,
                        st.st_mtime_nsec as u32,
                    )
                    .unwrap_or_default(),
                    uid: st.st_uid,
                }))
            }
            Ok(_) => Err(refused(what_is(&dir, name, &shown))),
            Err(Errno::ENOENT) => Ok(None),
            Err(e) => {
                Err(std::io::Error::from(e)).with_context(|| format!("reading {}", shown.display()))
            }
        }
    }

    /// The OS error code at the bottom of `e`, if it is one.
    pub fn os_code(e: &anyhow::Error) -> Option<i32> {
        e.chain().find_map(|c| {
            c.downcast_ref::<std::io::Error>()
                .and_then(std::io::Error::raw_os_error)
                .or_else(|| c.downcast_ref::<Errno>().map(|e| *e as i32))
        })
    }

    /// Whether `e` says that something on the way was not there.
    pub fn not_found(e: &anyhow::Error) -> bool {
        os_code(e) == Some(Errno::ENOENT as i32)
    }
}

/// Make `dir` (missing directories mode 0700) and check that no other user
/// can change what is in it, now or later: every directory on the way is
/// owned by root or the caller, and one that others may write to has the
/// sticky bit with the next step owned by root or the caller (so, as in
/// `/tmp`, nobody else can rename it away); `dir` itself is the caller's and
/// writable by nobody else. A link on the way is followed only when root or
/// the caller owns it. For files verified here and used later (the registry's
/// node-local weights, which the trainer unpickles): without this, another
/// user could swap them after the check.
pub fn private_dir(dir: &Path) -> Result<()> {
    use std::path::Component;
    let me = nix::unistd::geteuid().as_raw();
    let trusted = |uid: u32| uid == 0 || uid == me;
    let absolute = if dir.is_absolute() {
        dir.to_path_buf()
    } else {
        std::env::current_dir()
            .context("reading the current directory")?
            .join(dir)
    };
    let mut at = PathBuf::from("/");
    let mut parent = fs::metadata(&at).context("reading /")?;
    let components: Vec<Component> = absolute.components().collect();
    for (n, c) in components.iter().enumerate() {
        let name = match c {
            Component::RootDir | Component::CurDir => continue,
            Component::ParentDir => bail!(
                "{}: `..` is not allowed in a private directory's path",
                dir.display()
            ),
            Component::Normal(name) => name,
            Component::Prefix(_) => continue,
        };
        at.push(name);
        let link = match fs::symlink_metadata(&at) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                match fs::DirBuilder::new().mode(0o700).create(&at) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(io_error(e, format!("creating {}", at.display()), &at)),
                }
                fs::symlink_metadata(&at).with_context(|| format!("reading {}", at.display()))?
            }
            Err(e) => return Err(io_error(e, format!("reading {}", at.display()), &at)),
        };
        let shared_parent = parent.mode() & 0o022 != 0;
        if shared_parent && (parent.mode() & 0o1000 == 0 || !trusted(link.uid())) {
            bail!(
                "{} is not private: {} can be changed by other users (mode {:o}{}), so the files in it could be swapped after they were verified; choose a directory only you can change",
                dir.display(),
                at.parent().unwrap_or(Path::new("/")).display(),
                parent.mode() & 0o7777,
                if parent.mode() & 0o1000 != 0 {
                    format!(", and {} belongs to uid {}", at.display(), link.uid())
                } else {
                    String::new()
                }
            );
        }
        if link.file_type().is_symlink() && !trusted(link.uid()) {
            bail!(
                "{} is not private: {} is a link owned by uid {}",
                dir.display(),
                at.display(),
                link.uid()
            );
        }
        let meta = fs::metadata(&at).with_context(|| format!("reading {}", at.display()))?;
        if !meta.is_dir() {
            bail!("{} is not a directory", at.display());
        }
        if !trusted(meta.uid()) {
            bail!(
                "{} is not private: {} belongs to uid {}",
                dir.display(),
                at.display(),
                meta.uid()
            );
        }
        let last = components[n + 1..]
            .iter()
            .all(|c| matches!(c, Component::CurDir));
        if last && (meta.uid() != me || meta.mode() & 0o022 != 0) {
            bail!(
                "{} is not private: it is mode {:o}, owner uid {}; it must be yours and writable by you alone",
                dir.display(),
                meta.mode() & 0o7777,
                meta.uid()
            );
        }
        parent = meta;
    }
    Ok(())
}

/// An I/O error with what was being done; a full filesystem (or quota) is
/// said in plain words with the directory it happened in, since the OS's
/// "No space left on device" names neither.
pub fn io_error(err: std::io::Error, doing: String, dir: &Path) -> anyhow::Error {
    let full = matches!(
        err.raw_os_error(),
        Some(code) if code == nix::errno::Errno::ENOSPC as i32
            || code == nix::errno::Errno::EDQUOT as i32
    );
    if full {
        anyhow::Error::new(err).context(format!(
            "{doing}: the disk is full (no space left on the filesystem of {})",
            dir.display()
        ))
    } else {
        anyhow::Error::new(err).context(doing)
    }
}

/// Refuse before a change of several steps (a submission: jobs, then files)
/// when a filesystem has no room for what it will write. `wants` lists
/// directories (existing or to be made) and the sizes of the files to be
/// written in each; files on one filesystem add up, each rounded up to whole
/// blocks. Free space is what this user may use (root: the reserve too). A
/// filesystem filled between this check and the write is still caught by the
/// write itself; this only spares the steps before it.
pub fn ensure_room(wants: &[(&Path, &[u64])]) -> Result<()> {
    // (device, directory shown, blocks wanted, blocks free, block size)
    let mut per_fs: Vec<(u64, PathBuf, u64, u64, u64)> = Vec::new();
    for (dir, sizes) in wants {
        let mut at: &Path = dir;
        while !at.exists() {
            match at.parent() {
                Some(p) if !p.as_os_str().is_empty() => at = p,
                _ => break,
            }
        }
        let dev = fs::metadata(at)
            .with_context(|| format!("reading {}", at.display()))?
            .dev();
        let st = nix::sys::statvfs::statvfs(at)
            .with_context(|| format!("asking for the free space of {}", at.display()))?;
        let block = (st.fragment_size() as u64).max(1);
        let blocks: u64 = sizes.iter().map(|s| s.div_ceil(block).max(1)).sum();
        match per_fs.iter_mut().find(|f| f.0 == dev) {
            Some(f) => f.2 += blocks,
            None => {
                let free = if nix::unistd::geteuid().is_root() {
                    st.blocks_free()
                } else {
                    st.blocks_available()
                } as u64;
                per_fs.push((dev, dir.to_path_buf(), blocks, free, block));
            }
        }
    }
    for (_, dir, wanted, free, block) in per_fs {
        if free < wanted {
            return Err(io_error(
                std::io::Error::from_raw_os_error(nix::errno::Errno::ENOSPC as i32),
                format!(
                    "{} KiB are needed in {}, {} KiB are free",
                    (wanted * block).div_ceil(1024),
                    dir.display(),
                    (free * block) / 1024
                ),
                &dir,
            ));
        }
    }
    Ok(())
}

/// fsync a directory so a rename in it survives a crash.
fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("syncing directory {}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_private_directory_is_one_no_other_user_can_change() {
        let t = tempfile::tempdir().unwrap();
        let chmod =
            |p: &Path, m: u32| fs::set_permissions(p, fs::Permissions::from_mode(m)).unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().mode() & 0o7777;
        // Made 0700 all the way down.
        let deep = t.path().join("a/b");
        private_dir(&deep).unwrap();
        assert_eq!((mode(&t.path().join("a")), mode(&deep)), (0o700, 0o700));
        private_dir(&deep).unwrap();
        // Below a directory anyone writes to, without the sticky bit: refused.
        chmod(t.path(), 0o777);
        let e = format!("{:#}", private_dir(&t.path().join("c")).unwrap_err());
        assert!(
            e.contains("can be changed by other users (mode 777)"),
            "{e}"
        );
        // With it (as /tmp), a step the caller owns is safe.
        chmod(t.path(), 0o1777);
        private_dir(&t.path().join("c")).unwrap();
        // ... one another user owns is not (they could swap what is inside).
        let theirs = t.path().join("theirs");
        fs::create_dir(&theirs).unwrap();
        nix::unistd::chown(&theirs, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
        let e = format!("{:#}", private_dir(&theirs.join("x")).unwrap_err());
        assert!(e.contains("belongs to uid 65534"), "{e}");
        // The directory itself, writable by others: refused.
        let open = t.path().join("open");
        fs::create_dir(&open).unwrap();
        chmod(&open, 0o777);
        let e = format!("{:#}", private_dir(&open).unwrap_err());
        assert!(e.contains("mode 777"), "{e}");
        // A link on the way that another user owns is not followed.
        std::os::unix::fs::symlink(t.path().join("c"), t.path().join("link")).unwrap();
        std::os::unix::fs::lchown(t.path().join("link"), Some(65534), None).unwrap();
        let e = format!("{:#}", private_dir(&t.path().join("link/y")).unwrap_err());
        assert!(e.contains("not private"), "{e}");
    }

    #[test]
    fn ensure_room_refuses_what_does_not_fit_and_says_the_disk_is_full() {
        let dir = tempfile::tempdir().unwrap();
        let below = dir.path().join("not/made/yet");
        ensure_room(&[(below.as_path(), &[1, 4096])]).unwrap();
        let err = ensure_room(&[(below.as_path(), &[u64::MAX / 2, u64::MAX / 4])]).unwrap_err();
        let text = format!("{err:#}");
        assert!(text.contains("the disk is full"), "{text}");
        assert!(text.contains(&below.display().to_string()), "{text}");
    }

    fn leftovers(dir: &Path) -> Vec<String> {
        fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains("yolo-sched-tmp"))
            .collect()
    }

    #[test]
    fn read_regular_refuses_what_is_not_a_bounded_regular_file() {
        let dir = tempfile::tempdir().unwrap();
        let ok = dir.path().join("ok.csv");
        fs::write(&ok, "a,b\n").unwrap();
        assert_eq!(read_regular(&ok, 100).unwrap(), "a,b\n");
        let e = read_regular(&ok, 3).unwrap_err().to_string();
        assert!(e.contains("is 4 bytes; at most 3"), "{e}");
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let e = read_regular(&fifo, 100).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        let e = read_regular(Path::new("/dev/zero"), 100)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a regular file"), "{e}");
        let e = read_regular(dir.path(), 100).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        let bad = dir.path().join("bad");
        fs::write(&bad, b"ab\n\xc3\xa9c\xff").unwrap();
        let e = read_regular(&bad, 100).unwrap_err().to_string();
        assert!(
            e.ends_with("bad:2:3: not UTF-8 text (byte 0xff at offset 6)"),
            "{e}"
        );
    }

    #[test]
    fn open_regular_refuses_links_fifos_directories_and_what_is_too_large() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        fs::write(&file, "0123456789").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let why = |r: std::result::Result<File, OpenError>| r.map(|_| ()).unwrap_err().why;
        // A link: followed when asked, refused (and said so) when not.
        assert!(open_regular(&link, Links::Follow).is_ok());
        let e = open_regular(&link, Links::Refuse).unwrap_err();
        assert!(matches!(e.why, NotOpened::Link), "{e:?}");
        assert!(e
            .to_string()
            .ends_with("link is a symbolic link; it is not followed"));
        assert!(open_regular(&file, Links::Refuse).is_ok());
        // A FIFO (without a writer: a blocking open would hang here), a
        // device, a directory.
        for odd in [fifo.as_path(), Path::new("/dev/null"), dir.path()] {
            for links in [Links::Follow, Links::Refuse] {
                let e = open_regular(odd, links).unwrap_err();
                assert!(matches!(e.why, NotOpened::NotRegular), "{odd:?}: {e:?}");
                assert!(e.to_string().ends_with("is not a regular file"), "{e}");
            }
        }
        // Nothing there: an I/O error that says so, its cause in `{:#}`.
        let e = open_regular(&dir.path().join("none"), Links::Follow).unwrap_err();
        assert!(e.is_not_found());
        let text = format!("{:#}", anyhow::Error::from(e));
        assert!(
            text.contains("opening ") && text.contains("No such file"),
            "{text}"
        );
        // Over the bound: refused before a read; at the bound: read.
        assert!(matches!(
            why(open_regular_bounded(&file, Links::Follow, 9)),
            NotOpened::TooLarge { len: 10, limit: 9 }
        ));
        let f = open_regular_bounded(&file, Links::Follow, 10).unwrap();
        assert_eq!(read_text(f, &file, 10).unwrap(), "0123456789");
        // A bounded read of an open file refuses more than its limit too.
        let f = open_regular(&file, Links::Follow).unwrap();
        let e = read_text(f, &file, 4).unwrap_err().to_string();
        assert!(e.contains("larger than 4 bytes"), "{e}");
        let mut f = open_regular(&file, Links::Follow).unwrap();
        assert_eq!(read_range(&mut f, 8, 5).unwrap(), b"89");
        assert_eq!(read_tail(&file, 3).as_deref(), Some("789"));
        assert_eq!(read_tail(&fifo, 3), None);
    }

    #[test]
    fn temp_beside_replaces_on_commit_and_leaves_nothing_otherwise() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("model.pt");
        fs::write(&target, b"old").unwrap();
        // Dropped before its commit (an error on the way): the target is as
        // it was and the temporary file is gone.
        let mut tmp = temp_beside(&target, 0o600).unwrap();
        assert_eq!(tmp.path().parent(), Some(dir.path()));
        let name = tmp
            .path()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        assert!(
            name.starts_with(&format!(".model.pt.yolo-sched-tmp.{}.", std::process::id())),
            "{name}"
        );
        tmp.file().write_all(b"half").unwrap();
        drop(tmp);
        assert_eq!(fs::read(&target).unwrap(), b"old");
        assert!(leftovers(dir.path()).is_empty());
        // Committed: the target is the new file, with the mode asked for.
        let mut tmp = temp_beside(&target, 0o640).unwrap();
        tmp.file().write_all(b"new").unwrap();
        tmp.commit().unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"new");
        // (0640 less the umask: others get nothing, as asked.)
        assert_eq!(mode_of(&target) & 0o607, 0o600);
        assert!(leftovers(dir.path()).is_empty());
        // A link planted at the next temporary names is not written through.
        let victim = dir.path().join("victim");
        fs::write(&victim, b"mine").unwrap();
        let next = TEMP_COUNTER.load(Ordering::Relaxed);
        for n in next..next + 5 {
            std::os::unix::fs::symlink(&victim, dir.path().join(temp_name("model.pt".as_ref(), n)))
                .unwrap();
        }
        let mut tmp = temp_beside(&target, 0o600).unwrap();
        tmp.file().write_all(b"newer").unwrap();
        tmp.commit().unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"newer");
        assert_eq!(fs::read(&victim).unwrap(), b"mine");
        // No directory: an error, nothing made.
        assert!(temp_beside(&dir.path().join("none/x"), 0o600).is_err());
    }

    #[test]
    fn report_style_writes_keep_the_mode_and_refuse_devices() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("yolo.prom");
        write_atomic_keep_mode(&path, b"one\n", 0o644).unwrap();
        assert_eq!(mode_of(&path), 0o644);
        fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).unwrap();
        write_atomic_keep_mode(&path, b"two\n", 0o644).unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "two\n");
        assert_eq!(mode_of(&path), 0o640);
        assert!(leftovers(dir.path()).is_empty());
        assert!(check_target(&path, "--output").is_ok());
        assert!(check_target(dir.path(), "--output")
            .unwrap_err()
            .contains("is a directory"));
        assert!(check_target(&dir.path().join("nope/r.csv"), "--output")
            .unwrap_err()
            .contains("does not exist"));
        for dev in ["/dev/full", "/dev/null"] {
            let e = check_target(Path::new(dev), "--output").unwrap_err();
            assert!(e.contains("not a regular file"), "{e}");
            let e = write_atomic(Path::new(dev), b"x", 0o644).unwrap_err();
            assert_eq!(crate::error::exit_code_for(&e), 2, "{e:#}");
        }
        // A symlink to a device is refused too, and left a symlink.
        let link = dir.path().join("link");
        std::os::unix::fs::symlink("/dev/full", &link).unwrap();
        assert!(check_target(&link, "--output").is_err());
        assert!(write_atomic(&link, b"x", 0o644).is_err());
        assert!(fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert!(write_atomic(&fifo, b"x", 0o644).is_err());
        use std::os::unix::fs::FileTypeExt;
        assert!(fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
    }

    fn mode_of(p: &Path) -> u32 {
        fs::metadata(p).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn creates_with_the_mode_asked_for() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("gres.conf");
        write_atomic(&p, b"Name=gpu\n", 0o644).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"Name=gpu\n");
        assert_eq!(mode_of(&p), 0o644);
        write_atomic(&p, b"x", 0o600).unwrap();
        assert_eq!(mode_of(&p), 0o600);
        assert!(leftovers(dir.path()).is_empty());
    }

    #[test]
    fn a_failed_check_leaves_the_old_file_and_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("gres.conf");
        fs::write(&p, b"old\n").unwrap();
        let err = write_with_backup(&p, b"new\n", 0o644, |bytes| {
            assert_eq!(bytes, b"new\n", "the check sees what was written");
            anyhow::bail!("line 1: unknown key")
        })
        .unwrap_err();
        assert!(
            format!("{err:#}").contains("old file is unchanged"),
            "{err:#}"
        );
        assert_eq!(fs::read(&p).unwrap(), b"old\n");
        assert!(leftovers(dir.path()).is_empty());
    }

    #[test]
    fn a_directory_is_not_replaced_and_a_missing_directory_fails_cleanly() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("conf");
        fs::create_dir(&p).unwrap();
        let err = write_atomic(&p, b"new", 0o644).unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err:#}");
        assert!(p.is_dir());
        let missing = dir.path().join("no-such-dir").join("conf");
        assert!(write_atomic(&missing, b"new", 0o644).is_err());
        assert!(leftovers(dir.path()).is_empty());
    }

    #[test]
    fn backup_keeps_the_old_content_and_mode() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("gres.conf");
        fs::write(&p, b"old\n").unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o640)).unwrap();
        let WriteOutcome::Written { backup: Some(b) } =
            write_with_backup(&p, b"new\n", 0o644, |_| Ok(())).unwrap()
        else {
            panic!("the file existed, so there is a backup")
        };
        assert_eq!(fs::read(&b).unwrap(), b"old\n");
        assert_eq!(mode_of(&b), 0o640);
        assert!(b
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("gres.conf."));
        assert!(b.to_string_lossy().ends_with(".bak"));
        assert_eq!(fs::read(&p).unwrap(), b"new\n");
        assert_eq!(mode_of(&p), 0o644);

        // Same content again: nothing written, no second backup.
        assert_eq!(
            write_with_backup(&p, b"new\n", 0o644, |_| Ok(())).unwrap(),
            WriteOutcome::Unchanged
        );
        // Different content in the same second: a distinct backup name.
        let WriteOutcome::Written { backup: Some(b2) } =
            write_with_backup(&p, b"newer\n", 0o644, |_| Ok(())).unwrap()
        else {
            panic!("second backup")
        };
        assert_ne!(b, b2);
        assert_eq!(fs::read(&b2).unwrap(), b"new\n");
    }

    #[test]
    fn a_new_file_has_no_backup() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("slurm.conf.d").join("gres-node1.conf");
        fs::create_dir(p.parent().unwrap()).unwrap();
        assert_eq!(
            write_with_backup(&p, b"x\n", 0o644, |_| Ok(())).unwrap(),
            WriteOutcome::Written { backup: None }
        );
    }

    #[test]
    fn writes_within_a_directory_never_follow_a_link() {
        let outside = tempfile::tempdir().unwrap();
        let victim = outside.path().join("victim");
        fs::write(&victim, b"mine").unwrap();
        let run = tempfile::tempdir().unwrap();
        let root = run.path();
        within::write(root, Path::new("a/b/f"), b"one", 0o640).unwrap();
        assert_eq!(fs::read(root.join("a/b/f")).unwrap(), b"one");
        assert_eq!(mode_of(&root.join("a/b/f")), 0o640);
        within::write(root, Path::new("a/b/f"), b"two", 0o644).unwrap();
        assert_eq!(fs::read(root.join("a/b/f")).unwrap(), b"two");
        assert!(leftovers(&root.join("a/b")).is_empty());
        // A link at the file, and at a directory on the way.
        std::os::unix::fs::symlink(&victim, root.join("a/link")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("dir")).unwrap();
        for rel in ["a/link", "dir/new", "dir/victim"] {
            let e = within::write(root, Path::new(rel), b"x", 0o644).unwrap_err();
            assert!(within::is_refused(&e), "{rel}: {e:#}");
            assert_eq!(crate::error::exit_code_for(&e), 2, "{rel}");
            assert!(format!("{e:#}").contains("is a symbolic link"), "{e:#}");
            assert!(within::check(root, Path::new(rel)).is_err(), "{rel}");
            assert!(within::open_read(root, Path::new(rel)).is_err(), "{rel}");
        }
        assert!(within::create(root, Path::new("dir/snap"), 0o600).is_err());
        assert_eq!(fs::read(&victim).unwrap(), b"mine");
        assert_eq!(fs::read_dir(outside.path()).unwrap().count(), 1);
        // `create` replaces a link at its own name, never its target.
        within::create(root, Path::new("a/link"), 0o600).unwrap();
        assert!(!fs::symlink_metadata(root.join("a/link"))
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(fs::read(&victim).unwrap(), b"mine");
        within::remove(root, Path::new("a/link")).unwrap();
        within::remove(root, Path::new("a/none")).unwrap();
        assert!(within::check(root, Path::new("x/y/z")).is_ok());
        assert!(within::write(root, Path::new("../x"), b"x", 0o644).is_err());
    }

    #[test]
    fn a_symlink_is_followed_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.conf");
        let link = dir.path().join("gres.conf");
        fs::write(&real, b"old").unwrap();
        std::os::unix::fs::symlink("real.conf", &link).unwrap();
        write_with_backup(&link, b"new", 0o644, |_| Ok(())).unwrap();
        assert!(fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(fs::read(&real).unwrap(), b"new");
    }
}
