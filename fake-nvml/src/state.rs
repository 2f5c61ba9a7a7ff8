//! The driver state that NVML calls change (MIG mode, GPU and compute instances)
//! and its file beside the fixture: read under a lock, written atomically, so that
//! separate processes see one consistent driver and a crash leaves the old or the
//! new state, never half of one.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

/// Bumped when the file layout changes; an unknown format is replaced by a fresh state.
pub const STATE_FORMAT: u32 = 1;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeState {
    pub format: u32,
    /// Source of instance serials: every created instance gets a new one, so a
    /// handle to a destroyed instance never names a later one.
    pub next_serial: u64,
    pub gpus: Vec<GpuState>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuState {
    pub uuid: String,
    pub mig_current: bool,
    pub mig_pending: bool,
    pub gpu_instances: Vec<GiState>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GiState {
    pub id: u32,
    pub profile_id: u32,
    /// Memory slices `start .. start + size`.
    pub start: u32,
    pub size: u32,
    pub serial: u64,
    pub compute_instances: Vec<CiState>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CiState {
    pub id: u32,
    pub profile_id: u32,
    /// Compute slices of the GPU instance `start .. start + size`.
    pub start: u32,
    pub size: u32,
    pub serial: u64,
}

/// Identity of the state file's current version: it changes with every write
/// because writes replace the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    dev: u64,
    ino: u64,
    mtime_ns: i128,
    len: u64,
}

/// Where the state of one fixture lives: `<fixture>.state.json` and its lock file.
#[derive(Debug, Clone)]
pub struct Store {
    pub state_path: PathBuf,
    lock_path: PathBuf,
}

/// Held while a process reads, changes and writes the state.
pub struct StoreLock {
    _lock: Flock<File>,
}

impl Store {
    pub fn beside(fixture: &Path) -> Store {
        let mut state = fixture.as_os_str().to_owned();
        state.push(".state.json");
        let mut lock = state.clone();
        lock.push(".lock");
        Store {
            state_path: PathBuf::from(state),
            lock_path: PathBuf::from(lock),
        }
    }

    /// Exclusive lock shared by every process using this fixture (flock on a side
    /// file, since the state file itself is replaced on every write).
    pub fn lock(&self) -> Result<StoreLock, String> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&self.lock_path)
            .map_err(|e| format!("cannot open {}: {e}", self.lock_path.display()))?;
        let lock = Flock::lock(file, FlockArg::LockExclusive)
            .map_err(|(_, e)| format!("cannot lock {}: {e}", self.lock_path.display()))?;
        Ok(StoreLock { _lock: lock })
    }

    pub fn stamp(&self) -> Option<Stamp> {
        let m = std::fs::metadata(&self.state_path).ok()?;
        Some(Stamp {
            dev: m.dev(),
            ino: m.ino(),
            mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
            len: m.len(),
        })
    }

    /// The saved state; `None` when there is none yet or it is from another format.
    pub fn read(&self) -> Result<Option<NodeState>, String> {
        let text = match std::fs::read_to_string(&self.state_path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("cannot read {}: {e}", self.state_path.display())),
        };
        match serde_json::from_str::<NodeState>(&text) {
            Ok(s) if s.format == STATE_FORMAT => Ok(Some(s)),
            Ok(_) => Ok(None),
            Err(e) => Err(format!(
                "{} is not a fake-nvml state file ({e}); delete it to start from the fixture",
                self.state_path.display()
            )),
        }
    }

    /// Replace the state file: temp file in the same directory, fsync, rename, fsync dir.
    pub fn write(&self, state: &NodeState) -> Result<(), String> {
        let text = serde_json::to_string_pretty(state).expect("state serializes");
        write_atomically(&self.state_path, text.as_bytes())
            .map_err(|e| format!("cannot write {}: {e}", self.state_path.display()))
    }
}

/// Write `bytes` to `path` so that readers see the old or the new content, never a mix.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    let dir = dir.unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp.{}", std::process::id()));
    let result = (|| {
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> NodeState {
        NodeState {
            format: STATE_FORMAT,
            next_serial: 3,
            gpus: vec![GpuState {
                uuid: "GPU-1".into(),
                mig_current: true,
                mig_pending: true,
                gpu_instances: vec![GiState {
                    id: 7,
                    profile_id: 19,
                    start: 0,
                    size: 1,
                    serial: 1,
                    compute_instances: vec![CiState {
                        id: 0,
                        profile_id: 0,
                        start: 0,
                        size: 1,
                        serial: 2,
                    }],
                }],
            }],
        }
    }

    #[test]
    fn round_trip_and_stamp_changes_on_write() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::beside(&dir.path().join("node.json"));
        assert_eq!(store.read().unwrap(), None);
        assert!(store.stamp().is_none());
        let _lock = store.lock().unwrap();
        store.write(&sample()).unwrap();
        let first = store.stamp().unwrap();
        assert_eq!(store.read().unwrap(), Some(sample()));
        let mut changed = sample();
        changed.gpus[0].mig_pending = false;
        store.write(&changed).unwrap();
        assert_ne!(store.stamp().unwrap(), first, "a rewrite must be visible");
        assert_eq!(store.read().unwrap(), Some(changed));
        // No temp files are left behind.
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(names.iter().all(|n| !n.contains(".tmp.")), "{names:?}");
    }

    #[test]
    fn garbage_state_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::beside(&dir.path().join("node.json"));
        std::fs::write(&store.state_path, "{not json").unwrap();
        let err = store.read().unwrap_err();
        assert!(err.contains("node.json.state.json"), "{err}");
    }
}
