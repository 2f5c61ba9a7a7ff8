//! `[guard]` of a spec: the job's own settings for the memory guard of the job
//! agent (docs/agent.md). Each is optional; the site's `[guard]` gives the
//! default and `[guard.limits]` how far a spec may loosen it
//! (`agent::policy::GuardPolicy::resolve` checks that at submission).
//!
//! This file only reads the table; `parse/root.rs` calls `read` and turns the
//! problems into spec errors with positions.

use std::ops::Range;

use serde::Serialize;
use toml::de::{DeTable, DeValue};

/// The keys a spec's `[guard]` may have.
pub const GUARD_KEYS: &[&str] = &[
    "enabled",
    "warn_fraction",
    "growth_mb_per_min",
    "window_s",
    "warmup_epochs",
    "grace_s",
];

/// A spec's `[guard]`: what it asks for, unresolved against the site.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct GuardSpec {
    pub enabled: Option<bool>,
    pub warn_fraction: Option<f64>,
    pub growth_mb_per_min: Option<f64>,
    pub window_s: Option<f64>,
    pub warmup_epochs: Option<u32>,
    pub grace_s: Option<f64>,
}

/// One problem in the table: where, which key, what, and a suggestion.
pub struct Issue {
    pub span: Range<usize>,
    pub key: String,
    pub message: String,
    pub help: Option<String>,
}

fn number(v: &DeValue<'_>) -> Option<f64> {
    match v {
        DeValue::Integer(i) => i64::from_str_radix(i.as_str(), i.radix())
            .ok()
            .map(|n| n as f64),
        DeValue::Float(f) => f.as_str().parse::<f64>().ok().filter(|x| x.is_finite()),
        _ => None,
    }
}

/// Read `[guard]`. Unknown keys, wrong types and values out of range are
/// reported in `issues`; the keys that read well are kept.
pub fn read(table: &DeTable<'_>, issues: &mut Vec<Issue>) -> GuardSpec {
    let mut g = GuardSpec::default();
    for (k, v) in table.iter() {
        let name: &str = k.get_ref().as_ref();
        let key = format!("guard.{name}");
        let mut issue = |span: Range<usize>, message: String, help: Option<String>| {
            issues.push(Issue {
                span,
                key: key.clone(),
                message,
                help,
            })
        };
        let value = v.get_ref();
        let ranged = |lo: f64, hi: f64| number(value).filter(|x| (lo..=hi).contains(x));
        match name {
            "enabled" => match value {
                DeValue::Boolean(b) => g.enabled = Some(*b),
                _ => issue(v.span(), "expected true or false".into(), None),
            },
            "warn_fraction" => match ranged(0.01, 1.0) {
                Some(x) => g.warn_fraction = Some(x),
                None => issue(
                    v.span(),
                    "expected a fraction of the slice's memory from 0.01 to 1".into(),
                    Some("e.g. warn_fraction = 0.8 warns at 80%".into()),
                ),
            },
            "growth_mb_per_min" => match ranged(0.001, 1e7) {
                Some(x) => g.growth_mb_per_min = Some(x),
                None => issue(
                    v.span(),
                    "expected a positive growth rate in MB per minute".into(),
                    Some("e.g. growth_mb_per_min = 500".into()),
                ),
            },
            "window_s" => match ranged(0.1, 86_400.0) {
                Some(x) => g.window_s = Some(x),
                None => issue(
                    v.span(),
                    "expected seconds from 0.1 to 86400 over which growth must last".into(),
                    None,
                ),
            },
            "warmup_epochs" => match value {
                DeValue::Integer(_) => match number(value).filter(|x| (0.0..=1000.0).contains(x)) {
                    Some(x) => g.warmup_epochs = Some(x as u32),
                    None => issue(v.span(), "expected 0 to 1000 epochs".into(), None),
                },
                _ => issue(
                    v.span(),
                    "expected a whole number of epochs".into(),
                    Some("e.g. warmup_epochs = 1".into()),
                ),
            },
            "grace_s" => match ranged(0.0, 3600.0) {
                Some(x) => g.grace_s = Some(x),
                None => issue(
                    v.span(),
                    "expected seconds from 0 to 3600 between the stop signal and a kill".into(),
                    None,
                ),
            },
            _ => issue(
                k.span(),
                format!(
                    "unknown key `{name}` in [guard]; expected one of: {}",
                    GUARD_KEYS.join(", ")
                ),
                crate::suggest::closest(name, GUARD_KEYS.iter().copied())
                    .map(|c| format!("did you mean `{c}`?")),
            ),
        }
    }
    g
}

#[cfg(test)]
mod tests {
    fn spec(guard: &str) -> Result<crate::spec::Spec, crate::spec::SpecErrors> {
        crate::spec::parse(
            &format!(
                "version = 1\n[run]\nname = \"g\"\n[train]\nmodel = \"yolov8n.yaml\"\ndata = \"d.yaml\"\n[guard]\n{guard}"
            ),
            "g.toml",
        )
    }

    #[test]
    fn a_guard_table_reads_and_an_absent_one_is_empty() {
        let s = spec("warn_fraction = 0.7\ngrowth_mb_per_min = 200\nwindow_s = 60\nwarmup_epochs = 2\ngrace_s = 10\nenabled = true\n").unwrap();
        assert_eq!(s.guard.warn_fraction, Some(0.7));
        assert_eq!(s.guard.growth_mb_per_min, Some(200.0));
        assert_eq!(s.guard.warmup_epochs, Some(2));
        assert_eq!(s.guard.enabled, Some(true));
        assert!(s.origin.locations.contains_key("guard.window_s"));
        let none = crate::spec::parse(
            "version = 1\n[run]\nname = \"g\"\n[train]\nmodel = \"yolov8n.yaml\"\ndata = \"d.yaml\"\n",
            "g.toml",
        )
        .unwrap();
        assert_eq!(none.guard, super::GuardSpec::default());
    }

    #[test]
    fn bad_guard_keys_name_the_line_and_suggest() {
        let e =
            spec("warn_fracton = 0.7\nwarn_fraction = 2\nwarmup_epochs = 1.5\nenabled = \"no\"\n")
                .unwrap_err()
                .to_string();
        for needle in [
            "g.toml:8:1",
            "unknown key `warn_fracton` in [guard]",
            "did you mean `warn_fraction`?",
            "g.toml:9:17",
            "guard.warn_fraction",
            "a whole number of epochs",
            "expected true or false",
        ] {
            assert!(e.contains(needle), "{needle}: {e}");
        }
    }
}
