//! Writing the report file so that a reader (node_exporter's textfile
//! collector, a mailer) sees the old file or the new one, never half of one.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// The directory a path lives in (`.` for a bare file name).
fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Check before any work that `path` can be a file in an existing directory.
pub fn check_target(path: &Path) -> Result<(), String> {
    if path.file_name().is_none() {
        return Err(format!("--output {}: not a file name", path.display()));
    }
    let dir = parent_dir(path);
    if !dir.is_dir() {
        return Err(format!(
            "--output {}: directory {} does not exist",
            path.display(),
            dir.display()
        ));
    }
    if path.is_dir() {
        return Err(format!("--output {}: is a directory", path.display()));
    }
    Ok(())
}

/// Write `contents` to a temporary file next to `path` (a name that does not
/// end in `.prom`, so the textfile collector skips it), fsync it, rename it
/// over `path`, fsync the directory. An existing file's permissions are kept;
/// a new file gets 0644.
pub fn write(path: &Path, contents: &[u8]) -> Result<()> {
    let dir = parent_dir(path);
    let name = path
        .file_name()
        .with_context(|| format!("{} is not a file name", path.display()))?;
    let tmp = dir.join(format!(
        ".{}.tmp-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let mode = fs::metadata(path)
        .map(|m| m.permissions().mode() & 0o7777)
        .unwrap_or(0o644);
    let result = (|| -> Result<()> {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)
            .with_context(|| format!("creating {}", tmp.display()))?;
        // The umask may have narrowed the mode; readers such as node_exporter need it.
        file.set_permissions(fs::Permissions::from_mode(mode))?;
        file.write_all(contents)
            .with_context(|| format!("writing {}", tmp.display()))?;
        file.sync_all()
            .with_context(|| format!("flushing {}", tmp.display()))?;
        fs::rename(&tmp, path)
            .with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))?;
        File::open(&dir)
            .and_then(|d| d.sync_all())
            .with_context(|| format!("flushing directory {}", dir.display()))?;
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_content_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("yolo.prom");
        write(&path, b"one\n").unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "one\n");
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o644
        );
        fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).unwrap();
        write(&path, b"two\n").unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "two\n");
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o640
        );
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("yolo.prom")]);
    }

    #[test]
    fn targets_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        assert!(check_target(&dir.path().join("r.csv")).is_ok());
        assert!(check_target(dir.path())
            .unwrap_err()
            .contains("is a directory"));
        let missing = dir.path().join("nope/r.csv");
        assert!(check_target(&missing)
            .unwrap_err()
            .contains("does not exist"));
        assert!(write(&missing, b"x").is_err());
    }
}
