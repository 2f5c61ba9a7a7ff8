//! Slurm's placeholders: the one rule for a field its clients print without
//! a value, and the one for a limit that is no limit. Every parser in
//! `slurm` reads empty fields through [`present`] and limits through
//! [`limit`]; pure.
//!
//! Clients print `(null)` for an unset string (`squeue -O Account`,
//! `scontrol`'s `Gres=(null)`), `N/A` for a field that does not apply
//! (`ArrayTaskID` of a plain job, `tres-per-job`, a pending job's
//! `StartTime`), `None` or `NONE` for an empty list or reason (`Reason=None`,
//! `DefaultTime=NONE`) and `Unknown` for a time not yet known (`sacct`'s `End`
//! of a running job).

/// The placeholders, in any case: `(null)`, `N/A`, `None`, `Unknown`.
const NULLS: [&str; 4] = ["(null)", "n/a", "none", "unknown"];

/// Whether a field, trimmed, is empty or one of Slurm's placeholders for
/// "no value".
pub fn is_null(field: &str) -> bool {
    let t = field.trim();
    t.is_empty() || NULLS.iter().any(|n| t.eq_ignore_ascii_case(n))
}

/// A field trimmed, or `""` when it is one of Slurm's placeholders.
pub fn present(field: &str) -> &str {
    if is_null(field) {
        ""
    } else {
        field.trim()
    }
}

/// A limit (`MaxTime`, `MaxMemPerNode`, `TimelimitRaw`, …): `None` for a
/// placeholder and for the values that mean no limit of its own
/// (`UNLIMITED`, `INFINITE`, `Partition_Limit`, `INVALID`, `0`).
pub fn limit(field: &str) -> Option<&str> {
    let t = present(field);
    let unlimited = t.is_empty()
        || t == "0"
        || ["unlimited", "infinite", "partition_limit", "invalid"]
            .iter()
            .any(|u| t.eq_ignore_ascii_case(u));
    (!unlimited).then_some(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_placeholder_is_empty() {
        for null in [
            "", " ", "(null)", "(NULL)", "N/A", "n/a", "None", "NONE", "Unknown", "UNKNOWN",
        ] {
            assert!(is_null(null), "{null:?}");
            assert_eq!(present(null), "", "{null:?}");
        }
        for value in [
            "gres:gpu:1g.5gb:1",
            "node[1-3,5]",
            "None assigned",
            "UNLIMITED",
            "0",
        ] {
            assert_eq!(present(value), value, "{value:?}");
        }
        assert_eq!(present(" yrep "), "yrep");
    }

    #[test]
    fn limits_that_are_none() {
        for none in [
            "",
            "(null)",
            "N/A",
            "NONE",
            "UNLIMITED",
            "INFINITE",
            "Partition_Limit",
            "INVALID",
            "0",
        ] {
            assert_eq!(limit(none), None, "{none:?}");
        }
        assert_eq!(limit("2-00:00:00"), Some("2-00:00:00"));
        assert_eq!(limit(" 30000 "), Some("30000"));
    }
}
