//! Quoting for POSIX shells.
//!
//! Every value that reaches a generated script goes through `quote`, which
//! wraps it in single quotes, the one quoting form in which no character is
//! special. A single quote inside becomes `'\''`.

/// Quote `s` so that a POSIX shell reads it back as exactly one word equal to `s`.
/// Words made only of safe characters are left bare so scripts stay readable.
pub fn quote(s: &str) -> String {
    if !s.is_empty() && s.bytes().all(is_safe_byte) {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        if c == '\'' {
            out.push_str("'\\''");
        } else {
            out.push(c);
        }
    }
    out.push('\'');
    out
}

fn is_safe_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
            b'_' | b'-' | b'.' | b'/' | b',' | b':' | b'=' | b'+' | b'@' | b'%'
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn safe_words_stay_bare() {
        assert_eq!(quote("yolov8s.pt"), "yolov8s.pt");
        assert_eq!(quote("lr0=0.01"), "lr0=0.01");
    }

    #[test]
    fn hostile_words_are_single_quoted() {
        assert_eq!(quote("x; touch /tmp/pwned"), "'x; touch /tmp/pwned'");
        assert_eq!(quote("$(id)"), "'$(id)'");
        assert_eq!(quote("it's"), "'it'\\''s'");
        assert_eq!(quote(""), "''");
    }

    fn shell_echo(word: &str) -> Vec<u8> {
        let script = format!("printf '%s' {}", quote(word));
        std::process::Command::new("sh")
            .arg("-c")
            .arg(script)
            .output()
            .unwrap()
            .stdout
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn the_shell_reads_back_exactly_the_word(word in "[^\u{0}]{0,40}") {
            prop_assert_eq!(shell_echo(&word), word.as_bytes().to_vec());
        }
    }
}
