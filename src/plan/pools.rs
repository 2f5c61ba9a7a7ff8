//! The site's GPU pools (`[pools]`): which partition and GRES types small,
//! medium and large jobs go to. Read by `policy` from the site file and used
//! by `gpu` to choose; a file of its own so neither leads back to the other.

use serde::{Deserialize, Serialize};

/// The site's pools and memory overrides (`[pools]`, `[gpu_memory]`).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Pools {
    /// Small jobs: MIG slices.
    pub mig: Option<Pool>,
    /// Medium jobs: shards of GPUs without MIG.
    pub shared: Option<SharedPool>,
    /// Large jobs: whole GPUs.
    pub exclusive: Option<Pool>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Pool {
    /// Partition the pool's jobs go to (else the spec's, else Slurm's default).
    pub partition: Option<String>,
    /// GRES types that belong to the pool (else every type of its kind).
    pub types: Option<Vec<String>>,
    /// The exclusive pool only: the most whole GPUs of one node one training
    /// may take. `auto` splits a training over several GPUs only when this is
    /// 2 or more; a count the spec names is checked against it when set.
    pub max_gpus: Option<u32>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SharedPool {
    pub partition: Option<String>,
    /// Memory one shard stands for, GiB: `shard:N` with N = ceil(need / shard_gib).
    pub shard_gib: f64,
    /// Jobs needing more than this go to the exclusive pool.
    pub max_gib: f64,
}
