//! `models gc`: delete what the registry no longer needs.
//!
//! - A removed version whose removal is at least `keep_removed` old (runs
//!   that name it by number read it until then), unless a tag points at it
//!   now: its version record and the older tag moves that point at it. Its
//!   removal record stays as a tombstone: `add_version` numbers after it (a
//!   number is never given twice) and `resolve` says the version was
//!   garbage-collected.
//! - A blob that no remaining version record names and that is at least
//!   `keep_unnamed` old (a publisher uploads its blobs before its record).
//! - Records that are not valid are never deleted: they are reported, and
//!   every SHA-256 a version record that is not valid mentions keeps its blob.
//!
//! `inventory` reads, `plan` decides (pure), `run` deletes: records first,
//! then, from a new listing, blobs. Nothing is printed.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Result;
use chrono::{DateTime, TimeDelta, Utc};
use serde::Serialize;

use super::access::Caller;
use super::record::{ModelRecord, Removal, TagMove, FORMAT, MAX_RECORD};
use super::store::{number, Registry};
use crate::names::model::{check_name, check_tag};

/// Records read at once.
const READ_CONCURRENCY: usize = 32;

/// How long things are kept, and the time the decision is made at.
#[derive(Debug, Clone, Copy)]
pub struct Policy {
    /// A removed version is kept this long after its removal.
    pub keep_removed: TimeDelta,
    /// A blob no record names is kept this long after it was written.
    pub keep_unnamed: TimeDelta,
    pub now: DateTime<Utc>,
}

/// A version record as read.
#[derive(Debug, Clone)]
pub struct VersionObj {
    pub name: String,
    pub version: u32,
    pub key: String,
    pub size: u64,
    /// The SHA-256s of its files; for a record that is not valid, every
    /// 64-hex word in it (its blobs are never deleted on a guess).
    pub blobs: BTreeSet<String>,
    /// Why the record is not valid.
    pub problem: Option<String>,
}

/// A removal record as read.
#[derive(Debug, Clone)]
pub struct RemovalObj {
    pub name: String,
    pub version: u32,
    pub key: String,
    /// The store's time of the record.
    pub last_modified: DateTime<Utc>,
    /// The time in the record, or why it is not valid.
    pub time: Result<DateTime<Utc>, String>,
}

/// A tag move as read.
#[derive(Debug, Clone)]
pub struct TagObj {
    pub name: String,
    pub tag: String,
    pub seq: u32,
    pub key: String,
    pub size: u64,
    /// The version it points at, or why it is not valid.
    pub version: Result<u32, String>,
}

/// An object under `blobs/`.
#[derive(Debug, Clone)]
pub struct BlobObj {
    pub key: String,
    /// `None` when the key is not `blobs/sha256/<64 hex>`.
    pub sha256: Option<String>,
    pub size: u64,
    pub last_modified: DateTime<Utc>,
}

/// What the registry holds, as one listing and read saw it.
#[derive(Debug, Clone, Default)]
pub struct Inventory {
    pub versions: Vec<VersionObj>,
    pub removals: Vec<RemovalObj>,
    pub tags: Vec<TagObj>,
    pub blobs: Vec<BlobObj>,
    /// Entries the listing skipped (links, never followed; names that are
    /// not UTF-8 or not valid; directories that cannot be read), escaped.
    pub problems: Vec<String>,
    /// Directories under `models/` that could not be read: a record there
    /// may name any blob, so no blob is deleted.
    pub models_unread: Vec<String>,
    /// What could not be looked at, in words (`blobs/sha256` is not
    /// listable by other users than root).
    pub notes: Vec<String>,
}

/// A version to delete (or deleted).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CollectedVersion {
    /// `NAME@N`.
    pub model: String,
    pub removed_at: DateTime<Utc>,
    pub key: String,
    pub bytes: u64,
}

/// A tag move to delete: an older move of a tag, to a version collected.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CollectedMove {
    /// The version it points at (`NAME@N`).
    pub model: String,
    pub tag: String,
    pub seq: u32,
    pub key: String,
    pub bytes: u64,
}

/// A blob to delete.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CollectedBlob {
    pub sha256: String,
    pub key: String,
    pub bytes: u64,
    pub last_modified: DateTime<Utc>,
}

/// Something gc looked at and keeps, and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Kept {
    /// `version`, `blob` or `object` (under `blobs/`, not a blob).
    pub kind: &'static str,
    /// `NAME@N`, `blob <sha256>` or an object key.
    pub what: String,
    pub reason: String,
    /// When time alone no longer keeps it.
    pub until: Option<DateTime<Utc>>,
}

/// What `plan` decided.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Plan {
    pub versions: Vec<CollectedVersion>,
    pub tag_moves: Vec<CollectedMove>,
    pub blobs: Vec<CollectedBlob>,
    pub kept: Vec<Kept>,
    /// Records that are not valid (never deleted by gc).
    pub problems: Vec<String>,
    /// Blobs a remaining version record names.
    pub blobs_in_use: usize,
    /// What could not be looked at (`Inventory::notes`).
    pub notes: Vec<String>,
}

impl Plan {
    pub fn bytes(&self) -> u64 {
        self.versions.iter().map(|v| v.bytes).sum::<u64>()
            + self.tag_moves.iter().map(|m| m.bytes).sum::<u64>()
            + self.blobs.iter().map(|b| b.bytes).sum::<u64>()
    }
}

/// What `run` did (or, with `dry_run`, would do).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Outcome {
    pub dry_run: bool,
    pub versions: Vec<CollectedVersion>,
    pub tag_moves: Vec<CollectedMove>,
    pub blobs: Vec<CollectedBlob>,
    pub kept: Vec<Kept>,
    pub problems: Vec<String>,
    pub blobs_in_use: usize,
    /// What could not be looked at (a `blobs/sha256` that only root lists).
    pub notes: Vec<String>,
    /// Bytes of everything deleted (or that would be).
    pub bytes_freed: u64,
    /// Deletions that failed (their objects are still there).
    pub errors: Vec<String>,
}

/// Decide what to delete. Pure.
pub fn plan(inv: &Inventory, p: &Policy) -> Plan {
    let mut plan = Plan {
        problems: inv.problems.clone(),
        notes: inv.notes.clone(),
        ..Plan::default()
    };
    let by_version: BTreeMap<(&str, u32), &VersionObj> = inv
        .versions
        .iter()
        .map(|v| ((v.name.as_str(), v.version), v))
        .collect();
    for v in &inv.versions {
        if let Some(e) = &v.problem {
            plan.problems.push(e.clone());
        }
    }
    for r in &inv.removals {
        if let Err(e) = &r.time {
            plan.problems.push(e.clone());
        }
    }
    // The move each tag is at now: the highest number among the moves that
    // are obeyed (valid, and written by someone who may tag the version),
    // as `Registry::resolve` has it.
    let mut current: BTreeMap<(&str, &str), &TagObj> = BTreeMap::new();
    for t in &inv.tags {
        if let Err(e) = &t.version {
            plan.problems.push(e.clone());
            continue;
        }
        let e = current.entry((&t.name, &t.tag)).or_insert(t);
        if t.seq > e.seq {
            *e = t;
        }
    }
    let mut doomed: BTreeSet<(&str, u32)> = BTreeSet::new();
    let mut tombstones: BTreeSet<(&str, u32)> = BTreeSet::new();
    for r in &inv.removals {
        let id = format!("{}@{}", r.name, r.version);
        let Some(v) = by_version.get(&(r.name.as_str(), r.version)) else {
            // Collected already: the removal record is its tombstone.
            tombstones.insert((&r.name, r.version));
            continue;
        };
        let mut reasons = Vec::new();
        let mut until = None;
        if r.time.is_err() {
            reasons.push("its removal record is not valid".to_string());
        }
        if v.problem.is_some() {
            reasons.push("its version record is not valid".to_string());
        }
        for ((n, tag), t) in &current {
            if *n != r.name {
                continue;
            }
            match t.version {
                Ok(tv) if tv == r.version => reasons.push(format!(
                    "tag `{tag}` points at it; move the tag (`yolo-sched models tag {n}@N {tag}`)"
                )),
                _ => {}
            }
        }
        // The later of the record's time and the store's: a remover's clock
        // that is behind can only delay gc, never hasten it.
        let removed_at = match &r.time {
            Ok(t) => (*t).max(r.last_modified),
            Err(_) => r.last_modified,
        };
        let due = removed_at + p.keep_removed;
        if p.now < due {
            reasons.push(format!(
                "removed {} ago, kept for {} after removal (--keep-removed)",
                span(p.now - removed_at),
                span(p.keep_removed)
            ));
            until = Some(due);
        }
        if reasons.is_empty() {
            doomed.insert((&r.name, r.version));
            plan.versions.push(CollectedVersion {
                model: id,
                removed_at,
                key: v.key.clone(),
                bytes: v.size,
            });
        } else {
            plan.kept.push(Kept {
                kind: "version",
                what: id,
                reason: reasons.join("; "),
                until,
            });
        }
    }
    // Older moves to a version collected now or before; the move a tag is
    // at now never is (such a version is kept above).
    for t in &inv.tags {
        let Ok(v) = t.version else { continue };
        let at_now = current
            .get(&(t.name.as_str(), t.tag.as_str()))
            .is_some_and(|c| c.seq == t.seq);
        let gone = doomed.contains(&(t.name.as_str(), v)) || tombstones.contains(&(&t.name, v));
        if !at_now && gone {
            plan.tag_moves.push(CollectedMove {
                model: format!("{}@{v}", t.name),
                tag: t.tag.clone(),
                seq: t.seq,
                key: t.key.clone(),
                bytes: t.size,
            });
        }
    }
    plan_blobs(inv, p, &doomed, &mut plan);
    plan
}

/// The blobs: those no surviving version names go once past their grace;
/// none goes while part of `models/` could not be read.
fn plan_blobs<'a>(
    inv: &'a Inventory,
    p: &Policy,
    doomed: &BTreeSet<(&'a str, u32)>,
    plan: &mut Plan,
) {
    let named: BTreeSet<&str> = inv
        .versions
        .iter()
        .filter(|v| !doomed.contains(&(v.name.as_str(), v.version)))
        .flat_map(|v| v.blobs.iter().map(String::as_str))
        .collect();
    for b in &inv.blobs {
        if !inv.models_unread.is_empty() && b.sha256.is_some() {
            plan.kept.push(Kept {
                kind: "blob",
                what: b.key.clone(),
                reason: format!(
                    "part of models/ could not be read ({}), so a record there may name it",
                    inv.models_unread.join(", ")
                ),
                until: None,
            });
            continue;
        }
        let Some(sha) = &b.sha256 else {
            plan.kept.push(Kept {
                kind: "object",
                what: b.key.clone(),
                reason: "not a blob of the registry's layout (blobs/sha256/<hex>); left alone"
                    .into(),
                until: None,
            });
            continue;
        };
        if named.contains(sha.as_str()) {
            plan.blobs_in_use += 1;
            continue;
        }
        let due = b.last_modified + p.keep_unnamed;
        if p.now < due {
            plan.kept.push(Kept {
                kind: "blob",
                what: format!("blob {sha}"),
                reason: format!(
                    "no record names it, but it was written {} ago and a publication may be about to name it (--keep-unnamed {})",
                    span(p.now - b.last_modified),
                    span(p.keep_unnamed)
                ),
                until: Some(due),
            });
        } else {
            plan.blobs.push(CollectedBlob {
                sha256: sha.clone(),
                key: b.key.clone(),
                bytes: b.size,
                last_modified: b.last_modified,
            });
        }
    }
}

/// A length of time in words: `3d 4h`, `12m`, `0s`.
fn span(d: TimeDelta) -> String {
    let s = d.num_seconds().max(0);
    let (days, hours, minutes) = (s / 86_400, s % 86_400 / 3600, s % 3600 / 60);
    match (days, hours, minutes) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, m) => format!("{m}m"),
        (0, h, 0) => format!("{h}h"),
        (0, h, m) => format!("{h}h {m}m"),
        (d, 0, _) => format!("{d}d"),
        (d, h, _) => format!("{d}d {h}h"),
    }
}

fn is_sha256(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

/// Every 64-hex word in `bytes` (what a record that is not valid may name).
fn hex_words(bytes: &[u8]) -> BTreeSet<String> {
    String::from_utf8_lossy(bytes)
        .split(|c: char| !c.is_ascii_hexdigit())
        .map(str::to_ascii_lowercase)
        .filter(|w| is_sha256(w))
        .collect()
}

/// Read every record and list every blob of `reg`. A record that vanished
/// between the listing and its read is left out; a store error is `Err`.
/// Nothing is followed through a link (`Store::list_checked`). A tag move or
/// a removal whose writer may not tag or remove the version it concerns
/// (`Caller::may_manage_as`, the writer as `Registry::writer` knows it) is
/// not valid, as `Registry::resolve` does not obey it.
pub fn inventory(reg: &Registry, caller: &Caller) -> Result<Inventory> {
    let models = reg.key("models/");
    enum Kind {
        Version(String, u32),
        Tag(String, String, u32),
        Removal(String, u32),
    }
    let shown = |k: &str| crate::text::shown(k, crate::text::PATH_CHARS);
    let mut inv = Inventory::default();
    let (objects, skipped) = reg.backend().list(&models)?;
    for s in skipped {
        if s.unread {
            inv.models_unread.push(shown(&s.rel));
        }
        inv.problems
            .push(format!("{}: {}; skipped", shown(&s.rel), s.why));
    }
    let mut bad = BTreeSet::new();
    let mut found = Vec::new();
    for o in objects {
        let Some(rest) = o.key.strip_prefix(&models) else {
            continue;
        };
        let parts: Vec<&str> = rest.split('/').collect();
        if parts.first().is_some_and(|n| check_name(n).is_err()) {
            bad.insert(format!(
                "{}: not a valid model name; skipped",
                shown(&format!("{models}{}", parts[0]))
            ));
            continue;
        }
        let kind = match parts.as_slice() {
            [n, "versions", f] => number(f).map(|v| Kind::Version(n.to_string(), v)),
            [n, "tags", t, f] if check_tag(t).is_ok() => {
                number(f).map(|s| Kind::Tag(n.to_string(), t.to_string(), s))
            }
            [n, "tags", t, _] => {
                bad.insert(format!(
                    "{}: not a valid tag; skipped",
                    shown(&format!("{models}{n}/tags/{t}"))
                ));
                None
            }
            [n, "removed", f] => number(f).map(|v| Kind::Removal(n.to_string(), v)),
            _ => None,
        };
        if let Some(k) = kind {
            found.push((k, o));
        }
    }
    inv.problems.extend(bad);
    let keys: Vec<String> = found.iter().map(|(_, o)| o.key.clone()).collect();
    let got = reg.backend().get_many(&keys, MAX_RECORD, READ_CONCURRENCY);
    let mut records: BTreeMap<(String, u32), ModelRecord> = BTreeMap::new();
    let mut others = Vec::new();
    for ((kind, o), bytes) in found.into_iter().zip(got) {
        let Some(bytes) = bytes? else { continue };
        match kind {
            Kind::Version(name, version) => {
                let checked = ModelRecord::from_stored(&bytes, &name, version).and_then(|r| {
                    reg.writer(&o.key, &r.user, "published it")
                        .map(|_| r)
                        .map_err(|e| format!("record {name}@{version} {e}; it is not used"))
                });
                let (blobs, problem) = match checked {
                    Ok(r) => {
                        let blobs = r.files.iter().map(|f| f.sha256.clone()).collect();
                        records.insert((name.clone(), version), r);
                        (blobs, None)
                    }
                    Err(e) => (hex_words(&bytes), Some(e)),
                };
                inv.versions.push(VersionObj {
                    name,
                    version,
                    key: o.key,
                    size: o.size,
                    blobs,
                    problem,
                });
            }
            other => others.push((other, o, bytes)),
        }
    }
    // Whether the writer of the record at `key` (naming `claimed`) may tag
    // or remove `name@v`; a version collected already (no record) cannot be
    // asked, and its moves and tombstone only ever delay gc.
    let allowed = |key: &str, claimed: &str, name: &str, v: u32| -> Result<(), String> {
        let Some(r) = records.get(&(name.to_string(), v)) else {
            return Ok(());
        };
        reg.writer(key, claimed, "wrote it")
            .and_then(|w| caller.may_manage_as(&w, r))
    };
    for (kind, o, bytes) in others {
        match kind {
            Kind::Version(..) => {}
            Kind::Removal(name, version) => {
                let time = match serde_json::from_slice::<Removal>(&bytes) {
                    Ok(r) if r.format == FORMAT && r.name == name && r.version == version => {
                        allowed(&o.key, &r.user, &name, version)
                            .map(|()| r.time)
                            .map_err(|e| format!("the removal record of {name}@{version}: {e}; it is not obeyed"))
                    }
                    Ok(_) => Err(format!(
                        "removal record stored as {name}@{version} names another version; it is not used"
                    )),
                    Err(e) => Err(format!(
                        "removal record of {name}@{version} is not valid: {e}"
                    )),
                };
                inv.removals.push(RemovalObj {
                    name,
                    version,
                    key: o.key,
                    last_modified: o.last_modified,
                    time,
                });
            }
            Kind::Tag(name, tag, seq) => {
                let version = match serde_json::from_slice::<TagMove>(&bytes) {
                    Ok(t)
                        if t.format == FORMAT && t.name == name && t.tag == tag && t.seq == seq =>
                    {
                        allowed(&o.key, &t.user, &name, t.version)
                            .map(|()| t.version)
                            .map_err(|e| {
                                format!("tag move {name}@{tag} #{seq}: {e}; it is not obeyed")
                            })
                    }
                    Ok(_) => Err(format!(
                        "tag record stored as {name}@{tag} #{seq} names another; it is not used"
                    )),
                    Err(e) => Err(format!("tag record {name}@{tag} #{seq} is not valid: {e}")),
                };
                inv.tags.push(TagObj {
                    name,
                    tag,
                    seq,
                    key: o.key,
                    size: o.size,
                    version,
                });
            }
        }
    }
    list_blobs(reg, &mut inv)?;
    Ok(inv)
}

/// Every object under `blobs/`, and what could not be listed there.
fn list_blobs(reg: &Registry, inv: &mut Inventory) -> Result<()> {
    let shown = |k: &str| crate::text::shown(k, crate::text::PATH_CHARS);
    let blobs = reg.key("blobs/");
    let (objects, skipped) = reg.backend().list(&blobs)?;
    for s in skipped {
        if s.unread {
            inv.notes.push(format!(
                "{} cannot be listed by you ({}): no blob is planned; root sees them (`sudo yolo-sched models gc --dry-run`)",
                shown(&s.rel),
                s.why
            ));
        } else {
            inv.problems
                .push(format!("{}: {}; skipped", shown(&s.rel), s.why));
        }
    }
    for o in objects {
        let sha = o
            .key
            .strip_prefix(&blobs)
            .and_then(|r| r.strip_prefix("sha256/"))
            .filter(|s| is_sha256(s))
            .map(str::to_string);
        inv.blobs.push(BlobObj {
            key: o.key,
            sha256: sha,
            size: o.size,
            last_modified: o.last_modified,
        });
    }
    Ok(())
}

/// Collect `reg`'s garbage by `keep_removed` and `keep_unnamed`, or with
/// `dry_run` only say what would go. `Err` when the first reading fails
/// (nothing deleted); a deletion that fails later is in `errors`.
///
/// Records go first: each collected version's older tag moves, then its
/// record. Then the registry is read again and blobs are planned from that
/// reading, so a version published meanwhile keeps its blobs. Each blob is
/// looked at once more just before its deletion and kept if it was written
/// again since the listing (a publisher refreshing it; `put_blob`).
/// Why a record written after the second listing loses no blob: its
/// publisher wrote each blob before the record, or found it there written
/// within the hour (else it wrote it again: `put_blob`), so the blobs it
/// names were written at most an hour plus the publication's length before
/// the record, younger than the default grace of 24 h. A `keep_unnamed`
/// shorter than that is safe only while nobody publishes.
pub fn run(
    reg: &Registry,
    caller: &Caller,
    keep_removed: TimeDelta,
    keep_unnamed: TimeDelta,
    dry_run: bool,
) -> Result<Outcome> {
    let policy = |now| Policy {
        keep_removed,
        keep_unnamed,
        now,
    };
    let first = plan(&inventory(reg, caller)?, &policy(Utc::now()));
    let mut out = Outcome {
        dry_run,
        ..Outcome::default()
    };
    if dry_run {
        out.bytes_freed = first.bytes();
        out.versions = first.versions;
        out.tag_moves = first.tag_moves;
        out.blobs = first.blobs;
        out.kept = first.kept;
        out.problems = first.problems;
        out.blobs_in_use = first.blobs_in_use;
        out.notes = first.notes;
        return Ok(out);
    }
    for m in first.tag_moves {
        match reg.backend().delete(&m.key) {
            Ok(()) => {
                out.bytes_freed += m.bytes;
                out.tag_moves.push(m);
            }
            Err(e) => out.errors.push(format!("deleting {}: {e:#}", m.key)),
        }
    }
    for v in first.versions {
        match reg.backend().delete(&v.key) {
            Ok(()) => {
                out.bytes_freed += v.bytes;
                out.versions.push(v);
            }
            Err(e) => out.errors.push(format!("deleting {}: {e:#}", v.key)),
        }
    }
    // Versions kept stay reported from the first reading; blobs from the second.
    out.kept = first
        .kept
        .into_iter()
        .filter(|k| k.kind == "version")
        .collect();
    let second = match inventory(reg, caller) {
        Ok(inv) => plan(&inv, &policy(Utc::now())),
        Err(e) => {
            out.errors.push(format!(
                "reading the registry again before blobs: {e:#}; no blob deleted"
            ));
            out.problems = first.problems;
            return Ok(out);
        }
    };
    out.problems = second.problems;
    out.blobs_in_use = second.blobs_in_use;
    out.notes = second.notes;
    out.kept
        .extend(second.kept.into_iter().filter(|k| k.kind != "version"));
    for b in second.blobs {
        match reg.backend().head(&b.key) {
            Ok(Some(now)) if now.last_modified == b.last_modified && now.size == b.bytes => {}
            Ok(Some(_)) => {
                out.kept.push(Kept {
                    kind: "blob",
                    what: format!("blob {}", b.sha256),
                    reason: "written again while gc ran (a publication is using it)".into(),
                    until: None,
                });
                continue;
            }
            Ok(None) => continue,
            Err(e) => {
                out.errors.push(format!("looking at {}: {e:#}", b.key));
                continue;
            }
        }
        match reg.backend().delete(&b.key) {
            Ok(()) => {
                out.bytes_freed += b.bytes;
                out.blobs.push(b);
            }
            Err(e) => out.errors.push(format!("deleting {}: {e:#}", b.key)),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn sha(c: char) -> String {
        c.to_string().repeat(64)
    }

    fn policy() -> Policy {
        Policy {
            keep_removed: TimeDelta::days(30),
            keep_unnamed: TimeDelta::hours(24),
            now: t("2026-12-31T00:00:00Z"),
        }
    }

    fn version(name: &str, v: u32, blobs: &[char]) -> VersionObj {
        VersionObj {
            name: name.into(),
            version: v,
            key: format!("models/{name}/versions/{v:08}.json"),
            size: 100,
            blobs: blobs.iter().map(|c| sha(*c)).collect(),
            problem: None,
        }
    }

    fn removal(name: &str, v: u32, when: &str) -> RemovalObj {
        RemovalObj {
            name: name.into(),
            version: v,
            key: format!("models/{name}/removed/{v:08}.json"),
            last_modified: t(when),
            time: Ok(t(when)),
        }
    }

    fn tag(name: &str, tag: &str, seq: u32, v: u32) -> TagObj {
        TagObj {
            name: name.into(),
            tag: tag.into(),
            seq,
            key: format!("models/{name}/tags/{tag}/{seq:08}.json"),
            size: 10,
            version: Ok(v),
        }
    }

    fn blob(c: char, when: &str) -> BlobObj {
        BlobObj {
            key: format!("blobs/sha256/{}", sha(c)),
            sha256: Some(sha(c)),
            size: 1000,
            last_modified: t(when),
        }
    }

    const OLD: &str = "2026-01-01T00:00:00Z";

    fn models(plan: &Plan) -> Vec<&str> {
        plan.versions.iter().map(|v| v.model.as_str()).collect()
    }

    fn blobs(plan: &Plan) -> Vec<String> {
        plan.blobs
            .iter()
            .map(|b| b.sha256[..1].to_string())
            .collect()
    }

    #[test]
    fn an_old_removal_goes_with_the_blobs_only_it_names() {
        let inv = Inventory {
            versions: vec![version("m", 1, &['a', 'b']), version("m", 2, &['a', 'c'])],
            removals: vec![removal("m", 2, OLD)],
            tags: vec![],
            blobs: vec![blob('a', OLD), blob('b', OLD), blob('c', OLD)],
            ..Inventory::default()
        };
        let p = plan(&inv, &policy());
        assert_eq!(models(&p), ["m@2"]);
        assert_eq!(blobs(&p), ["c"]);
        assert_eq!(p.blobs_in_use, 2);
        assert_eq!(p.bytes(), 100 + 1000);
        assert!(p.kept.is_empty() && p.problems.is_empty(), "{p:?}");
    }

    #[test]
    fn a_recent_removal_is_kept_until_its_time() {
        let inv = Inventory {
            versions: vec![version("m", 1, &['a'])],
            removals: vec![removal("m", 1, "2026-12-20T00:00:00Z")],
            blobs: vec![blob('a', OLD)],
            ..Inventory::default()
        };
        let p = plan(&inv, &policy());
        assert!(p.versions.is_empty() && p.blobs.is_empty());
        assert_eq!(p.kept.len(), 1);
        assert_eq!(p.kept[0].what, "m@1");
        assert!(p.kept[0].reason.contains("--keep-removed"), "{p:?}");
        assert_eq!(p.kept[0].until, Some(t("2027-01-19T00:00:00Z")));
        // The later of the record's time and the store's counts.
        let mut late_store = removal("m", 1, OLD);
        late_store.last_modified = t("2026-12-20T00:00:00Z");
        let inv = Inventory {
            removals: vec![late_store],
            ..inv
        };
        assert!(plan(&inv, &policy()).versions.is_empty());
        let zero = Policy {
            keep_removed: TimeDelta::zero(),
            ..policy()
        };
        assert_eq!(models(&plan(&inv, &zero)), ["m@1"]);
    }

    #[test]
    fn a_version_a_tag_points_at_is_kept_and_older_moves_to_it_go() {
        let inv = Inventory {
            versions: vec![version("m", 1, &['a']), version("m", 2, &['b'])],
            removals: vec![removal("m", 1, OLD), removal("m", 2, OLD)],
            // production: 1 then 2 (now at 2); staging once at 1, then at 2.
            tags: vec![
                tag("m", "production", 1, 1),
                tag("m", "production", 2, 2),
                tag("m", "staging", 1, 2),
                tag("m", "staging", 2, 1),
                tag("m", "staging", 3, 2),
            ],
            blobs: vec![blob('a', OLD), blob('b', OLD)],
            ..Inventory::default()
        };
        let p = plan(&inv, &policy());
        assert_eq!(models(&p), ["m@1"]);
        let moves: Vec<_> = p
            .tag_moves
            .iter()
            .map(|m| (m.tag.as_str(), m.seq))
            .collect();
        assert_eq!(moves, [("production", 1), ("staging", 2)]);
        assert_eq!(p.kept.len(), 1);
        assert_eq!(p.kept[0].what, "m@2");
        assert!(
            p.kept[0].reason.contains("tag `production` points at it")
                && p.kept[0].reason.contains("tag `staging` points at it")
                && p.kept[0].reason.contains("move the tag"),
            "{p:?}"
        );
        assert_eq!(blobs(&p), ["a"]);
    }

    #[test]
    fn records_that_are_not_valid_are_reported_and_keep_what_they_may_need() {
        let mut bad = version("m", 2, &['b']);
        bad.problem = Some("record m@2 is not a valid record".into());
        let mut bad_removal = removal("m", 3, OLD);
        bad_removal.time = Err("removal record of m@3 is not valid".into());
        let mut bad_tag = tag("n", "production", 2, 0);
        bad_tag.version = Err("tag record n@production #2 is not valid".into());
        let inv = Inventory {
            versions: vec![
                version("m", 1, &['a']),
                bad,
                version("m", 3, &['c']),
                version("n", 1, &['d']),
            ],
            removals: vec![
                removal("m", 1, OLD),
                removal("m", 2, OLD),
                bad_removal,
                removal("n", 1, OLD),
            ],
            tags: vec![tag("n", "production", 1, 1), bad_tag],
            blobs: vec![
                blob('a', OLD),
                blob('b', OLD),
                blob('c', OLD),
                blob('d', OLD),
            ],
            ..Inventory::default()
        };
        let p = plan(&inv, &policy());
        assert_eq!(models(&p), ["m@1"]);
        assert_eq!(blobs(&p), ["a"]);
        assert!(p.tag_moves.is_empty(), "{p:?}");
        assert_eq!(p.problems.len(), 3, "{p:?}");
        let kept: BTreeMap<_, _> = p
            .kept
            .iter()
            .map(|k| (k.what.as_str(), k.reason.as_str()))
            .collect();
        assert!(kept["m@2"].contains("version record is not valid"));
        assert!(kept["m@3"].contains("removal record is not valid"));
        // The move that is not valid is passed over: the tag is at n@1.
        assert!(kept["n@1"].contains("tag `production` points at it"));
    }

    #[test]
    fn unnamed_blobs_go_only_after_their_grace() {
        let inv = Inventory {
            versions: vec![version("m", 1, &['a'])],
            blobs: vec![
                blob('a', OLD),
                blob('b', OLD),
                blob('c', "2026-12-30T12:00:00Z"),
                BlobObj {
                    key: "blobs/other/x".into(),
                    sha256: None,
                    size: 1,
                    last_modified: t(OLD),
                },
            ],
            ..Inventory::default()
        };
        let p = plan(&inv, &policy());
        assert_eq!(blobs(&p), ["b"]);
        let kept: Vec<_> = p.kept.iter().map(|k| k.what.as_str()).collect();
        assert_eq!(
            kept,
            [format!("blob {}", sha('c')).as_str(), "blobs/other/x"]
        );
        assert_eq!(p.kept[0].until, Some(t("2026-12-31T12:00:00Z")));
        let zero = Policy {
            keep_unnamed: TimeDelta::zero(),
            ..policy()
        };
        assert_eq!(blobs(&plan(&inv, &zero)), ["b", "c"]);
    }

    #[test]
    fn a_collected_version_leaves_a_tombstone_and_its_stray_moves_go() {
        // A gc killed after deleting m@1's record, before its older move.
        let inv = Inventory {
            versions: vec![version("m", 2, &['b'])],
            removals: vec![removal("m", 1, OLD)],
            tags: vec![tag("m", "production", 1, 1), tag("m", "production", 2, 2)],
            blobs: vec![blob('b', OLD)],
            ..Inventory::default()
        };
        let p = plan(&inv, &policy());
        assert!(p.versions.is_empty() && p.kept.is_empty(), "{p:?}");
        assert_eq!(p.tag_moves.len(), 1);
        assert_eq!(p.tag_moves[0].seq, 1);
    }

    #[test]
    fn a_record_that_is_not_valid_keeps_every_sha256_it_mentions() {
        let text = format!(
            "{{\"files\": [{{\"sha256\": \"{}\"}}, {{\"sha256\": \"{}\"}}], broken",
            sha('a'),
            sha('B')
        );
        assert_eq!(
            hex_words(text.as_bytes()),
            [sha('a'), sha('b')].into_iter().collect()
        );
    }

    #[test]
    fn spans_read_as_words() {
        assert_eq!(span(TimeDelta::zero()), "0s");
        assert_eq!(span(TimeDelta::minutes(12)), "12m");
        assert_eq!(span(TimeDelta::minutes(90)), "1h 30m");
        assert_eq!(span(TimeDelta::days(30)), "30d");
        assert_eq!(span(TimeDelta::hours(24)), "1d");
        assert_eq!(span(TimeDelta::hours(12)), "12h");
        assert_eq!(span(TimeDelta::hours(30)), "1d 6h");
    }
}
