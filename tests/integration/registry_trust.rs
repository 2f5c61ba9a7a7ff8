//! A shared `file://` registry (mode 1777, as docs/registry.md asks) against
//! what any other user (`nobody`) can plant in it: directory links that
//! writes and `gc` must not follow, tag moves and removals that must not be
//! obeyed unless their file's owner may tag or remove the version, entries
//! that must not break the listing (control characters, names that are not
//! UTF-8, link loops, links to large trees, unreadable directories), an
//! invalid newest version that `NAME` must skip, names with invisible
//! characters, and `gc --dry-run` as an ordinary user (docs/registry.md,
//! "Threat model"; docs/reliability.md).
//!
//! Every test needs root and the user `nobody`; without them it fails when
//! `YOLO_SCHED_EXPECT_CLUSTER=1`, else it says so and does nothing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::common::*;
use crate::registry_s3::site;

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Whether this test can act as root and as `nobody`; fails when the test
/// command expects everything (`YOLO_SCHED_EXPECT_CLUSTER=1`).
#[track_caller]
fn root_and_nobody() -> bool {
    let ok = nix::unistd::geteuid().is_root()
        && nix::unistd::User::from_name("nobody")
            .ok()
            .flatten()
            .is_some();
    if !ok {
        assert!(
            !std::env::var(EXPECT_CLUSTER_ENV).is_ok_and(|v| v == "1"),
            "registry_trust needs root and the user nobody"
        );
        eprintln!("not run: needs root and the user nobody");
    }
    ok
}

/// A registry as the reproducers have it: `DIR/reg` mode 1777 with
/// `base@1` and `base@2` imported `--public` by root.
struct Shared {
    dir: tempfile::TempDir,
    reg: PathBuf,
    site: PathBuf,
}

/// A torch-style zip checkpoint (what `import` accepts), `tag` making it its own.
#[track_caller]
fn checkpoint(path: &Path, tag: &str) {
    let ok = Command::new("python3")
        .args([
            "-c",
            "import zipfile,sys; z=zipfile.ZipFile(sys.argv[1],'w'); z.writestr('archive/data.pkl', sys.argv[2].encode()*100); z.close()",
        ])
        .arg(path)
        .arg(tag)
        .status()
        .unwrap();
    assert!(ok.success());
}

impl Shared {
    #[track_caller]
    fn new(versions: &[&str]) -> Shared {
        use std::os::unix::fs::PermissionsExt;
        let dir = shared_tempdir();
        let reg = dir.path().join("reg");
        std::fs::create_dir(&reg).unwrap();
        std::fs::set_permissions(&reg, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let site = site(dir.path(), &format!("file://{}", reg.display()));
        std::fs::set_permissions(&site, std::fs::Permissions::from_mode(0o644)).unwrap();
        let s = Shared { dir, reg, site };
        for tag in versions {
            let out = s.import("base", tag);
            assert!(out.status.success(), "{}", text(&out));
        }
        s
    }

    /// `yolo-sched models ARGS…` as root.
    fn models(&self, args: &[&str]) -> Output {
        run(yolo()
            .arg("--site")
            .arg(&self.site)
            .arg("models")
            .args(args))
    }

    /// `yolo-sched models ARGS…` as `nobody`.
    fn models_as_nobody(&self, args: &[&str]) -> Output {
        let mut c = Command::new("runuser");
        c.args(["-u", "nobody", "--"])
            .arg(bin_for_everyone())
            .arg("--site")
            .arg(&self.site)
            .arg("models")
            .args(args);
        isolate(&mut c);
        run(&mut c)
    }

    #[track_caller]
    fn json(&self, args: &[&str]) -> serde_json::Value {
        let out = self.models(args);
        assert!(out.status.success(), "{}", text(&out));
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// Import a fresh checkpoint as `name`, `--public`, as root.
    fn import(&self, name: &str, tag: &str) -> Output {
        let file = self.dir.path().join(format!("{tag}.pt"));
        checkpoint(&file, tag);
        self.models(&[
            "import",
            file.to_str().unwrap(),
            "--name",
            name,
            "--public",
            "--json",
        ])
    }

    /// Run `script` with `sh -c` as `nobody` in the registry directory, `input` on its stdin.
    #[track_caller]
    fn plant(&self, script: &str, input: &[u8]) {
        use std::io::Write;
        let mut child = Command::new("runuser")
            .args(["-u", "nobody", "--", "sh", "-c", script])
            .current_dir(&self.reg)
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(input).unwrap();
        let status = child.wait().unwrap();
        assert!(status.success(), "planting as nobody: {script}");
    }

    /// The version `ref` resolves to for root (`show --json`).
    fn shown_version(&self, r: &str) -> u64 {
        self.json(&["show", r, "--json"])["version"]
            .as_u64()
            .unwrap()
    }

    fn problems(&self) -> Vec<String> {
        self.json(&["list", "--all", "--json"])["problems"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_str().unwrap().to_string())
            .collect()
    }
}

fn empty(dir: &Path) -> bool {
    std::fs::read_dir(dir).unwrap().next().is_none()
}

/// Issue #32, item 1: A write never follows a directory link someone planted: not the
/// model's directory, not `blobs`.
#[test]
fn registry_writes_never_follow_a_planted_directory_link() {
    if !root_and_nobody() {
        return;
    }
    let s = Shared::new(&["a"]);
    let victim = s.dir.path().join("victimdir");
    std::fs::create_dir(&victim).unwrap();
    s.plant(&format!("ln -s {} models/newname", victim.display()), b"");
    let out = s.import("newname", "b");
    assert!(!out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("symbolic link"), "{}", text(&out));
    assert!(empty(&victim), "the import wrote through the link");

    // `blobs -> DIR` before the first publication.
    let fresh = Shared::new(&[]);
    let blobs_victim = fresh.dir.path().join("blobsvictim");
    std::fs::create_dir(&blobs_victim).unwrap();
    fresh.plant(&format!("ln -s {} blobs", blobs_victim.display()), b"");
    let out = fresh.import("base", "c");
    assert!(!out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("symbolic link"), "{}", text(&out));
    assert!(empty(&blobs_victim), "a blob went through the link");
}

/// Issue #32, item 1: `gc` (root) never deletes through a planted `blobs/sha256 -> DIR`.
#[test]
fn registry_gc_never_deletes_through_a_planted_link() {
    if !root_and_nobody() {
        return;
    }
    let s = Shared::new(&[]);
    let victim = s.dir.path().join("victim");
    std::fs::create_dir(&victim).unwrap();
    let precious = victim.join("a".repeat(64));
    std::fs::write(&precious, "not a blob").unwrap();
    let ok = Command::new("touch")
        .args(["-d", "2 days ago"])
        .arg(&precious)
        .status()
        .unwrap();
    assert!(ok.success());
    s.plant(
        &format!("mkdir blobs && ln -s {} blobs/sha256", victim.display()),
        b"",
    );
    let out = s.models(&["gc", "--json"]);
    assert!(
        precious.exists(),
        "gc deleted through the link: {}",
        text(&out)
    );
}

/// Issue #32, item 2: A tag move or a removal written by someone who may not tag or remove
/// the version is not obeyed, and is reported.
#[test]
fn registry_tag_moves_and_removals_by_others_are_not_obeyed() {
    if !root_and_nobody() {
        return;
    }
    let s = Shared::new(&["a", "b"]);
    let out = s.models(&["tag", "base@1", "prod"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(s.shown_version("base@prod"), 1);
    let forged = serde_json::json!({
        "format": 1, "name": "base", "tag": "prod", "version": 2, "seq": 2,
        "user": "root", "time": "2026-12-01T00:00:00Z"
    });
    s.plant(
        "cat > models/base/tags/prod/00000002.json",
        forged.to_string().as_bytes(),
    );
    assert_eq!(
        s.shown_version("base@prod"),
        1,
        "a forged tag move was obeyed"
    );
    // An empty removal (and one that claims root).
    s.plant(
        "mkdir -p models/base/removed && : > models/base/removed/00000002.json",
        b"",
    );
    assert_eq!(s.shown_version("base"), 2, "an empty removal was obeyed");
    let listed = s.json(&["list", "--json"]);
    let versions: Vec<u64> = listed["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["version"].as_u64().unwrap())
        .collect();
    assert_eq!(versions, [1, 2], "{listed}");
    let problems = s.problems();
    assert!(
        problems.iter().any(|p| p.contains("prod"))
            && problems.iter().any(|p| p.contains("removal")),
        "{problems:?}"
    );
    // The version a tag moved by the rightful user points at is obeyed.
    let out = s.models(&["tag", "base@2", "prod"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(s.shown_version("base@prod"), 2);
}

/// Issue #32, item 2: A forged removal claiming root, written by another user, is not obeyed.
#[test]
fn registry_a_removal_claiming_root_is_not_obeyed() {
    if !root_and_nobody() {
        return;
    }
    let s = Shared::new(&["a", "b"]);
    let forged = serde_json::json!({
        "format": 1, "name": "base", "version": 2, "user": "root",
        "time": "2026-12-01T00:00:00Z"
    });
    s.plant(
        "mkdir -p models/base/removed && cat > models/base/removed/00000002.json",
        forged.to_string().as_bytes(),
    );
    assert_eq!(s.shown_version("base"), 2, "a forged removal was obeyed");
    // root's own removal is obeyed (root may remove anything).
    let out = s.models(&["remove", "base@1"]);
    assert!(out.status.success(), "{}", text(&out));
    let listed = s.json(&["list", "--json"]);
    assert_eq!(listed["models"].as_array().unwrap().len(), 1, "{listed}");
}

/// Issue #32, item 3: One planted entry does not break the listing: it is skipped, counted
/// under `problems`, and said escaped.
#[test]
fn registry_planted_entries_do_not_break_the_listing() {
    if !root_and_nobody() {
        return;
    }
    let s = Shared::new(&["a", "b"]);
    s.plant(
        "mkdir \"$(printf 'models/esc\\033[31mred\\007')\" && \
         mkdir \"$(printf 'models/bad\\377name')\" && \
         ln -s .. models/loop && ln -s /usr models/usr && mkdir -m 000 models/locked && \
         mkdir \"$(printf 'models/base/versions/x\\033]0;t\\007')\" && \
         ln -s .. models/base/loop && mkdir -m 000 models/base/locked",
        b"",
    );
    for out in [
        s.models(&["list", "--all"]),
        s.models_as_nobody(&["list", "--all"]),
        s.models(&["show", "base"]),
        s.models_as_nobody(&["show", "base"]),
        s.models_as_nobody(&["gc", "--dry-run"]),
    ] {
        assert!(out.status.success(), "{}", text(&out));
        for raw in [0x1b_u8, 0x07] {
            assert!(
                !out.stdout.contains(&raw) && !out.stderr.contains(&raw),
                "a control character reached the terminal: {}",
                text(&out)
            );
        }
    }
    let listed = s.json(&["list", "--all", "--json"]);
    assert_eq!(listed["models"].as_array().unwrap().len(), 2, "{listed}");
    assert!(
        listed["problems"].as_array().unwrap().len() >= 4,
        "{listed}"
    );
    // The leaderboard with the registry's versions.
    let runs = s.dir.path().join("noruns");
    std::fs::create_dir(&runs).unwrap();
    let out = run(yolo()
        .arg("--site")
        .arg(&s.site)
        .args(["compare", "--registry", "--json", "--runs-dir"])
        .arg(&runs));
    assert!(out.status.success(), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("registry:base@2"));
    // An unknown name is still bad input (exit 2) with the names there are.
    let out = s.models(&["show", "nosuch"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("`base`"), "{}", text(&out));
}

/// Issue #32, item 4: An invalid or foreign newest version is skipped by `NAME`.
#[test]
fn registry_an_invalid_newest_version_is_skipped() {
    if !root_and_nobody() {
        return;
    }
    let s = Shared::new(&["a", "b"]);
    s.plant("printf '{' > models/base/versions/00000003.json", b"");
    assert_eq!(s.shown_version("base"), 2);
    let out = s.models_as_nobody(&["show", "base", "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    // A valid record another user wrote, naming root: foreign, skipped.
    let mut r: serde_json::Value = serde_json::from_slice(
        &std::fs::read(s.reg.join("models/base/versions/00000002.json")).unwrap(),
    )
    .unwrap();
    r["version"] = 4.into();
    s.plant(
        "cat > models/base/versions/00000004.json",
        r.to_string().as_bytes(),
    );
    assert_eq!(s.shown_version("base"), 2);
    assert!(s.problems().len() >= 2);
    // A spec's `registry:base` resolves (to base@2; before: exit 1, nothing queued).
    let dir = s.dir.path();
    std::fs::write(
        dir.join("data.yaml"),
        "path: .\ntrain: images\nval: images\nnames: [a]\n",
    )
    .unwrap();
    let spec = dir.join("spec.toml");
    std::fs::write(
        &spec,
        format!(
            "version = 1\n[run]\nname = \"fromreg\"\nworkdir = \"{}\"\n[train]\nmodel = \"registry:base\"\ndata = \"data.yaml\"\n",
            dir.join("runs").display()
        ),
    )
    .unwrap();
    let out = run(yolo()
        .current_dir(dir)
        .arg("--site")
        .arg(&s.site)
        .args(["validate", "--no-cluster"])
        .arg(&spec));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
}

/// Issue #32, item 5: A name with invisible or bidirectional characters is not listed raw.
#[test]
fn registry_names_with_invisible_characters_are_not_listed() {
    if !root_and_nobody() {
        return;
    }
    let s = Shared::new(&["a"]);
    for (i, evil) in ["ev\u{202e}il", "zero\u{200b}width"].iter().enumerate() {
        let mut r: serde_json::Value = serde_json::from_slice(
            &std::fs::read(s.reg.join("models/base/versions/00000001.json")).unwrap(),
        )
        .unwrap();
        r["name"] = (*evil).into();
        r["user"] = "nobody".into();
        r["publish_id"] = format!("p{i}").into();
        s.plant(
            &format!(
                "mkdir -p 'models/{evil}/versions' && cat > 'models/{evil}/versions/00000001.json'"
            ),
            r.to_string().as_bytes(),
        );
    }
    let out = s.models(&["list"]);
    assert!(out.status.success(), "{}", text(&out));
    let all = text(&out);
    assert!(
        !all.contains('\u{202e}') && !all.contains('\u{200b}'),
        "{all}"
    );
    let listed = s.json(&["list", "--json"]);
    assert_eq!(listed["models"].as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed["problems"].as_array().unwrap().len(), 2, "{listed}");
}

/// Issue #32, item 6: `gc --dry-run` works for any user who can read the registry, though
/// `blobs/sha256` is not listable by them (1733).
#[test]
fn registry_gc_dry_run_works_for_an_ordinary_user() {
    if !root_and_nobody() {
        return;
    }
    let s = Shared::new(&["a", "b"]);
    let out = s.models(&["remove", "base@1"]);
    assert!(out.status.success(), "{}", text(&out));
    let out = s.models_as_nobody(&["gc", "--dry-run", "--keep-removed", "0s", "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["versions"][0]["model"], "base@1", "{v}");
    assert!(
        v["notes"]
            .as_array()
            .is_some_and(|n| n.iter().any(|n| n.as_str().unwrap().contains("blobs"))),
        "{v}"
    );
}
