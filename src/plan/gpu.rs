//! Which GRES a training stage asks for: the smallest slice that fits.
//!
//! Candidates are the GPU types the cluster has (the nodes' GRES, from
//! `slurm::cluster`; only the train partition's when it is known), in three pools:
//! MIG slices for small jobs, shards of GPUs without MIG for medium jobs (only
//! when the site configures a shared pool), whole GPUs for large jobs. `auto`
//! takes the first pool with a candidate whose usable memory covers the
//! estimate, and in it the candidate with the least memory. When no single
//! GPU holds it (or the spec asks `gpus = N`), several whole GPUs of one node
//! of the exclusive pool: the fewest that hold the batch split over them
//! (Ultralytics' DDP), up to the site's `[pools.exclusive] max_gpus`.

use std::collections::BTreeMap;

use serde::Serialize;

use super::estimate::Estimate;
use super::pools::{Pool, Pools};

/// Usable memory (GiB) of MIG profiles as `nvidia-smi mig -lgip` reports it:
/// less than the name says. A100-40GB, A100-80GB, H100-80GB, H200-141GB.
const MIG_USABLE_GIB: [(&str, f64); 17] = [
    ("1g.5gb", 4.75),
    ("1g.10gb", 9.5),
    ("2g.10gb", 9.75),
    ("3g.20gb", 19.62),
    ("4g.20gb", 19.62),
    ("7g.40gb", 39.5),
    ("1g.20gb", 19.5),
    ("2g.20gb", 19.5),
    ("3g.40gb", 39.25),
    ("4g.40gb", 39.25),
    ("7g.80gb", 78.5),
    ("1g.18gb", 16.0),
    ("1g.35gb", 32.25),
    ("2g.35gb", 32.25),
    ("3g.71gb", 69.5),
    ("4g.71gb", 69.5),
    ("7g.141gb", 139.75),
];

/// Memory of whole-GPU GRES types, for the common names. Sites with other
/// names (or 80 GB A100s named `a100`) set `[gpu_memory]` in the site file.
const WHOLE_GPU_GIB: [(&str, f64); 12] = [
    ("a100", 39.5),
    ("a100_80gb", 79.0),
    ("h100", 79.0),
    ("h200", 139.75),
    ("v100", 31.7),
    ("v100_16gb", 15.7),
    ("t4", 14.7),
    ("a10", 22.0),
    ("a30", 23.5),
    ("a40", 44.5),
    ("l4", 22.0),
    ("l40s", 44.5),
];

/// `1g.5gb` → (compute slices 1, nominal GB 5); also `1g.10gb+me` and the
/// other attribute forms (`mig::profile::ProfileName`).
pub fn parse_mig_profile(name: &str) -> Option<(u32, u32)> {
    crate::mig::profile::ProfileName::parse(name).map(|p| (p.compute_slices, p.memory_gb))
}

pub fn is_mig_profile(name: &str) -> bool {
    parse_mig_profile(name).is_some()
}

/// What the cluster offers and what the site allows.
#[derive(Debug, Clone, Default)]
pub struct Offer {
    /// GPU GRES types in the cluster with their counts (`1g.5gb` → 4).
    pub gpu_types: BTreeMap<String, u64>,
    /// Total shards in the cluster.
    pub shards: u64,
    /// When set, only these types may be requested.
    pub allowed: Option<Vec<String>>,
    pub pools: Pools,
    /// `[gpu_memory]` overrides, GiB per type.
    pub memory_overrides: BTreeMap<String, f64>,
    /// The most GPUs of each type on one node, over the nodes a training on
    /// several GPUs could go to (`Offer::with_pool_nodes`; else the same nodes
    /// as `gpu_types`).
    pub per_node: BTreeMap<String, u64>,
    /// The partition those nodes are in, when one is known (for messages).
    pub pool_partition: Option<String>,
}

impl Offer {
    /// What the cluster's nodes offer (only those of `partition` when the
    /// stage's partition is known before the choice), with the site's rules.
    pub fn from_cluster(
        cluster: &crate::slurm::cluster::Cluster,
        partition: Option<&str>,
        policy: &super::Policy,
    ) -> Offer {
        let mut gpu_types: BTreeMap<String, u64> = BTreeMap::new();
        let mut shards = 0u64;
        for node in nodes_in(cluster, partition) {
            for item in &node.gres {
                match (item.name.as_str(), &item.kind) {
                    ("gpu", Some(k)) if item.count > 0 => {
                        *gpu_types.entry(k.clone()).or_insert(0) += item.count
                    }
                    ("shard", _) => shards += item.count,
                    _ => {}
                }
            }
        }
        Offer {
            gpu_types,
            shards,
            allowed: policy.limits.allowed_gpus.clone(),
            pools: policy.pools.clone(),
            memory_overrides: policy.gpu_memory.clone(),
            per_node: most_per_node(cluster, partition),
            pool_partition: partition.map(str::to_string),
        }
    }

    /// Take the most GPUs per node from the nodes of `partition` (the
    /// partition a training on several GPUs goes to) instead.
    pub fn with_pool_nodes(
        mut self,
        cluster: &crate::slurm::cluster::Cluster,
        partition: Option<&str>,
    ) -> Offer {
        self.per_node = most_per_node(cluster, partition);
        self.pool_partition = partition.map(str::to_string);
        self
    }

    /// The site's largest count of GPUs for one training (`[pools.exclusive] max_gpus`).
    pub fn max_gpus(&self) -> Option<u32> {
        self.pools.exclusive.as_ref().and_then(|p| p.max_gpus)
    }

    /// Usable memory of a GRES type, when known.
    pub fn usable_gib(&self, gres_type: &str) -> Option<f64> {
        if let Some(v) = self.memory_overrides.get(gres_type) {
            return Some(*v);
        }
        let lower = gres_type.to_ascii_lowercase();
        if let Some((_, v)) = MIG_USABLE_GIB
            .iter()
            .find(|(n, _)| *n == lower.trim_end_matches("+me"))
        {
            return Some(*v);
        }
        if let Some((_, gb)) = parse_mig_profile(&lower) {
            // An unlisted profile: about 95 % of its nominal size is usable.
            return Some(f64::from(gb) * 0.95);
        }
        WHOLE_GPU_GIB
            .iter()
            .find(|(n, _)| *n == lower)
            .map(|(_, v)| *v)
    }

    /// The site allows this type (`[limits] allowed_gpus`).
    pub(crate) fn allowed(&self, t: &str) -> bool {
        self.allowed
            .as_ref()
            .is_none_or(|a| a.iter().any(|x| x == t))
    }

    /// The type belongs to the pool (its `types`, else every type).
    pub(crate) fn in_pool(pool: Option<&Pool>, t: &str) -> bool {
        pool.and_then(|p| p.types.as_ref())
            .is_none_or(|types| types.iter().any(|x| x == t))
    }

    /// What the cluster has, in words, for error messages.
    pub fn describe(&self) -> String {
        if self.gpu_types.is_empty() && self.shards == 0 {
            return "no GPU GRES at all".to_string();
        }
        let mut parts: Vec<String> = self
            .gpu_types
            .iter()
            .map(|(t, n)| match self.usable_gib(t) {
                Some(g) => format!("{t} ×{n} ({g:.2} GiB)"),
                None => format!("{t} ×{n} (memory unknown)"),
            })
            .collect();
        if self.shards > 0 {
            parts.push(format!("shard ×{}", self.shards));
        }
        parts.join(", ")
    }
}

fn nodes_in<'c>(
    cluster: &'c crate::slurm::cluster::Cluster,
    partition: Option<&'c str>,
) -> impl Iterator<Item = &'c crate::slurm::node::Node> {
    cluster
        .nodes
        .iter()
        .filter(move |n| partition.is_none_or(|p| n.partitions.iter().any(|x| x == p)))
}

/// The most GPUs of each type one node of `partition` has.
fn most_per_node(
    cluster: &crate::slurm::cluster::Cluster,
    partition: Option<&str>,
) -> BTreeMap<String, u64> {
    let mut most: BTreeMap<String, u64> = BTreeMap::new();
    for node in nodes_in(cluster, partition) {
        for item in &node.gres {
            if let ("gpu", Some(k)) = (item.name.as_str(), &item.kind) {
                let m = most.entry(k.clone()).or_insert(0);
                *m = (*m).max(node.gres_count("gpu", Some(k)));
            }
        }
    }
    most
}

/// The decision for the train stage.
#[derive(Debug, Clone, Serialize)]
pub struct GpuChoice {
    /// `--gres` value (`gpu:1g.5gb:1`, `shard:2`, `gpu:a100:1`), `None` for CPU training.
    pub gres: Option<String>,
    /// The GRES type or `shard`.
    pub kind: Option<String>,
    /// How many GPUs of one node (`gpu:h100:4` → 4); 1 for a slice, a shard
    /// request or CPU training.
    pub count: u32,
    /// Partition from the pool, if the site set one.
    pub pool_partition: Option<String>,
    pub usable_gib: Option<f64>,
    /// One line per step of the reasoning, for `--explain`.
    pub explanation: Vec<String>,
    pub warnings: Vec<String>,
}

/// Why no choice could be made: message and suggestion.
#[derive(Debug, Clone)]
pub struct NoFit {
    pub message: String,
    pub help: String,
}

/// Pick the smallest slice that fits `estimate` (for `gpu = "auto"`): a MIG
/// slice, else a shard, else one whole GPU, else several whole GPUs of one
/// node of the exclusive pool. `count` (the spec's `gpus = N`, N ≥ 2) goes
/// straight to N GPUs and picks only the type.
pub fn choose_auto(
    estimate: &Estimate,
    offer: &Offer,
    count: Option<u32>,
    warn_fraction: f64,
) -> Result<GpuChoice, NoFit> {
    let need = estimate.needed_gib;
    let mut explanation = vec![format!("estimate: {estimate}")];
    if let Some(n) = count.filter(|n| *n > 1) {
        explanation.push(format!(
            "the spec asks for {n} GPUs of one node (`gpus`): whole GPUs of the exclusive pool, no slice"
        ));
        return several(estimate, offer, Some(n), warn_fraction, explanation);
    }

    let mut mig: Vec<(f64, u32, &String)> = offer
        .gpu_types
        .keys()
        .filter(|t| {
            is_mig_profile(t) && offer.allowed(t) && Offer::in_pool(offer.pools.mig.as_ref(), t)
        })
        .filter_map(|t| {
            offer
                .usable_gib(t)
                .map(|g| (g, parse_mig_profile(t).map_or(0, |p| p.0), t))
        })
        .collect();
    mig.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.cmp(b.2)));
    if let Some((gib, _, t)) = mig.iter().find(|(g, _, _)| *g >= need) {
        explanation.push(format!("{t} has {gib:.2} GiB usable: the smallest MIG slice in the cluster that holds {need:.1} GiB"));
        return Ok(finish(
            format!("gpu:{t}:1"),
            t,
            *gib,
            offer.pools.mig.as_ref().and_then(|p| p.partition.clone()),
            need,
            warn_fraction,
            explanation,
        ));
    }
    if !mig.is_empty() {
        explanation.push(format!(
            "no MIG slice holds {need:.1} GiB (largest: {} with {:.2} GiB)",
            mig.last().map(|m| m.2.as_str()).unwrap_or(""),
            mig.last().map(|m| m.0).unwrap_or(0.0)
        ));
    }

    if let Some(shared) = &offer.pools.shared {
        if offer.shards > 0 && need <= shared.max_gib && shared.shard_gib > 0.0 {
            let n = (need / shared.shard_gib).ceil().max(1.0) as u64;
            explanation.push(format!(
                "shared pool: {need:.1} GiB ≤ {} GiB, {} GiB per shard → shard:{n} (shards are not fenced: other jobs share the GPU)",
                shared.max_gib, shared.shard_gib
            ));
            return Ok(GpuChoice {
                gres: Some(format!("shard:{n}")),
                kind: Some("shard".into()),
                count: 1,
                pool_partition: shared.partition.clone(),
                usable_gib: Some(n as f64 * shared.shard_gib),
                explanation,
                warnings: Vec::new(),
            });
        }
    }

    let mut whole: Vec<(f64, &String)> = offer
        .gpu_types
        .keys()
        .filter(|t| {
            !is_mig_profile(t)
                && offer.allowed(t)
                && Offer::in_pool(offer.pools.exclusive.as_ref(), t)
        })
        .filter_map(|t| offer.usable_gib(t).map(|g| (g, t)))
        .collect();
    whole.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(b.1)));
    if let Some((gib, t)) = whole.iter().find(|(g, _)| *g >= need) {
        explanation.push(format!(
            "whole GPU {t} ({gib:.2} GiB): the smallest GPU type that holds {need:.1} GiB"
        ));
        return Ok(finish(
            format!("gpu:{t}:1"),
            t,
            *gib,
            offer
                .pools
                .exclusive
                .as_ref()
                .and_then(|p| p.partition.clone()),
            need,
            warn_fraction,
            explanation,
        ));
    }
    if let Some((gib, t)) = whole.last() {
        explanation.push(format!(
            "no single GPU holds {need:.1} GiB (largest: {t} with {gib:.2} GiB)"
        ));
    }
    several(estimate, offer, None, warn_fraction, explanation)
}

/// Whole GPUs of the exclusive pool that may be taken several at a time:
/// (usable GiB, type, most on one node), smallest first.
fn pool_types(offer: &Offer) -> Vec<(f64, &String, u64)> {
    let mut types: Vec<(f64, &String, u64)> = offer
        .per_node
        .iter()
        .filter(|(t, _)| {
            !is_mig_profile(t)
                && offer.allowed(t)
                && Offer::in_pool(offer.pools.exclusive.as_ref(), t)
        })
        .filter_map(|(t, most)| offer.usable_gib(t).map(|g| (g, t, *most)))
        .collect();
    types.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(b.1)));
    types
}

/// Several whole GPUs of one node: `Some(n)` exactly n (the spec's count,
/// only the type is chosen), else the fewest from 2 to the site's
/// `max_gpus` that hold the batch split over them.
fn several(
    estimate: &Estimate,
    offer: &Offer,
    count: Option<u32>,
    warn_fraction: f64,
    mut explanation: Vec<String>,
) -> Result<GpuChoice, NoFit> {
    let need = estimate.needed_gib;
    let partition = offer
        .pools
        .exclusive
        .as_ref()
        .and_then(|p| p.partition.clone());
    let place = match &offer.pool_partition {
        Some(p) => format!("partition {p}"),
        None => "the cluster".to_string(),
    };
    let types = pool_types(offer);
    let max = offer.max_gpus();
    let counts: Vec<u32> = match count {
        Some(n) => {
            if let Some(m) = max.filter(|m| n > *m) {
                return Err(NoFit {
                    message: format!(
                        "{n} GPUs is more than the site allows one training ({m}, `[pools.exclusive] max_gpus`)"
                    ),
                    help: format!("ask for at most gpus = {m}"),
                });
            }
            vec![n]
        }
        None => {
            let refuse = |why: String, help: String| Err(NoFit { message: why, help });
            match max {
                Some(_) if estimate.autobatch => {
                    return refuse(
                        format!("no single GPU holds the estimated {need:.1} GiB ({estimate}), and AutoBatch (batch = -1 or a fraction) sizes the batch for one GPU only, so the training cannot be split over several"),
                        format!("set a fixed total `batch` (Ultralytics splits it over the GPUs), lower `imgsz`, or use a smaller model. The cluster has: {}", offer.describe()),
                    );
                }
                Some(m) if m >= 2 => (2..=m).collect(),
                _ => {
                    return refuse(
                        format!("no GPU in the cluster holds the estimated {need:.1} GiB ({estimate})"),
                        format!(
                            "the cluster has: {}. Lower `batch` or `imgsz`, use a smaller model, or name several GPUs of one node with `[resources] gpus` (the site's `[pools.exclusive] max_gpus` is not set, so `auto` does not split a training over GPUs by itself)",
                            offer.describe()
                        ),
                    );
                }
            }
        }
    };
    for n in counts {
        if estimate.batch < n && !estimate.autobatch {
            explanation.push(format!(
                "{n} GPUs: batch {} cannot be split over {n} GPUs (each needs at least one image)",
                estimate.batch
            ));
            break;
        }
        let per = estimate.per_gpu(n);
        let per_need = per.needed_gib;
        let fits = types
            .iter()
            .filter(|(_, _, most)| *most >= u64::from(n))
            .find(|(g, _, _)| *g >= per_need);
        if let Some((gib, t, most)) = fits {
            explanation.push(format!(
                "{n} GPUs of one node: batch {} split over {n} is batch {} per GPU: {per}",
                estimate.batch, per.batch
            ));
            explanation.push(format!(
                "{n} × {t} ({gib:.2} GiB each; a node of {place} has up to {most}): the fewest GPUs of the smallest type that hold {per_need:.1} GiB each{}",
                match &partition {
                    Some(p) => format!(", in the exclusive pool (partition {p})"),
                    None => String::new(),
                }
            ));
            let mut choice = finish(
                format!("gpu:{t}:{n}"),
                t,
                *gib,
                partition,
                per_need,
                warn_fraction,
                explanation,
            );
            choice.count = n;
            return Ok(choice);
        }
        explanation.push(format!(
            "{n} GPUs: {per_need:.1} GiB per GPU ({}); no node of {place} has {n} GPUs of a type that holds it",
            per
        ));
    }
    let offered: Vec<String> = types
        .iter()
        .map(|(g, t, most)| format!("{t} ×{most} per node ({g:.2} GiB each)"))
        .collect();
    Err(NoFit {
        message: match count {
            Some(n) => format!(
                "no node of {place} has {n} GPUs of one type that hold {:.1} GiB each ({estimate}, split over {n})",
                estimate.per_gpu(n).needed_gib
            ),
            None => format!(
                "no GPU in the cluster holds the estimated {need:.1} GiB ({estimate}), not even split over up to {} GPUs of one node",
                max.unwrap_or(1)
            ),
        },
        help: format!(
            "{} has whole GPUs: {}. Lower `batch` or `imgsz`, or use a smaller model",
            place,
            if offered.is_empty() {
                "none".to_string()
            } else {
                offered.join(", ")
            }
        ),
    })
}

fn finish(
    gres: String,
    kind: &str,
    gib: f64,
    pool_partition: Option<String>,
    need: f64,
    warn_fraction: f64,
    explanation: Vec<String>,
) -> GpuChoice {
    let mut warnings = Vec::new();
    if need > gib * warn_fraction {
        warnings.push(format!(
            "the estimate ({need:.1} GiB with headroom) is {:.0}% of {kind}'s {gib:.2} GiB, above the {:.0}% warning level: watch for out-of-memory errors",
            need / gib * 100.0,
            warn_fraction * 100.0
        ));
    }
    GpuChoice {
        gres: Some(gres),
        kind: Some(kind.to_string()),
        count: 1,
        pool_partition,
        usable_gib: Some(gib),
        explanation,
        warnings,
    }
}

/// Check an explicit request (`1g.5gb`, `a100`, `shard:N`) against the cluster.
pub fn check_explicit(kind: &str, is_shard: bool, offer: &Offer) -> Result<(), NoFit> {
    if is_shard {
        if offer.shards == 0 {
            return Err(NoFit {
                message: "the cluster has no `shard` GRES".into(),
                help: format!("the cluster has: {}", offer.describe()),
            });
        }
        return Ok(());
    }
    if !offer.allowed(kind) {
        return Err(NoFit {
            message: format!("the site does not allow `{kind}`"),
            help: format!(
                "allowed: {}",
                offer
                    .allowed
                    .as_ref()
                    .map(|a| a.join(", "))
                    .unwrap_or_default()
            ),
        });
    }
    if !offer.gpu_types.contains_key(kind) {
        let close = crate::suggest::closest(kind, offer.gpu_types.keys().map(String::as_str));
        return Err(NoFit {
            message: format!("the cluster has no GPU of type `{kind}`"),
            help: match close {
                Some(c) => format!("did you mean `{c}`? The cluster has: {}", offer.describe()),
                None => format!("the cluster has: {}", offer.describe()),
            },
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local_cluster() -> Offer {
        Offer {
            gpu_types: [("1g.5gb", 4), ("2g.10gb", 2), ("a100", 1)]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            shards: 8,
            ..Offer::default()
        }
    }

    #[test]
    fn yolov8s_at_640_batch16_fits_1g5gb_with_a_warning() {
        let c = choose_auto(
            &Estimate::new("yolov8s.pt", 640, Some(16)),
            &local_cluster(),
            None,
            0.8,
        )
        .unwrap();
        assert_eq!(c.gres.as_deref(), Some("gpu:1g.5gb:1"));
        assert!(
            c.explanation
                .iter()
                .any(|l| l.contains("1g.5gb has 4.75 GiB")),
            "{:?}",
            c.explanation
        );
        assert_eq!(c.warnings.len(), 1, "4.4 of 4.75 GiB is above 80%");
    }

    #[test]
    fn bigger_models_get_bigger_slices_then_whole_gpus() {
        let m = choose_auto(
            &Estimate::new("yolov8m.pt", 640, Some(16)),
            &local_cluster(),
            None,
            0.8,
        )
        .unwrap();
        assert_eq!(m.gres.as_deref(), Some("gpu:2g.10gb:1"));
        let x = choose_auto(
            &Estimate::new("yolov8x.pt", 640, Some(16)),
            &local_cluster(),
            None,
            0.8,
        )
        .unwrap();
        assert_eq!(x.gres.as_deref(), Some("gpu:a100:1"));
    }

    #[test]
    fn too_big_lists_what_the_cluster_has() {
        let err = choose_auto(
            &Estimate::new("yolov8x.pt", 1920, Some(64)),
            &local_cluster(),
            None,
            0.8,
        )
        .unwrap_err();
        assert!(err.message.contains("no GPU in the cluster holds"));
        assert!(err.help.contains("1g.5gb ×4 (4.75 GiB)"), "{}", err.help);
    }

    #[test]
    fn the_shared_pool_takes_medium_jobs_when_configured() {
        let mut offer = local_cluster();
        offer.gpu_types.remove("2g.10gb");
        offer.pools.shared = Some(crate::plan::pools::SharedPool {
            partition: Some("shared".into()),
            shard_gib: 4.0,
            max_gib: 16.0,
        });
        let c = choose_auto(
            &Estimate::new("yolov8m.pt", 640, Some(16)),
            &offer,
            None,
            0.8,
        )
        .unwrap();
        assert_eq!(c.gres.as_deref(), Some("shard:2"));
        assert_eq!(c.pool_partition.as_deref(), Some("shared"));
    }

    #[test]
    fn site_allow_list_and_memory_overrides_apply() {
        let mut offer = local_cluster();
        offer.allowed = Some(vec!["2g.10gb".into(), "a100".into()]);
        let c = choose_auto(
            &Estimate::new("yolov8n.pt", 640, Some(16)),
            &offer,
            None,
            0.8,
        )
        .unwrap();
        assert_eq!(c.gres.as_deref(), Some("gpu:2g.10gb:1"));
        offer.memory_overrides.insert("a100".into(), 79.0);
        assert_eq!(offer.usable_gib("a100"), Some(79.0));
    }

    #[test]
    fn explicit_requests_are_checked_with_suggestions() {
        let offer = local_cluster();
        assert!(check_explicit("1g.5gb", false, &offer).is_ok());
        let err = check_explicit("1g.5g", false, &offer).unwrap_err();
        assert!(err.help.contains("did you mean `1g.5gb`"), "{}", err.help);
        assert!(check_explicit("", true, &offer).is_ok());
        assert!(check_explicit("", true, &Offer::default()).is_err());
    }

    /// A cluster like the local one's: MIG slices, one A100 node, and an
    /// exclusive pool of nodes with four A100s and eight H100s.
    fn with_pool(max_gpus: Option<u32>) -> Offer {
        let mut offer = local_cluster();
        offer.gpu_types.insert("a100".into(), 5);
        offer.gpu_types.insert("h100".into(), 8);
        offer.per_node = [("1g.5gb", 4), ("2g.10gb", 2), ("a100", 4), ("h100", 8)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        offer.pool_partition = Some("pool".into());
        offer.pools.exclusive = Some(Pool {
            partition: Some("pool".into()),
            types: None,
            max_gpus,
        });
        offer
    }

    #[test]
    fn routing_small_to_a_slice_medium_to_a_gpu_large_to_several() {
        let offer = with_pool(Some(8));
        let small = choose_auto(
            &Estimate::new("yolov8n.pt", 640, Some(16)),
            &offer,
            None,
            0.8,
        )
        .unwrap();
        assert_eq!(small.gres.as_deref(), Some("gpu:1g.5gb:1"));
        assert_eq!(small.count, 1);
        let medium = choose_auto(
            &Estimate::new("yolov8x.pt", 640, Some(32)),
            &offer,
            None,
            0.8,
        )
        .unwrap();
        assert_eq!(
            medium.gres.as_deref(),
            Some("gpu:a100:1"),
            "{:?}",
            medium.explanation
        );
        assert_eq!(medium.pool_partition.as_deref(), Some("pool"));
        // YOLOv8x at 1280 px, batch 64: about 150 GiB, more than any one GPU.
        let large = choose_auto(
            &Estimate::new("yolov8x.pt", 1280, Some(64)),
            &offer,
            None,
            0.8,
        )
        .unwrap();
        assert!(large.count > 1, "{:?}", large.explanation);
        assert_eq!(
            large.gres.as_deref(),
            Some(format!("gpu:{}:{}", large.kind.as_deref().unwrap(), large.count).as_str())
        );
        assert_eq!(large.pool_partition.as_deref(), Some("pool"));
        let per = Estimate::new("yolov8x.pt", 1280, Some(64)).per_gpu(large.count);
        assert!(large.usable_gib.unwrap() >= per.needed_gib);
        // The fewest GPUs: one fewer would not hold the per-GPU share on any type.
        let fewer = Estimate::new("yolov8x.pt", 1280, Some(64)).per_gpu(large.count - 1);
        assert!(fewer.needed_gib > 79.0, "{fewer}");
        let text = large.explanation.join("\n");
        assert!(text.contains("no single GPU holds"), "{text}");
        assert!(
            text.contains("the exclusive pool (partition pool)"),
            "{text}"
        );
    }

    #[test]
    fn an_explicit_count_picks_only_the_type() {
        let offer = with_pool(Some(8));
        let c = choose_auto(
            &Estimate::new("yolov8n.pt", 640, Some(16)),
            &offer,
            Some(4),
            0.8,
        )
        .unwrap();
        assert_eq!(c.gres.as_deref(), Some("gpu:a100:4"), "{:?}", c.explanation);
        assert_eq!(c.count, 4);
        let c = choose_auto(
            &Estimate::new("yolov8n.pt", 640, Some(16)),
            &offer,
            Some(8),
            0.8,
        )
        .unwrap();
        assert_eq!(
            c.gres.as_deref(),
            Some("gpu:h100:8"),
            "only the H100 node has 8"
        );
        let err = choose_auto(
            &Estimate::new("yolov8n.pt", 640, Some(16)),
            &offer,
            Some(16),
            0.8,
        )
        .unwrap_err();
        assert!(err.message.contains("more than the site allows"), "{err:?}");
        let err = choose_auto(
            &Estimate::new("yolov8n.pt", 640, Some(16)),
            &with_pool(None),
            Some(16),
            0.8,
        )
        .unwrap_err();
        assert!(
            err.message
                .contains("no node of partition pool has 16 GPUs"),
            "{err:?}"
        );
        assert!(err.help.contains("h100 ×8 per node"), "{err:?}");
    }

    #[test]
    fn auto_splits_only_where_the_site_allows_and_never_autobatch() {
        let big = Estimate::new("yolov8x.pt", 1280, Some(64));
        let err = choose_auto(&big, &with_pool(None), None, 0.8).unwrap_err();
        assert!(err.help.contains("max_gpus` is not set"), "{err:?}");
        let err = choose_auto(&big, &with_pool(Some(1)), None, 0.8).unwrap_err();
        assert!(
            err.message.contains("no GPU in the cluster holds"),
            "{err:?}"
        );
        let auto = Estimate::new("yolov8x.pt", 3200, None);
        let err = choose_auto(&auto, &with_pool(Some(8)), None, 0.8).unwrap_err();
        assert!(err.message.contains("AutoBatch"), "{err:?}");
        // Not even 8 H100s hold this one.
        let huge = Estimate::new("yolov8x.pt", 6400, Some(16));
        let err = choose_auto(&huge, &with_pool(Some(8)), None, 0.8).unwrap_err();
        assert!(
            err.message.contains("not even split over up to 8"),
            "{err:?}"
        );
    }

    #[test]
    fn profile_names_parse() {
        assert_eq!(parse_mig_profile("1g.5gb"), Some((1, 5)));
        assert_eq!(parse_mig_profile("7g.141gb"), Some((7, 141)));
        assert_eq!(parse_mig_profile("1g.10gb+me"), Some((1, 10)));
        assert_eq!(parse_mig_profile("a100"), None);
    }
}
