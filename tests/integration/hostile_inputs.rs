//! The hostile corpus: inputs made to exhaust time, memory or the terminal,
//! or to hang a reader, or to hide what a value is. Every case runs the real
//! binary under a time limit and an address-space limit and checks the exit
//! status, where the message points, and that the output stays readable.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::common;

/// Address space a case may use (the binary itself needs ~100 MB).
const MEMORY_LIMIT_KB: u64 = 2 * 1024 * 1024;
/// CPU time a case may take (`ulimit -t`), in a debug build: the measure of
/// "quickly" that a loaded machine does not change (the worst case, 80,000
/// unknown keys, takes about 5 s of CPU).
const CPU_LIMIT_S: u64 = 60;
/// Wall time a case may take: a case blocked on a FIFO uses no CPU. Generous,
/// because beside the test command's other streams two cores are shared by
/// dozens of processes (a 60 s wall limit once failed there).
const TIME_LIMIT: Duration = Duration::from_secs(300);
/// The most stderr a case may print.
const STDERR_LIMIT: usize = 64 * 1024;

struct Case<'a> {
    name: &'a str,
    args: &'a [&'a str],
    exit: i32,
    /// Substrings stderr must hold.
    says: &'a [&'a str],
}

#[track_caller]
fn bounded(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> (Output, Duration) {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!(
            "ulimit -v {MEMORY_LIMIT_KB}; ulimit -t {CPU_LIMIT_S}; exec \"$@\""
        ))
        .arg("sh")
        .arg(common::bin())
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", dir)
        .env("XDG_STATE_HOME", dir.join("state"))
        .env("NO_COLOR", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let start = Instant::now();
    let out = common::run_bounded(&mut cmd, TIME_LIMIT)
        .unwrap_or_else(|| panic!("{args:?} did not end within {TIME_LIMIT:?}"));
    (out, start.elapsed())
}

fn check(dir: &Path, case: &Case<'_>, env: &[(&str, &str)]) -> Option<String> {
    let (out, took) = bounded(dir, case.args, env);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let mut problems = Vec::new();
    if out.status.code() != Some(case.exit) {
        problems.push(format!(
            "exit {:?} (expected {}), after {took:?}",
            out.status, case.exit
        ));
    }
    if out.stderr.len() > STDERR_LIMIT {
        problems.push(format!("{} bytes of stderr", out.stderr.len()));
    }
    if stderr.contains("panicked") {
        problems.push("panicked".into());
    }
    for s in case.says {
        if !stderr.contains(s) {
            problems.push(format!("stderr lacks {s:?}"));
        }
    }
    (!problems.is_empty()).then(|| {
        format!(
            "{}: {}\n--- stderr (head) ---\n{}",
            case.name,
            problems.join("; "),
            crate::common::head(&stderr, 2000)
        )
    })
}

fn spec_head() -> String {
    "version = 1\n[run]\nname = \"hostile\"\nworkdir = \"runs/h\"\n[train]\nmodel = \"yolov8n.yaml\"\ndata = \"data.yaml\"\n"
        .to_string()
}

fn setup(dir: &Path) {
    let w = |name: &str, text: &str| std::fs::write(dir.join(name), text).unwrap();
    std::fs::create_dir_all(dir.join("images/train")).unwrap();
    std::fs::create_dir_all(dir.join("images/val")).unwrap();
    w(
        "data.yaml",
        "path: .\ntrain: images/train\nval: images/val\nnames: [a]\n",
    );
    // 80,000 unknown keys (1.7 MB): once 98 s, each error rescanning the file.
    let mut many = spec_head();
    for i in 0..80_000 {
        many.push_str(&format!("unknown_{i} = 1\n"));
    }
    w("many-keys.toml", &many);
    // One sweep axis of 256,000 values: once 23.5 s, a `contains` per value.
    let mut sweep = spec_head();
    sweep.push_str("[sweep]\nlr0 = [");
    for i in 0..256_000 {
        sweep.push_str(&format!("0.{:07},", i + 1));
    }
    sweep.push_str("]\n");
    w("long-axis.toml", &sweep);
    // A 5 MB workdir: the message must not echo it.
    w(
        "huge-workdir.toml",
        &spec_head().replace("runs/h", &format!("runs/{}", "a b".repeat(1_700_000))),
    );
    w(
        "dup.toml",
        "version = 1\n[run]\nname = \"a\"\nname = \"b\"\n",
    );
    std::fs::write(
        dir.join("not-utf8.toml"),
        b"version = 1\n[run]\nname = \"caf\xe9\"\n",
    )
    .unwrap();
    w(
        "zwj.toml",
        &spec_head().replace("yolov8n.yaml", "yolov8n\u{200d}.yaml"),
    );
    w(
        "bidi.toml",
        &spec_head().replace("runs/h", "runs/\u{202e}h"),
    );
    w(
        "nc-huge.yaml",
        "path: .\ntrain: images/train\nval: images/val\nnc: 1000000000\n",
    );
    w(
        "nc-float.yaml",
        "path: .\ntrain: images/train\nval: images/val\nnc: 1e7\n",
    );
    let fifo = dir.join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    w("site-typo.toml", "[defualts]\ngpu_partition = \"gpu\"\n");
}

#[test]
fn hostile_inputs_are_refused_quickly_in_bounded_memory_with_a_located_message() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    setup(d);
    let cases = [
        Case {
            name: "80,000 unknown keys",
            args: &["validate", "--no-cluster", "many-keys.toml"],
            exit: 2,
            says: &[
                "many-keys.toml has 80000 errors",
                "many-keys.toml:8:1: `train.unknown_0`",
                "… and 79950 more",
            ],
        },
        Case {
            name: "a sweep axis of 256,000 values",
            args: &["validate", "--no-cluster", "long-axis.toml"],
            exit: 0,
            says: &[],
        },
        Case {
            name: "a 5 MB workdir",
            args: &["validate", "--no-cluster", "huge-workdir.toml"],
            exit: 2,
            says: &["huge-workdir.toml:4:11: `run.workdir`", "…"],
        },
        Case {
            name: "a duplicate key",
            args: &["validate", "--no-cluster", "dup.toml"],
            exit: 2,
            says: &["dup.toml:4:1: invalid TOML: duplicate key `name`"],
        },
        Case {
            name: "a spec that is not UTF-8",
            args: &["validate", "--no-cluster", "not-utf8.toml"],
            exit: 2,
            says: &["not-utf8.toml:3:12: not UTF-8 text (byte 0xe9"],
        },
        Case {
            name: "a zero-width joiner in a model name",
            args: &["validate", "--no-cluster", "zwj.toml"],
            exit: 2,
            says: &["zwj.toml:6:17: invisible character U+200D"],
        },
        Case {
            name: "a right-to-left override in a path",
            args: &["validate", "--no-cluster", "bidi.toml"],
            exit: 2,
            says: &["bidi.toml:4:17: invisible character U+202E"],
        },
        Case {
            name: "a spec that is /dev/zero",
            args: &["validate", "--no-cluster", "/dev/zero"],
            exit: 2,
            says: &["/dev/zero is not a regular file"],
        },
        Case {
            name: "a spec that is a FIFO",
            args: &["validate", "--no-cluster", "fifo"],
            exit: 2,
            says: &["fifo is not a regular file"],
        },
        Case {
            name: "a site file that is a FIFO",
            args: &["--site", "fifo", "validate", "--no-cluster", "dup.toml"],
            exit: 2,
            says: &["fifo is not a regular file"],
        },
        Case {
            name: "a site file with a misspelt section",
            args: &[
                "--site",
                "site-typo.toml",
                "validate",
                "--no-cluster",
                "dup.toml",
            ],
            exit: 2,
            says: &["unknown section [defualts]", "defaults"],
        },
        Case {
            name: "a dataset with nc: 1000000000 and no names",
            args: &["dataset", "check", "nc-huge.yaml"],
            exit: 2,
            says: &["nc-huge.yaml:4", "more than the 100000"],
        },
        Case {
            name: "a dataset with nc: 1e7",
            args: &["dataset", "check", "nc-float.yaml"],
            exit: 2,
            says: &["nc-float.yaml:4", "`nc`"],
        },
    ];
    let failures: Vec<String> = cases.iter().filter_map(|c| check(d, c, &[])).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// A real dataset with hostile files beside the good ones: a label that is a
/// link to /dev/zero, an "image" that is a FIFO, a file name with a newline
/// that would print a forged `ok:` line.
#[test]
fn a_hostile_dataset_is_checked_in_bounded_time_and_memory() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ds = d.join("ds");
    common::copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/pcb/dataset"),
        &ds,
    );
    let images = ds.join("images/train");
    let first = std::fs::read_dir(&images)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some())
        .unwrap();
    let stem = first.file_stem().unwrap().to_str().unwrap().to_string();
    let label = ds.join(format!("labels/train/{stem}.txt"));
    std::fs::remove_file(&label).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &label).unwrap();
    nix::unistd::mkfifo(
        &images.join("fifo.jpg"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    std::fs::copy(
        &first,
        images.join("x\nok: the dataset can be trained on.png"),
    )
    .unwrap();
    // Its label has a class out of range, so an error names the file.
    std::fs::write(
        ds.join("labels/train/x\nok: the dataset can be trained on.txt"),
        "9 0.5 0.5 0.1 0.1\n",
    )
    .unwrap();
    let case = Case {
        name: "hostile dataset",
        args: &["dataset", "check", "ds/data.yaml"],
        exit: 2,
        says: &["has 3 errors"],
    };
    if let Some(f) = check(d, &case, &[]) {
        panic!("{f}");
    }
    let (out, _) = bounded(d, case.args, &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !stdout.lines().any(|l| l.starts_with("ok:")),
        "a file name printed a line of its own:\n{stdout}"
    );
    assert!(stdout.contains("x\\nok: the dataset"), "{stdout}");
    assert!(stdout.contains(".txt: cannot read:"), "{stdout}");
    assert!(stdout.contains("is not a regular file"), "{stdout}");
    assert!(
        stdout.contains("fifo.jpg: named like an image but not a regular file"),
        "{stdout}"
    );
}

#[test]
fn empty_environment_variables_mean_unset() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    setup(d);
    let case = Case {
        name: "YOLO_SCHED_SITE=\"\"",
        args: &["validate", "--no-cluster", "dup.toml"],
        exit: 2,
        says: &["duplicate key `name`"],
    };
    let env = [("YOLO_SCHED_SITE", ""), ("YOLO_SCHED_COLOR", "")];
    if let Some(f) = check(d, &case, &env) {
        panic!("{f}");
    }
}

/// `[backup]` (and the site's `[guard]`) mistakes: `validate` refuses every
/// one `submit --dry-run` refuses, with the same message at the same place
/// (`file:line:column` and the key, exit 2), and a credential written into
/// a URL is never echoed, only where it is.
#[test]
fn validate_and_submit_agree_on_backup_mistakes_and_never_echo_a_credential() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path());
    let secret = "wJalrXUtnFEMIK7MDENGbPxRfiCYzzSECRET";
    let key_id = "AKIAIOSFODNN7EXAMPLE";
    let team = "[backup]\nurl = \"s3://team-a/ckpt\"\nallowed_urls = [\"s3://team-a\"]\n";
    let cases: Vec<(&str, String, String, Vec<String>)> = vec![
        (
            "a spec URL in another bucket",
            team.into(),
            "[backup]\nurl = \"s3://other-bucket/x\"\n".into(),
            vec!["spec.toml:9:7: `backup.url` = s3://other-bucket/x is not within".into()],
        ),
        (
            "a spec URL sharing only a prefix",
            team.into(),
            "[backup]\nurl = \"s3://team-ab/x\"\n".into(),
            vec!["spec.toml:9:7: `backup.url` = s3://team-ab/x is not within".into()],
        ),
        (
            "a site url with ..",
            "[backup]\nurl = \"s3://../x\"\n".into(),
            String::new(),
            vec!["site.toml:2:7: in [backup]: `url`".into()],
        ),
        (
            "a site allowed_urls with a wildcard",
            "[backup]\nallowed_urls = [\"s3://*\"]\n".into(),
            String::new(),
            vec!["site.toml:2:16: in [backup]: `allowed_urls`".into()],
        ),
        (
            "a site interval of 0",
            "[backup]\nurl = \"s3://ckpt/y\"\ninterval = 0\n".into(),
            String::new(),
            vec!["site.toml:3:12: in [backup]: `interval`".into()],
        ),
        (
            "keys in the spec's URL",
            team.into(),
            format!("[backup]\nurl = \"s3://{key_id}:{secret}@team-a/x\"\n"),
            vec![
                "spec.toml:9:7: `backup.url`".into(),
                "carries user information".into(),
                "AWS_ACCESS_KEY_ID".into(),
            ],
        ),
        (
            "a presigned URL in the site file",
            format!("[backup]\nurl = \"s3://team-a/x?X-Amz-Signature={secret}\"\n"),
            String::new(),
            vec!["site.toml:2:7: in [backup]: `url` carries a request signature".into()],
        ),
        (
            "a site textfile_dir with a newline",
            "[guard]\ntextfile_dir = \"/var/lib/ne\\n# forged\"\n".into(),
            String::new(),
            vec!["site.toml:2:16: [guard] textfile_dir".into()],
        ),
    ];
    let mut problems = Vec::new();
    for (name, site, backup, says) in &cases {
        std::fs::write(dir.path().join("site.toml"), site).unwrap();
        std::fs::write(
            dir.path().join("spec.toml"),
            format!("{}{backup}", spec_head()),
        )
        .unwrap();
        let env = [("YOLO_SCHED_SITE", "site.toml")];
        for args in [
            &["validate", "--no-cluster", "spec.toml"][..],
            &["submit", "--dry-run", "spec.toml"][..],
        ] {
            let (out, _) = bounded(dir.path(), args, &env);
            let all = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            let mut wrong = Vec::new();
            if out.status.code() != Some(2) {
                wrong.push(format!("exit {:?}", out.status.code()));
            }
            for s in says {
                if !all.contains(s.as_str()) {
                    wrong.push(format!("lacks {s:?}"));
                }
            }
            if all.contains(secret) || all.contains(key_id) {
                wrong.push("echoes the credential".into());
            }
            if !wrong.is_empty() {
                problems.push(format!("{name}, {}: {}\n{all}", args[0], wrong.join("; ")));
            }
        }
    }
    // What the site allows still validates.
    std::fs::write(dir.path().join("site.toml"), team).unwrap();
    std::fs::write(
        dir.path().join("spec.toml"),
        format!("{}[backup]\nurl = \"s3://team-a/x\"\n", spec_head()),
    )
    .unwrap();
    let (out, _) = bounded(
        dir.path(),
        &["validate", "--no-cluster", "spec.toml"],
        &[("YOLO_SCHED_SITE", "site.toml")],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

/// `validate` and `submit` run one check (`run::submit::check`): a spec whose
/// workdir names an unset variable, weights that would have to be
/// downloaded, or no model with no site default is refused by both, exit 2,
/// with the same message, before Slurm is asked (a spec that passed would
/// reach Slurm and exit otherwise).
#[test]
fn validate_and_submit_refuse_the_same_specs_with_the_same_words() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path());
    let head = |workdir: &str, model: &str| {
        format!(
            "version = 1\n[run]\nname = \"same\"\nworkdir = \"{workdir}\"\n[train]\n{model}data = \"data.yaml\"\n"
        )
    };
    let cases = [
        (
            "an unset variable in the workdir",
            head("$YS_SURELY_UNSET_VAR/runs", "model = \"yolov8n.yaml\"\n"),
            "uses $YS_SURELY_UNSET_VAR",
        ),
        (
            "weights that would download",
            head("runs/w", "model = \"yolov8n.pt\"\n"),
            "yolov8n.pt",
        ),
        ("no model and no site default", head("runs/m", ""), "model"),
    ];
    let mut problems = Vec::new();
    for (name, spec, says) in &cases {
        std::fs::write(dir.path().join("spec.toml"), spec).unwrap();
        let mut answers = Vec::new();
        for args in [
            &["validate", "--no-cluster", "spec.toml"][..],
            &["submit", "--dry-run", "spec.toml"][..],
        ] {
            let (out, _) = bounded(dir.path(), args, &[]);
            let err = String::from_utf8_lossy(&out.stderr).into_owned();
            if out.status.code() != Some(2) || !err.contains(says) {
                problems.push(format!(
                    "{name}, {}: exit {:?}\n{err}",
                    args[0],
                    out.status.code()
                ));
            }
            // The located lines, as both print them.
            answers.push(
                err.lines()
                    .filter(|l| l.starts_with("spec.toml:") || l.trim_start().starts_with("hint:"))
                    .map(str::to_string)
                    .collect::<Vec<_>>(),
            );
        }
        if answers[0] != answers[1] {
            problems.push(format!(
                "{name}: validate said {:?}, submit {:?}",
                answers[0], answers[1]
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}
