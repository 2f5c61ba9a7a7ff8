//! `--format csv`: each table as RFC 4180 CSV. One selected table prints bare;
//! several print one after another, each after a `# <table>` line and a blank
//! line between them.

use super::TableData;

/// Quote a field when it holds a comma, quote, CR or LF, or starts or ends
/// with a space (some readers trim those); quotes inside are doubled. A cell a
/// spreadsheet would run as a formula is neutralised first ([`neutralise`]).
pub fn field(value: &str) -> String {
    let value = neutralise(value);
    let needs =
        value.contains([',', '"', '\n', '\r']) || value.starts_with(' ') || value.ends_with(' ');
    if needs {
        format!("\"{}\"", value.replace('"', "\"\""))
    } else {
        value.into_owned()
    }
}

/// OWASP's CSV-injection rule: a cell starting with `=`, `+`, `-`, `@`, a tab
/// or a CR is a formula to Excel, LibreOffice and Google Sheets, so it gets a
/// leading `'` and reads as text. Plain numbers stay numbers (`-0.25`,
/// `1e-3`: a leading `-` or `+`, digits, an optional fraction and exponent),
/// and so does a lone `-` (the tables' "none").
pub fn neutralise(value: &str) -> std::borrow::Cow<'_, str> {
    let risky = value.starts_with(['=', '+', '-', '@', '\t', '\r']);
    if !risky || value == "-" || is_plain_number(value) {
        std::borrow::Cow::Borrowed(value)
    } else {
        std::borrow::Cow::Owned(format!("'{value}"))
    }
}

/// `-12`, `+3.5`, `-1.5e-3`: a sign, digits, an optional fraction and exponent.
fn is_plain_number(v: &str) -> bool {
    let v = v.strip_prefix(['-', '+']).unwrap_or(v);
    let (mantissa, exponent) = match v.find(['e', 'E']) {
        Some(at) => (&v[..at], Some(&v[at + 1..])),
        None => (v, None),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let mantissa_ok = match mantissa.split_once('.') {
        Some((a, b)) => {
            (digits(a) || a.is_empty())
                && (digits(b) || b.is_empty())
                && !(a.is_empty() && b.is_empty())
        }
        None => digits(mantissa),
    };
    let exponent_ok = exponent.is_none_or(|e| digits(e.strip_prefix(['-', '+']).unwrap_or(e)));
    mantissa_ok && exponent_ok
}

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

    #[test]
    fn quoting() {
        assert_eq!(field("plain"), "plain");
        assert_eq!(field("a,b"), "\"a,b\"");
        assert_eq!(field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(field("two\nlines"), "\"two\nlines\"");
        assert_eq!(field(" padded"), "\" padded\"");
        assert_eq!(field(""), "");
    }

    #[test]
    fn formulas_are_neutralised_numbers_are_not() {
        // OWASP's triggers: each cell becomes text behind a `'`.
        assert_eq!(
            field("=HYPERLINK(\"http://x\",\"y\")"),
            "\"'=HYPERLINK(\"\"http://x\"\",\"\"y\"\")\""
        );
        assert_eq!(field("@SUM(1+1)"), "'@SUM(1+1)");
        assert_eq!(field("+cmd|' /C calc'!A0"), "'+cmd|' /C calc'!A0");
        assert_eq!(field("-2+3"), "'-2+3");
        assert_eq!(field("\t=1"), "'\t=1");
        assert_eq!(field("\r=1"), "\"'\r=1\"");
        assert_eq!(field("-inf"), "'-inf");
        // Numbers stay numbers; a lone dash is no formula.
        for n in ["-0.25", "-12", "+3.5", "-1.5e-3", "1e-3", "-.5", "-"] {
            assert_eq!(field(n), n);
        }
        assert_eq!(field("lr0=-0.01"), "lr0=-0.01");
    }

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
