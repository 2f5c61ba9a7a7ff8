//! The registry against a real `file://` directory (object_store's local
//! store): publish from a run, list, show, pull, tags, lineage, removal, and
//! what must be refused: unfinished runs, damaged weights, links out of the
//! run directory, corrupted and missing blobs, records that are not valid,
//! and concurrent publishers of one name.

use std::path::{Path, PathBuf};

use super::*;
use crate::names::model::ModelRef;
use crate::rundir::manifest::Manifest;

fn checkpoint(extra: &str) -> Vec<u8> {
    crate::rundir::checkpoint::tests::zip(&["archive/data.pkl", extra])
}

/// A finished run directory: manifest, train/{weights/{best,last}.pt, args.yaml, results.csv}.
fn finished_run(root: &Path, name: &str, tag: &str) -> Manifest {
    let w = root.join(name);
    std::fs::create_dir_all(w.join("train/weights")).unwrap();
    std::fs::write(
        w.join("train/weights/best.pt"),
        checkpoint(&format!("archive/{tag}")),
    )
    .unwrap();
    std::fs::write(w.join("train/weights/last.pt"), checkpoint("archive/last")).unwrap();
    std::fs::write(
        w.join("train/args.yaml"),
        "model: yolov8n.pt\ndata: pcb.yaml\nepochs: 2\nimgsz: 640\n",
    )
    .unwrap();
    std::fs::write(
        w.join("train/results.csv"),
        "epoch,metrics/precision(B),metrics/recall(B),metrics/mAP50(B),metrics/mAP50-95(B)\n1,0.5,0.4,0.6,0.30\n2,0.6,0.5,0.7,0.42\n",
    )
    .unwrap();
    std::fs::create_dir_all(w.join("prepare")).unwrap();
    std::fs::write(
        w.join("prepare/summary.json"),
        r#"{"fingerprint":"sha256:abc123","names":["short","open"]}"#,
    )
    .unwrap();
    let m: Manifest = serde_json::from_value(serde_json::json!({
        "schema_version": 1, "run_id": format!("{name}-20261202T000000-0001"), "name": name,
        "user": "alice", "host": "h", "submitted_at": "2026-12-02T00:00:00Z",
        "workdir": w, "spec_file": w.join("s.toml"), "spec_hash": "feed", "spec_text": "",
        "variants": 1, "gpu_explanation": [], "estimate_gib": null, "stages": []
    }))
    .unwrap();
    std::fs::write(w.join("manifest.json"), serde_json::to_vec(&m).unwrap()).unwrap();
    m
}

/// The publisher of `who`'s versions, on a machine without accounting.
fn me() -> crate::registry::Caller {
    crate::registry::Caller::new("alice", false, || Err("no accounting here".into()))
}

fn who(name: &str) -> Publisher {
    Publisher {
        name: name.into(),
        user: "alice".into(),
        account: Some("vision".into()),
        ..Publisher::default()
    }
}

fn registry(dir: &Path) -> Registry {
    Registry::open(&RegistryUrl::File(dir.to_path_buf())).unwrap()
}

fn publish(reg: &Registry, m: &Manifest, name: &str) -> anyhow::Result<ModelRecord> {
    let snap = Snapshot::new()?;
    let (draft, paths) = draft_from_run(m, None, &who(name), &snap)?;
    commit(reg, draft, &paths)
}

fn blob_path(dir: &Path, sha: &str) -> PathBuf {
    dir.join("blobs/sha256").join(sha)
}

#[test]
fn publish_list_show_pull_tag_remove_round_trip() {
    let runs = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let reg = registry(dir.path());
    let m = finished_run(runs.path(), "pcb", "a");
    std::fs::create_dir_all(m.workdir.join("logs")).unwrap();
    std::fs::write(
        m.workdir.join("logs/export.out"),
        "val: Scanning...\n                   all          4         20      0.61      0.52      0.66      0.39\nSpeed: 0.2ms preprocess, 3.4ms inference, 0.0ms loss, 0.6ms postprocess per image\n",
    )
    .unwrap();
    let v1 = publish(&reg, &m, "pcb-detector").unwrap();
    assert_eq!(v1.version, 1);
    assert_eq!(v1.metrics.onnx_map50_95, Some(0.39));
    assert_eq!(v1.metrics.onnx_ms_per_image, Some(3.4));
    let row = crate::compare::registry::row_of(&v1);
    assert_eq!(row.id, "registry:pcb-detector@1");
    assert_eq!(row.inference_ms, Some(3.4));
    assert_eq!(row.best_map50_95, Some(0.42));
    assert_eq!(v1.metrics.map50_95, Some(0.42));
    assert_eq!(v1.metrics.map50, Some(0.7));
    assert_eq!(v1.fingerprint.as_deref(), Some("sha256:abc123"));
    assert_eq!(v1.class_names, vec!["short", "open"]);
    assert_eq!(v1.scale.as_deref(), Some("n"));
    assert_eq!(v1.imgsz.as_deref(), Some("640"));
    assert_eq!(v1.parent.as_deref(), Some("yolov8n.pt"));
    assert_eq!(v1.source.run_id.as_deref(), Some(m.run_id.as_str()));
    let roles: Vec<_> = v1.files.iter().map(|f| f.role.as_str()).collect();
    assert_eq!(roles, ["weights", "args", "results"]);
    // Content-addressed: the same weights again share the blob.
    let mut m2 = finished_run(runs.path(), "pcb2", "a");
    m2.model_ref = Some("registry:pcb-detector@1".into());
    let v2 = publish(&reg, &m2, "pcb-detector").unwrap();
    assert_eq!(v2.version, 2);
    assert_eq!(v2.parent.as_deref(), Some("registry:pcb-detector@1"));
    assert_eq!(v2.weights().unwrap().sha256, v1.weights().unwrap().sha256);
    let blobs = std::fs::read_dir(dir.path().join("blobs/sha256"))
        .unwrap()
        .count();
    assert_eq!(
        blobs, 3,
        "best.pt, args.yaml and results.csv stored once each"
    );

    reg.tag("pcb-detector", 1, "production", &me()).unwrap();
    let r = ModelRef::parse("pcb-detector@production").unwrap();
    assert_eq!(reg.resolve(&r, &me()).unwrap().record.version, 1);
    reg.tag("pcb-detector", 2, "production", &me()).unwrap();
    assert_eq!(reg.resolve(&r, &me()).unwrap().record.version, 2);
    let latest = reg
        .resolve(&ModelRef::parse("pcb-detector").unwrap(), &me())
        .unwrap();
    assert_eq!(latest.record, v2);
    assert_eq!(latest.tags, vec!["production"]);

    let out = tempfile::tempdir().unwrap();
    let pulled = reg.pull_file(v1.weights().unwrap(), out.path()).unwrap();
    assert_eq!(
        std::fs::read(&pulled).unwrap(),
        std::fs::read(m.workdir.join("train/weights/best.pt")).unwrap()
    );

    assert!(reg.remove("pcb-detector", 2, &me()).unwrap());
    assert!(!reg.remove("pcb-detector", 2, &me()).unwrap());
    let latest = reg
        .resolve(&ModelRef::parse("pcb-detector").unwrap(), &me())
        .unwrap();
    assert_eq!(latest.record.version, 1, "latest skips a removed version");
    let exact = reg
        .resolve(&ModelRef::parse("pcb-detector@2").unwrap(), &me())
        .unwrap();
    assert!(exact.removed, "an exact removed version stays readable");
    let e = reg.resolve(&r, &me()).unwrap_err();
    assert!(format!("{e:#}").contains("removed"), "{e:#}");
    assert!(reg.tag("pcb-detector", 2, "staging", &me()).is_err());
    let l = reg.list(None, &me()).unwrap();
    let (all, problems) = (l.versions, l.problems);
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(all.len(), 2);
    assert!(all[1].removed);
}

#[test]
fn an_unknown_name_lists_the_names_there_are_and_suggests_one() {
    let runs = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let reg = registry(dir.path());
    let e = reg
        .resolve(&ModelRef::parse("pcb").unwrap(), &me())
        .unwrap_err();
    assert!(format!("{e:#}").contains("no models yet"), "{e:#}");
    publish(&reg, &finished_run(runs.path(), "pcb", "a"), "pcb-detector").unwrap();
    let e = reg
        .resolve(&ModelRef::parse("pcb-detectr@3").unwrap(), &me())
        .unwrap_err();
    let text = format!("{e:#}");
    assert_eq!(crate::error::exit_code_for(&e), 2);
    assert!(
        text.contains("`pcb-detector`") && text.contains("did you mean"),
        "{text}"
    );
    let e = reg
        .resolve(&ModelRef::parse("pcb-detector@7").unwrap(), &me())
        .unwrap_err();
    assert!(format!("{e:#}").contains("versions are 1 to 1"), "{e:#}");
    let e = reg
        .resolve(&ModelRef::parse("pcb-detector@prod").unwrap(), &me())
        .unwrap_err();
    assert!(format!("{e:#}").contains("no tags"), "{e:#}");
}

#[test]
fn unfinished_runs_damaged_weights_and_links_are_refused() {
    let runs = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let reg = registry(dir.path());
    let m = finished_run(runs.path(), "short", "a");
    // Not finished: results.csv has 2 epochs of 5.
    std::fs::write(
        m.workdir.join("train/args.yaml"),
        "model: yolov8n.pt\nepochs: 5\n",
    )
    .unwrap();
    let e = publish(&reg, &m, "x").unwrap_err();
    assert!(format!("{e:#}").contains("is not complete"), "{e:#}");
    assert_eq!(crate::error::exit_code_for(&e), 2);

    let m = finished_run(runs.path(), "torn", "a");
    let best = m.workdir.join("train/weights/best.pt");
    let bytes = std::fs::read(&best).unwrap();
    std::fs::write(&best, &bytes[..bytes.len() / 2]).unwrap();
    let e = publish(&reg, &m, "x").unwrap_err();
    assert!(
        format!("{e:#}").contains("fails the checkpoint check"),
        "{e:#}"
    );

    // best.pt a link to a checkpoint outside the run directory.
    let m = finished_run(runs.path(), "linked", "a");
    let outside = runs.path().join("outside.pt");
    std::fs::write(&outside, checkpoint("archive/secret")).unwrap();
    std::fs::remove_file(best_of(&m)).unwrap();
    std::os::unix::fs::symlink(&outside, best_of(&m)).unwrap();
    let e = publish(&reg, &m, "x").unwrap_err();
    assert!(format!("{e:#}").contains("link"), "{e:#}");
    assert_eq!(crate::error::exit_code_for(&e), 2);
    // The training directory itself a link out of the run directory.
    let m = finished_run(runs.path(), "dirlink", "a");
    let elsewhere = runs.path().join("elsewhere");
    std::fs::rename(m.workdir.join("train"), &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, m.workdir.join("train")).unwrap();
    let e = publish(&reg, &m, "x").unwrap_err();
    assert!(format!("{e:#}").contains("link"), "{e:#}");
    assert!(reg.names().unwrap().is_empty(), "nothing was published");
    assert!(!dir.path().join("blobs").exists(), "no blob was stored");
}

fn best_of(m: &Manifest) -> PathBuf {
    m.workdir.join("train/weights/best.pt")
}

#[test]
fn a_corrupted_or_missing_blob_is_refused_and_nothing_is_written() {
    let runs = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let reg = registry(dir.path());
    let v = publish(&reg, &finished_run(runs.path(), "pcb", "a"), "pcb").unwrap();
    let w = v.weights().unwrap().clone();
    let blob = blob_path(dir.path(), &w.sha256);
    let mut bytes = std::fs::read(&blob).unwrap();
    bytes[10] ^= 0xff;
    std::fs::write(&blob, &bytes).unwrap();
    let out = tempfile::tempdir().unwrap();
    let e = reg.pull_file(&w, out.path()).unwrap_err();
    assert!(format!("{e:#}").contains("damaged"), "{e:#}");
    assert_eq!(
        std::fs::read_dir(out.path()).unwrap().count(),
        0,
        "nothing left behind"
    );
    // A publication of the same weights repairs the blob (it is hashed, not trusted).
    let v2 = publish(&reg, &finished_run(runs.path(), "pcb2", "a"), "pcb").unwrap();
    assert_eq!(v2.weights().unwrap().sha256, w.sha256);
    reg.pull_file(&w, out.path()).unwrap();

    std::fs::remove_file(&blob).unwrap();
    let out = tempfile::tempdir().unwrap();
    let e = reg.pull_file(&w, out.path()).unwrap_err();
    assert!(format!("{e:#}").contains("missing"), "{e:#}");
    let e = reg.check_blobs(&v).unwrap_err();
    assert!(format!("{e:#}").contains("missing"), "{e:#}");
    // A record is never written naming a blob that is not there.
    let mut draft = v.clone();
    draft.publish_id = "other".into();
    let e = reg.add_version(draft).unwrap_err();
    assert!(format!("{e:#}").contains("missing"), "{e:#}");
    assert_eq!(reg.index(Some("pcb")).unwrap().versions["pcb"].len(), 2);
}

#[test]
fn records_that_are_not_valid_are_never_used() {
    let runs = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let reg = registry(dir.path());
    let v = publish(&reg, &finished_run(runs.path(), "pcb", "a"), "pcb").unwrap();
    let versions = dir.path().join("models/pcb/versions");
    // Half a record (as a torn write on a store without atomic puts would leave).
    let text = std::fs::read_to_string(versions.join("00000001.json")).unwrap();
    std::fs::write(versions.join("00000002.json"), &text[..text.len() / 2]).unwrap();
    // A record stored under another number than it names.
    std::fs::write(versions.join("00000003.json"), &text).unwrap();
    // A record naming a file with a path in its name.
    let mut hostile = v.clone();
    hostile.version = 4;
    hostile.files[0].name = "../../etc/passwd".into();
    std::fs::write(
        versions.join("00000004.json"),
        serde_json::to_vec(&hostile).unwrap(),
    )
    .unwrap();
    // A record with a hostile note (a terminal escape, 10 kB).
    let mut noisy = v.clone();
    noisy.version = 5;
    noisy.note = Some(format!("\u{1b}]0;owned\u{7}{}", "n".repeat(10_240)));
    std::fs::write(
        versions.join("00000005.json"),
        serde_json::to_vec(&noisy).unwrap(),
    )
    .unwrap();
    let l = reg.list(None, &me()).unwrap();
    let (listed, problems) = (l.versions, l.problems);
    assert_eq!(listed.len(), 1);
    assert_eq!(problems.len(), 4, "{problems:?}");
    for p in &problems {
        assert!(!p.contains('\u{1b}') && p.len() < 400, "{p}");
    }
    for v in 2..=5 {
        let r = ModelRef::parse(&format!("pcb@{v}")).unwrap();
        assert!(reg.resolve(&r, &me()).is_err(), "pcb@{v} used");
    }
    // The next publication takes a fresh number past them.
    let v6 = publish(&reg, &finished_run(runs.path(), "pcb2", "b"), "pcb").unwrap();
    assert_eq!(v6.version, 6);
}

#[test]
fn concurrent_publishers_of_one_name_get_distinct_complete_versions() {
    let runs = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let manifests: Vec<_> = (0..4)
        .map(|i| finished_run(runs.path(), &format!("r{i}"), &format!("w{i}")))
        .collect();
    for round in 0..5 {
        std::thread::scope(|s| {
            for m in &manifests {
                let d = dir.path().to_path_buf();
                s.spawn(move || publish(&registry(&d), m, "shared").unwrap());
            }
        });
        let reg = registry(dir.path());
        let l = reg.list(Some("shared"), &me()).unwrap();
        let (listed, problems) = (l.versions, l.problems);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(listed.len(), 4 * (round + 1));
        let ids: std::collections::BTreeSet<_> =
            listed.iter().map(|l| l.record.publish_id.clone()).collect();
        assert_eq!(ids.len(), listed.len(), "a version was overwritten");
        for (i, l) in listed.iter().enumerate() {
            assert_eq!(
                l.record.version as usize,
                i + 1,
                "versions are 1..n with no gap"
            );
            reg.check_blobs(&l.record).unwrap();
        }
    }
}

#[test]
fn import_checks_the_file_and_refuses_links() {
    let dir = tempfile::tempdir().unwrap();
    let files = tempfile::tempdir().unwrap();
    let reg = registry(dir.path());
    let pt = files.path().join("yolov8n.pt");
    std::fs::write(&pt, checkpoint("archive/base")).unwrap();
    let snap = Snapshot::new().unwrap();
    let (draft, paths) = draft_from_file(&pt, &who("yolov8n"), &snap).unwrap();
    let v = commit(&reg, draft, &paths).unwrap();
    assert_eq!(v.source.kind, "import");
    assert_eq!(v.weights().unwrap().name, "yolov8n.pt");
    assert_eq!(v.scale.as_deref(), Some("n"));
    let link = files.path().join("link.pt");
    std::os::unix::fs::symlink(&pt, &link).unwrap();
    let snap = Snapshot::new().unwrap();
    let e = draft_from_file(&link, &who("x"), &snap).unwrap_err();
    assert!(format!("{e:#}").contains("symbolic link"), "{e:#}");
    let text = files.path().join("notes.pt");
    std::fs::write(&text, "not a checkpoint at all, just some text").unwrap();
    let e = draft_from_file(&text, &who("x"), &snap).unwrap_err();
    assert!(format!("{e:#}").contains("checkpoint check"), "{e:#}");
}

#[test]
fn an_outsider_gets_the_newest_version_they_may_read_and_a_reason_for_the_rest() {
    use crate::slurm::accounts::Membership;
    let runs = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let reg = registry(dir.path());
    let mut public = who("pcb");
    public.public = true;
    for (run, publisher) in [("a", public), ("b", who("pcb"))] {
        let snap = Snapshot::new().unwrap();
        let m = finished_run(runs.path(), run, run);
        let (d, p) = draft_from_run(&m, None, &publisher, &snap).unwrap();
        commit(&reg, d, &p).unwrap();
    }
    let outsider = || {
        crate::registry::Caller::new("dave", false, || {
            Ok(Membership {
                accounts: ["robots".to_string()].into(),
                ..Membership::default()
            })
        })
    };
    let member = || {
        crate::registry::Caller::new("bob", false, || {
            Ok(Membership {
                accounts: ["vision".to_string()].into(),
                ..Membership::default()
            })
        })
    };
    let latest = ModelRef::parse("pcb").unwrap();
    assert_eq!(reg.resolve(&latest, &member()).unwrap().record.version, 2);
    assert_eq!(reg.resolve(&latest, &outsider()).unwrap().record.version, 1);
    let e = reg
        .resolve(&ModelRef::parse("pcb@2").unwrap(), &outsider())
        .unwrap_err();
    assert_eq!(crate::error::exit_code_for(&e), 2);
    let text = crate::error::describe(&e).join("\n");
    assert!(
        text.contains("pcb@2 belongs to the Slurm account `vision`"),
        "{text}"
    );
    assert!(text.contains("hint: ask a member of `vision`"), "{text}");
    let l = reg.list(None, &outsider()).unwrap();
    assert_eq!((l.versions.len(), l.hidden), (1, 1));
    let l = reg.list(None, &member()).unwrap();
    assert_eq!((l.versions.len(), l.hidden), (2, 0));
    let (rows, _) = crate::compare::registry::rows(&reg, &outsider()).unwrap();
    assert_eq!(
        rows.len(),
        1,
        "the leaderboard shows only what the caller may read"
    );
}

#[test]
fn an_old_blob_is_written_again_and_a_collected_number_is_never_given_again() {
    let runs = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let reg = registry(dir.path());
    let m = finished_run(runs.path(), "pcb", "a");
    let v1 = publish(&reg, &m, "pcb").unwrap();
    let blob = blob_path(dir.path(), &v1.weights().unwrap().sha256);
    let mtime = |p: &Path| std::fs::metadata(p).unwrap().modified().unwrap();
    let set = |p: &Path, t: std::time::SystemTime| {
        std::fs::File::options()
            .write(true)
            .open(p)
            .unwrap()
            .set_modified(t)
            .unwrap()
    };
    // Written within the hour: kept as it is.
    let recent = std::time::SystemTime::now() - std::time::Duration::from_secs(600);
    set(&blob, recent);
    publish(&reg, &m, "pcb").unwrap();
    assert_eq!(mtime(&blob), recent);
    // Older: written again, so a gc's grace counts from now.
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3 * 86_400);
    set(&blob, old);
    let v3 = publish(&reg, &m, "pcb").unwrap();
    assert!(mtime(&blob) > recent, "the old blob was not refreshed");
    // v3 removed and collected: its removal record stays, so the next is 4.
    reg.remove("pcb", 3, &me()).unwrap();
    let out = gc::run(
        &reg,
        &me(),
        chrono::TimeDelta::zero(),
        chrono::TimeDelta::days(1),
        false,
    )
    .unwrap();
    assert_eq!(out.versions.len(), 1, "{out:?}");
    assert_eq!(out.versions[0].model, v3.id());
    let err = reg
        .resolve(&ModelRef::parse("pcb@3").unwrap(), &me())
        .unwrap_err();
    assert!(format!("{err:#}").contains("garbage-collected"), "{err:#}");
    assert_eq!(publish(&reg, &m, "pcb").unwrap().version, 4);
}

/// Import `file` (a small checkpoint, content `tag`) as a version of `name`.
fn import_as(reg: &Registry, files: &Path, file: &str, tag: &str, name: &str) -> ModelRecord {
    let pt = files.join(file);
    std::fs::write(&pt, checkpoint(&format!("archive/{tag}"))).unwrap();
    let snap = Snapshot::new().unwrap();
    let (draft, paths) = draft_from_file(&pt, &who(name), &snap).unwrap();
    commit(reg, draft, &paths).unwrap()
}

/// A site file naming the `file://` registry at `dir`, and a spec in `files`.
fn site_and_spec(
    dir: &Path,
    files: &Path,
    sweep: &str,
) -> (crate::config::Site, crate::spec::Spec) {
    let site = files.join("site.toml");
    std::fs::write(
        &site,
        format!("[registry]\nurl = \"file://{}\"\n", dir.display()),
    )
    .unwrap();
    let spec = files.join("spec.toml");
    let text = format!(
        "version = 1\n[run]\nname = \"sw\"\n[train]\nmodel = \"yolov8n.pt\"\ndata = \"d.yaml\"\n\n[sweep]\n{sweep}"
    );
    std::fs::write(&spec, &text).unwrap();
    (
        crate::config::Site::load(Some(&site)).unwrap(),
        crate::spec::parse(&text, &spec.display().to_string()).unwrap(),
    )
}

#[test]
fn a_sweep_over_registry_and_file_models_pins_each_variant() {
    use crate::spec::ArgValue;
    let dir = tempfile::tempdir().unwrap();
    let files = tempfile::tempdir().unwrap();
    let reg = registry(dir.path());
    let v1 = import_as(&reg, files.path(), "yolov8s.pt", "one", "pcb");
    let v2 = import_as(&reg, files.path(), "yolov8l.pt", "two", "pcb");
    // The same bytes again: a third version, one weights file.
    let v3 = import_as(&reg, files.path(), "yolov8l.pt", "two", "pcb");
    reg.tag("pcb", 2, "production", &me()).unwrap();
    let (site, mut spec) = site_and_spec(
        dir.path(),
        files.path(),
        "model = [\"registry:pcb@1\", \"registry:pcb@production\", \"yolov8x.pt\", \"registry:pcb@3\"]\nlr0 = [0.01, 0.001]\n",
    );
    let resolved = spec::resolve_in_spec(&site, &mut spec).unwrap();
    assert_eq!(resolved.single, None, "every variant names its own model");
    // The first axis varies slowest: two variants (lr0) per model.
    let refs: Vec<Option<&str>> = resolved
        .variants
        .iter()
        .map(|m| m.as_ref().map(|m| m.reference.as_str()))
        .collect();
    assert_eq!(
        refs,
        [
            Some("pcb@1"),
            Some("pcb@1"),
            Some("pcb@2"),
            Some("pcb@2"),
            None,
            None,
            Some("pcb@3"),
            Some("pcb@3")
        ]
    );
    let (single, pinned) = resolved.manifest_refs();
    assert_eq!(single, None);
    assert_eq!(pinned[2].as_deref(), Some("registry:pcb@2"));
    assert_eq!(pinned[4], None);
    // pcb@2 and pcb@3 share their weights: pulled once.
    let distinct: Vec<&str> = resolved
        .distinct()
        .iter()
        .map(|m| m.reference.as_str())
        .collect();
    assert_eq!(distinct, ["pcb@1", "pcb@2"]);
    assert_eq!(
        resolved.variants[0].as_ref().unwrap().sha256,
        v1.weights().unwrap().sha256
    );
    assert_eq!(v2.weights().unwrap().sha256, v3.weights().unwrap().sha256);
    // The spec keeps each version's scale for the memory estimate.
    let values = &spec.sweep.axes[0].values;
    assert_eq!(values[0], ArgValue::Str("pcb@1/yolos.pt".into()));
    assert_eq!(values[1], ArgValue::Str("pcb@2/yolol.pt".into()));
    assert_eq!(values[2], ArgValue::Str("yolov8x.pt".into()));

    // The manifest's pins give each variant's parent, and old manifests read.
    let mut m = finished_run(files.path(), "sweep", "a");
    m.variants = 8;
    m.model_refs = pinned;
    assert_eq!(m.model_ref_of(Some(3)), Some("registry:pcb@2"));
    assert_eq!(m.model_ref_of(Some(4)), None);
    let text = serde_json::to_string(&m).unwrap();
    let back: Manifest = serde_json::from_str(&text).unwrap();
    assert_eq!(back.model_refs, m.model_refs);
    let old: Manifest =
        serde_json::from_str(&std::fs::read_to_string(m.workdir.join("manifest.json")).unwrap())
            .unwrap();
    assert!(old.model_refs.is_empty() && old.model_ref_of(Some(1)).is_none());
}

#[test]
fn an_unknown_registry_model_in_a_sweep_is_refused_at_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let files = tempfile::tempdir().unwrap();
    let reg = registry(dir.path());
    import_as(&reg, files.path(), "yolov8s.pt", "one", "pcb");
    for bad in ["registry:pcb@7", "registry:pbc", "registry:pcb@staging"] {
        let (site, mut spec) = site_and_spec(
            dir.path(),
            files.path(),
            &format!("lr0 = [0.1, 0.2]\nmodel = [\"registry:pcb@1\", \"{bad}\"]\n"),
        );
        let e = spec::resolve_in_spec(&site, &mut spec).unwrap_err();
        assert_eq!(
            crate::error::kind_of(&e),
            Some(crate::error::Kind::InvalidInput)
        );
        let text = format!("{e:#}");
        assert!(
            text.contains("spec.toml:10:") && text.contains("sweep.model"),
            "{bad}: {text}"
        );
    }
    // A site without a registry: refused at the sweep's line too.
    let (_, mut spec) = site_and_spec(
        dir.path(),
        files.path(),
        "model = [\"registry:pcb@1\", \"yolov8n.pt\"]\n",
    );
    std::fs::write(files.path().join("bare.toml"), "").unwrap();
    let bare = crate::config::Site::load(Some(&files.path().join("bare.toml"))).unwrap();
    let e = spec::resolve_in_spec(&bare, &mut spec).unwrap_err();
    assert!(format!("{e:#}").contains("sweep.model"), "{e:#}");
}

#[test]
fn a_sweep_over_registry_models_renders_each_task_its_own_local_copy() {
    let dir = tempfile::tempdir().unwrap();
    let files = tempfile::tempdir().unwrap();
    let reg = registry(dir.path());
    let v1 = import_as(&reg, files.path(), "yolov8s.pt", "one", "pcb");
    let v2 = import_as(&reg, files.path(), "yolov8m.pt", "two", "pcb");
    let (site, mut spec) = site_and_spec(
        dir.path(),
        files.path(),
        "model = [\"registry:pcb@1\", \"registry:pcb@2\", \"/w/yolov8n.pt\"]\n",
    );
    let resolved = spec::resolve_in_spec(&site, &mut spec).unwrap();
    let cluster = crate::slurm::cluster::Cluster::uniform(
        "node",
        2,
        16,
        64000,
        "gpu:1g.5gb:4,gpu:a100:1",
        &["gpu"],
    );
    let plan = crate::plan::plan(
        &spec,
        Path::new("/srv/runs/sw"),
        &cluster,
        &crate::plan::Policy::default(),
    )
    .unwrap();
    // Sized for the largest variant: pcb@2's recorded scale (m).
    let est = plan.estimate.as_ref().unwrap();
    assert_eq!(est.scale.map(|s| s.letter()), Some('m'), "{}", est.model);
    let scripts = scripts_of(&spec, &plan, &resolved, "sw-1", files.path());
    let text = |kind| &scripts.iter().find(|s| s.kind == kind).unwrap().text;
    let prepare = text(crate::spec::StageKind::Prepare);
    let train = text(crate::spec::StageKind::Train);
    let short = |r: &ModelRecord| r.weights().unwrap().sha256[..16].to_string();
    for (r, v) in [("pcb@1", &v1), ("pcb@2", &v2)] {
        let dir = format!(
            "\"${{TMPDIR:-/tmp}}/yolo-sched-models-$(id -u)\"/{}",
            short(v)
        );
        let pull = format!("models pull {r} --weights-only --private --to {dir}");
        assert_eq!(prepare.matches(&pull).count(), 1, "{prepare}");
        assert!(train.contains(&pull), "{train}");
        assert!(
            train.contains(&format!("MODEL={dir}/{}", v.weights().unwrap().name)),
            "{train}"
        );
    }
    assert!(
        train.contains("\n0)\n") && train.contains("\n1)\n"),
        "{train}"
    );
    // Registry variants get `model=$MODEL`; the file variant its own path.
    assert!(
        train.contains("2) VARIANT=(model=/w/yolov8n.pt) ;;"),
        "{train}"
    );
    assert!(train.contains("0) VARIANT=() ;;"), "{train}");
    assert!(train.contains("${MODEL:+\"model=$MODEL\"}"), "{train}");
    assert!(
        !train.contains("registry:") && !train.contains("pcb@1/yolos.pt"),
        "{train}"
    );
    // The base arguments name no model: each variant does.
    assert!(!train.contains("model=yolov8n.pt"), "{train}");
}

#[test]
fn trainer_versions_are_read_as_plain_text_inside_the_run() {
    let runs = tempfile::tempdir().unwrap();
    let m = finished_run(runs.path(), "v", "a");
    let state = m.workdir.join("state");
    std::fs::create_dir_all(&state).unwrap();
    assert_eq!(
        publish::trainer_versions(&m.workdir, None),
        publish::TrainerVersions::default()
    );
    std::fs::write(
        state.join("train.versions.json"),
        r#"{"ultralytics":"8.4.190","torch":"2.5.1+cu124","cuda":"12.4"}"#,
    )
    .unwrap();
    let v = publish::trainer_versions(&m.workdir, None);
    assert_eq!(v.ultralytics.as_deref(), Some("8.4.190"));
    assert_eq!(v.torch.as_deref(), Some("2.5.1+cu124"));
    std::fs::write(
        state.join("train.1.versions.json"),
        r#"{"ultralytics":"8.4 $(rm -rf)","torch":"2222222222222222222222222222222222222222222222222222"}"#,
    )
    .unwrap();
    let v = publish::trainer_versions(&m.workdir, Some(1));
    assert_eq!(v.ultralytics, None, "not plain text");
    assert_eq!(
        v.torch.as_ref().map(|t| t.chars().count()),
        Some(41),
        "clipped: {:?}",
        v.torch
    );
    // A link is never followed.
    std::fs::remove_file(state.join("train.versions.json")).unwrap();
    let outside = runs.path().join("outside.json");
    std::fs::write(&outside, r#"{"ultralytics":"9.9.9"}"#).unwrap();
    std::os::unix::fs::symlink(&outside, state.join("train.versions.json")).unwrap();
    assert_eq!(
        publish::trainer_versions(&m.workdir, None).ultralytics,
        None
    );
    // Published records carry them.
    std::fs::remove_file(state.join("train.versions.json")).unwrap();
    std::fs::write(
        state.join("train.versions.json"),
        r#"{"ultralytics":"8.4.190","torch":"2.5.1"}"#,
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let v = publish(&registry(dir.path()), &m, "pcb").unwrap();
    assert_eq!(
        (v.ultralytics.as_deref(), v.torch.as_deref()),
        (Some("8.4.190"), Some("2.5.1"))
    );
}

#[test]
fn a_sweep_of_one_variant_is_a_single_training_with_its_values() {
    let dir = tempfile::tempdir().unwrap();
    let files = tempfile::tempdir().unwrap();
    let reg = registry(dir.path());
    import_as(&reg, files.path(), "yolov8s.pt", "one", "pcb");
    let cluster = crate::slurm::cluster::Cluster::uniform(
        "node",
        2,
        16,
        64000,
        "gpu:1g.5gb:4,gpu:a100:1",
        &["gpu"],
    );
    for (sweep, model) in [
        (
            "model = [\"registry:pcb@1\"]\nlr0 = [0.5]\n",
            "\"model=$MODEL\"",
        ),
        (
            "model = [\"/w/yolov8n.pt\"]\nlr0 = [0.5]\n",
            "model=/w/yolov8n.pt",
        ),
    ] {
        let (site, mut spec) = site_and_spec(dir.path(), files.path(), sweep);
        let resolved = spec::resolve_in_spec(&site, &mut spec).unwrap();
        assert!(resolved.variants.is_empty(), "{sweep}");
        assert_eq!(resolved.single.is_some(), sweep.contains("registry:"));
        let plan = crate::plan::plan(
            &spec,
            Path::new("/srv/runs/one"),
            &cluster,
            &crate::plan::Policy::default(),
        )
        .unwrap();
        let scripts = scripts_of(&spec, &plan, &resolved, "one-1", files.path());
        let train = &scripts
            .iter()
            .find(|s| s.kind == crate::spec::StageKind::Train)
            .unwrap()
            .text;
        assert!(
            train.contains(model) && train.contains("lr0=0.5"),
            "{sweep}: {train}"
        );
        assert!(!train.contains("model=yolov8n.pt"), "{train}");
    }
}

/// The stage scripts of `spec` as `submit` renders them (built-in templates).
fn scripts_of(
    spec: &crate::spec::Spec,
    plan: &crate::plan::Plan,
    resolved: &crate::names::model::Resolved,
    run_id: &str,
    base_dir: &Path,
) -> Vec<crate::render::scripts::StageScript> {
    crate::render::scripts::render_all(
        &crate::render::Templates::new(None).unwrap(),
        &crate::render::scripts::RenderInput {
            spec,
            plan,
            run_id,
            yolo_sched: Path::new("/usr/local/bin/yolo-sched"),
            yolo: "yolo",
            base_dir,
            font: None,
            models: resolved,
            python: None,
        },
    )
    .unwrap()
}

#[test]
fn a_fifo_or_a_link_where_a_record_or_blob_belongs_is_refused_not_waited_on() {
    // Anyone may create files in a shared registry's directories: a FIFO
    // would block an open for reading forever, a link would be followed.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runs = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let reg = registry(dir.path());
        let v1 = publish(&reg, &finished_run(runs.path(), "a", "a"), "pcb").unwrap();
        let versions = dir.path().join("models/pcb/versions");
        nix::unistd::mkfifo(
            &versions.join("00000002.json"),
            nix::sys::stat::Mode::from_bits_truncate(0o666),
        )
        .unwrap();
        std::os::unix::fs::symlink(
            versions.join("00000001.json"),
            versions.join("00000003.json"),
        )
        .unwrap();
        let l = reg.list(None, &me()).unwrap();
        let problems = l.problems.join("\n");
        let e2 = format!(
            "{:#}",
            reg.resolve(&ModelRef::parse("pcb@2").unwrap(), &me())
                .unwrap_err()
        );
        // The weights' blob replaced by a FIFO: pull refuses it.
        let w = v1.weights().unwrap().clone();
        let blob = blob_path(dir.path(), &w.sha256);
        std::fs::remove_file(&blob).unwrap();
        nix::unistd::mkfifo(&blob, nix::sys::stat::Mode::from_bits_truncate(0o666)).unwrap();
        let to = tempfile::tempdir().unwrap();
        let pulled = reg
            .pull_file(&w, to.path())
            .map(|_| ())
            .map_err(|e| format!("{e:#}"));
        tx.send((l.versions.len(), problems, e2, pulled)).unwrap();
    });
    let (listed, problems, e2, pulled) = rx
        .recv_timeout(std::time::Duration::from_secs(120))
        .expect("a FIFO in the registry made a reader wait");
    assert_eq!(listed, 1);
    // The listing (`fsutil::within::walk`) skips both, said, never followed
    // or opened.
    assert!(
        problems.contains("00000003.json: a symbolic link; not followed"),
        "{problems}"
    );
    assert!(
        problems.contains("00000002.json: not a regular file"),
        "{problems}"
    );
    assert!(e2.contains("has no version 2"), "{e2}");
    let e = pulled.unwrap_err();
    assert!(e.contains("is not a regular file"), "{e}");
}

/// On S3 (here the in-memory store, which has no file owners either) a tag
/// move or removal is obeyed only when it is valid and the user it names may
/// tag or remove the version (that user's accounts asked once); an invalid
/// newest version is skipped by `NAME`. What S3 cannot tell (who really
/// wrote an object) is docs/registry.md's "Threat model".
#[test]
fn without_file_owners_tag_moves_and_removals_are_checked_against_the_user_they_name() {
    use crate::slurm::accounts::Membership;
    use std::cell::Cell;
    use std::rc::Rc;
    let runs = tempfile::tempdir().unwrap();
    let reg = Registry::on(crate::objstore::Store::memory().unwrap(), "reg/");
    for run in ["a", "b"] {
        publish(&reg, &finished_run(runs.path(), run, run), "pcb").unwrap();
    }
    let asked = Rc::new(Cell::new(0));
    let count = asked.clone();
    let caller = me().with_others(move |user| {
        count.set(count.get() + 1);
        Ok(Membership {
            accounts: ["vision".to_string()].into(),
            coordinates: if user == "carol" {
                ["vision".to_string()].into()
            } else {
                Default::default()
            },
            ..Membership::default()
        })
    });
    reg.tag("pcb", 1, "production", &caller).unwrap();
    let production = ModelRef::parse("pcb@production").unwrap();
    let latest = ModelRef::parse("pcb").unwrap();
    let put = |key: &str, value: serde_json::Value| {
        let bytes = if value.is_null() {
            vec![]
        } else {
            value.to_string().into_bytes()
        };
        reg.store().put_bytes(&format!("reg/{key}"), bytes).unwrap();
    };
    let tag_move = |seq: u32, version: u32, user: &str| {
        serde_json::json!({"format": 1, "name": "pcb", "tag": "production", "version": version,
            "seq": seq, "user": user, "time": "2026-12-01T00:00:00Z"})
    };
    // A member of the account (not its coordinator) may not move the tag.
    put(
        "models/pcb/tags/production/00000002.json",
        tag_move(2, 2, "mallory"),
    );
    assert_eq!(reg.resolve(&production, &caller).unwrap().record.version, 1);
    let problems = reg.list(None, &caller).unwrap().problems.join("\n");
    assert!(
        problems.contains("tag move pcb@production #2") && problems.contains("not obeyed"),
        "{problems}"
    );
    // Nor may an empty record or one that does not parse.
    put(
        "models/pcb/tags/production/00000003.json",
        serde_json::Value::Null,
    );
    assert_eq!(reg.resolve(&production, &caller).unwrap().record.version, 1);
    // The account's coordinator may.
    put(
        "models/pcb/tags/production/00000004.json",
        tag_move(4, 2, "carol"),
    );
    assert_eq!(reg.resolve(&production, &caller).unwrap().record.version, 2);
    // An empty removal, and one by a member, are not obeyed.
    put("models/pcb/removed/00000002.json", serde_json::Value::Null);
    assert_eq!(reg.resolve(&latest, &caller).unwrap().record.version, 2);
    let e = format!("{:#}", reg.remove("pcb", 2, &caller).unwrap_err());
    assert!(e.contains("is there and is not obeyed"), "{e}");
    put(
        "models/pcb/removed/00000001.json",
        serde_json::json!({"format": 1, "name": "pcb", "version": 1, "user": "mallory",
            "time": "2026-12-01T00:00:00Z"}),
    );
    let listed = reg.list(None, &caller).unwrap();
    assert!(listed.versions.iter().all(|l| !l.removed), "{listed:?}");
    // An invalid newest version is skipped, as `list` skips it.
    put("models/pcb/versions/00000003.json", serde_json::json!("{"));
    assert_eq!(reg.resolve(&latest, &caller).unwrap().record.version, 2);
    let e = reg
        .resolve(&ModelRef::parse("pcb@3").unwrap(), &caller)
        .unwrap_err();
    assert!(format!("{e:#}").contains("not a valid record"), "{e:#}");
    assert_eq!(asked.get(), 2, "mallory's and carol's accounts, once each");
}

/// Issue #32, item 13: an S3 listing of many records reads one listing index
/// instead of every record, and takes from it only bytes whose MD5 is the
/// ETag the listing gives for their key (here the ETags are made so; the
/// in-memory store's own are not MD5s): a forged entry is never used.
#[test]
fn the_listing_index_is_used_only_for_bytes_whose_md5_the_listing_gives() {
    use md5::Digest;
    let reg = Registry::on(crate::objstore::Store::memory().unwrap(), "r/");
    let keys: Vec<String> = (1..=100)
        .map(|v| format!("r/models/m/versions/{v:08}.json"))
        .collect();
    let content = |k: &str| format!("{{\"key\": \"{k}\"}}").into_bytes();
    for k in &keys {
        reg.store().put_bytes(k, content(k)).unwrap();
    }
    let etags: std::collections::BTreeMap<String, String> = keys
        .iter()
        .map(|k| {
            let md5 = crate::objstore::store::hex(&md5::Md5::digest(content(k)));
            (k.clone(), format!("\"{md5}\""))
        })
        .collect();
    let all = |got: Vec<anyhow::Result<Option<Vec<u8>>>>| -> Vec<Option<Vec<u8>>> {
        got.into_iter().map(|g| g.unwrap()).collect()
    };
    let expected: Vec<Option<Vec<u8>>> = keys.iter().map(|k| Some(content(k))).collect();
    // No index yet: every record read, and the index written.
    assert_eq!(all(reg.read_many(&keys, &etags, "r/models/")), expected);
    let index = reg
        .store()
        .get_bytes("r/index/records", 1 << 30)
        .unwrap()
        .unwrap();
    let entries = super::s3::parse_index(&index);
    assert_eq!(entries.len(), 100);
    assert_eq!(entries[&keys[7]], content(&keys[7]));
    // The records gone from the store: the index answers for them.
    for k in &keys {
        reg.store().delete(k).unwrap();
    }
    assert_eq!(all(reg.read_many(&keys, &etags, "r/models/")), expected);
    // A forged entry (bytes whose MD5 is not the listed ETag) is not used:
    // the record is read from the store (gone here).
    let mut forged = entries.clone();
    forged.insert(keys[0].clone(), b"{\"key\": \"forged\"}".to_vec());
    reg.store()
        .put_bytes("r/index/records", super::s3::render_index(&forged))
        .unwrap();
    // Malformed: nothing of it is used, every record is read.
    assert!(super::s3::parse_index(b"yolo-sched listing index 1\nk\t99\nab\n").is_empty());
    let got = all(reg.read_many(&keys, &etags, "r/models/"));
    assert_eq!(got[0], None);
    assert_eq!(got[1..], expected[1..]);
    // A multipart ETag (`…-2`) or a missing one is never taken as an MD5.
    let mut multipart = etags.clone();
    multipart.insert(keys[1].clone(), "\"0123-2\"".into());
    multipart.remove(&keys[2]);
    let got = all(reg.read_many(&keys, &multipart, "r/models/"));
    assert_eq!((got[1].as_ref(), got[2].as_ref()), (None, None));
    assert_eq!(got[3..], expected[3..]);
}

/// A record planted at a number past 99999999 does not hide every later
/// record (`{n:08}` writes 9 digits there); one at the last number says so.
#[test]
fn record_numbers_past_eight_digits_are_seen_and_the_last_one_is_said() {
    let runs = tempfile::tempdir().unwrap();
    let reg = Registry::on(crate::objstore::Store::memory().unwrap(), "");
    publish(&reg, &finished_run(runs.path(), "a", "a"), "pcb").unwrap();
    reg.store()
        .put_bytes("models/pcb/versions/99999999.json", b"{".to_vec())
        .unwrap();
    let v = publish(&reg, &finished_run(runs.path(), "b", "b"), "pcb").unwrap();
    assert_eq!(v.version, 100_000_000);
    let listed = reg.list(None, &me()).unwrap();
    let versions: Vec<u32> = listed.versions.iter().map(|l| l.record.version).collect();
    assert_eq!(versions, [1, 100_000_000]);
    assert_eq!(
        reg.resolve(&ModelRef::parse("pcb").unwrap(), &me())
            .unwrap()
            .record
            .version,
        100_000_000
    );
    assert_eq!(super::store::number("00000007.json"), Some(7));
    assert_eq!(super::store::number("0000007.json"), None);
    assert_eq!(super::store::number("000000007.json"), None);
    reg.store()
        .put_bytes(
            &format!("models/pcb/versions/{}.json", u32::MAX),
            b"{".to_vec(),
        )
        .unwrap();
    let e = format!(
        "{:#}",
        publish(&reg, &finished_run(runs.path(), "c", "c"), "pcb").unwrap_err()
    );
    assert!(e.contains("no number is left"), "{e}");
}

/// The directories the registry makes are the ones doctor calls open to
/// every publisher; a private or non-sticky one is not.
#[test]
fn the_registrys_own_directories_let_anyone_publish_and_nobody_replace() {
    assert!(unix_anyone_publishes(unix::dir_mode(Path::new(""))));
    assert!(unix_anyone_publishes(unix::dir_mode(Path::new(
        "blobs/sha256"
    ))));
    assert!(
        !unix_anyone_publishes(0o777),
        "not sticky: records replaceable"
    );
    assert!(!unix_anyone_publishes(0o1755), "only the owner publishes");
    assert!(!unix_anyone_publishes(0o1770));
}
