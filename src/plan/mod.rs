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
pub mod resources;
mod shape;

pub use build::plan;
pub use estimate::Estimate;
pub use gpu::{GpuChoice, Offer};
pub use graph::{stage_name, ArraySpec, DepKind, Dependency, Plan, PlannedStage};
pub use policy::Policy;
