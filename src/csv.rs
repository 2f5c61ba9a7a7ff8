//! One CSV cell rule for every CSV the tool writes (`report --format csv`,
//! `compare --format csv`): RFC 4180 quoting, and a cell a spreadsheet would
//! run as a formula neutralised first. Pure, on the lowest floor.

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
