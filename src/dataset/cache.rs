//! `--cache DIR`: copy a checked dataset (images, labels and a rewritten dataset
//! YAML) to node-local storage, so training does not read from a network file
//! system.
//!
//! The copy is named after a fingerprint of the dataset (file names, sizes and
//! modification times, and the YAML), goes to a temporary directory first and is
//! renamed into place, so readers see a whole copy or none. Several jobs caching
//! the same dataset at once (array tasks on one node) each copy, one rename wins
//! and the others reuse its copy. A copy that is already there is reused.

use std::path::{Component, Path, PathBuf};
use std::time::UNIX_EPOCH;

use anyhow::{bail, Context, Result};
use saphyr::{LoadableYamlNode, Mapping, Scalar, Yaml, YamlEmitter};

use super::check::{CacheInfo, Item};
use super::config::{label_path, DataConfig};
use crate::fsutil::write_atomic;

/// One file to copy: where it is, and where it goes relative to the copy's root.
struct Planned {
    from: PathBuf,
    to: PathBuf,
    bytes: u64,
}

/// Copy the dataset of `cfg` (its checked `items`) under `cache_root`.
pub fn cache(cfg: &DataConfig, items: &[Item], cache_root: &Path) -> Result<CacheInfo> {
    std::fs::create_dir_all(cache_root)
        .with_context(|| format!("creating the cache directory {}", cache_root.display()))?;
    let cache_root = std::fs::canonicalize(cache_root)?;
    let yaml_text = crate::fsutil::read_regular(&cfg.file, crate::spec::MAX_SPEC_BYTES)?;
    let root = normalize(&cfg.root);

    let mut files = Vec::with_capacity(items.len() * 2);
    for item in items {
        files.push(plan(&root, &item.image)?);
        if item.label.is_file() {
            files.push(plan(&root, &item.label)?);
        }
    }
    files.sort_by(|a, b| a.to.cmp(&b.to));
    files.dedup_by(|a, b| a.to == b.to);

    let stem = safe_stem(&cfg.file);
    let mut fingerprint = yaml_text.clone().into_bytes();
    for f in &files {
        let meta = std::fs::metadata(&f.from)?;
        let mtime = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        fingerprint.extend_from_slice(f.to.as_os_str().as_encoded_bytes());
        fingerprint.extend_from_slice(&f.bytes.to_le_bytes());
        fingerprint.extend_from_slice(&mtime.to_le_bytes());
    }
    let name = format!("{stem}-{:016x}", crate::spec::fnv1a64(&fingerprint));
    let final_dir = cache_root.join(&name);
    let final_yaml = final_dir.join(format!("{stem}.yaml"));

    // The label of a copied image must be found where Ultralytics looks for it.
    for item in items {
        let image_to = final_dir.join(relative_to(&root, &normalize(&item.image)));
        let label_to = final_dir.join(relative_to(&root, &normalize(&item.label)));
        if label_path(&image_to) != label_to {
            bail!(
                "cannot cache {}: its label {} would not be found next to the copy (Ultralytics looks for labels by replacing /images/ with /labels/)",
                item.image.display(),
                item.label.display()
            );
        }
    }

    if final_yaml.is_file() {
        return Ok(CacheInfo {
            dir: final_dir.display().to_string(),
            data: final_yaml.display().to_string(),
            copied: false,
        });
    }

    let needed: u64 = files.iter().map(|f| f.bytes).sum();
    let available = free_bytes(&cache_root)?;
    if needed > available {
        bail!(
            "the cache directory {} has {} free, and the dataset needs {}",
            cache_root.display(),
            super::human_bytes(available),
            super::human_bytes(needed)
        );
    }

    let nanos = std::time::SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let tmp = cache_root.join(format!(".{name}.tmp-{}-{nanos}", std::process::id()));
    let result = fill(
        &tmp, &files, cfg, &root, &final_dir, &yaml_text, &stem, items,
    );
    if let Err(e) = result {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    match std::fs::rename(&tmp, &final_dir) {
        Ok(()) => {
            sync_dir(&cache_root)?;
            Ok(CacheInfo {
                dir: final_dir.display().to_string(),
                data: final_yaml.display().to_string(),
                copied: true,
            })
        }
        // Another job finished the same copy first: use that one.
        Err(_) if final_yaml.is_file() => {
            let _ = std::fs::remove_dir_all(&tmp);
            Ok(CacheInfo {
                dir: final_dir.display().to_string(),
                data: final_yaml.display().to_string(),
                copied: false,
            })
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&tmp);
            Err(e).with_context(|| format!("renaming {} to {}", tmp.display(), final_dir.display()))
        }
    }
}

/// Copy the files into `tmp` and write the image lists and the YAML, which
/// already name `final_dir` (where `tmp` will be renamed to).
#[allow(clippy::too_many_arguments)]
fn fill(
    tmp: &Path,
    files: &[Planned],
    cfg: &DataConfig,
    root: &Path,
    final_dir: &Path,
    yaml_text: &str,
    stem: &str,
    items: &[Item],
) -> Result<()> {
    std::fs::create_dir(tmp).with_context(|| format!("creating {}", tmp.display()))?;
    for f in files {
        let to = tmp.join(&f.to);
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::copy(&f.from, &to)
            .with_context(|| format!("copying {} to {}", f.from.display(), to.display()))?;
    }
    let mut split_lists = Vec::new();
    for (index, (split, _)) in cfg.splits.iter().enumerate() {
        let mut list = String::new();
        for item in items.iter().filter(|i| i.split == index) {
            let copied = final_dir.join(relative_to(root, &normalize(&item.image)));
            list.push_str(&copied.to_string_lossy());
            list.push('\n');
        }
        let list_name = format!("{split}.txt");
        write_atomic(&tmp.join(&list_name), list.as_bytes(), 0o644)?;
        split_lists.push((split.clone(), list_name));
    }
    let yaml = rewrite_yaml(yaml_text, final_dir, &split_lists)?;
    let header = format!(
        "# Copy of {} made by `yolo-sched dataset check --cache`; do not edit.\n",
        cfg.file.display()
    );
    write_atomic(
        &tmp.join(format!("{stem}.yaml")),
        format!("{header}{yaml}\n").as_bytes(),
        0o644,
    )?;
    sync_dir(tmp)
}

/// The original YAML with `path` and the splits pointing at the copy, and its
/// `download` script dropped; every other key (names, nc, kpt_shape, …) kept.
fn rewrite_yaml(text: &str, final_dir: &Path, splits: &[(String, String)]) -> Result<String> {
    let docs = Yaml::load_from_str(text).context("re-reading the dataset YAML")?;
    let Some(Yaml::Mapping(original)) = docs.into_iter().next() else {
        bail!("the dataset YAML is not a mapping");
    };
    let key = |s: &str| Yaml::Value(Scalar::String(s.to_string().into()));
    let mut out = Mapping::new();
    out.insert(key("path"), key(&final_dir.to_string_lossy()));
    for (split, list) in splits {
        out.insert(key(split), key(list));
    }
    for (k, v) in original {
        let skip = matches!(
            &k,
            Yaml::Value(Scalar::String(s))
                if matches!(s.as_ref(), "path" | "train" | "val" | "validation" | "test" | "download")
        );
        if !skip {
            out.insert(k, v);
        }
    }
    let mut emitted = String::new();
    YamlEmitter::new(&mut emitted)
        .dump(&Yaml::Mapping(out))
        .map_err(|e| anyhow::anyhow!("writing the dataset YAML: {e:?}"))?;
    Ok(emitted.trim_start_matches("---\n").to_string())
}

fn plan(root: &Path, path: &Path) -> Result<Planned> {
    let from = normalize(path);
    let bytes = std::fs::metadata(&from)
        .with_context(|| format!("reading {}", from.display()))?
        .len();
    Ok(Planned {
        to: relative_to(root, &from),
        from,
        bytes,
    })
}

/// Where a file goes inside the copy: its path under the dataset root, or
/// `_external/<absolute path>` for files outside it (from image lists).
fn relative_to(root: &Path, path: &Path) -> PathBuf {
    match path.strip_prefix(root) {
        Ok(rel) => rel.to_path_buf(),
        Err(_) => Path::new("_external").join(path.strip_prefix("/").unwrap_or(path)),
    }
}

/// Remove `.` and resolve `..` without touching the file system.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other),
        }
    }
    out
}

fn safe_stem(file: &Path) -> String {
    let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("data");
    let clean: String = stem
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if clean.is_empty() || clean.starts_with('.') {
        format!("data{clean}")
    } else {
        clean
    }
}

fn free_bytes(dir: &Path) -> Result<u64> {
    let st = nix::sys::statvfs::statvfs(dir)
        .with_context(|| format!("reading free space of {}", dir.display()))?;
    // The field widths differ between platforms; on Linux both are u64.
    #[allow(clippy::useless_conversion)]
    let bytes = u64::from(st.blocks_available()).saturating_mul(u64::from(st.fragment_size()));
    Ok(bytes)
}

fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("syncing {}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_inside_and_outside_the_root() {
        let root = Path::new("/data/pcb");
        assert_eq!(
            relative_to(root, Path::new("/data/pcb/images/a.png")),
            Path::new("images/a.png")
        );
        assert_eq!(
            relative_to(root, Path::new("/other/images/a.png")),
            Path::new("_external/other/images/a.png")
        );
        assert_eq!(normalize(Path::new("/a/./b/../c")), Path::new("/a/c"));
        assert_eq!(safe_stem(Path::new("x/my data.yaml")), "my_data");
        assert_eq!(super::super::human_bytes(1536), "1.5 KiB");
    }

    #[test]
    fn the_rewritten_yaml_keeps_classes_and_drops_download() {
        let text = "path: ../x\ntrain: images/train\nval: images/val\nnames:\n  0: ok\n  1: \"no\"\nkpt_shape: [17, 3]\ndownload: |\n  import os\n";
        let out = rewrite_yaml(
            text,
            Path::new("/cache/d-1"),
            &[
                ("train".into(), "train.txt".into()),
                ("val".into(), "val.txt".into()),
            ],
        )
        .unwrap();
        assert!(
            out.starts_with("path: /cache/d-1\ntrain: train.txt\nval: val.txt\n"),
            "{out}"
        );
        assert!(out.contains("1: \"no\""), "{out}");
        assert!(out.contains("kpt_shape"), "{out}");
        assert!(!out.contains("download"), "{out}");
    }
}
