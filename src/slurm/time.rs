//! Slurm's times: its time stamps (`2026-11-30T15:09:06`, local time) and
//! its durations (`MM`, `MM:SS`, `HH:MM:SS`, `D-HH`, `D-HH:MM`,
//! `D-HH:MM:SS`), which specs and the site file use as well as Slurm's own
//! output. Pure, and on the lowest floor that needs them.

use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};

/// A duration that is not one of Slurm's formats: what is wrong, and what to
/// write instead when that can be told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadDuration {
    pub message: String,
    pub help: Option<String>,
}

impl BadDuration {
    fn new(message: impl Into<String>) -> Self {
        BadDuration {
            message: message.into(),
            help: None,
        }
    }

    fn help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }
}

/// Parse a Slurm time stamp, `2026-11-30T15:09:06` or `2026-11-30T15:09`
/// (the seconds are 0), trimmed: the one reader of Slurm's time stamps.
/// They are the cluster's local wall clock, so they stay naive; [`to_utc`]
/// makes an instant of one. `None` for Slurm's placeholders (`Unknown`,
/// `None`, `N/A`) and anything else. Hand-written because it runs once per
/// pending job.
pub fn parse_time(s: &str) -> Option<NaiveDateTime> {
    let b = s.trim().as_bytes();
    if !(b.len() == 19 || b.len() == 16)
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || (b.len() == 19 && b[16] != b':')
    {
        return None;
    }
    let num = |from: usize, to: usize| -> Option<u32> {
        let mut n = 0u32;
        for &c in &b[from..to] {
            if !c.is_ascii_digit() {
                return None;
            }
            n = n * 10 + u32::from(c - b'0');
        }
        Some(n)
    };
    let date = NaiveDate::from_ymd_opt(i32::try_from(num(0, 4)?).ok()?, num(5, 7)?, num(8, 10)?)?;
    let seconds = if b.len() == 19 { num(17, 19)? } else { 0 };
    date.and_hms_opt(num(11, 13)?, num(14, 16)?, seconds)
}

/// A local time as Slurm's commands take it (`--starttime=2026-11-30T15:09:06`).
pub fn format_time(t: NaiveDateTime) -> String {
    t.format("%Y-%m-%dT%H:%M:%S").to_string()
}

/// The instant a Slurm time stamp ([`parse_time`], local wall clock) names;
/// the earlier one when a clock change repeats it, none in a skipped hour.
pub fn to_utc(t: NaiveDateTime) -> Option<DateTime<Utc>> {
    t.and_local_timezone(chrono::Local)
        .earliest()
        .map(|t| t.with_timezone(&Utc))
}

/// The seconds of a Slurm time limit (`--time`, a partition's `MaxTime`,
/// squeue's `%l`) in one of Slurm's formats; zero is refused.
pub fn parse_duration(s: &str) -> Result<u64, BadDuration> {
    let formats = "a Slurm time: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS (e.g. \"08:00:00\", \"2-00:00:00\")";
    let bad = || {
        let mut p = BadDuration::new(format!("{s:?} is not {formats}"));
        if let Some(h) = time_suggestion(s) {
            p = p.help(format!("write \"{h}\""));
        } else if s.eq_ignore_ascii_case("unlimited") || s.eq_ignore_ascii_case("infinite") {
            p = p.help(
                "give a limit: a job with an end time can be backfilled and sites cap time limits",
            );
        }
        p
    };
    let number = |part: &str| -> Option<u64> {
        if part.is_empty() || part.len() > 9 || !part.bytes().all(|b| b.is_ascii_digit()) {
            None
        } else {
            part.parse().ok()
        }
    };
    let (days, rest) = match s.split_once('-') {
        Some((d, rest)) => (Some(number(d).ok_or_else(bad)?), rest),
        None => (None, s),
    };
    let fields: Vec<&str> = rest.split(':').collect();
    let nums: Vec<u64> = fields
        .iter()
        .map(|f| number(f))
        .collect::<Option<_>>()
        .ok_or_else(bad)?;
    let seconds = match (days, nums.as_slice()) {
        (None, [m]) => m * 60,
        (None, [m, sec]) if *sec < 60 => m * 60 + sec,
        (None, [h, m, sec]) if *m < 60 && *sec < 60 => h * 3600 + m * 60 + sec,
        (Some(d), [h]) if *h < 24 => d * 86400 + h * 3600,
        (Some(d), [h, m]) if *h < 24 && *m < 60 => d * 86400 + h * 3600 + m * 60,
        (Some(d), [h, m, sec]) if *h < 24 && *m < 60 && *sec < 60 => {
            d * 86400 + h * 3600 + m * 60 + sec
        }
        _ => return Err(bad()),
    };
    if seconds == 0 {
        return Err(BadDuration::new(format!(
            "{s:?} is zero; a time limit must be positive"
        )));
    }
    Ok(seconds)
}

/// "8h" → "08:00:00", "90m"/"90min" → "90", "2d" → "2-00:00:00".
fn time_suggestion(s: &str) -> Option<String> {
    let t = s.trim().to_ascii_lowercase();
    let digits: String = t.chars().take_while(|c| c.is_ascii_digit()).collect();
    if digits.is_empty() {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    let unit = t[digits.len()..].trim();
    match unit {
        "h" | "hr" | "hrs" | "hour" | "hours" if n < 24 => Some(format!("{n:02}:00:00")),
        "h" | "hr" | "hrs" | "hour" | "hours" => Some(format!("{}-{:02}:00:00", n / 24, n % 24)),
        "m" | "min" | "mins" | "minute" | "minutes" => Some(n.to_string()),
        "d" | "day" | "days" => Some(format!("{n}-00:00:00")),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_stamps_with_and_without_seconds() {
        let t = parse_time("2026-11-30T15:09:06").unwrap();
        assert_eq!(t.to_string(), "2026-11-30 15:09:06");
        assert_eq!(
            parse_time("2026-11-30T15:09").unwrap().to_string(),
            "2026-11-30 15:09:00"
        );
        assert_eq!(parse_time(" 2026-11-30T15:09:06\n"), Some(t));
        assert_eq!(format_time(t), "2026-11-30T15:09:06");
        for none in [
            "",
            "Unknown",
            "None",
            "N/A",
            "(null)",
            "INVALID",
            "2026-13-30T15:09:06",
            "2026-11-30 15:09:06",
            "2026-11-3xT15:09:06",
            "2026-11-30T15:09:6",
            "2026-11-30T25:00:00",
        ] {
            assert_eq!(parse_time(none), None, "{none:?}");
        }
        let utc = to_utc(t).unwrap();
        assert_eq!(utc.with_timezone(&chrono::Local).naive_local(), t);
    }

    #[test]
    fn durations_in_every_format() {
        for (text, seconds) in [
            ("30", 1800),
            ("30:15", 1815),
            ("08:00:00", 28_800),
            ("1-12", 129_600),
            ("1-00:30", 88_200),
            ("2-00:00:00", 172_800),
            ("2-01:00:05", 176_405),
        ] {
            assert_eq!(parse_duration(text), Ok(seconds), "{text}");
        }
        for bad in [
            "",
            "0",
            "UNLIMITED",
            "Partition_Limit",
            "INVALID",
            "N/A",
            "1:60",
            "1-24",
            "8h",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse_duration("8h").unwrap_err().help.as_deref(),
            Some("write \"08:00:00\"")
        );
    }
}
