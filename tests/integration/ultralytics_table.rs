//! The argument table and export formats of `src/spec/ultralytics.rs` match
//! the Ultralytics that `slurm/trainer.sh` installs: every key of its
//! `cfg/default.yaml` is accepted, every accepted key is either in it or one
//! that its `_handle_deprecation` still takes (and the table marks it
//! deprecated), and the export formats are those of `export_formats()`.
//! Skipped without the venv, unless YOLO_SCHED_EXPECT_TRAINER=1 (CI).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use yolo_sched::spec::ultralytics::{EXPORT_FORMATS, YOLO_ARGS};

#[track_caller]
fn python() -> Option<PathBuf> {
    let venv = std::env::var("YOLO_TRAINER_VENV")
        .unwrap_or_else(|_| "/opt/yolo-sched/trainer-ultralytics-8.4.190".into());
    let py = PathBuf::from(venv).join("bin/python");
    if py.exists() {
        return Some(py);
    }
    if std::env::var("YOLO_SCHED_EXPECT_TRAINER").is_ok_and(|v| v == "1") {
        panic!(
            "the real trainer is expected but {} is missing",
            py.display()
        );
    }
    eprintln!("skipping: no trainer venv (slurm/trainer.sh install)");
    None
}

/// Lines printed by a Python snippet run in the venv.
#[track_caller]
fn ask(py: &PathBuf, code: &str) -> BTreeSet<String> {
    let out = Command::new(py).args(["-c", code]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn the_argument_table_is_the_installed_default_yaml_plus_deprecated_keys() {
    let Some(py) = python() else { return };
    let yaml = ask(
        &py,
        "import ultralytics, yaml, os\n\
         d = yaml.safe_load(open(os.path.join(os.path.dirname(ultralytics.__file__), 'cfg', 'default.yaml')))\n\
         print('\\n'.join(d))",
    );
    assert!(yaml.len() > 100, "{yaml:?}");
    let version = ask(&py, "import ultralytics; print(ultralytics.__version__)");
    assert_eq!(version.into_iter().next().as_deref(), Some("8.4.190"));
    let current: BTreeSet<String> = YOLO_ARGS
        .iter()
        .filter(|a| a.deprecated.is_none())
        .map(|a| a.name.to_string())
        .collect();
    let deprecated: BTreeSet<String> = YOLO_ARGS
        .iter()
        .filter(|a| a.deprecated.is_some())
        .map(|a| a.name.to_string())
        .collect();
    let missing: Vec<_> = yaml.difference(&current).collect();
    let extra: Vec<_> = current.difference(&yaml).collect();
    assert!(
        missing.is_empty(),
        "default.yaml keys the table lacks: {missing:?}"
    );
    assert!(
        extra.is_empty(),
        "table keys not in default.yaml nor marked deprecated: {extra:?}"
    );
    // Every deprecated key is one Ultralytics' deprecation handler names.
    let source = ask(
        &py,
        "import inspect, ultralytics.cfg as c; print(inspect.getsource(c._handle_deprecation))",
    )
    .into_iter()
    .collect::<Vec<_>>()
    .join("\n");
    for key in &deprecated {
        assert!(!yaml.contains(key), "{key} is current, not deprecated");
        assert!(
            source.contains(&format!("\"{key}\"")),
            "{key} is not handled by _handle_deprecation"
        );
    }
}

#[test]
fn export_formats_are_the_installed_ones() {
    let Some(py) = python() else { return };
    let installed = ask(
        &py,
        "from ultralytics.engine.exporter import export_formats\n\
         print('\\n'.join(f for f in export_formats()['Argument'] if f != '-'))",
    );
    let ours: BTreeSet<String> = EXPORT_FORMATS.iter().map(|f| f.to_string()).collect();
    let missing: Vec<_> = installed.difference(&ours).collect();
    assert!(
        missing.is_empty(),
        "formats Ultralytics has and the table lacks: {missing:?}"
    );
    // Beyond them only the old names that Ultralytics maps onto litert.
    let extra: BTreeSet<&str> = ours.difference(&installed).map(String::as_str).collect();
    assert_eq!(extra, BTreeSet::from(["tflite", "tfjs"]), "{extra:?}");
}

/// Ultralytics' own DDP launch (`ultralytics/utils/dist.py`), as two DDP jobs
/// of one run on one node start it: the same `YOLO_CONFIG_DIR` (the run's,
/// as the job scripts set it), the offline switches on. Each gets a launcher
/// file of its own under `$YOLO_CONFIG_DIR/Ultralytics/DDP` (never `~/.config`), and a
/// port below Linux's ephemeral range; nothing is installed at run time
/// (cloudpickle, which DDP needs, comes with `slurm/trainer.sh`).
#[test]
fn two_ddp_launches_in_one_config_dir_get_their_own_files_offline() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join(".ultralytics");
    let code = "from types import SimpleNamespace\n\
                from ultralytics.utils.dist import generate_ddp_file, find_free_network_port\n\
                t = SimpleNamespace(args=SimpleNamespace(), model=None, callbacks={})\n\
                print(generate_ddp_file(t))\n\
                print(find_free_network_port())";
    let start = |home: &str| {
        Command::new(&py)
            .args(["-c", code])
            .env("YOLO_CONFIG_DIR", &config)
            .env("YOLO_OFFLINE", "1")
            .env("YOLO_AUTOINSTALL", "false")
            .env("HOME", dir.path().join(home))
            // Any attempt to reach the network fails at once.
            .env("http_proxy", "http://127.0.0.1:9")
            .env("https_proxy", "http://127.0.0.1:9")
            .env("PIP_NO_INDEX", "1")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (start("a"), start("b"));
    let mut files = Vec::new();
    for child in [a, b] {
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(out.status.success(), "{stdout}\n{stderr}");
        assert!(
            !stderr.contains("AutoUpdate"),
            "no install at run time: {stderr}"
        );
        let lines: Vec<&str> = stdout.lines().collect();
        let file = PathBuf::from(lines[lines.len() - 2]);
        let port: u32 = lines[lines.len() - 1].parse().unwrap();
        assert!(
            file.starts_with(config.join("Ultralytics/DDP")),
            "{}",
            file.display()
        );
        assert!(
            file.exists() && file.with_extension("pt").exists(),
            "{}",
            file.display()
        );
        assert!((10_000..32_768).contains(&port), "{port}");
        files.push(file);
    }
    assert_ne!(files[0], files[1], "the two launches share a file");
    assert!(
        !dir.path().join("a/.config").exists() && !dir.path().join("b/.config").exists(),
        "settings went to ~/.config instead of YOLO_CONFIG_DIR"
    );
}
