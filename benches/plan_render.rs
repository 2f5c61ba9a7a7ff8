//! Parse + plan + render of a 1,000-variant sweep, in process.

use std::path::{Path, PathBuf};

use yolo_sched::plan::{self, Policy};
use yolo_sched::render::scripts::{render_all, RenderInput};
use yolo_sched::render::Templates;
use yolo_sched::slurm::cluster::Cluster;

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

fn cluster(nodes: usize) -> Cluster {
    let mut c = Cluster::uniform(
        "gpu",
        nodes,
        128,
        1_000_000,
        "gpu:1g.5gb:28,gpu:2g.10gb:8,gpu:3g.20gb:4,gpu:a100:2",
        &["gpu"],
    );
    c.max_array_size = Some(1001);
    c
}

#[divan::bench]
fn parse_plan_render_1000_variants(bencher: divan::Bencher) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("data.yaml"), "names: [a]\n").unwrap();
    let text = sweep_spec();
    let file = dir.path().join("spec.toml").display().to_string();
    let templates = Templates::new(None).unwrap();
    let workdir = PathBuf::from("/scratch/runs/bench");
    let cluster = cluster(8);
    bencher.bench_local(|| {
        let spec = yolo_sched::spec::parse(&text, &file).unwrap();
        assert_eq!(spec.variant_count(), 1000);
        let plan = plan::plan(&spec, &workdir, &cluster, &Policy::default()).unwrap();
        let scripts = render_all(
            &templates,
            &RenderInput {
                spec: &spec,
                plan: &plan,
                run_id: "bench-1",
                yolo_sched: Path::new("/usr/bin/yolo-sched"),
                yolo: "yolo",
                base_dir: dir.path(),
                font: None,
                models: &Default::default(),
                python: None,
            },
        )
        .unwrap();
        divan::black_box(scripts)
    });
}

/// Shaping and fit check of one GPU stage against a 1,000-node partition
/// (the bound: well under a millisecond per stage).
#[divan::bench]
fn shape_one_stage_1000_nodes(bencher: divan::Bencher) {
    use yolo_sched::plan::resources::{self, GpuAsk, Stage, Wants};
    let cluster = cluster(1000);
    let gpu = GpuAsk::parse("gpu:1g.5gb:1").unwrap();
    bencher.bench_local(|| {
        let stage = Stage {
            name: "train",
            table: "[resources]",
            partition: Some("gpu"),
            gpu: Some(&gpu),
            wants: Wants::default(),
            time_secs: 8 * 3600,
            time_text: "08:00:00",
        };
        divan::black_box(resources::shape(&cluster, &stage).unwrap())
    });
}

/// Parsing the controller's answer for a 1,000-node cluster (what submit
/// reads once per submission).
#[divan::bench]
fn parse_cluster_1000_nodes(bencher: divan::Bencher) {
    let recorded = include_str!("../tests/data/scontrol-shape-22.05.txt");
    let node_line = recorded
        .lines()
        .find(|l| l.starts_with("NodeName=node1 "))
        .unwrap();
    let mut text: String = recorded
        .lines()
        .filter(|l| !l.starts_with("NodeName="))
        .map(|l| format!("{l}\n"))
        .collect();
    for i in 0..1000 {
        text.push_str(&node_line.replace("NodeName=node1 ", &format!("NodeName=gpu{i} ")));
        text.push('\n');
    }
    bencher.bench_local(|| {
        let c = yolo_sched::slurm::cluster::parse(divan::black_box(&text)).unwrap();
        assert_eq!(c.nodes.len(), 1000);
        divan::black_box(c)
    });
}
