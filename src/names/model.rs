//! Model names, tags, notes and references (`NAME`, `NAME@3`, `NAME@production`),
//! checked strictly: a name becomes part of an object key and a file name, and
//! every one of them is echoed in messages and tables.

use std::fmt;

/// The longest model name or tag.
pub const MAX_NAME: usize = 64;
/// The longest note, in characters.
pub const MAX_NOTE: usize = 1000;

/// Check a model name: 1 to 64 letters, digits, `.`, `_` or `-`, starting
/// with a letter or digit, no `..`. `Err` says what is expected.
pub fn check_name(name: &str) -> Result<(), String> {
    check_word(name, "model name", "pcb-detector")
}

/// Check a Slurm account a version is published under (`--account`,
/// `SLURM_JOB_ACCOUNT`): a Slurm account name, 1 to 64 letters, digits, `.`,
/// `_` or `-`, starting with a letter or digit. It is stored in the record
/// and echoed in listings.
pub fn check_account(account: &str) -> Result<(), String> {
    check_word(account, "Slurm account", "vision")
}

/// Check a tag: like a name, and not all digits (that would read as a version).
pub fn check_tag(tag: &str) -> Result<(), String> {
    check_word(tag, "tag", "production")?;
    if tag.chars().all(|c| c.is_ascii_digit()) {
        return Err(format!(
            "tag `{tag}` is all digits, which reads as a version number; use a word such as `production`"
        ));
    }
    Ok(())
}

fn check_word(word: &str, what: &str, example: &str) -> Result<(), String> {
    let ok = !word.is_empty()
        && word.len() <= MAX_NAME
        && word
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        && !word.contains("..");
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{what} `{}` is not allowed: expected 1 to {MAX_NAME} letters, digits, '.', '_' or '-', starting with a letter or digit (e.g. `{example}`)",
            crate::text::echo(word)
        ))
    }
}

/// Check a note: at most [`MAX_NOTE`] characters, no control or invisible characters.
pub fn check_note(note: &str) -> Result<(), String> {
    let n = note.chars().count();
    if n > MAX_NOTE {
        return Err(format!(
            "the note is {n} characters long; at most {MAX_NOTE} are allowed"
        ));
    }
    if note
        .chars()
        .any(|c| c.is_control() || crate::text::is_invisible(c))
    {
        return Err(format!(
            "the note `{}` holds control or invisible characters; write it on one line of visible text",
            crate::text::echo(note)
        ));
    }
    Ok(())
}

/// Which version of a model a reference means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// The newest version that is not removed.
    Latest,
    Version(u32),
    Tag(String),
}

/// `NAME`, `NAME@3` or `NAME@TAG`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelRef {
    pub name: String,
    pub selector: Selector,
}

impl ModelRef {
    /// Parse and check a reference. `Err` says what is expected.
    pub fn parse(text: &str) -> Result<ModelRef, String> {
        let (name, sel) = match text.split_once('@') {
            Some((n, s)) => (n, Some(s)),
            None => (text, None),
        };
        check_name(name)?;
        let selector = match sel {
            None => Selector::Latest,
            Some(s) if !s.is_empty() && s.chars().all(|c| c.is_ascii_digit()) => {
                match s.parse::<u32>() {
                    Ok(v) if v >= 1 => Selector::Version(v),
                    _ => {
                        return Err(format!(
                            "version `{}` is out of range; versions count from 1",
                            crate::text::echo(s)
                        ))
                    }
                }
            }
            Some(s) => {
                check_tag(s)?;
                Selector::Tag(s.to_string())
            }
        };
        Ok(ModelRef {
            name: name.to_string(),
            selector,
        })
    }
}

impl fmt::Display for ModelRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.selector {
            Selector::Latest => write!(f, "{}", self.name),
            Selector::Version(v) => write!(f, "{}@{v}", self.name),
            Selector::Tag(t) => write!(f, "{}@{t}", self.name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_parse_and_print() {
        for (text, sel) in [
            ("pcb", Selector::Latest),
            ("pcb@3", Selector::Version(3)),
            ("pcb@production", Selector::Tag("production".into())),
        ] {
            let r = ModelRef::parse(text).unwrap();
            assert_eq!(r.name, "pcb");
            assert_eq!(r.selector, sel);
            assert_eq!(r.to_string(), text);
        }
    }

    #[test]
    fn hostile_names_tags_and_notes_are_refused_and_echoed_escaped() {
        let long = "a".repeat(10_000);
        for bad in [
            "",
            "../x",
            "a/b",
            "a..b",
            ".hidden",
            "-x",
            "x y",
            "x\u{1b}[31m",
            "x\n",
            long.as_str(),
            "é",
        ] {
            let e = check_name(bad).unwrap_err();
            assert!(!e.contains('\n') && !e.contains('\u{1b}'), "{e}");
            assert!(e.len() < 400, "{} long", e.len());
        }
        assert!(check_tag("7").is_err());
        for bad in ["pcb@0", "pcb@", "pcb@a/b", "pcb@99999999999", "@3"] {
            assert!(ModelRef::parse(bad).is_err(), "{bad} accepted");
        }
        check_note("trained on the March images, lr0=0.01").unwrap();
        let e = check_note("line\nbreak\u{1b}[2J").unwrap_err();
        assert!(e.contains("\\n") && !e.contains('\u{1b}'), "{e}");
        let e = check_note(&"n".repeat(10_240)).unwrap_err();
        assert!(e.contains("10240") && e.len() < 200, "{e}");
    }
}

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
    /// The node-local directory, a shell word (`"${TMPDIR:-/tmp}/yolo-sched-models-$(id -u)"/<sha>`,
    /// or below the dataset cache).
    pub dir: String,
}

impl RegistryModel {
    /// What the manifest records: `registry:NAME@N`.
    pub fn manifest_ref(&self) -> String {
        format!("{PREFIX}{}", self.reference)
    }
}

/// What a spec's `registry:` models resolved to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resolved {
    /// The version every variant trains from: `[train] model`'s when the
    /// sweep (if any) does not sweep `model`, or a one-variant sweep's.
    pub single: Option<RegistryModel>,
    /// With a sweep over `model` that names a registry model: one entry per
    /// variant, in `Spec::sweep_variants` order (the array task's index), that
    /// variant's version or `None` for a weights file. Empty otherwise.
    pub variants: Vec<Option<RegistryModel>>,
}

impl Resolved {
    /// No registry model at all.
    pub fn is_empty(&self) -> bool {
        self.single.is_none() && self.variants.iter().all(Option::is_none)
    }

    /// Every version the run trains from, each weights file once (by SHA-256),
    /// in the order the variants first use them: what the prepare stage pulls.
    pub fn distinct(&self) -> Vec<&RegistryModel> {
        let mut out: Vec<&RegistryModel> = Vec::new();
        for m in self.single.iter().chain(self.variants.iter().flatten()) {
            if !out.iter().any(|o| o.sha256 == m.sha256) {
                out.push(m);
            }
        }
        out
    }

    /// The manifest's `model_ref` (the single case) and `model_refs` (one per
    /// variant of a sweep over registry models; empty otherwise).
    pub fn manifest_refs(&self) -> (Option<String>, Vec<Option<String>>) {
        (
            self.single.as_ref().map(RegistryModel::manifest_ref),
            self.variants
                .iter()
                .map(|m| m.as_ref().map(RegistryModel::manifest_ref))
                .collect(),
        )
    }
}
