//! The submission journal: how a submission killed half-way is found and
//! undone by the next command.
//!
//! Before its first `sbatch`, a submission (or a resume) writes a journal
//! entry under `$XDG_STATE_HOME/yolo-sched/submissions/`, with a token that
//! is unique to it, its process and host, and its phase. Every job it submits
//! carries the token in `--comment` (`yolo-sched:RUN:TOKEN:STAGE`), so the job
//! can be found in the queue even when `sbatch` died before printing its id.
//! The entry is removed when the chain is released and recorded.
//!
//! An entry whose process is gone (same host, the pid is dead or is another
//! process now) belongs to an interrupted submission. [`recover`] then asks
//! `squeue` once for the user's jobs carrying that token and:
//! - before the release (`submitting`, `recorded`): cancels the held jobs and,
//!   for a new run, removes the manifest and index entry it may have written,
//!   so the workdir can be submitted again;
//! - after the release began (some of its jobs are no longer held): releases
//!   the rest, so the run goes on as submitted.
//!
//! Run commands (`submit`, `resume`, `status`, `list`, `watch`, `cancel`) call
//! it first; `yolo-sched gc` calls it on demand.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::slurm::comment::{comment, parse_comment, COMMENT_PREFIX};
use crate::slurm::{squeue, Slurm};

/// The biggest journal entry read (a few hundred bytes in practice).
const MAX_ENTRY: u64 = 1 << 20;

/// How far a submission got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// `sbatch` calls under way; every job is held.
    Submitting,
    /// Every job accepted and the manifest written; not yet released.
    Recorded,
    /// Released (the entry is about to be removed).
    Released,
}

/// New run or another attempt of an existing one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Purpose {
    Submit,
    Resume,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Entry {
    pub token: String,
    pub purpose: Purpose,
    pub run_id: String,
    pub workdir: PathBuf,
    pub host: String,
    pub pid: u32,
    /// The process's start time in clock ticks since boot (`/proc/PID/stat`
    /// field 22), so a reused pid is not taken for the submitter.
    pub pid_start: Option<u64>,
    pub started_at: DateTime<Utc>,
    pub phase: Phase,
    /// Job ids `sbatch` answered with so far.
    pub jobs: Vec<u64>,
}

/// The journal entry of the submission this process is making.
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    pub entry: Entry,
}

pub fn journal_dir() -> Result<PathBuf> {
    Ok(crate::rundir::manifest::state_dir()?.join("submissions"))
}

impl Journal {
    /// Write a new entry before anything is submitted. Failing here is
    /// failing before the first change.
    pub fn begin(purpose: Purpose, run_id: &str, workdir: &Path) -> Result<Journal> {
        let dir = journal_dir()?;
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let token = crate::id::random_hex(8);
        let entry = Entry {
            token: token.clone(),
            purpose,
            run_id: run_id.to_string(),
            workdir: workdir.to_path_buf(),
            host: crate::identity::host_name(),
            pid: std::process::id(),
            pid_start: process_start(std::process::id()),
            started_at: Utc::now(),
            phase: Phase::Submitting,
            jobs: Vec::new(),
        };
        let journal = Journal {
            path: dir.join(format!("{token}.json")),
            entry,
        };
        journal.write()?;
        Ok(journal)
    }

    pub fn token(&self) -> &str {
        &self.entry.token
    }

    pub fn comment(&self, stage: &str) -> String {
        comment(&self.entry.run_id, &self.entry.token, stage)
    }

    fn write(&self) -> Result<()> {
        crate::fsutil::write_atomic(&self.path, &serde_json::to_vec(&self.entry)?, 0o600)
            .context("writing the submission journal")
    }

    pub fn add_job(&mut self, id: u64) -> Result<()> {
        self.entry.jobs.push(id);
        self.write()
    }

    pub fn set_phase(&mut self, phase: Phase) -> Result<()> {
        self.entry.phase = phase;
        self.write()
    }

    /// The submission is over (done, or undone and confirmed): forget it.
    pub fn finish(self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Field 22 of `/proc/PID/stat` (after the parenthesised command name, which
/// may itself contain spaces and parentheses).
fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(19)?.parse().ok()
}

/// Whether the process that wrote `entry` may still be working on it.
fn owner_alive(entry: &Entry) -> bool {
    if entry.host != crate::identity::host_name() {
        // Another login node: its processes cannot be seen from here.
        return true;
    }
    match (process_start(entry.pid), entry.pid_start) {
        (None, _) => false,
        (Some(now), Some(then)) => now == then,
        (Some(_), None) => true,
    }
}

/// What recovery did (or, on a dry run, would do) about one interrupted submission.
#[derive(Debug, Clone, Serialize)]
pub struct Recovered {
    pub run_id: String,
    pub token: String,
    pub purpose: Purpose,
    pub workdir: PathBuf,
    pub started_at: DateTime<Utc>,
    /// Held jobs cancelled.
    pub cancelled: Vec<u64>,
    /// Held jobs released because the release had already begun.
    pub released: Vec<u64>,
    /// The new run's manifest and index entry were removed.
    pub manifest_removed: bool,
}

impl Recovered {
    pub fn describe(&self, dry_run: bool) -> String {
        let what = match self.purpose {
            Purpose::Submit => "submission",
            Purpose::Resume => "resume",
        };
        let ids = |v: &[u64]| v.iter().map(u64::to_string).collect::<Vec<_>>().join(", ");
        let (cancel, release, remove) = if dry_run {
            ("would cancel", "would release", "would remove")
        } else {
            ("cancelled", "released", "removed")
        };
        let mut done = Vec::new();
        if !self.cancelled.is_empty() {
            done.push(format!("{cancel} its held job(s) {}", ids(&self.cancelled)));
        }
        if !self.released.is_empty() {
            done.push(format!(
                "{release} job(s) {} (its release had begun)",
                ids(&self.released)
            ));
        }
        if self.manifest_removed {
            done.push(format!(
                "{remove} the manifest of the run that never started, so {} can be submitted again",
                self.workdir.display()
            ));
        }
        if done.is_empty() {
            done.push("nothing of it was left in the queue".into());
        }
        format!(
            "an interrupted {what} of run {} (started {}) was found: {}",
            self.run_id,
            self.started_at.format("%Y-%m-%d %H:%M:%S UTC"),
            done.join("; ")
        )
    }
}

/// The outcome of one recovery pass.
#[derive(Debug, Default, Serialize)]
pub struct Recovery {
    pub recovered: Vec<Recovered>,
    /// Entries of submissions still running here or made on another host.
    pub in_progress: usize,
    /// Entries that could not be dealt with now (Slurm did not answer…), with why.
    pub problems: Vec<String>,
}

/// Find interrupted submissions and undo or finish them (see the module
/// doc). Costs a directory listing when there are none; one `squeue` and at
/// most one `scancel` and one `scontrol release` when there are.
pub fn recover(slurm: &Slurm, dry_run: bool) -> Result<Recovery> {
    let dir = journal_dir()?;
    let mut out = Recovery::default();
    let listing = match std::fs::read_dir(&dir) {
        Ok(l) => l,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e).with_context(|| format!("listing {}", dir.display())),
    };
    let mut dead = Vec::new();
    for item in listing.flatten() {
        let path = item.path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let entry: Entry = match crate::fsutil::read_regular(&path, MAX_ENTRY)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
        {
            Some(e) => e,
            None => {
                out.problems.push(format!(
                    "{} is not a submission journal entry; left alone",
                    path.display()
                ));
                continue;
            }
        };
        if owner_alive(&entry) {
            out.in_progress += 1;
        } else {
            dead.push((path, entry));
        }
    }
    if dead.is_empty() {
        return Ok(out);
    }
    let queued = squeue::tagged_mine(slurm, COMMENT_PREFIX)
        .context("asking Slurm for the jobs of an interrupted submission")?;
    for (path, entry) in dead {
        // Claim the entry first: two commands recovering at once must not
        // both act on it.
        let claimed = path.with_extension("recovering");
        if !dry_run && std::fs::rename(&path, &claimed).is_err() {
            continue;
        }
        match recover_one(slurm, &entry, &queued, dry_run) {
            Ok(r) => {
                if !dry_run {
                    let _ = std::fs::remove_file(&claimed);
                }
                out.recovered.push(r);
            }
            Err(e) => {
                if !dry_run {
                    let _ = std::fs::rename(&claimed, &path);
                }
                out.problems.push(format!(
                    "the interrupted submission of run {}: {e:#}",
                    entry.run_id
                ));
            }
        }
    }
    Ok(out)
}

/// Whether an interrupted submission's release went through (pure), from its
/// phase and its jobs still in the queue, held or not. Once the chain was
/// recorded, a chain with no held job left was released (its jobs run, or
/// ran and left the queue) or cancelled by someone: either way the run is
/// real and its manifest stays. Only held jobs of an unreleased chain are
/// undone.
fn release_began(phase: Phase, held: usize, unheld: usize) -> bool {
    match phase {
        Phase::Released => true,
        Phase::Recorded => unheld > 0 || held == 0,
        Phase::Submitting => false,
    }
}

fn recover_one(
    slurm: &Slurm,
    entry: &Entry,
    queued: &[squeue::Tagged],
    dry_run: bool,
) -> Result<Recovered> {
    let mine: Vec<&squeue::Tagged> = queued
        .iter()
        .filter(|j| {
            parse_comment(&j.comment)
                .is_some_and(|t| t.run_id == entry.run_id && t.token == Some(entry.token.as_str()))
        })
        .collect();
    let held: Vec<u64> = mine.iter().filter(|j| j.held).map(|j| j.job_id).collect();
    let release_began = release_began(entry.phase, held.len(), mine.len() - held.len());
    let mut done = Recovered {
        run_id: entry.run_id.clone(),
        token: entry.token.clone(),
        purpose: entry.purpose,
        workdir: entry.workdir.clone(),
        started_at: entry.started_at,
        cancelled: Vec::new(),
        released: Vec::new(),
        manifest_removed: false,
    };
    if release_began {
        if !held.is_empty() && !dry_run {
            crate::slurm::control::release(slurm, &held)?;
        }
        done.released = held;
        return Ok(done);
    }
    if !held.is_empty() && !dry_run {
        crate::slurm::control::cancel(slurm, &held)?;
    }
    done.cancelled = held;
    if entry.purpose == Purpose::Submit {
        let path = crate::rundir::manifest::Manifest::path_in(&entry.workdir);
        if let Ok(m) = crate::rundir::manifest::Manifest::load(&path) {
            if m.run_id == entry.run_id {
                if !dry_run {
                    m.discard()?;
                }
                done.manifest_removed = true;
            }
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slurm::comment::Tag;

    #[test]
    fn comments_round_trip_and_old_comments_still_name_their_run() {
        let c = comment("demo-20261201T101010-beef", "0123456789abcdef", "train");
        assert_eq!(
            parse_comment(&c),
            Some(Tag {
                run_id: "demo-20261201T101010-beef",
                token: Some("0123456789abcdef"),
                stage: Some("train"),
            })
        );
        assert_eq!(
            parse_comment("yolo-sched:demo-1").map(|t| (t.run_id, t.token)),
            Some(("demo-1", None))
        );
        assert_eq!(parse_comment("someone else's comment"), None);
        assert_eq!(parse_comment("yolo-sched:"), None);
        // The job agent's measurement after the tag is not the stage's.
        let measured = format!("{c} ysneed=1;job=7;slice=a100;peak_mib=1/2");
        assert_eq!(parse_comment(&measured), parse_comment(&c));
    }

    /// A chain killed after its release whose jobs all ended before `gc`:
    /// none of them is in the queue any more, and the run (its manifest) must
    /// stay; it was discarded as a run that never ran.
    #[test]
    fn a_released_chain_whose_jobs_left_the_queue_is_kept() {
        assert!(release_began(Phase::Recorded, 0, 0));
        assert!(release_began(Phase::Recorded, 1, 2), "some ran: released");
        assert!(!release_began(Phase::Recorded, 3, 0), "all held: undo");
        assert!(!release_began(Phase::Submitting, 2, 0));
        assert!(release_began(Phase::Released, 2, 0));
    }

    #[test]
    fn this_process_is_alive_and_a_changed_start_time_is_not() {
        let me = std::process::id();
        let mut e = Entry {
            token: "t".into(),
            purpose: Purpose::Submit,
            run_id: "r".into(),
            workdir: "/w".into(),
            host: crate::identity::host_name(),
            pid: me,
            pid_start: process_start(me),
            started_at: Utc::now(),
            phase: Phase::Submitting,
            jobs: vec![],
        };
        assert!(e.pid_start.is_some());
        assert!(owner_alive(&e));
        e.pid_start = e.pid_start.map(|s| s + 1);
        assert!(!owner_alive(&e), "a reused pid is not the submitter");
        e.host = "another-login-node".into();
        assert!(owner_alive(&e), "other hosts' submissions are left to them");
    }
}
