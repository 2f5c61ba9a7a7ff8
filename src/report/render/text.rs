//! `--format table`: a heading per section, comfy-table tables and notes.

use super::TableData;
use crate::printer::{paint, table_for};

/// Render for a terminal (`for_terminal`: fit its width) or for a file or
/// pipe (plain ASCII, no wrapping). `color` paints headings.
pub fn render(tables: &[TableData], for_terminal: bool, color: bool) -> String {
    let mut out = String::new();
    let mut section = None;
    for t in tables {
        if section != Some(t.section) {
            if section.is_some() {
                out.push('\n');
            }
            section = Some(t.section);
            let heading = format!("== {} ==", t.section.name());
            out.push_str(&paint(&heading, "1", color));
            out.push('\n');
        }
        out.push_str(&paint(t.title, "4", color));
        out.push('\n');
        if t.rows.is_empty() {
            out.push_str("(none)\n");
        } else {
            let mut table = table_for(&t.headers, for_terminal);
            for r in &t.rows {
                table.add_row(r.clone());
            }
            out.push_str(&table.to_string());
            out.push('\n');
        }
        for note in &t.notes {
            out.push_str("  ");
            out.push_str(note);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::model::Section;

    #[test]
    fn headings_tables_and_notes_without_colour() {
        let t = TableData {
            name: "queue-reasons",
            section: Section::Queue,
            title: "Why jobs wait",
            headers: vec!["reason", "jobs"],
            rows: vec![vec!["Resources".into(), "2".into()]],
            notes: vec!["a note".into()],
        };
        let empty = TableData {
            rows: vec![],
            name: "queue-never-runnable",
            ..t.clone()
        };
        let s = render(&[t, empty], false, false);
        assert!(s.starts_with("== queue ==\nWhy jobs wait\n"), "{s}");
        assert!(s.contains("| Resources | 2    |"), "{s}");
        assert!(s.contains("(none)"));
        assert!(s.contains("  a note\n"));
        assert!(!s.contains('\x1b'));
        assert!(render(&[], false, true).is_empty());
    }
}
