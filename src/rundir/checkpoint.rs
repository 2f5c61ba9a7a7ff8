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
    crate::fsutil::read_range(f, offset, len)
}

/// The path as a message shows it: escaped and bounded (a run directory's
/// name comes from the command line).
fn shown(path: &Path) -> String {
    crate::text::shown(&path.to_string_lossy(), 200)
}

/// Open `path` for reading without blocking (a FIFO planted at `last.pt`
/// would otherwise hang the caller) and only if it is a regular file (a
/// device or a sysfs file has no stable size to check).
fn open_regular(path: &Path) -> Result<(File, u64), String> {
    use crate::fsutil::{Links, NotOpened};
    let cannot = |e: &dyn std::fmt::Display| format!("cannot open {}: {e}", shown(path));
    let f = crate::fsutil::open_regular(path, Links::Follow).map_err(|e| match &e.why {
        NotOpened::NotRegular => format!("{} is not a regular file", shown(path)),
        NotOpened::Io(io) => cannot(io),
        _ => cannot(&e),
    })?;
    let size = f
        .metadata()
        .map_err(|e| format!("cannot read {}: {e}", shown(path)))?
        .len();
    Ok((f, size))
}

/// Check that `path` is a complete zip archive with a pickled object in it
/// (`…/data.pkl`, what `torch.save` writes). `Err` says what is wrong.
///
/// The file may change while it is read (Ultralytics rewrites `last.pt` by
/// truncating it first): every read is bounded, and a read that returns less
/// than the size the file had is an incomplete checkpoint, never an index
/// past the bytes read.
pub fn check_archive(path: &Path) -> Result<(), String> {
    let (mut f, size) = open_regular(path)?;
    if size < 22 {
        return Err(format!(
            "{} is {size} bytes, too short for a checkpoint",
            shown(path)
        ));
    }
    let tail_start = size.saturating_sub(EOCD_SEARCH);
    let tail = read_at(&mut f, tail_start, size - tail_start).map_err(|e| e.to_string())?;
    if (tail.len() as u64) < size - tail_start {
        return Err(format!(
            "{} gave fewer bytes than its size of {size}: it is being rewritten, or it is no checkpoint",
            shown(path)
        ));
    }
    let eocd = (0..=tail.len().saturating_sub(22))
        .rev()
        .find(|&i| u32_at(&tail, i) == Some(u64::from(EOCD_SIG)))
        .ok_or_else(|| {
            format!(
                "{} has no zip end record: truncated or not a torch checkpoint",
                shown(path)
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
            shown(path)
        ));
    }
    let cd = read_at(&mut f, cd_offset, cd_size).map_err(|e| e.to_string())?;
    let (mut i, mut seen, mut has_pickle) = (0usize, 0u64, false);
    while seen < entries {
        if u32_at(&cd, i) != Some(u64::from(CENTRAL_SIG)) {
            return Err(format!("{}: damaged zip directory", shown(path)));
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
                    shown(path)
                ));
            }
        }
        i += 46 + name_len + extra_len + comment_len;
        seen += 1;
    }
    if !has_pickle {
        return Err(format!(
            "{} is a zip archive but not a torch checkpoint (no data.pkl)",
            shown(path)
        ));
    }
    Ok(())
}

/// A small text file of the run directory, read without blocking and only
/// when it is a regular file of at most `limit` bytes; `None` otherwise.
fn read_small(path: &Path, limit: u64) -> Option<String> {
    crate::fsutil::read_regular(path, limit).ok()
}

/// What a run directory (`<workdir>/train[-N]`) holds.
pub fn state(run_dir: &Path) -> CheckpointState {
    let last = run_dir.join(super::layout::WEIGHTS_LAST);
    if !last.exists() {
        return CheckpointState::Missing;
    }
    let epochs = read_small(
        &run_dir.join(super::layout::ARGS),
        super::trained::SMALL_FILE_LIMIT,
    )
    .and_then(|a| {
        super::trained::parse_args_yaml(&a)
            .get("epochs")?
            .parse()
            .ok()
    });
    let epoch = read_small(
        &run_dir.join(super::layout::RESULTS),
        super::results::RESULTS_LIMIT,
    )
    .and_then(|r| super::results::last_epoch(&super::results::parse(&r)?));
    if let (Some(e), Some(n)) = (epoch, epochs) {
        if e == n {
            return CheckpointState::Finished {
                epoch: e,
                epochs: n,
            };
        }
        // No training Ultralytics ran writes past its last epoch: the files
        // disagree, and resuming could start the unrelated default training.
        if e > n {
            return CheckpointState::Incomplete {
                why: format!("results.csv reaches epoch {e}, past the {n} epochs of args.yaml"),
            };
        }
    }
    match check_archive(&last) {
        Ok(()) => CheckpointState::Resumable { epoch, epochs },
        Err(why) => CheckpointState::Incomplete { why },
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A minimal stored zip with the given entry names, as torch.save lays it out.
    pub(crate) fn zip(names: &[&str]) -> Vec<u8> {
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

    #[test]
    fn a_file_shorter_than_its_size_is_incomplete_not_a_spin() {
        // A sysfs file says 4096 bytes and reads a few: the same as a
        // last.pt truncated between the size and the read.
        let d = run_dir(None, "epochs: 4\n", HEADER);
        std::os::unix::fs::symlink(
            "/sys/devices/system/cpu/online",
            d.path().join("weights/last.pt"),
        )
        .unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let dir = d.path().to_path_buf();
        std::thread::spawn(move || tx.send(state(&dir)).unwrap());
        let s = rx
            .recv_timeout(std::time::Duration::from_secs(20))
            .expect("checkpoint state did not return");
        assert!(matches!(s, CheckpointState::Incomplete { .. }), "{s:?}");
    }

    #[test]
    fn fifos_are_refused_without_blocking() {
        for name in ["weights/last.pt", "results.csv", "args.yaml"] {
            let z = zip(&["last/data.pkl"]);
            let d = run_dir(Some(&z), "epochs: 4\n", &format!("{HEADER}1,3,1\n"));
            let at = d.path().join(name);
            std::fs::remove_file(&at).unwrap();
            nix::unistd::mkfifo(&at, nix::sys::stat::Mode::S_IRWXU).unwrap();
            let (tx, rx) = std::sync::mpsc::channel();
            let dir = d.path().to_path_buf();
            std::thread::spawn(move || tx.send(state(&dir)).unwrap());
            let s = rx
                .recv_timeout(std::time::Duration::from_secs(20))
                .unwrap_or_else(|_| panic!("a FIFO at {name} blocked"));
            if name == "weights/last.pt" {
                assert!(s.line().contains("not a regular file"), "{name}: {s:?}");
            } else {
                // The epoch count is unknown, so the checkpoint decides.
                assert!(
                    matches!(s, CheckpointState::Resumable { .. }),
                    "{name}: {s:?}"
                );
            }
        }
    }

    #[test]
    fn epochs_that_are_no_count_never_finish_a_run() {
        let z = zip(&["last/data.pkl"]);
        for bad in ["inf", "1e10", "NaN", "-1", "2.5", "4294967296"] {
            let d = run_dir(
                Some(&z),
                "epochs: 3\n",
                &format!("{HEADER}1,3,1\n{bad},6,1\n"),
            );
            assert_eq!(
                state(d.path()),
                CheckpointState::Resumable {
                    epoch: Some(1),
                    epochs: Some(3)
                },
                "epoch {bad}"
            );
        }
        let d = run_dir(Some(&z), "epochs: 3\n", &format!("{HEADER}7,3,1\n"));
        let s = state(d.path());
        assert!(
            s.line()
                .starts_with("incomplete: results.csv reaches epoch 7"),
            "{s:?}"
        );
    }

    #[test]
    fn a_checkpoint_truncated_while_it_is_checked_never_hangs() {
        // Ultralytics rewrites last.pt by truncate-then-write: check it
        // while another thread does exactly that, many times.
        let z = zip(&["last/data.pkl", "last/data/0"]);
        let d = run_dir(Some(&z), "epochs: 4\n", HEADER);
        let path = d.path().join("weights/last.pt");
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let (path, stop, z) = (path.clone(), stop.clone(), z.clone());
            std::thread::spawn(move || {
                use std::io::Write;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let mut f = std::fs::File::create(&path).unwrap();
                    for chunk in z.chunks(7) {
                        f.write_all(chunk).unwrap();
                    }
                }
            })
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let dir = d.path().to_path_buf();
        std::thread::spawn(move || {
            for _ in 0..2000 {
                let _ = state(&dir);
            }
            tx.send(()).unwrap();
        });
        let done = rx.recv_timeout(std::time::Duration::from_secs(60));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        writer.join().unwrap();
        done.expect("2000 checks beside a rewriting writer did not finish");
    }
}
