//! A run directory for live tests: a copy of the demo dataset, a spec, and
//! yolo-sched with this fixture's own state directory and the stand-in trainer.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::*;

pub struct RunFixture {
    dir: tempfile::TempDir,
}

impl RunFixture {
    pub fn new() -> RunFixture {
        let dir = shared_tempdir();
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/pcb");
        copy_dir(&src.join("dataset"), &dir.path().join("dataset"));
        RunFixture { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A prepare → train → export spec on the demo dataset, workdir `run/`.
    pub fn spec(&self, name: &str) -> PathBuf {
        self.spec_with(name, "")
    }

    /// The same spec with `extra` TOML (whole tables) appended.
    pub fn spec_with(&self, name: &str, extra: &str) -> PathBuf {
        let spec = format!(
            "version = 1\n[run]\nname = \"{name}\"\npartition = \"gpu\"\nworkdir = \"run\"\n\
             [train]\nmodel = \"yolov8n.yaml\"\ndata = \"{}\"\nepochs = 2\nimgsz = 64\nbatch = 8\nworkers = 1\n\
             [stages.prepare]\npartition = \"cpu\"\n[stages.export]\npartition = \"cpu\"\nformats = [\"onnx\"]\n",
            self.path().join("dataset/data.yaml").display()
        ) + extra;
        let p = self.path().join(format!("{name}.toml"));
        std::fs::write(&p, spec).unwrap();
        p
    }

    /// yolo-sched with this fixture's state and the stand-in trainer.
    pub fn cmd(&self) -> Command {
        let mut c = yolo();
        c.env("XDG_STATE_HOME", self.path().join("state"))
            .env(
                "YOLO_SCHED_YOLO",
                Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/standin/yolo"),
            )
            .env("YOLO_STANDIN_EPOCH_SECONDS", "0.1")
            .env("YOLO_SCHED_WATCH_INTERVAL", "0.3")
            .env("YOLO_SCHED_WATCH_MAX_INTERVAL", "1");
        c
    }

    /// Submit `spec`; the run id and the submit JSON.
    #[track_caller]
    pub fn submit(&self, spec: &Path) -> (String, serde_json::Value) {
        let out = run(self.cmd().args(["submit", "--json"]).arg(spec));
        assert_eq!(out.status.code(), Some(0), "submit failed: {out:?}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        (v["run_id"].as_str().unwrap().to_string(), v)
    }
}
