//! The files, written from checked settings and the inputs the caller read.

use anyhow::Result;

use super::kept::node_setup_blocks;
use super::node_gres::{parse_node_gres, NodeGresFile};
use super::settings::Settings;
use crate::error::invalid;
use crate::gres::render::{render_device_lines, slurm_conf_lines, GpuGres, GpuUsage, NodeGres};

/// The other shape beside node1..nodeN: 16 CPUs, 16000 MB, seven 1g.5gb
/// slices (an A100 cut into 1g.5gb*7), in partitions of its own.
const SMALL: &str = "small1";
/// The MIG node (`MIG_NODE=1`): its `Gres=` from node-setup's include.
const MIG: &str = "mig1";
/// Every node's fake devices: at least this many, so that any shape of a
/// later run finds its files.
const MIN_DEVICES: usize = 7;
/// What slurmdbd records of GRES (fixed: the standard shape's types).
const ACCOUNTING_TRES: &str = "gres/gpu,gres/gpu:1g.5gb,gres/gpu:2g.10gb,gres/gpu:a100,gres/shard";

/// A node of the exclusive pool (`POOL=1`): whole GPUs only.
struct PoolNode {
    name: &'static str,
    gpu_type: &'static str,
    gpus: u32,
    cpus: u32,
    memory_mb: u32,
    port_offset: u32,
}

const POOL_NODES: [PoolNode; 2] = [
    PoolNode {
        name: "pool1",
        gpu_type: "a100",
        gpus: 4,
        cpus: 32,
        memory_mb: 256000,
        port_offset: 300,
    },
    PoolNode {
        name: "pool2",
        gpu_type: "h100",
        gpus: 8,
        cpus: 64,
        memory_mb: 512000,
        port_offset: 301,
    },
];

/// A `GRES_CONF_<NODE>` file: used as that node's gres.conf lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Override {
    pub node: String,
    pub path: String,
    pub text: String,
}

/// What the caller read for the settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inputs {
    /// The `NODE_GRES` file's text (when the settings name one).
    pub node_gres: Option<String>,
    /// The gres.conf now installed, if there is one: its node-setup blocks are kept.
    pub existing_gres: Option<String>,
    /// node-setup's slurm.conf include, if it exists.
    pub mig_include: Option<String>,
    pub overrides: Vec<Override>,
}

/// The files to install, and the fake device files each node needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Files {
    pub slurm_conf: String,
    pub gres_conf: String,
    pub cgroup_conf: String,
    /// `<directory> <count>` lines: `count` device files `nvidia0..` in each
    /// node's directory, one line per node, in the nodes' order.
    pub devices: String,
}

/// A node of node1..nodeN, small1 or the pool: its name, its GRES as fake
/// devices (`None`: no GPU at all), its device directory.
struct Node {
    name: String,
    gres: Option<NodeGres>,
    dev_dir: String,
}

fn whole(node: &str, types: &[(&str, u32, Option<u32>)]) -> NodeGres {
    let mut gpus = Vec::new();
    for (t, count, shards) in types {
        for _ in 0..*count {
            gpus.push(GpuGres {
                minor: gpus.len() as u32,
                cores: None,
                usage: GpuUsage::Whole {
                    gpu_type: (*t).to_string(),
                    shards: *shards,
                },
            });
        }
    }
    NodeGres {
        node: node.to_string(),
        gpus,
    }
}

/// node1..nodeN's standard shape: 1g.5gb*4 + 2g.10gb*2 + a whole a100 with 8 shards.
fn standard(node: &str) -> NodeGres {
    whole(
        node,
        &[
            ("1g.5gb", 4, None),
            ("2g.10gb", 2, None),
            ("a100", 1, Some(8)),
        ],
    )
}

fn nodes(s: &Settings, file: &NodeGresFile) -> Vec<Node> {
    let dir = |n: &str| format!("{}/{n}", s.dev_dir);
    let mut out: Vec<Node> = (1..=s.nodes)
        .map(|k| {
            let name = format!("node{k}");
            let gres = match file.gres_of(&name) {
                Some(g) if g.gpus.is_empty() => None,
                Some(g) => Some(g),
                None => Some(standard(&name)),
            };
            Node {
                dev_dir: dir(&name),
                name,
                gres,
            }
        })
        .collect();
    out.push(Node {
        name: SMALL.into(),
        gres: Some(whole(SMALL, &[("1g.5gb", 7, None)])),
        dev_dir: dir(SMALL),
    });
    if s.pool {
        for p in &POOL_NODES {
            out.push(Node {
                name: p.name.into(),
                gres: Some(whole(p.name, &[(p.gpu_type, p.gpus, None)])),
                // Named alike on every instance, each with its own count.
                dev_dir: format!("{}/{}-{}", s.dev_dir, p.name, s.instance),
            });
        }
    }
    out
}

/// The `Gres=` of the MIG node: the first `NodeName=mig1 Gres=` line of
/// node-setup's include, up to the first blank.
fn mig_gres(s: &Settings, include: Option<&str>) -> Result<String> {
    let prefix = format!("NodeName={MIG} Gres=");
    let gres = include
        .and_then(|text| text.split('\n').find_map(|l| l.strip_prefix(&prefix)))
        .map(|rest| rest.split(' ').next().unwrap_or(""))
        .unwrap_or("");
    if gres.is_empty() {
        return Err(invalid(format!(
            "MIG_NODE=1 needs {} with a 'NodeName={MIG} Gres=...' line (node-setup --slurm-include)",
            s.mig_include
        )));
    }
    Ok(gres.to_string())
}

/// slurm.conf, gres.conf, cgroup.conf and the device counts for `s`.
pub fn render(s: &Settings, inputs: &Inputs) -> Result<Files> {
    let file = match (&s.node_gres, &inputs.node_gres) {
        (Some(path), Some(text)) => parse_node_gres(text, path)?,
        (Some(path), None) => {
            return Err(invalid(format!("NODE_GRES: cannot read '{path}'")));
        }
        (None, _) => NodeGresFile::default(),
    };
    let nodes = nodes(s, &file);
    for o in &inputs.overrides {
        if !nodes.iter().any(|n| n.name == o.node) {
            return Err(invalid(format!(
                "GRES_CONF_{} names {}, which is not a node of this cluster",
                o.node.to_ascii_uppercase(),
                o.node
            )));
        }
    }
    Ok(Files {
        slurm_conf: slurm_conf(s, &nodes, inputs)?,
        gres_conf: gres_conf(s, &nodes, &file, inputs)?,
        cgroup_conf: cgroup_conf(s),
        devices: devices(&nodes),
    })
}

fn slurm_conf(s: &Settings, nodes: &[Node], inputs: &Inputs) -> Result<String> {
    let mut l: Vec<String> = Vec::new();
    let host = &s.hostname;
    let (run, spool, log) = (&s.run_dir, &s.spool_dir, &s.log_dir);
    l.push(s.marker.clone());
    l.push("# Written by slurm/cluster.sh; rerun 'slurm/cluster.sh up' instead of editing.".into());
    l.push(format!("ClusterName={}", s.cluster_name));
    l.push(format!("SlurmctldHost={host}(127.0.0.1)"));
    l.push(format!("SlurmctldPort={}", s.ctld_port));
    l.push("SlurmUser=slurm".into());
    l.push("SlurmdUser=root".into());
    l.push("AuthType=auth/munge".into());
    // A requeued job waits cred_expire (default 120 s) before it starts
    // again; 10 s (Slurm refuses under 5) keeps the node-failure test short
    // and is still far longer than a job launch takes on one host.
    l.push("AuthInfo=cred_expire=10".into());
    l.push(format!("FirstJobId={}", s.first_job_id));
    l.push(format!("StateSaveLocation={spool}/ctld"));
    l.push(format!("SlurmdSpoolDir={spool}/d-%n"));
    l.push(format!("SlurmctldPidFile={run}/slurmctld.pid"));
    l.push(format!("SlurmdPidFile={run}/slurmd-%n.pid"));
    l.push(format!("SlurmctldLogFile={log}/slurmctld.log"));
    l.push(format!("SlurmdLogFile={log}/slurmd-%n.log"));
    l.push("SelectType=select/cons_tres".into());
    if s.cgroups {
        // What a production site runs (docs/admin-guide.md, isolation): each
        // job in cgroups of its own, limited to the CPUs, memory and device
        // files Slurm gave it (cgroup.conf), memory allocated as CPUs are.
        l.push("ProctrackType=proctrack/cgroup".into());
        l.push("TaskPlugin=task/cgroup,task/affinity".into());
        l.push("PrologFlags=Contain".into());
        l.push("SelectTypeParameters=CR_CPU_Memory".into());
        // With memory consumable, a job without --mem would get the whole
        // node's (DefMemPerNode=UNLIMITED): one such job would fill a node.
        // 1000 MB a CPU fits every node shape here (16 CPUs, 16000 MB on small1).
        l.push("DefMemPerCPU=1000".into());
    } else {
        l.push("ProctrackType=proctrack/linuxproc".into());
        l.push("TaskPlugin=task/none".into());
        l.push("SelectTypeParameters=CR_CPU".into());
    }
    l.push("SlurmdParameters=config_overrides".into());
    // batch_sched_delay=0: a job starts ~0.3 s after submission, not ~2.3 s;
    // bf_interval=1: a job whose begin time passes (a requeued one) starts
    // within a second, not at the next 30 s backfill pass.
    let more = if s.sched_params.is_empty() {
        String::new()
    } else {
        format!(",{}", s.sched_params)
    };
    l.push(format!(
        "SchedulerParameters=batch_sched_delay=0,bf_interval=1{more}"
    ));
    l.push(format!("MinJobAge={}", s.min_job_age));
    l.push("MaxArraySize=1001".into());
    l.push("ReturnToService=2".into());
    l.push("MailProg=/bin/true".into());
    l.push("GresTypes=gpu,shard".into());
    l.push("JobCompType=jobcomp/filetxt".into());
    l.push(format!("JobCompLoc={log}/jobcomp.log"));
    if s.accounting {
        l.push("AccountingStorageType=accounting_storage/slurmdbd".into());
        l.push("AccountingStorageHost=127.0.0.1".into());
        l.push(format!("AccountingStoragePort={}", s.dbd_port));
        l.push(format!("AccountingStorageTRES={ACCOUNTING_TRES}"));
        l.push("JobAcctGatherType=jobacct_gather/linux".into());
        // sacct shows the comment, which names the run (yolo-sched:RUN:TOKEN:STAGE).
        l.push("AccountingStoreFlags=job_comment".into());
        // Users see only their own jobs; coordinators their accounts' jobs;
        // operators and admins all (the permission tiers' test).
        l.push("PrivateData=jobs".into());
    }
    let node_line = |name: &str, port: u32, cpus: u32, mem: u32, gres: Option<&NodeGres>| {
        let gres = gres
            .map(|g| format!(" Gres={}", slurm_conf_lines(g).gres_value()))
            .unwrap_or_default();
        format!(
            "NodeName={name} NodeHostname={host} NodeAddr=127.0.0.1 Port={port} CPUs={cpus} RealMemory={mem}{gres} State=UNKNOWN"
        )
    };
    let standard: Vec<&Node> = nodes.iter().take(s.nodes as usize).collect();
    for (i, n) in standard.iter().enumerate() {
        let port = s.slurmd_base_port + i as u32 + 1;
        l.push(node_line(&n.name, port, 16, 64000, n.gres.as_ref()));
    }
    let small = nodes
        .iter()
        .find(|n| n.name == SMALL)
        .expect("small1 is a node");
    l.push(node_line(
        SMALL,
        s.slurmd_base_port + 200,
        16,
        16000,
        small.gres.as_ref(),
    ));
    let all: Vec<&str> = standard.iter().map(|n| n.name.as_str()).collect();
    let all = all.join(",");
    l.push(format!(
        "PartitionName=cpu Nodes={all} Default=YES MaxTime=INFINITE State=UP"
    ));
    l.push(format!(
        "PartitionName=gpu Nodes={all} MaxTime=INFINITE State=UP"
    ));
    l.push(format!(
        "PartitionName=small Nodes={SMALL} MaxTime=INFINITE State=UP"
    ));
    l.push(format!(
        "PartitionName=smalldef Nodes={SMALL} MaxTime=INFINITE DefCpuPerGPU=2 DefMemPerGPU=2000 State=UP"
    ));
    if s.pool {
        for p in &POOL_NODES {
            let gres = nodes
                .iter()
                .find(|n| n.name == p.name)
                .and_then(|n| n.gres.as_ref());
            l.push(node_line(
                p.name,
                s.slurmd_base_port + p.port_offset,
                p.cpus,
                p.memory_mb,
                gres,
            ));
        }
        let names: Vec<&str> = POOL_NODES.iter().map(|p| p.name).collect();
        l.push(format!(
            "PartitionName=pool Nodes={} MaxTime=INFINITE State=UP",
            names.join(",")
        ));
    }
    if s.mig_node {
        let gres = mig_gres(s, inputs.mig_include.as_deref())?;
        l.push(format!(
            "# {MIG}: Gres= from {} (yolo-sched node-setup)",
            s.mig_include
        ));
        l.push(format!(
            "NodeName={MIG} NodeHostname={host} NodeAddr=127.0.0.1 Port={} CPUs=4 RealMemory=8000 Gres={gres} State=UNKNOWN",
            s.slurmd_base_port + 100
        ));
        l.push(format!(
            "PartitionName=mig Nodes={MIG} MaxTime=INFINITE State=UP"
        ));
    }
    Ok(lines(l))
}

fn lines(l: Vec<String>) -> String {
    let mut out = l.join("\n");
    out.push('\n');
    out
}

/// cgroup.conf: without CGROUPS=1 it is still written, with nothing
/// constrained, so that no stale file of an earlier CGROUPS=1 applies.
fn cgroup_conf(s: &Settings) -> String {
    let yes = if s.cgroups { "yes" } else { "no" };
    lines(vec![
        s.marker.clone(),
        "# Read only with TaskPlugin=task/cgroup or ProctrackType=proctrack/cgroup (CGROUPS=1)."
            .into(),
        "# cgroup v1 (this host mounts it, without systemd).".into(),
        "CgroupPlugin=cgroup/v1".into(),
        "CgroupMountpoint=/sys/fs/cgroup".into(),
        format!("ConstrainCores={yes}"),
        format!("ConstrainDevices={yes}"),
        format!("ConstrainRAMSpace={yes}"),
        format!("ConstrainSwapSpace={yes}"),
    ])
}

fn gres_conf(s: &Settings, nodes: &[Node], file: &NodeGresFile, inputs: &Inputs) -> Result<String> {
    let mut out = lines(vec![
        s.marker.clone(),
        format!(
            "# Fake MIG slices: char devices (major {}) under {}, one set per node,",
            s.dev_major, s.dev_dir
        ),
        "# named as the driver names GPUs (nvidia<minor>), so the job agent maps each GRES".into(),
        "# index to its device as on a real node (docs/agent.md).".into(),
        "# Slice index = position in this file: 1g.5gb 0-3, 2g.10gb 4-5, a100 6.".into(),
    ]);
    for n in nodes {
        if let Some(o) = inputs.overrides.iter().find(|o| o.node == n.name) {
            out.push_str(&format!("# {}: from {}\n", n.name, o.path));
            out.push_str(&o.text);
            continue;
        }
        if let (Some(text), Some(path)) = (file.text_of(&n.name), &s.node_gres) {
            out.push_str(&format!(
                "# {}: Gres={text} from NODE_GRES {path}\n",
                n.name
            ));
        }
        if let Some(g) = &n.gres {
            out.push_str(&render_device_lines(g, &n.dev_dir)?);
        }
    }
    if let Some(existing) = &inputs.existing_gres {
        out.push_str(&node_setup_blocks(existing, |node| {
            s.mig_node || node != MIG
        }));
    }
    Ok(out)
}

fn devices(nodes: &[Node]) -> String {
    nodes
        .iter()
        .map(|n| {
            let count = n.gres.as_ref().map_or(0, |g| g.gpus.len()).max(MIN_DEVICES);
            format!("{} {count}\n", n.dev_dir)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::exit_code_for;
    use crate::localcluster::settings::tests::raw;

    fn settings(change: impl FnOnce(&mut crate::localcluster::RawSettings)) -> Settings {
        let mut r = raw();
        change(&mut r);
        Settings::check(&r).unwrap()
    }

    #[test]
    fn the_standard_shape() {
        let f = render(&settings(|_| {}), &Inputs::default()).unwrap();
        assert!(f
            .slurm_conf
            .starts_with("# managed by yolo-sched slurm/cluster.sh\n"));
        assert!(f.slurm_conf.contains(
            "\nNodeName=node1 NodeHostname=host NodeAddr=127.0.0.1 Port=17001 CPUs=16 RealMemory=64000 \
             Gres=gpu:1g.5gb:4,gpu:2g.10gb:2,gpu:a100:1,shard:8 State=UNKNOWN\n"
        ));
        assert!(f
            .slurm_conf
            .contains("Port=17200 CPUs=16 RealMemory=16000 Gres=gpu:1g.5gb:7 "));
        assert!(f
            .slurm_conf
            .contains("\nSchedulerParameters=batch_sched_delay=0,bf_interval=1\n"));
        assert!(!f.slurm_conf.contains("pool1") && !f.slurm_conf.contains("mig1"));
        assert!(f.gres_conf.ends_with(
            "NodeName=small1 AutoDetect=off Name=gpu Type=1g.5gb File=/dev/yolo-fakegpu/small1/nvidia[0-6]\n"
        ));
        assert!(f.cgroup_conf.contains("ConstrainDevices=no\n"));
        assert_eq!(
            f.devices,
            "/dev/yolo-fakegpu/node1 7\n/dev/yolo-fakegpu/small1 7\n"
        );
    }

    #[test]
    fn pool_node_gres_and_overrides() {
        let s = settings(|r| {
            r.nodes = "3".into();
            r.pool = "1".into();
            r.instance = "2".into();
            r.node_gres = "shapes".into();
            r.sched_params = "bf_max_job_test=9".into();
        });
        let inputs = Inputs {
            node_gres: Some("node1 gpu:h100:9\nnode2 -\n".into()),
            overrides: vec![Override {
                node: "node3".into(),
                path: "n3.conf".into(),
                text: "X".into(),
            }],
            ..Inputs::default()
        };
        let f = render(&s, &inputs).unwrap();
        assert!(f
            .slurm_conf
            .contains("Port=17001 CPUs=16 RealMemory=64000 Gres=gpu:h100:9 State"));
        assert!(f
            .slurm_conf
            .contains("Port=17002 CPUs=16 RealMemory=64000 State=UNKNOWN"));
        assert!(f.slurm_conf.contains("bf_interval=1,bf_max_job_test=9\n"));
        assert!(f
            .slurm_conf
            .contains("\nPartitionName=pool Nodes=pool1,pool2 "));
        assert!(f.gres_conf.contains(
            "# node1: Gres=gpu:h100:9 from NODE_GRES shapes\n\
             NodeName=node1 AutoDetect=off Name=gpu Type=h100 File=/dev/yolo-fakegpu/node1/nvidia[0-8]\n\
             # node2: Gres=- from NODE_GRES shapes\n\
             # node3: from n3.conf\nXNodeName=small1"
        ));
        assert!(f
            .gres_conf
            .contains("File=/dev/yolo-fakegpu/pool2-2/nvidia[0-7]\n"));
        assert!(f
            .devices
            .starts_with("/dev/yolo-fakegpu/node1 9\n/dev/yolo-fakegpu/node2 7\n"));
        assert!(f
            .devices
            .ends_with("/dev/yolo-fakegpu/pool1-2 7\n/dev/yolo-fakegpu/pool2-2 8\n"));

        let stray = Inputs {
            overrides: vec![Override {
                node: "node7".into(),
                path: "x".into(),
                text: String::new(),
            }],
            ..Inputs::default()
        };
        let err = render(&s, &stray).unwrap_err();
        assert_eq!(exit_code_for(&err), 2);
        let unread = render(&s, &Inputs::default()).unwrap_err();
        assert!(unread
            .to_string()
            .contains("NODE_GRES: cannot read 'shapes'"));
    }

    #[test]
    fn the_mig_node_takes_its_gres_from_the_include_and_keeps_its_block() {
        let existing =
            "# old\n# BEGIN yolo-sched node-setup mig1\nA\n# END yolo-sched node-setup mig1\n\
                        # BEGIN yolo-sched node-setup gpu7\nB\n# END yolo-sched node-setup gpu7\n";
        let inputs = Inputs {
            mig_include: Some("# x\nNodeName=mig1 Gres=gpu:1g.5gb:2 CPUs=4\n".into()),
            existing_gres: Some(existing.into()),
            ..Inputs::default()
        };
        let with = render(&settings(|r| r.mig_node = "1".into()), &inputs).unwrap();
        assert!(with.slurm_conf.ends_with(
            "# mig1: Gres= from /etc/slurm/yolo-mig-node.conf (yolo-sched node-setup)\n\
             NodeName=mig1 NodeHostname=host NodeAddr=127.0.0.1 Port=17100 CPUs=4 RealMemory=8000 Gres=gpu:1g.5gb:2 State=UNKNOWN\n\
             PartitionName=mig Nodes=mig1 MaxTime=INFINITE State=UP\n"
        ));
        assert!(with.gres_conf.ends_with(&existing[6..]));
        let without = render(&settings(|_| {}), &inputs).unwrap();
        assert!(without.gres_conf.ends_with(
            "nvidia[0-6]\n# BEGIN yolo-sched node-setup gpu7\nB\n# END yolo-sched node-setup gpu7\n"
        ));
        let empty = Inputs {
            mig_include: Some("NodeName=mig1 Gres= CPUs=4\n".into()),
            ..Inputs::default()
        };
        let err = render(&settings(|r| r.mig_node = "1".into()), &empty).unwrap_err();
        assert_eq!(exit_code_for(&err), 2);
        assert!(err
            .to_string()
            .contains("MIG_NODE=1 needs /etc/slurm/yolo-mig-node.conf"));
    }
}
