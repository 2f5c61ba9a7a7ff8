//! sbatch scripts from the templates in `templates/`.
//!
//! Templates are Jinja (minijinja) with two rules that make a generated script
//! safe whatever a spec contains:
//! - every `{{ value }}` is shell-quoted on output (a custom auto-escape), and a
//!   list renders as its quoted items joined by spaces; only values a template
//!   marks `|safe` are written as they are (the spec's `setup` lines, which are
//!   the user's own shell commands by design);
//! - an undefined variable is an error, not an empty string.
//!
//! The built-in templates are compiled in; a directory given by `--templates`
//! (or the site file) overrides them file by file.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use minijinja::value::{Value, ValueKind};
use minijinja::{AutoEscape, Environment, Error, ErrorKind, Output, State, UndefinedBehavior};
use serde::Serialize;

use crate::shell;

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

pub mod scripts;

const SHELL_ESCAPE: &str = "shell";

/// Shell-quote a value; lists become space-joined quoted words.
fn shell_formatter(out: &mut Output, state: &mut State, value: &Value) -> Result<(), Error> {
    if value.is_safe()
        || !matches!(state.auto_escape(), AutoEscape::Custom(name) if name == SHELL_ESCAPE)
    {
        return write!(out, "{value}").map_err(Error::from);
    }
    if value.is_undefined() || value.is_none() {
        return Err(Error::new(
            ErrorKind::UndefinedError,
            "a template printed an undefined or none value",
        ));
    }
    if let Some(s) = value.as_str() {
        return out.write_str(&shell::quote(s)).map_err(Error::from);
    }
    match value.kind() {
        ValueKind::Seq | ValueKind::Iterable => {
            let mut first = true;
            for item in value.try_iter()? {
                if !first {
                    out.write_str(" ").map_err(Error::from)?;
                }
                first = false;
                shell_formatter(out, state, &item)?;
            }
            return Ok(());
        }
        ValueKind::Map | ValueKind::Plain | ValueKind::Invalid => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "a template printed a map or object; print its fields",
            ));
        }
        _ => {}
    }
    out.write_str(&shell::quote(&value.to_string()))
        .map_err(Error::from)
}

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

    fn env_with(source: &str) -> Environment<'static> {
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        env.set_auto_escape_callback(|_| AutoEscape::Custom(SHELL_ESCAPE.into()));
        env.set_formatter(shell_formatter);
        env.add_template_owned("t", source.to_string()).unwrap();
        env
    }

    #[test]
    fn values_are_quoted_lists_are_joined_and_safe_is_raw() {
        let env = env_with("a={{ a }} l={{ l }} s={{ s|safe }}");
        let out = env
            .get_template("t")
            .unwrap()
            .render(minijinja::context! { a => "x; rm -rf /", l => vec!["lr0=0.01", "$(id)"], s => "echo $HOME" })
            .unwrap();
        assert_eq!(out, "a='x; rm -rf /' l=lr0=0.01 '$(id)' s=echo $HOME");
    }

    #[test]
    fn undefined_is_an_error() {
        let env = env_with("{{ missing }}");
        assert!(env.get_template("t").unwrap().render(()).is_err());
    }

    #[test]
    fn builtin_templates_parse() {
        Templates::new(None).unwrap();
    }
}
