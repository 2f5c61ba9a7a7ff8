//! `plan`: the stage graph of a spec against the cluster's offer and the
//! site policy, every error pointing into the spec.

use std::path::Path;

use super::graph::{stage_name, ArraySpec, DepKind, Dependency, Plan, PlannedStage};
use super::shape::shape_stage;
use super::{gpu, Estimate, GpuChoice, Offer, Policy};
use crate::slurm::cluster::Cluster;
use crate::spec::{GpuRequest, Spec, SpecError, SpecErrors, StageKind};

/// Build the plan against the cluster's shape. `workdir` is already
/// absolute. Errors point into the spec; a plan that comes back is one every
/// stage of which some node can run.
pub fn plan(
    spec: &Spec,
    workdir: &Path,
    cluster: &Cluster,
    policy: &Policy,
) -> Result<Plan, SpecErrors> {
    let mut errors: Vec<SpecError> = Vec::new();
    let mut warnings: Vec<String> = Vec::new();
    let variants = usize::try_from(spec.variant_count()).unwrap_or(usize::MAX);
    let array_limit = array_limit(spec, cluster, policy, variants, &mut errors);
    let imgsz = spec.train.imgsz.or(policy.defaults.imgsz).unwrap_or(640);
    let batch_images: Option<u32> = match spec.train.batch {
        Some(crate::spec::Batch::Images(n)) => Some(n),
        Some(_) => None,
        None => Some(policy.defaults.batch.unwrap_or(16)),
    };
    // A sweep over batch or imgsz sizes the slice for the largest variant.
    let (max_batch, max_imgsz) = sweep_maxima(spec, batch_images, imgsz);

    let (gpu, estimate) = choose_gpu(spec, cluster, policy, max_batch, max_imgsz, &mut errors);
    warnings.extend(gpu.warnings.iter().cloned());
    if gpu.count > 1 {
        check_batch_for(spec, gpu.count, batch_images, &mut errors, &mut warnings);
    }
    let train_time = train_time(spec, policy, &mut errors);
    let gpu_partition = spec
        .run
        .partition
        .clone()
        .or_else(|| gpu.pool_partition.clone())
        .or_else(|| policy.defaults.gpu_partition.clone());
    let cpu_partition_default = policy.defaults.cpu_partition.clone();
    let name = &spec.run.name;
    let array = (variants > 1).then_some(ArraySpec {
        tasks: variants,
        max_parallel: spec.sweep.max_parallel,
    });
    let tune = spec.tune.as_ref();
    // A search: the train stage is one array of all trials, submitted one
    // batch (a slice of its indices) at a time.
    let train_array = match tune {
        Some(t) => Some(ArraySpec {
            tasks: t.trials as usize,
            max_parallel: None,
        }),
        None => array.clone(),
    };
    if let (Some(t), Some((max, why))) = (tune, &array_limit) {
        if u64::from(t.trials) > *max {
            errors.push(spec.error_at(
                "tune.trials",
                format!(
                    "{} trials are more than one job array can number ({why})",
                    t.trials
                ),
                Some(format!("run at most {max} trials")),
            ));
        }
    }
    let graph = Graph {
        spec,
        policy,
        cluster,
        gpu: &gpu,
        gpu_partition,
        cpu_partition: cpu_partition_default,
        array,
        train_time: train_time.0,
    };
    let mut stages = graph.through_train(train_array, &mut errors);
    stages.extend(graph.after_train(&mut errors, &mut warnings));
    // CPUs and memory, shaped to the nodes each stage can run on, and the
    // check that one of them can ever run it. A GPU choice that already
    // failed has nothing to shape.
    if errors.is_empty() {
        for stage in &mut stages {
            shape_stage(spec, policy, cluster, stage, &mut errors, &mut warnings);
        }
    }

    if !errors.is_empty() {
        return Err(SpecErrors::new(&spec.origin.file, errors));
    }
    Ok(Plan {
        run_name: name.clone(),
        workdir: workdir.to_path_buf(),
        variants,
        stages,
        gpu,
        estimate,
        batch_default: if spec.train.batch.is_none() {
            policy.defaults.batch
        } else {
            None
        },
        imgsz_default: if spec.train.imgsz.is_none() {
            policy.defaults.imgsz
        } else {
            None
        },
        warnings,
    })
}

/// Array size: Slurm refuses indices at or above MaxArraySize (or the site's
/// lower limit); a sweep with more variants is an error. The limit and why.
fn array_limit(
    spec: &Spec,
    cluster: &Cluster,
    policy: &Policy,
    variants: usize,
    errors: &mut Vec<SpecError>,
) -> Option<(u64, String)> {
    let mut array_limit: Option<(u64, String)> = cluster
        .max_array_size
        .map(|m| (m, format!("the cluster's MaxArraySize is {m}")));
    if let Some(site_max) = policy.limits.max_array_size {
        if array_limit.as_ref().is_none_or(|(m, _)| site_max < *m) {
            array_limit = Some((
                site_max,
                format!("the site limit `limits.max_array_size` is {site_max}"),
            ));
        }
    }
    if let Some((max, why)) = &array_limit {
        if variants as u64 > *max {
            errors.push(spec.error_at(
                "sweep",
                format!(
                    "the sweep makes {variants} variants, more than one job array can hold ({why})"
                ),
                Some("sweep fewer values, or split the sweep into several specs".into()),
            ));
        }
    }

    array_limit
}

/// The GPU the train stage asks for (`auto` chosen against the offer, a
/// named one checked against it), and the memory estimate behind `auto`.
fn choose_gpu(
    spec: &Spec,
    cluster: &Cluster,
    policy: &Policy,
    max_batch: Option<u32>,
    max_imgsz: u32,
    errors: &mut Vec<SpecError>,
) -> (GpuChoice, Option<Estimate>) {
    // Where the train stage goes when that is known before the GPU choice:
    // then only that partition's GPUs are candidates.
    let known_partition = spec
        .run
        .partition
        .clone()
        .or_else(|| policy.defaults.gpu_partition.clone());
    // `auto` picks among the GPUs of the train stage's partition when it is
    // known; a GPU the spec names is checked cluster-wide here, and against
    // its partition by the fit check (which names the partitions that have it).
    // Several GPUs of one node come from the exclusive pool's partition unless
    // the spec names one; else from where the job would go (the site's GPU
    // partition, else Slurm's default one).
    let pool_partition = spec
        .run
        .partition
        .clone()
        .or_else(|| {
            policy
                .pools
                .exclusive
                .as_ref()
                .and_then(|p| p.partition.clone())
        })
        .or_else(|| policy.defaults.gpu_partition.clone())
        .or_else(|| cluster.default_partition().map(|p| p.name.clone()));
    let auto_offer = Offer::from_cluster(cluster, known_partition.as_deref(), policy)
        .with_pool_nodes(cluster, pool_partition.as_deref());
    let offer = &Offer::from_cluster(cluster, None, policy);
    // The key that asked for several GPUs, for errors about the count.
    let count_key = if spec.location("resources.gpus").is_some() {
        "resources.gpus"
    } else {
        "resources.gpu"
    };

    let mut estimate = None;
    let gpu = match &spec.resources.gpu {
        GpuRequest::Auto => {
            let est = Estimate::new(largest_model(spec), max_imgsz, max_batch);
            let choice = gpu::choose_auto(
                &est,
                &auto_offer,
                spec.resources.gpus,
                policy.defaults.memory_warning.unwrap_or(0.8),
            );
            // On several GPUs the estimate that matters is each GPU's.
            estimate = Some(match &choice {
                Ok(c) if c.count > 1 => est.per_gpu(c.count),
                _ => est,
            });
            match choice {
                Ok(c) => c,
                Err(nofit) => {
                    // Point at what drove the estimate when `gpu` was left to its default.
                    let key = if spec.resources.gpus.is_some_and(|n| n > 1) {
                        count_key
                    } else if spec.location("resources.gpu").is_some() {
                        "resources.gpu"
                    } else {
                        "train.model"
                    };
                    errors.push(spec.error_at(key, nofit.message, Some(nofit.help)));
                    GpuChoice {
                        gres: None,
                        kind: None,
                        count: 1,
                        pool_partition: None,
                        usable_gib: None,
                        explanation: vec![],
                        warnings: vec![],
                    }
                }
            }
        }
        GpuRequest::Type(t) if spec.resources.gpus.is_some_and(|n| n > 1) => {
            let n = spec.resources.gpus.unwrap_or(1);
            if let Err(nofit) = gpu::check_explicit(t, false, offer) {
                errors.push(spec.error_at("resources.gpu", nofit.message, Some(nofit.help)));
            }
            if let Some(max) = offer.max_gpus().filter(|m| n > *m) {
                errors.push(spec.error_at(
                    count_key,
                    format!("{n} GPUs is more than the site allows one training ({max}, `[pools.exclusive] max_gpus`)"),
                    Some(format!("ask for at most {max} GPUs of one node")),
                ));
            }
            let mut c = explicit_choice(
                format!("gpu:{t}:{n}"),
                t,
                offer,
                &format!("{n} GPUs of one node, named in the spec"),
            );
            c.count = n;
            c.pool_partition = policy
                .pools
                .exclusive
                .as_ref()
                .and_then(|p| p.partition.clone());
            c
        }
        GpuRequest::Mig(t) | GpuRequest::Type(t) => {
            if let Err(nofit) = gpu::check_explicit(t, false, offer) {
                errors.push(spec.error_at("resources.gpu", nofit.message, Some(nofit.help)));
            }
            explicit_choice(format!("gpu:{t}:1"), t, offer, "named in the spec")
        }
        GpuRequest::Shard(n) => {
            if let Err(nofit) = gpu::check_explicit("shard", true, offer) {
                errors.push(spec.error_at("resources.gpu", nofit.message, Some(nofit.help)));
            }
            explicit_choice(format!("shard:{n}"), "shard", offer, "named in the spec")
        }
        GpuRequest::None => GpuChoice {
            gres: None,
            kind: None,
            count: 1,
            pool_partition: None,
            usable_gib: None,
            explanation: vec!["no GPU: training runs on CPU (`device=cpu`)".into()],
            warnings: vec![],
        },
    };
    (gpu, estimate)
}

/// The train stage's time limit (the spec's, else the site default), checked
/// against the site's maximum: as written, and in seconds.
fn train_time(spec: &Spec, policy: &Policy, errors: &mut Vec<SpecError>) -> (String, u64) {
    let train_time = spec
        .resources
        .time
        .as_ref()
        .map(|t| (t.text.clone(), t.seconds))
        .unwrap_or_else(|| policy.defaults.time_or("08:00:00"));
    if let Some((max_text, max_secs)) = policy.limits.max_time() {
        if train_time.1 > max_secs {
            errors.push(spec.error_at(
                "resources.time",
                format!("time limit {} is longer than the site's maximum {max_text} (`limits.max_time`)", train_time.0),
                Some(format!("ask for at most {max_text}; training resumes from last.pt when requeued")),
            ));
        }
    }

    train_time
}

/// What the stages of one plan share.
struct Graph<'a> {
    spec: &'a Spec,
    policy: &'a Policy,
    cluster: &'a Cluster,
    gpu: &'a GpuChoice,
    gpu_partition: Option<String>,
    cpu_partition: Option<String>,
    /// The sweep's array (val and export follow it task by task).
    array: Option<ArraySpec>,
    train_time: String,
}

impl Graph<'_> {
    /// Prepare, a search's ask, train and a search's tell.
    fn through_train(
        &self,
        train_array: Option<ArraySpec>,
        errors: &mut Vec<SpecError>,
    ) -> Vec<PlannedStage> {
        let Graph {
            spec,
            policy,
            cluster,
            gpu,
            ..
        } = *self;
        let cpu_partition_default = &self.cpu_partition;
        let gpu_partition = &self.gpu_partition;
        let name = &spec.run.name;
        let tune = spec.tune.as_ref();
        let mut stages = Vec::new();

        if let Some(prep) = &spec.stages.prepare {
            let defaults = StageDefaults {
                time: "01:00:00",
                partition: cpu_partition_default.clone(),
            };
            let stage = side_stage(
                spec,
                policy,
                StageKind::Prepare,
                &prep.resources,
                defaults,
                None,
                None,
                vec![],
                errors,
            );
            stages.push(stage);
        }
        let mut train_deps = Vec::new();
        if spec.stages.prepare.is_some() {
            train_deps.push(Dependency {
                stage: StageKind::Prepare,
                kind: DepKind::AfterOk,
            });
        }
        // A search's ask and tell jobs: on a CPU node, one array task per batch.
        let batch_stage = |kind, deps, errors: &mut Vec<SpecError>| {
            let batches = tune.map_or(0, |t| t.batches() as usize);
            side_stage(
                spec,
                policy,
                kind,
                &crate::spec::StageResources::default(),
                StageDefaults {
                    time: "00:30:00",
                    partition: cpu_partition_default.clone(),
                },
                None,
                Some(ArraySpec {
                    tasks: batches,
                    max_parallel: None,
                }),
                deps,
                errors,
            )
        };
        if tune.is_some() {
            // The ask job of each batch; the first waits for prepare, the
            // others for the tell before them (`run::submit`).
            let stage = batch_stage(StageKind::Ask, std::mem::take(&mut train_deps), errors);
            stages.push(stage);
            train_deps.push(Dependency {
                stage: StageKind::Ask,
                kind: DepKind::AfterOk,
            });
        }
        stages.push(PlannedStage {
            kind: StageKind::Train,
            job_name: format!("{name}.train"),
            partition: gpu_partition.clone(),
            account: spec.run.account.clone(),
            qos: spec.run.qos.clone(),
            time: self.train_time.clone(),
            cpus: 0,
            mem: String::new(),
            cpus_from_slurm: false,
            mem_from_slurm: false,
            workers: None,
            gres: gpu.gres.clone(),
            array: train_array,
            depends_on: train_deps,
            shaping: String::new(),
        });
        if let Some(t) = tune {
            check_parallel(
                spec,
                t,
                gpu.gres.as_deref(),
                cluster,
                gpu_partition.as_deref(),
                errors,
            );
            let stage = batch_stage(
                StageKind::Tell,
                vec![Dependency {
                    stage: StageKind::Train,
                    kind: DepKind::AfterAny,
                }],
                errors,
            );
            stages.push(stage);
        }
        stages
    }

    /// Val and export, each after the stage before it (task by task for a
    /// sweep).
    fn after_train(
        &self,
        errors: &mut Vec<SpecError>,
        warnings: &mut Vec<String>,
    ) -> Vec<PlannedStage> {
        let Graph {
            spec, policy, gpu, ..
        } = *self;
        let cpu_partition_default = &self.cpu_partition;
        let gpu_partition = &self.gpu_partition;
        let array = &self.array;
        let tune = spec.tune.as_ref();
        let mut stages = Vec::new();
        let per_task = if array.is_some() {
            DepKind::AfterCorr
        } else {
            DepKind::AfterOk
        };
        let mut last = StageKind::Train;
        if tune.is_some() {
            if spec.stages.val.is_some() {
                warnings.push("[stages.val] is not run in a search: each trial's own final validation gives its objective, and the best trial is exported".into());
            }
            last = StageKind::Tell;
        }
        if let Some(val) = spec.stages.val.as_ref().filter(|_| tune.is_none()) {
            let gres = match &val.gpu {
                // `yolo val` runs on one device: one GPU of the training's type.
                None | Some(GpuRequest::Auto) if gpu.count > 1 => {
                    gpu.kind.as_ref().map(|k| format!("gpu:{k}:1"))
                }
                None | Some(GpuRequest::Auto) => gpu.gres.clone(),
                Some(GpuRequest::None) => None,
                Some(GpuRequest::Mig(t)) | Some(GpuRequest::Type(t)) => Some(format!("gpu:{t}:1")),
                Some(GpuRequest::Shard(n)) => Some(format!("shard:{n}")),
            };
            let defaults = StageDefaults {
                time: "01:00:00",
                partition: gpu_partition.clone(),
            };
            let deps = vec![Dependency {
                stage: StageKind::Train,
                kind: per_task,
            }];
            let stage = side_stage(
                spec,
                policy,
                StageKind::Val,
                &val.resources,
                defaults,
                gres,
                array.clone(),
                deps,
                errors,
            );
            stages.push(stage);
            last = StageKind::Val;
        }
        if let Some(export) = &spec.stages.export {
            let defaults = StageDefaults {
                time: "00:30:00",
                partition: cpu_partition_default.clone(),
            };
            let deps = vec![Dependency {
                stage: last,
                kind: if tune.is_some() {
                    DepKind::AfterOk
                } else {
                    per_task
                },
            }];
            let stage = side_stage(
                spec,
                policy,
                StageKind::Export,
                &export.resources,
                defaults,
                None,
                // A search exports its best trial, one job.
                array.clone().filter(|_| tune.is_none()),
                deps,
                errors,
            );
            stages.push(stage);
        }

        stages
    }
}

/// `[tune] parallel` against what the cluster can ever run at once: the
/// slices (or GPUs) of the trials' kind on the nodes of their partition
/// (every node when none is named), each trial holding its ask.
fn check_parallel(
    spec: &Spec,
    tune: &crate::spec::Tune,
    gres: Option<&str>,
    cluster: &Cluster,
    partition: Option<&str>,
    errors: &mut Vec<SpecError>,
) {
    let Some(ask) = gres.and_then(super::resources::GpuAsk::parse) else {
        return;
    };
    let nodes: Vec<&crate::slurm::node::Node> =
        match partition.or_else(|| cluster.default_partition().map(|p| p.name.as_str())) {
            Some(p) => p.split(',').flat_map(|p| cluster.nodes_in(p)).collect(),
            None => cluster.nodes.iter().collect(),
        };
    let at_once: u64 = nodes
        .iter()
        .map(|n| ask.available_on(n) / ask.count.max(1))
        .sum();
    if u64::from(tune.parallel) > at_once {
        errors.push(spec.error_at(
            "tune.parallel",
            format!(
                "{} trials at once, but the cluster has room for at most {at_once} trainings on {} at a time (--gres={})",
                tune.parallel,
                ask.label(),
                gres.unwrap_or_default()
            ),
            Some(format!(
                "set parallel to at most {at_once}: a batch waits for its slowest trial, so trials that cannot start only make it longer"
            )),
        ));
    }
}

/// What a stage other than train gets when its `[stages.X]` table leaves a value out.
struct StageDefaults {
    time: &'static str,
    partition: Option<String>,
}

/// A stage other than train: its own resources over the defaults, its time
/// checked against the site's limit. CPUs and memory come from `shape_stage`.
#[expect(
    clippy::too_many_arguments,
    reason = "a stage is described by this many independent values"
)]
fn side_stage(
    spec: &Spec,
    policy: &Policy,
    kind: StageKind,
    res: &crate::spec::StageResources,
    defaults: StageDefaults,
    gres: Option<String>,
    array: Option<ArraySpec>,
    depends_on: Vec<Dependency>,
    errors: &mut Vec<SpecError>,
) -> PlannedStage {
    let name = stage_name(kind);
    let (time, secs) = match &res.time {
        Some(t) => (t.text.clone(), t.seconds),
        None => (
            defaults.time.to_string(),
            crate::slurm::time::parse_duration(defaults.time)
                .ok()
                .unwrap_or(0),
        ),
    };
    check_time(
        spec,
        policy,
        &format!("stages.{name}.time"),
        &time,
        secs,
        errors,
    );
    PlannedStage {
        kind,
        job_name: format!("{}.{name}", spec.run.name),
        partition: res.partition.clone().or(defaults.partition),
        account: spec.run.account.clone(),
        qos: spec.run.qos.clone(),
        time,
        cpus: 0,
        mem: String::new(),
        cpus_from_slurm: false,
        mem_from_slurm: false,
        workers: None,
        gres,
        array,
        depends_on,
        shaping: String::new(),
    }
}

fn check_time(
    spec: &Spec,
    policy: &Policy,
    key: &str,
    text: &str,
    secs: u64,
    errors: &mut Vec<SpecError>,
) {
    if let Some((max_text, max_secs)) = policy.limits.max_time() {
        if secs > max_secs {
            errors.push(spec.error_at(
                key,
                format!("time limit {text} is longer than the site's maximum {max_text} (`limits.max_time`)"),
                Some(format!("ask for at most {max_text}")),
            ));
        }
    }
}

/// Ultralytics' `batch` on several GPUs (DDP): the total over all of them,
/// each rank taking ⌊batch / gpus⌋; AutoBatch is single-GPU (Ultralytics
/// would fall back to batch 16 with a warning), so it is refused.
fn check_batch_for(
    spec: &Spec,
    gpus: u32,
    batch: Option<u32>,
    errors: &mut Vec<SpecError>,
    warnings: &mut Vec<String>,
) {
    use crate::spec::{ArgValue, Batch};
    let autobatch = "AutoBatch sizes the batch for one GPU; on several GPUs Ultralytics ignores it and trains with batch 16";
    if matches!(
        spec.train.batch,
        Some(Batch::AutoDefault | Batch::AutoFraction(_))
    ) {
        errors.push(spec.error_at(
            "train.batch",
            format!("AutoBatch on {gpus} GPUs: {autobatch}"),
            Some(format!(
                "set the total batch over the {gpus} GPUs, e.g. batch = {}",
                16 * gpus
            )),
        ));
    }
    let mut sizes: Vec<(String, u32)> = batch
        .map(|b| ("train.batch".to_string(), b))
        .into_iter()
        .collect();
    for axis in spec.sweep.axes.iter().filter(|a| a.key == "batch") {
        for (i, v) in axis.values.iter().enumerate() {
            let key = format!("sweep.batch[{i}]");
            match v {
                ArgValue::Int(n) if *n >= 1 => {
                    sizes.push((key, u32::try_from(*n).unwrap_or(u32::MAX)));
                }
                _ => errors.push(spec.error_at(
                    &key,
                    format!("AutoBatch on {gpus} GPUs: {autobatch}"),
                    Some("sweep fixed total batch sizes".into()),
                )),
            }
        }
    }
    for (key, b) in sizes {
        if b < gpus {
            errors.push(spec.error_at(
                &key,
                format!("batch {b} over {gpus} GPUs: Ultralytics' batch is the total over all GPUs, and each needs at least one image"),
                Some(format!("set batch to at least {gpus}, e.g. {}", 16 * gpus)),
            ));
        } else if b % gpus != 0 {
            warnings.push(format!(
                "`{key}` = {b} over {gpus} GPUs: each GPU trains on ⌊{b} / {gpus}⌋ = {} images, {} in all; a multiple of {gpus} uses the whole batch",
                b / gpus,
                b / gpus * gpus
            ));
        }
    }
}

fn explicit_choice(gres: String, kind: &str, offer: &Offer, why: &str) -> GpuChoice {
    GpuChoice {
        gres: Some(gres.clone()),
        kind: Some(kind.to_string()),
        count: 1,
        pool_partition: None,
        usable_gib: offer.usable_gib(kind),
        explanation: vec![format!("--gres={gres}: {why}")],
        warnings: vec![],
    }
}

/// The largest batch (None = AutoBatch) and imgsz over all sweep variants.
/// The model the estimate sizes for: `[train] model`, or with a sweep over
/// `model` the largest swept one (a model whose name does not say its size
/// counts as the largest, as `Estimate` assumes), so one slice fits every
/// variant. A registry model is here as its stand-in path, which carries its
/// version's recorded scale (`registry::spec`).
fn largest_model(spec: &Spec) -> &str {
    use crate::spec::ArgValue;
    let rank = |m: &str| super::estimate::scale_of(m).map_or(5, |s| s as u8);
    spec.sweep
        .axes
        .iter()
        .filter(|a| a.key == "model")
        .flat_map(|a| a.values.iter())
        .filter_map(|v| match v {
            ArgValue::Str(s) => Some(s.as_str()),
            _ => None,
        })
        .fold(None, |best: Option<&str>, m| match best {
            Some(b) if rank(b) >= rank(m) => Some(b),
            _ => Some(m),
        })
        .unwrap_or(&spec.train.model)
}

fn sweep_maxima(spec: &Spec, batch: Option<u32>, imgsz: u32) -> (Option<u32>, u32) {
    use crate::spec::ArgValue;
    let mut max_batch = batch;
    let mut max_imgsz = imgsz;
    for axis in &spec.sweep.axes {
        for v in &axis.values {
            match (axis.key.as_str(), v) {
                ("batch", ArgValue::Int(n)) if *n > 0 => {
                    let n = u32::try_from(*n).unwrap_or(u32::MAX);
                    max_batch = Some(max_batch.map_or(n, |b| b.max(n)));
                }
                ("imgsz", ArgValue::Int(n)) if *n > 0 => {
                    max_imgsz = max_imgsz.max(u32::try_from(*n).unwrap_or(u32::MAX));
                }
                _ => {}
            }
        }
    }
    (max_batch, max_imgsz)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(extra: &str) -> Spec {
        let dir = std::env::temp_dir();
        let text = format!(
            "version = 1\n[run]\nname = \"t\"\n[train]\nmodel = \"yolov8s.pt\"\ndata = \"d.yaml\"\n{extra}"
        );
        crate::spec::parse(&text, &dir.join("spec.toml").display().to_string()).unwrap()
    }

    /// The local test cluster as recorded from `scontrol` (two nodes, 16 CPUs,
    /// 64000 MB, gpu:1g.5gb:4,gpu:2g.10gb:2,gpu:a100:1, shard:8; cpu and gpu).
    fn cluster(max_array_size: Option<u64>) -> Cluster {
        let mut c =
            crate::slurm::cluster::parse(include_str!("../../tests/data/scontrol-shape-22.05.txt"))
                .unwrap();
        c.max_array_size = max_array_size;
        c
    }

    fn plan_of(s: &Spec, policy: &Policy, max_array_size: Option<u64>) -> Result<Plan, SpecErrors> {
        plan(s, Path::new("/w"), &cluster(max_array_size), policy)
    }

    use crate::plan::test_clusters::pool_cluster;

    fn pool_policy(max_gpus: Option<u32>) -> Policy {
        let mut policy = Policy::default();
        policy.pools.exclusive = Some(crate::plan::pools::Pool {
            partition: Some("pool".into()),
            types: None,
            max_gpus,
        });
        policy
    }

    #[test]
    fn several_gpus_of_one_node_get_their_share_and_workers_per_rank() {
        let s = spec("batch = 64\n[resources]\ngpu = \"a100:4\"\n[stages.val]\n");
        let p = plan(&s, Path::new("/w"), &pool_cluster(), &pool_policy(Some(8))).unwrap();
        let train = p.stage(StageKind::Train).unwrap();
        assert_eq!(train.gres.as_deref(), Some("gpu:a100:4"));
        assert_eq!(train.partition.as_deref(), Some("pool"));
        assert_eq!(p.gpu.count, 4);
        // Four A100s are all of node3's GPU units: the whole node, less the reserve.
        assert_eq!(
            (train.cpus, train.workers),
            (32, Some(7)),
            "{}",
            train.shaping
        );
        assert!(
            train.shaping.contains("a100:4 = 1/1")
                && train
                    .shaping
                    .ends_with("workers=7 per GPU (4 training processes)"),
            "{}",
            train.shaping
        );
        let val = p.stage(StageKind::Val).unwrap();
        assert_eq!(
            val.gres.as_deref(),
            Some("gpu:a100:1"),
            "yolo val uses one device"
        );

        let s = spec("batch = 32\n[resources]\ngpus = 2\n");
        let p = plan(&s, Path::new("/w"), &pool_cluster(), &pool_policy(Some(8))).unwrap();
        let train = p.stage(StageKind::Train).unwrap();
        assert_eq!(
            train.gres.as_deref(),
            Some("gpu:a100:2"),
            "{:?}",
            p.gpu.explanation
        );
        assert_eq!((train.cpus, train.workers), (16, Some(7)));

        // Without a pool or a partition, where the job would go: Slurm's
        // default partition, whose nodes have one A100 each.
        let err = plan(
            &spec("batch = 32\n[resources]\ngpus = 2\n"),
            Path::new("/w"),
            &pool_cluster(),
            &Policy::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("no node of partition cpu has 2 GPUs"), "{err}");

        let s = spec("workers = 3\n[resources]\ngpu = \"h100:4\"\n");
        let p = plan(&s, Path::new("/w"), &pool_cluster(), &pool_policy(None)).unwrap();
        let train = p.stage(StageKind::Train).unwrap();
        assert_eq!(train.cpus, 16, "(workers + 1) × 4 ranks");
    }

    #[test]
    fn counts_no_node_has_autobatch_and_small_batches_are_refused() {
        let at = |extra: &str, policy: &Policy| {
            plan(&spec(extra), Path::new("/w"), &pool_cluster(), policy)
                .unwrap_err()
                .to_string()
        };
        let err = at("[resources]\ngpu = \"a100:5\"\n", &pool_policy(None));
        assert!(
            err.contains("`resources.gpu`: train asks gpu:a100:5; the most any node in partition pool has is 4"),
            "{err}"
        );
        let err = at("[resources]\ngpu = \"h100:8\"\n", &pool_policy(Some(4)));
        assert!(
            err.contains("more than the site allows one training (4"),
            "{err}"
        );
        let err = at("batch = -1\n[resources]\ngpus = 4\n", &pool_policy(None));
        assert!(err.contains("`train.batch`: AutoBatch on 4 GPUs"), "{err}");
        let err = at(
            "batch = 2\n[resources]\ngpu = \"a100:4\"\n",
            &pool_policy(None),
        );
        assert!(err.contains("batch 2 over 4 GPUs"), "{err}");
        let err = at(
            "batch = 64\n[sweep]\nbatch = [32, 0.7]\n[resources]\ngpu = \"a100:4\"\n",
            &pool_policy(None),
        );
        assert!(
            err.contains("`sweep.batch[1]`: AutoBatch on 4 GPUs"),
            "{err}"
        );
        let p = plan(
            &spec("batch = 30\n[resources]\ngpu = \"a100:4\"\n"),
            Path::new("/w"),
            &pool_cluster(),
            &pool_policy(None),
        )
        .unwrap();
        assert!(
            p.warnings
                .iter()
                .any(|w| w.contains("⌊30 / 4⌋ = 7 images, 28 in all")),
            "{:?}",
            p.warnings
        );
    }

    #[test]
    fn auto_routes_by_size_and_names_the_pool() {
        let policy = pool_policy(Some(8));
        let route = |extra: &str| {
            let (model, extra) = extra.split_once('|').unwrap_or(("yolov8s.pt", extra));
            let text = format!(
                "version = 1\n[run]\nname = \"t\"\n[train]\nmodel = \"{model}\"\ndata = \"d.yaml\"\n{extra}"
            );
            let s = crate::spec::parse(&text, "/tmp/spec.toml").unwrap();
            let p = plan(&s, Path::new("/w"), &pool_cluster(), &policy).unwrap();
            let t = p.stage(StageKind::Train).unwrap().clone();
            (
                t.gres.unwrap_or_default(),
                t.partition.unwrap_or_default(),
                p.gpu.explanation,
            )
        };
        let (gres, _, _) = route("batch = 16\n");
        assert_eq!(gres, "gpu:1g.5gb:1");
        let (gres, partition, _) = route("yolov8x.pt|batch = 32\n");
        assert_eq!((gres.as_str(), partition.as_str()), ("gpu:a100:1", "pool"));
        let (gres, partition, why) = route("yolov8x.pt|imgsz = 1280\nbatch = 64\n");
        assert_eq!(
            (gres.as_str(), partition.as_str()),
            ("gpu:h100:3", "pool"),
            "{why:?}"
        );
        assert!(
            why.iter()
                .any(|l| l.contains("batch 64 split over 3 is batch 22 per GPU")),
            "{why:?}"
        );
    }

    #[test]
    fn a_spec_without_cpus_or_mem_gets_the_slice_share_and_matching_workers() {
        let p = plan_of(&spec(""), &Policy::default(), None).unwrap();
        let train = p.stage(StageKind::Train).unwrap();
        assert_eq!((train.cpus, train.mem.as_str()), (1, "4133M"));
        assert_eq!(train.workers, Some(0));
        assert!(!train.cpus_from_slurm && !train.mem_from_slurm);
        assert!(
            train.shaping.starts_with(
                "train: node1: 16 CPUs, 62.5 GiB, 15 GPU units; 1g.5gb = 1/15 → 1 CPU"
            ) && train.shaping.ends_with("workers=0"),
            "{}",
            train.shaping
        );
        assert!(
            !p.warnings.iter().any(|w| w.contains("such job(s)")),
            "the share fills every slice: {:?}",
            p.warnings
        );
        let prep = p.stage(StageKind::Prepare).unwrap();
        assert_eq!(
            (prep.cpus, prep.mem.as_str(), prep.workers),
            (2, "4G", None)
        );
    }

    #[test]
    fn explicit_values_win_are_checked_and_warn_when_they_leave_slices_idle() {
        let s = spec("workers = 8\n[resources]\nmem = \"16G\"\n");
        let p = plan_of(&s, &Policy::default(), None).unwrap();
        let train = p.stage(StageKind::Train).unwrap();
        assert_eq!(
            (train.cpus, train.mem.as_str(), train.workers),
            (9, "16G", None)
        );
        assert!(
            p.warnings
                .iter()
                .any(|w| w.contains("can run only 1 such job(s) at once on its 4 1g.5gb slice(s)")),
            "{:?}",
            p.warnings
        );
        let s = spec("workers = 20\n");
        let err = plan_of(&s, &Policy::default(), None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("`train.workers`: train asks 21 CPUs"), "{err}");
        let s = spec("[resources]\nmem = \"100G\"\n[stages.prepare]\ncpus = 64\n");
        let err = plan_of(&s, &Policy::default(), None)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`resources.mem`: train asks 100.0 GiB"),
            "{err}"
        );
        assert!(
            err.contains("`stages.prepare.cpus`: prepare asks 64 CPUs"),
            "{err}"
        );
        assert!(err.contains("has 2 errors"), "every error at once: {err}");
    }

    #[test]
    fn the_site_sets_a_profile_s_resources_and_slurm_defaults_come_after_it() {
        let mut policy = Policy::default();
        policy.resources.insert(
            "1g.5gb".into(),
            crate::plan::policy::SiteResources {
                cpus: Some(2),
                mem: Some("6G".into()),
            },
        );
        let p = plan_of(&spec(""), &policy, None).unwrap();
        let train = p.stage(StageKind::Train).unwrap();
        assert_eq!(
            (train.cpus, train.mem.as_str(), train.workers),
            (2, "6G", Some(1))
        );

        let mut c = cluster(None);
        c.job_defaults =
            crate::slurm::cluster::JobDefaults::parse("DefCpuPerGPU=3,DefMemPerGPU=5000");
        let p = plan(&spec(""), Path::new("/w"), &c, &Policy::default()).unwrap();
        let train = p.stage(StageKind::Train).unwrap();
        assert!(train.cpus_from_slurm && train.mem_from_slurm);
        assert_eq!((train.cpus, train.workers), (3, Some(2)));
        let p = plan(&spec(""), Path::new("/w"), &c, &policy).unwrap();
        assert!(
            !p.stage(StageKind::Train).unwrap().cpus_from_slurm,
            "the site file wins"
        );
    }

    #[test]
    fn the_default_graph_is_prepare_train_export_chained_afterok() {
        let p = plan_of(&spec(""), &Policy::default(), None).unwrap();
        let kinds: Vec<StageKind> = p.stages.iter().map(|s| s.kind).collect();
        assert_eq!(
            kinds,
            vec![StageKind::Prepare, StageKind::Train, StageKind::Export]
        );
        assert_eq!(p.stages[1].gres.as_deref(), Some("gpu:1g.5gb:1"));
        assert_eq!(p.stages[1].depends_on[0].stage, StageKind::Prepare);
        assert_eq!(p.stages[2].depends_on[0].kind, DepKind::AfterOk);
        assert!(
            p.stages[0].gres.is_none() && p.stages[2].gres.is_none(),
            "CPU stages hold no GPU"
        );
        assert_eq!(p.stages[1].job_name, "t.train");
    }

    #[test]
    fn a_sweep_makes_arrays_that_wait_per_task() {
        let s = spec("[stages.val]\n[sweep]\nlr0 = [0.1, 0.01, 0.001]\nmax_parallel = 2\n");
        let p = plan_of(&s, &Policy::default(), None).unwrap();
        assert!(
            p.stage(StageKind::Prepare).unwrap().array.is_none(),
            "prepare runs once"
        );
        let train = p.stage(StageKind::Train).unwrap();
        assert_eq!(train.array.as_ref().unwrap().slurm_value(), "0-2%2");
        let val = p.stage(StageKind::Val).unwrap();
        assert_eq!(val.depends_on[0].kind, DepKind::AfterCorr);
        assert_eq!(val.gres.as_deref(), Some("gpu:1g.5gb:1"));
        let export = p.stage(StageKind::Export).unwrap();
        assert_eq!(export.depends_on[0].stage, StageKind::Val);
        assert_eq!(export.depends_on[0].kind, DepKind::AfterCorr);
    }

    #[test]
    fn a_sweep_larger_than_max_array_size_is_refused_at_the_sweep() {
        let values: Vec<String> = (0..12).map(|i| format!("0.{i:02}1")).collect();
        let s = spec(&format!("[sweep]\nlr0 = [{}]\n", values.join(", ")));
        let err = plan_of(&s, &Policy::default(), Some(10)).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("12 variants") && text.contains("MaxArraySize is 10"),
            "{text}"
        );
        assert!(
            text.contains("spec.toml:7:1: `sweep`"),
            "points at the [sweep] line: {text}"
        );
    }

    #[test]
    fn site_limits_are_named_when_broken() {
        let mut policy = Policy::default();
        policy.limits.max_time = Some("04:00:00".into());
        policy.limits.max_array_size = Some(2);
        let s = spec("[resources]\ntime = \"08:00:00\"\n[sweep]\nlr0 = [0.1, 0.01, 0.001]\n");
        let text = plan_of(&s, &policy, Some(1001)).unwrap_err().to_string();
        assert!(
            text.contains("longer than the site's maximum 04:00:00 (`limits.max_time`)"),
            "{text}"
        );
        assert!(text.contains("`limits.max_array_size` is 2"), "{text}");
    }

    #[test]
    fn site_defaults_fill_what_the_spec_leaves_out() {
        let mut policy = Policy::default();
        policy.defaults.batch = Some(8);
        policy.defaults.imgsz = Some(640);
        policy.defaults.gpu_partition = Some("gpu".into());
        policy.defaults.cpu_partition = Some("cpu".into());
        let p = plan_of(&spec(""), &policy, None).unwrap();
        assert_eq!(p.batch_default, Some(8));
        assert_eq!(
            p.stage(StageKind::Train).unwrap().partition.as_deref(),
            Some("gpu")
        );
        assert_eq!(
            p.stage(StageKind::Prepare).unwrap().partition.as_deref(),
            Some("cpu")
        );
        // yolov8s at batch 8: about 2.5 GiB with headroom.
        assert!(p.estimate.as_ref().unwrap().needed_gib < 3.0);
    }

    #[test]
    fn a_gpu_the_cluster_lacks_is_refused_with_what_it_has() {
        let s = spec("[resources]\ngpu = \"3g.20gb\"\n");
        let text = plan_of(&s, &Policy::default(), None)
            .unwrap_err()
            .to_string();
        assert!(
            text.contains("no GPU of type `3g.20gb`") && text.contains("1g.5gb ×8"),
            "{text}"
        );
    }
}
