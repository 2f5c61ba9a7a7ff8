//! `cluster-conf`, the writer of slurm/cluster.sh's slurm.conf, gres.conf and
//! cgroup.conf, against files the old bash functions wrote: each directory of
//! `tests/fixtures/cluster-conf/cases/` holds the arguments cluster.sh passed
//! and the files, which `slurm/conf-identity.sh --golden` stored after
//! checking them byte for byte against the bash of commit 6477a56 (the last
//! that wrote them itself). Paths in the arguments are relative to the
//! package root, where the test runs the program.

use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_cluster-conf");
const CASES: &str = "tests/fixtures/cluster-conf/cases";
const FILES: [&str; 4] = ["slurm.conf", "gres.conf", "cgroup.conf", "devices"];

fn args_of(case: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(case.join("args")).unwrap();
    text.strip_suffix('\n')
        .unwrap_or(&text)
        .split('\n')
        .map(str::to_string)
        .collect()
}

fn run(args: &[String], out: &Path) -> std::process::Output {
    Command::new(BIN)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .arg("--out")
        .arg(out)
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn writes_what_the_bash_wrote_for_every_recorded_shape() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(CASES);
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    cases.sort();
    assert!(
        cases.len() >= 10,
        "{} cases in {}",
        cases.len(),
        root.display()
    );
    for case in &cases {
        let out = tempfile::tempdir().unwrap();
        let o = run(&args_of(case), out.path());
        assert!(
            o.status.success(),
            "{}: {}",
            case.display(),
            String::from_utf8_lossy(&o.stderr)
        );
        for f in FILES {
            let want = std::fs::read(case.join(f)).unwrap();
            let got = std::fs::read(out.path().join(f)).unwrap();
            assert!(
                want == got,
                "{}: {f} differs:\n--- want\n{}\n--- got\n{}",
                case.display(),
                String::from_utf8_lossy(&want),
                String::from_utf8_lossy(&got)
            );
        }
    }
}

/// Replaces `--flag`'s value in an argument list.
fn with(mut args: Vec<String>, flag: &str, value: &str) -> Vec<String> {
    let i = args.iter().position(|a| a == flag).unwrap();
    args[i + 1] = value.to_string();
    args
}

#[test]
fn bad_settings_exit_2_naming_the_setting_and_write_nothing() {
    let case = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(CASES)
        .join("default");
    for (flag, value, want) in [
        ("--nodes", "100", "NODES must be 1..99, got '100'"),
        ("--pool", "yes", "POOL must be 0 or 1"),
        (
            "--node-gres",
            "tests/fixtures/cluster-conf/bad-node-gres.txt",
            "line 2: expected '<nodeK> gpu:<type>:<count>[,...]' or '<nodeK> -', got 'node2 gpu:a100:1 extra'",
        ),
        ("--mig-node", "1", "MIG_NODE=1 needs"),
        ("--sched-params", "a b", "SCHED_PARAMS must be"),
    ] {
        let out = tempfile::tempdir().unwrap();
        let o = run(&with(args_of(&case), flag, value), out.path());
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{flag} {value}: {err}");
        assert!(err.starts_with("cluster-conf: error: ") && err.contains(want), "{err}");
        assert_eq!(std::fs::read_dir(out.path()).unwrap().count(), 0);
    }
    let out = tempfile::tempdir().unwrap();
    let mut args = args_of(&case);
    args.extend(["--gres-conf".into(), "node1=/no/such/file".into()]);
    let o = run(&args, out.path());
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("GRES_CONF_NODE1: no file /no/such/file"));
}
