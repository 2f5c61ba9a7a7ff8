//! The error-collecting reader: positions, typed reads of TOML values, and
//! every problem recorded with its line, column and key path.

use std::collections::BTreeMap;
use std::ops::Range;

use toml::de::{DeArray, DeTable, DeValue};
use toml::Spanned;

use super::keys::unknown_key;
use crate::spec::error::{Location, SpecError};
use crate::spec::values::{self, Problem};

pub(super) type Val<'i> = Spanned<DeValue<'i>>;
/// The parsing context: the text (for positions) and what was found.
pub(super) struct Cx<'t> {
    pub(super) text: &'t str,
    pub(super) lines: crate::spec::error::LineIndex,
    pub(super) file: &'t str,
    pub(super) errors: Vec<SpecError>,
    pub(super) warnings: Vec<SpecError>,
    pub(super) locations: BTreeMap<String, Location>,
}

impl Cx<'_> {
    pub(super) fn at(&self, span: &Range<usize>) -> Location {
        self.lines.locate(self.text, span.start)
    }

    pub(super) fn make(
        &self,
        span: &Range<usize>,
        key: &str,
        message: String,
        help: Option<String>,
    ) -> SpecError {
        let loc = self.at(span);
        SpecError {
            file: self.file.to_string(),
            line: loc.line,
            column: loc.column,
            key: key.to_string(),
            message,
            help,
        }
    }

    pub(super) fn error(
        &mut self,
        span: Range<usize>,
        key: &str,
        message: String,
        help: Option<String>,
    ) {
        let e = self.make(&span, key, message, help);
        self.errors.push(e);
    }

    pub(super) fn problem(&mut self, span: Range<usize>, key: &str, p: Problem) {
        self.error(span, key, p.message, p.help);
    }

    pub(super) fn warn(
        &mut self,
        span: Range<usize>,
        key: &str,
        message: String,
        help: Option<String>,
    ) {
        let e = self.make(&span, key, message, help);
        self.warnings.push(e);
    }

    /// A warning at the recorded position of `key` (for checks after parsing).
    pub(super) fn warn_at(&mut self, key: &str, message: String, help: Option<String>) {
        let loc = self
            .locations
            .get(key)
            .copied()
            .unwrap_or(Location { line: 1, column: 1 });
        self.warnings.push(SpecError {
            file: self.file.to_string(),
            line: loc.line,
            column: loc.column,
            key: key.to_string(),
            message,
            help,
        });
    }

    /// The value's source text, shortened, for "found …" messages.
    pub(super) fn snippet(&self, span: &Range<usize>) -> String {
        let s = self.text.get(span.clone()).unwrap_or("");
        let one_line = s.lines().next().unwrap_or("");
        let cut = crate::text::shown(one_line, 40);
        if one_line.len() < s.len() && !cut.ends_with('…') {
            format!("{cut}…")
        } else {
            cut
        }
    }

    pub(super) fn wrong_type(
        &mut self,
        key: &str,
        v: &Val<'_>,
        expected: &str,
        help: Option<String>,
    ) {
        let found = type_name(v.get_ref());
        let msg = format!(
            "expected {expected}, found {found} ({})",
            self.snippet(&v.span())
        );
        self.error(v.span(), key, msg, help);
    }

    pub(super) fn str_of<'v>(
        &mut self,
        key: &str,
        v: &'v Val<'_>,
        expected: &str,
    ) -> Option<&'v str> {
        match v.get_ref() {
            DeValue::String(s) => match values::check_no_control(s) {
                Ok(()) => Some(s.as_ref()),
                Err(p) => {
                    self.problem(v.span(), key, p);
                    None
                }
            },
            _ => {
                self.wrong_type(key, v, expected, None);
                None
            }
        }
    }

    pub(super) fn int_of(&mut self, key: &str, v: &Val<'_>, expected: &str) -> Option<i64> {
        match v.get_ref() {
            DeValue::Integer(i) => match i64::from_str_radix(i.as_str(), i.radix()) {
                Ok(n) => Some(n),
                Err(_) => {
                    self.error(
                        v.span(),
                        key,
                        format!("is too large; expected {expected}"),
                        None,
                    );
                    None
                }
            },
            DeValue::String(s) if s.trim().parse::<i64>().is_ok() => {
                let help = Some(format!("write {} without quotes", s.trim()));
                self.wrong_type(key, v, expected, help);
                None
            }
            _ => {
                self.wrong_type(key, v, expected, None);
                None
            }
        }
    }

    pub(super) fn bool_of(&mut self, key: &str, v: &Val<'_>) -> Option<bool> {
        match v.get_ref() {
            DeValue::Boolean(b) => Some(*b),
            _ => {
                self.wrong_type(key, v, "true or false", None);
                None
            }
        }
    }

    pub(super) fn array_of<'v, 'i>(
        &mut self,
        key: &str,
        v: &'v Val<'i>,
        expected: &str,
        help: Option<String>,
    ) -> Option<&'v DeArray<'i>> {
        match v.get_ref() {
            DeValue::Array(a) => Some(a),
            _ => {
                self.wrong_type(key, v, expected, help);
                None
            }
        }
    }

    /// A list of strings, each checked by `check`.
    pub(super) fn strings_of(
        &mut self,
        key: &str,
        v: &Val<'_>,
        expected: &str,
        check: impl Fn(&str) -> Result<(), Problem>,
    ) -> Option<Vec<String>> {
        let help = match v.get_ref() {
            DeValue::String(s) => Some(format!("write {key_leaf} = [{s:?}]", key_leaf = leaf(key))),
            _ => None,
        };
        let items = self.array_of(key, v, expected, help)?;
        let mut out = Vec::with_capacity(items.len());
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            let item_key = format!("{key}[{i}]");
            match item.get_ref() {
                DeValue::String(s) => match check(s) {
                    Ok(()) => out.push(s.to_string()),
                    Err(p) => {
                        self.problem(item.span(), &item_key, p);
                        ok = false;
                    }
                },
                _ => {
                    self.wrong_type(&item_key, item, "a string", None);
                    ok = false;
                }
            }
        }
        ok.then_some(out)
    }

    /// The entries of a table, checking that every key is one of `allowed` and
    /// recording each key's position. `table_path` is "" for the top level.
    pub(super) fn fields<'a, 'i>(
        &mut self,
        table_path: &str,
        table: &'a DeTable<'i>,
        allowed: &[&str],
    ) -> BTreeMap<String, &'a Val<'i>> {
        let mut out = BTreeMap::new();
        for (k, v) in table.iter() {
            let name = k.get_ref().as_ref();
            let path = join(table_path, name);
            self.locations.insert(path.clone(), self.at(&v.span()));
            if allowed.contains(&name) {
                out.insert(name.to_string(), v);
            } else {
                let p = unknown_key(table_path, name, allowed);
                self.problem(k.span(), &path, p);
            }
        }
        out
    }

    /// The value of `key` in `fields` as a table (reports other types).
    pub(super) fn table_of<'a, 'i>(
        &mut self,
        key: &str,
        v: &'a Val<'i>,
    ) -> Option<&'a DeTable<'i>> {
        match v.get_ref() {
            DeValue::Table(t) => Some(t),
            _ => {
                let help = Some(format!("write it as a table: [{key}]"));
                self.wrong_type(key, v, "a table", help);
                None
            }
        }
    }
}

pub(super) fn join(table: &str, key: &str) -> String {
    if table.is_empty() {
        key.to_string()
    } else {
        format!("{table}.{key}")
    }
}

fn leaf(path: &str) -> &str {
    path.rsplit('.').next().unwrap_or(path)
}

fn type_name(v: &DeValue<'_>) -> &'static str {
    match v {
        DeValue::String(_) => "a string",
        DeValue::Integer(_) => "an integer",
        DeValue::Float(_) => "a float",
        DeValue::Boolean(_) => "a boolean",
        DeValue::Datetime(_) => "a date/time",
        DeValue::Array(_) => "a list",
        DeValue::Table(_) => "a table",
    }
}
