//! What a plan is made of: stages as Slurm will run them, how they wait for
//! each other, and job arrays.

use std::path::PathBuf;

use serde::Serialize;

use super::{Estimate, GpuChoice};
use crate::spec::StageKind;

/// How a stage waits for another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DepKind {
    /// Wait for the whole job (or array) to succeed.
    AfterOk,
    /// Array to array: task i waits for task i of the other array.
    AfterCorr,
    /// Wait for the whole job (or array) to end, however it ended (a
    /// search's `tell` after its trials).
    AfterAny,
}

impl DepKind {
    pub fn slurm_word(self) -> &'static str {
        match self {
            DepKind::AfterOk => "afterok",
            DepKind::AfterCorr => "aftercorr",
            DepKind::AfterAny => "afterany",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Dependency {
    pub stage: StageKind,
    pub kind: DepKind,
}

/// A job array: one task per sweep variant.
#[derive(Debug, Clone, Serialize)]
pub struct ArraySpec {
    pub tasks: usize,
    pub max_parallel: Option<u32>,
}

impl ArraySpec {
    /// `--array` value: `0-99%4`.
    pub fn slurm_value(&self) -> String {
        let mut s = format!("0-{}", self.tasks.saturating_sub(1));
        if let Some(p) = self.max_parallel {
            s.push_str(&format!("%{p}"));
        }
        s
    }

    /// Only some tasks (resume of failed variants): `3,7,9%4`.
    pub fn slurm_value_for(&self, tasks: &[usize]) -> String {
        let list: Vec<String> = tasks.iter().map(usize::to_string).collect();
        let mut s = list.join(",");
        if let Some(p) = self.max_parallel {
            s.push_str(&format!("%{p}"));
        }
        s
    }
}

/// One stage as Slurm will run it.
#[derive(Debug, Clone, Serialize)]
pub struct PlannedStage {
    pub kind: StageKind,
    /// `<run>.<stage>`.
    pub job_name: String,
    pub partition: Option<String>,
    pub account: Option<String>,
    pub qos: Option<String>,
    pub time: String,
    /// CPUs the job gets: asked with `--cpus-per-task`, or Slurm's
    /// `DefCpuPerGPU` when `cpus_from_slurm`.
    pub cpus: u32,
    /// Memory as Slurm reads it (`4133M`, `8G`); Slurm's `DefMemPerGPU` when `mem_from_slurm`.
    pub mem: String,
    /// Leave `--cpus-per-task` out: Slurm's per-GPU default applies.
    pub cpus_from_slurm: bool,
    /// Leave `--mem` out: Slurm's per-GPU default applies.
    pub mem_from_slurm: bool,
    /// Dataloader workers to pass when the spec sets none (GPU stages).
    pub workers: Option<u32>,
    pub gres: Option<String>,
    pub array: Option<ArraySpec>,
    pub depends_on: Vec<Dependency>,
    /// How the CPUs and memory were chosen, for `--explain`.
    pub shaping: String,
}

/// The whole plan of a run.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub run_name: String,
    pub workdir: PathBuf,
    pub variants: usize,
    pub stages: Vec<PlannedStage>,
    pub gpu: GpuChoice,
    pub estimate: Option<Estimate>,
    /// Effective batch and imgsz after site defaults (for the train command).
    pub batch_default: Option<u32>,
    pub imgsz_default: Option<u32>,
    pub warnings: Vec<String>,
}

impl Plan {
    pub fn stage(&self, kind: StageKind) -> Option<&PlannedStage> {
        self.stages.iter().find(|s| s.kind == kind)
    }
}

/// A stage's name (`StageKind::name`, the one mapping).
pub fn stage_name(kind: StageKind) -> &'static str {
    kind.name()
}
