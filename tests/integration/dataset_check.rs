//! `yolo-sched dataset check` through the binary, on datasets written here (real
//! PNG files from a minimal encoder, label files, dataset YAMLs), good and broken.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use yolo_sched::dataset::image::encode_png_gray;

fn yolo_sched(dir: &Path, args: &[&str]) -> Output {
    crate::common::yolo()
        .current_dir(dir)
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .expect("run yolo-sched")
}

fn text(o: &[u8]) -> String {
    String::from_utf8_lossy(o).into_owned()
}

fn write(path: &Path, bytes: &[u8]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}

fn png(side: u32) -> Vec<u8> {
    encode_png_gray(side, side, |x, y| ((x * 7 + y * 3) % 256) as u8)
}

/// A small valid dataset: 4 train images (one without a label file, one with an
/// empty one), 2 val images listed in a .txt file, 2 classes.
fn good_dataset(root: &Path) -> PathBuf {
    for i in 0..4 {
        write(&root.join(format!("images/train/t{i}.png")), &png(32));
    }
    write(
        &root.join("labels/train/t0.txt"),
        b"0 0.5 0.5 0.25 0.25\n1 0.2 0.2 0.1 0.1\n",
    );
    write(
        &root.join("labels/train/t1.txt"),
        b"1 0.1 0.1 0.9 0.1 0.5 0.9\n",
    );
    write(&root.join("labels/train/t2.txt"), b"");
    // t3 has no label file: a background image.
    for i in 0..2 {
        write(&root.join(format!("images/val/v{i}.png")), &png(24));
        write(
            &root.join(format!("labels/val/v{i}.txt")),
            b"0 0.5 0.5 0.5 0.5\n",
        );
    }
    write(
        &root.join("val.txt"),
        b"./images/val/v0.png\n./images/val/v1.png\n",
    );
    let yaml = root.join("data.yaml");
    write(
        &yaml,
        b"# test dataset\ntrain: images/train\nval: val.txt\nnames: [part, defect]\n",
    );
    yaml
}

#[track_caller]
fn json_of(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}{}", text(&out.stdout), text(&out.stderr)))
}

#[test]
fn a_good_dataset_is_counted_exactly() {
    let dir = tempfile::tempdir().unwrap();
    good_dataset(dir.path());
    let out = yolo_sched(dir.path(), &["dataset", "check", "data.yaml", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v = json_of(&out);
    assert_eq!(v["ok"], true);
    assert_eq!(v["nc"], 2);
    let train = &v["splits"]["train"];
    assert_eq!(train["images"], 4);
    assert_eq!(train["labelled"], 2);
    assert_eq!(train["background"], 2);
    assert_eq!(train["missing_labels"], 1);
    assert_eq!(train["empty_labels"], 1);
    assert_eq!(train["instances"], 3);
    assert_eq!(train["boxes"], 2);
    assert_eq!(train["polygons"], 1);
    assert_eq!(train["per_class"][1]["name"], "defect");
    assert_eq!(train["per_class"][1]["instances"], 2);
    assert_eq!(train["per_class"][1]["images"], 2);
    assert_eq!(v["splits"]["val"]["images"], 2);
    assert_eq!(v["splits"]["val"]["per_class"][0]["instances"], 2);
    assert_eq!(v["errors"], 0);

    let out = yolo_sched(dir.path(), &["dataset", "check", "data.yaml"]);
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("ok: the dataset can be trained on"),
        "{stdout}"
    );
    assert!(stdout.contains("1 defect"), "{stdout}");
}

#[test]
fn broken_images_and_labels_are_errors_with_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    good_dataset(root);
    // Class 2 in a 2-class dataset, a coordinate of 1.5, a 6-column line.
    write(
        &root.join("labels/train/t0.txt"),
        b"0 0.5 0.5 0.25 0.25\n2 0.2 0.2 0.1 0.1\n",
    );
    write(&root.join("labels/train/t2.txt"), b"0 1.5 0.5 0.2 0.2\n");
    write(&root.join("labels/val/v1.txt"), b"0 0.5 0.5 0.5 0.5 0.87\n");
    // A truncated PNG, an HTML page saved as .png, a 5x5 image.
    let full = png(32);
    write(&root.join("images/train/t3.png"), &full[..full.len() - 20]);
    write(
        &root.join("images/train/t4.png"),
        b"<html>404 Not Found</html>",
    );
    write(&root.join("images/train/t5.png"), &png(5));
    let summary = root.join("out/summary.json");
    let out = yolo_sched(
        root,
        &[
            "dataset",
            "check",
            "data.yaml",
            "--summary",
            summary.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("has 6 errors; fix them before training"),
        "{stderr}"
    );
    for needle in [
        "labels/train/t0.txt:2: class 2 is not below the dataset's class count 2",
        "labels/train/t2.txt:1: coordinate 1.5 is outside [0, 1]",
        "labels/val/v1.txt:1: 6 values",
        "images/train/t3.png: truncated PNG",
        "images/train/t4.png: not a readable image",
        "images/train/t5.png: image is 5×5 pixels",
    ] {
        assert!(stdout.contains(needle), "missing {needle:?} in\n{stdout}");
    }
    // The summary is written also when the check fails.
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&summary).unwrap()).unwrap();
    assert_eq!(v["ok"], false);
    assert_eq!(v["errors"], 6);
    assert_eq!(v["splits"]["train"]["corrupt"], 5);
    let f = &v["findings"][0];
    assert_eq!(f["severity"], "error");
    assert!(v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["line"] == 2 && f["file"].as_str().unwrap().ends_with("labels/train/t0.txt")));
}

#[test]
fn labels_in_the_wrong_place_are_explained() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    good_dataset(root);
    std::fs::rename(root.join("labels/val"), root.join("val-labels")).unwrap();
    let out = yolo_sched(root, &["dataset", "check", "data.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("no labels found for `val`"), "{stdout}");
    assert!(stdout.contains("labels/val/v0.txt"), "{stdout}");
}

#[test]
fn a_wrong_yaml_is_invalid_input_with_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    good_dataset(root);
    write(
        &root.join("bad.yaml"),
        b"train: images/train\nval: images/nowhere\nnc: 3\nnames: [a, b]\n",
    );
    let out = yolo_sched(root, &["dataset", "check", "bad.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("bad.yaml:2:6: `val`:"), "{stderr}");
    assert!(stderr.contains("images/nowhere does not exist"), "{stderr}");
    assert!(
        stderr.contains("bad.yaml:3:5: `nc`: nc is 3 but `names` has 2 classes"),
        "{stderr}"
    );
    let out = yolo_sched(root, &["dataset", "check", "missing.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("cannot read the dataset YAML"));
}

#[test]
fn cache_copies_once_and_the_copy_checks_clean() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ds");
    good_dataset(&root);
    let cache = dir.path().join("cache");
    let out = yolo_sched(
        &root,
        &[
            "dataset",
            "check",
            "data.yaml",
            "--cache",
            cache.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let copy = PathBuf::from(stdout.lines().last().unwrap());
    assert!(copy.starts_with(&cache), "{stdout}");
    assert!(stdout.contains("cached a copy in"));
    let yaml = std::fs::read_to_string(&copy).unwrap();
    assert!(
        yaml.contains(&format!("path: {}", copy.parent().unwrap().display())),
        "{yaml}"
    );
    assert!(yaml.contains("names:"), "{yaml}");
    // The copy is a dataset of its own, with the same counts.
    let out = yolo_sched(
        dir.path(),
        &["dataset", "check", copy.to_str().unwrap(), "--json"],
    );
    let v = json_of(&out);
    assert_eq!(v["ok"], true);
    assert_eq!(v["splits"]["train"]["instances"], 3);
    assert_eq!(v["splits"]["val"]["images"], 2);
    assert!(v["root"]
        .as_str()
        .unwrap()
        .starts_with(cache.to_str().unwrap()));
    // A second run reuses the copy; no temporary directory is left behind.
    let out = yolo_sched(
        &root,
        &[
            "dataset",
            "check",
            "data.yaml",
            "--cache",
            cache.to_str().unwrap(),
        ],
    );
    let stdout = text(&out.stdout);
    assert!(stdout.contains("reused the cached copy"), "{stdout}");
    assert_eq!(PathBuf::from(stdout.lines().last().unwrap()), copy);
    let entries: Vec<_> = std::fs::read_dir(&cache).unwrap().collect();
    assert_eq!(entries.len(), 1);
    // A changed dataset gets a new copy.
    write(&root.join("labels/train/t2.txt"), b"0 0.4 0.4 0.2 0.2\n");
    let out = yolo_sched(
        &root,
        &[
            "dataset",
            "check",
            "data.yaml",
            "--cache",
            cache.to_str().unwrap(),
        ],
    );
    assert_ne!(
        PathBuf::from(text(&out.stdout).lines().last().unwrap()),
        copy
    );
}

#[test]
fn a_broken_dataset_is_not_cached() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ds");
    good_dataset(&root);
    write(&root.join("labels/train/t0.txt"), b"7 0.5 0.5 0.2 0.2\n");
    let cache = dir.path().join("cache");
    let out = yolo_sched(
        &root,
        &[
            "dataset",
            "check",
            "data.yaml",
            "--cache",
            cache.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(std::fs::read_dir(&cache).map_or(true, |mut d| d.next().is_none()));
}

#[test]
fn concurrent_caches_of_one_dataset_leave_one_copy() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ds");
    good_dataset(&root);
    let cache = dir.path().join("cache");
    let children: Vec<_> = (0..4)
        .map(|_| {
            crate::common::yolo()
                .current_dir(&root)
                .args([
                    "dataset",
                    "check",
                    "data.yaml",
                    "--cache",
                    cache.to_str().unwrap(),
                ])
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut paths = Vec::new();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0));
        paths.push(text(&out.stdout).lines().last().unwrap().to_string());
    }
    paths.dedup();
    assert_eq!(paths.len(), 1, "{paths:?}");
    let names: Vec<String> = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
}

#[test]
fn the_demo_dataset_passes_and_regenerates_byte_for_byte() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = yolo_sched(
        repo,
        &[
            "dataset",
            "check",
            "examples/pcb/dataset/data.yaml",
            "--json",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    let v = json_of(&out);
    assert_eq!(v["nc"], 3);
    assert_eq!(v["splits"]["train"]["images"], 36);
    assert_eq!(v["splits"]["val"]["images"], 12);
    assert_eq!(v["warnings"], 0);

    if Command::new("python3").arg("--version").output().is_err() {
        // The test command installs python3 (slurm/deps.sh): there this check must run.
        assert_ne!(
            std::env::var(crate::common::EXPECT_CLUSTER_ENV).as_deref(),
            Ok("1"),
            "python3 not found, but the test command installs it"
        );
        eprintln!("python3 not found: skipping the regeneration check");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    std::fs::copy(
        repo.join("examples/pcb/generate.py"),
        tmp.path().join("generate.py"),
    )
    .unwrap();
    let status = Command::new("python3")
        .arg(tmp.path().join("generate.py"))
        .status()
        .unwrap();
    assert!(status.success());
    // Label files must be identical; images must have identical pixels (their
    // compressed bytes may differ between zlib builds, e.g. zlib-ng).
    let mut compared = 0;
    for sub in ["labels/train", "labels/val"] {
        for entry in std::fs::read_dir(repo.join("examples/pcb/dataset").join(sub)).unwrap() {
            let path = entry.unwrap().path();
            let fresh = tmp
                .path()
                .join("dataset")
                .join(sub)
                .join(path.file_name().unwrap());
            assert_eq!(
                std::fs::read(&path).unwrap(),
                std::fs::read(&fresh).unwrap(),
                "{}",
                path.display()
            );
            compared += 1;
        }
    }
    let same_pixels = Command::new("python3")
        .arg("-c")
        .arg(PNG_PIXELS_EQUAL)
        .arg(repo.join("examples/pcb/dataset/images"))
        .arg(tmp.path().join("dataset/images"))
        .output()
        .unwrap();
    assert!(
        same_pixels.status.success(),
        "{}",
        text(&same_pixels.stderr)
    );
    compared += text(&same_pixels.stdout).trim().parse::<usize>().unwrap();
    assert_eq!(compared, 96);
}

/// Compare the decoded pixel data (IHDR + inflated IDAT) of the PNGs of two
/// directory trees; print how many were compared.
const PNG_PIXELS_EQUAL: &str = r#"
import os, struct, sys, zlib
def pixels(path):
    data, i, ihdr, idat = open(path, "rb").read(), 8, b"", b""
    while i < len(data):
        n = struct.unpack(">I", data[i:i + 4])[0]
        kind, body = data[i + 4:i + 8], data[i + 8:i + 8 + n]
        ihdr = body if kind == b"IHDR" else ihdr
        idat += body if kind == b"IDAT" else b""
        i += 12 + n
    return ihdr, zlib.decompress(idat)
a, b, n = sys.argv[1], sys.argv[2], 0
for dirpath, _, files in os.walk(a):
    for f in files:
        rel = os.path.relpath(os.path.join(dirpath, f), a)
        if pixels(os.path.join(a, rel)) != pixels(os.path.join(b, rel)):
            sys.exit(f"pixels differ: {rel}")
        n += 1
print(n)
"#;
