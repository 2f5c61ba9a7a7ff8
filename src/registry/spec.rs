//! `model = "registry:NAME[@N|@TAG]"` in a spec (`[train] model`, or values
//! of `[sweep] model`): each resolved at submission to one exact version
//! (written into the manifest and the scripts, so `resume` runs the same
//! bytes even after a tag moved). The prepare stage copies every distinct
//! version's weights to node-local storage, checksum-verified, before any GPU
//! is held; the train stage (each array task its own variant's version)
//! verifies (or copies again, on another node) and hands Ultralytics the
//! local path.

use anyhow::Result;

use super::access::Caller;
use super::store::Registry;
use super::url::SiteRegistry;
use crate::config::Site;
use crate::error::{invalid, kind_of, Kind};
use crate::names::model::{ModelRef, RegistryModel, Resolved, PREFIX};
use crate::spec::{ArgValue, Spec, SpecErrors};

/// The error of a spec key, as invalid input at the spec's `file:line`.
fn at(spec: &Spec, key: &str, message: String, help: Option<String>) -> anyhow::Error {
    invalid(SpecErrors::new(&spec.origin.file, vec![spec.error_at(key, message, help)]).to_string())
}

/// Resolve the spec's `registry:` models against the site's registry: `[train]
/// model` and every value of `[sweep] model`. Each is replaced in the spec by a
/// stand-in path that keeps its recorded scale (`NAME@N/yolov8s.pt`), for the
/// memory estimate; the scripts never see it. An unknown name, version or tag,
/// or a site without a registry, is invalid input at the spec's line
/// (`train.model` or `sweep.model`); nothing is written anywhere.
pub fn resolve_in_spec(site: &Site, spec: &mut Spec) -> Result<Resolved> {
    let mut slot: Option<Registry> = None;
    // Asked of sacctmgr at most once, and only for a version that is neither
    // public nor the submitter's own.
    let caller = Caller::current();
    let model_axis = spec.sweep.axes.iter().position(|a| a.key == "model");

    // `[train] model`: checked even when a sweep over `model` replaces it.
    let mut train = None;
    if let Some(text) = spec.train.model.strip_prefix(PREFIX).map(str::to_string) {
        let r = ModelRef::parse(&text).map_err(|e| at(spec, "train.model", e, None))?;
        let reg = opened(&mut slot, site, spec, "train.model", &r)?;
        let (m, stand_in) = resolve_one(spec, "train.model", reg, &r, &caller)?;
        spec.train.model = stand_in;
        train = Some(m);
    }
    let Some(a) = model_axis else {
        return Ok(Resolved {
            single: train,
            variants: Vec::new(),
        });
    };

    // `[sweep] model`: each registry value once, then each variant its own.
    let mut by_value: Vec<Option<(RegistryModel, String)>> = Vec::new();
    for v in spec.sweep.axes[a].values.clone() {
        let resolved = match v {
            ArgValue::Str(s) if s.starts_with(PREFIX) => {
                let r = ModelRef::parse(&s[PREFIX.len()..])
                    .map_err(|e| at(spec, "sweep.model", e, None))?;
                let reg = opened(&mut slot, site, spec, "sweep.model", &r)?;
                Some(resolve_one(spec, "sweep.model", reg, &r, &caller)?)
            }
            _ => None,
        };
        by_value.push(resolved);
    }
    if by_value.iter().all(Option::is_none) {
        return Ok(Resolved {
            single: None,
            variants: Vec::new(),
        });
    }
    let values = &spec.sweep.axes[a].values;
    let variants: Vec<Option<RegistryModel>> = spec
        .sweep_variants()
        .iter()
        .map(|variant| {
            let i = variant
                .get("model")
                .and_then(|m| values.iter().position(|v| v == m))?;
            by_value[i].as_ref().map(|(m, _)| m.clone())
        })
        .collect();
    for (v, resolved) in spec.sweep.axes[a].values.iter_mut().zip(&by_value) {
        if let Some((_, stand_in)) = resolved {
            *v = ArgValue::Str(stand_in.clone());
        }
    }
    if variants.len() == 1 {
        // A sweep of one variant is a single training (no array).
        return Ok(Resolved {
            single: variants.into_iter().next().flatten(),
            variants: Vec::new(),
        });
    }
    Ok(Resolved {
        single: None,
        variants,
    })
}

/// The site's registry, opened at the first registry model (`key`, `r`: the
/// error of a site without one names them).
fn opened<'a>(
    slot: &'a mut Option<Registry>,
    site: &Site,
    spec: &Spec,
    key: &str,
    r: &ModelRef,
) -> Result<&'a Registry> {
    if slot.is_none() {
        let site_reg = SiteRegistry::from_site(site)?;
        let Some(url) = site_reg.url.as_ref() else {
            return Err(at(
                spec,
                key,
                format!("names the registry model `{r}`, but the site has no model registry"),
                Some("ask your administrator for `[registry] url` in the site file (docs/registry.md), or name a weights file".into()),
            ));
        };
        *slot = Some(Registry::open(url)?);
    }
    Ok(slot.as_ref().expect("opened above"))
}

/// Resolve ONE registry reference of the spec (at `key`, for errors) to its
/// exact version, its blobs checked (the registry is read, nothing written):
/// the version as the scripts use it, and the stand-in model path that keeps
/// its recorded scale for the memory estimate.
pub fn resolve_one(
    spec: &Spec,
    key: &str,
    reg: &Registry,
    r: &ModelRef,
    caller: &Caller,
) -> Result<(RegistryModel, String)> {
    // The submitter must be allowed to read the version: the prepare stage
    // pulls it as them, and a run must not be the way around the account.
    let listed = reg.resolve(r, caller).map_err(|e| {
        if kind_of(&e) == Some(Kind::InvalidInput) {
            let message = e
                .chain()
                .find_map(|c| c.downcast_ref::<crate::error::Typed>())
                .map_or_else(|| format!("{e:#}"), |t| t.message.clone());
            let hint = e.downcast_ref::<crate::error::Hint>().map_or_else(
                || "`yolo-sched models list` shows the models; nothing was submitted".into(),
                |h| format!("{}; nothing was submitted", h.0),
            );
            at(spec, key, message, Some(hint))
        } else {
            e
        }
    })?;
    reg.check_blobs(&listed.record)?;
    let w = listed
        .record
        .weights()
        .expect("a valid record names its weights")
        .clone();
    let short = &w.sha256[..16];
    let dir = match spec.stages.prepare.as_ref().and_then(|p| p.cache.as_ref()) {
        // One directory per user: `pull --private` refuses one another user
        // made or could change, and `/tmp` is everyone's.
        Some(cache) => format!(
            "{}/yolo-sched-models-\"$(id -u)\"/{short}",
            cache.shell_word()
        ),
        None => format!("\"${{TMPDIR:-/tmp}}/yolo-sched-models-$(id -u)\"/{short}"),
    };
    let stand_in = match &listed.record.scale {
        Some(s) => format!("{}/yolo{s}.pt", listed.record.id()),
        None => format!("{}/{}", listed.record.id(), w.name),
    };
    Ok((
        RegistryModel {
            reference: listed.record.id(),
            file: w.name,
            sha256: w.sha256,
            dir,
        },
        stand_in,
    ))
}
