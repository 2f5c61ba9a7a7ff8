//! The nodes from one `sinfo --json`, and the errors Slurm reports inside its JSON.

use anyhow::{Context, Result};

use crate::slurm::node::Node;
use crate::slurm::{sinfo, Slurm};

/// A command's stdout as text without copying it (a lossy copy only when it
/// is not UTF-8).
pub(super) fn into_text(out: crate::process::Captured) -> String {
    String::from_utf8(out.stdout)
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Errors `sinfo --json` reports inside the document. Without a controller
/// 22.05 exits 0 with `"errors": [{"error": "Unspecified error", "errno": -1}]`
/// and no nodes, which must not pass for an empty cluster.
#[derive(serde::Deserialize)]
struct JsonErrors {
    #[serde(default)]
    errors: Vec<serde_json::Value>,
}

/// The nodes from one `sinfo --json`, failing on errors inside the document.
pub fn read_nodes(slurm: &Slurm) -> Result<Vec<Node>> {
    let text = into_text(slurm.run("sinfo", &["--json"])?);
    check_json_errors(&text, "sinfo --json")?;
    sinfo::parse_nodes(&text)
}

/// Fail when a Slurm JSON document carries errors.
pub fn check_json_errors(text: &str, command: &str) -> Result<()> {
    let doc: JsonErrors =
        serde_json::from_str(text).with_context(|| format!("parsing `{command}` output"))?;
    if doc.errors.is_empty() {
        return Ok(());
    }
    let described: Vec<String> = doc
        .errors
        .iter()
        .map(|e| {
            let what = e.get("error").and_then(|v| v.as_str()).unwrap_or("error");
            match e.get("errno") {
                Some(n) => format!("{what} (errno {n})"),
                None => what.to_string(),
            }
        })
        .collect();
    anyhow::bail!(
        "`{command}` reported: {} (is slurmctld up? try `scontrol ping`)",
        described.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_inside_sinfo_json_fail() {
        let unreachable =
            r#"{"meta":{},"errors":[{"error":"Unspecified error","errno":-1}],"nodes":[]}"#;
        let err = check_json_errors(unreachable, "sinfo --json").unwrap_err();
        assert!(
            err.to_string().contains("Unspecified error (errno -1)"),
            "{err}"
        );
        assert!(check_json_errors(r#"{"errors":[],"nodes":[]}"#, "sinfo --json").is_ok());
        assert!(check_json_errors(r#"{"nodes":[]}"#, "sinfo --json").is_ok());
    }
}
