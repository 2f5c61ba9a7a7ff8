//! The Ultralytics dataset YAML (`path`, `train`, `val`, `test`, `names`, `nc`,
//! `kpt_shape`), read with positions, and its paths resolved as Ultralytics'
//! `check_det_dataset` (`ultralytics/data/utils.py`) resolves them.

use crate::spec::SpecError;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use saphyr::{LoadableYamlNode, MarkedYaml, Scalar, YamlData};

/// The splits a dataset YAML can name, in the order they are checked.
pub const SPLITS: &[&str] = &["train", "val", "test"];

/// The most classes a dataset may declare with `nc`: a bound on the work a
/// four-line YAML can ask for (each class gets a name and a label counter).
pub const MAX_CLASSES: usize = 100_000;

/// A dataset YAML, parsed and resolved.
#[derive(Debug, Clone)]
pub struct DataConfig {
    /// The YAML file as given.
    pub file: PathBuf,
    /// The dataset root (`path`, resolved).
    pub root: PathBuf,
    /// Each split that is present and its sources, in `SPLITS` order.
    pub splits: Vec<(String, Vec<Source>)>,
    /// Class names; the index is the class id.
    pub names: Vec<String>,
    /// (keypoints, values per keypoint) of a pose dataset.
    pub kpt_shape: Option<(usize, usize)>,
    /// Things that work but may surprise (e.g. how a relative `path` was resolved).
    pub warnings: Vec<String>,
}

/// Where a split's images come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A directory searched recursively for image files.
    Dir(PathBuf),
    /// A text file listing image paths, one a line.
    List(PathBuf),
    /// One image file.
    Image(PathBuf),
}

impl Source {
    pub fn path(&self) -> &Path {
        match self {
            Source::Dir(p) | Source::List(p) | Source::Image(p) => p,
        }
    }
}

/// A dataset YAML's problems: the crate's one positioned diagnostic
/// (`spec::SpecError`, printed with `hint:`), gathered as `SpecErrors`.
pub type ConfigErrors = crate::spec::SpecErrors;

/// Read and resolve a dataset YAML. Relative paths that Ultralytics resolves
/// against the current directory are resolved against `cwd`.
pub fn load(file: &Path, cwd: &Path) -> Result<DataConfig, ConfigErrors> {
    let name = file.display().to_string();
    let fail = |line, column, key: &str, message: String, help: Option<String>| {
        ConfigErrors::dataset(
            &name,
            vec![SpecError {
                file: name.clone(),
                line,
                column,
                key: key.to_string(),
                message,
                help,
            }],
        )
    };
    let text = crate::fsutil::read_regular(file, crate::spec::MAX_SPEC_BYTES).map_err(|e| {
        fail(
            0,
            0,
            "",
            format!("cannot read the dataset YAML: {e:#}"),
            Some("give the path of an Ultralytics dataset YAML (with train, val and names)".into()),
        )
    })?;
    parse(&text, file, cwd)
}

/// `load` on text already read.
pub fn parse(text: &str, file: &Path, cwd: &Path) -> Result<DataConfig, ConfigErrors> {
    let name = file.display().to_string();
    let mut errors = Vec::new();
    let docs = match MarkedYaml::load_from_str(text) {
        Ok(docs) => docs,
        Err(e) => {
            return Err(ConfigErrors::dataset(
                &name,
                vec![SpecError {
                    file: name.clone(),
                    line: e.marker().line(),
                    column: e.marker().col() + 1,
                    key: String::new(),
                    message: format!("invalid YAML: {}", e.info()),
                    help: None,
                }],
            ))
        }
    };
    let Some(YamlData::Mapping(map)) = docs.first().map(|d| &d.data) else {
        return Err(ConfigErrors::dataset(
            &name,
            vec![SpecError {
                file: name.clone(),
                line: 1,
                column: 1,
                key: String::new(),
                message: "expected a mapping with train, val and names".into(),
                help: None,
            }],
        ));
    };
    let mut keys: BTreeMap<String, &MarkedYaml<'_>> = BTreeMap::new();
    for (k, v) in map.iter() {
        if let YamlData::Value(Scalar::String(s)) = &k.data {
            keys.insert(s.to_string(), v);
        }
    }
    let at = |node: &MarkedYaml<'_>| (node.span.start.line(), node.span.start.col() + 1);
    let mut err =
        |node: Option<&MarkedYaml<'_>>, key: &str, message: String, help: Option<String>| {
            let (line, column) = node.map_or((1, 1), at);
            errors.push(SpecError {
                file: name.clone(),
                line,
                column,
                key: key.to_string(),
                message,
                help,
            });
        };
    let mut warnings = Vec::new();
    let yaml_dir = file
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let yaml_dir = if yaml_dir.is_absolute() {
        yaml_dir.to_path_buf()
    } else {
        cwd.join(yaml_dir)
    };

    let root = dataset_root(&keys, &yaml_dir, cwd, &mut err, &mut warnings);
    let splits = read_splits(&keys, &root, &mut err);
    let nc = read_nc(&keys, &mut err);
    let names = match keys.get("names") {
        Some(v) => read_names(v, &mut err),
        None => match nc {
            Some(n) => (0..n).map(|i| format!("class{i}")).collect(),
            None => {
                err(
                    None,
                    "names",
                    "missing key `names`; Ultralytics needs the class names".into(),
                    Some(
                        "add e.g. names: [defect, scratch] or names: {0: defect, 1: scratch}"
                            .into(),
                    ),
                );
                Vec::new()
            }
        },
    };
    if let (Some(n), Some(v)) = (nc, keys.get("nc")) {
        if !names.is_empty() && n != names.len() {
            err(
                Some(v),
                "nc",
                format!(
                    "nc is {n} but `names` has {} classes; Ultralytics refuses the mismatch",
                    names.len()
                ),
                Some(format!("write nc: {}, or remove nc", names.len())),
            );
        }
    }
    let kpt_shape = read_kpt_shape(&keys, &mut err);
    if !errors.is_empty() {
        return Err(ConfigErrors::dataset(&name, errors));
    }
    Ok(DataConfig {
        file: file.to_path_buf(),
        root,
        splits,
        names,
        kpt_shape,
        warnings,
    })
}

/// The dataset root: `path` absent → the YAML's directory; relative → the
/// current directory, as Ultralytics does (then its datasets directory,
/// which we cannot know).
fn dataset_root(
    keys: &BTreeMap<String, &MarkedYaml<'_>>,
    yaml_dir: &Path,
    cwd: &Path,
    err: &mut impl FnMut(Option<&MarkedYaml<'_>>, &str, String, Option<String>),
    warnings: &mut Vec<String>,
) -> PathBuf {
    match keys.get("path").map(|v| (v, scalar_str(v))) {
        None | Some((_, Some(None))) => yaml_dir.to_path_buf(),
        Some((v, None)) => {
            err(Some(v), "path", "expected a directory path".into(), None);
            yaml_dir.to_path_buf()
        }
        Some((_, Some(Some(p)))) => {
            let p = PathBuf::from(p);
            if p.is_absolute() {
                p
            } else if cwd.join(&p).is_dir() {
                cwd.join(&p)
            } else if yaml_dir.join(&p).is_dir() {
                warnings.push(format!(
                    "`path: {}` was found relative to the YAML's directory, but Ultralytics resolves a relative `path` against the current directory: `yolo` may not find it; write an absolute path, or drop `path` to mean the YAML's directory",
                    p.display()
                ));
                yaml_dir.join(&p)
            } else {
                cwd.join(&p)
            }
        }
    }
}

/// Each split's sources (`train`, `val`, an optional `test`): paths relative
/// to the root, image directories, `.txt` lists or single images.
fn read_splits(
    keys: &BTreeMap<String, &MarkedYaml<'_>>,
    root: &Path,
    err: &mut impl FnMut(Option<&MarkedYaml<'_>>, &str, String, Option<String>),
) -> Vec<(String, Vec<Source>)> {
    let mut splits = Vec::new();
    for split in SPLITS {
        let node = keys.get(*split).copied().or_else(|| {
            // Ultralytics renames `validation` to `val`.
            (*split == "val")
                .then(|| keys.get("validation").copied())
                .flatten()
        });
        let Some(node) = node else {
            if *split != "test" {
                err(
                    None,
                    split,
                    format!("missing key `{split}`; Ultralytics needs `train` and `val`"),
                    Some(format!("add e.g. {split}: images/{split}")),
                );
            }
            continue;
        };
        let entries: Vec<(&MarkedYaml<'_>, String)> = match &node.data {
            YamlData::Value(Scalar::Null) if *split == "test" => continue,
            YamlData::Value(Scalar::String(s)) => vec![(node, s.to_string())],
            YamlData::Sequence(items) => {
                let mut out = Vec::new();
                for item in items {
                    match &item.data {
                        YamlData::Value(Scalar::String(s)) => out.push((item, s.to_string())),
                        _ => err(Some(item), split, "expected a path (a string)".into(), None),
                    }
                }
                out
            }
            _ => {
                err(
                    Some(node),
                    split,
                    "expected a path or a list of paths (image directories or .txt lists)".into(),
                    None,
                );
                continue;
            }
        };
        if entries.is_empty() {
            err(Some(node), split, "is an empty list".into(), None);
            continue;
        }
        let mut sources = Vec::new();
        for (item, entry) in entries {
            let mut p = root.join(&entry);
            if !p.exists() {
                if let Some(rest) = entry.strip_prefix("../") {
                    // Ultralytics' fallback for `../` paths written relative to the YAML.
                    if root.join(rest).exists() {
                        p = root.join(rest);
                    }
                }
            }
            if p.is_dir() {
                sources.push(Source::Dir(p));
            } else if p.is_file() && p.extension().is_some_and(|e| e == "txt") {
                sources.push(Source::List(p));
            } else if p.is_file() {
                sources.push(Source::Image(p));
            } else {
                let help = if keys.contains_key("download") {
                    Some("this YAML has a `download` script: download the dataset before submitting (compute nodes often have no internet)".to_string())
                } else {
                    Some(format!(
                        "paths are relative to the dataset root {}",
                        root.display()
                    ))
                };
                err(
                    Some(item),
                    split,
                    format!("{} does not exist", p.display()),
                    help,
                );
            }
        }
        splits.push((split.to_string(), sources));
    }

    splits
}

/// `nc`, the number of classes, when given and sane.
fn read_nc(
    keys: &BTreeMap<String, &MarkedYaml<'_>>,
    err: &mut impl FnMut(Option<&MarkedYaml<'_>>, &str, String, Option<String>),
) -> Option<usize> {
    match keys.get("nc") {
        Some(v) => match &v.data {
            YamlData::Value(Scalar::Integer(n)) if *n >= 1 && *n <= MAX_CLASSES as i64 => {
                Some(*n as usize)
            }
            YamlData::Value(Scalar::Integer(n)) if *n > MAX_CLASSES as i64 => {
                err(
                    Some(v),
                    "nc",
                    format!(
                        "{n} classes is more than the {MAX_CLASSES} this check accepts \
                         (the largest public detection sets have about 1,200)"
                    ),
                    Some("check the value; with `names` given, nc can be left out".into()),
                );
                None
            }
            _ => {
                err(
                    Some(v),
                    "nc",
                    "expected the number of classes (an integer ≥ 1)".into(),
                    None,
                );
                None
            }
        },
        None => None,
    }
}

/// `kpt_shape` of a pose dataset: keypoints and 2 or 3 values each.
fn read_kpt_shape(
    keys: &BTreeMap<String, &MarkedYaml<'_>>,
    err: &mut impl FnMut(Option<&MarkedYaml<'_>>, &str, String, Option<String>),
) -> Option<(usize, usize)> {
    match keys.get("kpt_shape") {
        None => None,
        Some(v) => match &v.data {
            YamlData::Sequence(items) => {
                match items.iter().map(|i| &i.data).collect::<Vec<_>>()[..] {
                    [YamlData::Value(Scalar::Integer(k)), YamlData::Value(Scalar::Integer(d))]
                        if *k >= 1 && (*d == 2 || *d == 3) =>
                    {
                        Some((*k as usize, *d as usize))
                    }
                    _ => {
                        err(
                            Some(v),
                            "kpt_shape",
                            "expected [keypoints, 2 or 3]".into(),
                            None,
                        );
                        None
                    }
                }
            }
            _ => {
                err(
                    Some(v),
                    "kpt_shape",
                    "expected [keypoints, 2 or 3]".into(),
                    None,
                );
                None
            }
        },
    }
}

/// `Some(Some(s))` for a string, `Some(None)` for null, `None` for anything else.
fn scalar_str<'a>(v: &'a MarkedYaml<'_>) -> Option<Option<&'a str>> {
    match &v.data {
        YamlData::Value(Scalar::String(s)) => Some(Some(s.as_ref())),
        YamlData::Value(Scalar::Null) => Some(None),
        _ => None,
    }
}

/// `names` as a list, or a map from 0..n-1 to names (Ultralytics' `check_class_names`).
fn read_names(
    v: &MarkedYaml<'_>,
    err: &mut impl FnMut(Option<&MarkedYaml<'_>>, &str, String, Option<String>),
) -> Vec<String> {
    let name_of = |n: &MarkedYaml<'_>| match &n.data {
        YamlData::Value(Scalar::String(s)) => Some(s.to_string()),
        YamlData::Value(Scalar::Integer(i)) => Some(i.to_string()),
        YamlData::Value(Scalar::FloatingPoint(f)) => Some(f.to_string()),
        YamlData::Value(Scalar::Boolean(b)) => Some(if *b { "True" } else { "False" }.to_string()),
        _ => None,
    };
    match &v.data {
        YamlData::Sequence(items) => {
            let mut out = Vec::new();
            for item in items {
                match name_of(item) {
                    Some(n) => out.push(n),
                    None => err(Some(item), "names", "expected a class name".into(), None),
                }
            }
            if out.is_empty() {
                err(
                    Some(v),
                    "names",
                    "is empty; a dataset needs at least one class".into(),
                    None,
                );
            }
            out
        }
        YamlData::Mapping(map) => {
            let mut by_id = BTreeMap::new();
            for (k, val) in map.iter() {
                let id = match &k.data {
                    YamlData::Value(Scalar::Integer(i)) if *i >= 0 => *i as usize,
                    YamlData::Value(Scalar::String(s)) if s.parse::<usize>().is_ok() => {
                        s.parse().unwrap_or(0)
                    }
                    _ => {
                        err(
                            Some(k),
                            "names",
                            "expected a class index (0, 1, 2, …) as the key".into(),
                            None,
                        );
                        continue;
                    }
                };
                match name_of(val) {
                    Some(n) => {
                        by_id.insert(id, n);
                    }
                    None => err(Some(val), "names", "expected a class name".into(), None),
                }
            }
            let n = by_id.len();
            if let Some((&max, _)) = by_id.iter().next_back() {
                if max >= n {
                    err(
                        Some(v),
                        "names",
                        format!(
                            "class indices must be 0-{} (one per class), found {max}",
                            n.saturating_sub(1)
                        ),
                        None,
                    );
                }
            } else {
                err(
                    Some(v),
                    "names",
                    "is empty; a dataset needs at least one class".into(),
                    None,
                );
            }
            by_id.into_values().collect()
        }
        _ => {
            err(
                Some(v),
                "names",
                "expected a list of class names or a map {index: name}".into(),
                None,
            );
            Vec::new()
        }
    }
}

/// The label file of an image, as Ultralytics' `img2label_paths`: the last
/// `/images/` of the path becomes `/labels/`, and the extension becomes `.txt`.
pub fn label_path(image: &Path) -> PathBuf {
    let s = image.to_string_lossy();
    let sep = std::path::MAIN_SEPARATOR;
    let images = format!("{sep}images{sep}");
    let labels = format!("{sep}labels{sep}");
    let swapped = match s.rfind(&images) {
        Some(i) => format!("{}{labels}{}", &s[..i], &s[i + images.len()..]),
        None => s.to_string(),
    };
    // rsplit(".", 1)[0] + ".txt": only a dot in the file name counts as an extension
    // here, since Ultralytics splits the whole path string.
    match swapped.rfind('.') {
        Some(dot) => PathBuf::from(format!("{}.txt", &swapped[..dot])),
        None => PathBuf::from(format!("{swapped}.txt")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_paths_follow_ultralytics() {
        assert_eq!(
            label_path(Path::new("/d/images/train/a.jpg")),
            Path::new("/d/labels/train/a.txt")
        );
        // Only the last /images/ changes.
        assert_eq!(
            label_path(Path::new("/images/x/images/b.v2.png")),
            Path::new("/images/x/labels/b.v2.txt")
        );
        // No images/ directory: the label sits next to the image.
        assert_eq!(
            label_path(Path::new("/d/train/c.jpg")),
            Path::new("/d/train/c.txt")
        );
    }

    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for d in ["images/train", "images/val", "labels/train"] {
            std::fs::create_dir_all(dir.path().join(d)).unwrap();
        }
        std::fs::write(dir.path().join("val.txt"), "./images/val/a.png\n").unwrap();
        dir
    }

    #[test]
    fn a_typical_yaml_resolves_against_its_directory() {
        let dir = tree();
        let yaml = dir.path().join("data.yaml");
        let text = "# comment\ntrain: images/train\nval: [val.txt]\ntest:\nnames:\n  0: ok\n  1: \"no\"\nnc: 2\n";
        let cfg = parse(text, &yaml, Path::new("/")).unwrap();
        assert_eq!(cfg.root, dir.path());
        assert_eq!(cfg.names, ["ok", "no"]);
        assert_eq!(cfg.splits.len(), 2);
        assert_eq!(
            cfg.splits[0].1,
            vec![Source::Dir(dir.path().join("images/train"))]
        );
        assert_eq!(
            cfg.splits[1].1,
            vec![Source::List(dir.path().join("val.txt"))]
        );
    }

    #[test]
    fn a_relative_path_is_looked_up_like_ultralytics() {
        let top = tempfile::tempdir().unwrap();
        let dataset = tree();
        let ds = top.path().join("ds");
        std::os::unix::fs::symlink(dataset.path(), &ds).unwrap();
        let yaml = top.path().join("data.yaml");
        let text = "path: ds\ntrain: images/train\nval: images/val\nnames: [a]\n";
        // Relative to the current directory first.
        let cfg = parse(text, &yaml, top.path()).unwrap();
        assert_eq!(cfg.root, ds);
        assert!(cfg.warnings.is_empty());
        // Found only relative to the YAML: accepted, with a warning.
        let elsewhere = tempfile::tempdir().unwrap();
        let cfg = parse(text, &yaml, elsewhere.path()).unwrap();
        assert_eq!(cfg.root, ds);
        assert_eq!(cfg.warnings.len(), 1, "{:?}", cfg.warnings);
    }

    #[test]
    fn problems_are_located_and_collected() {
        let dir = tree();
        let yaml = dir.path().join("data.yaml");
        let text = "train: images/nope\nnames: {0: a, 2: c}\nnc: 3\n";
        let e = parse(text, &yaml, Path::new("/")).unwrap_err();
        let keys: Vec<(&str, usize)> = e.errors.iter().map(|e| (e.key.as_str(), e.line)).collect();
        assert_eq!(
            keys,
            [("val", 1), ("train", 1), ("names", 2), ("nc", 3)],
            "{e}"
        );
        assert!(e.to_string().contains("images/nope does not exist"), "{e}");
        let e = parse("train: [\n", &yaml, Path::new("/")).unwrap_err();
        assert!(e.errors[0].message.starts_with("invalid YAML"), "{e}");
        let e = parse("- a\n- b\n", &yaml, Path::new("/")).unwrap_err();
        assert!(e.errors[0].message.contains("mapping"));
    }

    #[test]
    fn a_huge_nc_is_refused_not_allocated() {
        let dir = tree();
        let yaml = dir.path().join("data.yaml");
        let text = "train: images/train\nval: images/val\nnc: 1000000000\n";
        let start = std::time::Instant::now();
        let e = parse(text, &yaml, dir.path()).unwrap_err();
        assert!(start.elapsed() < std::time::Duration::from_secs(1));
        assert!(
            e.errors
                .iter()
                .any(|e| e.key == "nc" && e.message.contains("100000")),
            "{e}"
        );
    }
}
