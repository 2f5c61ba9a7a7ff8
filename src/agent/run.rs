//! The agent's loop: sample, decide, act, publish, wait. Its effects: NVML
//! (through `nvml::memory`), the series, guard record and textfile (through
//! `fsutil`), the audit log, and signals to the trainer (`procs`). It prints
//! nothing: every line for the job log goes to the caller's `log`.
//!
//! Files, under `<workdir>/state/` (`<key>` is `train` or `train.3`):
//! * `<key>.memory.csv`: the series (`series::CSV_HEADER`), at most
//!   `series_max_samples` lines, rewritten atomically every few samples;
//! * `<key>.guard.json`: a `GuardRecord` once the guard warned or stopped;
//! * `<textfile_dir>/yolo_sched_<run>_<key>.prom`: the gauges, replaced
//!   atomically each sample and removed when the agent ends.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use chrono::Utc;
use serde::Serialize;

use super::devices::{Mapping, Target};
use super::metrics::{self, Gauges, Labels};
use super::policy::{gib, Breaker, Decision, GuardPolicy};
use super::procs;
use super::series::{Sample, Series};
use super::{AgentDuty, Event};
use crate::nvml::memory::JobDevice;
use crate::rundir::guard::{write_record, GuardRecord};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};

/// Everything one agent needs; the CLI fills it from flags, the environment
/// Slurm gives the job, the site file and the run's manifest.
#[derive(Debug, Clone)]
pub struct Options {
    pub workdir: PathBuf,
    pub run_id: String,
    pub stage: String,
    pub task: Option<u32>,
    /// The trainer: stopped by the guard; the agent ends when it is gone.
    pub pid: Option<i32>,
    /// The job's own devices (`devices::resolve`), or why they cannot be
    /// known; `Err` when `CUDA_VISIBLE_DEVICES` lists no device at all.
    pub devices: Result<Mapping, String>,
    pub library: OsString,
    pub policy: GuardPolicy,
    /// The job's share of a shared GPU (shard, time-slicing), when known.
    pub share: Option<f64>,
    /// The job's GPU is shared with other jobs (it holds shards, or a share
    /// was given), whether or not its share is known: only the job's own
    /// processes count then.
    pub shared: bool,
    /// `SLURM_JOB_ID` and `SLURM_ARRAY_JOB_ID` (or the job id), for the records.
    pub job_id: String,
    pub array_job_id: String,
    pub user: String,
    pub account: String,
    /// The Ultralytics run directory (`<workdir>/train`), for results.csv.
    pub save_dir: Option<PathBuf>,
    /// End when stdin reaches end of file (the train script holds its other end).
    pub stop_on_stdin_eof: bool,
    /// Stop after this many samples (tests, benchmarks); `None`: until the end.
    pub max_samples: Option<u64>,
    /// Where the audit record of a stop goes; `None`: nowhere.
    /// Where a guard stop is recorded (the user's audit log, syslog).
    pub audit: Option<crate::audit::Trail>,
    /// Write the series and the guard record (false: `--dry-run`, which also
    /// clears the textfile directory and the audit log and lets the guard only warn).
    pub write_files: bool,
    /// Record the job's measured need in its own comment for the site's
    /// accounting (`advise::need`): the Slurm clients to do it with, when
    /// the agent runs inside a Slurm job.
    pub carrier: Option<crate::slurm::Slurm>,
    /// A search's trial with `[tune] early_stop`: the rule and its peers.
    pub prune: Option<PruneSetup>,
}

/// What the agent of a search's trial needs for early stopping.
#[derive(Debug, Clone)]
pub struct PruneSetup {
    pub rule: crate::spec::EarlyStop,
    pub direction: crate::spec::Direction,
    /// The `results.csv` column.
    pub objective: String,
    /// The trial (its array task, `train-<trial>/`).
    pub trial: u32,
    /// The trials of its batch, itself included.
    pub batch: std::ops::Range<u32>,
    /// The epochs its `results.csv` had when this job started (its train
    /// script's `YOLO_SCHED_EPOCHS_BEFORE`): 0 for a new trial, more for one
    /// resumed from its checkpoint.
    pub epochs_before: u32,
}

impl Options {
    /// `train` or `train.3`, as the stage scripts name their records.
    pub fn key(&self) -> String {
        match self.task {
            Some(t) => format!("{}.{t}", self.stage),
            None => self.stage.clone(),
        }
    }
}

/// Why the agent ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EndReason {
    /// The trainer exited.
    TrainerGone,
    /// Its stdin closed: the train script is ending.
    ScriptEnded,
    /// TERM, INT or HUP (scancel, the job's end).
    Signalled,
    /// The guard stopped the trainer.
    Stopped,
    /// The search's early stopping stopped the trial's trainer.
    Pruned,
    /// `max_samples` reached.
    SampleLimit,
    /// The job's devices cannot be known and there is nothing else to do.
    Unwatched,
}

impl EndReason {
    /// Why, for the job log's last line.
    pub fn describe(self) -> &'static str {
        match self {
            EndReason::TrainerGone => "the trainer exited",
            EndReason::ScriptEnded => "the train script closed the agent's input (it is ending)",
            EndReason::Signalled => "a TERM, INT or HUP arrived (scancel or the job's end)",
            EndReason::Stopped => "the memory guard stopped the trainer",
            EndReason::Pruned => "the search's early stopping stopped the trial",
            EndReason::SampleLimit => "the sample limit (--samples) was reached",
            EndReason::Unwatched => {
                "the job's own devices cannot be known, so there is nothing to watch"
            }
        }
    }
}

/// The agent's own account of a run, for `--json` and the tests.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    /// How the job's devices were found, or why they cannot be known.
    pub mapping: String,
    pub device: String,
    pub device_name: String,
    pub is_mig: bool,
    pub samples: u64,
    pub read_errors: u64,
    pub decisions: Vec<Decision>,
    pub ended: EndReason,
    pub policy: GuardPolicy,
}

/// Read every device of the job; the fullest one's sample (by the job's use
/// where known, else the device's, as a share of its memory). One failing
/// read fails the whole sample: a device the guard cannot see is not "fine".
fn read_fullest(
    devices: &[JobDevice<'_>],
    filter: Option<&dyn Fn(u32) -> bool>,
) -> Result<(
    crate::nvml::memory::MemorySample,
    Vec<crate::nvml::memory::MemorySample>,
)> {
    let mut samples = Vec::with_capacity(devices.len());
    for d in devices {
        samples.push(d.read(filter)?);
    }
    let fullest =
        super::series::fullest(&samples).ok_or_else(|| anyhow::anyhow!("the job has no device"))?;
    Ok((fullest, samples))
}

/// What the job's comment last carried, for [`carrier_due`].
#[derive(Debug, Clone, Copy, PartialEq)]
struct Carried {
    peak_mib: u64,
    epochs: Option<u32>,
    /// Seconds since it was written.
    age_s: f64,
}

/// The least time between two writes of the job's comment while it runs:
/// one `scontrol update` a minute at most per job.
const CARRIER_EVERY_S: f64 = 60.0;

/// Whether the job's comment is due a new measurement (pure): nothing
/// written yet; at the end, anything changed; while running, at most once a
/// [`CARRIER_EVERY_S`], when the peak grew by 5 % and 64 MiB or an epoch
/// ended. A job cancelled, timed out or killed keeps the last one written
/// (Slurm refuses a comment once a job has ended).
fn carrier_due(last: Option<Carried>, peak_mib: u64, epochs: Option<u32>, at_end: bool) -> bool {
    if peak_mib == 0 {
        return false;
    }
    let Some(last) = last else {
        return true;
    };
    let grew = peak_mib >= last.peak_mib + 64 && peak_mib as f64 >= last.peak_mib as f64 * 1.05;
    let changed = peak_mib != last.peak_mib || epochs != last.epochs;
    if at_end {
        return changed;
    }
    last.age_s >= CARRIER_EVERY_S && (grew || epochs != last.epochs)
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The slice's profile from an NVML name ("NVIDIA A100-SXM4-40GB MIG 1g.5gb"
/// → "1g.5gb"), else the name.
fn slice_of(name: &str) -> String {
    match name.rsplit_once(" MIG ") {
        Some((_, profile)) => profile.to_string(),
        None => name.to_string(),
    }
}

/// results.csv, read again only when it changed.
struct Progress {
    path: Option<PathBuf>,
    seen: Option<(SystemTime, u64)>,
    value: (Option<u32>, Option<f64>),
}

impl Progress {
    fn read(&mut self) -> (Option<u32>, Option<f64>) {
        let Some(path) = &self.path else {
            return (None, None);
        };
        let Ok(meta) = std::fs::metadata(path) else {
            return self.value;
        };
        let stamp = (meta.modified().unwrap_or(UNIX_EPOCH), meta.len());
        if self.seen != Some(stamp) {
            self.seen = Some(stamp);
            if let Ok(text) = crate::fsutil::read_regular(path, 4 << 20) {
                self.value = metrics::latest_progress(&text);
            }
        }
        self.value
    }
}

/// A search's early stopping in the agent of one trial: its curve and its
/// peers' read from the run directory when its own `results.csv` grew,
/// decided by `prune::decide`.
struct Pruner {
    setup: PruneSetup,
    own: PathBuf,
    /// Epochs of its own curve at the last look.
    seen_epochs: usize,
    /// Successive halving's rungs passed.
    rungs: u32,
}

impl Pruner {
    /// The epochs the trial had before this job (`PruneSetup::epochs_before`:
    /// a job requeued, or moved to a bigger slice, resumes from its
    /// checkpoint) were looked at by its earlier job's agent: the rungs they
    /// reach count as passed and are not judged again
    /// (`prune::rungs_reached`).
    fn new(opts: &Options) -> Option<Pruner> {
        let setup = opts.prune.clone()?;
        Some(Pruner {
            own: opts
                .workdir
                .join(crate::rundir::layout::train_dir(Some(setup.trial)))
                .join("results.csv"),
            seen_epochs: setup.epochs_before as usize,
            rungs: super::prune::rungs_reached(&setup.rule, setup.epochs_before),
            setup,
        })
    }

    fn curve(&self, path: &Path) -> Vec<Option<f64>> {
        crate::fsutil::read_regular(path, 16 << 20)
            .map(|t| super::prune::objective_curve(&t, &self.setup.objective))
            .unwrap_or_default()
    }

    /// The peers: the other trials of the batch, and the trials of earlier
    /// batches the search has told (completed ones for the median rule,
    /// completed and pruned ones for halving), as `tune/trials.json` says.
    fn peers(&self, workdir: &Path) -> Vec<Vec<Option<f64>>> {
        let s = &self.setup;
        let mut trials: Vec<u32> = s.batch.clone().filter(|t| *t != s.trial).collect();
        if let Ok(Some(summary)) = crate::rundir::search::read_summary(workdir) {
            let counts = |state: &str| match s.rule.rule {
                crate::spec::PruneRule::Median => state == "complete",
                crate::spec::PruneRule::Halving => state == "complete" || state == "pruned",
            };
            trials.extend(
                summary
                    .trials
                    .iter()
                    .filter(|t| !s.batch.contains(&t.trial) && counts(&t.state))
                    .map(|t| t.trial),
            );
        }
        trials
            .into_iter()
            .map(|t| {
                self.curve(
                    &workdir
                        .join(crate::rundir::layout::train_dir(Some(t)))
                        .join("results.csv"),
                )
            })
            .filter(|c| !c.is_empty())
            .collect()
    }

    /// A look after a sample: a decision when its curve grew and it fell behind.
    fn look(&mut self, workdir: &Path) -> Option<Decision> {
        let own = self.curve(&self.own);
        if own.len() <= self.seen_epochs {
            // A training started again from epoch 1 is looked at anew.
            self.seen_epochs = own.len();
            return None;
        }
        self.seen_epochs = own.len();
        let peers = self.peers(workdir);
        let s = &self.setup;
        match super::prune::decide(&s.rule, s.direction, &own, &peers, self.rungs) {
            super::prune::Verdict::Go { rungs } => {
                self.rungs = rungs;
                None
            }
            super::prune::Verdict::Stop(prune) => Some(Decision::Prune {
                prune,
                objective: s.objective.clone(),
            }),
        }
    }
}

/// A trial's early-stopping record (`layout::prune_record`), read by the tell job.
#[derive(Debug, Serialize)]
struct PruneRecord<'a> {
    #[serde(flatten)]
    prune: &'a super::prune::Prune,
    objective: &'a str,
    message: String,
    job_id: &'a str,
    time: chrono::DateTime<Utc>,
}

/// TERM, INT and HUP (scancel, the job's end) become readable on this fd
/// instead of killing the agent, so it still removes its metrics file. `None`
/// where signalfd is not available: the default actions then apply.
fn catch_signals() -> Option<SignalFd> {
    let mut mask = SigSet::empty();
    for s in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        mask.add(s);
    }
    mask.thread_block().ok()?;
    SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC).ok()
}

/// Wait up to `d`. `Some(ScriptEnded)` when stdin reached its end (only with
/// `watch_stdin`), `Some(Signalled)` when a caught signal arrived.
fn wait(d: Duration, watch_stdin: bool, signals: Option<&SignalFd>) -> Option<EndReason> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let until = Instant::now() + d;
    let stdin = std::io::stdin();
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        let mut fds = Vec::with_capacity(2);
        if let Some(sig) = signals {
            fds.push(PollFd::new(sig.as_fd(), PollFlags::POLLIN));
        }
        if watch_stdin {
            fds.push(PollFd::new(stdin.as_fd(), PollFlags::POLLIN));
        }
        if fds.is_empty() {
            std::thread::sleep(left);
            return None;
        }
        let timeout = PollTimeout::try_from(left).unwrap_or(PollTimeout::MAX);
        match poll(&mut fds, timeout) {
            Ok(0) => return None,
            Ok(_) => {
                let ready = |i: usize| {
                    fds.get(i)
                        .and_then(PollFd::revents)
                        .is_some_and(|r| !r.is_empty())
                };
                let (sig_at, stdin_at) = match signals {
                    Some(_) => (Some(0), 1),
                    None => (None, 0),
                };
                if sig_at.is_some_and(ready) {
                    if let Some(sig) = signals {
                        if let Ok(Some(_)) = sig.read_signal() {
                            return Some(EndReason::Signalled);
                        }
                    }
                }
                if watch_stdin && ready(stdin_at) {
                    let mut buf = [0u8; 256];
                    match nix::unistd::read(stdin.as_fd(), &mut buf) {
                        Ok(0) => return Some(EndReason::ScriptEnded),
                        Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                        Err(_) => return Some(EndReason::ScriptEnded),
                    }
                }
            }
            Err(nix::errno::Errno::EINTR) => {}
            // No usable descriptors: fall back to sleeping.
            Err(_) => {
                std::thread::sleep(left);
                return None;
            }
        }
    }
}

/// Is the trainer still there? `Unknown` when no `--pid` was given: the
/// agent then ends only with the script, a signal or its sample limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Liveness {
    Alive,
    Gone,
    Unknown,
}

fn trainer(pid: Option<i32>) -> Liveness {
    match pid {
        Some(pid) if procs::alive(pid) => Liveness::Alive,
        Some(_) => Liveness::Gone,
        None => Liveness::Unknown,
    }
}

/// What the guard's decisions of one sample ask for (pure): the record's
/// new state, whether to stop now.
#[derive(Debug, Default, PartialEq)]
struct Verdict {
    stop: bool,
    /// Decisions that change the guard record (all but the end of warm-up).
    recorded: bool,
}

/// Fold one sample's decisions into the guard record and gauge state.
fn decide(decisions: &[Decision], record: &mut GuardRecord, guard_state: &mut u8) -> Verdict {
    let mut v = Verdict::default();
    for d in decisions {
        let line = d.describe();
        match d {
            Decision::WarmupOver { .. } => continue,
            // Not the memory guard's: its own record (`Pruner`), no gauge.
            Decision::Prune { .. } => {
                v.stop = true;
                continue;
            }
            Decision::Warn { .. } => {
                *guard_state = (*guard_state).max(1);
                record.warnings.push(line.clone());
                if record.action.is_empty() {
                    record.action = "warned".into();
                    record.message = line;
                }
            }
            Decision::Stop { may_stop, .. } => {
                if *may_stop {
                    *guard_state = 2;
                    record.action = "stopped".into();
                    v.stop = true;
                } else {
                    *guard_state = (*guard_state).max(1);
                    record.action = "would_stop".into();
                    record.warnings.push(line.clone());
                }
                record.message = line;
            }
        }
        v.recorded = true;
    }
    v
}

/// The memory guard's side of an agent: the job's devices and everything it
/// has seen of them.
struct Watch<'d> {
    devices: Vec<JobDevice<'d>>,
    /// Comma list of the devices, for the records.
    ids: String,
    shared: bool,
    series: Series,
    breaker: Breaker,
    progress: Progress,
    record: GuardRecord,
    series_path: PathBuf,
    record_path: PathBuf,
    textfile: Option<PathBuf>,
    labels: Labels,
    guard_state: u8,
    last_error: Option<String>,
    last_unattributed: Option<&'static str>,
    /// The metrics file's first failure is logged, not every one.
    metrics_failed: bool,
    last_flush: Instant,
    last_status: Instant,
    /// Per device: the peak bytes the job held, and what the device has.
    peaks: Vec<(u64, u64)>,
    /// Every sample so far was the job's own use (else no need is carried).
    peaks_own: bool,
    /// The job's comment's run tag (read once), what it last carried and
    /// when, and the failures to write it (logged once; three end it).
    carrier_tag: Option<String>,
    carried: Option<(Carried, Instant)>,
    carrier_failures: u32,
}

/// One agent: options, duties, the log, and (with a device) the watch. Each
/// pass of `run`'s loop is `sample`, `record`, `publish`, the duties, then
/// either `stop` or the wait; `finish` ends it.
struct Agent<'a, 'd> {
    opts: &'a Options,
    duties: &'a mut [Box<dyn AgentDuty>],
    log: &'a mut dyn FnMut(&str),
    watch: Option<Watch<'d>>,
    /// A search's trial with early stopping.
    pruner: Option<Pruner>,
    /// The early stop decided, when one was.
    pruned: Option<super::prune::Prune>,
    signals: Option<SignalFd>,
    outcome: Outcome,
    /// Passes of the loop: without a device to read, each counts as a
    /// sample for `--samples` (a look of early stopping, a duties' pass).
    passes: u64,
}

impl Agent<'_, '_> {
    /// One read of the job's devices into the series; what stands in for the
    /// job's own use when it cannot be known.
    fn sample(&mut self) -> Option<&'static str> {
        let w = self.watch.as_mut()?;
        let device = &w.devices[0];
        // On a shared GPU the job's use is its processes' (the trainer's
        // tree); a slice or a GPU of its own needs no walk of /proc.
        let job_pids: Option<BTreeSet<u32>> = match self.opts.pid {
            Some(pid) if w.shared => Some(procs::tree(pid)),
            _ => None,
        };
        let is_job = |pid: u32| job_pids.as_ref().is_some_and(|set| set.contains(&pid));
        let filter: Option<&dyn Fn(u32) -> bool> = match job_pids {
            Some(_) => Some(&is_job),
            None => None,
        };
        match read_fullest(&w.devices, filter) {
            Ok((m, all)) => {
                for (peak, s) in w.peaks.iter_mut().zip(&all) {
                    let c = super::policy::count(
                        device.is_mig,
                        w.shared,
                        s.device_used,
                        s.job_used,
                        s.others,
                        job_pids.is_some(),
                    );
                    w.peaks_own &= c.unattributed.is_none();
                    *peak = (peak.0.max(c.used), s.total);
                }
                w.last_error = None;
                self.outcome.samples += 1;
                let counted = super::policy::count(
                    device.is_mig,
                    w.shared,
                    m.device_used,
                    m.job_used,
                    m.others,
                    job_pids.is_some(),
                );
                if counted.unattributed != w.last_unattributed {
                    match counted.unattributed {
                        Some(why) => (self.log)(&format!(
                            "the job's own GPU memory cannot be known ({why}); the device's use stands in, and the guard warns but never stops on it"
                        )),
                        None if w.last_unattributed.is_some() => {
                            (self.log)("the job's own GPU memory is known again; the guard counts it")
                        }
                        None => {}
                    }
                    w.last_unattributed = counted.unattributed;
                }
                w.series.push(Sample {
                    t: unix_now(),
                    used: counted.used,
                    device_used: m.device_used,
                    total: m.total,
                    own: counted.unattributed.is_none(),
                });
                counted.unattributed
            }
            Err(e) => {
                self.outcome.read_errors += 1;
                let text = format!("{e:#}");
                if w.last_error.as_deref() != Some(text.as_str()) {
                    (self.log)(&format!(
                        "could not read the device memory: {text}; trying again"
                    ));
                    w.last_error = Some(text);
                }
                None
            }
        }
    }

    /// The guard's decisions, then (when the guard does not stop the job)
    /// early stopping's. True: stop now.
    fn record(&mut self, unattributed: Option<&'static str>) -> bool {
        self.record_guard(unattributed) || self.record_prune()
    }

    /// A search's early stopping after this sample: a `Decision::Prune`
    /// logged, written to the trial's record, and a stop.
    fn record_prune(&mut self) -> bool {
        let Some(d) = self
            .pruner
            .as_mut()
            .and_then(|p| p.look(&self.opts.workdir))
        else {
            return false;
        };
        let Decision::Prune { prune, objective } = &d else {
            return false;
        };
        let message = d.describe();
        (self.log)(&message);
        let mut scratch = GuardRecord::default();
        let mut state = 0;
        let verdict = match self.watch.as_mut() {
            Some(w) => decide(std::slice::from_ref(&d), &mut w.record, &mut w.guard_state),
            None => decide(std::slice::from_ref(&d), &mut scratch, &mut state),
        };
        if !self.opts.write_files {
            (self.log)("--dry-run: the trial is not stopped");
            self.outcome.decisions.push(d);
            return false;
        }
        {
            let path = self
                .opts
                .workdir
                .join(crate::rundir::layout::prune_record(self.opts.task));
            let record = PruneRecord {
                prune,
                objective,
                message,
                job_id: &self.opts.job_id,
                time: Utc::now(),
            };
            let text = serde_json::to_string_pretty(&record).unwrap_or_default() + "\n";
            let written = match path.parent() {
                Some(dir) => std::fs::create_dir_all(dir)
                    .with_context(|| format!("creating {}", dir.display()))
                    .and_then(|()| crate::fsutil::write_atomic(&path, text.as_bytes(), 0o644)),
                None => crate::fsutil::write_atomic(&path, text.as_bytes(), 0o644),
            };
            if let Err(e) = written {
                (self.log)(&format!(
                    "could not write the early-stopping record {}: {e:#}; the trial is not stopped",
                    path.display()
                ));
                return false;
            }
        }
        self.pruned = Some(prune.clone());
        self.outcome.decisions.push(d);
        verdict.stop
    }

    /// The guard's decisions on the series: logged, folded into the record
    /// (`decide`), which is written when it changed. True: stop now.
    fn record_guard(&mut self, unattributed: Option<&'static str>) -> bool {
        let p = &self.opts.policy;
        let Some(w) = self.watch.as_mut() else {
            return false;
        };
        let (epoch, _) = w.progress.read();
        let decisions = if p.enabled {
            w.breaker
                .observe(&w.series, epoch, unattributed.or(w.last_unattributed))
        } else {
            vec![]
        };
        for d in &decisions {
            (self.log)(&d.describe());
        }
        let verdict = decide(&decisions, &mut w.record, &mut w.guard_state);
        if verdict.recorded {
            if let Some(s) = w.series.last() {
                w.record.used_bytes = s.used;
                w.record.total_bytes = s.total;
            }
            w.record.time = Some(Utc::now());
            if self.opts.write_files {
                if let Err(e) = write_record(&w.record_path, &w.record) {
                    (self.log)(&format!("could not write the guard record: {e:#}"));
                }
            }
        }
        self.outcome.decisions.extend(decisions);
        verdict.stop
    }

    /// The gauges, the series file every 30 s (and at once on a stop), and a
    /// status line every `log_every_s`.
    fn publish(&mut self, stopping: bool) {
        let p = &self.opts.policy;
        let Some(w) = self.watch.as_mut() else {
            return;
        };
        let (epoch, map) = w.progress.read();
        if let (Some(path), Some(last)) = (&w.textfile, w.series.last()) {
            let gauges = Gauges {
                used_bytes: last.used,
                total_bytes: last.total,
                growth_bytes_per_second: w
                    .series
                    .rate_since(unix_now() - p.window_s)
                    .map(|r| r.bytes_per_s),
                epoch,
                map50_95: map,
                guard_state: w.guard_state,
            };
            if let Err(e) = crate::fsutil::write_atomic(
                path,
                metrics::render(&w.labels, &gauges).as_bytes(),
                0o644,
            ) {
                if !w.metrics_failed {
                    (self.log)(&format!("could not write the metrics file: {e:#}"));
                    w.metrics_failed = true;
                }
            }
        }
        if w.last_flush.elapsed() >= Duration::from_secs(30)
            || self.outcome.samples <= 1
            || stopping
        {
            if self.opts.write_files {
                flush(&w.series_path, &w.series, self.log);
            }
            w.last_flush = Instant::now();
        }
        if w.last_status.elapsed().as_secs_f64() >= p.log_every_s {
            w.last_status = Instant::now();
            if let Some(s) = w.series.last() {
                let rate = w.series.rate_since(s.t - p.window_s);
                (self.log)(&format!(
                    "memory {} of {} GiB, growth {} MB/min over the last {}: no action",
                    gib(s.used),
                    gib(s.total),
                    rate.map_or("unknown".to_string(), |r| format!(
                        "{:.0}",
                        r.bytes_per_s * 60.0 / 1e6
                    )),
                    super::policy::span(p.window_s)
                ));
            }
        }
    }

    /// The job's measured need into its own comment, for the site's
    /// accounting (`advise::need`), when due ([`carrier_due`]).
    fn carry(&mut self, at_end: bool) {
        let opts = self.opts;
        let (Some(slurm), Some(w)) = (&opts.carrier, self.watch.as_mut()) else {
            return;
        };
        if !w.peaks_own || w.carrier_failures >= 3 || opts.job_id.is_empty() {
            return;
        }
        const MIB: u64 = 1 << 20;
        let peak_mib = w.peaks.iter().map(|p| p.0.div_ceil(MIB)).max().unwrap_or(0);
        let (epochs, _) = w.progress.read();
        let last = w.carried.map(|(c, at)| Carried {
            age_s: at.elapsed().as_secs_f64(),
            ..c
        });
        if !carrier_due(last, peak_mib, epochs, at_end) {
            return;
        }
        let device = &w.devices[0];
        let slice = if device.is_mig {
            slice_of(&device.name)
        } else {
            crate::gres::render::gpu_type_name(&device.name)
        };
        let m = crate::advise::need::Measurement {
            job: opts.job_id.clone(),
            slice,
            epochs: epochs.map(u64::from),
            devices: w
                .peaks
                .iter()
                .map(|(p, t)| (p.div_ceil(MIB).min(t / MIB), t / MIB))
                .collect(),
        };
        let tag = match &w.carrier_tag {
            Some(t) => Ok(t.clone()),
            None => crate::slurm::control::job_comment(slurm, &opts.job_id)
                .map(|c| c.unwrap_or_default()),
        };
        let result = tag.and_then(|tag| {
            let comment = crate::advise::need::with_measurement(&tag, &m);
            crate::slurm::control::set_comment(slurm, &opts.job_id, &comment)?;
            w.carrier_tag = Some(tag);
            Ok(comment)
        });
        match result {
            Ok(comment) => {
                w.carried = Some((
                    Carried {
                        peak_mib,
                        epochs,
                        age_s: 0.0,
                    },
                    Instant::now(),
                ));
                if at_end || last.is_none() {
                    (self.log)(&format!(
                        "recorded in the job's comment for the site's accounting: {}",
                        crate::text::shown(&comment, 200)
                    ));
                }
            }
            Err(e) => {
                w.carrier_failures += 1;
                if w.carrier_failures == 1 {
                    (self.log)(&format!(
                        "could not record the measured GPU memory in the job's comment ({}); \
                         the site's `yolo-sched advise` plans this job from the type it asked for",
                        crate::text::shown(&format!("{e:#}"), 300)
                    ));
                }
            }
        }
    }

    /// The periodic duties (the backup).
    fn tick_duties(&mut self) {
        let now = SystemTime::now();
        for duty in self.duties.iter_mut() {
            for e in duty.tick(now) {
                log_event(duty.name(), &e, self.log);
            }
        }
    }

    /// The guard's stop: the trainer and every rank below it, the record,
    /// the audit trail.
    fn stop(&mut self) {
        let opts = self.opts;
        if let Some(prune) = &self.pruned {
            match opts.pid {
                Some(pid) => {
                    let how = procs::stop(pid, Duration::from_secs_f64(opts.policy.grace_s));
                    (self.log)(&format!(
                        "trainer (pid {pid}) {}: the trial ends at epoch {}, its slice is freed",
                        match how {
                            procs::Stopped::Terminated => "stopped by TERM",
                            procs::Stopped::Killed => "killed after the grace period",
                            procs::Stopped::Gone => "had already exited",
                        },
                        prune.epoch
                    ));
                }
                None => (self.log)("no trainer pid was given (--pid): nothing to stop"),
            }
            if let Some(trail) = &opts.audit {
                let mut rec = crate::audit::AuditRecord::new(
                    "tune-prune",
                    Some(&opts.run_id),
                    opts.job_id.parse().ok().into_iter().collect(),
                    "ok",
                );
                rec.detail = Some(format!(
                    "{}: {} rule at epoch {}",
                    opts.key(),
                    prune.rule.name(),
                    prune.epoch
                ));
                for problem in trail.record(&rec) {
                    (self.log)(&problem);
                }
            }
            return;
        }
        let Some(w) = self.watch.as_mut() else {
            return;
        };
        match opts.pid {
            Some(pid) => {
                let how = procs::stop(pid, Duration::from_secs_f64(opts.policy.grace_s));
                let word = serde_json::to_value(how)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default();
                (self.log)(&format!(
                    "trainer (pid {pid}) {}; `yolo-sched resume {}` continues from its last checkpoint",
                    match how {
                        procs::Stopped::Terminated => "stopped by TERM",
                        procs::Stopped::Killed => "killed after the grace period",
                        procs::Stopped::Gone => "had already exited",
                    },
                    opts.run_id
                ));
                w.record.stopped = Some(word);
                if opts.write_files {
                    let _ = write_record(&w.record_path, &w.record);
                }
            }
            None => (self.log)("no trainer pid was given (--pid): nothing to stop"),
        }
        if let Some(trail) = &opts.audit {
            let mut rec = crate::audit::AuditRecord::new(
                "guard-stop",
                Some(&opts.run_id),
                opts.job_id.parse().ok().into_iter().collect(),
                "ok",
            );
            rec.detail = Some(format!("{}: {}", opts.key(), w.record.message));
            for problem in trail.record(&rec) {
                (self.log)(&problem);
            }
        }
    }

    /// Whether the agent ends before its next sample, and why; else waits
    /// one interval (ended early by stdin's end or a signal).
    fn ended(&mut self) -> Option<EndReason> {
        // Failed reads count too: with every read failing, `--samples N`
        // still ends after N tries.
        self.passes += 1;
        let done = if self.watch.is_some() {
            self.outcome.samples + self.outcome.read_errors
        } else {
            self.passes
        };
        if self.opts.max_samples.is_some_and(|m| done >= m) {
            return Some(EndReason::SampleLimit);
        }
        if trainer(self.opts.pid) == Liveness::Gone {
            return Some(EndReason::TrainerGone);
        }
        let interval = Duration::from_secs_f64(self.opts.policy.interval_s);
        wait(interval, self.opts.stop_on_stdin_eof, self.signals.as_ref())
    }

    /// The loop, until the trainer or the script ends, a signal, the guard's
    /// stop or the sample limit.
    fn run(&mut self) {
        self.outcome.ended = loop {
            let unattributed = self.sample();
            let stop = self.record(unattributed);
            self.publish(stop);
            self.carry(stop);
            self.tick_duties();
            if stop {
                self.stop();
                break if self.pruned.is_some() {
                    EndReason::Pruned
                } else {
                    EndReason::Stopped
                };
            }
            if let Some(why) = self.ended() {
                break why;
            }
        };
    }

    /// The series' last write, the duties' last pass, the reason in the log,
    /// and the metrics file removed.
    fn finish(mut self) -> Outcome {
        self.carry(true);
        if let (Some(w), true) = (&self.watch, self.opts.write_files) {
            flush(&w.series_path, &w.series, self.log);
        }
        for duty in self.duties.iter_mut() {
            for e in duty.finish() {
                log_event(duty.name(), &e, self.log);
            }
        }
        (self.log)(&format!(
            "ending after {} sample(s) and {} failed read(s): {}",
            self.outcome.samples,
            self.outcome.read_errors,
            self.outcome.ended.describe()
        ));
        if let Some(path) = self.watch.as_ref().and_then(|w| w.textfile.as_ref()) {
            match std::fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => (self.log)(&format!("could not remove {}: {e}", path.display())),
            }
        }
        self.outcome
    }
}

/// Run the agent until the trainer ends, the script closes stdin, the guard
/// stops the trainer, or `max_samples`. An error means it could not start
/// (no NVML, no such device); a failing read later is logged and retried.
/// Without a device (NVML missing, or a trainer already gone) the same loop
/// runs the duties alone, when there are any.
pub fn run(
    opts: &Options,
    duties: &mut [Box<dyn AgentDuty>],
    log: &mut dyn FnMut(&str),
) -> Result<Outcome> {
    let mut outcome = Outcome {
        mapping: match &opts.devices {
            Ok(Mapping::Known { how, .. }) => how.clone(),
            Ok(Mapping::Unknown { why }) => format!("unknown: {why}"),
            Err(e) => e.clone(),
        },
        device: String::new(),
        device_name: String::new(),
        is_mig: false,
        samples: 0,
        read_errors: 0,
        decisions: vec![],
        ended: EndReason::TrainerGone,
        policy: opts.policy.clone(),
    };
    // A trainer already gone (or a zombie) is no job to watch: say so rather
    // than end after one sample without a word. The duties still run once:
    // a trainer that ended before the agent started may have left a
    // checkpoint that only this last backup saves.
    if trainer(opts.pid) == Liveness::Gone {
        let why = format!(
            "the trainer (pid {}) is not running: it already exited, or it is a zombie its parent has not reaped",
            opts.pid.unwrap_or_default()
        );
        if duties.is_empty() {
            anyhow::bail!(why);
        }
        log(&format!(
            "{why}; the memory guard has nothing to watch, {} run(s) once",
            duty_names(duties)
        ));
        let mut agent = Agent {
            opts,
            duties,
            log,
            watch: None,
            pruner: Pruner::new(opts),
            pruned: None,
            signals: catch_signals(),
            outcome,
            passes: 0,
        };
        agent.run();
        return Ok(agent.finish());
    }
    // Devices the job may not hold are never read: where its own cannot be
    // known, the guard reads nothing, warns once and never stops.
    let targets = match &opts.devices {
        Ok(Mapping::Known { targets, how }) => {
            log(&format!("the job's device(s): {how}"));
            Ok(targets)
        }
        Err(e) => Err(anyhow::anyhow!("{e}")),
        Ok(Mapping::Unknown { why }) => {
            log(&format!(
                "warning: the job's own GPU device(s) cannot be known: {why}; the memory guard reads no device and never stops this job{}",
                if duties.is_empty() {
                    String::new()
                } else {
                    format!(" ({} still run(s))", duty_names(duties))
                }
            ));
            let mut agent = Agent {
                opts,
                duties,
                log,
                watch: None,
                pruner: Pruner::new(opts),
                pruned: None,
                signals: catch_signals(),
                outcome,
                passes: 0,
            };
            if agent.duties.is_empty() && agent.pruner.is_none() {
                agent.outcome.ended = EndReason::Unwatched;
            } else {
                agent.run();
            }
            return Ok(agent.finish());
        }
    };
    // The devices borrow the library handle, so both live in this frame.
    let nvml = targets.and_then(|t| Ok((t, crate::nvml::open(&opts.library)?)));
    let opened = nvml
        .as_ref()
        .map_err(|e| anyhow::anyhow!("{e:#}"))
        .and_then(|(targets, nvml)| {
            targets
                .iter()
                .map(|t| open_target(nvml, t))
                .collect::<Result<Vec<_>>>()
        });
    let watch = match opened {
        Ok(devices) => Some(watch(opts, devices, log)?),
        // Without NVML there is no guard, but the other duties (the backup)
        // still run for the trainer's lifetime.
        Err(e) if !duties.is_empty() || opts.prune.is_some() => {
            log(&format!(
                "cannot watch GPU memory ({e:#}); the memory guard is off, {} still run(s)",
                if duties.is_empty() {
                    "early stopping".to_string()
                } else {
                    duty_names(duties)
                }
            ));
            None
        }
        Err(e) => return Err(e),
    };
    if let Some(w) = &watch {
        outcome.device = w.ids.clone();
        outcome.device_name = w.devices[0].name.clone();
        outcome.is_mig = w.devices[0].is_mig;
    }
    let mut agent = Agent {
        opts,
        duties,
        log,
        watch,
        pruner: Pruner::new(opts),
        pruned: None,
        signals: catch_signals(),
        outcome,
        passes: 0,
    };
    agent.run();
    Ok(agent.finish())
}

/// The guard's state for the opened devices, its files, and the first log line.
fn watch<'d>(
    opts: &Options,
    devices: Vec<JobDevice<'d>>,
    log: &mut dyn FnMut(&str),
) -> Result<Watch<'d>> {
    let p = &opts.policy;
    // Several GPUs of one node (Ultralytics' DDP): every device is read, and
    // the fullest stands for the job, since one rank out of memory ends the
    // training; a stop stops the trainer with every rank below it.
    let device = &devices[0];
    let ids = devices
        .iter()
        .map(|d| d.id.to_string())
        .collect::<Vec<_>>()
        .join(",");
    if devices.len() > 1 {
        log(&format!(
            "the job holds {} devices ({ids}); the guard reads each and counts the fullest, and a stop ends every rank",
            devices.len()
        ));
    }
    let key = opts.key();
    let state = opts.workdir.join(crate::rundir::layout::STATE);
    if opts.write_files {
        std::fs::create_dir_all(&state).with_context(|| format!("creating {}", state.display()))?;
    }
    let share = if device.is_mig { None } else { opts.share };
    let shared = !device.is_mig && (opts.shared || share.is_some());
    log(&format!(
        "watching {} ({}, {}){}{}; every {} s: warn at {:.0}%, stop on growth over {} MB/min sustained for {} s after {} warm-up epoch(s) (at most {} s), grace {} s{}{}",
        device.id,
        device.name,
        if device.is_mig { "MIG slice" } else { "whole GPU" },
        share.map(|s| format!(", job's share {:.0}%", s * 100.0)).unwrap_or_default(),
        if shared && share.is_none() {
            ", shared with other jobs (share unknown: the site's [guard] shards_per_gpu is not set); only the job's own processes count"
        } else {
            ""
        },
        p.interval_s,
        p.warn_fraction * 100.0,
        p.growth_mb_per_min,
        p.window_s,
        p.warmup_epochs,
        p.warmup_max_s,
        p.grace_s,
        if p.enabled { "" } else { "; the guard is off for this job (metrics only)" },
        if p.may_stop { "" } else { "; the site lets it only warn" },
    ));
    Ok(Watch {
        labels: Labels {
            run: opts.run_id.clone(),
            stage: opts.stage.clone(),
            task: opts.task.map(|t| t.to_string()).unwrap_or_default(),
            user: opts.user.clone(),
            account: opts.account.clone(),
            slice: slice_of(&device.name),
        },
        record: GuardRecord {
            array_job_id: opts.array_job_id.clone(),
            job_id: opts.job_id.clone(),
            device: format!("{ids} ({})", device.name),
            ..GuardRecord::default()
        },
        series_path: opts
            .workdir
            .join(crate::rundir::layout::memory_series(&opts.stage, opts.task)),
        record_path: opts
            .workdir
            .join(crate::rundir::layout::guard_record(&opts.stage, opts.task)),
        textfile: p
            .textfile_dir
            .as_ref()
            .map(|d| d.join(metrics::file_name(&opts.run_id, &key))),
        series: Series::new(p.series_max_samples),
        breaker: Breaker::new(p.clone(), share, unix_now()),
        progress: Progress {
            path: opts
                .save_dir
                .as_ref()
                .map(|d| d.join(crate::rundir::layout::RESULTS)),
            seen: None,
            value: (None, None),
        },
        ids,
        shared,
        guard_state: 0,
        last_error: None,
        last_unattributed: None,
        metrics_failed: false,
        last_flush: Instant::now(),
        last_status: Instant::now(),
        peaks: vec![(0, 0); devices.len()],
        devices,
        peaks_own: true,
        carrier_tag: None,
        carried: None,
        carrier_failures: 0,
    })
}

/// Open one of the job's devices.
fn open_target<'d>(nvml: &'d nvml_wrapper::Nvml, target: &Target) -> Result<JobDevice<'d>> {
    match target {
        Target::Id(id) => JobDevice::open(nvml, id),
        Target::Gpu { minor } => JobDevice::open_gpu(nvml, *minor),
        Target::Mig { minor, gi, ci } => JobDevice::open_mig(nvml, *minor, *gi, *ci),
    }
}

fn duty_names(duties: &[Box<dyn AgentDuty>]) -> String {
    duties
        .iter()
        .map(|d| d.name())
        .collect::<Vec<_>>()
        .join(", ")
}

fn log_event(name: &str, e: &Event, log: &mut dyn FnMut(&str)) {
    match e {
        Event::Info(t) => log(&format!("{name}: {t}")),
        Event::Warning(t) => log(&format!("{name}: warning: {t}")),
    }
}

fn flush(path: &Path, series: &Series, log: &mut dyn FnMut(&str)) {
    if let Err(e) = crate::fsutil::write_atomic(path, series.to_csv().as_bytes(), 0o644) {
        log(&format!("could not write the memory series: {e:#}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::policy::StopCause;

    /// `decide` is the guard's verdict without effects: a warning marks the
    /// record once, a stop the site allows ends the training, one it does
    /// not only says it would have.
    #[test]
    fn decisions_fold_into_the_record_and_the_verdict() {
        let warn = Decision::Warn {
            used: 9,
            limit: 10,
            fraction: 0.9,
            warn_fraction: 0.85,
            of_share: false,
        };
        let mut record = GuardRecord::default();
        let mut state = 0;
        let v = decide(std::slice::from_ref(&warn), &mut record, &mut state);
        assert_eq!(
            v,
            Verdict {
                stop: false,
                recorded: true
            }
        );
        assert_eq!((record.action.as_str(), state), ("warned", 1));
        let stop = |may_stop| Decision::Stop {
            cause: StopCause::Growth {
                mb_per_min: 900.0,
                for_s: 120.0,
                used: 9,
                total: 10,
                limit_mb_per_min: 500.0,
            },
            may_stop,
            unattributed: None,
        };
        let v = decide(&[stop(false)], &mut record, &mut state);
        assert!(!v.stop);
        assert_eq!((record.action.as_str(), state), ("would_stop", 1));
        let v = decide(&[stop(true)], &mut record, &mut state);
        assert!(v.stop);
        assert_eq!((record.action.as_str(), state), ("stopped", 2));
        assert_eq!(record.warnings.len(), 2, "{record:?}");
        // A search's early stop: the trainer stops, the memory guard's
        // record (which on_oom reads) is left as it was.
        let mut clean = GuardRecord::default();
        let mut state = 0;
        let prune = Decision::Prune {
            prune: crate::agent::prune::Prune {
                rule: crate::spec::PruneRule::Median,
                epoch: 2,
                value: 0.1,
                reference: 0.3,
                compared: 2,
                kept: None,
            },
            objective: "metrics/mAP50-95(B)".into(),
        };
        let v = decide(std::slice::from_ref(&prune), &mut clean, &mut state);
        assert_eq!(
            v,
            Verdict {
                stop: true,
                recorded: false
            }
        );
        assert_eq!((clean.action.as_str(), state), ("", 0));
        assert!(prune.describe().starts_with("stopped early (median rule)"));
        let json = serde_json::to_value(&prune).unwrap();
        assert_eq!(
            (&json["decision"], &json["rule"], &json["epoch"]),
            (
                &serde_json::json!("prune"),
                &serde_json::json!("median"),
                &serde_json::json!(2)
            )
        );
    }

    /// The comment is written once a peak is known, then at most once a
    /// minute on real growth or a new epoch, and at the end when anything
    /// changed.
    #[test]
    fn the_comment_is_due_on_first_peak_growth_epochs_and_the_end() {
        let last = |peak_mib, epochs, age_s| {
            Some(Carried {
                peak_mib,
                epochs,
                age_s,
            })
        };
        assert!(!carrier_due(None, 0, None, false), "nothing measured yet");
        assert!(!carrier_due(None, 0, None, true));
        assert!(carrier_due(None, 900, None, false));
        // Growth under 5 % or 64 MiB, or too soon, waits.
        assert!(!carrier_due(
            last(1000, Some(1), 120.0),
            1040,
            Some(1),
            false
        ));
        assert!(!carrier_due(
            last(10000, Some(1), 120.0),
            10400,
            Some(1),
            false
        ));
        assert!(!carrier_due(
            last(1000, Some(1), 30.0),
            3000,
            Some(2),
            false
        ));
        assert!(carrier_due(
            last(1000, Some(1), 120.0),
            1100,
            Some(1),
            false
        ));
        assert!(carrier_due(last(1000, Some(1), 61.0), 1000, Some(2), false));
        // At the end: whatever changed, at once; nothing new, nothing.
        assert!(carrier_due(last(1000, Some(1), 1.0), 1001, Some(1), true));
        assert!(carrier_due(last(1000, Some(1), 1.0), 1000, Some(2), true));
        assert!(!carrier_due(last(1000, Some(2), 1.0), 1000, Some(2), true));
    }

    #[test]
    fn slices_are_named_by_their_profile() {
        assert_eq!(slice_of("NVIDIA A100-SXM4-40GB MIG 1g.5gb"), "1g.5gb");
        assert_eq!(slice_of("NVIDIA A100-SXM4-40GB"), "NVIDIA A100-SXM4-40GB");
    }
}
