//! The command line as users meet it: help with examples everywhere,
//! completions and man pages generated from the same definitions, exit
//! statuses for bad flags.

mod common;

use common::*;

const SUBCOMMANDS: [&[&str]; 16] = [
    &["submit"],
    &["validate"],
    &["status"],
    &["watch"],
    &["list"],
    &["cancel"],
    &["resume"],
    &["logs"],
    &["audit"],
    &["node-setup"],
    &["report"],
    &["doctor"],
    &["generate"],
    &["generate", "completions"],
    &["dataset"],
    &["dataset", "check"],
];

#[test]
fn every_subcommand_has_help_with_examples() {
    for sub in SUBCOMMANDS {
        let out = run(yolo().args(sub).arg("--help"));
        assert_eq!(out.status.code(), Some(0), "{sub:?} --help");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("Usage: yolo-sched"), "{sub:?}: {text}");
        if !matches!(sub, ["generate", "completions"]) {
            assert!(
                text.contains("Examples:") || text.contains("Example:"),
                "{sub:?} --help has no examples:\n{text}"
            );
        }
    }
}

#[test]
fn completions_and_man_pages_are_generated() {
    for shell in ["bash", "zsh", "fish"] {
        let out = run(yolo().args(["generate", "completions", shell]));
        assert_eq!(out.status.code(), Some(0));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("node-setup") && text.contains("submit"),
            "{shell}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let out = run(yolo().args(["generate", "man", "--dir"]).arg(dir.path()));
    assert_eq!(out.status.code(), Some(0));
    let main = std::fs::read_to_string(dir.path().join("yolo-sched.1")).unwrap();
    assert!(
        main.starts_with(".ie") || main.contains(".TH yolo-sched"),
        "{}",
        &main[..200.min(main.len())]
    );
    assert!(dir.path().join("yolo-sched-submit.1").exists());
}

#[test]
fn bad_flags_are_invalid_input_and_help_is_success() {
    let out = run(yolo().args(["status", "--no-such-flag"]));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--no-such-flag"));
    let out = run(yolo().arg("--version"));
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("yolo-sched "));
}

#[test]
fn an_unknown_run_id_is_invalid_input_with_close_matches() {
    let state = tempfile::tempdir().unwrap();
    let out = run(yolo()
        .env("XDG_STATE_HOME", state.path())
        .args(["status", "no-such-run"]));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no run `no-such-run`"));
}

#[test]
fn out_of_range_durations_from_flags_and_environment_are_invalid_input_not_panics() {
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)]);
    let cases: &[Case] = &[
        (
            &["generate", "completions", "bash"],
            &[("YOLO_SCHED_SLURM_TIMEOUT", "inf")],
        ),
        (
            &["generate", "completions", "bash"],
            &[("YOLO_SCHED_SLURM_TIMEOUT", "1e300")],
        ),
        (
            &["generate", "completions", "bash"],
            &[("YOLO_SCHED_SLURM_TIMEOUT", "thirty")],
        ),
        (&["watch", "some-run", "--interval", "inf"], &[]),
        (&["watch", "some-run", "--max-interval", "1e300"], &[]),
        (
            &["watch", "some-run"],
            &[("YOLO_SCHED_WATCH_INTERVAL", "inf")],
        ),
        (&["audit", "--since", "99999999999d"], &[]),
    ];
    for (args, env) in cases {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_yolo-sched"));
        cmd.args(*args).env_remove("YOLO_SCHED_SLURM_TIMEOUT");
        for (k, v) in *env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?} {env:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?} {env:?}: {err}");
    }
}
