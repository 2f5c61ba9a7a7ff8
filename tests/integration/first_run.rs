//! First-run set-up, tested from the state before it ran: the one-time work
//! the test command and the demo do on a new machine (test users and their
//! homes) is made once when many processes ask at the same time, repairs what
//! an interrupted earlier run left, and the reset back to a fresh machine
//! refuses to run unless told it is on a throw-away one.
//!
//! The users here have names of their own, made and removed by each test, so
//! that "before it ran" is real on every machine, not only a new one.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common;

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("slurm")
        .join(name)
}

fn users_sh(args: &[&str]) -> Output {
    Command::new("bash")
        .arg(script("users.sh"))
        .args(args)
        .output()
        .expect("running slurm/users.sh")
}

/// The passwd lines of `user` (a race used to leave one with another uid).
fn passwd_lines(user: &str) -> Vec<String> {
    std::fs::read_to_string("/etc/passwd")
        .unwrap()
        .lines()
        .filter(|l| l.split(':').next() == Some(user))
        .map(str::to_string)
        .collect()
}

#[track_caller]
fn uid_of(user: &str) -> u32 {
    nix::unistd::User::from_name(user)
        .unwrap()
        .unwrap_or_else(|| panic!("no user {user}"))
        .uid
        .as_raw()
}

/// Users of this test, removed when it ends whatever happened.
struct Scratch(Vec<String>);

impl Scratch {
    #[track_caller]
    fn new(tag: &str, n: usize) -> Scratch {
        // Short and unique per test process: user names are at most 32 characters.
        let id = std::process::id() % 100_000;
        let users: Vec<String> = (0..n).map(|i| format!("ys-{tag}{id}-{i}")).collect();
        let mut args = vec!["remove"];
        args.extend(users.iter().map(String::as_str));
        users_sh(&args);
        for u in &users {
            assert!(passwd_lines(u).is_empty(), "{u} exists before the test");
        }
        Scratch(users)
    }

    fn names(&self) -> Vec<&str> {
        self.0.iter().map(String::as_str).collect()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let mut args = vec!["remove"];
        args.extend(self.0.iter().map(String::as_str));
        users_sh(&args);
    }
}

#[test]
fn users_asked_for_by_many_processes_at_once_are_made_once_with_their_homes() {
    if !common::as_root_and_nobody("creating users") {
        return;
    }
    let scratch = Scratch::new("race", 3);
    let mut ensure = vec!["ensure", "--private"];
    ensure.extend(scratch.names());
    // Eight processes at once, as parallel tests and a second cluster do.
    let children: Vec<_> = (0..8)
        .map(|_| {
            Command::new("bash")
                .arg(script("users.sh"))
                .args(&ensure)
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for u in scratch.names() {
        let lines = passwd_lines(u);
        assert_eq!(lines.len(), 1, "{u}: {lines:?}");
        let home = std::fs::metadata(format!("/home/{u}")).unwrap();
        assert_eq!(home.uid(), uid_of(u), "{u}'s home belongs to another uid");
        assert_eq!(home.mode() & 0o777, 0o700, "{u}'s home is not private");
    }
}

#[test]
fn a_home_left_to_another_uid_by_an_interrupted_run_is_given_back() {
    if !common::as_root_and_nobody("repairing a home") {
        return;
    }
    let scratch = Scratch::new("fix", 1);
    let user = scratch.names()[0];
    let out = users_sh(&["ensure", user]);
    assert!(out.status.success(), "{out:?}");
    // What the old race left: the home and a file in it owned by another uid.
    let home = PathBuf::from(format!("/home/{user}"));
    std::fs::write(home.join("left"), "x").unwrap();
    let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap();
    for p in [&home, &home.join("left")] {
        nix::unistd::chown(p.as_path(), Some(nobody.uid), Some(nobody.gid)).unwrap();
    }
    let out = users_sh(&["ensure", "--private", user]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("gave"),
        "{out:?}"
    );
    for p in [&home, &home.join("left")] {
        assert_eq!(std::fs::metadata(p).unwrap().uid(), uid_of(user), "{p:?}");
    }
    // A home that went missing is made again.
    std::fs::remove_dir_all(&home).unwrap();
    let out = users_sh(&["ensure", user]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(std::fs::metadata(&home).unwrap().uid(), uid_of(user));
    // Asked again with nothing to repair: nothing said, nothing changed.
    let out = users_sh(&["ensure", user]);
    assert!(out.status.success() && out.stderr.is_empty(), "{out:?}");
}

#[test]
fn a_group_gets_exactly_its_members_and_bad_names_are_refused() {
    if !common::as_root_and_nobody("creating groups") {
        return;
    }
    let scratch = Scratch::new("grp", 2);
    let names = scratch.names();
    let out = users_sh(&["ensure", names[0], names[1]]);
    assert!(out.status.success(), "{out:?}");
    let group = format!("{}-g", names[0]);
    for members in [vec![names[0], names[1]], vec![names[1]]] {
        let mut args = vec!["group", group.as_str()];
        args.extend(&members);
        let out = users_sh(&args);
        assert!(out.status.success(), "{out:?}");
        let line = String::from_utf8(
            Command::new("getent")
                .args(["group", &group])
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap();
        assert_eq!(
            line.trim().rsplit(':').next(),
            Some(members.join(",").as_str())
        );
    }
    let out = users_sh(&["remove-group", &group]);
    assert!(out.status.success(), "{out:?}");
    for bad in ["Root", "a b", "x;id", "-rf", "../etc"] {
        let out = users_sh(&["ensure", bad]);
        assert_eq!(out.status.code(), Some(2), "{bad}: {out:?}");
        assert!(passwd_lines(bad).is_empty());
    }
}

#[test]
fn the_reset_refuses_unless_told_the_machine_is_throwaway_and_its_dry_run_changes_nothing() {
    let reset = |env: &[(&str, &str)], args: &[&str]| {
        let mut c = Command::new("bash");
        c.arg(script("reset.sh"))
            .args(args)
            .env_remove("THROWAWAY_MACHINE");
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().unwrap()
    };
    let out = reset(&[], &[]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("THROWAWAY_MACHINE=1"),
        "{out:?}"
    );
    let out = reset(&[("THROWAWAY_MACHINE", "yes")], &[]);
    assert_eq!(out.status.code(), Some(2), "only 1 says so: {out:?}");
    let out = reset(&[("THROWAWAY_MACHINE", "1")], &["--everything"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    if !common::as_root_and_nobody("the reset's dry run") {
        return;
    }
    // Something the reset removes (the demo's runs): listed, left alone.
    let demo = Path::new("/tmp/yolo-sched-demo");
    let made = std::fs::create_dir(demo).is_ok();
    let out = reset(&[("THROWAWAY_MACHINE", "1")], &["--dry-run"]);
    let present = demo.is_dir();
    if made {
        let _ = std::fs::remove_dir(demo);
    }
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("would remove: /tmp/yolo-sched-demo"),
        "{said}"
    );
    assert!(present, "the dry run removed /tmp/yolo-sched-demo");
    assert!(
        !said.lines().any(|l| !l.starts_with("would ")),
        "a dry run only says what it would do: {said}"
    );
}
