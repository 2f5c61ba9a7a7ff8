//! What a training leaves in its run directory besides `results.csv`
//! (`results`) and the logs (`ultralytics`): Ultralytics' `args.yaml`, and
//! the dataset fingerprint the prepare stage recorded in
//! `prepare/summary.json`. `compare` and `registry publish` read them here.

use std::collections::BTreeMap;
use std::path::Path;

/// The largest `args.yaml` or `summary.json` read.
pub const SMALL_FILE_LIMIT: u64 = 1 << 20;

/// Ultralytics' `args.yaml`: a flat mapping of scalars (`yaml_save` of the
/// trainer's arguments). Only top-level `key: value` lines are read.
pub fn parse_args_yaml(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter(|l| !l.starts_with([' ', '\t', '-', '#']))
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            let v = v.trim();
            let v = v
                .strip_prefix('\'')
                .and_then(|x| x.strip_suffix('\''))
                .or_else(|| v.strip_prefix('"').and_then(|x| x.strip_suffix('"')))
                .unwrap_or(v);
            Some((k.trim().to_string(), v.to_string()))
        })
        .collect()
}

/// The dataset fingerprint the prepare stage recorded.
pub fn recorded_fingerprint(workdir: &Path) -> Option<String> {
    let text = crate::fsutil::read_regular(&workdir.join("prepare/summary.json"), SMALL_FILE_LIMIT)
        .ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v.get("fingerprint")?
        .as_str()
        .filter(|f| !f.is_empty())
        .map(str::to_string)
}
