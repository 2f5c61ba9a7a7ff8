//! A stage's CPUs, memory and dataloader workers, shaped to the node that
//! would run it.

use super::graph::{stage_name, PlannedStage};
use super::{resources, Policy};
use crate::slurm::cluster::Cluster;
use crate::spec::{Spec, SpecError, StageKind};

/// Fill in a stage's CPUs, memory and dataloader workers from the spec, the
/// site and the cluster (`resources::shape`); a request no node can ever
/// satisfy becomes an error at the spec key that asked for it.
pub(super) fn shape_stage(
    spec: &Spec,
    policy: &Policy,
    cluster: &Cluster,
    stage: &mut PlannedStage,
    errors: &mut Vec<SpecError>,
    warnings: &mut Vec<String>,
) {
    use resources::{Source, Unfitting, Wants};
    let name = stage_name(stage.kind);
    let gpu = stage.gres.as_deref().and_then(resources::GpuAsk::parse);
    let gres_type = gpu
        .as_ref()
        .map(|g| g.kind.clone().unwrap_or_else(|| g.name.clone()));
    let (site_cpus, site_mem) = policy.site_resources(gres_type.as_deref());
    let (prefix, table, spec_cpus, spec_mem) = if stage.kind == StageKind::Train {
        (
            "resources".to_string(),
            "[resources]".to_string(),
            spec.resources.cpus,
            spec.resources.mem.as_ref(),
        )
    } else {
        let res = spec
            .stage_resources(stage.kind)
            .expect("a planned side stage has its table");
        (
            format!("stages.{name}"),
            format!("[stages.{name}]"),
            res.cpus,
            res.mem.as_ref(),
        )
    };
    let workers = (stage.kind == StageKind::Train)
        .then(|| spec.explicit_workers())
        .flatten();
    // Ultralytics' `workers` is per rank: on N GPUs, N training processes
    // each with its own dataloader workers.
    let ranks = u32::try_from(gpu.as_ref().map_or(1, |g| g.gpus().max(1))).unwrap_or(1);
    let wants = Wants {
        cpus: spec_cpus
            .map(|c| (c, Source::Spec))
            .or_else(|| {
                workers.map(|w| (w.saturating_add(1).saturating_mul(ranks), Source::Workers))
            })
            .or_else(|| site_cpus.map(|c| (c, Source::Site))),
        mem_mib: spec_mem
            .map(|m| (m.mebibytes, Source::Spec))
            .or_else(|| site_mem.map(|m| (m, Source::Site))),
    };
    let time_secs = crate::slurm::time::parse_duration(&stage.time)
        .ok()
        .unwrap_or(0);
    let request = resources::Stage {
        name,
        table: &table,
        partition: stage.partition.as_deref(),
        gpu: gpu.as_ref(),
        wants,
        time_secs,
        time_text: &stage.time,
    };
    let shaped = match resources::shape(cluster, &request) {
        Ok(s) => s,
        Err(unfit) => {
            let key = match unfit.what {
                Unfitting::Partition if stage.kind == StageKind::Train => {
                    "run.partition".to_string()
                }
                Unfitting::Partition => format!("{prefix}.partition"),
                Unfitting::Gres if stage.kind == StageKind::Val => "stages.val.gpu".to_string(),
                Unfitting::Gres => "resources.gpu".to_string(),
                Unfitting::Cpus if spec_cpus.is_none() && workers.is_some() => {
                    "train.workers".to_string()
                }
                Unfitting::Cpus => format!("{prefix}.cpus"),
                Unfitting::Mem => format!("{prefix}.mem"),
                Unfitting::Time if stage.kind == StageKind::Train => "resources.time".to_string(),
                Unfitting::Time => format!("{prefix}.time"),
            };
            errors.push(spec.error_at(&key, unfit.message, Some(unfit.help)));
            return;
        }
    };
    stage.cpus = shaped.cpus;
    stage.cpus_from_slurm = shaped.cpus_source == Source::Slurm;
    stage.mem = match spec_mem {
        Some(m) if shaped.mem_source == Source::Spec => m.text.clone(),
        _ => resources::slurm_mem(shaped.mem_mib),
    };
    stage.mem_from_slurm = shaped.mem_source == Source::Slurm;
    if gpu.is_some() && (stage.kind != StageKind::Train || workers.is_none()) {
        // Ultralytics' 8 dataloader workers would outnumber a slice's CPUs;
        // on N GPUs each rank gets its share.
        stage.workers = Some((shaped.cpus / ranks).saturating_sub(1));
    }
    stage.shaping = match stage.workers.or(workers) {
        Some(w) if ranks > 1 => format!(
            "{name}: {}, workers={w} per GPU ({ranks} training processes)",
            shaped.explanation
        ),
        Some(w) => format!("{name}: {}, workers={w}", shaped.explanation),
        None => format!("{name}: {}", shaped.explanation),
    };
    if let (Some(g), Some((fit, slices, node))) = (&gpu, &shaped.per_node) {
        let chosen = matches!(
            shaped.cpus_source,
            Source::Spec | Source::Workers | Source::Site
        ) || matches!(shaped.mem_source, Source::Spec | Source::Site);
        if chosen && fit < slices {
            warnings.push(format!(
                "{name} asks {} CPU(s) and {}: {node} can run only {fit} such job(s) at once on its {slices} {} slice(s); \
                 leave `cpus`, `workers` and `mem` out to get the slice's share of the node",
                shaped.cpus,
                resources::show_mib(shaped.mem_mib),
                g.label().trim_start_matches("gpu:"),
            ));
        }
    }
}
