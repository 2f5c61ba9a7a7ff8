//! Every MIG layout the planner can emit for a GPU model is creatable on the
//! fake driver: the geometry is read through NVML (as node-setup reads it),
//! every layout of the planner's catalog for it is created instance by
//! instance at the planned placements, and each must succeed. The built-in
//! tables the planner uses when MIG is off must give the same catalog.

use crate::fake_nvml::FakeNode;
use yolo_sched::mig::{builtin, LayoutCatalog};
use yolo_sched::nvml::{self, apply, topology::Placement, topology::Topology};

#[track_caller]
fn mig_on(node: &FakeNode, nvml: &nvml_wrapper::Nvml) {
    let outcome = apply::set_mig_mode(nvml, 0, true).expect("enabling MIG");
    if outcome.is_pending() {
        let out = node.ctl(&["reset", "--gpu", "0"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

fn check_model(fixture: &str) -> usize {
    let node = FakeNode::new(fixture);
    let nvml = nvml::open(&node.lib_os()).expect("loading the fake NVML");
    mig_on(&node, &nvml);
    let topology = Topology::read(&nvml).unwrap();
    let gpu = &topology.gpus[0];
    assert_eq!(
        gpu.mig_mode.as_ref().map(|m| m.current),
        Some(true),
        "{fixture}: MIG is on"
    );
    let geometry = yolo_sched::nodesetup::plan::geometry(gpu).unwrap();
    let catalog = LayoutCatalog::build(&geometry);
    assert!(!catalog.is_empty(), "{fixture}: no layouts");

    // The built-in table for this model plans the same layouts as NVML's own data.
    let builtin = builtin::lookup(&gpu.name)
        .unwrap_or_else(|| panic!("no built-in geometry for {}", gpu.name));
    let from_builtin = LayoutCatalog::build(&builtin);
    assert_eq!(
        from_builtin.len(),
        catalog.len(),
        "{fixture}: built-in and NVML catalogs differ in size"
    );
    for plan in catalog.layouts() {
        assert!(
            from_builtin.contains(&plan.counts()),
            "{fixture}: {} only from NVML data",
            plan.counts()
        );
    }

    for plan in catalog.layouts() {
        apply::destroy_all_instances(&nvml, 0).unwrap();
        for inst in &plan.instances {
            let placement = Placement {
                start: u32::from(inst.start),
                size: u32::from(inst.size),
            };
            if let Err(e) = apply::create_instance(&nvml, 0, inst.profile_id, placement) {
                panic!(
                    "{fixture}: layout {} is not creatable: {} at {}: {e}",
                    plan.counts(),
                    inst.profile,
                    inst.start
                );
            }
        }
        let created = Topology::read(&nvml).unwrap().gpus[0].gpu_instances.len();
        assert_eq!(
            created,
            plan.instances.len(),
            "{fixture}: {}",
            plan.counts()
        );
    }
    catalog.len()
}

#[test]
fn every_a100_40gb_layout_is_creatable() {
    assert!(check_model("a100-sxm4-40gb.json") > 10);
}

#[test]
fn every_a100_80gb_layout_is_creatable() {
    assert!(check_model("a100-sxm4-80gb.json") > 10);
}

#[test]
fn every_h100_layout_is_creatable() {
    assert!(check_model("h100-sxm5-80gb.json") > 10);
}

#[test]
fn every_h200_layout_is_creatable() {
    assert!(check_model("h200.json") > 10);
}
