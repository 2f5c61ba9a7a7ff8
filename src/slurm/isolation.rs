//! The isolation a Slurm site enforces between jobs, read from its settings:
//! the task and process-tracking plugins, memory as a consumable resource,
//! cgroup.conf's `Constrain*` settings (printed by `scontrol show config`
//! under "Cgroup Support Configuration"), and whether every GPU line of
//! gres.conf names its device files (the devices cgroup allows exactly the
//! files of what Slurm allocated, so a line without `File=` constrains
//! nothing). `doctor` and `node-setup --check` report it; each gap says what a
//! job can do because of it and how to close it (docs/admin-guide.md,
//! "Isolation").

use super::config::ControllerConfig;

/// One finding: `ok` or a gap, under a short name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub name: &'static str,
    pub ok: bool,
    pub detail: String,
}

fn listed(value: Option<&str>, item: &str) -> bool {
    value.is_some_and(|v| v.split(',').any(|x| x.trim() == item))
}

fn yes(ctl: &ControllerConfig, key: &str) -> bool {
    ctl.get(key).is_some_and(|v| v.eq_ignore_ascii_case("yes"))
}

/// `nodes` named for a message: "gpu1", "gpu1, gpu2 and 3 more", or "any node".
fn on_nodes(nodes: &[String]) -> String {
    match nodes.len() {
        0 => "any node".to_string(),
        1..=3 => nodes.join(", "),
        n => format!("{} and {} more", nodes[..3].join(", "), n - 3),
    }
}

/// The isolation in force, from `scontrol show config`. `gpu_nodes` are the
/// nodes with GPU GRES (named in the messages).
pub fn findings(ctl: &ControllerConfig, gpu_nodes: &[String]) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut push = |name, ok, detail: String| out.push(Finding { name, ok, detail });
    let on = on_nodes(gpu_nodes);
    let task_cgroup = listed(ctl.get("TaskPlugin"), "task/cgroup");
    let task = ctl.get("TaskPlugin").unwrap_or("unknown");
    push(
        "task plugin",
        task_cgroup,
        if task_cgroup {
            format!("TaskPlugin={task}: each job runs in cgroups of its own, limited as cgroup.conf says")
        } else {
            format!(
                "TaskPlugin={task}: jobs are not confined; a job on {on} can use every CPU, all the node's memory \
                 and open every GPU and MIG slice; set TaskPlugin=task/cgroup,task/affinity in slurm.conf"
            )
        },
    );
    let proctrack = ctl.get("ProctrackType").unwrap_or("unknown");
    let tracked = proctrack == "proctrack/cgroup";
    push(
        "process tracking",
        tracked,
        if tracked {
            format!(
                "ProctrackType={proctrack}: every process a job starts is found and ended with it"
            )
        } else {
            format!(
                "ProctrackType={proctrack}: a process that leaves its job's process tree (a daemonized \
                 dataloader) outlives scancel and keeps its GPU memory; set ProctrackType=proctrack/cgroup"
            )
        },
    );
    let select = ctl.get("SelectTypeParameters").unwrap_or("unknown");
    let memory = select.to_ascii_uppercase().contains("MEMORY");
    // scontrol prints DefMemPerCPU only when set, DefMemPerNode always.
    let default_mem = ["DefMemPerCPU", "DefMemPerNode"].iter().find_map(|k| {
        ctl.get(k)
            .filter(|v| !v.eq_ignore_ascii_case("UNLIMITED") && *v != "0")
            .map(|v| format!("{k}={v}"))
    });
    push(
        "memory allocation",
        memory && default_mem.is_some(),
        if memory && default_mem.is_some() {
            format!(
                "SelectTypeParameters={select}: memory is allocated like CPUs; --mem is reserved for the job, \
                 {} for a job without it",
                default_mem.unwrap_or_default()
            )
        } else if memory {
            format!(
                "SelectTypeParameters={select} with no default memory (DefMemPerNode=UNLIMITED): a job without \
                 --mem is given the whole node's memory, so one such job fills a node; set DefMemPerCPU in slurm.conf \
                 (yolo-sched's stages always ask --mem)"
            )
        } else {
            format!(
                "SelectTypeParameters={select}: memory is not a consumable resource, so --mem reserves nothing \
                 and jobs on one node can together ask for more than it has; set CR_Core_Memory (or CR_CPU_Memory)"
            )
        },
    );
    // cgroup.conf is read only where task/cgroup runs: without it the
    // Constrain settings bind nothing, whatever they say.
    let constrain = |key: &str| task_cgroup && yes(ctl, key);
    push(
        "device isolation",
        constrain("ConstrainDevices"),
        if constrain("ConstrainDevices") {
            "ConstrainDevices=yes: a job opens only the GPU, MIG slice or shard device files Slurm gave it".to_string()
        } else {
            format!(
                "any job on {on} can open every GPU and MIG slice, whatever it was given (nothing stops code \
                 that resets CUDA_VISIBLE_DEVICES); set ConstrainDevices=yes in cgroup.conf{}",
                if task_cgroup { "" } else { " (with task/cgroup)" }
            )
        },
    );
    let ram = constrain("ConstrainRAMSpace");
    push(
        "memory isolation",
        ram,
        if ram {
            let swap = if constrain("ConstrainSwapSpace") {
                "and swap "
            } else {
                ""
            };
            format!("ConstrainRAMSpace=yes: a job over its --mem {swap}is killed by its own cgroup, alone")
        } else {
            format!(
                "a job can use more host memory than its --mem; when the node runs out, the kernel may kill \
                 a neighbour's training instead; set ConstrainRAMSpace=yes (and ConstrainSwapSpace=yes) in cgroup.conf{}",
                if task_cgroup { "" } else { " (with task/cgroup)" }
            )
        },
    );
    let cores = constrain("ConstrainCores");
    push(
        "cpu isolation",
        cores,
        if cores {
            "ConstrainCores=yes: a job runs only on the CPUs Slurm gave it".to_string()
        } else {
            format!(
                "a job can run threads on every CPU of the node and slow its neighbours' dataloaders; \
                 set ConstrainCores=yes in cgroup.conf{}",
                if task_cgroup { "" } else { " (with task/cgroup)" }
            )
        },
    );
    out
}

/// GPU and shard lines of a gres.conf without device files: the devices
/// cgroup cannot allow exactly what was allocated for them. Each is
/// `(node-setup's block it is in, if any, the line)`.
pub fn lines_without_files(gres_conf: &str) -> Vec<(Option<String>, String)> {
    let begin = crate::gres::render::BEGIN_MARKER;
    let end = crate::gres::render::END_MARKER;
    let mut block: Option<String> = None;
    let mut out = Vec::new();
    for line in gres_conf.lines().map(str::trim) {
        if let Some(node) = line.strip_prefix(begin) {
            block = Some(node.trim().to_string());
            continue;
        }
        if line.starts_with(end) {
            block = None;
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        let names_gpu = words.iter().any(|w| {
            w.strip_prefix("Name=")
                .is_some_and(|n| n == "gpu" || n == "shard" || n == "mps")
        });
        let autodetect = words
            .iter()
            .any(|w| w.strip_prefix("AutoDetect=").is_some_and(|a| a != "off"));
        let has_files = words
            .iter()
            .any(|w| w.starts_with("File=") || w.starts_with("MultipleFiles="));
        if names_gpu && !has_files && !autodetect {
            out.push((block.clone(), line.to_string()));
        }
    }
    out
}

/// The finding on gres.conf's device files (`None`: the file could not be read).
pub fn device_files_finding(gres_conf: Option<&str>, path: &str) -> Finding {
    match gres_conf {
        None => Finding {
            name: "gres device files",
            ok: true,
            detail: format!(
                "{path} is not readable here; run `yolo-sched node-setup --check` on each node"
            ),
        },
        Some(text) => {
            let bare = lines_without_files(text);
            if bare.is_empty() {
                Finding {
                    name: "gres device files",
                    ok: true,
                    detail: format!("every GPU line of {path} names its device file(s), node-setup's blocks included"),
                }
            } else {
                let shown: Vec<String> = bare
                    .iter()
                    .take(3)
                    .map(|(b, l)| match b {
                        Some(n) => format!("`{l}` (node-setup's block for {n})"),
                        None => format!("`{l}`"),
                    })
                    .collect();
                Finding {
                    name: "gres device files",
                    ok: false,
                    detail: format!(
                        "{} GPU line(s) of {path} name no device file, so ConstrainDevices cannot allow exactly what \
                         was allocated: {}{}; give each GPU, slice and shard its File= (`yolo-sched node-setup --apply` \
                         writes them)",
                        bare.len(),
                        shown.join(", "),
                        if bare.len() > 3 { ", …" } else { "" }
                    ),
                }
            }
        }
    }
}

/// How `/proc` hides other users' processes on this host, from
/// `/proc/self/mountinfo` (the last `proc` mount at `/proc`: later mounts
/// cover earlier ones). cgroups confine what a job can do to another's
/// processes (signal, trace, read their environment) but not whether it sees
/// them: their command lines name run directories, datasets and arguments.
/// `hidepid=2` (`invisible`) hides them; `hidepid=1` (`noaccess`) lists their
/// ids but not their command lines. `None`: the file could not be read.
pub fn process_visibility_finding(mountinfo: Option<&str>, host: &str) -> Finding {
    const NAME: &str = "process visibility";
    let Some(text) = mountinfo else {
        return Finding {
            name: NAME,
            ok: true,
            detail: format!(
                "/proc/self/mountinfo is not readable on {host}; check /proc's hidepid by hand"
            ),
        };
    };
    // "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [TAGS…] - FSTYPE SOURCE SUPEROPTIONS"
    let proc_options = text.lines().rev().find_map(|line| {
        let (before, after) = line.split_once(" - ")?;
        let mount_point = before.split_whitespace().nth(4)?;
        let mut rest = after.split_whitespace();
        let fstype = rest.next()?;
        (mount_point == "/proc" && fstype == "proc").then(|| rest.nth(1).unwrap_or("").to_string())
    });
    let Some(options) = proc_options else {
        return Finding {
            name: NAME,
            ok: true,
            detail: format!(
                "no proc file system is mounted at /proc on {host}; check /proc's hidepid by hand"
            ),
        };
    };
    let hidepid = options
        .split(',')
        .find_map(|o| o.strip_prefix("hidepid="))
        .unwrap_or("0");
    match hidepid {
        "2" | "invisible" | "4" | "ptraceable" => Finding {
            name: NAME,
            ok: true,
            detail: format!("/proc is mounted with hidepid={hidepid} on {host}: a user sees only their own processes"),
        },
        "1" | "noaccess" => Finding {
            name: NAME,
            ok: true,
            detail: format!(
                "/proc is mounted with hidepid={hidepid} on {host}: other users' process ids are listed, \
                 their command lines and environments are not readable (hidepid=2 hides the ids too)"
            ),
        },
        other => Finding {
            name: NAME,
            ok: false,
            detail: format!(
                "/proc is mounted {} on {host}: any user lists every other user's processes and reads their \
                 command lines (run directories, datasets, arguments); cgroups do not hide them; mount /proc with \
                 hidepid=2 (with gid= for a monitoring group)",
                if other == "0" || other == "off" {
                    "without hidepid".to_string()
                } else {
                    format!("with hidepid={other}")
                }
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONSTRAINED: &str = "TaskPlugin              = task/cgroup,task/affinity\n\
        ProctrackType           = proctrack/cgroup\n\
        SelectTypeParameters    = CR_CPU_MEMORY\n\
        DefMemPerCPU            = 1000\n\
        DefMemPerNode           = UNLIMITED\n\
        Cgroup Support Configuration:\n\
        CgroupPlugin            = cgroup/v1\n\
        ConstrainCores          = yes\n\
        ConstrainDevices        = yes\n\
        ConstrainRAMSpace       = yes\n\
        ConstrainSwapSpace      = yes\n";

    #[test]
    fn a_production_configuration_has_no_gap() {
        let f = findings(&ControllerConfig::parse(CONSTRAINED), &["gpu1".into()]);
        assert_eq!(f.len(), 6);
        assert!(f.iter().all(|f| f.ok), "{f:?}");
        // Memory consumable without a default: a job without --mem takes a node.
        let text = CONSTRAINED.replace("DefMemPerCPU            = 1000\n", "");
        let f = findings(&ControllerConfig::parse(&text), &[]);
        let mem = f.iter().find(|f| f.name == "memory allocation").unwrap();
        assert!(
            !mem.ok && mem.detail.contains("set DefMemPerCPU"),
            "{}",
            mem.detail
        );
    }

    #[test]
    fn each_gap_says_what_a_job_can_do_and_the_fix() {
        let text = "TaskPlugin = task/none\nProctrackType = proctrack/linuxproc\nSelectTypeParameters = CR_CPU\n";
        let f = findings(&ControllerConfig::parse(text), &["gpu1".into()]);
        assert!(f.iter().all(|f| !f.ok), "{f:?}");
        let devices = f.iter().find(|f| f.name == "device isolation").unwrap();
        assert!(devices
            .detail
            .starts_with("any job on gpu1 can open every GPU and MIG slice"));
        assert!(devices
            .detail
            .contains("set ConstrainDevices=yes in cgroup.conf"));
        // Constrain settings without task/cgroup bind nothing.
        let text = CONSTRAINED.replace("task/cgroup,task/affinity", "task/affinity");
        let f = findings(&ControllerConfig::parse(&text), &[]);
        assert!(f
            .iter()
            .filter(|f| f.name.ends_with("isolation"))
            .all(|f| !f.ok));
        assert!(f[3].detail.contains("any node") && f[3].detail.contains("(with task/cgroup)"));
    }

    #[test]
    fn gres_lines_without_device_files_are_found_and_placed() {
        let conf = "# x\nNodeName=n1 AutoDetect=off Name=gpu Type=a100 File=/dev/nvidia0\n\
            NodeName=n2 Name=gpu Type=a100 Count=2\n\
            # BEGIN yolo-sched node-setup gpu3\n\
            NodeName=gpu3 AutoDetect=off Name=gpu Type=1g.5gb MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap21\n\
            NodeName=gpu3 AutoDetect=off Name=shard Count=4\n\
            # END yolo-sched node-setup gpu3\n\
            NodeName=n4 AutoDetect=nvml\n";
        let bare = lines_without_files(conf);
        assert_eq!(bare.len(), 2);
        assert_eq!(bare[0].0, None);
        assert_eq!(bare[1].0.as_deref(), Some("gpu3"));
        let f = device_files_finding(Some(conf), "/etc/slurm/gres.conf");
        assert!(
            !f.ok && f.detail.contains("node-setup's block for gpu3"),
            "{}",
            f.detail
        );
        assert!(device_files_finding(Some("NodeName=a Name=gpu File=/dev/x\n"), "g").ok);
    }

    #[test]
    fn process_visibility_is_read_from_the_last_proc_mount_at_proc() {
        let plain = "22 27 0:21 / /proc rw,relatime - proc proc rw\n";
        let f = process_visibility_finding(Some(plain), "gpu1");
        assert!(
            !f.ok && f.detail.contains("without hidepid on gpu1") && f.detail.contains("hidepid=2"),
            "{}",
            f.detail
        );
        // Remounted with hidepid: the later line is the one in force.
        let hidden = format!(
            "{plain}40 27 0:21 / /proc rw,relatime shared:5 - proc proc rw,hidepid=invisible\n"
        );
        let f = process_visibility_finding(Some(&hidden), "gpu1");
        assert!(f.ok && f.detail.contains("only their own"), "{}", f.detail);
        let ids_only = "22 27 0:21 / /proc rw - proc proc rw,hidepid=1,gid=30\n";
        assert!(process_visibility_finding(Some(ids_only), "h").ok);
        // Another file system at /proc, or a proc file system elsewhere, is not /proc's.
        let elsewhere = "22 27 0:21 / /mnt/proc rw - proc proc rw\n23 27 0:22 / /proc rw - tmpfs tmpfs rw,hidepid=2\n";
        let f = process_visibility_finding(Some(elsewhere), "h");
        assert!(
            f.ok && f.detail.contains("no proc file system"),
            "{}",
            f.detail
        );
        assert!(process_visibility_finding(None, "h")
            .detail
            .contains("not readable"));
        // Garbage lines are skipped, not a panic.
        let f = process_visibility_finding(Some("x\n - \n1 2 3 4 /proc\n"), "h");
        assert!(f.ok && f.detail.contains("no proc file system"));
    }
}
