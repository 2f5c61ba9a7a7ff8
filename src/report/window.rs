//! The one `--since` grammar (`report`, `audit`): a length back from now
//! (`24h`, `7d`, `1d12h`; a bare number has no unit and is refused), a local
//! date and time (`2026-11-29`, `2026-11-29T08:00`), or an RFC 3339 time with
//! its offset (`2026-11-29T08:00:00Z`).

use chrono::{DateTime, Local, NaiveDate, NaiveDateTime, NaiveTime, TimeDelta, TimeZone, Utc};

/// Resolve `--since` against `now` (local time). The error says what is accepted.
pub fn since(text: &str, now: NaiveDateTime) -> Result<NaiveDateTime, String> {
    let t = text.trim();
    let start = if let Ok(exact) = DateTime::parse_from_rfc3339(t) {
        exact.with_timezone(&Local).naive_local()
    } else if t.starts_with(|c: char| c.is_ascii_digit()) && t.contains('-') {
        absolute(t).ok_or_else(|| usage(text))?
    } else {
        now.checked_sub_signed(length(t).ok_or_else(|| usage(text))?)
            .ok_or_else(|| usage(text))?
    };
    if start >= now {
        return Err(format!(
            "--since {text:?} is not in the past; give a length such as 24h or an earlier date"
        ));
    }
    Ok(start)
}

/// `since` for records kept in UTC (the audit log): local forms are local time.
pub fn since_utc(text: &str, now: DateTime<Utc>) -> Result<DateTime<Utc>, String> {
    let local = since(text, now.with_timezone(&Local).naive_local())?;
    Local
        .from_local_datetime(&local)
        .earliest()
        .map(|t| t.with_timezone(&Utc))
        .ok_or_else(|| format!("--since {text:?} is not a time that exists here (a clock change)"))
}

fn usage(text: &str) -> String {
    let shown = crate::text::clip(text);
    format!(
        "--since {shown:?} is not a time: expected a length back from now (90m, 24h, 7d, 2w, 1d12h), \
         a local date and time (2026-11-29, 2026-11-29T08:00, 2026-11-29T08:00:00) \
         or an RFC 3339 time (2026-11-29T08:00:00Z)"
    )
}

fn absolute(t: &str) -> Option<NaiveDateTime> {
    for format in ["%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M"] {
        if let Ok(dt) = NaiveDateTime::parse_from_str(t, format) {
            return Some(dt);
        }
    }
    NaiveDate::parse_from_str(t, "%Y-%m-%d")
        .ok()
        .map(|d| d.and_time(NaiveTime::MIN))
}

/// A length of time (`30d`, `12h`, `1d12h`, `90m`, `0s`) for flags that keep
/// things for a while (`models gc --keep-removed`): the same units as
/// `--since`, and zero allowed. The error says what is accepted.
pub fn duration(text: &str) -> Result<TimeDelta, String> {
    seconds(text.trim())
        .and_then(TimeDelta::try_seconds)
        .ok_or_else(|| {
            format!(
                "{:?} is not a length of time: expected a number with a unit, such as 30d, 12h, 90m, 1d12h or 0s (units s, m, h, d, w)",
                crate::text::clip(text)
            )
        })
}

fn length(t: &str) -> Option<TimeDelta> {
    seconds(t)
        .filter(|s| *s > 0)
        .and_then(TimeDelta::try_seconds)
}

/// The seconds of a length such as `1d12h` (zero allowed); `None` when it is
/// not one or is over 100 years.
fn seconds(t: &str) -> Option<i64> {
    let mut total = 0i64;
    let mut number = String::new();
    let mut any = false;
    for c in t.chars() {
        if c.is_ascii_digit() {
            number.push(c);
            continue;
        }
        let unit = match c {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            'w' => 604_800,
            _ => return None,
        };
        let n: i64 = number.parse().ok()?;
        total = total.checked_add(n.checked_mul(unit)?)?;
        number.clear();
        any = true;
    }
    // A trailing bare number has no unit: refuse rather than guess.
    if !number.is_empty() || !any || total > 100 * 366 * 86_400 {
        return None;
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> NaiveDateTime {
        NaiveDateTime::parse_from_str("2026-11-30T12:00:00", "%Y-%m-%dT%H:%M:%S").unwrap()
    }

    #[test]
    fn durations_allow_zero_and_need_a_unit() {
        assert_eq!(duration("30d").unwrap(), TimeDelta::days(30));
        assert_eq!(duration("1d12h").unwrap(), TimeDelta::hours(36));
        assert_eq!(duration("0s").unwrap(), TimeDelta::zero());
        for bad in ["", "30", "3x", "d", "-1d", "999999w"] {
            assert!(duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn lengths() {
        assert_eq!(
            since("24h", now()).unwrap().to_string(),
            "2026-11-29 12:00:00"
        );
        assert_eq!(
            since("1d12h", now()).unwrap().to_string(),
            "2026-11-29 00:00:00"
        );
        assert_eq!(
            since("90m", now()).unwrap().to_string(),
            "2026-11-30 10:30:00"
        );
        assert_eq!(
            since("1w", now()).unwrap().to_string(),
            "2026-11-23 12:00:00"
        );
    }

    #[test]
    fn dates() {
        assert_eq!(
            since("2026-11-29", now()).unwrap().to_string(),
            "2026-11-29 00:00:00"
        );
        assert_eq!(
            since("2026-11-29T08:30", now()).unwrap().to_string(),
            "2026-11-29 08:30:00"
        );
    }

    #[test]
    fn bad_values_say_what_is_accepted() {
        for bad in ["", "24", "h", "24x", "-5h", "0h", "yesterday", "2026-13-01"] {
            let err = since(bad, now()).unwrap_err();
            assert!(err.contains("expected a length"), "{bad}: {err}");
        }
        assert!(since("2026-12-01", now())
            .unwrap_err()
            .contains("not in the past"));
        // Beyond what dates can hold: an error, not an overflow.
        for huge in ["99999999999d", "9223372036854775807s", "1e300h", "inf"] {
            assert!(since(huge, now()).is_err(), "{huge}");
        }
    }

    #[test]
    fn utc_records_use_the_same_grammar() {
        let now = Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap();
        assert_eq!(
            since_utc("24h", now).unwrap(),
            Utc.with_ymd_and_hms(2026, 11, 29, 12, 0, 0).unwrap()
        );
        assert_eq!(
            since_utc("2026-11-29T08:00:00+02:00", now).unwrap(),
            Utc.with_ymd_and_hms(2026, 11, 29, 6, 0, 0).unwrap()
        );
        // The bare number the audit grammar once read as hours is refused.
        assert!(since_utc("24", now)
            .unwrap_err()
            .contains("expected a length"));
    }
}
