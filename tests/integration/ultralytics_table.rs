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
