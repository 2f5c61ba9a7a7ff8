//! The node-setup lock: one apply at a time per node, through `flock` on a file
//! that also holds the holder's pid (for the message the second run prints).

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context, Result};
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

/// Where the lock lives on a real node; under `--sysroot` in tests.
pub const LOCK_PATH: &str = "run/yolo-sched/node-setup.lock";

/// The lock path under `root` (`/` on a real node).
pub fn lock_path(root: &Path) -> PathBuf {
    root.join(LOCK_PATH)
}

/// A held lock; released when dropped (or when the process dies).
#[derive(Debug)]
pub struct NodeLock {
    _file: Flock<File>,
    pub path: PathBuf,
}

/// Take the lock without waiting. If another process holds it, the error says
/// which pid (as that process wrote it).
pub fn acquire(path: &Path) -> Result<NodeLock> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .with_context(|| format!("opening the lock file {}", path.display()))?;
    let mut locked = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(l) => l,
        Err((mut file, Errno::EWOULDBLOCK)) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = holder.trim();
            let who = if holder.is_empty() {
                "pid unknown".to_string()
            } else {
                format!("pid {holder}")
            };
            return Err(anyhow!(
                "another node-setup is running ({who}; lock {}); wait for it to finish and rerun",
                path.display()
            ));
        }
        Err((_, e)) => return Err(anyhow!("locking {}: {e}", path.display())),
    };
    locked.set_len(0)?;
    locked.seek(SeekFrom::Start(0))?;
    writeln!(locked, "{}", std::process::id())?;
    locked.flush()?;
    Ok(NodeLock {
        _file: locked,
        path: path.to_path_buf(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_holder_is_refused_with_the_first_pid() {
        let dir = tempfile::tempdir().unwrap();
        let path = lock_path(dir.path());
        let first = acquire(&path).unwrap();
        let err = acquire(&path).unwrap_err().to_string();
        assert!(err.contains("another node-setup is running"), "{err}");
        assert!(
            err.contains(&format!("pid {}", std::process::id())),
            "{err}"
        );
        drop(first);
        acquire(&path).expect("free again after drop");
    }
}
