//! The template set: the built-ins compiled in, overridden file by file from a directory.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use minijinja::{AutoEscape, Environment, UndefinedBehavior};
use serde::Serialize;

use super::escape::{shell_formatter, SHELL_ESCAPE};

/// The templates shipped in `templates/`, by name.
pub const BUILTIN: [(&str, &str); 7] = [
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
];

/// A template set: the built-ins, overridden by files in `dir` when given.
pub struct Templates {
    env: Environment<'static>,
    pub dir: Option<PathBuf>,
}

impl Templates {
    pub fn new(dir: Option<&Path>) -> Result<Self> {
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
        if let Some(dir) = dir {
            if !dir.is_dir() {
                return Err(crate::error::invalid(format!(
                    "template directory {} does not exist",
                    dir.display()
                )));
            }
        }
        for (name, source) in BUILTIN {
            let text = match dir.map(|d| d.join(name)) {
                Some(p) if p.exists() => std::fs::read_to_string(&p)
                    .with_context(|| format!("reading template {}", p.display()))?,
                _ => source.to_string(),
            };
            env.add_template_owned(name, text)
                .map_err(|e| crate::error::invalid(format!("template {name}: {e}")))?;
        }
        Ok(Templates {
            env,
            dir: dir.map(Path::to_path_buf),
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
}
