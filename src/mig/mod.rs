//! MIG planning, pure: GPU geometries, layouts, the placement planner, and `auto`.
//!
//! Nothing here touches NVML or files; `node-setup` feeds in what NVML reports
//! and applies what comes out. See `docs/mig-layouts.md`.

pub(crate) mod auto;
pub mod builtin;
pub(crate) mod catalog;
pub(crate) mod demand;
pub(crate) mod layout;
pub(crate) mod planner;
pub(crate) mod profile;
#[cfg(test)]
mod properties;

pub use auto::{plan_auto, AutoPlan, ServedKind};
pub use catalog::LayoutCatalog;
pub use demand::{Demand, QueueCost, Request};
pub use layout::{
    named_layouts, parse_gpu_layout, parse_gpu_layout_for, resolve_layout_arg, GpuLayout,
    GpuSelector, Layout, LayoutDef, LayoutDefs, LayoutEntry, ProfileCounts,
};
pub use planner::{
    all_smallest, balanced, check, diff, plan_gpu, ExistingInstance, GpuChange, GpuPlan, GpuTarget,
    PlacedInstance,
};
pub use profile::{GpuGeometry, PlacementInfo, Profile, ProfileInfo};
