//! The paths a spec names: resolved against the spec's directory, checked to
//! exist, and models made into paths the jobs can open.

use std::path::{Path, PathBuf};

use super::{ArgValue, Spec, SpecError};

/// Files the spec names that do not exist: `train.data`, and `train.model` (also
/// swept ones) when it is a path (contains '/'; bare names such as
/// `yolov8n.pt` are resolved by Ultralytics).
pub fn check_paths(spec: &Spec) -> Vec<SpecError> {
    let mut out = Vec::new();
    let base = match spec.origin.base_dir.display().to_string() {
        dot if dot == "." => "the current directory".to_string(),
        dir => dir,
    };
    let help = Some(format!(
        "relative paths are relative to the spec's directory ({base})"
    ));
    let data = spec.resolve(&spec.train.data);
    if !data.is_file() {
        out.push(spec.error_at(
            "train.data",
            format!("dataset YAML {} does not exist", data.display()),
            help.clone(),
        ));
    }
    let mut models: Vec<(String, String)> = vec![("train.model".into(), spec.train.model.clone())];
    for axis in spec.sweep.axes.iter().filter(|a| a.key == "model") {
        for (i, v) in axis.values.iter().enumerate() {
            if let ArgValue::Str(s) = v {
                models.push((format!("sweep.model[{i}]"), s.clone()));
            }
        }
    }
    for (key, model) in models {
        if model.contains('/') {
            let path = spec.resolve(&model);
            if !path.is_file() {
                let loc_key = if key.starts_with("sweep.") {
                    "sweep.model"
                } else {
                    key.as_str()
                };
                let mut e = spec.error_at(
                    loc_key,
                    format!("model file {} does not exist", path.display()),
                    help.clone(),
                );
                e.key = key;
                out.push(e);
            }
        }
    }
    out
}

/// A spec whose `[train]` names no model takes the site's `[defaults] model`
/// (which may be a registry model); without one, the error says what to add.
pub fn apply_default_model(spec: &mut Spec, default: Option<&str>) -> Option<SpecError> {
    if !spec.train.model.is_empty() {
        return None;
    }
    match default {
        Some(m) => {
            spec.train.model = m.to_string();
            None
        }
        None => Some(spec.error_at(
            "train.model",
            "missing key `model` in [train] (and the site file has no `[defaults] model`)",
            Some("add e.g. model = \"yolov8n.pt\", or model = \"registry:NAME\" from the site's model registry".into()),
        )),
    }
}

/// Where pretrained weights a spec names by bare file name (`yolov8n.pt`) may
/// come from: Ultralytics would download such a name at run time, which fails
/// on the offline compute nodes most clusters have.
#[derive(Debug, Clone, Copy, Default)]
pub struct WeightsSource<'a> {
    /// The site's shared weights directory (`[paths] weights`).
    pub cache: Option<&'a Path>,
    /// The site says compute nodes reach the internet (`[defaults] download_weights`).
    pub downloads_allowed: bool,
    /// The site has a model registry (`[registry] url`): the refusal points to it.
    pub registry: bool,
}

/// Make every model the jobs will load a path they can open: a path with a
/// `/` absolute (jobs run in the workdir, not the spec's directory), and a
/// bare `*.pt` name the file beside the spec or in the site's weights
/// directory. A bare `.pt` found in neither is an error, unless the site
/// allows downloads. Bare `.yaml` names are Ultralytics' own model configs
/// (training from scratch) and stay as they are.
pub fn resolve_weights(spec: &mut Spec, source: &WeightsSource<'_>) -> Vec<SpecError> {
    let cwd = std::env::current_dir().unwrap_or_default();
    let mut errors = Vec::new();
    let mut resolve = |spec: &Spec, key: &str, model: &str| -> Option<String> {
        // Resolved against the site's registry at submission (`registry::spec`).
        if model.starts_with(crate::names::model::PREFIX) {
            return None;
        }
        if model.contains('/') {
            let p = spec.resolve(model);
            return Some(
                if p.is_absolute() { p } else { cwd.join(p) }
                    .display()
                    .to_string(),
            );
        }
        if !model.to_ascii_lowercase().ends_with(".pt") {
            return None;
        }
        let beside = spec.resolve(model);
        if beside.is_file() {
            let abs = if beside.is_absolute() {
                beside
            } else {
                cwd.join(beside)
            };
            return Some(abs.display().to_string());
        }
        if let Some(cached) = source.cache.map(|c| c.join(model)).filter(|p| p.is_file()) {
            return Some(cached.display().to_string());
        }
        if !source.downloads_allowed {
            let mut e = spec.error_at(
                if key.starts_with("sweep.") { "sweep.model" } else { key },
                format!(
                    "pretrained weights {model} are neither beside the spec nor in the site's weights directory{}; \
                     Ultralytics would download them at run time, which fails on offline compute nodes",
                    source
                        .cache
                        .map(|c| format!(" ({})", c.display()))
                        .unwrap_or_default()
                ),
                Some(format!(
                    "give the weights' path (model = \"/shared/weights/{model}\"), ask your administrator to put {model} in \
                     [paths] weights, or train from scratch with model = \"{}.yaml\"{}",
                    model.trim_end_matches(".pt"),
                    if source.registry {
                        format!(
                            "; or train from the site's model registry: model = \"registry:{}\" (`yolo-sched models list` shows what it holds)",
                            model.trim_end_matches(".pt")
                        )
                    } else {
                        String::new()
                    }
                )),
            );
            e.key = key.to_string();
            errors.push(e);
        }
        None
    };
    if let Some(m) = resolve(spec, "train.model", &spec.train.model.clone()) {
        spec.train.model = m;
    }
    let mut replaced = Vec::new();
    for (a, axis) in spec
        .sweep
        .axes
        .iter()
        .enumerate()
        .filter(|(_, a)| a.key == "model")
    {
        for (i, v) in axis.values.iter().enumerate() {
            if let ArgValue::Str(s) = v {
                if let Some(m) = resolve(spec, &format!("sweep.model[{i}]"), s) {
                    replaced.push((a, i, m));
                }
            }
        }
    }
    for (a, i, m) in replaced {
        spec.sweep.axes[a].values[i] = ArgValue::Str(m);
    }
    errors
}

impl Spec {
    /// A path from the spec, resolved against the spec's directory when relative.
    pub fn resolve(&self, path: &str) -> PathBuf {
        let p = Path::new(path);
        if p.is_absolute() || self.origin.base_dir == Path::new(".") {
            p.to_path_buf()
        } else {
            self.origin.base_dir.join(p)
        }
    }

    /// `train.data` resolved against the spec's directory.
    pub fn data_path(&self) -> PathBuf {
        self.resolve(&self.train.data)
    }
}
