//! `logs` as a library workflow: which file holds a stage's output, and
//! following it until the stage ends. The bytes go to a sink the caller
//! owns (the CLI's stdout), in bounded chunks, so a log of gigabytes never
//! sits in memory.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, Result};

use super::query;
use crate::error::invalid;
use crate::rundir::manifest::Manifest;
use crate::slurm::Slurm;

/// The most read from a log at once before it is handed on.
const CHUNK: u64 = 1 << 20;

/// The output file of `stage` (and `task` for a sweep) of a run.
pub fn log_path(manifest: &Manifest, stage: &str, task: Option<u32>) -> Result<PathBuf> {
    let record = manifest
        .stages
        .iter()
        .find(|s| s.stage == stage)
        .ok_or_else(|| {
            let names: Vec<&str> = manifest.stages.iter().map(|s| s.stage.as_str()).collect();
            invalid(format!(
                "run {} has no stage `{}`; it has {}",
                manifest.run_id,
                crate::text::shown(stage, crate::text::SHOWN_CHARS),
                names.join(", ")
            ))
        })?;
    let logs = manifest.workdir.join(crate::rundir::layout::LOGS);
    if record.tasks <= 1 {
        return Ok(logs.join(crate::rundir::layout::log_file(&record.stage, None)));
    }
    let task = task.ok_or_else(|| {
        invalid(format!(
            "stage {} is a sweep of {} variants: say which with --task N",
            record.stage, record.tasks
        ))
    })?;
    if task as usize >= record.tasks {
        return Err(invalid(format!(
            "stage {} has variants 0..{}",
            record.stage,
            record.tasks - 1
        )));
    }
    Ok(logs.join(crate::rundir::layout::log_file(&record.stage, Some(task))))
}

/// Hand everything in `path` from `offset` on to `sink`; the new offset, or
/// `None` when the file does not exist (yet). Only a regular file is read
/// (a FIFO there is refused, not waited on).
fn copy_from(
    path: &Path,
    offset: u64,
    sink: &mut dyn FnMut(&[u8]) -> Result<()>,
) -> Result<Option<u64>> {
    use crate::fsutil::{Links, NotOpened};
    let mut file = match crate::fsutil::open_regular(path, Links::Follow) {
        Ok(f) => f,
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) => {
            return Err(match e.why {
                NotOpened::Io(e) => anyhow!("reading {}: {e}", path.display()),
                _ => invalid(format!("{} is not a regular file", path.display())),
            })
        }
    };
    file.seek(SeekFrom::Start(offset))?;
    let mut at = offset;
    let mut buf = Vec::with_capacity(64 * 1024);
    loop {
        buf.clear();
        let n = (&mut file).take(CHUNK).read_to_end(&mut buf)?;
        if n == 0 {
            return Ok(Some(at));
        }
        at += n as u64;
        sink(&buf)?;
    }
}

/// Print a stage's output; with `follow`, keep printing what it writes until
/// the stage (or its task) is no longer queued or running.
pub fn show(
    slurm: &Slurm,
    manifest: &Manifest,
    stage: &str,
    task: Option<u32>,
    follow: bool,
    sink: &mut dyn FnMut(&[u8]) -> Result<()>,
) -> Result<()> {
    let path = log_path(manifest, stage, task)?;
    let mut offset = 0u64;
    let mut pause = Duration::from_millis(500);
    loop {
        match copy_from(&path, offset, sink)? {
            Some(at) => offset = at,
            None if !follow => {
                return Err(anyhow!(
                    "{} does not exist yet: the stage has not started",
                    path.display()
                ))
            }
            None => {}
        }
        if !follow {
            return Ok(());
        }
        let (st, _) = query::run_status(slurm, &mut manifest.clone());
        let done = st.stage(stage).is_some_and(|s| {
            let t = match task {
                Some(i) => s.tasks.iter().find(|t| t.task == Some(i)),
                None => s.tasks.first(),
            };
            t.is_some_and(|t| !t.state.is_active())
        });
        if done {
            // One last read for what was written before the end.
            copy_from(&path, offset, sink)?;
            return Ok(());
        }
        std::thread::sleep(pause);
        pause = (pause * 3 / 2).min(Duration::from_secs(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_in_chunks_from_an_offset_and_refuses_a_fifo() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("train.out");
        std::fs::write(&p, vec![b'x'; (CHUNK as usize) * 2 + 5]).unwrap();
        let mut chunks = Vec::new();
        let at = copy_from(&p, 3, &mut |b| {
            chunks.push(b.len());
            Ok(())
        })
        .unwrap();
        assert_eq!(at, Some(CHUNK * 2 + 5));
        assert_eq!(chunks, vec![CHUNK as usize, CHUNK as usize, 2]);
        assert_eq!(
            copy_from(&dir.path().join("none"), 0, &mut |_| Ok(())).unwrap(),
            None
        );
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert!(copy_from(&fifo, 0, &mut |_| Ok(())).is_err());
    }
}
