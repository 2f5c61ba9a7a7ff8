//! The job agent's cost per sample: one NVML memory read of the job's device
//! (`nvml::memory::JobDevice::read`) and the guard's decision on a full
//! window, against the fake libnvidia-ml.so (`cargo build -p fake-nvml` first;
//! without it the NVML benches say so and measure nothing).

use std::path::{Path, PathBuf};

use yolo_sched::agent::series::{Sample, Series};
use yolo_sched::agent::{Breaker, GuardPolicy, GuardSite};
use yolo_sched::nvml::memory::{DeviceId, JobDevice};

fn main() {
    divan::main();
}

/// A private copy of the fake library and a fixture (an A100 whose GPU 0 holds one process).
fn fake_node() -> Option<(tempfile::TempDir, PathBuf)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = root.join("target/debug/libnvidia_ml.so");
    if !lib.exists() {
        eprintln!(
            "agent_read: no {} (run `cargo build -p fake-nvml`)",
            lib.display()
        );
        return None;
    }
    let dir = tempfile::tempdir().ok()?;
    let text =
        std::fs::read_to_string(root.join("tests/fixtures/nvml/a100-sxm4-40gb.json")).ok()?;
    let mut fixture: serde_json::Value = serde_json::from_str(&text).ok()?;
    fixture["gpus"][0]["processes"] =
        serde_json::json!([{"pid": 1, "memory_curve": [[0, 1000], [3600, 30000]]}]);
    std::fs::write(dir.path().join("fake-nvml.json"), fixture.to_string()).ok()?;
    let copy = dir.path().join("libnvidia-ml.so.1");
    std::fs::copy(&lib, &copy).ok()?;
    Some((dir, copy))
}

#[divan::bench]
fn nvml_memory_read_whole_gpu(bencher: divan::Bencher) {
    let Some((_dir, lib)) = fake_node() else {
        return;
    };
    let nvml = yolo_sched::nvml::open(&lib.into_os_string()).unwrap();
    let device = JobDevice::open(&nvml, &DeviceId::Index(0)).unwrap();
    bencher.bench_local(|| device.read(None).unwrap());
}

#[divan::bench]
fn nvml_memory_read_with_job_processes(bencher: divan::Bencher) {
    let Some((_dir, lib)) = fake_node() else {
        return;
    };
    let nvml = yolo_sched::nvml::open(&lib.into_os_string()).unwrap();
    let device = JobDevice::open(&nvml, &DeviceId::Index(0)).unwrap();
    let is_job = |pid: u32| pid == 1;
    bencher.bench_local(|| device.read(Some(&is_job)).unwrap());
}

#[divan::bench]
fn guard_decision_on_a_full_window(bencher: divan::Bencher) {
    let mut policy = GuardPolicy::resolve(&GuardSite::default(), &Default::default()).unwrap();
    // No warm-up: every call fits the whole 180 s window (60 samples) and its halves.
    policy.warmup_epochs = 0;
    let mut series = Series::new(policy.series_max_samples);
    // An hour at the default 3 s interval, growing at 400 MB/min (under the
    // limit, so the window, both halves and no stop are computed every call).
    for i in 0..1200u32 {
        series.push(Sample {
            t: f64::from(i) * 3.0,
            used: 2_000_000_000 + u64::from(i) * 20_000_000,
            device_used: 2_000_000_000 + u64::from(i) * 20_000_000,
            total: 80_000_000_000,
            own: true,
        });
    }
    let mut breaker = Breaker::new(policy, None, 0.0);
    bencher.bench_local(|| breaker.observe(&series, Some(5), None));
}

/// On a shared GPU, each sample also walks `/proc` for the trainer's process tree.
#[divan::bench]
fn proc_tree_walk(bencher: divan::Bencher) {
    let me = std::process::id() as i32;
    bencher.bench_local(|| yolo_sched::agent::procs::tree(me));
}
