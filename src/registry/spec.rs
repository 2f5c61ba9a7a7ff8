//! `model = "registry:NAME[@N|@TAG]"` in a spec: resolved at submission to one
//! exact version (written into the manifest and the scripts, so `resume` runs
//! the same bytes even after a tag moved). The prepare stage copies the
//! weights to node-local storage, checksum-verified, before any GPU is held;
//! the train stage verifies (or copies again, on another node) and hands
//! Ultralytics the local path.

use anyhow::Result;

use super::access::Caller;
use super::names::ModelRef;
use super::store::Registry;
use super::url::SiteRegistry;
use crate::config::Site;
use crate::error::{invalid, kind_of, Kind};
use crate::spec::{ArgValue, Spec, SpecErrors};

/// The spelling of a registry model in a spec.
pub const PREFIX: &str = "registry:";

/// The exact version a run trains from, as the scripts use it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryModel {
    /// `NAME@N`.
    pub reference: String,
    /// The weights' file name (`best.pt`).
    pub file: String,
    pub sha256: String,
    /// The node-local directory, a shell word (`"${TMPDIR:-/tmp}"/yolo-sched-models/<sha>`,
    /// or below the dataset cache).
    pub dir: String,
}

impl RegistryModel {
    /// What the manifest records: `registry:NAME@N`.
    pub fn manifest_ref(&self) -> String {
        format!("{PREFIX}{}", self.reference)
    }
}

/// Resolve the spec's `registry:` model against the site's registry and put
/// a stand-in path in `train.model` (its scale kept for the memory estimate).
/// `None` when the spec names no registry model. An unknown name, version or
/// tag, or a site without a registry, is invalid input at the spec's line.
pub fn resolve_in_spec(site: &Site, spec: &mut Spec) -> Result<Option<RegistryModel>> {
    let at = |spec: &Spec, key: &str, message: String, help: Option<String>| {
        invalid(
            SpecErrors::new(&spec.origin.file, vec![spec.error_at(key, message, help)]).to_string(),
        )
    };
    let swept = spec.sweep.axes.iter().any(|a| {
        a.key == "model"
            && a.values
                .iter()
                .any(|v| matches!(v, ArgValue::Str(s) if s.starts_with(PREFIX)))
    });
    if swept {
        return Err(at(
            spec,
            "sweep.model",
            "registry models cannot be swept yet".into(),
            Some("train one registry model per run (`[train] model = \"registry:NAME\"`)".into()),
        ));
    }
    let Some(text) = spec.train.model.strip_prefix(PREFIX).map(str::to_string) else {
        return Ok(None);
    };
    let r = ModelRef::parse(&text).map_err(|e| at(spec, "train.model", e, None))?;
    let site_reg = SiteRegistry::from_site(site)?;
    let Some(url) = site_reg.url.as_ref() else {
        return Err(at(
            spec,
            "train.model",
            format!("names the registry model `{r}`, but the site has no model registry"),
            Some("ask your administrator for `[registry] url` in the site file (docs/registry.md), or name a weights file".into()),
        ));
    };
    let reg = Registry::open(url)?;
    // The submitter must be allowed to read the version: the prepare stage
    // pulls it as them, and a run must not be the way around the account.
    let listed = reg.resolve(&r, &Caller::current()).map_err(|e| {
        if kind_of(&e) == Some(Kind::InvalidInput) {
            let message = e
                .chain()
                .find_map(|c| c.downcast_ref::<crate::error::Typed>())
                .map_or_else(|| format!("{e:#}"), |t| t.message.clone());
            let hint = e.downcast_ref::<crate::error::Hint>().map_or_else(
                || "`yolo-sched models list` shows the models; nothing was submitted".into(),
                |h| format!("{}; nothing was submitted", h.0),
            );
            at(spec, "train.model", message, Some(hint))
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
        Some(cache) => format!("{}/yolo-sched-models/{short}", cache.shell_word()),
        None => format!("\"${{TMPDIR:-/tmp}}\"/yolo-sched-models/{short}"),
    };
    spec.train.model = match &listed.record.scale {
        Some(s) => format!("{}/yolo{s}.pt", listed.record.id()),
        None => format!("{}/{}", listed.record.id(), w.name),
    };
    Ok(Some(RegistryModel {
        reference: listed.record.id(),
        file: w.name,
        sha256: w.sha256,
        dir,
    }))
}
