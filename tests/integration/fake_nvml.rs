//! The fake libnvidia-ml.so for integration tests: built once per test binary,
//! then copied with a fixture into a private directory per test, so each test has
//! its own library instance, state file and sysroot. Use it in-process (load
//! `node.lib` with nvml-wrapper; the library finds `fake-nvml.json` beside itself)
//! or for a `yolo-sched` subprocess (`node.apply_env(&mut cmd)`).
#![allow(dead_code)] // each test binary uses a different subset

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The name the fake looks for beside itself when FAKE_NVML_FIXTURE is not set.
pub const FIXTURE_FILE: &str = "fake-nvml.json";

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
        .join("debug")
}

/// Where the test command built the library before the tests started
/// (`slurm/test-all.sh`): the tests then never run cargo, whose lock another
/// `cargo test` beside them may hold for minutes.
pub const PREBUILT_ENV: &str = "YOLO_SCHED_FAKE_NVML_DIR";

/// Build `fake-nvml` (the library and `fake-nvml-ctl`) once; returns the target dir.
#[track_caller]
pub fn built() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        if let Some(dir) = std::env::var_os(PREBUILT_ENV).map(PathBuf::from) {
            assert!(
                dir.join("libnvidia_ml.so").is_file() && dir.join("fake-nvml-ctl").is_file(),
                "{PREBUILT_ENV}={} has no libnvidia_ml.so and fake-nvml-ctl",
                dir.display()
            );
            return dir;
        }
        let status = Command::new(env!("CARGO"))
            .args(["build", "-q", "-p", "fake-nvml"])
            .current_dir(workspace_root())
            .status()
            .expect("running cargo build -p fake-nvml");
        assert!(status.success(), "cargo build -p fake-nvml failed");
        let dir = target_dir();
        assert!(
            dir.join("libnvidia_ml.so").is_file(),
            "no libnvidia_ml.so in {}",
            dir.display()
        );
        dir
    })
}

/// Path of a fixture shipped in tests/fixtures/nvml.
pub fn shipped_fixture(name: &str) -> PathBuf {
    workspace_root().join("tests/fixtures/nvml").join(name)
}

/// One fake node: a private directory holding a copy of the library, the fixture
/// (as `fake-nvml.json`), its state file once used, and a sysroot.
pub struct FakeNode {
    pub dir: tempfile::TempDir,
    /// `<dir>/libnvidia-ml.so.1`.
    pub lib: PathBuf,
    pub fixture: PathBuf,
    pub sysroot: PathBuf,
}

impl FakeNode {
    /// A node with a shipped fixture, unchanged.
    pub fn new(fixture: &str) -> FakeNode {
        FakeNode::with_fixture(fixture, |_| {})
    }

    /// A node with a shipped fixture after `edit` (e.g. add processes, require a reset).
    pub fn with_fixture(fixture: &str, edit: impl FnOnce(&mut serde_json::Value)) -> FakeNode {
        let target = built();
        let dir = tempfile::Builder::new()
            .prefix("fake-nvml-")
            .tempdir()
            .expect("tempdir");
        let text = std::fs::read_to_string(shipped_fixture(fixture)).expect("reading fixture");
        let mut value: serde_json::Value = serde_json::from_str(&text).expect("fixture is JSON");
        edit(&mut value);
        let fixture_path = dir.path().join(FIXTURE_FILE);
        std::fs::write(&fixture_path, serde_json::to_string_pretty(&value).unwrap()).unwrap();
        let lib = dir.path().join("libnvidia-ml.so.1");
        std::fs::copy(target.join("libnvidia_ml.so"), &lib).expect("copying the fake library");
        let sysroot = dir.path().join("sysroot");
        FakeNode {
            dir,
            lib,
            fixture: fixture_path,
            sysroot,
        }
    }

    /// Another copy of the library beside the first: loading it gives a second,
    /// independent library instance that shares this node's fixture and state file,
    /// as a second process would.
    pub fn second_library(&self, name: &str) -> PathBuf {
        let path = self.dir.path().join(format!("libnvidia-ml-{name}.so.1"));
        std::fs::copy(&self.lib, &path).expect("copying the fake library");
        path
    }

    pub fn lib_os(&self) -> OsString {
        self.lib.clone().into_os_string()
    }

    /// Environment for a subprocess (yolo-sched) that should see this node.
    pub fn apply_env(&self, cmd: &mut Command) {
        cmd.env("YOLO_SCHED_NVML_LIB", &self.lib)
            .env("FAKE_NVML_FIXTURE", &self.fixture)
            .env("FAKE_NVML_SYSROOT", &self.sysroot)
            .env_remove("FAKE_NVML_SIMULATE_NON_ROOT");
    }

    /// Run `fake-nvml-ctl` (reset, reboot, state) on this node.
    pub fn ctl(&self, args: &[&str]) -> Output {
        Command::new(built().join("fake-nvml-ctl"))
            .arg("--fixture")
            .arg(&self.fixture)
            .arg("--sysroot")
            .arg(&self.sysroot)
            .args(args)
            .output()
            .expect("running fake-nvml-ctl")
    }

    /// The saved driver state as JSON.
    #[track_caller]
    pub fn state(&self) -> serde_json::Value {
        let out = self.ctl(&["state"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("state is JSON")
    }
}
