//! The `[guard]` section of the site file: how the job agent samples and when
//! its memory guard warns or stops a job, with the limits a spec may not pass.

use std::path::PathBuf;

use anyhow::Result;
use serde::Deserialize;

use crate::config::Site;
use crate::error::invalid;

/// `[guard]` of the site file. Every key is optional; see `GuardSite::defaults`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GuardSite {
    /// Start the agent beside GPU stages at all (default true).
    pub enabled: Option<bool>,
    /// Seconds between two memory samples (default 3).
    pub interval_s: Option<f64>,
    /// Warn when the job's memory passes this fraction of its device (default 0.8).
    pub warn_fraction: Option<f64>,
    /// Growth that counts as a leak, in MB (10^6 bytes) per minute (default 500).
    pub growth_mb_per_min: Option<f64>,
    /// Seconds the growth must be sustained before the job is stopped (default 180).
    pub window_s: Option<f64>,
    /// Epochs whose memory growth is ignored (the warm-up; default 1).
    pub warmup_epochs: Option<u32>,
    /// The warm-up ends after this many seconds even if no epoch finished (default 900).
    pub warmup_max_s: Option<f64>,
    /// Seconds between the stop signal (TERM) and a kill (default 60).
    pub grace_s: Option<f64>,
    /// node_exporter textfile-collector directory for per-job gauges (default: none).
    pub textfile_dir: Option<PathBuf>,
    /// Most samples kept in the run's series file (default 4096).
    pub series_max_samples: Option<usize>,
    /// Seconds between two "still fine" lines in the job log (default 300).
    pub log_every_s: Option<f64>,
    /// Shards per GPU on this site's `shard` GRES: a shard job's share of the
    /// GPU is its shards over this (default: unknown, no share check).
    pub shards_per_gpu: Option<u32>,
    /// Whether the guard may stop jobs, or only warn (default true).
    pub may_stop: Option<bool>,
    /// How far a spec may loosen the guard.
    pub limits: GuardLimits,
}

/// `[guard.limits]`: a spec may tighten anything, and loosen only up to these.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GuardLimits {
    /// Highest `warn_fraction` a spec may set (default 0.95).
    pub max_warn_fraction: Option<f64>,
    /// Highest `growth_mb_per_min` a spec may set (default twice the site's value).
    pub max_growth_mb_per_min: Option<f64>,
    /// Longest `window_s` a spec may set (default twice the site's value).
    pub max_window_s: Option<f64>,
    /// Most `warmup_epochs` a spec may set (default 3).
    pub max_warmup_epochs: Option<u32>,
    /// May a spec turn the guard off (`enabled = false`)? Default false.
    pub allow_disable: Option<bool>,
}

pub const DEFAULT_INTERVAL_S: f64 = 3.0;
pub const DEFAULT_WARN_FRACTION: f64 = 0.8;
pub const DEFAULT_GROWTH_MB_PER_MIN: f64 = 500.0;
pub const DEFAULT_WINDOW_S: f64 = 180.0;
pub const DEFAULT_WARMUP_EPOCHS: u32 = 1;
pub const DEFAULT_WARMUP_MAX_S: f64 = 900.0;
pub const DEFAULT_GRACE_S: f64 = 60.0;
pub const DEFAULT_SERIES_MAX: usize = 4096;
pub const DEFAULT_LOG_EVERY_S: f64 = 300.0;
pub const DEFAULT_MAX_WARN_FRACTION: f64 = 0.95;
pub const DEFAULT_MAX_WARMUP_EPOCHS: u32 = 3;

impl GuardSite {
    /// Read and check `[guard]`: wrong types, unknown keys and values out of
    /// range are invalid input naming the key.
    pub fn from_site(site: &Site) -> Result<GuardSite> {
        let g: GuardSite = site.section("guard")?;
        let bad = |key: &str, value: String, expected: &str| {
            let mut keys = vec!["guard"];
            keys.extend(key.split('.'));
            invalid(format!(
                "{}: [guard] {key} = {value}: expected {expected}",
                site.at(&keys)
            ))
        };
        let positive = |key: &str, v: Option<f64>, lo: f64, hi: f64| -> Result<()> {
            match v {
                Some(x) if !(x.is_finite() && (lo..=hi).contains(&x)) => Err(bad(
                    key,
                    x.to_string(),
                    &format!("a number from {lo} to {hi}"),
                )),
                _ => Ok(()),
            }
        };
        positive("interval_s", g.interval_s, 0.05, 3600.0)?;
        positive("warn_fraction", g.warn_fraction, 0.01, 1.0)?;
        positive("growth_mb_per_min", g.growth_mb_per_min, 0.001, 1e7)?;
        positive("window_s", g.window_s, 0.1, 86_400.0)?;
        positive("warmup_max_s", g.warmup_max_s, 0.0, 7.0 * 86_400.0)?;
        positive("grace_s", g.grace_s, 0.0, 3600.0)?;
        positive("log_every_s", g.log_every_s, 1.0, 86_400.0)?;
        positive(
            "limits.max_warn_fraction",
            g.limits.max_warn_fraction,
            0.01,
            1.0,
        )?;
        positive(
            "limits.max_growth_mb_per_min",
            g.limits.max_growth_mb_per_min,
            0.001,
            1e7,
        )?;
        positive("limits.max_window_s", g.limits.max_window_s, 0.1, 86_400.0)?;
        if let Some(n) = g.series_max_samples {
            if !(16..=1_000_000).contains(&n) {
                return Err(bad("series_max_samples", n.to_string(), "16 to 1000000"));
            }
        }
        if let Some(0) = g.shards_per_gpu {
            return Err(bad("shards_per_gpu", "0".into(), "a count of at least 1"));
        }
        if let Some(dir) = &g.textfile_dir {
            let text = dir.to_string_lossy();
            if text
                .chars()
                .any(|c| c.is_control() || crate::text::is_invisible(c))
            {
                return Err(bad(
                    "textfile_dir",
                    format!("\"{}\"", crate::text::shown(&text, 160)),
                    "a directory name without control or invisible characters",
                ));
            }
            if !dir.is_absolute() {
                return Err(bad(
                    "textfile_dir",
                    format!("{:?}", dir.display().to_string()),
                    "an absolute directory (node_exporter's --collector.textfile.directory)",
                ));
            }
        }
        Ok(g)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(text: &str) -> Result<GuardSite> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("site.toml");
        std::fs::write(&p, text).unwrap();
        GuardSite::from_site(&Site::load(Some(&p))?)
    }

    #[test]
    fn a_full_section_reads_and_an_absent_one_is_defaults() {
        let g = site(
            "[guard]\ninterval_s = 0.5\nwarn_fraction = 0.7\ngrowth_mb_per_min = 300\n\
             window_s = 60\ntextfile_dir = \"/var/lib/node_exporter\"\n[guard.limits]\nallow_disable = true\n",
        )
        .unwrap();
        assert_eq!(g.interval_s, Some(0.5));
        assert_eq!(g.limits.allow_disable, Some(true));
        assert!(site("").unwrap().interval_s.is_none());
    }

    #[test]
    fn wrong_keys_and_values_are_invalid_input_naming_the_key() {
        for (text, needle) in [
            ("[guard]\nwarn_fraction = 1.5\n", "warn_fraction = 1.5"),
            ("[guard]\ninterval_s = 0\n", "interval_s"),
            ("[guard]\nwarn_fractoin = 0.5\n", "warn_fractoin"),
            ("[guard]\ntextfile_dir = \"rel\"\n", "absolute"),
            ("[guard]\nseries_max_samples = 2\n", "series_max_samples"),
            ("[guard.limits]\nmax_window_s = -1\n", "limits.max_window_s"),
            (
                "[guard]\ntextfile_dir = \"/var/lib/ne\\n# forged\"\n",
                "textfile_dir = \"/var/lib/ne\\n# forged\": expected a directory name without control",
            ),
            ("[guard]\ntextfile_dir = \"/var/\\u001b[31mx\"\n", "without control"),
        ] {
            let e = site(text).unwrap_err();
            assert_eq!(crate::error::exit_code_for(&e), 2, "{text}");
            assert!(format!("{e:#}").contains(needle), "{text}: {e:#}");
        }
    }

    #[test]
    fn every_mistake_says_its_line_and_column() {
        for (text, at) in [
            (
                "[guard]\n\nwarn_fraction = 1.5\n",
                "site.toml:3:17: [guard] warn_fraction",
            ),
            (
                "[guard]\ninterval_s = 1\n[guard.limits]\nmax_window_s = -1\n",
                "site.toml:4:16: [guard] limits.max_window_s",
            ),
            ("[guard]\nwarn_fractoin = 0.5\n", "site.toml:2:"),
            (
                "[guard]\ntextfile_dir = \"a\\nb\"\n",
                "site.toml:2:16: [guard] textfile_dir",
            ),
        ] {
            let e = format!("{:#}", site(text).unwrap_err());
            assert!(e.contains(at), "{text}: {e}");
        }
    }
}
