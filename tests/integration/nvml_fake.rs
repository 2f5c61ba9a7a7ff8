//! yolo-sched's NVML layer (topology, raw calls, MIG apply primitives) against the
//! fake libnvidia-ml.so, loaded through nvml-wrapper exactly as on a real node.

use std::collections::BTreeMap;

use crate::fake_nvml::{shipped_fixture, FakeNode};
use nvml_wrapper::Nvml;
use serde_json::{json, Value};
use yolo_sched::nvml::apply::{self, MigErrorKind, MigModeOutcome};
use yolo_sched::nvml::topology::{Placement, Topology};

#[track_caller]
fn open(node: &FakeNode) -> Nvml {
    assert!(
        std::env::var_os("FAKE_NVML_FIXTURE").is_none(),
        "unset FAKE_NVML_FIXTURE: these tests give each fake library its own fixture"
    );
    yolo_sched::nvml::open(&node.lib_os()).expect("loading the fake NVML")
}

fn topology(node: &FakeNode) -> Topology {
    Topology::read(&open(node)).expect("reading the topology")
}

fn at(start: u32, size: u32) -> Placement {
    Placement { start, size }
}

/// The placement table of `nvidia-smi mig -lgipp` on A100/H100/H200 (mig-and-gres.md §2.8).
fn reference_placements() -> BTreeMap<u32, Vec<Placement>> {
    let ones: Vec<Placement> = (0..7).map(|s| at(s, 1)).collect();
    BTreeMap::from([
        (19, ones.clone()),
        (20, ones),
        (15, vec![at(0, 2), at(2, 2), at(4, 2), at(6, 2)]),
        (14, vec![at(0, 2), at(2, 2), at(4, 2)]),
        (9, vec![at(0, 4), at(4, 4)]),
        (5, vec![at(0, 4)]),
        (0, vec![at(0, 8)]),
    ])
}

fn shipped_fixture_names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(shipped_fixture(""))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".json") && !n.contains(".state."))
        .collect();
    names.sort();
    names
}

#[test]
fn topology_of_every_fixture_matches_the_fixture() {
    let names = shipped_fixture_names();
    assert!(names.len() >= 8, "{names:?}");
    for name in names {
        let fixture: Value =
            serde_json::from_str(&std::fs::read_to_string(shipped_fixture(&name)).unwrap())
                .unwrap();
        let node = FakeNode::new(&name);
        let topo = topology(&node);
        let gpus = fixture["gpus"].as_array().unwrap();
        assert_eq!(topo.gpus.len(), gpus.len(), "{name}");
        assert_eq!(
            topo.driver_version.as_deref(),
            fixture["driver_version"].as_str(),
            "{name}"
        );
        for (gpu, spec) in topo.gpus.iter().zip(gpus) {
            let model = &fixture["models"][spec["model"].as_str().unwrap()];
            let at = format!("{name} GPU {}", gpu.index);
            assert_eq!(gpu.name, model["name"].as_str().unwrap(), "{at}");
            assert_eq!(gpu.uuid, spec["uuid"].as_str().unwrap(), "{at}");
            assert_eq!(
                u64::from(gpu.minor),
                spec["minor"].as_u64().unwrap(),
                "{at}"
            );
            assert_eq!(
                gpu.memory_mib,
                model["memory_mib"].as_u64().unwrap(),
                "{at}"
            );
            assert_eq!(
                gpu.pci_bus_id.as_deref(),
                spec["pci_bus_id"].as_str(),
                "{at}"
            );
            assert!(!gpu.cpu_affinity.is_empty(), "{at}");
            let mig = &model["mig"];
            assert_eq!(gpu.mig_capable, !mig.is_null(), "{at}");
            if mig.is_null() {
                assert!(
                    gpu.mig_mode.is_none() && gpu.profiles.is_empty(),
                    "{at}: whole GPU"
                );
                continue;
            }
            let enabled = spec["mig_enabled"].as_bool().unwrap_or(false);
            assert_eq!(
                gpu.mig_mode.map(|m| (m.current, m.pending)),
                Some((enabled, enabled)),
                "{at}"
            );
            let mut want: Vec<(u32, String, u64, u32, u32)> = mig["profiles"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| {
                    (
                        p["id"].as_u64().unwrap() as u32,
                        p["name"].as_str().unwrap().to_string(),
                        p["memory_mib"].as_u64().unwrap(),
                        p["slice_count"].as_u64().unwrap() as u32,
                        p["multiprocessor_count"].as_u64().unwrap() as u32,
                    )
                })
                .collect();
            let mut got: Vec<(u32, String, u64, u32, u32)> = gpu
                .profiles
                .iter()
                .map(|p| {
                    (
                        p.id,
                        p.name.clone(),
                        p.memory_mib,
                        p.slices,
                        p.multiprocessor_count,
                    )
                })
                .collect();
            want.sort();
            got.sort();
            assert_eq!(got, want, "{at}");
            let instances = spec["gpu_instances"].as_array().map_or(0, Vec::len);
            assert_eq!(gpu.gpu_instances.len(), instances, "{at}");
        }
    }
}

#[test]
fn h200_profiles_have_the_reference_names_and_memory() {
    let topo = topology(&FakeNode::new("h200.json"));
    let gpu = &topo.gpus[0];
    let got: Vec<(&str, u64, u32)> = gpu
        .profiles
        .iter()
        .map(|p| (p.name.as_str(), p.memory_mib, p.instance_count))
        .collect();
    assert_eq!(
        got,
        vec![
            ("1g.18gb", 16384, 7),
            ("1g.18gb+me", 16384, 1),
            ("1g.35gb", 33024, 4),
            ("2g.35gb", 33024, 3),
            ("3g.71gb", 71168, 2),
            ("4g.71gb", 71168, 1),
            ("7g.141gb", 143104, 1),
        ]
    );
    // MIG mode is off: NVML does not give placements yet.
    assert!(gpu.profiles.iter().all(|p| p.placements.is_none()));
}

#[test]
fn placements_match_the_reference_tables_and_the_wrapper_bug_is_avoided() {
    for name in ["h100-sxm5-80gb.json", "mixed-2xh200-1xv100.json"] {
        let node = FakeNode::new(name);
        let nvml = open(&node);
        let topo = Topology::read(&nvml).unwrap();
        let gpu = &topo.gpus[0];
        assert!(gpu.mig_enabled(), "{name}");
        let got: BTreeMap<u32, Vec<Placement>> = gpu
            .profiles
            .iter()
            .map(|p| (p.id, p.placements.clone().expect("MIG is on")))
            .collect();
        assert_eq!(got, reference_placements(), "{name}");
        // nvml-wrapper 0.13's own call drops every placement (no set_len); ours does not.
        let wrapper = nvml
            .device_by_index(0)
            .unwrap()
            .possible_placements(9)
            .unwrap();
        assert!(
            wrapper.is_empty(),
            "nvml-wrapper's possible_placements works now ({} entries): raw.rs could use it",
            wrapper.len()
        );
    }
}

#[test]
fn create_show_and_destroy_with_overlap_refused() {
    let node = FakeNode::new("h100-sxm5-80gb.json");
    let nvml = open(&node);
    let made = apply::create_instance(&nvml, 0, 9, at(0, 4)).unwrap();
    assert_eq!((made.gpu_instance_id, made.compute_instance_id), (1, 0));
    assert!(
        made.uuid.as_deref().is_some_and(|u| u.starts_with("MIG-")),
        "{made:?}"
    );

    let err = apply::create_instance(&nvml, 0, 14, at(2, 2)).unwrap_err();
    assert_eq!(err.kind, MigErrorKind::InsufficientResources, "{err}");
    assert!(
        err.to_string()
            .starts_with("GPU 0: creating a GPU instance of profile 14"),
        "{err}"
    );
    let err = apply::create_instance(&nvml, 0, 14, at(1, 2)).unwrap_err();
    assert_eq!(err.kind, MigErrorKind::Invalid, "not a 2g placement: {err}");

    apply::create_instance(&nvml, 0, 14, at(4, 2)).unwrap();
    let topo = Topology::read(&nvml).unwrap();
    let gpu = &topo.gpus[0];
    let shown: Vec<(u32, &str, Placement, usize)> = gpu
        .gpu_instances
        .iter()
        .map(|g| {
            (
                g.id,
                g.profile_name.as_str(),
                g.placement,
                g.compute_instances.len(),
            )
        })
        .collect();
    assert_eq!(
        shown,
        vec![(1, "3g.40gb", at(0, 4), 1), (5, "2g.20gb", at(4, 2), 1)]
    );
    let ci = &gpu.gpu_instances[0].compute_instances[0];
    assert_eq!(
        (ci.profile_name.as_str(), ci.slices, ci.placement),
        ("3g.40gb", 3, at(0, 3))
    );
    assert_eq!(ci.uuid, made.uuid);
    assert_eq!(
        ci.device_name.as_deref(),
        Some("NVIDIA H100 80GB HBM3 MIG 3g.40gb")
    );

    let gone = apply::destroy_all_instances(&nvml, 0).unwrap();
    assert_eq!((gone.gpu_instances, gone.compute_instances), (2, 2));
    assert!(Topology::read(&nvml).unwrap().gpus[0]
        .gpu_instances
        .is_empty());
    let again = apply::destroy_all_instances(&nvml, 0).unwrap();
    assert_eq!((again.gpu_instances, again.compute_instances), (0, 0));
}

#[test]
fn four_g_plus_three_g_is_refused_like_real_hardware() {
    let node = FakeNode::new("h100-sxm5-80gb.json");
    let nvml = open(&node);
    apply::create_instance(&nvml, 0, 5, at(0, 4)).unwrap();
    let err = apply::create_instance(&nvml, 0, 9, at(4, 4)).unwrap_err();
    assert_eq!(err.kind, MigErrorKind::InsufficientResources);
    assert!(err.to_string().contains("4g + 3g"), "{err}");
    // Nothing half-made is left behind.
    assert_eq!(
        Topology::read(&nvml).unwrap().gpus[0].gpu_instances.len(),
        1
    );
}

#[test]
fn balanced_layout_on_an_8_gpu_node() {
    let node = FakeNode::new("8xh200.json");
    let nvml = open(&node);
    for gpu in 0..8 {
        assert_eq!(
            apply::set_mig_mode(&nvml, gpu, true).unwrap(),
            MigModeOutcome::Activated
        );
        assert_eq!(
            apply::set_mig_mode(&nvml, gpu, true).unwrap(),
            MigModeOutcome::AlreadySet
        );
    }
    for (profile, placement) in [
        (9, at(4, 4)),
        (14, at(0, 2)),
        (19, at(2, 1)),
        (19, at(3, 1)),
    ] {
        apply::create_instance(&nvml, 5, profile, placement).unwrap();
    }
    let topo = Topology::read(&nvml).unwrap();
    let gpu = topo.gpu(5).unwrap();
    assert_eq!(gpu.minor, 7, "minor numbers are not indices on this node");
    let devices: Vec<(u32, String)> = gpu
        .gpu_instances
        .iter()
        .map(|g| (g.id, g.compute_instances[0].device_name.clone().unwrap()))
        .collect();
    assert_eq!(
        devices,
        vec![
            (2, "NVIDIA H200 MIG 3g.71gb".to_string()),
            (3, "NVIDIA H200 MIG 2g.35gb".to_string()),
            (9, "NVIDIA H200 MIG 1g.18gb".to_string()),
            (10, "NVIDIA H200 MIG 1g.18gb".to_string()),
        ]
    );
    let uuids: std::collections::BTreeSet<&str> = gpu
        .gpu_instances
        .iter()
        .filter_map(|g| g.compute_instances[0].uuid.as_deref())
        .collect();
    assert_eq!(uuids.len(), 4, "one distinct MIG UUID per device");
    assert!(topo
        .gpus
        .iter()
        .filter(|g| g.index != 5)
        .all(|g| g.gpu_instances.is_empty()));
    // The GPU is full: every further profile is refused.
    for profile in [19, 14, 9] {
        let free = gpu
            .profile_by_id(profile)
            .unwrap()
            .placements
            .clone()
            .unwrap();
        assert!(free
            .iter()
            .all(|&p| apply::create_instance(&nvml, 5, profile, p)
                .unwrap_err()
                .kind
                == MigErrorKind::InsufficientResources));
    }
}

#[test]
fn a_mode_change_that_needs_a_reset_stays_pending_until_one() {
    let node = FakeNode::with_fixture("a100-sxm4-40gb.json", |f| {
        f["gpus"][0]["mode_change_requires_reset"] = json!(true);
    });
    {
        let nvml = open(&node);
        let outcome = apply::set_mig_mode(&nvml, 0, true).unwrap();
        assert_eq!(outcome, MigModeOutcome::ResetRequired);
        assert!(outcome.is_pending());
        let gpu = &Topology::read(&nvml).unwrap().gpus[0];
        let mode = gpu.mig_mode.unwrap();
        assert_eq!((mode.current, mode.pending), (false, true));
        let err = apply::create_instance(&nvml, 0, 19, at(0, 1)).unwrap_err();
        assert_eq!(err.kind, MigErrorKind::NotSupported, "{err}");
    }
    let reset = node.ctl(&["reset", "--gpu", "0"]);
    assert!(
        reset.status.success(),
        "{}",
        String::from_utf8_lossy(&reset.stderr)
    );
    assert!(node
        .sysroot
        .join("proc/driver/nvidia-caps/mig-minors")
        .is_file());
    let nvml = open(&node);
    assert_eq!(
        apply::set_mig_mode(&nvml, 0, true).unwrap(),
        MigModeOutcome::AlreadySet
    );
    apply::create_instance(&nvml, 0, 19, at(0, 1)).unwrap();
    // Back off: instances first, then the mode (pending again, since a reset is needed).
    let err = apply::set_mig_mode(&nvml, 0, false).unwrap_err();
    assert_eq!(err.kind, MigErrorKind::InUse, "{err}");
    apply::destroy_all_instances(&nvml, 0).unwrap();
    assert_eq!(
        apply::set_mig_mode(&nvml, 0, false).unwrap(),
        MigModeOutcome::ResetRequired
    );
}

#[test]
fn a_busy_gpu_keeps_its_instances_and_its_mode() {
    let node = FakeNode::new("h200-partitioned-busy.json");
    let nvml = open(&node);
    let gpu = &Topology::read(&nvml).unwrap().gpus[0];
    assert_eq!(gpu.processes.len(), 1);
    let p = &gpu.processes[0];
    assert_eq!(
        (
            p.pid,
            p.used_memory_mib,
            p.gpu_instance_id,
            p.compute_instance_id
        ),
        (4242, Some(30000), Some(2), Some(0))
    );

    let err = apply::destroy_all_instances(&nvml, 0).unwrap_err();
    assert_eq!(err.kind, MigErrorKind::InUse, "{err}");
    assert!(
        err.to_string()
            .contains("compute instance 0 of GPU instance 2"),
        "{err}"
    );
    // What could go went; the busy instance stays, and so does MIG mode.
    let left: Vec<u32> = Topology::read(&nvml).unwrap().gpus[0]
        .gpu_instances
        .iter()
        .map(|g| g.id)
        .collect();
    assert_eq!(left, vec![2]);
    assert_eq!(
        apply::set_mig_mode(&nvml, 0, false).unwrap_err().kind,
        MigErrorKind::InUse
    );

    // A process on a whole GPU lets MIG mode go pending but not take effect.
    let node = FakeNode::with_fixture("a100-sxm4-80gb.json", |f| {
        f["gpus"][0]["processes"] = json!([{"pid": 99, "used_memory_mib": 512}]);
    });
    let nvml = open(&node);
    assert_eq!(
        apply::set_mig_mode(&nvml, 0, true).unwrap(),
        MigModeOutcome::Busy
    );
    let mode = Topology::read(&nvml).unwrap().gpus[0].mig_mode.unwrap();
    assert_eq!((mode.current, mode.pending), (false, true));
    let reset = node.ctl(&["reset", "--gpu", "0"]);
    assert!(
        !reset.status.success(),
        "a reset is refused while process 99 runs"
    );
    assert!(String::from_utf8_lossy(&reset.stderr).contains("99"));
}

#[test]
fn non_root_callers_get_no_permission() {
    let node = FakeNode::with_fixture("h100-sxm5-80gb.json", |f| {
        f["simulate_non_root"] = json!(true);
    });
    let nvml = open(&node);
    let topo = Topology::read(&nvml).expect("reading needs no root");
    assert!(topo.gpus[0].mig_enabled());
    let err = apply::create_instance(&nvml, 0, 19, at(0, 1)).unwrap_err();
    assert_eq!(err.kind, MigErrorKind::NoPermission);
    assert!(err.to_string().contains("need root"), "{err}");
    assert_eq!(
        apply::set_mig_mode(&nvml, 0, false).unwrap_err().kind,
        MigErrorKind::NoPermission
    );
}

#[test]
fn state_persists_across_separate_library_instances() {
    let node = FakeNode::new("mixed-2xh200-1xv100.json");
    let first = open(&node);
    let second_path = node.second_library("second");
    let second = yolo_sched::nvml::open(&second_path.clone().into_os_string()).unwrap();
    apply::create_instance(&first, 0, 0, at(0, 8)).unwrap();
    // The second instance sees the change without re-initialising.
    let seen = Topology::read(&second).unwrap();
    assert_eq!(seen.gpus[0].gpu_instances.len(), 1);
    assert_eq!(seen.gpus[0].gpu_instances[0].profile_name, "7g.141gb");
    // And the other way round, after the first one is gone.
    drop(first);
    apply::destroy_all_instances(&second, 0).unwrap();
    assert_eq!(
        apply::set_mig_mode(&second, 1, true).unwrap(),
        MigModeOutcome::Activated
    );
    drop(second);
    let third = open(&node);
    let topo = Topology::read(&third).unwrap();
    assert!(topo.gpus[0].gpu_instances.is_empty());
    assert!(topo.gpus[1].mig_enabled());
    assert!(!topo.gpus[2].mig_capable, "the V100 is a whole GPU");
    let state = node.state();
    assert_eq!(state["gpus"][1]["mig_current"], json!(true));
}

#[test]
fn a_library_without_a_fixture_reports_no_driver() {
    let node = FakeNode::new("v100.json");
    std::fs::remove_file(&node.fixture).unwrap();
    let err = yolo_sched::nvml::open(&node.lib_os())
        .unwrap_err()
        .to_string();
    assert!(err.contains("driver is not loaded"), "{err}");
}

#[test]
fn topology_round_trips_through_json() {
    let node = FakeNode::new("h200-partitioned-busy.json");
    let topo = topology(&node);
    let text = serde_json::to_string_pretty(&topo).unwrap();
    let back: Topology = serde_json::from_str(&text).unwrap();
    assert_eq!(back, topo);
    let value: Value = serde_json::from_str(&text).unwrap();
    let gi = &value["gpus"][0]["gpu_instances"][0];
    assert_eq!(gi["placement"], json!({"start": 4, "size": 4}));
    assert_eq!(gi["compute_instances"][0]["profile_name"], json!("3g.71gb"));
    assert_eq!(
        value["gpus"][0]["mig_mode"],
        json!({"current": true, "pending": true})
    );
}

#[test]
fn concurrent_library_instances_never_lose_an_instance() {
    let node = FakeNode::new("h100-sxm5-80gb.json");
    let libs: Vec<_> = (0..8)
        .map(|i| node.second_library(&format!("t{i}")))
        .collect();
    let results: Vec<Result<u32, MigErrorKind>> = std::thread::scope(|scope| {
        let handles: Vec<_> = libs
            .iter()
            .enumerate()
            .map(|(i, lib)| {
                scope.spawn(move || {
                    let nvml = yolo_sched::nvml::open(&lib.clone().into_os_string()).unwrap();
                    apply::create_instance(&nvml, 0, 19, at(i as u32 % 7, 1))
                        .map(|c| c.gpu_instance_id)
                        .map_err(|e| e.kind)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let made: Vec<u32> = results.iter().filter_map(|r| r.ok()).collect();
    let refused: Vec<MigErrorKind> = results.iter().filter_map(|r| r.err()).collect();
    assert_eq!(made.len(), 7, "{results:?}");
    assert_eq!(
        refused,
        vec![MigErrorKind::InsufficientResources],
        "two threads wanted slice 0"
    );
    let ids: Vec<u32> = topology(&node).gpus[0]
        .gpu_instances
        .iter()
        .map(|g| g.id)
        .collect();
    assert_eq!(
        ids,
        vec![7, 8, 9, 10, 11, 12, 13],
        "every success is in the saved state"
    );
}

#[test]
fn a_yolo_sched_subprocess_finds_the_node_through_the_environment() {
    let node = FakeNode::new("h200-partitioned-busy.json");
    let mut cmd = crate::common::yolo();
    cmd.args(["doctor", "--json"]).env("NO_COLOR", "1");
    node.apply_env(&mut cmd);
    let out = cmd.output().unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "doctor --json: {e}: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(report["nvml"]["loaded"], json!(true), "{report}");
    assert_eq!(report["nvml"]["device_count"], json!(1));
    // Loading the driver laid out its files: the fixed minors table and one
    // capability node per existing GPU instance (2, 3, 9, 10) and compute instance.
    let minors =
        std::fs::read_to_string(node.sysroot.join("proc/driver/nvidia-caps/mig-minors")).unwrap();
    assert!(minors.contains("\ngpu0/gi2/access 21\ngpu0/gi2/ci0/access 22\n"));
    let mut caps: Vec<u32> = std::fs::read_dir(node.sysroot.join("dev/nvidia-caps"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .map(|n| n.trim_start_matches("nvidia-cap").parse().unwrap())
        .collect();
    caps.sort();
    assert_eq!(caps, vec![1, 2, 21, 22, 30, 31, 84, 85, 93, 94]);
    assert!(node.sysroot.join("dev/nvidia0").exists());
}
