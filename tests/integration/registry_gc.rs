//! `yolo-sched models gc` through the binary, against the real S3-compatible
//! server (SeaweedFS from `slurm/s3.sh`) and a `file://` directory: removed
//! versions deleted after `--keep-removed` with the blobs only they named,
//! shared blobs kept, a tagged version kept with the reason, unnamed blobs
//! (a killed publisher's) deleted only after `--keep-unnamed`, `--dry-run`
//! deleting nothing, a collected version's number never given again, and
//! deletion refused to users other than root.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Output};

use sha2::{Digest, Sha256};
use yolo_sched::objstore::Store;

use crate::common::*;
use crate::registry_s3::{finished_run, site};
use crate::s3::{s3, S3};

/// `yolo-sched --site SITE models ARGS…` with the S3 server's settings.
fn models(s: Option<&S3>, site: &Path, args: &[&str]) -> Command {
    let mut c = yolo();
    if let Some(s) = s {
        s.apply(&mut c);
    }
    c.arg("--site").arg(site).arg("models").args(args);
    c
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[track_caller]
fn ok_json(c: &mut Command) -> serde_json::Value {
    let out = run(c);
    assert!(out.status.success(), "{}", text(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The registry's objects, seen directly (not through yolo-sched).
struct Objects {
    store: Store,
    /// The key prefix of the registry (`tests/…/` on S3, empty for `file://`).
    base: String,
    /// The registry directory of a `file://` registry.
    dir: Option<std::path::PathBuf>,
}

impl Objects {
    fn blob_key(&self, sha: &str) -> String {
        format!("{}blobs/sha256/{sha}", self.base)
    }

    fn has_blob(&self, sha: &str) -> bool {
        self.store.head(&self.blob_key(sha)).unwrap().is_some()
    }

    fn blobs(&self) -> BTreeSet<String> {
        self.store
            .list(&format!("{}blobs/sha256/", self.base))
            .unwrap()
            .into_iter()
            .map(|k| k.rsplit('/').next().unwrap().to_string())
            .collect()
    }

    /// Upload `bytes` as a blob no record names (what a killed publisher leaves).
    fn orphan(&self, bytes: &[u8]) -> String {
        let sha = sha256(bytes);
        self.store
            .put_bytes(&self.blob_key(&sha), bytes.to_vec())
            .unwrap();
        sha
    }

    /// Make every blob there now look written two days ago (`file://` only:
    /// S3 keeps its own times, so the S3 round uses `--keep-unnamed 0s`).
    #[track_caller]
    fn age_blobs(&self) {
        let Some(dir) = &self.dir else { return };
        for e in std::fs::read_dir(dir.join("blobs/sha256")).unwrap() {
            let ok = Command::new("touch")
                .args(["-d", "2 days ago"])
                .arg(e.unwrap().path())
                .status()
                .unwrap();
            assert!(ok.success());
        }
    }
}

#[track_caller]
fn shas(v: &serde_json::Value, field: &str, key: &str) -> BTreeSet<String> {
    v[field]
        .as_array()
        .unwrap_or_else(|| panic!("no {field} in {v}"))
        .iter()
        .map(|x| x[key].as_str().unwrap().to_string())
        .collect()
}

#[track_caller]
fn kept_reason(v: &serde_json::Value, what: &str) -> String {
    v["kept"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["what"] == what)
        .unwrap_or_else(|| panic!("{what} not kept in {v}"))["reason"]
        .as_str()
        .unwrap()
        .to_string()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// The whole story on one registry. `unnamed` is the `--keep-unnamed` that
/// makes the old orphan (and the removed version's blob) due: `24h` on
/// `file://` where their times are set back, `0s` on S3.
fn gc_round(s: Option<&S3>, url: &str, objects: &Objects, unnamed: &str) {
    let dir = tempfile::tempdir().unwrap();
    let site = site(dir.path(), url);
    let mut weights = Vec::new();
    for (i, tag) in ["a", "b", "c"].iter().enumerate() {
        let run_dir = finished_run(dir.path(), tag, 20_000, tag);
        let v = ok_json(&mut models(
            s,
            &site,
            &[
                "publish",
                run_dir.to_str().unwrap(),
                "--name",
                "m",
                "--json",
            ],
        ));
        assert_eq!(v["model"]["version"], i + 1);
        let files = v["model"]["files"].as_array().unwrap();
        let w = files.iter().find(|f| f["role"] == "weights").unwrap();
        weights.push(w["sha256"].as_str().unwrap().to_string());
    }
    let shared: BTreeSet<String> = objects
        .blobs()
        .into_iter()
        .filter(|b| !weights.contains(b))
        .collect();
    assert_eq!(shared.len(), 2, "args.yaml and results.csv are shared");
    for args in [
        &["tag", "m@3", "production"][..],
        &["remove", "m@2"],
        &["remove", "m@3"],
    ] {
        let out = run(&mut models(s, &site, args));
        assert!(out.status.success(), "{}", text(&out));
    }
    let old = objects.orphan(b"a blob a killed publisher left, long ago");
    objects.age_blobs();
    let fresh = objects.orphan(b"a blob a publisher is uploading now");
    let all_blobs = objects.blobs();
    assert_eq!(all_blobs.len(), 7);

    // Invalid input: exit 2, nothing deleted.
    for bad in [
        &["gc", "--keep-removed", "30"][..],
        &["gc", "--keep-unnamed", "1y"],
    ] {
        let out = run(&mut models(s, &site, bad));
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert!(
            text(&out).contains("not a length of time"),
            "{}",
            text(&out)
        );
    }

    // Defaults: m@2 was removed just now, the fresh orphan was written just now.
    let out = ok_json(&mut models(s, &site, &["gc", "--json"]));
    assert_eq!(out["dry_run"], false);
    assert_eq!(shas(&out, "versions", "model"), set(&[]), "{out}");
    assert!(kept_reason(&out, "m@2").contains("--keep-removed"), "{out}");
    assert!(kept_reason(&out, &format!("blob {fresh}")).contains("--keep-unnamed"));
    let expected_now = if unnamed == "24h" {
        set(&[old.as_str()])
    } else {
        set(&[])
    };
    assert_eq!(shas(&out, "blobs", "sha256"), expected_now, "{out}");
    for b in &expected_now {
        assert!(!objects.has_blob(b));
    }

    // What would go: m@2 and the weights only it named; m@3 is tagged.
    let args = [
        "gc",
        "--keep-removed",
        "0s",
        "--keep-unnamed",
        unnamed,
        "--json",
    ];
    let mut dry_args = args.to_vec();
    dry_args.push("--dry-run");
    let dry = ok_json(&mut models(s, &site, &dry_args));
    let mut due = set(&[weights[1].as_str()]);
    if unnamed == "0s" {
        due.extend([old.clone(), fresh.clone()]);
    }
    assert_eq!(dry["dry_run"], true);
    assert_eq!(shas(&dry, "versions", "model"), set(&["m@2"]), "{dry}");
    assert_eq!(shas(&dry, "blobs", "sha256"), due, "{dry}");
    let reason = kept_reason(&dry, "m@3");
    assert!(
        reason.contains("tag `production` points at it") && reason.contains("move the tag"),
        "{reason}"
    );
    let listed = ok_json(&mut models(s, &site, &["list", "--all", "--json"]));
    assert_eq!(listed["models"].as_array().unwrap().len(), 3, "{listed}");
    let before: BTreeSet<_> = all_blobs.difference(&expected_now).cloned().collect();
    assert_eq!(objects.blobs(), before, "--dry-run deleted something");

    // For real.
    let done = ok_json(&mut models(s, &site, &args));
    assert_eq!(shas(&done, "versions", "model"), set(&["m@2"]), "{done}");
    assert_eq!(shas(&done, "blobs", "sha256"), due, "{done}");
    assert!(done["bytes_freed"].as_u64().unwrap() > 20_000, "{done}");
    assert_eq!(done["errors"], serde_json::json!([]));
    let left: BTreeSet<_> = before.difference(&due).cloned().collect();
    assert_eq!(objects.blobs(), left);
    for b in shared.iter().chain([&weights[0], &weights[2]]) {
        assert!(objects.has_blob(b), "shared or named blob {b} deleted");
    }
    // The versions left are whole; the collected one says so (exit 2).
    let to = dir.path().join("pulled");
    for id in ["m@1", "m@3"] {
        let out = run(models(s, &site, &["pull", id, "--to"]).arg(&to));
        assert!(out.status.success(), "{}", text(&out));
    }
    for cmd in ["show", "pull"] {
        let mut c = models(s, &site, &[cmd, "m@2"]);
        if cmd == "pull" {
            c.arg("--to").arg(&to);
        }
        let out = run(&mut c);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert!(text(&out).contains("garbage-collected"), "{}", text(&out));
    }

    // Move the tag away: m@3 goes with its older move, and its number is never given again.
    let out = run(&mut models(s, &site, &["tag", "m@1", "production"]));
    assert!(out.status.success(), "{}", text(&out));
    let done = ok_json(&mut models(s, &site, &args));
    assert_eq!(shas(&done, "versions", "model"), set(&["m@3"]), "{done}");
    assert_eq!(shas(&done, "tag_moves", "model"), set(&["m@3"]), "{done}");
    assert_eq!(shas(&done, "blobs", "sha256"), set(&[weights[2].as_str()]));
    let shown = ok_json(&mut models(s, &site, &["show", "m@production", "--json"]));
    assert_eq!(shown["version"], 1);
    let run_dir = finished_run(dir.path(), "d", 20_000, "d");
    let v = ok_json(&mut models(
        s,
        &site,
        &[
            "publish",
            run_dir.to_str().unwrap(),
            "--name",
            "m",
            "--json",
        ],
    ));
    assert_eq!(
        v["model"]["version"], 4,
        "a collected number was given again"
    );

    // Nothing is left to do; the audit trail has each gc.
    let again = ok_json(&mut models(s, &site, &args));
    assert_eq!(again["bytes_freed"], 0, "{again}");
    let audit = read(&dir.path().join("audit.log"));
    assert!(audit.contains("models gc"), "{audit}");

    // Text output names what went and what stays.
    let out = run(&mut models(s, &site, &["gc", "--dry-run"]));
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("would free"), "{}", text(&out));
}

#[test]
#[ignore = "needs the local S3 server (slurm/s3.sh up)"]
fn gc_deletes_old_removals_and_unnamed_blobs_over_s3() {
    let s = s3();
    let url = s.url("registry-gc");
    let prefix = url.trim_start_matches(&format!("s3://{}/", s.bucket));
    let objects = Objects {
        store: s.store(),
        base: format!("{prefix}/"),
        dir: None,
    };
    gc_round(Some(&s), &url, &objects, "0s");
}

#[test]
fn gc_deletes_old_removals_and_unnamed_blobs_in_a_shared_directory() {
    let dir = tempfile::tempdir().unwrap();
    let objects = Objects {
        store: Store::local(dir.path()).unwrap(),
        base: String::new(),
        dir: Some(dir.path().to_path_buf()),
    };
    gc_round(
        None,
        &format!("file://{}", dir.path().display()),
        &objects,
        "24h",
    );
}

#[test]
fn gc_deletes_only_as_root_and_dry_run_works_for_everyone() {
    if !crate::common::as_root_and_nobody("gc as root and as nobody") {
        return;
    }
    let dir = shared_tempdir();
    let reg = dir.path().join("registry");
    std::fs::create_dir(&reg).unwrap();
    let site = site(dir.path(), &format!("file://{}", reg.display()));
    let objects = Objects {
        store: Store::local(&reg).unwrap(),
        base: String::new(),
        dir: Some(reg.clone()),
    };
    let old = objects.orphan(b"left by a killed publisher");
    objects.age_blobs();
    let as_nobody = |args: &[&str]| {
        let mut c = Command::new("runuser");
        c.args(["-u", "nobody", "--"])
            .arg(bin_for_everyone())
            .arg("--site")
            .arg(&site)
            .arg("models")
            .args(args);
        isolate(&mut c);
        run(&mut c)
    };
    let out = as_nobody(&["gc"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("must run as root"), "{}", text(&out));
    assert!(objects.has_blob(&old));
    let out = as_nobody(&["gc", "--dry-run", "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let dry: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(shas(&dry, "blobs", "sha256"), set(&[old.as_str()]));
    assert!(objects.has_blob(&old));
}
