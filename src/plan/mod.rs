//! From a validated spec to a stage graph with resources: what `submit` will
//! ask Slurm for. Pure: the cluster's offer and the site policy come in as
//! values, so every rule is tested without Slurm.
//!
//! `graph` holds the plan's values, `build` makes them (`plan`), `shape` sizes
//! each stage's CPUs and memory through `resources`.

mod build;
pub mod estimate;
pub mod gpu;
mod graph;
pub(crate) mod policy;
pub(crate) mod pools;
pub mod resources;
mod shape;

pub use build::plan;
pub use estimate::Estimate;
pub use gpu::{GpuChoice, Offer};
pub use graph::{stage_name, ArraySpec, DepKind, Dependency, Plan, PlannedStage};
pub use policy::Policy;

/// Clusters for the planner's and the escalation's unit tests.
#[cfg(test)]
pub(crate) mod test_clusters {
    use crate::slurm::cluster::Cluster;

    /// The recorded cluster plus an exclusive pool, as `slurm/cluster.sh`
    /// builds it: node3 with four A100s (32 CPUs), node4 with eight H100s
    /// (64 CPUs), both only in partition `pool`.
    pub(crate) fn pool_cluster() -> Cluster {
        let recorded = include_str!("../../tests/data/scontrol-shape-22.05.txt");
        let node1 = recorded
            .lines()
            .find(|l| l.starts_with("NodeName=node1"))
            .unwrap();
        let gpu = recorded
            .lines()
            .find(|l| l.starts_with("PartitionName=gpu"))
            .unwrap();
        let node = |name: &str, gres: &str, cpus: u32, mem: u32| {
            node1
                .replace("NodeName=node1", &format!("NodeName={name}"))
                .replace(
                    "Gres=gpu:1g.5gb:4,gpu:2g.10gb:2,gpu:a100:1,shard:1g.5gb:0,shard:2g.10gb:0,shard:a100:8",
                    &format!("Gres={gres}"),
                )
                .replace("CPUTot=16", &format!("CPUTot={cpus}"))
                .replace("CPUEfctv=16", &format!("CPUEfctv={cpus}"))
                .replace("RealMemory=64000", &format!("RealMemory={mem}"))
                .replace("Partitions=cpu,gpu", "Partitions=pool")
        };
        let text = recorded
            .replace(
                "scontrol: show node\n",
                &format!(
                    "scontrol: show node\n{}\n{}\n",
                    node("node3", "gpu:a100:4", 32, 256000),
                    node("node4", "gpu:h100:8", 64, 512000)
                ),
            )
            .replace(
                "scontrol: show node\n",
                &format!(
                    "{}\nscontrol: show node\n",
                    gpu.replace("PartitionName=gpu", "PartitionName=pool")
                        .replace("Nodes=node[1-2]", "Nodes=node[3-4]")
                ),
            );
        crate::slurm::cluster::parse(&text).unwrap()
    }
}
