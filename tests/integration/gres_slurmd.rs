//! Rendered gres.conf checked by real Slurm: `slurmd -G` must list every MIG slice.
//!
//! The test plans layouts with the planner, lays out fake device nodes (char
//! major 240, the Linux "local use" range) and a `mig-minors` file under a
//! temporary sysroot, renders this node's gres.conf block with the device
//! paths under that sysroot, writes it with `fsutil::write_with_backup`, and
//! runs `slurmd -G -f <temp slurm.conf> -N <test node>`: slurmd reads the
//! configuration, stats every device file (its `Index` is the file's minor),
//! prints the GRES it would offer, and exits.
//!
//! `slurmd -G` does not disturb the running cluster: it opens no socket and,
//! as checked with strace, writes only its log file and
//! `<SlurmdSpoolDir>/hwloc_topo_whole.xml`, both in our temporary directory;
//! the node name is one no running slurmd serves. It needs root (it reads
//! the node's hardware like the real daemon).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::stat::{makedev, mknod, Mode, SFlag};
use yolo_sched::fsutil::{write_with_backup, WriteOutcome};
use yolo_sched::gres::{
    check_written, mig_minors_path, render_block, replace_block, slurm_conf_lines, GpuGres,
    GpuUsage, MigMinors, MigSlice, NodeGres, RenderOptions,
};
use yolo_sched::mig::{builtin, plan_gpu, GpuLayout, GpuTarget};
use yolo_sched::process::run_with_timeout;

const FAKE_MAJOR: u64 = 240;

/// Skip (with a note) where slurmd or root is missing, unless the run says the
/// cluster machine is expected (`YOLO_SCHED_EXPECT_CLUSTER=1`): then fail.
#[track_caller]
fn slurmd_available() -> bool {
    let missing = if !nix::unistd::geteuid().is_root() {
        Some("not running as root")
    } else if which::which("slurmd").is_err() {
        Some("slurmd is not on PATH")
    } else {
        None
    };
    match missing {
        None => true,
        Some(why) if std::env::var("YOLO_SCHED_EXPECT_CLUSTER").as_deref() == Ok("1") => {
            panic!("slurmd -G check cannot run: {why}, but YOLO_SCHED_EXPECT_CLUSTER=1")
        }
        Some(why) => {
            eprintln!("skipping the slurmd -G check: {why}");
            false
        }
    }
}

/// One `slurmd: Gres Name=… Type=… Count=… Index=… ID=… File=… …` line.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Listed {
    name: String,
    kind: String,
    count: u64,
    index: u64,
    file: String,
}

fn parse_listing(output: &str) -> Vec<Listed> {
    output
        .lines()
        .filter_map(|l| l.split_once("Gres Name=").map(|(_, rest)| rest))
        .map(|rest| {
            let field = |key: &str| -> String {
                rest.split_whitespace()
                    .find_map(|w| w.strip_prefix(key))
                    .unwrap_or_default()
                    .to_string()
            };
            Listed {
                name: rest
                    .split_whitespace()
                    .next()
                    .unwrap_or_default()
                    .to_string(),
                kind: field("Type="),
                count: field("Count=").parse().unwrap_or(u64::MAX),
                index: field("Index=").parse().unwrap_or(u64::MAX),
                file: field("File="),
            }
        })
        .collect()
}

/// Complaints slurmd makes about GRES (count mismatches, missing files, bad lines).
fn gres_complaints(output: &str) -> Vec<String> {
    output
        .lines()
        .filter(|l| {
            let lower = l.to_ascii_lowercase();
            (lower.contains("error") || lower.contains("warning") || lower.contains("fatal"))
                && (lower.contains("gres") || lower.contains("sharing") || lower.contains("file"))
        })
        .map(str::to_string)
        .collect()
}

#[track_caller]
fn char_device(path: &Path, minor: u64) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    mknod(
        path,
        SFlag::S_IFCHR,
        Mode::from_bits_truncate(0o666),
        makedev(FAKE_MAJOR, minor),
    )
    .unwrap_or_else(|e| panic!("mknod {}: {e}", path.display()));
}

/// A MIG GPU planned with `layout`, with GI ids handed out like NVML (1, 2, …)
/// and capability minors registered in `minors`.
#[track_caller]
fn mig_gpu(minor: u32, layout: &str, cores: Option<&str>, minors: &mut MigMinors) -> GpuGres {
    let geometry = builtin::a100_40gb();
    let layout: GpuLayout = layout.parse().unwrap();
    let GpuTarget::Enabled(plan) = plan_gpu(&layout, &geometry).unwrap() else {
        panic!("{layout} enables MIG")
    };
    let slices = plan
        .instances
        .iter()
        .enumerate()
        .map(|(i, inst)| {
            let gi = i as u32 + 1;
            // The driver numbers capabilities per GPU and instance; any distinct minors do.
            let gi_minor = 3 + minor * 100 + gi * 9;
            minors.insert_gi(minor, gi, gi_minor);
            minors.insert_ci(minor, gi, 0, gi_minor + 1);
            MigSlice {
                profile: inst.profile.clone(),
                gi_id: gi,
                ci_id: 0,
            }
        })
        .collect();
    GpuGres {
        minor,
        cores: cores.map(str::to_string),
        usage: GpuUsage::Mig { slices },
    }
}

struct Scene {
    _dir: tempfile::TempDir,
    sysroot: PathBuf,
    etc: PathBuf,
    node: NodeGres,
    minors: MigMinors,
}

fn scene() -> Scene {
    let dir = tempfile::tempdir().unwrap();
    let sysroot = dir.path().join("root");
    let etc = dir.path().join("etc");
    fs::create_dir_all(&etc).unwrap();
    fs::create_dir_all(dir.path().join("spool")).unwrap();
    let mut minors = MigMinors::default();
    minors.config = Some(1);
    minors.monitor = Some(2);
    let node_name = format!("yolo-gres-test-{}", std::process::id());
    // GPU minors differ from indices on purpose (minor ≠ index is common).
    let node = NodeGres {
        node: node_name,
        gpus: vec![
            mig_gpu(0, "balanced", None, &mut minors),
            mig_gpu(3, "all-1g", Some("0-1"), &mut minors),
            mig_gpu(4, "3g.20gb,2g.10gb*2", None, &mut minors),
            GpuGres {
                minor: 5,
                cores: None,
                usage: GpuUsage::Whole {
                    gpu_type: "a100".into(),
                    shards: Some(4),
                },
            },
        ],
    };
    // The driver's file, read back the way node-setup reads it.
    let minors_path = mig_minors_path(&sysroot);
    fs::create_dir_all(minors_path.parent().unwrap()).unwrap();
    fs::write(&minors_path, minors.render()).unwrap();
    let minors =
        MigMinors::parse(&fs::read_to_string(&minors_path).unwrap(), "mig-minors").unwrap();
    for gpu in &node.gpus {
        char_device(
            &sysroot.join(format!("dev/nvidia{}", gpu.minor)),
            u64::from(gpu.minor),
        );
        if let GpuUsage::Mig { slices } = &gpu.usage {
            for s in slices {
                for cap in [
                    minors.gi(gpu.minor, s.gi_id).unwrap(),
                    minors.ci(gpu.minor, s.gi_id, s.ci_id).unwrap(),
                ] {
                    char_device(
                        &sysroot.join(format!("dev/nvidia-caps/nvidia-cap{cap}")),
                        u64::from(cap),
                    );
                }
            }
        }
    }
    Scene {
        sysroot,
        etc,
        node,
        minors,
        _dir: dir,
    }
}

/// slurm.conf in the style of the cluster's (`/etc/slurm/slurm.conf`), for the test node only.
fn write_slurm_conf(scene: &Scene, gres_value: &str) -> PathBuf {
    let base = scene.etc.parent().unwrap();
    let lines = slurm_conf_lines(&scene.node);
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    let conf = format!(
        "ClusterName=yologrestest\n\
         SlurmctldHost=localhost\n\
         SlurmdSpoolDir={spool}\n\
         SlurmdPidFile={base}/slurmd.pid\n\
         SlurmdLogFile={base}/slurmd.log\n\
         StateSaveLocation={base}/state\n\
         ProctrackType=proctrack/linuxproc\n\
         TaskPlugin=task/none\n\
         SelectType=select/cons_tres\n\
         {types}\n\
         {tres}\n\
         NodeName={node} NodeHostname=localhost CPUs={cpus} Gres={gres_value} State=UNKNOWN\n\
         PartitionName=test Nodes={node} State=UP\n",
        spool = base.join("spool").display(),
        base = base.display(),
        types = lines.gres_types_line(),
        tres = lines.accounting_line(),
        node = scene.node.node,
    );
    let path = scene.etc.join("slurm.conf");
    fs::write(&path, conf).unwrap();
    path
}

#[track_caller]
fn slurmd_g(slurm_conf: &Path, node: &str) -> String {
    let args = [
        "-G".to_string(),
        "-f".to_string(),
        slurm_conf.display().to_string(),
        "-N".to_string(),
        node.to_string(),
    ];
    let out = run_with_timeout("slurmd", &args, Duration::from_secs(60)).expect("slurmd -G runs");
    let text = format!("{}{}", out.stdout_str(), out.stderr_str());
    assert!(out.status.success(), "slurmd -G failed:\n{text}");
    text
}

/// Write gres.conf the way node-setup does: a hand-written line for another
/// node stays, our block goes between markers, parse-back check, backup.
#[track_caller]
fn write_gres_conf(scene: &Scene) -> String {
    let opts = RenderOptions {
        device_root: Some(scene.sysroot.clone()),
    };
    let block = render_block(&scene.node, &scene.minors, &opts).unwrap();
    let path = scene.etc.join("gres.conf");
    let hand = "# hand-written: another node\nNodeName=othernode AutoDetect=off Name=gpu Type=v100 File=/dev/nvidia0\n";
    fs::write(&path, hand).unwrap();
    let edit = replace_block(hand, &scene.node.node, &block).unwrap();
    assert!(edit.conflicts.is_empty(), "{:?}", edit.conflicts);
    let outcome = write_with_backup(&path, edit.text.as_bytes(), 0o644, |bytes| {
        check_written(bytes, &scene.node, &block)
    })
    .unwrap();
    assert!(matches!(outcome, WriteOutcome::Written { backup: Some(_) }));
    let written = fs::read_to_string(&path).unwrap();
    assert!(written.starts_with(hand), "hand-written lines survive");
    written
}

#[test]
fn slurmd_lists_every_mig_slice_with_its_type() {
    if !slurmd_available() {
        return;
    }
    let scene = scene();
    write_gres_conf(&scene);
    let lines = slurm_conf_lines(&scene.node);
    let conf = write_slurm_conf(&scene, &lines.gres_value());
    let output = slurmd_g(&conf, &scene.node.node);
    let complaints = gres_complaints(&output);
    assert!(
        complaints.is_empty(),
        "slurmd complained:\n{}\n\n{output}",
        complaints.join("\n")
    );
    let listed = parse_listing(&output);
    let dev = |rel: String| scene.sysroot.join("dev").join(rel).display().to_string();

    // Every MIG slice: its GI and CI capability files, with the slice's type
    // and the device minor slurmd read from the file itself.
    let mut per_type: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for gpu in &scene.node.gpus {
        let GpuUsage::Mig { slices } = &gpu.usage else {
            continue;
        };
        for s in slices {
            for cap in [
                scene.minors.gi(gpu.minor, s.gi_id).unwrap(),
                scene.minors.ci(gpu.minor, s.gi_id, s.ci_id).unwrap(),
            ] {
                let file = dev(format!("nvidia-caps/nvidia-cap{cap}"));
                let entry = listed
                    .iter()
                    .find(|l| l.name == "gpu" && l.file == file)
                    .unwrap_or_else(|| panic!("slurmd does not list {file}:\n{output}"));
                assert_eq!(entry.kind, s.profile, "{entry:?}");
                assert_eq!(entry.count, 1, "{entry:?}");
                assert_eq!(entry.index, u64::from(cap), "{entry:?}");
            }
            per_type
                .entry(s.profile.clone())
                .or_default()
                .insert(dev(format!(
                    "nvidia-caps/nvidia-cap{}",
                    scene.minors.gi(gpu.minor, s.gi_id).unwrap()
                )));
        }
    }
    // Per type, slurmd's distinct GPU-instance files = the slurm.conf count.
    for (key, n) in &lines.gres {
        let Some(profile) = key.strip_prefix("gpu:") else {
            continue;
        };
        if profile == "a100" {
            continue;
        }
        let gi_files: BTreeSet<&str> = listed
            .iter()
            .filter(|l| l.name == "gpu" && l.kind == profile && per_type[profile].contains(&l.file))
            .map(|l| l.file.as_str())
            .collect();
        assert_eq!(gi_files.len() as u64, *n, "{profile}:\n{output}");
    }
    assert_eq!(
        per_type["1g.5gb"].len(),
        2 + 7,
        "balanced has two 1g, all-1g seven"
    );
    assert_eq!(per_type["2g.10gb"].len(), 1 + 2);
    assert_eq!(per_type["3g.20gb"].len(), 1 + 1);

    // The whole GPU and its shards.
    let whole = dev("nvidia5".into());
    let gpu = listed
        .iter()
        .find(|l| l.name == "gpu" && l.file == whole)
        .unwrap_or_else(|| panic!("no whole GPU:\n{output}"));
    assert_eq!((gpu.kind.as_str(), gpu.count, gpu.index), ("a100", 1, 5));
    let shard = listed
        .iter()
        .find(|l| l.name == "shard" && l.file == whole)
        .unwrap_or_else(|| panic!("no shards:\n{output}"));
    assert_eq!(shard.count, 4);
}

/// The oracle can fail: a slurm.conf that undercounts the slices makes slurmd
/// complain, and the check above would catch it.
#[test]
fn slurmd_complains_when_slurm_conf_disagrees() {
    if !slurmd_available() {
        return;
    }
    let scene = scene();
    write_gres_conf(&scene);
    let lines = slurm_conf_lines(&scene.node);
    let undercounted: Vec<String> = lines
        .gres
        .iter()
        .map(|(k, n)| {
            let n = if k == "gpu:1g.5gb" { n - 1 } else { *n };
            format!("{k}:{n}")
        })
        .collect();
    let conf = write_slurm_conf(&scene, &undercounted.join(","));
    let output = slurmd_g(&conf, &scene.node.node);
    let complaints = gres_complaints(&output);
    assert!(
        complaints.iter().any(|c| c.contains("1g.5gb")),
        "expected a complaint about gpu:1g.5gb:\n{output}"
    );
}
