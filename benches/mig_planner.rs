//! Planner timings: layout checks, catalog enumeration, and `auto` for an
//! 8-GPU node against 10,000 pending jobs (`cargo bench --bench mig_planner`).

use divan::{black_box, Bencher};
use yolo_sched::mig::{builtin, check, plan_auto, Demand, GpuLayout, LayoutCatalog};

fn main() {
    divan::main();
}

/// 10,000 pending jobs spread over `kinds` with weights 50%, 25%, 12.5%, …,
/// with time limits from one to two hours.
fn demand_of(kinds: &[&str]) -> Demand {
    let mut d = Demand::new();
    for i in 0..10_000u32 {
        let k = (i.trailing_ones() as usize).min(kinds.len() - 1);
        d.add(kinds[k], 1, 3600 + u64::from(i % 7) * 600);
    }
    d
}

#[divan::bench]
fn check_balanced_h200(b: Bencher) {
    let g = builtin::h200();
    let GpuLayout::Profiles(c) = "3g.71gb,2g.35gb,1g.18gb*2".parse::<GpuLayout>().unwrap() else {
        unreachable!()
    };
    b.bench(|| check(black_box(&c), black_box(&g)).unwrap());
}

#[divan::bench]
fn catalog_h200(b: Bencher) {
    let g = builtin::h200();
    b.bench(|| LayoutCatalog::build(black_box(&g)));
}

/// The benchmark: 8 × H200, 10,000 pending jobs, including building
/// the queue, the catalog, the queue simulations and the exact programme.
/// `kinds` demanded types: 3 (1g, 2g, 3g), 5, and all 8 (every profile and
/// whole GPUs).
#[divan::bench(args = [3, 5, 8])]
fn auto_8x_h200_10k_jobs(b: Bencher, kinds: usize) {
    let all = [
        "1g.18gb",
        "2g.35gb",
        "3g.71gb",
        "4g.71gb",
        "7g.141gb",
        "h200",
        "1g.35gb",
        "1g.18gb+me",
    ];
    let g = builtin::h200();
    b.bench(|| {
        let demand = demand_of(black_box(&all[..kinds]));
        let catalog = LayoutCatalog::build(&g);
        let gpus = vec![&catalog; 8];
        plan_auto(&gpus, &demand).unwrap()
    });
}
