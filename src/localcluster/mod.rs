//! The local test cluster's configuration (`slurm/cluster.sh`): slurm.conf,
//! gres.conf and cgroup.conf, and how many fake device files each node needs,
//! from the script's settings. Pure: the caller (`src/bin/cluster-conf.rs`)
//! reads the files named in the settings and writes the results; the shell
//! script installs them and starts the daemons.
//!
//! The nodes: `node1..nodeN` (the standard shape, or a `NODE_GRES` line's),
//! `small1`, with `POOL=1` the exclusive pool `pool1` and `pool2`, and with
//! `MIG_NODE=1` the MIG node `mig1`, whose `Gres=` comes from node-setup's
//! include and whose gres.conf lines are node-setup's block, kept from the
//! existing gres.conf (`kept`).

mod kept;
mod node_gres;
mod settings;
mod write;

pub use kept::node_setup_blocks;
pub use node_gres::{parse_node_gres, NodeGresFile};
pub use settings::{RawSettings, Settings};
pub use write::{render, Files, Inputs, Override};
