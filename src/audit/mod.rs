//! The audit trail: one JSON line per state-changing command (submit, cancel,
//! resume, node-setup), appended under an exclusive lock so that concurrent
//! writers never interleave.

use std::fs::OpenOptions;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use nix::fcntl::{Flock, FlockArg};
use serde::Deserialize;

use crate::config::Site;

mod record;
pub mod syslog;

pub use record::AuditRecord;

/// `[paths]` of the site file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Paths {
    /// Where the audit log is appended (default `<state dir>/audit.log`).
    pub audit_log: Option<PathBuf>,
    /// A TrueType font the stages copy to `$YOLO_CONFIG_DIR/Ultralytics/Arial.ttf`,
    /// so Ultralytics does not try to download one (compute nodes are often offline).
    pub yolo_font: Option<PathBuf>,
    /// Shared pretrained weights: a spec's bare `yolov8n.pt` is taken from here.
    pub weights: Option<PathBuf>,
}

/// The audit log path: the site's `[paths] audit_log`, else under the state dir.
pub fn log_path(site: &Site) -> Result<PathBuf> {
    let paths: Paths = site.section("paths")?;
    match paths.audit_log {
        Some(p) => Ok(p),
        None => Ok(crate::rundir::manifest::state_dir()?.join("audit.log")),
    }
}

/// Where the records of state-changing commands go: the user's own log
/// (JSON lines) and, when the site's `[audit]` says so, syslog.
#[derive(Debug, Clone, Default)]
pub struct Trail {
    pub file: Option<PathBuf>,
    pub syslog: Option<syslog::Syslog>,
}

impl Trail {
    pub fn from_site(site: &Site) -> Result<Trail> {
        Ok(Trail {
            file: Some(log_path(site)?),
            syslog: syslog::Syslog::from_site(site)?,
        })
    }

    /// Write one record everywhere; what could not be written, as warnings
    /// (recording never fails the command it records).
    pub fn record(&self, record: &AuditRecord) -> Vec<String> {
        let mut problems = Vec::new();
        if let Some(path) = &self.file {
            if let Err(e) = append(path, record) {
                problems.push(format!("could not write the audit log: {e:#}"));
            }
        }
        if let Some(s) = &self.syslog {
            if let Err(e) = s.send(record) {
                problems.push(format!("could not send the audit record to syslog: {e:#}"));
            }
        }
        problems
    }
}

/// Append one record: open with O_APPEND, take an exclusive flock, write the
/// whole line in one call, flush.
pub fn append(path: &Path, record: &AuditRecord) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening audit log {}", path.display()))?;
    let mut locked = Flock::lock(file, FlockArg::LockExclusive)
        .map_err(|(_, e)| anyhow::anyhow!("locking audit log {}: {e}", path.display()))?;
    let mut line = serde_json::to_vec(record)?;
    line.push(b'\n');
    locked
        .write_all(&line)
        .with_context(|| format!("writing audit log {}", path.display()))?;
    locked.sync_data()?;
    Ok(())
}

/// Read every record; lines that do not parse are reported by number.
/// The longest audit line parsed (a record is a few hundred bytes); longer
/// lines are counted as bad, and read past without being kept.
const MAX_LINE: u64 = 64 * 1024;

pub fn read(path: &Path) -> Result<(Vec<AuditRecord>, Vec<usize>)> {
    use crate::fsutil::{Links, NotOpened};
    use std::io::Read;
    // Non-blocking open and a type check: a FIFO or /dev/zero named as the
    // log is refused, not waited on or read for ever.
    let file = match crate::fsutil::open_regular(path, Links::Follow) {
        Ok(f) => f,
        Err(e) if e.is_not_found() => return Ok((Vec::new(), Vec::new())),
        Err(e) if matches!(e.why, NotOpened::NotRegular) => {
            anyhow::bail!("audit log {} is not a regular file", path.display())
        }
        Err(e) => return Err(e).with_context(|| format!("reading audit log {}", path.display())),
    };
    let mut reader = std::io::BufReader::new(file);
    let mut records = Vec::new();
    let mut bad = Vec::new();
    let mut buf = Vec::new();
    for number in 1.. {
        buf.clear();
        let n = (&mut reader)
            .take(MAX_LINE + 1)
            .read_until(b'\n', &mut buf)?;
        if n == 0 {
            break;
        }
        if buf.len() as u64 > MAX_LINE && buf.last() != Some(&b'\n') {
            // Skip the rest of an over-long line, a chunk at a time.
            loop {
                buf.clear();
                let m = (&mut reader).take(MAX_LINE).read_until(b'\n', &mut buf)?;
                if m == 0 || buf.last() == Some(&b'\n') {
                    break;
                }
            }
            bad.push(number);
            continue;
        }
        let Ok(line) = std::str::from_utf8(&buf) else {
            bad.push(number);
            continue;
        };
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str(line) {
            Ok(r) => records.push(r),
            Err(_) => bad.push(number),
        }
    }
    Ok((records, bad))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn over_long_lines_and_odd_files_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let rec = AuditRecord::new("submit", Some("r"), vec![1], "ok");
        let mut text = serde_json::to_string(&rec).unwrap();
        text.push('\n');
        text.push_str(&"x".repeat(300_000));
        text.push('\n');
        text.push_str(&serde_json::to_string(&rec).unwrap());
        std::fs::write(&path, text).unwrap();
        let (records, bad) = read(&path).unwrap();
        assert_eq!(records.len(), 2);
        assert_eq!(bad, vec![2]);
        let e = read(Path::new("/dev/zero")).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
    }

    #[test]
    fn concurrent_writers_never_interleave() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let path = path.clone();
                std::thread::spawn(move || {
                    for i in 0..50 {
                        let mut r = AuditRecord::new(
                            "submit",
                            Some(&format!("run-{t}-{i}")),
                            vec![t, i],
                            "ok",
                        );
                        r.detail = Some("x".repeat(2000));
                        append(&path, &r).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let (records, bad) = read(&path).unwrap();
        assert!(bad.is_empty(), "corrupt lines: {bad:?}");
        assert_eq!(records.len(), 400);
    }
}
