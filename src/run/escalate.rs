//! Moving a run's training to another GPU on resume: `resume --gpu PROFILE`,
//! or `--gpu bigger` for the next larger slice the cluster has (then whole
//! GPUs), as after a CUDA out-of-memory end.
//!
//! The new slice's CPUs and memory are its share of the node, as at submit
//! (`plan::resources::shape`), but never less than the stage had: the spec
//! may have asked for more workers than a small slice's share.

use anyhow::Result;
use serde::Serialize;

use super::Manifest;
use crate::error::invalid;
use crate::plan::gpu::Offer;
use crate::plan::resources::{self, GpuAsk, Stage, Wants};
use crate::plan::Policy;
use crate::slurm::cluster::Cluster;

/// What `--gpu` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuWanted {
    /// The smallest GPU type with more usable memory than the current one.
    Bigger,
    /// A GRES type by name (`2g.10gb`, `a100`).
    Type(String),
}

impl GpuWanted {
    pub fn parse(s: &str) -> Result<GpuWanted> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("bigger") {
            return Ok(GpuWanted::Bigger);
        }
        let ok = !s.is_empty()
            && s.len() <= 64
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '+'));
        if !ok {
            return Err(invalid(format!(
                "--gpu {:?}: expected `bigger` or a GPU type the cluster has (1g.5gb, 2g.10gb, a100, …)",
                crate::text::clip(s)
            )));
        }
        Ok(GpuWanted::Type(s.to_string()))
    }
}

/// The train stage's new GPU and resources.
#[derive(Debug, Clone, Serialize)]
pub struct GpuChange {
    /// The `--gres` it had (`gpu:1g.5gb:1`).
    pub from: Option<String>,
    /// The `--gres` it gets.
    pub gres: String,
    pub cpus: u32,
    /// `--mem` value (`12000M`).
    pub mem: String,
    pub partition: String,
    /// One line of arithmetic, for the output.
    pub explanation: String,
    /// The train job this move waits for (`--dependency=afternotok:ID`):
    /// set when a job that ran out of memory moves itself.
    pub after_job: Option<u64>,
}

impl GpuChange {
    /// `sbatch` options overriding the script's own lines.
    pub fn sbatch_overrides(&self) -> Vec<String> {
        let mut args = vec![
            format!("--gres={}", self.gres),
            format!("--cpus-per-task={}", self.cpus),
            format!("--mem={}", self.mem),
            format!("--partition={}", self.partition),
        ];
        if let Some(job) = self.after_job {
            args.push(format!("--dependency=afternotok:{job}"));
        }
        args
    }
}

/// Decide the train stage's new GPU, or say why there is none.
pub fn gpu_change(
    manifest: &Manifest,
    cluster: &Cluster,
    policy: &Policy,
    wanted: &GpuWanted,
) -> Result<GpuChange> {
    let train = manifest
        .stages
        .iter()
        .find(|s| s.stage == "train")
        .ok_or_else(|| invalid(format!("run {} has no train stage", manifest.run_id)))?;
    let current_gres = train
        .attempts
        .last()
        .and_then(|a| a.gres.clone())
        .or_else(|| train.gres.clone());
    let current_type = current_gres
        .as_deref()
        .and_then(GpuAsk::parse)
        .and_then(|g| g.kind);
    let offer = Offer::from_cluster(cluster, train.partition.as_deref(), policy);
    let usable = |t: &str| offer.usable_gib(t);
    let kind = match wanted {
        GpuWanted::Type(t) => {
            if !offer.gpu_types.contains_key(t) {
                let names: Vec<&str> = offer.gpu_types.keys().map(String::as_str).collect();
                return Err(invalid(format!(
                    "--gpu {t}: partition {} has no GPU of that type{}; it has {}",
                    train.partition.as_deref().unwrap_or("(default)"),
                    crate::suggest::did_you_mean(t, names.iter().copied()),
                    offer.describe()
                )));
            }
            t.clone()
        }
        GpuWanted::Bigger => {
            let now = current_type.as_deref().and_then(usable).unwrap_or(0.0);
            let mut larger: Vec<(f64, &String)> = offer
                .gpu_types
                .keys()
                .filter_map(|t| usable(t).map(|g| (g, t)))
                .filter(|(g, _)| *g > now + 1e-9)
                .collect();
            larger.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(b.1)));
            match larger.first() {
                Some((_, t)) => (*t).clone(),
                None => {
                    return Err(invalid(format!(
                        "run {}: no GPU larger than {} in partition {}; it has {}",
                        manifest.run_id,
                        current_type.as_deref().unwrap_or("its current one"),
                        train.partition.as_deref().unwrap_or("(default)"),
                        offer.describe()
                    )))
                }
            }
        }
    };
    let gpu = GpuAsk {
        name: "gpu".to_string(),
        kind: Some(kind.clone()),
        count: 1,
    };
    let request = Stage {
        name: "train",
        table: "[resources]",
        partition: train.partition.as_deref(),
        gpu: Some(&gpu),
        wants: Wants {
            cpus: None,
            mem_mib: None,
        },
        time_secs: crate::plan::policy::parse_slurm_time(&train.time).unwrap_or(0),
        time_text: &train.time,
    };
    let shaped = resources::shape(cluster, &request)
        .map_err(|unfit| invalid(format!("--gpu {kind}: {} ({})", unfit.message, unfit.help)))?;
    let old_mem = crate::spec::values::parse_mem(&train.mem)
        .ok()
        .map(|m| m.mebibytes)
        .unwrap_or(0);
    let cpus = shaped.cpus.max(train.cpus);
    let mem_mib = shaped.mem_mib.max(old_mem);
    Ok(GpuChange {
        from: current_gres,
        gres: format!("gpu:{kind}:1"),
        cpus,
        mem: format!("{mem_mib}M"),
        partition: shaped.partition.clone(),
        explanation: shaped.explanation,
        after_job: None,
    })
}

/// How many times a run's training has already moved to another slice.
pub fn moves_so_far(manifest: &Manifest) -> usize {
    let Some(train) = manifest.stages.iter().find(|s| s.stage == "train") else {
        return 0;
    };
    let slices: Vec<Option<&str>> = train
        .attempts
        .iter()
        .map(|a| a.gres.as_deref().or(train.gres.as_deref()))
        .collect();
    slices.windows(2).filter(|w| w[0] != w[1]).count()
}

/// Called from inside the train job `job` that is about to end after running
/// out of memory: take the run as if that job had failed, cancel the stages
/// that wait for it (they would be cancelled as their dependency fails), so
/// that a resume on a bigger slice can be planned now and start after `job`.
/// Refuses when the run has made `max_moves` moves already, or when `job` is
/// not the run's latest training.
pub fn prepare_from_job(
    slurm: &crate::slurm::Slurm,
    manifest: &Manifest,
    status: &mut super::status::RunStatus,
    job: u64,
    max_moves: u32,
) -> Result<Vec<u64>> {
    use super::status::TaskState;
    let moves = moves_so_far(manifest);
    if moves >= max_moves as usize {
        return Err(invalid(format!(
            "run {}: training has moved to a bigger slice {moves} time(s) already \
             ([resources] on_oom_steps = {max_moves}); not moving again",
            manifest.run_id
        )));
    }
    let train_at = status
        .stages
        .iter()
        .position(|s| s.stage == "train")
        .ok_or_else(|| invalid(format!("run {} has no train stage", manifest.run_id)))?;
    if status.stages[train_at].job_id != Some(job) {
        return Err(invalid(format!(
            "job {job} is not the latest training of run {}",
            manifest.run_id
        )));
    }
    for t in &mut status.stages[train_at].tasks {
        t.state = TaskState::Failed;
    }
    let mut waiting = Vec::new();
    for s in &mut status.stages[train_at + 1..] {
        if s.tasks.iter().any(|t| t.state.is_active()) {
            waiting.extend(s.job_id);
            for t in &mut s.tasks {
                t.state = TaskState::Cancelled;
            }
        }
    }
    if !waiting.is_empty() {
        crate::slurm::control::cancel(slurm, &waiting)?;
    }
    status.state = super::status::RunState::Failed {
        stage: "train".into(),
        why: None,
    };
    Ok(waiting)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::manifest::{Attempt, StageRecord, SCHEMA_VERSION};

    fn cluster() -> Cluster {
        crate::slurm::cluster::parse(include_str!("../../tests/data/scontrol-shape-22.05.txt"))
            .unwrap()
    }

    fn manifest(gres: &str) -> Manifest {
        Manifest {
            schema_version: SCHEMA_VERSION,
            run_id: "r-1".into(),
            name: "r".into(),
            user: "u".into(),
            host: "h".into(),
            submitted_at: chrono::Utc::now(),
            workdir: "/nonexistent".into(),
            spec_file: "/s.toml".into(),
            spec_hash: "0".into(),
            spec_text: String::new(),
            variants: 1,
            gpu_explanation: vec![],
            estimate_gib: None,
            model_ref: None,
            stages: vec![StageRecord {
                stage: "train".into(),
                job_name: "r-train".into(),
                partition: Some("gpu".into()),
                gres: Some(gres.into()),
                time: "1:00:00".into(),
                cpus: 2,
                mem: "1000M".into(),
                tasks: 1,
                depends_on: vec![],
                script: "scripts/train.sh".into(),
                attempts: vec![Attempt {
                    attempt: 1,
                    job_id: 7,
                    array: None,
                    dependency: None,
                    submitted_at: chrono::Utc::now(),
                    gres: None,
                }],
            }],
        }
    }

    #[test]
    fn bigger_climbs_the_slices_the_cluster_has_then_whole_gpus() {
        let c = cluster();
        let p = Policy::default();
        let up = |from: &str| gpu_change(&manifest(from), &c, &p, &GpuWanted::Bigger);
        let one = up("gpu:1g.5gb:1").unwrap();
        assert_eq!(one.gres, "gpu:2g.10gb:1");
        assert_eq!(one.from.as_deref(), Some("gpu:1g.5gb:1"));
        // The bigger slice's share of the node, never less than the stage had.
        assert!(one.cpus >= 2 && one.mem.ends_with('M'), "{one:?}");
        assert!(one
            .sbatch_overrides()
            .contains(&"--gres=gpu:2g.10gb:1".to_string()));
        assert_eq!(up("gpu:2g.10gb:1").unwrap().gres, "gpu:a100:1");
        let top = up("gpu:a100:1").unwrap_err().to_string();
        assert!(top.contains("no GPU larger than a100"), "{top}");
    }

    #[test]
    fn a_named_type_must_exist_and_a_typo_gets_a_suggestion() {
        let c = cluster();
        let p = Policy::default();
        let m = manifest("gpu:1g.5gb:1");
        let e = gpu_change(&m, &c, &p, &GpuWanted::parse("2g.10g").unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("did you mean `2g.10gb`"), "{e}");
        assert!(GpuWanted::parse("gpu;rm -rf").is_err());
        assert_eq!(GpuWanted::parse("BIGGER").unwrap(), GpuWanted::Bigger);
    }
}
