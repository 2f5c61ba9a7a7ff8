//! The template set: the built-ins compiled in, overridden file by file from a directory.

use std::path::{Path, PathBuf};

use anyhow::Result;
use minijinja::{AutoEscape, Environment, UndefinedBehavior};
use serde::Serialize;

use super::escape::{shell_formatter, SHELL_ESCAPE};

/// The templates shipped in `templates/`, by name.
pub const BUILTIN: [(&str, &str); 10] = [
    (
        "_header.sh.j2",
        include_str!("../../templates/_header.sh.j2"),
    ),
    (
        "_prologue.sh.j2",
        include_str!("../../templates/_prologue.sh.j2"),
    ),
    ("_agent.sh.j2", include_str!("../../templates/_agent.sh.j2")),
    (
        "prepare.sh.j2",
        include_str!("../../templates/prepare.sh.j2"),
    ),
    ("train.sh.j2", include_str!("../../templates/train.sh.j2")),
    ("val.sh.j2", include_str!("../../templates/val.sh.j2")),
    ("export.sh.j2", include_str!("../../templates/export.sh.j2")),
    ("_tune.sh.j2", include_str!("../../templates/_tune.sh.j2")),
    ("ask.sh.j2", include_str!("../../templates/ask.sh.j2")),
    ("tell.sh.j2", include_str!("../../templates/tell.sh.j2")),
];

/// A template set: the built-ins, overridden by files in `dir` when given.
pub struct Templates {
    env: Environment<'static>,
    pub dir: Option<PathBuf>,
}

/// Largest template file read from an override directory.
const TEMPLATE_LIMIT: u64 = 1 << 20;

/// Where a template directory came from: said in every error about it.
pub const FROM_FLAG: &str = "--templates";
/// The same directory named by the environment.
pub const FROM_ENV: &str = "YOLO_SCHED_TEMPLATES";

/// The override files `dir` holds, by built-in name, read in full. A missing
/// or unreadable directory, a directory that overrides nothing, a `.j2` file
/// whose name is no template's, and a template that is not a readable regular
/// file (a FIFO, a directory) are all invalid input that names `source`.
pub fn read_overrides(dir: &Path, source: &str) -> Result<Vec<(&'static str, String)>> {
    let shown = crate::text::echo_path(dir);
    let bad = |what: String| {
        crate::error::with_hint(
            crate::error::invalid(format!("template directory {shown} (from {source}) {what}")),
            format!(
                "give a directory holding templates named like the built-ins ({}), \
                 or unset {FROM_ENV} / leave out --templates to use the built-ins",
                BUILTIN.map(|(n, _)| n).join(", ")
            ),
        )
    };
    let entries = match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => {
            std::fs::read_dir(dir).map_err(|e| bad(format!("cannot be read: {e}")))?
        }
        Ok(_) => return Err(bad("is not a directory".into())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(bad("does not exist".into()))
        }
        Err(e) => return Err(bad(format!("cannot be read: {e}"))),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| bad(format!("cannot be listed: {e}")))?;
        names.push(entry.file_name().to_string_lossy().into_owned());
    }
    names.sort();
    let builtin: Vec<&str> = BUILTIN.iter().map(|(n, _)| *n).collect();
    if let Some(stray) = names
        .iter()
        .find(|n| n.ends_with(".j2") && !builtin.contains(&n.as_str()))
    {
        let near = crate::suggest::closest(stray, builtin.iter().copied())
            .map(|c| format!("; did you mean `{c}`?"))
            .unwrap_or_default();
        return Err(bad(format!(
            "holds `{}`, which is no template's name{near}",
            crate::text::echo(stray)
        )));
    }
    let mut out = Vec::new();
    for name in builtin {
        if !names.iter().any(|n| n == name) {
            continue;
        }
        let text = crate::fsutil::read_regular(&dir.join(name), TEMPLATE_LIMIT).map_err(|e| {
            bad(format!(
                "has a template `{name}` that cannot be read: {e:#}"
            ))
        })?;
        out.push((name, text));
    }
    if out.is_empty() {
        return Err(bad(format!(
            "overrides no template: none of its {} file(s) is named like a built-in",
            names.len()
        )));
    }
    Ok(out)
}

impl Templates {
    /// The built-ins, overridden from `dir` (told as coming from `--templates`).
    pub fn new(dir: Option<&Path>) -> Result<Self> {
        Self::from_source(dir.map(|d| (d, FROM_FLAG)))
    }

    /// The built-ins, overridden from a directory and the source that named it
    /// (`--templates`, `YOLO_SCHED_TEMPLATES`), which every error about it names.
    pub fn from_source(dir: Option<(&Path, &str)>) -> Result<Self> {
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        env.set_auto_escape_callback(|_| AutoEscape::Custom(SHELL_ESCAPE.into()));
        env.set_formatter(shell_formatter);
        env.set_syntax(
            minijinja::syntax::SyntaxConfig::builder()
                .keep_trailing_newline(true)
                .trim_blocks(true)
                .lstrip_blocks(true)
                .build()
                .expect("default delimiters are valid"),
        );
        let overrides = match dir {
            Some((d, source)) => read_overrides(d, source)?,
            None => Vec::new(),
        };
        for (name, source) in BUILTIN {
            let text = overrides
                .iter()
                .find(|(n, _)| *n == name)
                .map_or_else(|| source.to_string(), |(_, t)| t.clone());
            env.add_template_owned(name, text)
                .map_err(|e| crate::error::invalid(format!("template {name}: {e}")))?;
        }
        Ok(Templates {
            env,
            dir: dir.map(|(d, _)| d.to_path_buf()),
        })
    }

    /// Render one template with a serializable context.
    pub fn render<C: Serialize>(&self, name: &str, ctx: &C) -> Result<String> {
        let tmpl = self.env.get_template(name)?;
        tmpl.render(minijinja::value::Serde(ctx)).map_err(|e| {
            let mut msg = format!("rendering template {name}: {e}");
            if let Some(detail) = e.detail() {
                msg.push_str(&format!(" ({detail})"));
            }
            anyhow::anyhow!(msg)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_templates_parse() {
        Templates::new(None).unwrap();
    }

    fn refusal(dir: &Path, source: &str) -> String {
        let err = Templates::from_source(Some((dir, source)))
            .err()
            .expect("refused");
        assert_eq!(
            crate::error::kind_of(&err),
            Some(crate::error::Kind::InvalidInput),
            "{err:#}"
        );
        crate::error::describe(&err).join("\n")
    }

    #[test]
    fn a_directory_that_overrides_nothing_is_refused_naming_its_source() {
        let t = tempfile::tempdir().unwrap();
        let missing = t.path().join("nonexistent");
        let msg = refusal(&missing, FROM_ENV);
        assert!(
            msg.contains("does not exist") && msg.contains("(from YOLO_SCHED_TEMPLATES)"),
            "{msg}"
        );
        let file = t.path().join("file");
        std::fs::write(&file, "x").unwrap();
        assert!(refusal(&file, FROM_FLAG).contains("(from --templates) is not a directory"));
        // Files named unlike every template: once silently the built-ins.
        std::fs::write(t.path().join("train.sh"), "x").unwrap();
        assert!(refusal(t.path(), FROM_FLAG).contains("overrides no template"));
        std::fs::write(t.path().join("trian.sh.j2"), "x").unwrap();
        let msg = refusal(t.path(), FROM_FLAG);
        assert!(msg.contains("did you mean `train.sh.j2`?"), "{msg}");
    }

    #[test]
    fn a_template_that_is_a_fifo_is_refused_without_blocking() {
        let t = tempfile::tempdir().unwrap();
        nix::unistd::mkfifo(
            &t.path().join("train.sh.j2"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        let msg = refusal(t.path(), FROM_ENV);
        assert!(msg.contains("not a regular file"), "{msg}");
    }

    #[test]
    fn an_override_replaces_its_template_only() {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("val.sh.j2"), "echo {{ template_name }}\n").unwrap();
        let set = Templates::from_source(Some((t.path(), FROM_ENV))).unwrap();
        let ctx = serde_json::json!({"template_name": "val"});
        assert_eq!(set.render("val.sh.j2", &ctx).unwrap(), "echo val\n");
    }
}
