//! The GPU nodes as Slurm shows them now: each node's GPU model and GPUs,
//! inferred from its GRES types alone (pure), and refused where they do not
//! determine it.
//!
//! A MIG profile name belongs to few models (`1g.5gb` only to the A100-40GB),
//! so the types a node offers usually name its model; a node offering only a
//! whole-GPU type such as `a100` does not (40 or 80 GB), and then the model
//! must be given (`--gpu-model`). The number of GPUs is the whole ones plus
//! the fewest GPUs whose valid layouts hold the node's MIG instances.

use anyhow::{bail, Result};
use serde::Serialize;

use crate::gres::render::gpu_type_name;
use crate::mig::{builtin, GpuGeometry, LayoutCatalog, ProfileCounts};
use crate::slurm::node::Node;

/// One node's GPUs: a model yolo-sched can cut, or GPUs it cannot.
#[derive(Debug, Clone, Serialize)]
pub struct GpuNode {
    pub name: String,
    /// The built-in model (`NVIDIA A100-SXM4-40GB`); `None` for GPUs without
    /// MIG (a `v100`), which serve their type as they are.
    pub model: Option<String>,
    /// How the model was known: `gres types`, `--gpu-model`.
    pub model_from: String,
    /// Each GPU as it is now: `whole` or its instances.
    pub gpus: Vec<GpuNow>,
    /// Instances of types that no layout changes (GPUs without MIG), by type.
    pub fixed: Vec<(String, u32)>,
    #[serde(skip)]
    pub geometry: Option<GpuGeometry>,
}

/// One GPU as it is now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "mig", rename_all = "snake_case")]
pub enum GpuNow {
    Whole,
    Instances { counts: String },
}

impl GpuNode {
    /// The GRES types and counts this node offers now.
    pub fn offers(&self) -> ProfileCounts {
        let mut c = ProfileCounts::new();
        for (kind, n) in &self.fixed {
            c.add(kind, *n);
        }
        for g in &self.gpus {
            match g {
                GpuNow::Whole => c.add(&self.whole_type(), 1),
                GpuNow::Instances { counts } => {
                    for item in counts.split(',').filter(|s| !s.is_empty()) {
                        let (name, n) = item.split_once('*').unwrap_or((item, "1"));
                        c.add(name, n.parse().unwrap_or(1));
                    }
                }
            }
        }
        c
    }

    /// Each GPU now in words: `whole` or its instances.
    pub fn layout_words(&self) -> Vec<String> {
        self.gpus
            .iter()
            .map(|g| match g {
                GpuNow::Whole => "whole".to_string(),
                GpuNow::Instances { counts } => counts.clone(),
            })
            .collect()
    }

    /// The GRES type of one of its GPUs with MIG off.
    pub fn whole_type(&self) -> String {
        self.model.as_deref().map(gpu_type_name).unwrap_or_default()
    }
}

/// The GPU nodes of `cluster` in `partitions` (every partition when empty),
/// or of `only` when given. `model` names the GPU model of nodes whose types
/// do not determine it. Nodes that accept no job are left out.
pub fn read(
    nodes: &[Node],
    partitions: &[String],
    only: &[String],
    model: Option<&GpuGeometry>,
) -> Result<Vec<GpuNode>> {
    let mut out = Vec::new();
    for node in nodes {
        let in_scope = if only.is_empty() {
            partitions.is_empty() || node.partitions.iter().any(|p| partitions.contains(p))
        } else {
            only.contains(&node.name)
        };
        if !in_scope || !node.is_available() {
            continue;
        }
        let typed: Vec<(String, u32)> = node
            .gres
            .iter()
            .filter(|g| g.name == "gpu" && g.count > 0)
            .filter_map(|g| {
                g.kind.as_ref().map(|k| {
                    (
                        crate::mig::profile::normalize_profile_name(k),
                        u32::try_from(g.count).unwrap_or(u32::MAX),
                    )
                })
            })
            .collect();
        let untyped = node
            .gres
            .iter()
            .any(|g| g.name == "gpu" && g.kind.is_none() && g.count > 0);
        if typed.is_empty() {
            if untyped {
                bail!(
                    "node {} offers GPUs without a type (`gpu:N`): the advisor plans typed \
                     GRES only; give the GPUs a type in gres.conf (`Type=a100`), or leave the \
                     node out with --node",
                    crate::text::echo(&node.name)
                );
            }
            continue;
        }
        out.push(infer(&node.name, &typed, model)?);
    }
    Ok(out)
}

fn infer(name: &str, typed: &[(String, u32)], given: Option<&GpuGeometry>) -> Result<GpuNode> {
    let offers =
        |g: &GpuGeometry, kind: &str| g.profile(kind).is_some() || gpu_type_name(g.model()) == kind;
    let fits_all = |g: &GpuGeometry| typed.iter().all(|(k, _)| offers(g, k));
    let models = builtin::all();
    let candidates: Vec<&GpuGeometry> = models.iter().filter(|g| fits_all(g)).collect();
    let (geometry, from) =
        match (given, candidates.as_slice()) {
            (Some(g), _) if fits_all(g) => (Some(g.clone()), "--gpu-model"),
            (Some(g), _) => bail!(
                "node {}: --gpu-model {} does not offer its GRES types ({})",
                crate::text::echo(name),
                g.model(),
                list(typed)
            ),
            (None, [one]) => (Some((*one).clone()), "gres types"),
            (None, []) => {
                // No MIG model has these types: GPUs without MIG (a V100), or a
                // model yolo-sched does not know; either way they stay as they are.
                if typed.iter().any(|(k, _)| is_profile(k)) {
                    bail!(
                    "node {}: its MIG types ({}) belong to no GPU model yolo-sched knows ({}); \
                     the advisor cannot plan it",
                    crate::text::echo(name),
                    list(typed),
                    models.iter().map(|g| g.model()).collect::<Vec<_>>().join(", ")
                );
                }
                return Ok(GpuNode {
                    name: name.to_string(),
                    model: None,
                    model_from: "gres types (no MIG)".into(),
                    gpus: Vec::new(),
                    fixed: typed.to_vec(),
                    geometry: None,
                });
            }
            (None, many) => bail!(
                "node {}: its GRES types ({}) fit several GPU models ({}); refusing to guess: \
             say which with --gpu-model",
                crate::text::echo(name),
                list(typed),
                many.iter()
                    .map(|g| g.model())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
    let geometry = geometry.unwrap_or_else(builtin::a100_40gb);
    let whole = gpu_type_name(geometry.model());
    let mut instances = ProfileCounts::new();
    let mut wholes = 0;
    for (k, n) in typed {
        if *k == whole {
            wholes += n;
        } else {
            instances.add(k, *n);
        }
    }
    let mut gpus = vec![GpuNow::Whole; wholes as usize];
    for counts in split_into_gpus(&geometry, &instances).map_err(|e| {
        anyhow::anyhow!(
            "node {}: its instances ({}) are no layout of {} GPUs: {e}",
            crate::text::echo(name),
            instances,
            geometry.model()
        )
    })? {
        gpus.push(GpuNow::Instances {
            counts: counts.to_string(),
        });
    }
    Ok(GpuNode {
        name: name.to_string(),
        model: Some(geometry.model().to_string()),
        model_from: from.into(),
        gpus,
        fixed: Vec::new(),
        geometry: Some(geometry),
    })
}

fn is_profile(kind: &str) -> bool {
    let b = kind.as_bytes();
    b.first().is_some_and(u8::is_ascii_digit) && kind.contains("g.") && kind.ends_with("gb")
        || kind.contains("gb+")
}

fn list(typed: &[(String, u32)]) -> String {
    typed
        .iter()
        .map(|(k, n)| format!("{}:{n}", crate::text::echo(k)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The fewest GPUs of `geometry` whose layouts hold `instances`: each GPU
/// takes the fullest valid layout left that the remaining instances cover.
pub fn split_into_gpus(
    geometry: &GpuGeometry,
    instances: &ProfileCounts,
) -> Result<Vec<ProfileCounts>> {
    let catalog = LayoutCatalog::build(geometry);
    let mut left = instances.clone();
    let mut gpus = Vec::new();
    while !left.is_empty() {
        let covered = |c: &ProfileCounts| c.iter().all(|(p, n)| left.get(p) >= n);
        // The catalog is fullest first, so the first covered layout is the fullest.
        let Some(take) = catalog.layouts().iter().map(|p| p.counts()).find(covered) else {
            bail!("{left} fits no GPU");
        };
        let mut rest = ProfileCounts::new();
        for (p, n) in left.iter() {
            let n = n - take.get(p);
            if n > 0 {
                rest.add(p, n);
            }
        }
        left = rest;
        gpus.push(take);
        if gpus.len() > 4096 {
            bail!("more than 4096 GPUs");
        }
    }
    Ok(gpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn typed(items: &[(&str, u32)]) -> Vec<(String, u32)> {
        items.iter().map(|(k, n)| (k.to_string(), *n)).collect()
    }

    #[test]
    fn mig_types_name_the_model_and_the_gpus_are_counted() {
        // The local test cluster's node: 4 × 1g.5gb, 2 × 2g.10gb, one whole a100.
        let n = infer(
            "node1",
            &typed(&[("1g.5gb", 4), ("2g.10gb", 2), ("a100", 1)]),
            None,
        )
        .unwrap();
        assert_eq!(n.model.as_deref(), Some("NVIDIA A100-SXM4-40GB"));
        // One A100 holds two 2g.10gb and at most three 1g.5gb beside them.
        assert_eq!(n.gpus.len(), 3, "{:?}", n.gpus);
        assert_eq!(n.offers().get("1g.5gb"), 4);
        assert_eq!(n.offers().get("a100"), 1);
        let seven = infer("small1", &typed(&[("1g.5gb", 7)]), None).unwrap();
        assert_eq!(seven.gpus.len(), 1);
    }

    #[test]
    fn a_whole_type_alone_is_not_guessed() {
        let e = infer("gpu07", &typed(&[("a100", 8)]), None).unwrap_err();
        let msg = format!("{e:#}");
        assert!(
            msg.contains("refusing to guess") && msg.contains("--gpu-model"),
            "{msg}"
        );
        let given = builtin::a100_80gb();
        let n = infer("gpu07", &typed(&[("a100", 8)]), Some(&given)).unwrap();
        assert_eq!(n.gpus.len(), 8);
        assert_eq!(n.model_from, "--gpu-model");
        // A model that does not offer the node's types is refused.
        let wrong = builtin::h200();
        assert!(infer("gpu07", &typed(&[("1g.5gb", 7)]), Some(&wrong)).is_err());
    }

    #[test]
    fn gpus_without_mig_stay_as_they_are() {
        let n = infer("old1", &typed(&[("v100", 4)]), None).unwrap();
        assert!(n.model.is_none());
        assert_eq!(n.offers().get("v100"), 4);
        // An unknown MIG profile is refused, not taken for a whole GPU.
        assert!(infer("odd", &typed(&[("1g.7gb", 7)]), None).is_err());
    }

    #[test]
    fn splitting_instances_into_gpus_takes_the_fullest_first() {
        let g = builtin::h200();
        let mut c = ProfileCounts::new();
        c.add("1g.18gb", 14);
        assert_eq!(split_into_gpus(&g, &c).unwrap().len(), 2);
        c.add("7g.141gb", 1);
        assert_eq!(split_into_gpus(&g, &c).unwrap().len(), 3);
    }
}
