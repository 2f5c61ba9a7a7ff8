//! Moving a run's training to another GPU on resume: `resume --gpu PROFILE`
//! (or `TYPE:N`, N whole GPUs of one node), or `--gpu bigger` for the next
//! larger slice the cluster has, then whole GPUs, then, where the site's
//! `[pools.exclusive] max_gpus` allows, more GPUs of one node of the exclusive
//! pool (Ultralytics' DDP splits the batch over them), as after a CUDA
//! out-of-memory end.
//!
//! The new slice's CPUs and memory are its share of the node, as at submit
//! (`plan::resources::shape`), but never less than the stage had: the spec
//! may have asked for more workers than a small slice's share.

use anyhow::Result;
use serde::Serialize;

use crate::error::invalid;
use crate::plan::gpu::Offer;
use crate::plan::resources::{self, GpuAsk, Stage, Wants};
use crate::plan::Policy;
use crate::rundir::manifest::Manifest;
use crate::slurm::cluster::Cluster;

/// What `--gpu` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuWanted {
    /// The smallest GPU type with more usable memory than the current one.
    Bigger,
    /// A GRES type by name (`2g.10gb`, `a100`), and how many of one node
    /// (`a100:4`; 1 unless written, and only whole GPUs take more).
    Type(String, u32),
}

impl GpuWanted {
    pub fn parse(s: &str) -> Result<GpuWanted> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("bigger") {
            return Ok(GpuWanted::Bigger);
        }
        let (name, count) = match s.split_once(':') {
            Some((n, c)) => (n, Some(c)),
            None => (s, None),
        };
        let ok = !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '+'));
        if !ok {
            return Err(invalid(format!(
                "--gpu {:?}: expected `bigger` or a GPU type the cluster has (1g.5gb, 2g.10gb, a100, a100:4 for four of one node, …)",
                crate::text::clip(s)
            )));
        }
        let count = match count {
            None => 1,
            Some(_) => match crate::spec::values::parse_gpu_count(s) {
                Ok((_, n)) => n,
                Err(p) => {
                    let mut e = format!("--gpu {:?}: {}", crate::text::clip(s), p.message);
                    if let Some(h) = p.help {
                        e.push_str(&format!(" ({h})"));
                    }
                    return Err(invalid(e));
                }
            },
        };
        Ok(GpuWanted::Type(name.to_string(), count))
    }
}

/// The train stage's new GPU and resources.
#[derive(Debug, Clone, Serialize)]
pub struct GpuChange {
    /// The `--gres` it had (`gpu:1g.5gb:1`).
    pub from: Option<String>,
    /// The `--gres` it gets.
    pub gres: String,
    /// How many GPUs of one node (`--nodes=1` above one).
    pub count: u32,
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
        if self.count > 1 {
            args.push("--nodes=1".to_string());
        }
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
    let train = train_stage(manifest)?;
    let current_gres = train
        .attempts
        .last()
        .and_then(|a| a.gres.clone())
        .or_else(|| train.gres.clone());
    gpu_change_from(manifest, current_gres, cluster, policy, wanted)
}

fn train_stage(manifest: &Manifest) -> Result<&crate::rundir::manifest::StageRecord> {
    manifest
        .stages
        .iter()
        .find(|s| s.stage == "train")
        .ok_or_else(|| invalid(format!("run {} has no train stage", manifest.run_id)))
}

/// `gpu_change` from a given `--gres` (`current_gres`): a search's trial
/// moves from its own slice, which other trials of the stage do not share.
pub fn gpu_change_from(
    manifest: &Manifest,
    current_gres: Option<String>,
    cluster: &Cluster,
    policy: &Policy,
    wanted: &GpuWanted,
) -> Result<GpuChange> {
    let train = train_stage(manifest)?;
    let current = current_gres.as_deref().and_then(GpuAsk::parse);
    let current_type = current.as_ref().and_then(|g| g.kind.clone());
    let current_count = current
        .as_ref()
        .map_or(1, |g| u32::try_from(g.gpus().max(1)).unwrap_or(1));
    let offer = Offer::from_cluster(cluster, train.partition.as_deref(), policy);
    let usable = |t: &str| offer.usable_gib(t);
    let (kind, count, partition) = match wanted {
        GpuWanted::Type(t, n) => {
            // Several GPUs go to the exclusive pool's partition, as at submit.
            let partition = match policy.pools.exclusive.as_ref() {
                Some(pool) if *n > 1 => pool.partition.clone().or(train.partition.clone()),
                _ => train.partition.clone(),
            };
            let offer = Offer::from_cluster(cluster, partition.as_deref(), policy);
            if !offer.gpu_types.contains_key(t) {
                let names: Vec<&str> = offer.gpu_types.keys().map(String::as_str).collect();
                return Err(invalid(format!(
                    "--gpu {t}: partition {} has no GPU of that type{}; it has {}",
                    partition.as_deref().unwrap_or("(default)"),
                    crate::suggest::did_you_mean(t, names.iter().copied()),
                    offer.describe()
                )));
            }
            if *n > 1 {
                if crate::plan::gpu::is_mig_profile(t) {
                    return Err(invalid(format!(
                        "--gpu {t}:{n}: one CUDA process sees only one MIG device; several GPUs are whole GPUs"
                    )));
                }
                if let Some(max) = offer.max_gpus().filter(|m| n > m) {
                    return Err(invalid(format!(
                        "--gpu {t}:{n}: the site allows at most {max} GPUs for one training (`[pools.exclusive] max_gpus`)"
                    )));
                }
                check_batch_splits(manifest, *n)?;
            }
            (t.clone(), *n, partition)
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
                Some((_, t)) if current_count == 1 => ((*t).clone(), 1, train.partition.clone()),
                _ => match more_gpus(
                    manifest,
                    cluster,
                    policy,
                    current_type.as_deref(),
                    current_count,
                    now,
                )? {
                    Some(m) => m,
                    None => {
                        return Err(invalid(format!(
                            "run {}: no GPU larger than {} in partition {}; it has {}{}",
                            manifest.run_id,
                            current_type.as_deref().unwrap_or("its current one"),
                            train.partition.as_deref().unwrap_or("(default)"),
                            offer.describe(),
                            if offer.max_gpus().is_some_and(|m| m > current_count) {
                                ", and no node of the exclusive pool has more such GPUs"
                            } else {
                                " (the site's `[pools.exclusive] max_gpus` does not allow more GPUs of one node)"
                            }
                        )))
                    }
                },
            }
        }
    };
    let gpu = GpuAsk {
        name: "gpu".to_string(),
        kind: Some(kind.clone()),
        count: u64::from(count),
    };
    let request = Stage {
        name: "train",
        table: "[resources]",
        partition: partition.as_deref(),
        gpu: Some(&gpu),
        wants: Wants {
            cpus: None,
            mem_mib: None,
        },
        time_secs: crate::slurm::time::parse_duration(&train.time)
            .ok()
            .unwrap_or(0),
        time_text: &train.time,
    };
    let shaped = resources::shape(cluster, &request).map_err(|unfit| {
        invalid(format!(
            "--gpu {kind}:{count}: {} ({})",
            unfit.message, unfit.help
        ))
    })?;
    let old_mem = crate::spec::values::parse_mem(&train.mem)
        .ok()
        .map(|m| m.mebibytes)
        .unwrap_or(0);
    let cpus = shaped.cpus.max(train.cpus);
    let mem_mib = shaped.mem_mib.max(old_mem);
    Ok(GpuChange {
        from: current_gres,
        gres: format!("gpu:{kind}:{count}"),
        count,
        cpus,
        mem: format!("{mem_mib}M"),
        partition: shaped.partition.clone(),
        explanation: shaped.explanation,
        after_job: None,
    })
}

/// After the largest single GPU: more whole GPUs of one node of the exclusive
/// pool, where the site allows it (`[pools.exclusive] max_gpus`): the fewest
/// above `count`, of the smallest type with at least `now_gib` each.
fn more_gpus(
    manifest: &Manifest,
    cluster: &Cluster,
    policy: &Policy,
    current_type: Option<&str>,
    count: u32,
    now_gib: f64,
) -> Result<Option<(String, u32, Option<String>)>> {
    let Some(max) = policy
        .pools
        .exclusive
        .as_ref()
        .and_then(|p| p.max_gpus)
        .filter(|m| *m > count)
    else {
        return Ok(None);
    };
    let train_partition = manifest
        .stages
        .iter()
        .find(|s| s.stage == "train")
        .and_then(|s| s.partition.clone());
    let partition = policy
        .pools
        .exclusive
        .as_ref()
        .and_then(|p| p.partition.clone())
        .or(train_partition);
    let offer = Offer::from_cluster(cluster, partition.as_deref(), policy);
    let mut types: Vec<(f64, &String, u64)> = offer
        .per_node
        .iter()
        .filter(|(t, _)| {
            !crate::plan::gpu::is_mig_profile(t)
                && offer.allowed(t)
                && Offer::in_pool(policy.pools.exclusive.as_ref(), t)
        })
        .filter_map(|(t, most)| offer.usable_gib(t).map(|g| (g, t, *most)))
        .filter(|(g, _, _)| *g + 1e-9 >= now_gib)
        .collect();
    // The current type first, then the smallest.
    types.sort_by(|a, b| {
        (Some(a.1.as_str()) != current_type)
            .cmp(&(Some(b.1.as_str()) != current_type))
            .then(a.0.total_cmp(&b.0))
            .then(a.1.cmp(b.1))
    });
    for n in (count + 1)..=max {
        if let Some((_, t, _)) = types.iter().find(|(_, _, most)| *most >= u64::from(n)) {
            check_batch_splits(manifest, n)?;
            return Ok(Some(((*t).clone(), n, partition)));
        }
    }
    Ok(None)
}

/// A training moved to `n` GPUs needs a fixed batch of at least `n` images
/// (Ultralytics' batch is the total over the GPUs; AutoBatch is single-GPU).
fn check_batch_splits(manifest: &Manifest, n: u32) -> Result<()> {
    let Ok(spec) = crate::spec::parse(
        &manifest.spec_text,
        &manifest.spec_file.display().to_string(),
    ) else {
        return Ok(());
    };
    match spec.train.batch {
        Some(crate::spec::Batch::AutoDefault | crate::spec::Batch::AutoFraction(_)) => {
            Err(invalid(format!(
                "run {}: cannot move to {n} GPUs: its batch is AutoBatch, which sizes the batch for one GPU (on several Ultralytics trains with batch 16)",
                manifest.run_id
            )))
        }
        Some(crate::spec::Batch::Images(b)) if b < n => Err(invalid(format!(
            "run {}: cannot move to {n} GPUs: its batch of {b} is the total over all GPUs, and each needs at least one image",
            manifest.run_id
        ))),
        _ => Ok(()),
    }
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
    use crate::rundir::manifest::{Attempt, StageRecord, SCHEMA_VERSION};

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
            model_refs: Vec::new(),
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
        assert!(top.contains("max_gpus` does not allow"), "{top}");
    }

    fn pool_policy(max_gpus: u32) -> Policy {
        let mut p = Policy::default();
        p.pools.exclusive = Some(crate::plan::pools::Pool {
            partition: Some("pool".into()),
            types: None,
            max_gpus: Some(max_gpus),
        });
        p
    }

    #[test]
    fn after_the_largest_gpu_bigger_takes_more_gpus_of_the_pool_where_the_site_allows() {
        let c = crate::plan::test_clusters::pool_cluster();
        let p = pool_policy(4);
        let mut m = manifest("gpu:a100:1");
        m.spec_text = "version = 1\n[run]\nname = \"r\"\n[train]\nmodel = \"yolov8x.pt\"\ndata = \"d.yaml\"\nbatch = 32\n".into();
        let two = gpu_change(&m, &c, &p, &GpuWanted::Bigger).unwrap();
        assert_eq!((two.gres.as_str(), two.count), ("gpu:a100:2", 2), "{two:?}");
        assert_eq!(two.partition, "pool");
        assert!(two.sbatch_overrides().contains(&"--nodes=1".to_string()));
        assert!(
            two.cpus >= 16,
            "two A100s' share of pool's 32-CPU node: {two:?}"
        );
        // From two, three; the site's four is the end.
        m.stages[0].attempts[0].gres = Some("gpu:a100:2".into());
        assert_eq!(
            gpu_change(&m, &c, &p, &GpuWanted::Bigger).unwrap().gres,
            "gpu:a100:3"
        );
        m.stages[0].attempts[0].gres = Some("gpu:a100:4".into());
        let end = gpu_change(&m, &c, &p, &GpuWanted::Bigger)
            .unwrap_err()
            .to_string();
        assert!(end.contains("no GPU larger than a100"), "{end}");
        // AutoBatch cannot be split over GPUs.
        m.stages[0].attempts[0].gres = Some("gpu:a100:1".into());
        m.spec_text = m.spec_text.replace("batch = 32", "batch = -1");
        let auto = gpu_change(&m, &c, &p, &GpuWanted::Bigger)
            .unwrap_err()
            .to_string();
        assert!(auto.contains("AutoBatch"), "{auto}");
    }

    #[test]
    fn a_named_count_is_whole_gpus_only_and_within_the_site_limit() {
        let c = crate::plan::test_clusters::pool_cluster();
        let p = pool_policy(4);
        // From partition gpu, four A100s of one node are in the pool.
        let m = manifest("gpu:a100:1");
        let four = gpu_change(&m, &c, &p, &GpuWanted::parse("a100:4").unwrap()).unwrap();
        assert_eq!((four.gres.as_str(), four.count), ("gpu:a100:4", 4));
        assert_eq!(four.partition, "pool");
        let e = gpu_change(&m, &c, &p, &GpuWanted::parse("h100:8").unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("at most 4 GPUs"), "{e}");
        assert!(GpuWanted::parse("1g.5gb:2").is_err());
        assert!(GpuWanted::parse("a100:0").is_err());
        assert_eq!(
            GpuWanted::parse("a100:2").unwrap(),
            GpuWanted::Type("a100".into(), 2)
        );
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
