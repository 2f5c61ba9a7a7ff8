//! Parse + plan + render of a 1,000-variant sweep, in process.

use std::path::{Path, PathBuf};

use yolo_sched::plan::{self, ControllerLimits, Offer, Policy};
use yolo_sched::render::scripts::{render_all, RenderInput};
use yolo_sched::render::Templates;

fn main() {
    divan::main();
}

fn sweep_spec() -> String {
    let lr: Vec<String> = (1..=10)
        .map(|i| format!("{:.3}", f64::from(i) / 1000.0))
        .collect();
    let mom: Vec<String> = (0..10)
        .map(|i| format!("{:.2}", 0.8 + f64::from(i) / 100.0))
        .collect();
    let batch: Vec<String> = (1..=10).map(|i| (i * 4).to_string()).collect();
    format!(
        "version = 1\n[run]\nname = \"bench\"\n[train]\nmodel = \"yolov8s.pt\"\ndata = \"data.yaml\"\nepochs = 100\n\
         [stages.val]\n[sweep]\nlr0 = [{}]\nmomentum = [{}]\nbatch = [{}]\nmax_parallel = 8\n",
        lr.join(", "),
        mom.join(", "),
        batch.join(", ")
    )
}

fn offer() -> Offer {
    Offer {
        gpu_types: [
            ("1g.5gb", 28u64),
            ("2g.10gb", 8),
            ("3g.20gb", 4),
            ("a100", 2),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect(),
        ..Offer::default()
    }
}

#[divan::bench]
fn parse_plan_render_1000_variants(bencher: divan::Bencher) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("data.yaml"), "names: [a]\n").unwrap();
    let text = sweep_spec();
    let file = dir.path().join("spec.toml").display().to_string();
    let templates = Templates::new(None).unwrap();
    let workdir = PathBuf::from("/scratch/runs/bench");
    bencher.bench_local(|| {
        let spec = yolo_sched::spec::parse(&text, &file).unwrap();
        assert_eq!(spec.variant_count(), 1000);
        let limits = ControllerLimits {
            max_array_size: Some(1001),
        };
        let plan = plan::plan(&spec, &workdir, &offer(), &Policy::default(), &limits).unwrap();
        let scripts = render_all(
            &templates,
            &RenderInput {
                spec: &spec,
                plan: &plan,
                run_id: "bench-1",
                yolo_sched: Path::new("/usr/bin/yolo-sched"),
                yolo: "yolo",
                base_dir: dir.path(),
            },
        )
        .unwrap();
        divan::black_box(scripts)
    });
}
