//! Writing this node's block of gres.conf, and the slurm.conf lines that match it.
//!
//! One explicit line per MIG instance, the way Slurm's NVML autodetect
//! describes it (`gpu_nvml.c`): the parent `/dev/nvidia<minor>` plus the GPU-
//! and compute-instance capability files, as one GRES through
//! `MultipleFiles=`. Whole GPUs get `File=/dev/nvidia<minor>` and a type, and
//! optionally `Name=shard Count=N` on the same file. Every line carries
//! `NodeName=<node> AutoDetect=off`. Only the block between
//! `# BEGIN yolo-sched node-setup <node>` and `# END …` is ever rewritten.
//!
//! `block` renders the block, `splice` puts it into a file's text,
//! `slurm_conf` gives the matching slurm.conf lines, `check` parses a written
//! file back, `devices` writes the marker-less lines of the local test
//! cluster's fake device files.

mod block;
mod check;
mod devices;
#[cfg(test)]
mod fixtures;
mod slurm_conf;
mod splice;

pub use block::{
    gpu_type_name, markers, render_block, GpuGres, GpuUsage, MigSlice, NodeGres, RenderOptions,
    BEGIN_MARKER, END_MARKER,
};
pub use check::check_written;
pub use devices::render_device_lines;
pub use slurm_conf::{gres_counts, slurm_conf_lines, SlurmConfLines};
pub use splice::{replace_block, BlockEdit};
