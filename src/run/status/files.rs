//! What the stage scripts and the trainer leave in a run directory: the
//! job-written start/end records, log tails, results and guard records
//! (`RunDir`, backed by the disk in `OnDisk`).

use super::*;

/// A record a stage script wrote (`start.json` or `end.json`).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct JobFileRecord {
    pub array_job_id: String,
    pub job_id: String,
    pub array_task: String,
    pub node: String,
    pub gpus: String,
    pub cuda_visible_devices: String,
    pub started: String,
    pub ended: String,
    pub exit_code: Option<i32>,
}

/// Start and end records of one task, keyed by `(stage, task)`.
pub type JobFiles = BTreeMap<(String, Option<u32>), (Option<JobFileRecord>, Option<JobFileRecord>)>;

/// Read every record under `<workdir>/state`. Unreadable files are skipped:
/// a record being written right now is simply not there yet.
pub fn read_job_files(workdir: &Path) -> JobFiles {
    let mut out: JobFiles = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(workdir.join(crate::rundir::layout::STATE)) else {
        return out;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let (key, is_end) = if let Some(k) = name.strip_suffix(crate::rundir::layout::START) {
            (k.to_string(), false)
        } else if let Some(k) = name.strip_suffix(crate::rundir::layout::END) {
            (k.to_string(), true)
        } else {
            continue;
        };
        let (stage, task) = match key.split_once('.') {
            Some((s, t)) => match t.parse::<u32>() {
                Ok(t) => (s.to_string(), Some(t)),
                Err(_) => continue,
            },
            None => (key.clone(), None),
        };
        // Records the jobs write: a few hundred bytes each.
        let Ok(text) = crate::fsutil::read_regular(&entry.path(), 1 << 20) else {
            continue;
        };
        let Ok(rec) = serde_json::from_str::<JobFileRecord>(&text) else {
            continue;
        };
        let slot = out.entry((stage, task)).or_default();
        if is_end {
            slot.1 = Some(rec);
        } else {
            slot.0 = Some(rec);
        }
    }
    out
}

/// What `compute` reads of a run directory besides the job records: the
/// training's `results.csv`, the tail of a stage's log, the memory guard's
/// records. One seam, so the state logic is pure: `of_run` reads the disk
/// (`OnDisk`), tests give what they want (`Nothing`, or their own).
pub trait RunDir {
    /// `<dir>/results.csv` (`dir` is `train` or `train-<task>`), parsed.
    fn results(&self, dir: &str) -> Option<Vec<crate::rundir::results::Epoch>>;
    /// The last 256 KiB of `logs/<log>`.
    fn log_tail(&self, log: &str) -> Option<String>;
    /// The memory guard's records (`state/<key>.guard.json`).
    fn guards(&self) -> BTreeMap<(String, Option<u32>), crate::rundir::guard::GuardRecord>;
    /// A search's trial's out-of-GPU-memory record (`state/train.<n>.oom.json`).
    fn trial_oom(&self, _trial: u32) -> Option<crate::rundir::search::OomRecord> {
        None
    }
}

/// A run directory on disk.
pub struct OnDisk<'a>(pub &'a Path);

impl RunDir for OnDisk<'_> {
    fn results(&self, dir: &str) -> Option<Vec<crate::rundir::results::Epoch>> {
        crate::rundir::results::read(&self.0.join(dir).join(crate::rundir::layout::RESULTS))
    }
    fn log_tail(&self, log: &str) -> Option<String> {
        crate::fsutil::read_tail(
            &self.0.join(crate::rundir::layout::LOGS).join(log),
            256 << 10,
        )
    }
    fn guards(&self) -> BTreeMap<(String, Option<u32>), crate::rundir::guard::GuardRecord> {
        crate::rundir::guard::read_records(self.0)
    }
    fn trial_oom(&self, trial: u32) -> Option<crate::rundir::search::OomRecord> {
        crate::rundir::search::read_oom(self.0, trial)
    }
}

/// A run directory with nothing in it (or none that can be read).
#[cfg(test)]
pub struct Nothing;

#[cfg(test)]
impl RunDir for Nothing {
    fn results(&self, _: &str) -> Option<Vec<crate::rundir::results::Epoch>> {
        None
    }
    fn log_tail(&self, _: &str) -> Option<String> {
        None
    }
    fn guards(&self) -> BTreeMap<(String, Option<u32>), crate::rundir::guard::GuardRecord> {
        BTreeMap::new()
    }
}

#[cfg(test)]
mod fifo_tests {

    /// A FIFO at a log's name (planted, or left by a tool) is no log: the
    /// read gives up at once instead of waiting for a writer for ever. The
    /// read runs on a thread so that a regression fails this test instead of
    /// hanging the suite.
    #[test]
    fn a_fifo_log_is_not_waited_on() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("train.out");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let path = fifo.clone();
        std::thread::spawn(move || tx.send(crate::fsutil::read_tail(&path, 1024)).unwrap());
        let got = rx
            .recv_timeout(std::time::Duration::from_secs(120))
            .expect("read_tail waited on a FIFO");
        assert_eq!(got, None);
        let log = dir.path().join("val.out");
        std::fs::write(&log, "a\nlast line\n").unwrap();
        assert_eq!(
            crate::fsutil::read_tail(&log, 10).as_deref(),
            Some("last line\n")
        );
    }
}
