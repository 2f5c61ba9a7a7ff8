//! The cluster's shape: nodes ([`Node`]: CPUs, memory, GRES, state, partitions),
//! partitions (limits, job defaults) and the controller's defaults, from one
//! `scontrol` process that is asked three questions on stdin
//! (`show partition`, `show node`, `show config`, one-liner output).
//!
//! One process instead of `sinfo` + `scontrol show partition` + `scontrol
//! show config`: submit stays at a constant number of Slurm commands (one
//! query, one `sbatch` per stage, one release) whatever the cluster's size.

use anyhow::{bail, Result};
use serde::Serialize;

use super::gres;
use super::node::Node;
use super::Slurm;

/// What `scontrol` is asked, in order.
pub const QUESTIONS: &str = "show partition\nshow node\nshow config\n";

/// Slurm's per-GPU job defaults (`JobDefaults=DefCpuPerGPU=2,DefMemPerGPU=4096`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct JobDefaults {
    pub cpu_per_gpu: Option<u32>,
    pub mem_per_gpu_mib: Option<u64>,
}

impl JobDefaults {
    /// Parse the value of `JobDefaults`: `(null)` or `Key=N,Key=N`.
    pub fn parse(value: &str) -> JobDefaults {
        let mut d = JobDefaults::default();
        for part in value.split(',') {
            match part.trim().split_once('=') {
                Some(("DefCpuPerGPU", n)) => d.cpu_per_gpu = n.trim().parse().ok(),
                Some(("DefMemPerGPU", n)) => d.mem_per_gpu_mib = n.trim().parse().ok(),
                _ => {}
            }
        }
        d
    }

    /// The partition's own value where it sets one, else the controller's.
    pub fn or(self, fallback: JobDefaults) -> JobDefaults {
        JobDefaults {
            cpu_per_gpu: self.cpu_per_gpu.or(fallback.cpu_per_gpu),
            mem_per_gpu_mib: self.mem_per_gpu_mib.or(fallback.mem_per_gpu_mib),
        }
    }
}

/// One partition and the limits that decide whether a job can ever run in it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Partition {
    pub name: String,
    /// Slurm's default partition (`Default=YES`).
    pub default: bool,
    /// `State=UP`.
    pub up: bool,
    /// `MaxTime` in seconds; `None` when unlimited.
    pub max_time_secs: Option<u64>,
    pub max_time_text: String,
    pub max_cpus_per_node: Option<u32>,
    pub max_mem_per_node_mib: Option<u64>,
    /// The partition's own `JobDefaults` (not yet merged with the controller's).
    pub job_defaults: JobDefaults,
}

/// Everything submit needs to know about the cluster.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Cluster {
    pub nodes: Vec<Node>,
    pub partitions: Vec<Partition>,
    /// The controller's `JobDefaults`.
    pub job_defaults: JobDefaults,
    /// The controller's `MaxMemPerNode`, MiB; `None` when unlimited.
    pub max_mem_per_node_mib: Option<u64>,
    pub max_array_size: Option<u64>,
    /// `SelectTypeParameters` has `Memory` (`CR_CPU_Memory`, …): memory is
    /// consumed by jobs, so it limits how many share a node.
    pub memory_consumable: bool,
    /// `AccountingStoreFlags` has `job_comment`: slurmdbd keeps each job's
    /// comment (what the job agent measured reaches `advise`).
    #[serde(skip)]
    pub job_comments_kept: bool,
}

impl Cluster {
    /// A cluster of `count` identical nodes `<prefix>1…` in `partitions`
    /// (the first is the default), for tests, benchmarks and examples.
    pub fn uniform(
        prefix: &str,
        count: usize,
        cpus: u32,
        memory_mib: u64,
        gres: &str,
        partitions: &[&str],
    ) -> Cluster {
        Cluster {
            nodes: (1..=count)
                .map(|i| Node {
                    name: format!("{prefix}{i}"),
                    cpus,
                    real_memory_mib: memory_mib,
                    memory_mib,
                    gres: gres::parse_list(gres),
                    state: "IDLE".into(),
                    partitions: partitions.iter().map(|p| p.to_string()).collect(),
                    ..Node::default()
                })
                .collect(),
            partitions: partitions
                .iter()
                .enumerate()
                .map(|(i, p)| Partition {
                    name: p.to_string(),
                    default: i == 0,
                    up: true,
                    max_time_text: "UNLIMITED".into(),
                    ..Partition::default()
                })
                .collect(),
            ..Cluster::default()
        }
    }

    pub fn partition(&self, name: &str) -> Option<&Partition> {
        self.partitions.iter().find(|p| p.name == name)
    }

    /// The partition a job without `--partition` goes to.
    pub fn default_partition(&self) -> Option<&Partition> {
        self.partitions.iter().find(|p| p.default)
    }

    /// The nodes of a partition.
    pub fn nodes_in<'a>(&'a self, partition: &'a str) -> impl Iterator<Item = &'a Node> + 'a {
        self.nodes
            .iter()
            .filter(move |n| n.partitions.iter().any(|p| p == partition))
    }

    /// Per-GPU defaults in force for a partition.
    pub fn job_defaults_for(&self, partition: &str) -> JobDefaults {
        self.partition(partition)
            .map_or(JobDefaults::default(), |p| p.job_defaults)
            .or(self.job_defaults)
    }

    /// `MaxMemPerNode` in force for a partition.
    pub fn max_mem_per_node_for(&self, partition: &str) -> Option<u64> {
        self.partition(partition)
            .and_then(|p| p.max_mem_per_node_mib)
            .or(self.max_mem_per_node_mib)
    }
}

/// Split a one-liner record (`Key=value Key=value …`) into pairs. Values may
/// contain spaces (`OS=Linux 6.1 #1 SMP`, `Reason=maintenance [root@…]`):
/// a word without `=` belongs to the value before it.
fn record_pairs(line: &str) -> Vec<(&str, String)> {
    let mut pairs: Vec<(&str, String)> = Vec::new();
    for word in line.split(' ').filter(|w| !w.is_empty()) {
        match word.split_once('=') {
            Some((k, v))
                if !k.is_empty()
                    && k.chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '/') =>
            {
                pairs.push((k, v.to_string()));
            }
            _ => {
                if let Some((_, v)) = pairs.last_mut() {
                    v.push(' ');
                    v.push_str(word);
                }
            }
        }
    }
    pairs
}

fn get<'a>(pairs: &'a [(&str, String)], key: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v.as_str())
}

/// `UNLIMITED`, `(null)`, `NONE` and friends mean "no limit" (`value::limit`).
fn limited(value: Option<&str>) -> Option<&str> {
    value.and_then(super::value::limit)
}

/// A memory size as scontrol prints it (`64000`, `62.50G`, `4096M`) in MiB.
fn mem_mib(value: &str) -> Option<u64> {
    let v = value.trim();
    let (num, mult) = match v.chars().last()? {
        'K' | 'k' => (&v[..v.len() - 1], 1.0 / 1024.0),
        'M' | 'm' => (&v[..v.len() - 1], 1.0),
        'G' | 'g' => (&v[..v.len() - 1], 1024.0),
        'T' | 't' => (&v[..v.len() - 1], 1024.0 * 1024.0),
        _ => (v, 1.0),
    };
    let n: f64 = num.parse().ok()?;
    (n.is_finite() && n >= 0.0 && n * mult < 1e15).then_some((n * mult) as u64)
}

fn parse_partition(pairs: &[(&str, String)]) -> Partition {
    let max_time = get(pairs, "MaxTime").unwrap_or("UNLIMITED");
    Partition {
        name: get(pairs, "PartitionName").unwrap_or_default().to_string(),
        default: get(pairs, "Default") == Some("YES"),
        up: get(pairs, "State").is_none_or(|s| s == "UP"),
        max_time_secs: limited(Some(max_time)).and_then(|t| super::time::parse_duration(t).ok()),
        max_time_text: max_time.to_string(),
        max_cpus_per_node: limited(get(pairs, "MaxCPUsPerNode")).and_then(|v| v.parse().ok()),
        max_mem_per_node_mib: limited(get(pairs, "MaxMemPerNode")).and_then(mem_mib),
        job_defaults: get(pairs, "JobDefaults")
            .map_or_else(JobDefaults::default, JobDefaults::parse),
    }
}

fn parse_node(pairs: &[(&str, String)]) -> Node {
    let cpus = get(pairs, "CPUEfctv")
        .or_else(|| get(pairs, "CPUTot"))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let real = get(pairs, "RealMemory")
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    let spec_limit = limited(get(pairs, "MemSpecLimit"))
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    let gres_text = limited(get(pairs, "Gres")).unwrap_or("");
    Node {
        name: get(pairs, "NodeName").unwrap_or_default().to_string(),
        cpus,
        alloc_cpus: get(pairs, "CPUAlloc")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
        real_memory_mib: real,
        memory_mib: real.saturating_sub(spec_limit),
        gres: gres::parse_list(gres_text),
        state: get(pairs, "State").unwrap_or("UNKNOWN").to_string(),
        // scontrol folds the flags into `State`.
        state_flags: Vec::new(),
        partitions: limited(get(pairs, "Partitions"))
            .map(|p| p.split(',').map(str::to_string).collect())
            .unwrap_or_default(),
        gres_used: Vec::new(),
        reason: limited(get(pairs, "Reason")).unwrap_or("").to_string(),
    }
}

/// Parse the answer to [`QUESTIONS`] (`scontrol -o`, commands on stdin).
pub fn parse(text: &str) -> Result<Cluster> {
    let mut cluster = Cluster::default();
    for line in text.lines() {
        let line = line.trim_end();
        if line.starts_with("PartitionName=") {
            cluster
                .partitions
                .push(parse_partition(&record_pairs(line)));
        } else if line.starts_with("NodeName=") {
            cluster.nodes.push(parse_node(&record_pairs(line)));
        }
    }
    // The controller's settings: `show config`'s `Key = Value` lines, read
    // by the one parser of that output (`config::ControllerConfig`).
    let config = super::config::ControllerConfig::parse(text);
    cluster.job_defaults = config
        .get("JobDefaults")
        .map_or_else(JobDefaults::default, JobDefaults::parse);
    cluster.max_mem_per_node_mib = limited(config.get("MaxMemPerNode")).and_then(mem_mib);
    cluster.max_array_size = config.get("MaxArraySize").and_then(|v| v.parse().ok());
    cluster.memory_consumable = config
        .get("SelectTypeParameters")
        .is_some_and(|v| v.to_ascii_uppercase().contains("MEMORY"));
    cluster.job_comments_kept = config.stores_job_comment();
    if cluster.nodes.is_empty() {
        bail!("Slurm described no nodes (`scontrol show node` printed none)");
    }
    Ok(cluster)
}

/// Ask the controller for the cluster's shape: one `scontrol` process.
pub fn fetch(slurm: &Slurm) -> Result<Cluster> {
    let text = slurm.stdout_with_input("scontrol", &["-o"], QUESTIONS)?;
    parse(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    const RECORDED: &str = include_str!("../../tests/data/scontrol-shape-22.05.txt");

    #[test]
    fn recorded_output_parses() {
        let c = parse(RECORDED).unwrap();
        assert_eq!(c.nodes.len(), 2);
        let n = &c.nodes[0];
        assert_eq!(
            (n.name.as_str(), n.cpus, n.memory_mib),
            ("node1", 16, 64000)
        );
        assert_eq!(n.partitions, vec!["cpu", "gpu"]);
        assert_eq!(n.gres_count("gpu", Some("1g.5gb")), 4);
        assert_eq!(n.gres_count("gpu", None), 7);
        assert_eq!(n.gres_count("shard", None), 8);
        assert!(n.is_available());
        assert_eq!(c.partitions.len(), 2);
        assert_eq!(c.default_partition().unwrap().name, "cpu");
        let gpu = c.partition("gpu").unwrap();
        assert_eq!(gpu.max_time_secs, None);
        assert_eq!(gpu.max_cpus_per_node, None);
        assert_eq!(c.max_array_size, Some(1001));
        assert!(!c.memory_consumable, "CR_CPU");
        assert!(!c.job_comments_kept, "AccountingStoreFlags = (null)");
        assert_eq!(c.job_defaults_for("gpu"), JobDefaults::default());
        assert_eq!(c.nodes_in("gpu").count(), 2);
    }

    #[test]
    fn limits_and_defaults_merge_partition_over_controller() {
        let text = "PartitionName=gpu Default=NO MaxTime=2-00:00:00 MaxCPUsPerNode=8 State=UP JobDefaults=DefMemPerGPU=5000 MaxMemPerNode=30000\n\
            PartitionName=cpu Default=YES MaxTime=UNLIMITED State=DOWN JobDefaults=(null) MaxMemPerNode=UNLIMITED\n\
            NodeName=n1 CPUTot=32 CPUEfctv=30 RealMemory=128000 MemSpecLimit=2000 Gres=(null) State=DOWN* Partitions=cpu,gpu Reason=cable pulled [root@2026-12-01T10:00:00]\n\
            JobDefaults             = DefCpuPerGPU=3\n\
            MaxMemPerNode           = 100000\n\
            SelectTypeParameters    = CR_Core_Memory\n\
            AccountingStoreFlags    = job_comment,job_env\n";
        let c = parse(text).unwrap();
        let gpu = c.partition("gpu").unwrap();
        assert_eq!(gpu.max_time_secs, Some(172800));
        assert_eq!(gpu.max_cpus_per_node, Some(8));
        assert_eq!(
            c.job_defaults_for("gpu"),
            JobDefaults {
                cpu_per_gpu: Some(3),
                mem_per_gpu_mib: Some(5000)
            }
        );
        assert_eq!(c.max_mem_per_node_for("gpu"), Some(30000));
        assert_eq!(c.max_mem_per_node_for("cpu"), Some(100000));
        assert!(!c.partition("cpu").unwrap().up);
        let n = &c.nodes[0];
        assert_eq!((n.cpus, n.memory_mib), (30, 126000));
        assert!(n.gres.is_empty());
        assert!(!n.is_available(), "DOWN* is not available");
        assert!(c.memory_consumable);
        assert!(c.job_comments_kept);
    }

    #[test]
    fn states() {
        let node = |s: &str| Node {
            state: s.into(),
            ..Node::default()
        };
        for ok in [
            "IDLE",
            "MIXED",
            "ALLOCATED",
            "IDLE+CLOUD",
            "IDLE+POWERED_DOWN",
            "MIXED+COMPLETING",
        ] {
            assert!(node(ok).is_available(), "{ok}");
        }
        for bad in [
            "DOWN",
            "IDLE+DRAIN",
            "MIXED+DRAIN",
            "DOWN*",
            "IDLE*",
            "FUTURE",
            "IDLE+FAIL",
        ] {
            assert!(!node(bad).is_available(), "{bad}");
        }
    }

    #[test]
    fn no_nodes_is_an_error() {
        assert!(parse("scontrol: show node\nNo nodes in the system\n").is_err());
    }

    #[test]
    fn memory_sizes() {
        assert_eq!(mem_mib("64000"), Some(64000));
        assert_eq!(mem_mib("62.50G"), Some(64000));
        assert_eq!(mem_mib("1T"), Some(1048576));
        assert_eq!(mem_mib("x"), None);
        assert_eq!(mem_mib("1e300G"), None);
    }
}
