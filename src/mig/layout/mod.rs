//! MIG layouts: which profiles each GPU of a node should be cut into.
//!
//! A layout is a list of entries; each entry selects GPUs (all, by index, by
//! model name, or both) and says either `mig = false` or what to create. Layouts
//! come from `--layout` (`1g.5gb*7`, `3g.20gb,2g.10gb,1g.5gb*2`,
//! `3g.20gb=1,1g.5gb=2`, or a built-in word), or from named tables in the site
//! file (`[node_setup.layouts.<name>]`, schema in `docs/mig-layouts.md`). This
//! module only parses; `planner` checks a layout against a GPU's geometry.
//!
//! `text` is the command-line syntax, `site` the site file's schema, `select`
//! which entry a GPU gets, `counts` the profile counts both produce.

mod counts;
mod select;
mod site;
mod text;

pub use counts::ProfileCounts;
pub use select::{GpuLayout, GpuSelector, Layout, LayoutEntry};
pub use site::{named_layouts, LayoutDef, LayoutDefs};
pub use text::{parse_gpu_layout, parse_gpu_layout_for, resolve_layout_arg};
