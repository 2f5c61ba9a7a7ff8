//! Spec text to `Spec`, and a spec file read, parsed and its paths checked.

use std::path::{Path, PathBuf};

use super::{check_paths, Spec, SpecErrors};

/// Parse and validate spec text. `file_name` names the spec in messages, and its
/// directory is the base for the spec's relative paths.
pub fn parse(text: &str, file_name: &str) -> Result<Spec, SpecErrors> {
    let base_dir = Path::new(file_name)
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    super::parse::parse_spec(text, file_name, base_dir)
}

/// The largest spec read: far above any real spec (a few KB), far below what
/// would make validation slow.
pub const MAX_SPEC_BYTES: u64 = 16 << 20;

/// Read, parse and validate a spec file, and check that the dataset YAML (and a
/// model given as a path) exist. Errors are `crate::error::invalid` (exit 2) with
/// every problem listed.
pub fn load(path: &Path) -> anyhow::Result<Spec> {
    read_checked(path)?.map_err(|errors| crate::error::invalid(errors.to_string()))
}

/// Like `load`, but the spec's problems come back as data (for `--json`); only a
/// file that cannot be read is an `Err` (exit 2).
pub fn read_checked(path: &Path) -> anyhow::Result<Result<Spec, SpecErrors>> {
    let name = path.display().to_string();
    let text = crate::fsutil::read_regular(path, MAX_SPEC_BYTES)
        .map_err(|e| crate::error::invalid(format!("cannot read spec {name}: {e:#}")))?;
    let spec = match parse(&text, &name) {
        Ok(spec) => spec,
        Err(errors) => return Ok(Err(errors)),
    };
    let missing = check_paths(&spec);
    if missing.is_empty() {
        Ok(Ok(spec))
    } else {
        Ok(Err(SpecErrors::new(&name, missing)))
    }
}
