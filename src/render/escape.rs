//! The templates' auto-escape: every printed value shell-quoted, lists as
//! quoted words, `|safe` values as they are.

use minijinja::value::{Value, ValueKind};
use minijinja::{AutoEscape, Error, ErrorKind, Output, State};

use crate::shell;

pub(super) const SHELL_ESCAPE: &str = "shell";

/// Shell-quote a value; lists become space-joined quoted words.
pub(super) fn shell_formatter(
    out: &mut Output,
    state: &mut State,
    value: &Value,
) -> Result<(), Error> {
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

#[cfg(test)]
mod tests {
    use minijinja::{Environment, UndefinedBehavior};

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
}
