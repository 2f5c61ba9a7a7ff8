//! `--format csv`: each table as RFC 4180 CSV. One selected table prints bare;
//! several print one after another, each after a `# <table>` line and a blank
//! line between them.

use super::TableData;
use crate::csv::field;

fn row<S: AsRef<str>>(cells: &[S]) -> String {
    let mut line = cells
        .iter()
        .map(|c| field(c.as_ref()))
        .collect::<Vec<_>>()
        .join(",");
    line.push_str("\r\n");
    line
}

/// Render the tables; lines end in CRLF as RFC 4180 says.
pub fn render(tables: &[TableData]) -> String {
    let mut out = String::new();
    let labelled = tables.len() > 1;
    for (i, t) in tables.iter().enumerate() {
        if labelled {
            if i > 0 {
                out.push_str("\r\n");
            }
            out.push_str(&format!("# {}\r\n", t.name));
        }
        out.push_str(&row(&t.headers));
        for r in &t.rows {
            out.push_str(&row(r));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::model::Section;

    fn table(name: &'static str) -> TableData {
        TableData {
            name,
            section: Section::Queue,
            title: "t",
            headers: vec!["reason", "jobs"],
            rows: vec![vec![
                "ReqNodeNotAvail, UnavailableNodes:n2".into(),
                "3".into(),
            ]],
            notes: vec!["not in CSV".into()],
        }
    }

    #[test]
    fn report_tables_neutralise_formulas_from_slurm_too() {
        let mut t = table("queue-users");
        t.rows = vec![vec!["=cmd|'/C calc'!A0".into(), "-3".into()]];
        assert_eq!(render(&[t]), "reason,jobs\r\n'=cmd|'/C calc'!A0,-3\r\n");
    }

    #[test]
    fn one_table_is_bare_several_are_labelled() {
        assert_eq!(
            render(&[table("queue-reasons")]),
            "reason,jobs\r\n\"ReqNodeNotAvail, UnavailableNodes:n2\",3\r\n"
        );
        let two = render(&[table("a"), table("b")]);
        assert!(two.starts_with("# a\r\nreason,jobs\r\n"));
        assert!(two.contains("\r\n\r\n# b\r\n"));
        assert!(!two.contains("not in CSV"));
    }
}
