//! State-machine tests on the project's fixture files, without going through C.

use std::path::{Path, PathBuf};

use crate::driver::Driver;
use crate::fixture::Fixture;
use crate::model::*;
use crate::sysroot;

fn fixture_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/nvml")
        .join(name)
}

fn fixture(name: &str) -> Fixture {
    Fixture::load(&fixture_path(name)).unwrap()
}

fn machine(name: &str) -> Machine {
    Machine::new(fixture(name), true).unwrap()
}

/// An H200 with MIG mode switched on and no instances.
fn h200_on() -> Machine {
    let mut m = machine("h200.json");
    assert_eq!(m.set_mig_mode(0, 1), Ok(SUCCESS));
    m
}

fn gi_ids(m: &Machine, gpu: usize) -> Vec<u32> {
    m.gpu_state(gpu)
        .gpu_instances
        .iter()
        .map(|g| g.id)
        .collect()
}

/// Create a GPU instance with its full compute instance.
fn create_with_ci(m: &mut Machine, profile: u32, start: u32) -> Result<(u64, u64), Code> {
    let gi = m.create_gi(0, profile, Some(start))?;
    let (_, g) = m.find_gi(gi)?;
    let gp = m.gi_profile_by_id(0, g.profile_id)?.clone();
    let full = m
        .ci_profiles(0, &gp)
        .into_iter()
        .find(|c| c.slice_count == gp.slice_count)
        .unwrap();
    let ci = m.create_ci(gi, full.id, None)?;
    Ok((gi, ci))
}

#[test]
fn every_fixture_loads_and_seeds() {
    let names: Vec<String> = std::fs::read_dir(fixture_path(""))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".json") && !n.contains(".state."))
        .collect();
    assert!(names.len() >= 8, "{names:?}");
    for name in names {
        let m = Machine::new(fixture(&name), true).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(m.gpu_count() >= 1, "{name}");
    }
}

#[test]
fn placements_follow_the_reference_table() {
    let m = h200_on();
    let table: [(u32, Vec<u32>, u32); 7] = [
        (19, (0..7).collect(), 1),
        (20, (0..7).collect(), 1),
        (15, vec![0, 2, 4, 6], 2),
        (14, vec![0, 2, 4], 2),
        (9, vec![0, 4], 4),
        (5, vec![0], 4),
        (0, vec![0], 8),
    ];
    for (profile, starts, size) in table {
        let got = m.gi_placements(0, profile).unwrap();
        let want: Vec<(u32, u32)> = starts.iter().map(|&s| (s, size)).collect();
        assert_eq!(got, want, "profile {profile}");
    }
    assert_eq!(m.gi_placements(0, 21), Err(NOT_SUPPORTED));
}

#[test]
fn profiles_answer_with_mig_off_but_placements_and_instances_do_not() {
    let mut m = machine("a100-sxm4-40gb.json");
    assert_eq!(m.mig_mode(0), Ok((false, false)));
    let p = m
        .gi_profile_by_index(
            0,
            nvml_wrapper_sys::bindings::NVML_GPU_INSTANCE_PROFILE_3_SLICE,
        )
        .unwrap();
    assert_eq!((p.id, p.name.as_str(), p.memory_mib), (9, "3g.20gb", 20096));
    assert_eq!(
        m.gi_profile_by_index(0, 5).err(),
        Some(NOT_SUPPORTED),
        "no 8-slice profile"
    );
    assert_eq!(m.gi_profile_by_index(0, 99).err(), Some(INVALID_ARGUMENT));
    assert_eq!(m.gi_placements(0, 9), Err(NOT_SUPPORTED));
    assert_eq!(m.gi_remaining_capacity(0, 9), Err(NOT_SUPPORTED));
    assert_eq!(m.create_gi(0, 9, None), Err(NOT_SUPPORTED));
    assert_eq!(m.gi_list(0, 9).map(|v| v.len()), Err(NOT_SUPPORTED));
}

#[test]
fn seven_small_instances_fill_the_gpu_with_tree_ids() {
    let mut m = h200_on();
    for left in (1..=7).rev() {
        assert_eq!(m.gi_remaining_capacity(0, 19), Ok(left));
        m.create_gi(0, 19, None).unwrap();
    }
    assert_eq!(m.gi_remaining_capacity(0, 19), Ok(0));
    assert_eq!(m.create_gi(0, 19, None), Err(INSUFFICIENT_RESOURCES));
    assert_eq!(gi_ids(&m, 0), vec![7, 8, 9, 10, 11, 12, 13]);
    // Slot 7 is free but no 1g placement reaches it, and every larger profile overlaps.
    assert_eq!(m.gi_remaining_capacity(0, 14), Ok(0));
}

#[test]
fn overlapping_placements_are_refused() {
    let mut m = h200_on();
    m.create_gi(0, 9, Some(0)).unwrap();
    assert_eq!(m.create_gi(0, 14, Some(2)), Err(INSUFFICIENT_RESOURCES));
    assert_eq!(m.create_gi(0, 19, Some(3)), Err(INSUFFICIENT_RESOURCES));
    assert_eq!(m.create_gi(0, 0, Some(0)), Err(INSUFFICIENT_RESOURCES));
    assert_eq!(
        m.create_gi(0, 14, Some(1)),
        Err(INVALID_ARGUMENT),
        "not a 2g start"
    );
    m.create_gi(0, 14, Some(4)).unwrap();
    m.create_gi(0, 19, Some(6)).unwrap();
    assert_eq!(gi_ids(&m, 0), vec![1, 5, 13]);
}

#[test]
fn four_plus_three_is_refused_in_either_order() {
    let mut m = h200_on();
    m.create_gi(0, 5, Some(0)).unwrap();
    assert_eq!(m.gi_remaining_capacity(0, 9), Ok(0));
    assert_eq!(m.create_gi(0, 9, Some(4)), Err(INSUFFICIENT_RESOURCES));
    assert_eq!(m.create_gi(0, 9, None), Err(INSUFFICIENT_RESOURCES));
    // 4g + 2g + 1g (the other way to use the right half) is fine.
    m.create_gi(0, 14, Some(4)).unwrap();
    m.create_gi(0, 19, Some(6)).unwrap();

    let mut m = h200_on();
    m.create_gi(0, 9, Some(4)).unwrap();
    assert_eq!(m.create_gi(0, 5, Some(0)), Err(INSUFFICIENT_RESOURCES));
    m.create_gi(0, 9, Some(0)).unwrap();
}

#[test]
fn balanced_layout_fits_and_uses_all_seven_compute_slices() {
    let mut m = h200_on();
    for (profile, start) in [(9, 4), (14, 0), (19, 2), (19, 3)] {
        create_with_ci(&mut m, profile, start).unwrap();
    }
    assert_eq!(gi_ids(&m, 0), vec![2, 3, 9, 10]);
    assert_eq!(m.mig_devices(0).len(), 4);
    for profile in [0, 5, 9, 14, 15, 19, 20] {
        assert_eq!(
            m.gi_remaining_capacity(0, profile),
            Ok(0),
            "profile {profile}"
        );
    }
}

#[test]
fn create_without_placement_takes_the_highest_free_start() {
    let mut m = h200_on();
    let gi = m.create_gi(0, 9, None).unwrap();
    let (_, g) = m.find_gi(gi).unwrap();
    assert_eq!((g.id, g.start, g.size), (2, 4, 4));
    let gi = m.create_gi(0, 9, None).unwrap();
    assert_eq!(m.find_gi(gi).unwrap().1.id, 1);
}

#[test]
fn instance_count_limits_a_profile() {
    let mut m = h200_on();
    m.create_gi(0, 20, Some(0)).unwrap();
    assert_eq!(m.gi_remaining_capacity(0, 20), Ok(0));
    assert_eq!(
        m.create_gi(0, 20, Some(1)),
        Err(INSUFFICIENT_RESOURCES),
        "one +me instance per GPU"
    );
    m.create_gi(0, 19, Some(1)).unwrap();
}

#[test]
fn compute_instances_follow_the_gpu_instance_size() {
    let mut m = h200_on();
    let full = m.create_gi(0, 0, Some(0)).unwrap();
    let gp = m.gi_profile_by_id(0, 0).unwrap().clone();
    let profiles = m.ci_profiles(0, &gp);
    let summary: Vec<(u32, u32, u32, String)> = profiles
        .iter()
        .map(|c| (c.id, c.slice_count, c.instance_count, c.name.clone()))
        .collect();
    assert_eq!(
        summary,
        vec![
            (0, 1, 7, "1c.7g.141gb".to_string()),
            (1, 2, 3, "2c.7g.141gb".to_string()),
            (2, 3, 2, "3c.7g.141gb".to_string()),
            (3, 4, 1, "4c.7g.141gb".to_string()),
            (4, 7, 1, "7g.141gb".to_string()),
        ]
    );
    // 4c + 3c fill the 7 compute slices; a further 1c does not fit.
    m.create_ci(full, 3, None).unwrap();
    m.create_ci(full, 2, None).unwrap();
    assert_eq!(m.ci_remaining_capacity(full, 0), Ok(0));
    assert_eq!(m.create_ci(full, 0, None), Err(INSUFFICIENT_RESOURCES));
    assert_eq!(
        m.ci_profile(full, 5, 0),
        Err(NOT_SUPPORTED),
        "no 8c profile"
    );
    assert_eq!(
        m.ci_profile(full, 0, 1),
        Err(INVALID_ARGUMENT),
        "only the shared engine profile"
    );
}

#[test]
fn destroy_needs_compute_instances_gone_first() {
    let mut m = h200_on();
    let (gi, ci) = create_with_ci(&mut m, 9, 0).unwrap();
    assert_eq!(m.destroy_gi(gi), Err(IN_USE));
    m.destroy_ci(ci).unwrap();
    assert_eq!(m.destroy_ci(ci), Err(INVALID_ARGUMENT), "stale handle");
    m.destroy_gi(gi).unwrap();
    assert_eq!(m.destroy_gi(gi), Err(INVALID_ARGUMENT), "stale handle");
    assert!(m.gpu_state(0).gpu_instances.is_empty());
}

#[test]
fn processes_keep_their_instance_and_the_mode_busy() {
    let mut m = machine("h200-partitioned-busy.json");
    assert_eq!(gi_ids(&m, 0), vec![2, 3, 9, 10]);
    assert_eq!(m.processes(0, Scope::Gpu).len(), 1);
    assert_eq!(m.processes(0, Scope::Mig { gi: 2, ci: 0 }).len(), 1);
    assert_eq!(m.processes(0, Scope::Mig { gi: 3, ci: 0 }).len(), 0);
    let busy = m.gi_by_id(0, 2).unwrap().clone();
    let idle = m.gi_by_id(0, 3).unwrap().clone();
    assert_eq!(m.destroy_ci(busy.compute_instances[0].serial), Err(IN_USE));
    m.destroy_ci(idle.compute_instances[0].serial).unwrap();
    m.destroy_gi(idle.serial).unwrap();
    assert_eq!(m.set_mig_mode(0, 0), Err(IN_USE), "instances still exist");
    assert!(m.reset_gpu(0).unwrap_err().contains("4242"));
}

#[test]
fn a_busy_gpu_only_gets_a_pending_mode() {
    let mut f = fixture("a100-sxm4-40gb.json");
    f.gpus[0].processes = serde_json::from_str(r#"[{"pid": 77, "used_memory_mib": 900}]"#).unwrap();
    let mut m = Machine::new(f, true).unwrap();
    assert_eq!(m.set_mig_mode(0, 1), Ok(IN_USE));
    assert_eq!(m.mig_mode(0), Ok((false, true)));
    assert_eq!(m.create_gi(0, 19, None), Err(NOT_SUPPORTED));
    // Asking for the current mode again cancels the pending change.
    assert_eq!(m.set_mig_mode(0, 0), Ok(SUCCESS));
    assert_eq!(m.mig_mode(0), Ok((false, false)));
}

#[test]
fn reset_required_leaves_the_mode_pending_until_a_reset() {
    let mut f = fixture("a100-sxm4-40gb.json");
    f.gpus[0].mode_change_requires_reset = Some(true);
    let mut m = Machine::new(f, true).unwrap();
    assert_eq!(m.set_mig_mode(0, 1), Ok(RESET_REQUIRED));
    assert_eq!(m.mig_mode(0), Ok((false, true)));
    m.reset_gpu(0).unwrap();
    assert_eq!(m.mig_mode(0), Ok((true, true)));
    m.create_gi(0, 19, None).unwrap();
    assert_eq!(m.set_mig_mode(0, 2), Err(INVALID_ARGUMENT));
}

#[test]
fn reboot_clears_instances_and_applies_pending_modes() {
    let mut m = machine("mixed-2xh200-1xv100.json");
    m.create_gi(0, 0, None).unwrap();
    assert_eq!(m.set_mig_mode(1, 1), Ok(SUCCESS));
    m.reboot();
    assert!(m.gpu_state(0).gpu_instances.is_empty());
    assert_eq!(m.mig_mode(1), Ok((true, true)));
    assert_eq!(m.mig_mode(2), Err(NOT_SUPPORTED));
}

#[test]
fn non_root_callers_cannot_change_anything() {
    let mut m = Machine::new(fixture("h100-sxm5-80gb.json"), false).unwrap();
    assert_eq!(m.set_mig_mode(0, 0), Err(NO_PERMISSION));
    assert_eq!(m.create_gi(0, 19, None), Err(NO_PERMISSION));
    assert_eq!(m.gi_remaining_capacity(0, 19), Ok(7), "reads are allowed");
    let mut f = fixture("h100-sxm5-80gb.json");
    f.require_root = false;
    let mut m = Machine::new(f, false).unwrap();
    m.create_gi(0, 19, None).unwrap();
}

#[test]
fn mig_devices_have_real_looking_names_and_fresh_uuids() {
    let mut m = h200_on();
    let (gi, _) = create_with_ci(&mut m, 19, 0).unwrap();
    let (g, c) = m.mig_devices(0)[0];
    assert_eq!(m.mig_device_name(0, g, c), "NVIDIA H200 MIG 1g.18gb");
    let first = m.mig_device_uuid(0, g, c);
    assert!(first.starts_with("MIG-") && first.len() == 40, "{first}");
    let ci = c.serial;
    m.destroy_ci(ci).unwrap();
    m.destroy_gi(gi).unwrap();
    create_with_ci(&mut m, 19, 0).unwrap();
    let (g, c) = m.mig_devices(0)[0];
    assert_ne!(
        m.mig_device_uuid(0, g, c),
        first,
        "a new instance gets a new UUID"
    );
}

#[test]
fn non_mig_gpus_say_not_supported() {
    let mut m = machine("v100.json");
    assert_eq!(m.mig_mode(0), Err(NOT_SUPPORTED));
    assert_eq!(m.set_mig_mode(0, 1), Err(NOT_SUPPORTED));
    assert_eq!(m.gi_profile_by_index(0, 0).err(), Some(NOT_SUPPORTED));
}

/// A fixture copied into a fresh directory, so its state file is private to the test.
fn private_fixture(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::copy(fixture_path(name), &path).unwrap();
    (dir, path)
}

#[test]
fn drivers_share_state_through_the_file_and_publish_the_sysroot() {
    let (dir, path) = private_fixture("h100-sxm5-80gb.json");
    let root = dir.path().join("sysroot");
    let mut a = Driver::open(&path, Some(root.clone()), false).unwrap();
    let mut b = Driver::open(&path, Some(root.clone()), false).unwrap();
    let minors = std::fs::read_to_string(root.join("proc/driver/nvidia-caps/mig-minors")).unwrap();
    assert!(minors.starts_with("config 1\nmonitor 2\n"));

    let gi = a.mutate(|m| m.create_gi(0, 9, Some(0))).unwrap();
    let ci = a.mutate(|m| m.create_ci(gi, 2, None)).unwrap();
    b.refresh();
    assert_eq!(gi_ids(&b.machine, 0), vec![1]);
    // gpu0/gi1 → 12, gpu0/gi1/ci0 → 13.
    let cap = |n: u32| root.join(format!("dev/nvidia-caps/nvidia-cap{n}"));
    assert!(cap(12).exists() && cap(13).exists() && cap(1).exists() && cap(2).exists());
    assert!(root.join("dev/nvidia0").exists() && root.join("dev/nvidiactl").exists());
    let access = std::fs::read_to_string(
        root.join("proc/driver/nvidia/capabilities/gpu0/mig/gi1/ci0/access"),
    )
    .unwrap();
    assert!(access.starts_with("DeviceFileMinor: 13\n"), "{access}");

    // b destroys what a created; a sees it and the capability nodes go away.
    assert_eq!(b.mutate(|m| m.destroy_gi(gi)), Err(IN_USE));
    b.mutate(|m| m.destroy_ci(ci)).unwrap();
    b.mutate(|m| m.destroy_gi(gi)).unwrap();
    a.refresh();
    assert!(a.machine.gpu_state(0).gpu_instances.is_empty());
    assert!(!cap(12).exists() && !cap(13).exists());
    assert!(!root
        .join("proc/driver/nvidia/capabilities/gpu0/mig/gi1")
        .exists());

    // A refused change writes nothing.
    let before = std::fs::read(&crate::state::Store::beside(&path).state_path).unwrap();
    assert_eq!(
        a.mutate(|m| m.create_gi(0, 9, Some(1))),
        Err(INVALID_ARGUMENT)
    );
    let after = std::fs::read(&crate::state::Store::beside(&path).state_path).unwrap();
    assert_eq!(before, after);
}

#[test]
fn device_nodes_are_character_devices_when_running_as_root() {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let (dir, path) = private_fixture("v100.json");
    let root = dir.path().join("sysroot");
    Driver::open(&path, Some(root.clone()), false).unwrap();
    let meta = std::fs::metadata(root.join("dev/nvidia0")).unwrap();
    if nix::unistd::geteuid().is_root() {
        assert!(meta.file_type().is_char_device());
        assert_eq!(meta.rdev(), nix::sys::stat::makedev(sysroot::GPU_MAJOR, 0));
    } else {
        assert!(meta.is_file());
    }
}

#[test]
fn a_state_file_from_other_gpus_is_replaced_by_the_fixture() {
    let (_dir, path) = private_fixture("h200.json");
    let mut d = Driver::open(&path, None, false).unwrap();
    d.mutate(|m| m.set_mig_mode(0, 1)).unwrap();
    assert!(crate::control::state(&path).unwrap().gpus[0].mig_current);
    // Same file name, different GPU: the old state does not belong to it.
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("h2000141", "h2000999");
    std::fs::write(&path, text).unwrap();
    let state = crate::control::state(&path).unwrap();
    assert!(!state.gpus[0].mig_current);
    assert!(state.gpus[0].uuid.contains("h2000999"));
}

#[test]
fn a_memory_curve_is_interpolated_against_the_clock() {
    let p: crate::fixture::ProcessSpec =
        serde_json::from_str(r#"{"pid": 5, "memory_curve": [[0, 1000], [60, 1600], [120, 1600]]}"#)
            .unwrap();
    assert_eq!(
        p.used_mib_at(-5.0),
        1000,
        "before the curve: its first value"
    );
    assert_eq!(p.used_mib_at(30.0), 1300);
    assert_eq!(p.used_mib_at(60.0), 1600);
    assert_eq!(p.used_mib_at(1e6), 1600, "after the curve: its last value");
    let steady: crate::fixture::ProcessSpec =
        serde_json::from_str(r#"{"pid": 5, "used_memory_mib": 700}"#).unwrap();
    assert_eq!(steady.used_mib_at(99.0), 700);
}

#[test]
fn a_bad_memory_curve_names_the_process_and_the_point() {
    let text = std::fs::read_to_string(fixture_path("a100-sxm4-40gb.json")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["gpus"][0]["processes"] = serde_json::json!([{"pid": 9, "memory_curve": [[0, 1], [0, 2]]}]);
    let err = Fixture::parse(&v.to_string()).unwrap_err();
    assert!(
        err.contains("gpus[0].processes[0].memory_curve[1]") && err.contains("increase"),
        "{err}"
    );
}

#[test]
fn the_clock_starts_at_the_fixture_mtime_unless_the_fixture_names_a_start() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("f.json");
    let text = std::fs::read_to_string(fixture_path("a100-sxm4-40gb.json")).unwrap();
    std::fs::write(&p, &text).unwrap();
    let f = Fixture::load(&p).unwrap();
    assert!((0.0..5.0).contains(&f.clock_now()), "{}", f.clock_now());
    let at = text.replacen('{', "{\"memory_clock_start\": 1000,", 1);
    std::fs::write(&p, at).unwrap();
    let f = Fixture::load(&p).unwrap();
    assert!(f.clock_now() > 1e9);
}

#[test]
fn a_constrained_process_may_open_only_its_gpus_and_slices() {
    use crate::driver::AllowedDevices;
    let allowed = AllowedDevices::parse(
        "/dev/nvidiactl, /tmp/root/dev/nvidia0,/dev/nvidia-caps/nvidia-cap84,/dev/nvidia-caps/nvidia-cap85",
    );
    assert_eq!(allowed.gpus.iter().copied().collect::<Vec<_>>(), [0]);
    assert_eq!(allowed.caps.iter().copied().collect::<Vec<_>>(), [84, 85]);
    let (_dir, path) = private_fixture("h200-partitioned-busy.json");
    let mut d = Driver::open(&path, None, false).unwrap();
    // Not constrained: everything opens.
    assert!(d.may_open_gpu(0) && d.may_open_mig(0, 9, 0) && d.may_open_mig(0, 1, 0));
    // gpu0/gi9 is cap 3 + 9·9 = 84, its ci0 85: that slice and its GPU only.
    d.allowed = Some(allowed);
    assert!(d.may_open_gpu(0));
    assert!(d.may_open_mig(0, 9, 0));
    assert!(!d.may_open_mig(0, 1, 0), "a neighbour's slice");
    assert!(
        !d.may_open_mig(0, 9, 1),
        "another compute instance of the slice"
    );
    d.allowed = Some(AllowedDevices::parse("/dev/nvidia1"));
    assert!(!d.may_open_gpu(0) && !d.may_open_mig(0, 9, 0));
    d.allowed = Some(AllowedDevices::parse(""));
    assert!(!d.may_open_gpu(0), "an empty list allows no GPU");
}
