//! CPUs and memory for each stage, shaped to the nodes it can run on, and the
//! check that some node can ever give a stage what it asks.
//!
//! The rule (docs/resources.md): a GPU stage on a slice gets the slice's
//! share of the node. A node's GPU compute units are the sum over its GPU
//! GRES of each one's compute slices (`1g.*` = 1, `2g.*` = 2, …, a whole GPU
//! or an untyped `gpu` = 7, the compute slices of a full A100/H100/H200).
//! Shards add no units: they are a GPU already counted, cut in `Count`
//! pieces. Share = units asked / node units; CPUs = max(1, ⌊CPUs × share⌋),
//! memory = ⌊(memory − reserve) × share⌋, taken on the smallest node of the
//! partition that has the GRES, so the request fits everywhere it could run.
//!
//! Precedence, per value: the spec, then the site file's
//! `[resources."<type>"]`, then Slurm's own `DefCpuPerGPU`/`DefMemPerGPU`
//! (then the job does not ask, and Slurm applies its default), then the share.
//! Pure: the cluster comes in as a value.

use serde::Serialize;

use crate::slurm::cluster::{Cluster, Partition};
use crate::slurm::gres::GresItem;
use crate::slurm::node::Node;

use super::gpu::parse_mig_profile;

/// Compute units of a whole GPU: the compute slices of a full A100/H100/H200.
pub const WHOLE_GPU_UNITS: u64 = 7;

/// Default CPUs and memory of a stage without a GPU (prepare, export).
pub const CPU_STAGE_CPUS: u32 = 2;
pub const CPU_STAGE_MEM_MIB: u64 = 4096;

/// Compute units of one GPU GRES of this type.
pub fn units_of(kind: Option<&str>) -> u64 {
    kind.and_then(parse_mig_profile)
        .map_or(WHOLE_GPU_UNITS, |(g, _)| u64::from(g.clamp(1, 7)))
}

/// Memory kept back for the node's own processes: about 3 %, 256 MiB to 4 GiB.
pub fn os_reserve_mib(memory_mib: u64) -> u64 {
    (memory_mib / 32).clamp(256, 4096).min(memory_mib / 2)
}

/// The GPU compute units of a node; a node that Slurm knows only through
/// shards counts one whole GPU.
pub fn node_units(node: &Node) -> u64 {
    let gpus: u64 = node
        .gres
        .iter()
        .filter(|g| g.name == "gpu")
        .map(|g| g.count.saturating_mul(units_of(g.kind.as_deref())))
        .fold(0, u64::saturating_add);
    if gpus == 0 && node.gres_count("shard", None) > 0 {
        WHOLE_GPU_UNITS
    } else {
        gpus
    }
}

/// What a stage asks of the GPU: `gpu[:type]:n` or `shard:n`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuAsk {
    pub name: String,
    pub kind: Option<String>,
    pub count: u64,
}

impl GpuAsk {
    /// From a `--gres` value such as `gpu:1g.5gb:1` or `shard:2`.
    pub fn parse(gres: &str) -> Option<GpuAsk> {
        let item: GresItem = crate::slurm::gres::parse_item(gres)?;
        Some(GpuAsk {
            name: item.name,
            kind: item.kind,
            count: item.count.max(1),
        })
    }

    pub fn is_shard(&self) -> bool {
        self.name == "shard"
    }

    /// `gpu:1g.5gb` / `shard`, for messages.
    pub fn label(&self) -> String {
        match &self.kind {
            Some(k) => format!("{}:{k}", self.name),
            None => self.name.clone(),
        }
    }

    /// How many the node has of what this asks for.
    pub fn available_on(&self, node: &Node) -> u64 {
        node.gres_count(&self.name, self.kind.as_deref())
    }

    /// Counted against Slurm's per-GPU defaults (shards are not GPUs).
    pub fn gpus(&self) -> u64 {
        if self.is_shard() {
            0
        } else {
            self.count
        }
    }

    /// The share of the node this ask holds, as numerator / denominator.
    pub fn share_of(&self, node: &Node) -> Option<(u64, u64)> {
        let total = node_units(node);
        if total == 0 {
            return None;
        }
        if !self.is_shard() {
            return Some((
                self.count.saturating_mul(units_of(self.kind.as_deref())),
                total,
            ));
        }
        // Shards cut the GPUs that carry them: typed (`shard:a100:8`) when
        // Slurm says which, else the node's whole GPUs, else one GPU.
        let mut carried_units = 0u64;
        let mut shards = 0u64;
        for s in node
            .gres
            .iter()
            .filter(|g| g.name == "shard" && g.count > 0)
        {
            shards += s.count;
            carried_units += match &s.kind {
                Some(k) => node
                    .gres_count("gpu", Some(k))
                    .max(1)
                    .saturating_mul(units_of(Some(k))),
                None => {
                    let whole: u64 = node
                        .gres
                        .iter()
                        .filter(|g| {
                            g.name == "gpu" && units_of(g.kind.as_deref()) == WHOLE_GPU_UNITS
                        })
                        .map(|g| g.count)
                        .sum();
                    whole.max(1) * WHOLE_GPU_UNITS
                }
            };
        }
        if shards == 0 {
            return None;
        }
        Some((
            self.count.saturating_mul(carried_units),
            shards.saturating_mul(total),
        ))
    }
}

/// Where a stage's CPU or memory figure came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// The spec says so (`cpus`, `mem`).
    Spec,
    /// The spec's `workers` + 1.
    Workers,
    /// The site file's `[resources."<type>"]`.
    Site,
    /// Slurm's `DefCpuPerGPU`/`DefMemPerGPU`: the job does not ask.
    Slurm,
    /// The slice's share of the node.
    Share,
    /// The default for a stage without a GPU.
    Default,
}

impl Source {
    pub fn words(self) -> &'static str {
        match self {
            Source::Spec => "from the spec",
            Source::Workers => "workers + 1, from the spec",
            Source::Site => "from the site file",
            Source::Slurm => "Slurm's default",
            Source::Share => "the slice's share",
            Source::Default => "the CPU-stage default",
        }
    }
}

/// What the spec and the site say for one stage, before shaping.
#[derive(Debug, Clone, Default)]
pub struct Wants {
    pub cpus: Option<(u32, Source)>,
    pub mem_mib: Option<(u64, Source)>,
}

/// The shaped request of one stage.
#[derive(Debug, Clone, Serialize)]
pub struct Shaped {
    /// CPUs the job gets (asked, or Slurm's default when `cpus_source` is `Slurm`).
    pub cpus: u32,
    pub cpus_source: Source,
    pub mem_mib: u64,
    pub mem_source: Source,
    /// The partition the check used (the stage's, or the cluster's default).
    pub partition: String,
    /// One line of arithmetic, for `--explain`.
    pub explanation: String,
    /// How many such jobs fit at once on the smallest node, and its slices.
    pub per_node: Option<(u64, u64, String)>,
}

/// Why a stage can never run: which value, what it asks, the largest offer.
#[derive(Debug, Clone, PartialEq)]
pub struct Unfit {
    pub what: Unfitting,
    pub message: String,
    pub help: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unfitting {
    Partition,
    Gres,
    Cpus,
    Mem,
    Time,
}

/// `4.0 GiB`, `512 MiB`.
pub fn show_mib(mib: u64) -> String {
    if mib >= 1024 {
        format!("{:.1} GiB", mib as f64 / 1024.0)
    } else {
        format!("{mib} MiB")
    }
}

/// A memory size Slurm reads: `4133M`, `8G`.
pub fn slurm_mem(mib: u64) -> String {
    if mib > 0 && mib % 1024 == 0 {
        format!("{}G", mib / 1024)
    } else {
        format!("{mib}M")
    }
}

/// The stage's request, shaped and checked against the cluster.
pub struct Stage<'a> {
    /// `train`, `prepare`, … for messages.
    pub name: &'a str,
    /// The spec table its values are set in (`[resources]`, `[stages.prepare]`), for hints.
    pub table: &'a str,
    /// The stage's `--partition`, if it sets one.
    pub partition: Option<&'a str>,
    pub gpu: Option<&'a GpuAsk>,
    pub wants: Wants,
    pub time_secs: u64,
    pub time_text: &'a str,
}

/// The nodes of partition `pname` that can run the stage: up, with its GRES
/// in the count asked; else why none can. Also the GRES as the messages say
/// it (` with gpu:…`, or nothing).
fn candidate_nodes<'c>(
    cluster: &'c Cluster,
    stage: &Stage<'_>,
    pname: &'c str,
) -> Result<(Vec<&'c Node>, String), Unfit> {
    let in_partition: Vec<&Node> = cluster.nodes_in(pname).collect();
    let with_gres: Vec<&Node> = match stage.gpu {
        Some(g) => in_partition
            .iter()
            .copied()
            .filter(|n| g.available_on(n) > 0)
            .collect(),
        None => in_partition.clone(),
    };
    let what = match stage.gpu {
        Some(g) => format!(" with {}", g.label()),
        None => "".to_string(),
    };
    if with_gres.is_empty() {
        return Err(no_gres(cluster, stage, pname, &in_partition));
    }
    let candidates: Vec<&Node> = with_gres
        .iter()
        .copied()
        .filter(|n| n.is_available())
        .collect();
    if candidates.is_empty() {
        let states: Vec<String> = with_gres
            .iter()
            .map(|n| format!("{} {}", n.name, n.state.to_lowercase()))
            .collect();
        return Err(Unfit {
            what: Unfitting::Partition,
            message: format!(
                "{} cannot run: every node{what} in partition {pname} is down or drained ({})",
                stage.name,
                states.join(", ")
            ),
            help: "wait until an administrator resumes the nodes (`sinfo -R` says why they are out), or choose another partition".into(),
        });
    }
    if let Some(g) = stage.gpu {
        let max = candidates
            .iter()
            .map(|n| g.available_on(n))
            .max()
            .unwrap_or(0);
        if g.count > max {
            return Err(Unfit {
                what: Unfitting::Gres,
                message: format!(
                    "{} asks {}:{}; the most any node in partition {pname} has is {max}",
                    stage.name,
                    g.label(),
                    g.count
                ),
                help: if g.is_shard() {
                    format!("ask for at most {max}")
                } else {
                    format!(
                        "ask for at most {max}: a training runs on the GPUs of one node (Ultralytics' DDP), never across nodes"
                    )
                },
            });
        }
    }

    // Several GPUs of one node: only the nodes that have that many can run it.
    let candidates: Vec<&Node> = match stage.gpu {
        Some(g) => candidates
            .into_iter()
            .filter(|n| g.available_on(n) >= g.count)
            .collect(),
        None => candidates,
    };
    Ok((candidates, what))
}

/// Shape a stage to the nodes it can run on and check that one can run it.
pub fn shape(cluster: &Cluster, stage: &Stage<'_>) -> Result<Shaped, Unfit> {
    let partition = resolve_partition(cluster, stage)?;
    let pname = partition.name.as_str();
    let (candidates, what) = candidate_nodes(cluster, stage, pname)?;
    let defaults = cluster.job_defaults_for(pname);
    let gpus = stage.gpu.map_or(0, GpuAsk::gpus);
    // The smallest node decides the share, so the request fits on every node.
    let share = |n: &Node| -> Option<(u32, u64)> {
        let (num, den) = stage.gpu?.share_of(n)?;
        let cpus = (u64::from(n.cpus).saturating_mul(num) / den).max(1);
        let usable = n.memory_mib.saturating_sub(os_reserve_mib(n.memory_mib));
        let mem = (u128::from(usable) * u128::from(num) / u128::from(den)) as u64;
        Some((u32::try_from(cpus).unwrap_or(u32::MAX), mem.max(1)))
    };
    let smallest = candidates
        .iter()
        .copied()
        .filter_map(|n| share(n).map(|s| (n, s)))
        .min_by(|(a, sa), (b, sb)| sa.cmp(sb).then_with(|| a.name.cmp(&b.name)));

    let (cpus, cpus_source) = match (stage.wants.cpus, defaults.cpu_per_gpu, smallest) {
        (Some(w), _, _) => w,
        (None, Some(per), _) if gpus > 0 => (
            u32::try_from(u64::from(per).saturating_mul(gpus)).unwrap_or(u32::MAX),
            Source::Slurm,
        ),
        (None, _, Some((_, (c, _)))) => (c, Source::Share),
        (None, _, None) => {
            let smallest_cpus = candidates.iter().map(|n| n.cpus).min().unwrap_or(1).max(1);
            (CPU_STAGE_CPUS.min(smallest_cpus), Source::Default)
        }
    };
    let (mem_mib, mem_source) = match (stage.wants.mem_mib, defaults.mem_per_gpu_mib, smallest) {
        (Some(w), _, _) => w,
        (None, Some(per), _) if gpus > 0 => (per.saturating_mul(gpus), Source::Slurm),
        (None, _, Some((_, (_, m)))) => (m, Source::Share),
        (None, _, None) => {
            let smallest_mem = candidates
                .iter()
                .map(|n| n.memory_mib.saturating_sub(os_reserve_mib(n.memory_mib)))
                .min()
                .unwrap_or(CPU_STAGE_MEM_MIB)
                .max(1);
            (CPU_STAGE_MEM_MIB.min(smallest_mem), Source::Default)
        }
    };

    check_fit(
        cluster,
        stage,
        partition,
        &candidates,
        cpus,
        cpus_source,
        mem_mib,
        mem_source,
        &what,
    )?;

    let explanation = match (stage.gpu, smallest) {
        (Some(g), Some((n, _))) => {
            let (num, den) = g.share_of(n).unwrap_or((0, 1));
            format!(
                "{}: {} CPUs, {}, {} GPU units; {} = {} → {} CPU{} ({}), {} ({})",
                n.name,
                n.cpus,
                show_mib(n.memory_mib),
                node_units(n),
                match g.count {
                    1 => g.label().trim_start_matches("gpu:").to_string(),
                    c => format!("{}:{c}", g.label().trim_start_matches("gpu:")),
                },
                fraction(num, den),
                cpus,
                if cpus == 1 { "" } else { "s" },
                cpus_source.words(),
                show_mib(mem_mib),
                mem_source.words(),
            )
        }
        _ => format!(
            "{} CPU{} ({}), {} ({}) in partition {pname}",
            cpus,
            if cpus == 1 { "" } else { "s" },
            cpus_source.words(),
            show_mib(mem_mib),
            mem_source.words()
        ),
    };
    let per_node = match (stage.gpu, smallest) {
        (Some(g), Some((n, _))) => {
            let slices = g.available_on(n) / g.count.max(1);
            let by_cpu = u64::from(n.cpus) / u64::from(cpus.max(1));
            let by_mem = if cluster.memory_consumable {
                n.memory_mib / mem_mib.max(1)
            } else {
                u64::MAX
            };
            Some((slices.min(by_cpu).min(by_mem), slices, n.name.clone()))
        }
        _ => None,
    };
    Ok(Shaped {
        cpus,
        cpus_source,
        mem_mib,
        mem_source,
        partition: pname.to_string(),
        explanation,
        per_node,
    })
}

fn fraction(num: u64, den: u64) -> String {
    fn gcd(a: u64, b: u64) -> u64 {
        if b == 0 {
            a
        } else {
            gcd(b, a % b)
        }
    }
    let g = gcd(num, den).max(1);
    format!("{}/{}", num / g, den / g)
}

fn resolve_partition<'c>(cluster: &'c Cluster, stage: &Stage<'_>) -> Result<&'c Partition, Unfit> {
    let names = || {
        cluster
            .partitions
            .iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match stage.partition {
        Some(p) => cluster.partition(p).ok_or_else(|| Unfit {
            what: Unfitting::Partition,
            message: format!(
                "{} goes to partition {p}, which the cluster does not have (it has {})",
                stage.name,
                names()
            ),
            help: match crate::suggest::closest(
                p,
                cluster.partitions.iter().map(|x| x.name.as_str()),
            ) {
                Some(c) => format!("did you mean `{c}`?"),
                None => "name one of the cluster's partitions (`sinfo -s` lists them)".into(),
            },
        }),
        None => cluster.default_partition().ok_or_else(|| Unfit {
            what: Unfitting::Partition,
            message: format!(
                "{} names no partition and the cluster has no default one (it has {})",
                stage.name,
                names()
            ),
            help: "set `[run] partition` (or `partition` in the stage's table)".into(),
        }),
    }
}

fn no_gres(cluster: &Cluster, stage: &Stage<'_>, pname: &str, in_partition: &[&Node]) -> Unfit {
    let Some(g) = stage.gpu else {
        return Unfit {
            what: Unfitting::Partition,
            message: format!(
                "{} goes to partition {pname}, which has no nodes",
                stage.name
            ),
            help: "choose another partition (`sinfo -s` lists them)".into(),
        };
    };
    let mut elsewhere: Vec<&str> = cluster
        .partitions
        .iter()
        .filter(|p| cluster.nodes_in(&p.name).any(|n| g.available_on(n) > 0))
        .map(|p| p.name.as_str())
        .collect();
    elsewhere.dedup();
    let has: Vec<String> = {
        let mut kinds: Vec<String> = in_partition
            .iter()
            .flat_map(|n| n.gres.iter())
            .filter(|i| i.count > 0)
            .map(|i| i.key())
            .collect();
        kinds.sort();
        kinds.dedup();
        kinds
    };
    Unfit {
        what: Unfitting::Gres,
        message: format!(
            "{} asks {}, which no node in partition {pname} has ({})",
            stage.name,
            g.label(),
            if has.is_empty() {
                "it has no GPUs".to_string()
            } else {
                format!("it has {}", has.join(", "))
            }
        ),
        help: if elsewhere.is_empty() {
            "ask for a GPU type the partition has".into()
        } else {
            format!(
                "use partition {} (`[run] partition`), which has it",
                elsewhere.join(" or ")
            )
        },
    }
}

#[expect(
    clippy::too_many_arguments,
    reason = "one check over the values it explains"
)]
fn check_fit(
    cluster: &Cluster,
    stage: &Stage<'_>,
    partition: &Partition,
    candidates: &[&Node],
    cpus: u32,
    cpus_source: Source,
    mem_mib: u64,
    mem_source: Source,
    what: &str,
) -> Result<(), Unfit> {
    let pname = partition.name.as_str();
    let fix_cpus = |largest: u32| match cpus_source {
        Source::Spec => format!(
            "set {} cpus = {largest} or less, or leave it out",
            stage.table
        ),
        Source::Workers => format!(
            "set [train] workers = {} or less, or leave it out",
            largest.saturating_sub(1)
        ),
        Source::Site => "the site file's [resources] sets it: ask your administrator".into(),
        Source::Slurm => "Slurm's DefCpuPerGPU sets it: ask your administrator".into(),
        Source::Share | Source::Default => format!("set {} cpus = {largest} or less", stage.table),
    };
    let fix_mem = |largest: u64| match mem_source {
        Source::Spec => format!(
            "set {} mem = \"{}G\" or leave it out",
            stage.table,
            (largest / 2 / 1024).max(1)
        ),
        Source::Site => "the site file's [resources] sets it: ask your administrator".into(),
        Source::Slurm => "Slurm's DefMemPerGPU sets it: ask your administrator".into(),
        _ => "set `mem` lower".into(),
    };
    if let Some(max) = partition.max_time_secs {
        if stage.time_secs > max {
            return Err(Unfit {
                what: Unfitting::Time,
                message: format!(
                    "{} asks a time limit of {}; partition {pname} allows at most {} (MaxTime)",
                    stage.name, stage.time_text, partition.max_time_text
                ),
                help: format!(
                    "set `time` to at most {} (training resumes from last.pt when requeued)",
                    partition.max_time_text
                ),
            });
        }
    }
    let cpu_cap = |n: &Node| match partition.max_cpus_per_node {
        Some(m) => n.cpus.min(m),
        None => n.cpus,
    };
    let mem_cap = |n: &Node| match cluster.max_mem_per_node_for(pname) {
        Some(m) => n.memory_mib.min(m),
        None => n.memory_mib,
    };
    let most_cpus = candidates.iter().map(|n| cpu_cap(n)).max().unwrap_or(0);
    if cpus > most_cpus {
        return Err(Unfit {
            what: Unfitting::Cpus,
            message: format!(
                "{} asks {cpus} CPUs ({}); the largest node{what} in partition {pname} has {most_cpus}",
                stage.name,
                cpus_source.words()
            ),
            help: fix_cpus(most_cpus),
        });
    }
    let most_mem = candidates.iter().map(|n| mem_cap(n)).max().unwrap_or(0);
    if mem_mib > most_mem {
        return Err(Unfit {
            what: Unfitting::Mem,
            message: format!(
                "{} asks {} ({}); the largest node{what} in partition {pname} has {}",
                stage.name,
                show_mib(mem_mib),
                mem_source.words(),
                show_mib(most_mem)
            ),
            help: fix_mem(most_mem),
        });
    }
    if !candidates
        .iter()
        .any(|n| cpus <= cpu_cap(n) && mem_mib <= mem_cap(n))
    {
        return Err(Unfit {
            what: Unfitting::Mem,
            message: format!(
                "{} asks {cpus} CPUs and {}; no node{what} in partition {pname} has both",
                stage.name,
                show_mib(mem_mib)
            ),
            help: "ask for fewer CPUs or less memory".into(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slurm::cluster::{JobDefaults, Partition};

    pub fn node(name: &str, cpus: u32, mem: u64, gres: &str, parts: &str) -> Node {
        Node {
            name: name.into(),
            cpus,
            real_memory_mib: mem,
            memory_mib: mem,
            gres: crate::slurm::gres::parse_list(gres),
            state: "IDLE".into(),
            partitions: parts.split(',').map(str::to_string).collect(),
            ..Node::default()
        }
    }

    fn partition(name: &str, default: bool) -> Partition {
        Partition {
            name: name.into(),
            default,
            up: true,
            max_time_text: "UNLIMITED".into(),
            ..Partition::default()
        }
    }

    fn cluster(nodes: Vec<Node>) -> Cluster {
        let mut parts: Vec<String> = nodes.iter().flat_map(|n| n.partitions.clone()).collect();
        parts.sort();
        parts.dedup();
        Cluster {
            partitions: parts.iter().map(|p| partition(p, p == "cpu")).collect(),
            nodes,
            ..Cluster::default()
        }
    }

    const LOCAL: &str = "gpu:1g.5gb:4,gpu:2g.10gb:2,gpu:a100:1,shard:a100:8";

    fn train<'a>(gpu: &'a GpuAsk, wants: Wants) -> Stage<'a> {
        Stage {
            name: "train",
            table: "[resources]",
            partition: Some("gpu"),
            gpu: Some(gpu),
            wants,
            time_secs: 8 * 3600,
            time_text: "08:00:00",
        }
    }

    fn ask(g: &str) -> GpuAsk {
        GpuAsk::parse(g).unwrap()
    }

    #[test]
    fn units_and_shares_on_the_local_node() {
        let n = node("node1", 16, 64000, LOCAL, "cpu,gpu");
        assert_eq!(node_units(&n), 4 + 2 * 2 + 7);
        assert_eq!(ask("gpu:1g.5gb:1").share_of(&n), Some((1, 15)));
        assert_eq!(ask("gpu:2g.10gb:1").share_of(&n), Some((2, 15)));
        assert_eq!(ask("gpu:a100:1").share_of(&n), Some((7, 15)));
        // 8 shards cut the one a100: one shard is 7/8 of a unit.
        assert_eq!(ask("shard:2").share_of(&n), Some((14, 120)));
    }

    #[test]
    fn a_1g_slice_on_the_local_node_gets_one_cpu_and_its_memory_share() {
        let c = cluster(vec![node("node1", 16, 64000, LOCAL, "cpu,gpu")]);
        let g = ask("gpu:1g.5gb:1");
        let s = shape(&c, &train(&g, Wants::default())).unwrap();
        assert_eq!((s.cpus, s.cpus_source), (1, Source::Share));
        // (64000 - 2000 reserve) / 15
        assert_eq!((s.mem_mib, s.mem_source), (4133, Source::Share));
        assert_eq!(s.per_node, Some((4, 4, "node1".into())));
        assert!(
            s.explanation
                .starts_with("node1: 16 CPUs, 62.5 GiB, 15 GPU units; 1g.5gb = 1/15 → 1 CPU"),
            "{}",
            s.explanation
        );
    }

    #[test]
    fn an_8x_a100_node_cut_into_56_slices_fits_56_trainings() {
        let c = cluster(vec![node("big", 128, 1_000_000, "gpu:1g.5gb:56", "gpu")]);
        let g = ask("gpu:1g.5gb:1");
        let s = shape(&c, &train(&g, Wants::default())).unwrap();
        assert_eq!(s.cpus, 2, "128 CPUs / 56 units");
        assert_eq!(s.per_node.unwrap().0, 56);
    }

    #[test]
    fn the_smallest_node_with_the_type_decides() {
        let c = cluster(vec![
            node("fat", 64, 512_000, "gpu:1g.5gb:7", "gpu"),
            node("thin", 16, 16000, "gpu:1g.5gb:7", "gpu"),
            node("other", 2, 1000, "gpu:a100:1", "gpu"),
        ]);
        let g = ask("gpu:1g.5gb:1");
        let s = shape(&c, &train(&g, Wants::default())).unwrap();
        assert_eq!(s.cpus, 2, "16 CPUs / 7 units on thin");
        assert_eq!(s.mem_mib, (16000 - 500) / 7);
        assert!(s.explanation.starts_with("thin:"), "{}", s.explanation);
    }

    #[test]
    fn slurm_per_gpu_defaults_win_over_the_share_and_spec_over_both() {
        let mut c = cluster(vec![node("node1", 16, 64000, LOCAL, "cpu,gpu")]);
        c.job_defaults = JobDefaults {
            cpu_per_gpu: Some(3),
            mem_per_gpu_mib: None,
        };
        c.partitions[1].job_defaults.mem_per_gpu_mib = Some(5000);
        let g = ask("gpu:1g.5gb:1");
        let s = shape(&c, &train(&g, Wants::default())).unwrap();
        assert_eq!((s.cpus, s.cpus_source), (3, Source::Slurm));
        assert_eq!((s.mem_mib, s.mem_source), (5000, Source::Slurm));
        let wants = Wants {
            cpus: Some((2, Source::Spec)),
            mem_mib: Some((3000, Source::Site)),
        };
        let s = shape(&c, &train(&g, wants)).unwrap();
        assert_eq!(
            (s.cpus, s.cpus_source, s.mem_mib, s.mem_source),
            (2, Source::Spec, 3000, Source::Site)
        );
        // Shards are no GPUs: Slurm's per-GPU default does not apply to them.
        let sh = ask("shard:1");
        let s = shape(&c, &train(&sh, Wants::default())).unwrap();
        assert_eq!(s.cpus_source, Source::Share);
    }

    #[test]
    fn more_memory_than_any_node_has_is_refused_with_the_largest_offer() {
        let c = cluster(vec![node("node1", 16, 16000, LOCAL, "cpu,gpu")]);
        let g = ask("gpu:1g.5gb:1");
        let wants = Wants {
            cpus: None,
            mem_mib: Some((16384, Source::Spec)),
        };
        let e = shape(&c, &train(&g, wants)).unwrap_err();
        assert_eq!(e.what, Unfitting::Mem);
        assert_eq!(
            e.message,
            "train asks 16.0 GiB (from the spec); the largest node with gpu:1g.5gb in partition gpu has 15.6 GiB"
        );
        assert_eq!(e.help, "set [resources] mem = \"7G\" or leave it out");
    }

    #[test]
    fn too_many_cpus_from_workers_name_workers() {
        let c = cluster(vec![node("node1", 8, 64000, LOCAL, "cpu,gpu")]);
        let g = ask("gpu:1g.5gb:1");
        let wants = Wants {
            cpus: Some((9, Source::Workers)),
            mem_mib: None,
        };
        let e = shape(&c, &train(&g, wants)).unwrap_err();
        assert_eq!(e.what, Unfitting::Cpus);
        assert!(e.message.contains("asks 9 CPUs (workers + 1, from the spec); the largest node with gpu:1g.5gb in partition gpu has 8"), "{}", e.message);
        assert!(e.help.contains("workers"));
    }

    #[test]
    fn partition_limits_are_checked() {
        let mut c = cluster(vec![node("node1", 16, 64000, LOCAL, "cpu,gpu")]);
        let gpu = c.partitions.iter_mut().find(|p| p.name == "gpu").unwrap();
        gpu.max_time_secs = Some(4 * 3600);
        gpu.max_time_text = "04:00:00".into();
        gpu.max_cpus_per_node = Some(4);
        let g = ask("gpu:1g.5gb:1");
        let e = shape(&c, &train(&g, Wants::default())).unwrap_err();
        assert_eq!(e.what, Unfitting::Time);
        let mut st = train(
            &g,
            Wants {
                cpus: Some((5, Source::Spec)),
                mem_mib: None,
            },
        );
        st.time_secs = 3600;
        let e = shape(&c, &st).unwrap_err();
        assert_eq!(e.what, Unfitting::Cpus, "{e:?}");
        c.max_mem_per_node_mib = Some(8000);
        let st = Stage {
            time_secs: 60,
            ..train(
                &g,
                Wants {
                    cpus: None,
                    mem_mib: Some((9000, Source::Spec)),
                },
            )
        };
        assert_eq!(shape(&c, &st).unwrap_err().what, Unfitting::Mem);
    }

    #[test]
    fn a_type_the_partition_lacks_names_the_partitions_that_have_it() {
        let c = cluster(vec![
            node("c1", 32, 64000, "", "cpu"),
            node("g1", 16, 64000, LOCAL, "gpu"),
        ]);
        let g = ask("gpu:1g.5gb:1");
        let mut st = train(&g, Wants::default());
        st.partition = None; // the default partition, cpu
        let e = shape(&c, &st).unwrap_err();
        assert_eq!(e.what, Unfitting::Gres);
        assert!(
            e.message.contains("no node in partition cpu has"),
            "{}",
            e.message
        );
        assert!(e.help.contains("use partition gpu"), "{}", e.help);
        st.partition = Some("gpx");
        let e = shape(&c, &st).unwrap_err();
        assert!(
            e.message.contains("does not have (it has cpu, gpu)"),
            "{}",
            e.message
        );
        assert!(e.help.contains("`gpu`"), "{}", e.help);
    }

    #[test]
    fn down_and_drained_nodes_do_not_count() {
        let mut a = node("node1", 16, 64000, LOCAL, "gpu");
        a.state = "DOWN*".into();
        let mut b = node("node2", 64, 256000, LOCAL, "gpu");
        b.state = "IDLE+DRAIN".into();
        let g = ask("gpu:1g.5gb:1");
        let e = shape(
            &cluster(vec![a.clone(), b.clone()]),
            &train(&g, Wants::default()),
        )
        .unwrap_err();
        assert!(
            e.message
                .contains("down or drained (node1 down*, node2 idle+drain)"),
            "{}",
            e.message
        );
        // The big node is drained: 32 CPUs fit nowhere that is up.
        let up = node("node3", 16, 64000, LOCAL, "gpu");
        let wants = Wants {
            cpus: Some((32, Source::Spec)),
            mem_mib: None,
        };
        let e = shape(&cluster(vec![a, b, up]), &train(&g, wants)).unwrap_err();
        assert_eq!(e.what, Unfitting::Cpus);
    }

    #[test]
    fn cpu_stages_get_modest_defaults_that_fit() {
        let c = cluster(vec![node("tiny", 1, 2048, "", "cpu")]);
        let st = Stage {
            name: "prepare",
            table: "[stages.prepare]",
            partition: None,
            gpu: None,
            wants: Wants::default(),
            time_secs: 3600,
            time_text: "01:00:00",
        };
        let s = shape(&c, &st).unwrap();
        assert_eq!(
            (s.cpus, s.mem_mib, s.cpus_source),
            (1, 1792, Source::Default)
        );
    }

    #[test]
    fn memory_bounds_concurrency_only_when_slurm_counts_it() {
        let mut c = cluster(vec![node("node1", 16, 64000, "gpu:1g.5gb:7", "gpu")]);
        let g = ask("gpu:1g.5gb:1");
        let wants = || Wants {
            cpus: None,
            mem_mib: Some((16000, Source::Spec)),
        };
        assert_eq!(
            shape(&c, &train(&g, wants())).unwrap().per_node.unwrap().0,
            7
        );
        c.memory_consumable = true;
        assert_eq!(
            shape(&c, &train(&g, wants())).unwrap().per_node.unwrap().0,
            4
        );
    }

    #[test]
    fn slurm_memory_sizes() {
        assert_eq!(slurm_mem(4133), "4133M");
        assert_eq!(slurm_mem(8192), "8G");
        assert_eq!(show_mib(4133), "4.0 GiB");
        assert_eq!(show_mib(500), "500 MiB");
    }
}
