//! Site policy for submissions: defaults for newcomers, limits, pools
//! (`[defaults]`, `[limits]`, `[pools]`, `[gpu_memory]` of the site file).

use std::collections::BTreeMap;

use anyhow::Result;
use serde::Deserialize;

use super::gpu::Pools;
use crate::config::Site;

/// `[defaults]`: applied when a spec leaves the value out.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Defaults {
    /// The seed's conservative default for newcomers is 8.
    pub batch: Option<u32>,
    pub imgsz: Option<u32>,
    /// Train time limit when the spec sets none.
    pub time: Option<String>,
    /// Warn when the estimate exceeds this fraction of the slice (default 0.8).
    pub memory_warning: Option<f64>,
    pub cpu_partition: Option<String>,
    pub gpu_partition: Option<String>,
    /// Compute nodes reach the internet, so Ultralytics may download a bare
    /// `yolov8n.pt` at run time (default false: such a spec is refused).
    pub download_weights: Option<bool>,
}

impl Defaults {
    /// The default train time as (text, seconds).
    pub fn time_or(&self, fallback: &str) -> (String, u64) {
        let text = self.time.clone().unwrap_or_else(|| fallback.to_string());
        let secs = parse_slurm_time(&text).unwrap_or(8 * 3600);
        (text, secs)
    }
}

/// `[limits]`: values a spec may not exceed.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    pub max_time: Option<String>,
    pub max_array_size: Option<u64>,
    /// GRES types (MIG profiles, GPU types) that may be requested.
    pub allowed_gpus: Option<Vec<String>>,
}

impl Limits {
    pub fn max_time(&self) -> Option<(String, u64)> {
        let t = self.max_time.as_ref()?;
        parse_slurm_time(t).map(|s| (t.clone(), s))
    }
}

/// `[resources."<type>"]`: CPUs and memory of a stage on that GRES type
/// (`1g.5gb`, `a100`, `shard` per shard), or `[resources.cpu]` for stages
/// without a GPU; they replace the slice's share of the node.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SiteResources {
    pub cpus: Option<u32>,
    pub mem: Option<String>,
}

/// Everything the planner takes from the site file.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    pub defaults: Defaults,
    pub limits: Limits,
    pub pools: Pools,
    pub gpu_memory: BTreeMap<String, f64>,
    pub resources: BTreeMap<String, SiteResources>,
}

impl Policy {
    /// The site's CPUs and memory (MiB) for a GRES type (`None`: CPU stages).
    pub fn site_resources(&self, gres_type: Option<&str>) -> (Option<u32>, Option<u64>) {
        let key = gres_type.unwrap_or("cpu");
        match self.resources.get(key) {
            Some(r) => (
                r.cpus,
                r.mem
                    .as_deref()
                    .and_then(|m| crate::spec::values::parse_mem(m).ok())
                    .map(|m| m.mebibytes),
            ),
            None => (None, None),
        }
    }
}

impl Policy {
    pub fn from_site(site: &Site) -> Result<Policy> {
        let policy = Policy {
            defaults: site.section("defaults")?,
            limits: site.section("limits")?,
            pools: site.section("pools")?,
            gpu_memory: site.section("gpu_memory")?,
            resources: site.section("resources")?,
        };
        for (kind, r) in &policy.resources {
            if r.cpus == Some(0) {
                return Err(crate::error::invalid(format!(
                    "site file {}: `resources.\"{kind}\".cpus` is 0; expected at least 1",
                    site.describe()
                )));
            }
            if let Some(m) = &r.mem {
                if let Err(p) = crate::spec::values::parse_mem(m) {
                    return Err(crate::error::invalid(format!(
                        "site file {}: `resources.\"{kind}\".mem`: {}",
                        site.describe(),
                        p.message
                    )));
                }
            }
        }
        for (key, value) in [
            ("defaults.time", &policy.defaults.time),
            ("limits.max_time", &policy.limits.max_time),
        ] {
            if let Some(v) = value {
                if parse_slurm_time(v).is_none() {
                    return Err(crate::error::invalid(format!(
                        "site file {}: `{key}` = {v:?} is not a Slurm time (HH:MM:SS, D-HH:MM, …)",
                        site.describe()
                    )));
                }
            }
        }
        Ok(policy)
    }
}

/// Seconds of a Slurm time (`MM`, `MM:SS`, `HH:MM:SS`, `D-HH`, `D-HH:MM`,
/// `D-HH:MM:SS`), by the same rules specs are checked with.
pub fn parse_slurm_time(text: &str) -> Option<u64> {
    crate::spec::values::parse_slurm_time(text)
        .ok()
        .map(|t| t.seconds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slurm_times() {
        assert_eq!(parse_slurm_time("30"), Some(1800));
        assert_eq!(parse_slurm_time("30:15"), Some(1815));
        assert_eq!(parse_slurm_time("08:00:00"), Some(28800));
        assert_eq!(parse_slurm_time("1-12"), Some(129600));
        assert_eq!(parse_slurm_time("1-00:30"), Some(88200));
        assert_eq!(parse_slurm_time("2-01:00:05"), Some(176405));
        assert_eq!(parse_slurm_time("eight hours"), None);
    }

    #[test]
    fn site_sections_load() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("site.toml");
        std::fs::write(
            &p,
            "[defaults]\nbatch = 8\nimgsz = 640\ntime = \"08:00:00\"\n[limits]\nmax_time = \"08:00:00\"\nmax_array_size = 500\n\
             [pools.shared]\nshard_gib = 4.0\nmax_gib = 16.0\n[gpu_memory]\na100 = 79.0\n",
        )
        .unwrap();
        let site = Site::load(Some(&p)).unwrap();
        let pol = Policy::from_site(&site).unwrap();
        assert_eq!(pol.defaults.batch, Some(8));
        assert_eq!(pol.limits.max_time(), Some(("08:00:00".into(), 28800)));
        assert_eq!(pol.gpu_memory.get("a100"), Some(&79.0));
        assert!(pol.pools.shared.is_some());

        std::fs::write(
            &p,
            "[resources.\"1g.5gb\"]\ncpus = 2\nmem = \"8G\"\n[resources.cpu]\ncpus = 1\n",
        )
        .unwrap();
        let pol = Policy::from_site(&Site::load(Some(&p)).unwrap()).unwrap();
        assert_eq!(pol.site_resources(Some("1g.5gb")), (Some(2), Some(8192)));
        assert_eq!(pol.site_resources(None), (Some(1), None));
        assert_eq!(pol.site_resources(Some("a100")), (None, None));
        for bad in [
            "[resources.\"1g.5gb\"]\nmem = \"8 gigs\"\n",
            "[resources.cpu]\ncpus = 0\n",
            "[resources.cpu]\nthreads = 2\n",
        ] {
            std::fs::write(&p, bad).unwrap();
            let err = Policy::from_site(&Site::load(Some(&p)).unwrap()).unwrap_err();
            assert_eq!(crate::error::exit_code_for(&err), 2, "{bad}: {err:#}");
        }

        std::fs::write(&p, "[limits]\nmax_time = \"forever\"\n").unwrap();
        let err = Policy::from_site(&Site::load(Some(&p)).unwrap()).unwrap_err();
        assert_eq!(crate::error::exit_code_for(&err), 2);
    }
}
