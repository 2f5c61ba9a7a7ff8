//! Values from users and clients cut to a readable length for messages: the
//! one place that decides how much of an echoed value an error shows, so a
//! 50 MB workdir or a 20 MB stderr never reaches the terminal whole.

/// The longest value an error message echoes, in characters.
pub const SHOWN_CHARS: usize = 60;

/// `s` cut to `max` characters with `…` when longer.
pub fn clip_to(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        None => s.to_string(),
        Some((at, _)) => format!("{}…", &s[..at]),
    }
}

/// `s` cut to [`SHOWN_CHARS`].
pub fn clip(s: &str) -> String {
    clip_to(s, SHOWN_CHARS)
}

/// `s` cut to `max` characters, then with control and invisible characters
/// escaped (`\n`, `\u{200d}`), so one value is one line that shows what it is.
pub fn shown(s: &str, max: usize) -> String {
    let cut = clip_to(s, max);
    let mut out = String::with_capacity(cut.len());
    for c in cut.chars() {
        if c.is_control() || is_invisible(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// The longest path an error message echoes, in characters: paths are longer
/// than names, and their tail says most.
pub const PATH_CHARS: usize = 160;

/// A value the user gave (a run id, a layout, a spec value) as a message
/// echoes it: at most [`SHOWN_CHARS`] characters, control and invisible
/// characters escaped. Every echo of user input goes through this or
/// [`echo_path`].
pub fn echo(s: &str) -> String {
    shown(s, SHOWN_CHARS)
}

/// A path the user gave as a message echoes it: at most [`PATH_CHARS`]
/// characters (the start and the end kept), escaped like [`echo`]; bytes that
/// are not UTF-8 show as U+FFFD.
pub fn echo_path(p: &std::path::Path) -> String {
    let s = p.to_string_lossy();
    let n = s.chars().count();
    if n <= PATH_CHARS {
        return shown(&s, PATH_CHARS);
    }
    let keep = PATH_CHARS / 2;
    let head: String = s.chars().take(keep).collect();
    let tail: String = s.chars().skip(n - keep).collect();
    format!(
        "{}…{} ({n} characters)",
        shown(&head, keep),
        shown(&tail, keep)
    )
}

/// A long text (a client's stderr) cut to its first `max` characters, with
/// how much was left out; its lines stay lines, every other control or
/// invisible character (ESC, BEL, CR) is escaped as [`shown`] does, so a
/// client's output cannot drive the terminal.
pub fn head(s: &str, max: usize) -> String {
    let (cut, rest) = match s.char_indices().nth(max) {
        None => (s, 0),
        Some((at, _)) => (&s[..at], s.len() - at),
    };
    let mut out = String::with_capacity(cut.len());
    for c in cut.chars() {
        if (c.is_control() && c != '\n' && c != '\t') || is_invisible(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    if rest > 0 {
        out.push_str(&format!("… ({rest} more bytes not shown)"));
    }
    out
}

/// Characters that print as nothing: zero-width joiners and spaces, the BOM,
/// bidirectional controls. They make two different names look the same.
pub fn is_invisible(c: char) -> bool {
    matches!(c,
        '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2064}'
        | '\u{2066}'..='\u{2069}' | '\u{feff}' | '\u{00ad}' | '\u{180e}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_values_are_kept_long_ones_cut_on_a_char_boundary() {
        assert_eq!(clip("gpu"), "gpu");
        let long = "é".repeat(100);
        assert_eq!(clip(&long).chars().count(), SHOWN_CHARS + 1);
        assert!(clip(&long).ends_with('…'));
    }

    #[test]
    fn shown_escapes_newlines_and_invisible_characters() {
        assert_eq!(shown("a\nok: b", 60), "a\\nok: b");
        assert_eq!(shown("yolo\u{200d}11n", 60), "yolo\\u{200d}11n");
    }

    #[test]
    fn echoes_are_one_bounded_line() {
        let forged = "x\rok: run completed\u{1b}[2K";
        assert_eq!(echo(forged), "x\\rok: run completed\\u{1b}[2K");
        let huge = "r".repeat(100_000);
        assert!(echo(&huge).chars().count() <= SHOWN_CHARS + 1);
        let path = format!("/tmp/{}\n/\u{1b}]0;x", "d".repeat(10_000));
        let p = echo_path(std::path::Path::new(&path));
        assert!(p.chars().count() < PATH_CHARS + 40, "{p}");
        assert!(!p.chars().any(char::is_control), "{p}");
        assert!(p.ends_with("characters)") && p.contains("\\u{1b}"), "{p}");
        assert_eq!(echo_path(std::path::Path::new("/a/b\nc")), "/a/b\\nc");
    }

    #[test]
    fn head_says_how_much_was_left_out() {
        let s = "x".repeat(5000);
        let h = head(&s, 100);
        assert!(h.starts_with(&"x".repeat(100)));
        assert!(h.ends_with("(4900 more bytes not shown)"), "{h}");
        // Issue 32, item 10: a client's ESC and BEL do not reach the terminal.
        let h = head("sacct: error\u{1b}]0;owned\u{7}\r\nsecond line", 100);
        assert_eq!(h, "sacct: error\\u{1b}]0;owned\\u{7}\\r\nsecond line");
    }
}
