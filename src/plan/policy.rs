//! Site policy for submissions: defaults for newcomers, limits, pools
//! (`[defaults]`, `[limits]`, `[pools]`, `[gpu_memory]` of the site file).

use std::collections::BTreeMap;

use anyhow::Result;
use serde::Deserialize;

use super::pools::Pools;
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
    /// The model of a spec whose `[train]` names none: a weights path, a model
    /// YAML, or a registry model (`"registry:yolov8n"`), so a newcomer's spec
    /// works offline with no weights file at all.
    pub model: Option<String>,
}

impl Defaults {
    /// The default train time as (text, seconds).
    pub fn time_or(&self, fallback: &str) -> (String, u64) {
        let text = self.time.clone().unwrap_or_else(|| fallback.to_string());
        let secs = crate::slurm::time::parse_duration(&text)
            .ok()
            .unwrap_or(8 * 3600);
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
        crate::slurm::time::parse_duration(t)
            .ok()
            .map(|s| (t.clone(), s))
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
    /// The site's policy, every value checked as strictly as a spec's (the same
    /// character rules for names that reach `#SBATCH` lines, ranges for
    /// numbers): any user can point `--site` at a file of their own.
    pub fn from_site(site: &Site) -> Result<Policy> {
        let policy = Policy {
            defaults: site.section("defaults")?,
            limits: site.section("limits")?,
            pools: site.section("pools")?,
            gpu_memory: site.section("gpu_memory")?,
            resources: site.section("resources")?,
        };
        let check = SiteCheck { site };
        check.defaults(&policy.defaults)?;
        check.limits(&policy.limits)?;
        check.pools(&policy.pools)?;
        check.gpu_memory(&policy.gpu_memory)?;
        check.resources(&policy.resources)?;
        check.times(&policy)?;
        Ok(policy)
    }
}

/// The checks of a site file's values, each error at the value's place in it.
struct SiteCheck<'a> {
    site: &'a Site,
}

impl SiteCheck<'_> {
    /// `site file PATH:LINE:COLUMN: `key` …`, at the value (the innermost
    /// table of `at` that is there).
    fn bad_at(&self, key: &str, at: &[&str], message: String) -> anyhow::Error {
        crate::error::invalid(format!("{}: `{key}` {message}", self.site.at(at)))
    }

    /// As `bad_at`, at the place the dotted `key` names.
    fn bad(&self, key: &str, message: String) -> anyhow::Error {
        let path = key_path(key);
        let path: Vec<&str> = path.iter().map(String::as_str).collect();
        self.bad_at(key, &path, message)
    }

    /// A Slurm name (a partition; `list`: a comma-separated list of them).
    fn name(&self, key: &str, value: &str, list: bool) -> Result<()> {
        crate::spec::values::check_slurm_name(value, list).map_err(|p| self.bad(key, p.message))
    }

    /// A GRES type: letters, digits, '.', '_', '+' or '-', at most 64.
    fn gres_type(&self, key: &str, at: &[&str], value: &str) -> Result<()> {
        let ok = !value.is_empty()
            && value.len() <= 64
            && value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '+' | '-'));
        if ok {
            Ok(())
        } else {
            Err(self.bad_at(
                key,
                at,
                format!(
                    "{:?} is not a GRES type: expected letters, digits, '.', '_', '+' or '-' (e.g. 1g.5gb, a100)",
                    crate::text::clip(value)
                ),
            ))
        }
    }

    /// A finite number from `min` to `max`.
    fn number(&self, key: &str, v: f64, min: f64, max: f64) -> Result<()> {
        if v.is_finite() && v >= min && v <= max {
            Ok(())
        } else {
            Err(self.bad(
                key,
                format!("= {v} is out of range; expected {min} to {max}"),
            ))
        }
    }

    /// `[defaults]`: the model, the partitions, the image size, the batch,
    /// the memory warning.
    fn defaults(&self, d: &Defaults) -> Result<()> {
        if let Some(m) = &d.model {
            crate::spec::args::check_model(m).map_err(|p| self.bad("defaults.model", p.message))?;
        }
        if let Some(p) = &d.cpu_partition {
            self.name("defaults.cpu_partition", p, true)?;
        }
        if let Some(p) = &d.gpu_partition {
            self.name("defaults.gpu_partition", p, true)?;
        }
        if let Some(n) = d.imgsz {
            crate::spec::args::check_imgsz(&crate::spec::types::ArgValue::Int(i64::from(n)))
                .map_err(|p| self.bad("defaults.imgsz", p.message))?;
        }
        if let Some(b) = d.batch {
            self.number("defaults.batch", f64::from(b), 1.0, 4096.0)?;
        }
        if let Some(w) = d.memory_warning {
            self.number("defaults.memory_warning", w, 0.01, 1.0)?;
        }
        Ok(())
    }

    /// `[limits]`: the array size and the GPU types allowed (the time is `times`').
    fn limits(&self, limits: &Limits) -> Result<()> {
        if let Some(n) = limits.max_array_size {
            self.number("limits.max_array_size", n as f64, 1.0, 4_000_001.0)?;
        }
        for t in limits.allowed_gpus.iter().flatten() {
            self.gres_type("limits.allowed_gpus", &["limits", "allowed_gpus"], t)?;
        }
        Ok(())
    }

    /// `[pools]`: each pool's partition and types, the GPUs of one job (whole
    /// GPUs only), the shared pool's shard sizes.
    fn pools(&self, pools: &Pools) -> Result<()> {
        for (key, pool) in [
            ("pools.mig", &pools.mig),
            ("pools.exclusive", &pools.exclusive),
        ] {
            if let Some(pool) = pool {
                if let Some(p) = &pool.partition {
                    self.name(&format!("{key}.partition"), p, true)?;
                }
                for t in pool.types.iter().flatten() {
                    let types = format!("{key}.types");
                    let path = key_path(&types);
                    let path: Vec<&str> = path.iter().map(String::as_str).collect();
                    self.gres_type(&types, &path, t)?;
                }
                if let Some(n) = pool.max_gpus {
                    if key == "pools.mig" {
                        return Err(self.bad(
                            "pools.mig.max_gpus",
                            "has no meaning for MIG: a training takes one MIG slice (one CUDA process sees one MIG device); several GPUs are whole GPUs, `[pools.exclusive] max_gpus`".into(),
                        ));
                    }
                    self.number(
                        "pools.exclusive.max_gpus",
                        f64::from(n),
                        1.0,
                        f64::from(crate::spec::values::MAX_GPUS),
                    )?;
                }
            }
        }
        if let Some(shared) = &pools.shared {
            if let Some(p) = &shared.partition {
                self.name("pools.shared.partition", p, true)?;
            }
            self.number("pools.shared.shard_gib", shared.shard_gib, 0.25, 1024.0)?;
            self.number(
                "pools.shared.max_gib",
                shared.max_gib,
                shared.shard_gib,
                4096.0,
            )?;
        }
        Ok(())
    }

    /// `[gpu_memory]`: each GRES type's GiB.
    fn gpu_memory(&self, gpu_memory: &BTreeMap<String, f64>) -> Result<()> {
        for (kind, gib) in gpu_memory {
            self.gres_type("gpu_memory", &["gpu_memory", kind], kind)?;
            self.number(&format!("gpu_memory.\"{kind}\""), *gib, 0.1, 4096.0)?;
        }
        Ok(())
    }

    /// `[resources."<type>"]`: each type's CPUs and memory.
    fn resources(&self, resources: &BTreeMap<String, SiteResources>) -> Result<()> {
        for (kind, r) in resources {
            self.gres_type("resources", &["resources", kind], kind)?;
            if let Some(c) = r.cpus {
                self.number(
                    &format!("resources.\"{kind}\".cpus"),
                    f64::from(c),
                    1.0,
                    4096.0,
                )?;
            }
            if let Some(m) = &r.mem {
                if let Err(p) = crate::spec::values::parse_mem(m) {
                    return Err(self.bad(&format!("resources.\"{kind}\".mem"), p.message));
                }
            }
        }
        Ok(())
    }

    /// `defaults.time` and `limits.max_time`: Slurm times.
    fn times(&self, policy: &Policy) -> Result<()> {
        for (key, value) in [
            ("defaults.time", &policy.defaults.time),
            ("limits.max_time", &policy.limits.max_time),
        ] {
            if let Some(v) = value {
                if crate::slurm::time::parse_duration(v).ok().is_none() {
                    return Err(self.bad(
                        key,
                        format!(
                            "= {:?} is not a Slurm time (HH:MM:SS, D-HH:MM, …)",
                            crate::text::clip(v)
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// The keys of a dotted key as messages write it (`pools.mig.max_gpus`,
/// `resources."1g.5gb".cpus`), for `Site::at`.
fn key_path(key: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = key;
    while !rest.is_empty() {
        if let Some(quoted) = rest.strip_prefix('"') {
            let end = quoted.find('"').unwrap_or(quoted.len());
            out.push(quoted[..end].to_string());
            rest = quoted.get(end + 1..).unwrap_or("");
        } else {
            let end = rest.find('.').unwrap_or(rest.len());
            out.push(rest[..end].to_string());
            rest = &rest[end..];
        }
        rest = rest.strip_prefix('.').unwrap_or(rest);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Site values that would reach an `#SBATCH` line or a number that means
    /// nothing are refused, naming the key; any user can write a site file.
    #[test]
    fn hostile_site_values_are_invalid_input_naming_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("site.toml");
        for (text, key) in [
            (
                "[defaults]\ngpu_partition = \"gpu\\n#SBATCH --uid=0\"\n",
                "defaults.gpu_partition",
            ),
            (
                "[defaults]\ncpu_partition = \"cpu;$(touch /tmp/x)\"\n",
                "defaults.cpu_partition",
            ),
            ("[defaults]\nimgsz = 33\n", "defaults.imgsz"),
            ("[defaults]\nimgsz = 0\n", "defaults.imgsz"),
            ("[defaults]\nbatch = 0\n", "defaults.batch"),
            (
                "[defaults]\nmemory_warning = nan\n",
                "defaults.memory_warning",
            ),
            (
                "[defaults]\nmemory_warning = 2.0\n",
                "defaults.memory_warning",
            ),
            ("[gpu_memory]\na100 = inf\n", "gpu_memory.\"a100\""),
            ("[gpu_memory]\n\"a100 $(x)\" = 40.0\n", "gpu_memory"),
            (
                "[pools.shared]\nshard_gib = 1e-300\nmax_gib = 16.0\n",
                "pools.shared.shard_gib",
            ),
            (
                "[pools.shared]\npartition = \"a b\"\nshard_gib = 4.0\nmax_gib = 16.0\n",
                "pools.shared.partition",
            ),
            (
                "[pools.mig]\npartition = \"gpu\\n\"\n",
                "pools.mig.partition",
            ),
            ("[pools.mig]\nmax_gpus = 2\n", "pools.mig.max_gpus"),
            (
                "[pools.exclusive]\nmax_gpus = 0\n",
                "pools.exclusive.max_gpus",
            ),
            (
                "[pools.exclusive]\nmax_gpus = 1000\n",
                "pools.exclusive.max_gpus",
            ),
            ("[limits]\nmax_array_size = 0\n", "limits.max_array_size"),
            (
                "[limits]\nallowed_gpus = [\"1g.5gb\\n\"]\n",
                "limits.allowed_gpus",
            ),
            ("[resources.\"1g;5gb\"]\ncpus = 2\n", "resources"),
            (
                "[resources.\"1g.5gb\"]\ncpus = 0\n",
                "resources.\"1g.5gb\".cpus",
            ),
            ("[defaults]\ntime = \"forever\"\n", "defaults.time"),
        ] {
            std::fs::write(&p, text).unwrap();
            let site = crate::config::Site::load(Some(&p)).unwrap();
            let e = Policy::from_site(&site).unwrap_err();
            assert_eq!(crate::error::exit_code_for(&e), 2, "{text}");
            assert!(e.to_string().contains(&format!("`{key}`")), "{text}: {e}");
            // Issue 32, item 12: every value error says where in the file.
            let e = e.to_string();
            let at = e
                .strip_prefix(&format!("site file {}:", p.display()))
                .unwrap_or_default();
            assert!(at.starts_with(|c: char| c.is_ascii_digit()), "{text}: {e}");
        }
        for (text, at) in [
            (
                "[pools.exclusive]\nmax_gpus = 0\n",
                ":2:12: `pools.exclusive.max_gpus`",
            ),
            (
                "[pools.exclusive]\nmax_gpus = 65\n",
                ":2:12: `pools.exclusive.max_gpus`",
            ),
            ("[pools.mig]\nmax_gpus = 1\n", ":2:12: `pools.mig.max_gpus`"),
            (
                "[pools.mig]\npartition = \"gpu;x\"\n",
                ":2:13: `pools.mig.partition`",
            ),
            ("[defaults]\nbatch = 0\n", ":2:9: `defaults.batch`"),
            (
                "[resources.\"1g.5gb\"]\ncpus = 0\n",
                ":2:8: `resources.\"1g.5gb\".cpus`",
            ),
            ("[gpu_memory]\n\"a b\" = 4.0\n", ":2:9: `gpu_memory`"),
        ] {
            std::fs::write(&p, text).unwrap();
            let site = crate::config::Site::load(Some(&p)).unwrap();
            let e = Policy::from_site(&site).unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("site file {}{at}", p.display())),
                "{text}: {e}"
            );
        }
        assert_eq!(
            key_path("resources.\"1g.5gb\".cpus"),
            ["resources", "1g.5gb", "cpus"]
        );
        std::fs::write(
            &p,
            "[defaults]\ngpu_partition = \"gpu,gpu2\"\nimgsz = 640\nbatch = 8\nmemory_warning = 0.8\n\
             [pools.shared]\nshard_gib = 4.0\nmax_gib = 16.0\n[gpu_memory]\na100 = 39.5\n",
        )
        .unwrap();
        assert!(Policy::from_site(&crate::config::Site::load(Some(&p)).unwrap()).is_ok());
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
