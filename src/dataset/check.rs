//! Checking a dataset: list each split's images, then read every image header and
//! label file (in parallel) and add up counts and problems into a `Report`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use serde::Serialize;

use super::config::{label_path, DataConfig, Source};
use super::image;
use super::labels;

/// At most this many findings of each severity are kept in a report (the
/// totals still count all of them), so a systematic problem in a large dataset
/// does not make a huge summary.
pub const MAX_FINDINGS: usize = 1000;

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Ultralytics would drop the image, fail, or train on wrong targets.
    Error,
    /// Ultralytics copes (and says so), but it is probably not intended.
    Warning,
}

/// The largest image list read (`train: train.txt`): 10 million paths.
pub const MAX_LIST_BYTES: u64 = 1 << 30;
/// The largest label file read: far above any real one (a line per object).
pub const MAX_LABEL_BYTES: u64 = 16 << 20;

/// One problem, at a file (and line of a label file).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Finding {
    pub severity: Severity,
    pub file: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    pub message: String,
}

/// Instances of one class in one split.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClassCount {
    pub id: usize,
    pub name: String,
    /// Objects of this class.
    pub instances: usize,
    /// Images with at least one object of this class.
    pub images: usize,
}

/// Counts for one split.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SplitStats {
    pub images: usize,
    /// Images with at least one object.
    pub labelled: usize,
    /// Images without objects (no label file, or an empty one): Ultralytics
    /// trains on them as background images.
    pub background: usize,
    pub missing_labels: usize,
    pub empty_labels: usize,
    /// Images Ultralytics would drop (unreadable image or label).
    pub corrupt: usize,
    pub instances: usize,
    pub boxes: usize,
    pub polygons: usize,
    pub bytes: u64,
    pub per_class: Vec<ClassCount>,
}

/// Everything `dataset check` found.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The dataset YAML as given.
    pub data: String,
    pub root: String,
    pub nc: usize,
    pub names: Vec<String>,
    pub splits: BTreeMap<String, SplitStats>,
    pub errors: usize,
    pub warnings: usize,
    /// Up to `MAX_FINDINGS` of each severity, errors first, then by file and line.
    pub findings: Vec<Finding>,
    /// How many findings were left out of `findings`.
    pub findings_omitted: usize,
    /// True when there is no error: training may start.
    pub ok: bool,
    /// Where `--cache` copied the dataset, when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache: Option<CacheInfo>,
    /// The content fingerprint (`dataset::fingerprint`): class names, image
    /// paths and sizes, label bytes. `compare` groups runs by it.
    pub fingerprint: String,
}

/// Result of `--cache`.
#[derive(Debug, Clone, Serialize)]
pub struct CacheInfo {
    pub dir: String,
    /// The rewritten dataset YAML that points at the copy: train from this.
    pub data: String,
    /// False when an identical copy was already there and was reused.
    pub copied: bool,
}

/// One image and its label file, as found while listing a split.
#[derive(Debug, Clone)]
pub struct Item {
    pub split: usize,
    pub image: PathBuf,
    pub label: PathBuf,
}

/// What checking one item found.
#[derive(Debug, Default)]
struct ItemResult {
    image_bytes: u64,
    /// `fingerprint::label_hash` of the label file's bytes; 0 without one.
    label_hash: u64,
    corrupt: bool,
    label: LabelState,
    counts: labels::LabelCounts,
    findings: Vec<Finding>,
}

#[derive(Debug, Default, PartialEq, Eq)]
enum LabelState {
    #[default]
    Missing,
    Empty,
    Objects,
}

/// The listed items of each split, and problems found while listing.
pub struct Listing {
    pub items: Vec<Item>,
    pub findings: Vec<Finding>,
}

/// List every split's images (sorted, without duplicates within a split).
pub fn list(cfg: &DataConfig) -> Listing {
    let mut items = Vec::new();
    let mut findings = Vec::new();
    for (split_index, (split, sources)) in cfg.splits.iter().enumerate() {
        let mut images = BTreeSet::new();
        for source in sources {
            match source {
                Source::Dir(dir) => walk_images(dir, &mut images, &mut findings),
                Source::Image(p) => {
                    if image::has_image_extension(p) {
                        images.insert(p.clone());
                    } else {
                        findings.push(warning(
                            p,
                            None,
                            "not an image file name; Ultralytics skips it",
                        ));
                    }
                }
                Source::List(list) => read_list(list, &mut images, &mut findings),
            }
        }
        if images.is_empty() {
            let place = sources
                .iter()
                .map(|s| s.path().display().to_string())
                .collect::<Vec<_>>()
                .join(", ");
            findings.push(Finding {
                severity: Severity::Error,
                file: cfg.file.display().to_string(),
                line: None,
                message: format!(
                    "no images found for `{split}` in {place} (image extensions: {})",
                    image::IMG_FORMATS.join(", ")
                ),
            });
        }
        for image in images {
            let label = label_path(&image);
            items.push(Item {
                split: split_index,
                image,
                label,
            });
        }
    }
    Listing { items, findings }
}

fn warning(path: &Path, line: Option<usize>, message: &str) -> Finding {
    Finding {
        severity: Severity::Warning,
        file: path.display().to_string(),
        line,
        message: message.to_string(),
    }
}

fn error(path: &Path, line: Option<usize>, message: String) -> Finding {
    Finding {
        severity: Severity::Error,
        file: path.display().to_string(),
        line,
        message,
    }
}

/// Recursively collect image files under `dir`, following symbolic links but
/// never entering a directory twice (a link loop ends there).
fn walk_images(dir: &Path, out: &mut BTreeSet<PathBuf>, findings: &mut Vec<Finding>) {
    let mut seen = BTreeSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let real = std::fs::canonicalize(&d).unwrap_or_else(|_| d.clone());
        if !seen.insert(real) {
            continue;
        }
        let entries = match std::fs::read_dir(&d) {
            Ok(e) => e,
            Err(e) => {
                findings.push(error(&d, None, format!("cannot list the directory: {e}")));
                continue;
            }
        };
        for entry in entries.flatten() {
            let path = entry.path();
            match std::fs::metadata(&path) {
                Ok(m) if m.is_dir() => stack.push(path),
                Ok(m) if m.is_file() && image::has_image_extension(&path) => {
                    out.insert(path);
                }
                // A FIFO or device named like an image: Ultralytics would
                // hang or fail on it; it is counted, not silently left out.
                Ok(m) if !m.is_dir() && image::has_image_extension(&path) => findings.push(error(
                    &path,
                    None,
                    "named like an image but not a regular file (a FIFO, socket or device)".into(),
                )),
                Ok(_) => {}
                Err(e) => findings.push(error(&path, None, format!("cannot stat: {e}"))),
            }
        }
    }
}

/// A `.txt` list of images: `./x` is relative to the list's directory (as in
/// Ultralytics); other relative paths are relative to the current directory.
fn read_list(list: &Path, out: &mut BTreeSet<PathBuf>, findings: &mut Vec<Finding>) {
    let text = match crate::fsutil::read_regular(list, MAX_LIST_BYTES) {
        Ok(t) => t,
        Err(e) => {
            findings.push(error(
                list,
                None,
                format!("cannot read the image list: {e}"),
            ));
            return;
        }
    };
    let parent = list.parent().unwrap_or(Path::new("."));
    for (i, line) in text.trim().lines().enumerate() {
        let entry = line.trim();
        if entry.is_empty() {
            continue;
        }
        let path = match entry.strip_prefix("./") {
            Some(rest) => parent.join(rest),
            None => PathBuf::from(entry),
        };
        if !image::has_image_extension(&path) {
            findings.push(warning(
                list,
                Some(i + 1),
                "not an image file name; Ultralytics skips it",
            ));
            continue;
        }
        if !path.is_file() {
            findings.push(error(
                list,
                Some(i + 1),
                format!("{} does not exist", path.display()),
            ));
            continue;
        }
        out.insert(path);
    }
}

/// Check every listed item with `threads` workers and build the report.
pub fn check(cfg: &DataConfig, listing: &Listing, threads: usize) -> Report {
    let nc = cfg.names.len();
    let results = check_items(&listing.items, nc, cfg.kpt_shape, threads.max(1));
    let mut splits: Vec<SplitStats> = cfg
        .splits
        .iter()
        .map(|_| SplitStats {
            per_class: cfg
                .names
                .iter()
                .enumerate()
                .map(|(id, name)| ClassCount {
                    id,
                    name: name.clone(),
                    instances: 0,
                    images: 0,
                })
                .collect(),
            ..SplitStats::default()
        })
        .collect();
    let mut findings = listing.findings.clone();
    let mut print = super::fingerprint::Fingerprint::default();
    for name in &cfg.names {
        print.add(name.as_bytes());
    }
    for (item, r) in listing.items.iter().zip(results) {
        print.add(cfg.splits[item.split].0.as_bytes());
        print.add_path(&item.image, &cfg.root);
        print.add(&r.image_bytes.to_le_bytes());
        print.add(&r.label_hash.to_le_bytes());
        let s = &mut splits[item.split];
        s.images += 1;
        s.bytes += r.image_bytes;
        if r.corrupt {
            s.corrupt += 1;
        } else {
            match r.label {
                LabelState::Missing => {
                    s.missing_labels += 1;
                    s.background += 1;
                }
                LabelState::Empty => {
                    s.empty_labels += 1;
                    s.background += 1;
                }
                LabelState::Objects => {
                    s.labelled += 1;
                    s.boxes += r.counts.boxes;
                    s.polygons += r.counts.polygons;
                    s.instances += r.counts.instances();
                    for (class, n) in r.counts.per_class.iter().enumerate() {
                        if *n > 0 {
                            s.per_class[class].instances += n;
                            s.per_class[class].images += 1;
                        }
                    }
                }
            }
        }
        findings.extend(r.findings);
    }
    let file = cfg.file.display().to_string();
    for (index, ((name, _), s)) in cfg.splits.iter().zip(&splits).enumerate() {
        let first = listing.items.iter().find(|i| i.split == index);
        summarize_split(&file, name, s, first, &mut findings);
    }
    if let Some(train) = cfg.splits.iter().position(|(n, _)| n == "train") {
        let s = &splits[train];
        if s.labelled > 0 {
            for c in s.per_class.iter().filter(|c| c.instances == 0) {
                findings.push(Finding {
                    severity: Severity::Warning,
                    file: file.clone(),
                    line: None,
                    message: format!("class {} ({}) has no instance in train", c.id, c.name),
                });
            }
        }
    }
    for w in &cfg.warnings {
        findings.push(Finding {
            severity: Severity::Warning,
            file: file.clone(),
            line: None,
            message: w.clone(),
        });
    }
    findings.sort();
    let errors = findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .count();
    let warnings = findings.len() - errors;
    let mut kept: Vec<Finding> = Vec::new();
    let mut omitted = 0;
    for sev in [Severity::Error, Severity::Warning] {
        let of_sev: Vec<&Finding> = findings.iter().filter(|f| f.severity == sev).collect();
        omitted += of_sev.len().saturating_sub(MAX_FINDINGS);
        kept.extend(of_sev.into_iter().take(MAX_FINDINGS).cloned());
    }
    Report {
        data: file,
        root: cfg.root.display().to_string(),
        nc,
        names: cfg.names.clone(),
        splits: cfg
            .splits
            .iter()
            .map(|(n, _)| n.clone())
            .zip(splits)
            .collect(),
        errors,
        warnings,
        findings: kept,
        findings_omitted: omitted,
        ok: errors == 0,
        cache: None,
        fingerprint: print.finish(),
    }
}

/// Split-level findings: a split without any label is broken (training learns
/// nothing, validation measures nothing); say where labels were looked for.
fn summarize_split(
    file: &str,
    name: &str,
    s: &SplitStats,
    first: Option<&Item>,
    findings: &mut Vec<Finding>,
) {
    if s.images == 0 || s.labelled > 0 || name == "test" {
        return;
    }
    let example = first
        .map(|i| {
            format!(
                " (for {} Ultralytics reads {})",
                i.image.display(),
                i.label.display()
            )
        })
        .unwrap_or_default();
    findings.push(Finding {
        severity: Severity::Error,
        file: file.to_string(),
        line: None,
        message: format!(
            "no labels found for `{name}`: none of its {} images has a label file with objects{example}; label files go in a `labels/` directory that mirrors `images/`",
            s.images
        ),
    });
}

fn check_items(
    items: &[Item],
    nc: usize,
    kpt: Option<(usize, usize)>,
    threads: usize,
) -> Vec<ItemResult> {
    let next = AtomicUsize::new(0);
    let mut results: Vec<(usize, ItemResult)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads.min(items.len().max(1)))
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(item) = items.get(i) else { break };
                        done.push((i, check_item(item, nc, kpt)));
                    }
                    done
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap_or_default())
            .collect()
    });
    results.sort_by_key(|(i, _)| *i);
    results.into_iter().map(|(_, r)| r).collect()
}

fn check_item(item: &Item, nc: usize, kpt: Option<(usize, usize)>) -> ItemResult {
    let mut r = ItemResult::default();
    match image::inspect(&item.image) {
        Ok(info) => {
            r.image_bytes = info.bytes;
            if info.jpeg_truncated {
                r.findings.push(warning(
                    &item.image,
                    None,
                    "JPEG without its end marker (Ultralytics restores it)",
                ));
            }
        }
        Err(e) => {
            r.corrupt = true;
            r.findings.push(error(&item.image, None, e.0));
        }
    }
    // A missing label is a background image; anything else is read as a
    // bounded regular file (a label linked to /dev/zero or a FIFO must not
    // eat memory or hang the prepare stage).
    if let Err(e) = std::fs::metadata(&item.label) {
        if e.kind() == std::io::ErrorKind::NotFound {
            r.label = LabelState::Missing;
            return r;
        }
    }
    let text = match crate::fsutil::read_regular(&item.label, MAX_LABEL_BYTES) {
        Ok(t) => {
            r.label_hash = super::fingerprint::label_hash(t.as_bytes());
            t
        }
        Err(e) => {
            r.corrupt = true;
            r.findings
                .push(error(&item.label, None, format!("cannot read: {e:#}")));
            return r;
        }
    };
    let (counts, problems) = labels::check(&text, nc, kpt);
    let mut label_error = false;
    for p in problems {
        label_error |= p.error;
        let line = (p.line > 0).then_some(p.line);
        r.findings.push(if p.error {
            error(&item.label, line, p.message)
        } else {
            warning(&item.label, line, &p.message)
        });
    }
    if label_error {
        r.corrupt = true;
    }
    r.label = if counts.instances() == 0 && !label_error {
        LabelState::Empty
    } else {
        LabelState::Objects
    };
    r.counts = counts;
    r
}
