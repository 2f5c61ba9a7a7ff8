//! Finding runs and asking Slurm about them: one `squeue` for any number of
//! runs, and at most one `sacct` for the jobs that already left the queue.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::Result;

use super::status::{self, AcctRow, RunStatus, TaskState};
use crate::error::invalid;
use crate::rundir::manifest::{index_dir, IndexEntry, Manifest};
use crate::slurm::squeue::{self, QueueRow};
use crate::slurm::Slurm;

/// The runs of an index, and the entries that could not be read (for the
/// caller to warn about: library code does not print).
#[derive(Debug, Default)]
pub struct Index {
    pub entries: Vec<IndexEntry>,
    /// "`<path>`: why" for each entry skipped.
    pub unreadable: Vec<String>,
}

/// Every run in the caller's index, newest first. Entries whose manifest is
/// gone are skipped; an unreadable entry (corrupt, not a regular file, too
/// big) is skipped and named in `unreadable`.
pub fn index_entries() -> Result<Index> {
    let mut index = read_index(&index_dir()?);
    sort_newest_first(&mut index.entries);
    Ok(index)
}

fn sort_newest_first(entries: &mut [IndexEntry]) {
    entries.sort_by(|a, b| {
        b.submitted_at
            .cmp(&a.submitted_at)
            .then(b.run_id.cmp(&a.run_id))
    });
}

fn read_index(dir: &std::path::Path) -> Index {
    let mut out = Index::default();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.extension().and_then(|x| x.to_str()) != Some("json") {
            continue;
        }
        // Bounded and regular only: an entry linked to /dev/zero or a FIFO is skipped.
        match crate::fsutil::read_regular(&p, crate::rundir::manifest::INDEX_ENTRY_LIMIT)
            .and_then(|t| serde_json::from_str::<IndexEntry>(&t).map_err(anyhow::Error::from))
        {
            Ok(entry) => out.entries.push(entry),
            Err(e) => out.unreadable.push(format!(
                "skipping unreadable run index entry {}: {e:#}",
                p.display()
            )),
        }
    }
    out
}

/// Find a run by id (or unique id prefix, or a path to its workdir/manifest).
pub fn find_run(id: &str) -> Result<Manifest> {
    if id.trim().is_empty() {
        return Err(invalid(
            "no run given: name a run id, a unique prefix of one, or a run directory (`yolo-sched list` shows them)",
        ));
    }
    let as_path = PathBuf::from(id);
    if as_path
        .join(crate::rundir::manifest::MANIFEST_FILE)
        .is_file()
    {
        return load_from(&as_path);
    }
    if as_path.is_file()
        && as_path
            .file_name()
            .is_some_and(|n| n == crate::rundir::manifest::MANIFEST_FILE)
    {
        return load_from(as_path.parent().unwrap_or(Path::new(".")));
    }
    let entries = index_entries()?.entries;
    let exact = entries.iter().find(|e| e.run_id == id);
    // Runs whose directory was removed cannot be meant; they only make a prefix ambiguous.
    let prefixed: Vec<&IndexEntry> = entries
        .iter()
        .filter(|e| e.run_id.starts_with(id) && Manifest::path_in(&e.workdir).exists())
        .collect();
    let chosen: &IndexEntry = match exact {
        Some(e) => e,
        None => match prefixed.as_slice() {
            [one] => one,
            [] => {
                // The one suggestion policy: only ids or names close enough to be typos.
                let by_id =
                    crate::suggest::close_ones(id, entries.iter().map(|e| e.run_id.as_str()), 3);
                let by_name: Vec<&str> = entries
                    .iter()
                    .filter(|e| crate::suggest::closest(id, [e.name.as_str()]).is_some())
                    .map(|e| e.run_id.as_str())
                    .collect();
                let mut names: Vec<&str> = by_id.into_iter().chain(by_name).collect();
                names.dedup();
                names.truncate(3);
                let hint = if entries.is_empty() {
                    "you have no runs yet".to_string()
                } else if names.is_empty() {
                    "`yolo-sched list` shows your runs".to_string()
                } else {
                    format!("did you mean {}?", crate::suggest::ticked_list(names))
                };
                return Err(invalid(format!(
                    "no run `{}`; {hint}",
                    crate::text::echo(id)
                )));
            }
            many => {
                let names: Vec<&str> = many.iter().take(5).map(|e| e.run_id.as_str()).collect();
                return Err(invalid(format!(
                    "`{}` matches several runs: {}",
                    crate::text::echo(id),
                    names.join(", ")
                )));
            }
        },
    };
    let path = Manifest::path_in(&chosen.workdir);
    if !path.exists() {
        return Err(anyhow::anyhow!(
            "run {}: its manifest {} is gone (was the run directory deleted?)",
            chosen.run_id,
            path.display()
        ));
    }
    load_from(&chosen.workdir)
}

/// The manifest in `dir`, its workdir set to where it was found: a run
/// directory moved since submit is read (job files, logs) where it is now,
/// as `list` and `report` read it.
fn load_from(dir: &Path) -> Result<Manifest> {
    let mut m = Manifest::load(&Manifest::path_in(dir))?;
    m.workdir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    Ok(m)
}

/// Job ids to ask squeue about: every attempt of every stage (a resume may
/// have resubmitted only some tasks, so older attempts still speak for the rest).
fn latest_ids(manifests: &[&Manifest]) -> Vec<u64> {
    let set: BTreeSet<u64> = manifests
        .iter()
        .flat_map(|m| {
            m.stages
                .iter()
                .flat_map(|s| s.attempts.iter().map(|a| a.job_id))
        })
        .collect();
    set.into_iter().collect()
}

/// What Slurm says about these runs: queue rows, accounting rows, and whether
/// Slurm answered at all.
pub struct SlurmView {
    pub rows: Vec<QueueRow>,
    pub acct: Vec<AcctRow>,
    pub reachable: bool,
    pub error: Option<String>,
}

/// One squeue call, then one sacct call only for jobs squeue no longer has.
pub fn ask_slurm(slurm: &Slurm, manifests: &[&Manifest]) -> SlurmView {
    let ids = latest_ids(manifests);
    let rows = match squeue::jobs(slurm, &ids) {
        Ok(r) => r,
        Err(e) => {
            return SlurmView {
                rows: vec![],
                acct: vec![],
                reachable: false,
                error: Some(format!("{e:#}")),
            }
        }
    };
    let missing: Vec<u64> = ids
        .iter()
        .copied()
        .filter(|id| !rows.iter().any(|r| r.array_job_id == *id))
        .collect();
    let acct = if missing.is_empty() {
        Vec::new()
    } else {
        sacct_rows(slurm, &missing)
    };
    SlurmView {
        rows,
        acct,
        reachable: true,
        error: None,
    }
}

pub use crate::slurm::sacct::note_accounting_off;

/// `sacct` for jobs that left the queue (at most one call); empty when
/// accounting is not there or the call fails.
pub fn sacct_rows(slurm: &Slurm, ids: &[u64]) -> Vec<AcctRow> {
    crate::slurm::sacct::by_ids(slurm, ids)
}

/// How many times `run_status` asks Slurm again for a manifest that changed
/// while it asked: each change is a whole escalation, so two in a row are
/// already rare.
const MAX_LOOKS: usize = 4;

/// Status of one run (per look: one squeue call, at most one sacct call).
///
/// A run's own jobs rewrite its manifest: a training out of memory resubmits
/// itself and its export on a bigger slice, cancels the old export, and only
/// then exits. A manifest read before that, paired with Slurm's answer after
/// it, reads as a failed run (and `watch` would stop on it). So the manifest
/// is read again once Slurm has answered; when its jobs changed, Slurm is
/// asked again about the new ones. `manifest` is left as the one the status
/// was computed from.
pub fn run_status(slurm: &Slurm, manifest: &mut Manifest) -> (RunStatus, Option<String>) {
    let mut looks = 0;
    loop {
        looks += 1;
        let view = ask_slurm(slurm, &[&*manifest]);
        match reread(manifest) {
            Some(newer) if looks < MAX_LOOKS && newer.all_job_ids() != manifest.all_job_ids() => {
                *manifest = newer;
            }
            _ => {
                return (
                    status::of_run(manifest, &view.rows, &view.acct, view.reachable),
                    view.error,
                )
            }
        }
    }
}

/// The run's manifest as it is on disk now, when it can be read and is the
/// same run's (a team member's run may have an unreadable directory).
fn reread(manifest: &Manifest) -> Option<Manifest> {
    if manifest.workdir.as_os_str().is_empty() {
        return None;
    }
    Manifest::load(&Manifest::path_in(&manifest.workdir))
        .ok()
        .filter(|m| m.run_id == manifest.run_id)
}

/// Job ids of a run still queued or running (array ids stand for all their
/// tasks): each active task's own job, not only its stage's latest (a
/// search runs one array per batch, and a trial moved to a bigger slice has
/// a job of its own), and the stage's latest job for a stage still waiting.
pub fn active_job_ids(st: &RunStatus) -> Vec<u64> {
    let mut set = BTreeSet::new();
    for s in st
        .stages
        .iter()
        .filter(|s| s.tasks.iter().any(|t| t.state.is_active()))
    {
        set.extend(s.job_id);
        set.extend(
            s.tasks
                .iter()
                .filter(|t| t.state.is_active())
                .filter_map(|t| t.job_id.split('_').next()?.parse::<u64>().ok()),
        );
    }
    set.into_iter().collect()
}

pub fn is_active(st: &RunStatus) -> bool {
    st.stages.iter().any(|s| {
        s.tasks
            .iter()
            .any(|t| matches!(t.state, TaskState::Pending | TaskState::Running))
    })
}
