//! Planner timings: layout checks, catalog enumeration, and `auto` for an
//! 8-GPU node against 10,000 pending jobs (`cargo bench --bench mig_planner`).

use divan::{black_box, Bencher};
use yolo_sched::mig::{builtin, check, plan_auto, Demand, GpuLayout, LayoutCatalog};

fn main() {
    divan::main();
}

/// 10,000 job requests spread over `profiles` with weights 50%, 25%, 12.5%, …
fn job_requests(profiles: &[&str]) -> Vec<String> {
    (0..10_000u32)
        .map(|i| {
            let k = (i.trailing_ones() as usize).min(profiles.len() - 1);
            profiles[k].to_string()
        })
        .collect()
}

fn demand_of(requests: &[String]) -> Demand {
    let mut d = Demand::new();
    for r in requests {
        d.add(r, 1);
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

/// The benchmark: 8 × H200, 10,000 pending jobs over three profiles,
/// including counting the requests and enumerating the catalog.
#[divan::bench]
fn auto_8x_h200_10k_jobs_3_profiles(b: Bencher) {
    let requests = job_requests(&["1g.18gb", "2g.35gb", "3g.71gb"]);
    let g = builtin::h200();
    b.bench(|| {
        let demand = demand_of(black_box(&requests));
        let catalog = LayoutCatalog::build(&g);
        let gpus = vec![&catalog; 8];
        plan_auto(&gpus, &demand).unwrap()
    });
}

/// Worst case: demand for every profile of the model (local search).
#[divan::bench]
fn auto_8x_h200_10k_jobs_all_profiles(b: Bencher) {
    let names: Vec<String> = builtin::h200()
        .profiles()
        .iter()
        .map(|p| p.name.clone())
        .collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let requests = job_requests(&refs);
    let g = builtin::h200();
    b.bench(|| {
        let demand = demand_of(black_box(&requests));
        let catalog = LayoutCatalog::build(&g);
        let gpus = vec![&catalog; 8];
        plan_auto(&gpus, &demand).unwrap()
    });
}
