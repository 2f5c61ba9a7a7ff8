//! Spec errors: each names file:line:column, the key path, what was expected and,
//! where one exists, a suggestion. All errors of a spec are collected and sorted.

use std::fmt;

use serde::Serialize;

/// A 1-based line and column (in characters) in the spec file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Location {
    pub line: usize,
    pub column: usize,
}

impl Location {
    /// The position of byte `offset` in `text` (clamped to the end).
    pub fn of_offset(text: &str, offset: usize) -> Location {
        let mut offset = offset.min(text.len());
        while !text.is_char_boundary(offset) {
            offset -= 1;
        }
        let before = &text[..offset];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = before[line_start..].chars().count() + 1;
        Location { line, column }
    }
}

/// Where each line starts, so that the position of every error is found in
/// O(log lines), not by rescanning the text (80,000 errors in a 1 MB file).
#[derive(Debug, Clone)]
pub struct LineIndex {
    starts: Vec<usize>,
}

impl LineIndex {
    pub fn new(text: &str) -> LineIndex {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        LineIndex { starts }
    }

    /// The same answer as [`Location::of_offset`].
    pub fn locate(&self, text: &str, offset: usize) -> Location {
        let mut offset = offset.min(text.len());
        while !text.is_char_boundary(offset) {
            offset -= 1;
        }
        let line = self.starts.partition_point(|&s| s <= offset);
        let start = self.starts[line - 1];
        Location {
            line,
            column: text[start..offset].chars().count() + 1,
        }
    }
}

/// The most errors printed; the count says how many there were in all.
pub const SHOWN_ERRORS: usize = 50;

/// One problem in an input file at `file:line:column` (a spec, a dataset
/// YAML): the one positioned diagnostic of the crate. Its suggestion is
/// printed as `hint:`, the word every error of yolo-sched uses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SpecError {
    pub file: String,
    pub line: usize,
    pub column: usize,
    /// Key path such as `train.imgsz`, `sweep.lr0`, `train.args.cos_lr`;
    /// empty for TOML syntax errors.
    pub key: String,
    /// What is wrong and what was expected.
    pub message: String,
    /// A suggestion ("did you mean `epochs`?"), when one exists.
    pub help: Option<String>,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}: ", self.file, self.line, self.column)?;
        if !self.key.is_empty() {
            write!(f, "`{}`: ", self.key)?;
        }
        f.write_str(&self.message)?;
        if let Some(help) = &self.help {
            write!(f, "\n    hint: {help}")?;
        }
        Ok(())
    }
}

/// What kind of file the errors are in, for the first line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Subject {
    /// A training spec: nothing was submitted.
    #[default]
    Spec,
    /// An Ultralytics dataset YAML.
    DatasetYaml,
}

/// Every error found in one file, sorted by position.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SpecErrors {
    pub file: String,
    pub errors: Vec<SpecError>,
    #[serde(skip)]
    pub subject: Subject,
}

impl SpecErrors {
    pub fn new(file: &str, mut errors: Vec<SpecError>) -> Self {
        sort(&mut errors);
        SpecErrors {
            file: file.to_string(),
            errors,
            subject: Subject::Spec,
        }
    }

    /// The errors of a dataset YAML.
    pub fn dataset(file: &str, errors: Vec<SpecError>) -> Self {
        SpecErrors {
            subject: Subject::DatasetYaml,
            ..SpecErrors::new(file, errors)
        }
    }

    pub fn len(&self) -> usize {
        self.errors.len()
    }

    pub fn is_empty(&self) -> bool {
        self.errors.is_empty()
    }
}

/// Sort by line, column, then key, and drop exact duplicates.
pub(crate) fn sort(errors: &mut Vec<SpecError>) {
    errors.sort_by(|a, b| {
        (a.line, a.column, &a.key, &a.message).cmp(&(b.line, b.column, &b.key, &b.message))
    });
    errors.dedup();
}

impl fmt::Display for SpecErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.errors.len();
        let plural = if n == 1 { "" } else { "s" };
        match self.subject {
            Subject::Spec => writeln!(
                f,
                "{} has {n} error{plural}; nothing was submitted",
                self.file
            )?,
            Subject::DatasetYaml => {
                writeln!(f, "dataset YAML {} has {n} error{plural}", self.file)?
            }
        }
        for (i, e) in self.errors.iter().take(SHOWN_ERRORS).enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        if n > SHOWN_ERRORS {
            write!(
                f,
                "\n… and {} more (`yolo-sched validate --json` lists them all)",
                n - SHOWN_ERRORS
            )?;
        }
        Ok(())
    }
}

impl std::error::Error for SpecErrors {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_index_agrees_with_the_scan() {
        let text = "a = 1\n\nbé = \"x\"\nlast";
        let index = LineIndex::new(text);
        for offset in 0..=text.len() + 3 {
            assert_eq!(
                index.locate(text, offset),
                Location::of_offset(text, offset),
                "offset {offset}"
            );
        }
    }

    #[test]
    fn offsets_become_lines_and_columns() {
        let text = "a = 1\nbé = 2\n";
        assert_eq!(
            Location::of_offset(text, 0),
            Location { line: 1, column: 1 }
        );
        assert_eq!(
            Location::of_offset(text, 6),
            Location { line: 2, column: 1 }
        );
        // 'é' is two bytes but one column: the space after it is column 3.
        assert_eq!(
            Location::of_offset(text, 9),
            Location { line: 2, column: 3 }
        );
        assert_eq!(
            Location::of_offset(text, 999),
            Location { line: 3, column: 1 }
        );
    }

    #[test]
    fn errors_sort_by_position_and_print_with_help() {
        let e = |line, key: &str| SpecError {
            file: "s.toml".into(),
            line,
            column: 1,
            key: key.into(),
            message: "bad".into(),
            help: Some("fix it".into()),
        };
        let all = SpecErrors::new("s.toml", vec![e(9, "b"), e(2, "a"), e(2, "a")]);
        assert_eq!(all.len(), 2);
        let text = all.to_string();
        assert!(text.starts_with("s.toml has 2 errors"), "{text}");
        let a = text.find("s.toml:2:1: `a`: bad").unwrap();
        let b = text.find("s.toml:9:1: `b`: bad").unwrap();
        assert!(a < b);
        assert!(text.contains("hint: fix it"));
    }
}
