//! The bad-spec corpus: every `tests/specs/*.toml` must make `yolo-sched validate`
//! exit 2 with a message holding the lines of its sibling `*.expected`, in order;
//! every spec in `tests/specs/good/` must pass.

use std::path::{Path, PathBuf};
use std::process::Output;

fn specs_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/specs")
}

fn validate(dir: &Path, spec: &str, extra: &[&str]) -> Output {
    crate::common::yolo()
        .current_dir(dir)
        .arg("validate")
        // The corpus is about the spec alone; fitting the cluster is tested live.
        .arg("--no-cluster")
        .arg(spec)
        .args(extra)
        .env("NO_COLOR", "1")
        // The good specs' workdirs use $USER, which a CI shell may not set.
        .env("USER", "corpus")
        .env("CORPUS_PROJECT", "demo")
        .env_remove("YOLO_SCHED_CORPUS_UNSET")
        .env_remove("YOLO_SCHED_SITE")
        .output()
        .expect("run yolo-sched")
}

#[track_caller]
fn files_with_ext(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    out.sort();
    out
}

#[test]
fn every_bad_spec_fails_with_its_expected_message() {
    let dir = specs_dir();
    let specs = files_with_ext(&dir, "toml");
    assert!(
        specs.len() >= 15,
        "the corpus has only {} specs",
        specs.len()
    );
    let mut failures = Vec::new();
    for spec in &specs {
        let name = spec.file_name().unwrap().to_str().unwrap();
        let expected_path = spec.with_extension("expected");
        let expected = std::fs::read_to_string(&expected_path)
            .unwrap_or_else(|e| panic!("{} has no .expected file: {e}", name));
        let out = validate(&dir, name, &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.code() != Some(2) {
            failures.push(format!(
                "{name}: exit {:?}, expected 2\n{stderr}",
                out.status.code()
            ));
            continue;
        }
        if !out.stdout.is_empty() {
            failures.push(format!(
                "{name}: printed to stdout: {}",
                String::from_utf8_lossy(&out.stdout)
            ));
        }
        // Each expected line must appear, after the previous one.
        let mut from = 0;
        for line in expected
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
        {
            match stderr[from..].find(line) {
                Some(i) => from += i + line.len(),
                None => {
                    failures.push(format!(
                        "{name}: missing (in order) {line:?}\n--- stderr ---\n{stderr}"
                    ));
                    break;
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn every_good_spec_passes() {
    let dir = specs_dir().join("good");
    let specs = files_with_ext(&dir, "toml");
    assert!(specs.len() >= 3);
    for spec in specs {
        let name = spec.file_name().unwrap().to_str().unwrap();
        let out = validate(&dir, name, &[]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{name}: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.starts_with("ok: "), "{name}: {stdout}");
    }
}

#[test]
fn good_specs_report_stages_and_variants() {
    let dir = specs_dir().join("good");
    let out = validate(&dir, "everything.toml", &[]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "ok: every.key_1, 4 stages (prepare → train → val → export), 16 variants"
    );
    let out = validate(&dir, "minimal.toml", &[]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "ok: minimal, 3 stages (prepare → train → export), 1 variant"
    );
}

#[test]
fn json_output_carries_the_spec_or_the_errors() {
    let out = validate(&specs_dir().join("good"), "issue-example.toml", &["--json"]);
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ok"], true);
    assert_eq!(v["variants"], 4);
    assert_eq!(
        v["stages"],
        serde_json::json!(["prepare", "train", "val", "export"])
    );
    assert_eq!(v["spec"]["train"]["args"]["lr0"], 0.01);
    assert_eq!(v["spec"]["resources"]["gpu"], "auto");
    assert_eq!(v["hash"].as_str().unwrap().len(), 16);

    let out = validate(&specs_dir(), "20-many-errors-sorted.toml", &["--json"]);
    assert_eq!(out.status.code(), Some(2));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ok"], false);
    let errors = v["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 9);
    let lines: Vec<u64> = errors.iter().map(|e| e["line"].as_u64().unwrap()).collect();
    let mut sorted = lines.clone();
    sorted.sort();
    assert_eq!(lines, sorted);
    assert_eq!(errors[1]["key"], "train.model");
    assert_eq!(errors[1]["column"], 9);
}

#[test]
fn an_unreadable_spec_is_invalid_input() {
    let out = validate(&specs_dir(), "no-such-spec.toml", &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read spec no-such-spec.toml"));
}

/// `validate` and `submit` refuse the same specs with the same message: every
/// bad spec of the corpus, submitted as a dry run against the live cluster,
/// exits 2 with the first expected line (file, line, key) and leaves no
/// run directory behind.
#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up)"]
fn submit_refuses_every_spec_validate_refuses_with_the_same_message() {
    let _cluster = crate::common::cluster_shared(module_path!());
    let dir = specs_dir();
    let state = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for spec in files_with_ext(&dir, "toml") {
        let name = spec.file_name().unwrap().to_str().unwrap();
        let expected = std::fs::read_to_string(spec.with_extension("expected")).unwrap();
        let first = expected
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty() && !l.starts_with('#'))
            .unwrap();
        let out = crate::common::yolo()
            .current_dir(&dir)
            .args(["submit", "--dry-run", name])
            .env("USER", "corpus")
            .env("XDG_STATE_HOME", state.path())
            .env_remove("YOLO_SCHED_CORPUS_UNSET")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.code() != Some(2) || !stderr.contains(first) {
            failures.push(format!(
                "{name}: submit exit {:?}, expected 2 with {first:?}\n{stderr}",
                out.status.code()
            ));
        }
    }
    assert!(
        !dir.join("runs").exists(),
        "a refused submission created a run directory"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
