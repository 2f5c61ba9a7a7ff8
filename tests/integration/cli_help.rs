//! The command line as users meet it: help with examples everywhere,
//! completions and man pages generated from the same definitions, exit
//! statuses for bad flags.

use crate::common::*;
use std::path::Path;

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
fn help_of_help_is_help() {
    for args in [&["help", "--help"][..], &["help"], &["help", "submit"]] {
        let out = run(yolo().args(args));
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert!(String::from_utf8_lossy(&out.stdout).contains("Usage: yolo-sched"));
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
    // Examples are set as written, not filled into one paragraph by groff.
    let cancel = std::fs::read_to_string(dir.path().join("yolo-sched-cancel.1")).unwrap();
    assert!(cancel.contains("Examples:\n.nf\n"), "{cancel}");
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
    // An empty id names no run (a prefix of every id would pick one).
    let out = run(yolo()
        .env("XDG_STATE_HOME", state.path())
        .args(["status", ""]));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no run given"));
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
        let mut cmd = crate::common::yolo();
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

/// Hostile numbers for every option that takes a value, on every subcommand,
/// and for every numeric environment variable: each run ends in time with a
/// documented status (0, 1 or 2), never a panic (101) or a signal.
#[test]
fn hostile_numbers_never_panic_or_hang() {
    use clap::CommandFactory;
    use std::time::Duration;

    const VALUES: [&str; 6] = ["inf", "nan", "1e300", "-1", "0", "99999999999d"];
    let dir = tempfile::tempdir().unwrap();
    let empty_path = dir.path().join("no-bin");
    std::fs::create_dir_all(&empty_path).unwrap();
    // Every leaf subcommand with the options that take a value.
    fn leaves(cmd: &clap::Command, path: Vec<String>, out: &mut Vec<(Vec<String>, clap::Command)>) {
        let subs: Vec<&clap::Command> = cmd
            .get_subcommands()
            .filter(|s| s.get_name() != "help")
            .collect();
        if subs.is_empty() {
            out.push((path.clone(), cmd.clone()));
        }
        for s in subs {
            let mut p = path.clone();
            p.push(s.get_name().to_string());
            leaves(s, p, out);
        }
    }
    let mut all = Vec::new();
    leaves(&yolo_sched::cli::Cli::command(), Vec::new(), &mut all);
    let mut cases = 0;
    let mut check = |args: Vec<String>, env: Option<(&str, &str)>| {
        let mut cmd = yolo();
        cmd.args(&args)
            .current_dir(dir.path())
            .env("PATH", &empty_path)
            .env("HOME", dir.path())
            .env("XDG_STATE_HOME", dir.path().join("state"));
        if let Some((k, v)) = env {
            cmd.env(k, v);
        }
        let out = run_bounded(&mut cmd, Duration::from_secs(20))
            .unwrap_or_else(|| panic!("{args:?} {env:?} did not end within 20 s"));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            matches!(out.status.code(), Some(0..=2)) && !stderr.contains("panicked"),
            "{args:?} {env:?}: status {:?}\n{stderr}",
            out.status
        );
        cases += 1;
    };
    for (path, cmd) in &all {
        // A value for each required positional, so that the option is reached.
        let positionals: Vec<String> = cmd
            .get_positionals()
            .filter(|a| a.is_required_set())
            .map(|a| {
                a.get_possible_values()
                    .first()
                    .map_or("nonexistent".to_string(), |v| v.get_name().to_string())
            })
            .collect();
        for arg in cmd.get_arguments().filter(|a| {
            a.get_long().is_some()
                && a.get_action().takes_values()
                && a.get_possible_values().is_empty()
        }) {
            let long = format!("--{}", arg.get_long().unwrap());
            for v in VALUES {
                let mut args = path.clone();
                args.extend(positionals.iter().cloned());
                args.push(format!("{long}={v}"));
                check(args, None);
            }
        }
        // And each positional in turn.
        for i in 0..positionals.len() {
            for v in VALUES {
                let mut args = path.clone();
                let mut given = positionals.clone();
                given[i] = v.to_string();
                args.extend(given);
                check(args, None);
            }
        }
    }
    for var in [
        "YOLO_SCHED_SLURM_TIMEOUT",
        "YOLO_SCHED_WATCH_INTERVAL",
        "YOLO_SCHED_WATCH_MAX_INTERVAL",
    ] {
        for v in VALUES {
            for args in [
                vec!["list"],
                vec!["watch", "nonexistent"],
                vec!["generate", "completions", "bash"],
            ] {
                check(
                    args.into_iter().map(str::to_string).collect(),
                    Some((var, v)),
                );
            }
        }
    }
    assert!(cases > 250, "only {cases} cases");
}

/// `--output` and `--summary` never replace what is not a regular file: a
/// device, a FIFO, or a symlink to one is refused before any work, exit 2,
/// and left as it was.
#[test]
fn outputs_refuse_devices_fifos_and_links_to_them() {
    use std::os::unix::fs::FileTypeExt;
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(status.success());
    let link = dir.path().join("full-link");
    std::os::unix::fs::symlink("/dev/full", &link).unwrap();
    let data = dir.path().join("data.yaml");
    std::fs::write(&data, "path: .\ntrain: images\nval: images\nnames: [a]\n").unwrap();
    for target in [Path::new("/dev/full"), fifo.as_path(), link.as_path()] {
        for args in [
            vec![
                "report".to_string(),
                "--format".into(),
                "json".into(),
                "--output".into(),
            ],
            vec![
                "dataset".into(),
                "check".into(),
                data.display().to_string(),
                "--summary".into(),
            ],
        ] {
            let mut cmd = yolo();
            cmd.args(&args).arg(target).env("PATH", dir.path());
            let out =
                run_bounded(&mut cmd, std::time::Duration::from_secs(20)).expect("ends in time");
            assert_eq!(out.status.code(), Some(2), "{args:?} {target:?}");
            assert!(
                String::from_utf8_lossy(&out.stderr).contains("not a regular file"),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    assert!(std::fs::metadata("/dev/full")
        .unwrap()
        .file_type()
        .is_char_device());
    assert!(std::fs::symlink_metadata(&fifo)
        .unwrap()
        .file_type()
        .is_fifo());
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
}

/// `docs/cli.md` is the binary's own `generate reference`: it cannot drift from `--help`.
#[test]
fn the_cli_reference_in_docs_is_current() {
    let out = run(yolo().args(["generate", "reference"]));
    assert_eq!(out.status.code(), Some(0));
    let generated = String::from_utf8(out.stdout).unwrap();
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/cli.md");
    let written = std::fs::read_to_string(&docs).unwrap_or_default();
    assert!(
        generated == written,
        "docs/cli.md is out of date: run `cargo run -q -- generate reference > docs/cli.md`"
    );
}

/// Every argument of every subcommand says what it is.
#[test]
fn every_argument_has_help() {
    use clap::CommandFactory;
    fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
        for arg in cmd.get_arguments() {
            let id = arg.get_id().as_str();
            if id != "help" && id != "version" && arg.get_help().is_none() {
                missing.push(format!("{path} {id}"));
            }
        }
        for sub in cmd.get_subcommands() {
            walk(sub, &format!("{path} {}", sub.get_name()), missing);
        }
    }
    let mut missing = Vec::new();
    walk(&yolo_sched::cli::Cli::command(), "yolo-sched", &mut missing);
    assert!(missing.is_empty(), "arguments without help: {missing:#?}");
}

/// A run-index entry that is a link to /dev/zero, a FIFO or garbage is
/// skipped with a warning, read without blocking and without reading it all.
#[test]
fn hostile_run_index_entries_are_skipped_with_a_warning() {
    let state = tempfile::tempdir().unwrap();
    let index = state.path().join("yolo-sched/runs");
    std::fs::create_dir_all(&index).unwrap();
    std::os::unix::fs::symlink("/dev/zero", index.join("zero.json")).unwrap();
    let fifo = index.join("fifo.json");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    std::fs::write(index.join("junk.json"), "{not json").unwrap();
    let mut cmd = yolo();
    cmd.env("XDG_STATE_HOME", state.path())
        .env("PATH", state.path())
        .args(["list", "--json"]);
    let out = run_bounded(&mut cmd, std::time::Duration::from_secs(20)).expect("ends in time");
    assert_eq!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err.matches("skipping unreadable run index entry").count(),
        3,
        "{err}"
    );
    assert!(err.contains("not a regular file"), "{err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "[]");
}
