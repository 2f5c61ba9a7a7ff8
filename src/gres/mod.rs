//! gres.conf for MIG nodes, pure: reading, rendering this node's block, the
//! matching slurm.conf lines, and diffs for `--dry-run`.
//!
//! Effects stay with the caller: it reads `mig-minors` (under `--sysroot`),
//! and writes with `fsutil::write_with_backup`, passing `render::check_written`
//! as the parse-back check. See `docs/mig-layouts.md` §gres.conf.

pub(crate) mod conf;
pub(crate) mod diff;
pub(crate) mod hostlist;
pub(crate) mod minors;
pub(crate) mod render;

pub use conf::{parse, GresConf, GresLine};

/// The largest gres.conf (a slurm.conf include, `mig-minors`) read: a
/// node's is a few KiB.
pub const CONF_LIMIT: u64 = 4 << 20;
pub use diff::unified_diff;
pub use minors::{mig_minors_path, MigMinors, MIG_MINORS};
pub use render::{
    check_written, gpu_type_name, gres_counts, markers, render_block, replace_block,
    slurm_conf_lines, BlockEdit, GpuGres, GpuUsage, MigSlice, NodeGres, RenderOptions,
    SlurmConfLines,
};
