//! Whether an Ultralytics run directory can be resumed, before the train
//! script hands `weights/last.pt` to `yolo train resume`.
//!
//! Two traps make this necessary (Ultralytics 8.4): resuming a *finished* run
//! does not refuse but starts a new default training (`data=coco8.yaml`,
//! 100 epochs, in `./runs/detect/train`), and `last.pt` is written with
//! `Path.write_bytes`, so a job killed mid-write leaves a truncated file.
//!
//! A checkpoint is a `torch.save` file, i.e. a zip archive; it is complete
//! when its end-of-central-directory record is there and every entry the
//! central directory lists starts where it says (a truncated file has
//! neither). The run is finished when `results.csv` has reached the
//! `epochs` of `args.yaml`. Reads are bounded: the central directory is read
//! from the end of the file, at most a few MiB.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use serde::Serialize;

/// What `yolo train resume` would find in a run directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum CheckpointState {
    /// No `weights/last.pt`: train from the start.
    Missing,
    /// `last.pt` is not a complete checkpoint (why): train from the start.
    Incomplete { why: String },
    /// Training reached its last epoch: nothing to resume.
    Finished { epoch: u32, epochs: u32 },
    /// Resume from here.
    Resumable {
        epoch: Option<u32>,
        epochs: Option<u32>,
    },
}

impl CheckpointState {
    /// One line for the job log; its first word is what the train script switches on.
    pub fn line(&self) -> String {
        match self {
            CheckpointState::Missing => "missing: no weights/last.pt".into(),
            CheckpointState::Incomplete { why } => format!("incomplete: {why}"),
            CheckpointState::Finished { epoch, epochs } => {
                format!("finished: epoch {epoch} of {epochs}")
            }
            CheckpointState::Resumable { epoch, epochs } => match (epoch, epochs) {
                (Some(e), Some(n)) => format!("resumable: after epoch {e} of {n}"),
                _ => "resumable".into(),
            },
        }
    }
}

const EOCD_SIG: u32 = 0x0605_4b50;
const ZIP64_LOCATOR_SIG: u32 = 0x0706_4b50;
const ZIP64_EOCD_SIG: u32 = 0x0606_4b50;
const CENTRAL_SIG: u32 = 0x0201_4b50;
const LOCAL_SIG: u32 = 0x0403_4b50;
/// The end record and its comment: at most 22 + 65535 bytes from the end.
const EOCD_SEARCH: u64 = 22 + 65_535;
/// A checkpoint lists a few hundred entries; refuse to read a directory larger than this.
const MAX_CENTRAL_DIRECTORY: u64 = 16 << 20;

fn u16_at(b: &[u8], i: usize) -> Option<u64> {
    Some(u64::from(u16::from_le_bytes(
        b.get(i..i + 2)?.try_into().ok()?,
    )))
}
fn u32_at(b: &[u8], i: usize) -> Option<u64> {
    Some(u64::from(u32::from_le_bytes(
        b.get(i..i + 4)?.try_into().ok()?,
    )))
}
fn u64_at(b: &[u8], i: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(i..i + 8)?.try_into().ok()?))
}

fn read_at(f: &mut File, offset: u64, len: u64) -> std::io::Result<Vec<u8>> {
    f.seek(SeekFrom::Start(offset))?;
    let mut buf = Vec::new();
    f.take(len).read_to_end(&mut buf)?;
    Ok(buf)
}

/// Check that `path` is a complete zip archive with a pickled object in it
/// (`…/data.pkl`, what `torch.save` writes). `Err` says what is wrong.
pub fn check_archive(path: &Path) -> Result<(), String> {
    let mut f = File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    let size = f.metadata().map_err(|e| e.to_string())?.len();
    if size < 22 {
        return Err(format!(
            "{} is {size} bytes, too short for a checkpoint",
            path.display()
        ));
    }
    let tail_start = size.saturating_sub(EOCD_SEARCH);
    let tail = read_at(&mut f, tail_start, size - tail_start).map_err(|e| e.to_string())?;
    let eocd = (0..=tail.len() - 22)
        .rev()
        .find(|&i| u32_at(&tail, i) == Some(u64::from(EOCD_SIG)))
        .ok_or_else(|| {
            format!(
                "{} has no zip end record: truncated or not a torch checkpoint",
                path.display()
            )
        })?;
    let mut entries = u16_at(&tail, eocd + 10).unwrap_or(0);
    let mut cd_size = u32_at(&tail, eocd + 12).unwrap_or(0);
    let mut cd_offset = u32_at(&tail, eocd + 16).unwrap_or(0);
    if cd_offset == 0xFFFF_FFFF || entries == 0xFFFF || cd_size == 0xFFFF_FFFF {
        // Zip64: the locator sits just before the end record.
        let loc = eocd
            .checked_sub(20)
            .filter(|&l| u32_at(&tail, l) == Some(u64::from(ZIP64_LOCATOR_SIG)))
            .ok_or("zip64 archive without its locator")?;
        let z_off = u64_at(&tail, loc + 8).ok_or("short zip64 locator")?;
        let z = read_at(&mut f, z_off, 56).map_err(|e| e.to_string())?;
        if u32_at(&z, 0) != Some(u64::from(ZIP64_EOCD_SIG)) {
            return Err("zip64 end record missing".into());
        }
        entries = u64_at(&z, 32).ok_or("short zip64 end record")?;
        cd_size = u64_at(&z, 40).ok_or("short zip64 end record")?;
        cd_offset = u64_at(&z, 48).ok_or("short zip64 end record")?;
    }
    if cd_size > MAX_CENTRAL_DIRECTORY || cd_offset.saturating_add(cd_size) > size {
        return Err(format!(
            "{}: the zip directory lies outside the file (truncated)",
            path.display()
        ));
    }
    let cd = read_at(&mut f, cd_offset, cd_size).map_err(|e| e.to_string())?;
    let (mut i, mut seen, mut has_pickle) = (0usize, 0u64, false);
    while seen < entries {
        if u32_at(&cd, i) != Some(u64::from(CENTRAL_SIG)) {
            return Err(format!("{}: damaged zip directory", path.display()));
        }
        let name_len = u16_at(&cd, i + 28).unwrap_or(0) as usize;
        let extra_len = u16_at(&cd, i + 30).unwrap_or(0) as usize;
        let comment_len = u16_at(&cd, i + 32).unwrap_or(0) as usize;
        let local = u32_at(&cd, i + 42).unwrap_or(u64::MAX);
        let name = cd.get(i + 46..i + 46 + name_len).unwrap_or(&[]);
        if name.ends_with(b"data.pkl") {
            has_pickle = true;
        }
        // 0xFFFFFFFF: the real offset is in the zip64 extra field; the end
        // record was found, so the file is not truncated there.
        if local != 0xFFFF_FFFF {
            let head = read_at(&mut f, local, 4).map_err(|e| e.to_string())?;
            if local >= cd_offset || u32_at(&head, 0) != Some(u64::from(LOCAL_SIG)) {
                return Err(format!(
                    "{}: an entry is missing (damaged or truncated)",
                    path.display()
                ));
            }
        }
        i += 46 + name_len + extra_len + comment_len;
        seen += 1;
    }
    if !has_pickle {
        return Err(format!(
            "{} is a zip archive but not a torch checkpoint (no data.pkl)",
            path.display()
        ));
    }
    Ok(())
}

/// `epochs: 4` from Ultralytics' `args.yaml`.
fn epochs_of(args_yaml: &str) -> Option<u32> {
    args_yaml.lines().find_map(|l| {
        let v = l.strip_prefix("epochs:")?.trim();
        v.parse().ok()
    })
}

/// The last epoch in `results.csv` (first column; a resumed run appends rows).
fn last_epoch(results_csv: &str) -> Option<u32> {
    results_csv
        .lines()
        .skip(1)
        .filter_map(|l| l.split(',').next()?.trim().parse::<f64>().ok())
        .map(|e| e as u32)
        .max()
}

/// Read at most `limit` bytes of a small text file; `None` when absent.
fn read_small(path: &Path, limit: u64) -> Option<String> {
    let f = File::open(path).ok()?;
    let mut s = String::new();
    f.take(limit).read_to_string(&mut s).ok()?;
    Some(s)
}

/// What a run directory (`<workdir>/train[-N]`) holds.
pub fn state(run_dir: &Path) -> CheckpointState {
    let last = run_dir.join("weights").join("last.pt");
    if !last.exists() {
        return CheckpointState::Missing;
    }
    let epochs = read_small(&run_dir.join("args.yaml"), 1 << 20).and_then(|a| epochs_of(&a));
    let epoch = read_small(&run_dir.join("results.csv"), 16 << 20).and_then(|r| last_epoch(&r));
    if let (Some(e), Some(n)) = (epoch, epochs) {
        if e >= n {
            return CheckpointState::Finished {
                epoch: e,
                epochs: n,
            };
        }
    }
    match check_archive(&last) {
        Ok(()) => CheckpointState::Resumable { epoch, epochs },
        Err(why) => CheckpointState::Incomplete { why },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal stored zip with the given entry names, as torch.save lays it out.
    fn zip(names: &[&str]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut central = Vec::new();
        for n in names {
            let off = out.len() as u32;
            let data = b"x";
            out.extend_from_slice(&LOCAL_SIG.to_le_bytes());
            out.extend_from_slice(&[20, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
            out.extend_from_slice(&0u32.to_le_bytes()); // crc (not checked)
            out.extend_from_slice(&(data.len() as u32).to_le_bytes());
            out.extend_from_slice(&(data.len() as u32).to_le_bytes());
            out.extend_from_slice(&(n.len() as u16).to_le_bytes());
            out.extend_from_slice(&0u16.to_le_bytes());
            out.extend_from_slice(n.as_bytes());
            out.extend_from_slice(data);
            central.extend_from_slice(&CENTRAL_SIG.to_le_bytes());
            central.extend_from_slice(&[20, 0, 20, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
            central.extend_from_slice(&0u32.to_le_bytes());
            central.extend_from_slice(&(data.len() as u32).to_le_bytes());
            central.extend_from_slice(&(data.len() as u32).to_le_bytes());
            central.extend_from_slice(&(n.len() as u16).to_le_bytes());
            central.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
            central.extend_from_slice(&off.to_le_bytes());
            central.extend_from_slice(n.as_bytes());
        }
        let cd_off = out.len() as u32;
        out.extend_from_slice(&central);
        out.extend_from_slice(&EOCD_SIG.to_le_bytes());
        out.extend_from_slice(&[0, 0, 0, 0]);
        out.extend_from_slice(&(names.len() as u16).to_le_bytes());
        out.extend_from_slice(&(names.len() as u16).to_le_bytes());
        out.extend_from_slice(&(central.len() as u32).to_le_bytes());
        out.extend_from_slice(&cd_off.to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out
    }

    fn run_dir(last: Option<&[u8]>, args: &str, results: &str) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("weights")).unwrap();
        if let Some(b) = last {
            std::fs::write(d.path().join("weights/last.pt"), b).unwrap();
        }
        std::fs::write(d.path().join("args.yaml"), args).unwrap();
        std::fs::write(d.path().join("results.csv"), results).unwrap();
        d
    }

    const HEADER: &str = "                  epoch,time,train/box_loss\n";

    #[test]
    fn a_complete_checkpoint_midway_is_resumable() {
        let z = zip(&["last/data.pkl", "last/data/0", "last/version"]);
        let d = run_dir(
            Some(&z),
            "task: detect\nepochs: 4\n",
            &format!("{HEADER}1,3.2,1.0\n2,6.1,0.9\n"),
        );
        assert_eq!(
            state(d.path()),
            CheckpointState::Resumable {
                epoch: Some(2),
                epochs: Some(4)
            }
        );
        assert_eq!(state(d.path()).line(), "resumable: after epoch 2 of 4");
    }

    #[test]
    fn a_finished_run_is_never_resumed() {
        let z = zip(&["last/data.pkl"]);
        let d = run_dir(Some(&z), "epochs: 2\n", &format!("{HEADER}1,3,1\n2,6,1\n"));
        assert_eq!(
            state(d.path()),
            CheckpointState::Finished {
                epoch: 2,
                epochs: 2
            }
        );
    }

    #[test]
    fn truncated_foreign_and_missing_checkpoints_are_told_apart() {
        let z = zip(&["last/data.pkl", "last/data/0"]);
        for cut in [z.len() - 1, z.len() / 2, 10] {
            let d = run_dir(Some(&z[..cut]), "epochs: 4\n", HEADER);
            assert!(
                matches!(state(d.path()), CheckpointState::Incomplete { .. }),
                "cut at {cut}: {:?}",
                state(d.path())
            );
        }
        let d = run_dir(Some(&zip(&["readme.txt"])), "epochs: 4\n", HEADER);
        let s = state(d.path());
        assert!(s.line().contains("not a torch checkpoint"), "{s:?}");
        let d = run_dir(Some(b"just some bytes, not a zip at all......."), "", "");
        assert!(matches!(
            state(d.path()),
            CheckpointState::Incomplete { .. }
        ));
        let d = run_dir(None, "", "");
        assert_eq!(state(d.path()), CheckpointState::Missing);
    }
}
