//! The running controller's settings, from `scontrol show config`.

use std::collections::BTreeMap;

use anyhow::Result;

use super::Slurm;

/// `Key = Value` pairs of `scontrol show config`.
#[derive(Debug, Clone, Default)]
pub struct ControllerConfig {
    values: BTreeMap<String, String>,
}

impl ControllerConfig {
    pub fn parse(text: &str) -> Self {
        let values = text
            .lines()
            .filter_map(|line| {
                let (k, v) = line.split_once(" = ")?;
                let k = k.trim();
                (!k.is_empty() && !k.contains(' ')).then(|| (k.to_string(), v.trim().to_string()))
            })
            .collect();
        ControllerConfig { values }
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(String::as_str)
    }

    /// True when slurmdbd keeps each job's `--comment` (`AccountingStoreFlags=job_comment`),
    /// which names the run, so `sacct` finds runs after they left the queue.
    pub fn stores_job_comment(&self) -> bool {
        self.get("AccountingStoreFlags")
            .is_some_and(|f| f.split(',').any(|x| x.trim() == "job_comment"))
    }

    /// True when `PrivateData` hides other users' jobs from each user.
    pub fn private_jobs(&self) -> bool {
        self.get("PrivateData")
            .is_some_and(|f| f.split(',').any(|x| x.trim() == "jobs"))
    }

    /// True when completed jobs are logged by jobcomp (so `sacct -c` works).
    pub fn has_jobcomp(&self) -> bool {
        self.get("JobCompType")
            .is_some_and(|t| !t.ends_with("/none") && !t.is_empty())
    }
}

/// `scontrol ping`: whether the controller answers. The exit status and
/// text are handed back as they are; the caller reads `is UP`.
/// The typed GPU GRES (`gpu:1g.5gb`) among `keys` that `AccountingStorageTRES`
/// does not record: sacct keeps only `gres/gpu=N` for their jobs, and the
/// layout advisor cannot tell what they asked for.
pub fn untracked_gpu_types<'a>(tres: &str, keys: impl Iterator<Item = &'a str>) -> Vec<String> {
    let tracked: Vec<&str> = tres.split(',').map(str::trim).collect();
    keys.filter_map(|k| k.strip_prefix("gpu:"))
        .filter(|t| !tracked.contains(&format!("gres/gpu:{t}").as_str()))
        .map(str::to_string)
        .collect()
}

pub fn ping(slurm: &Slurm) -> Result<crate::process::Captured> {
    slurm.run_raw("scontrol", &["ping"])
}

/// The running controller's settings (`scontrol show config`).
pub fn fetch(slurm: &Slurm) -> Result<ControllerConfig> {
    Ok(ControllerConfig::parse(
        &slurm.stdout("scontrol", &["show", "config"])?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_gpu_gres_missing_from_accounting_are_named() {
        let tres = "cpu,mem,energy,node,billing,fs/disk,vmem,pages,gres/gpu,gres/gpu:1g.5gb";
        let keys = ["gpu:1g.5gb", "gpu:a100", "shard", "gpu"];
        assert_eq!(untracked_gpu_types(tres, keys.into_iter()), ["a100"]);
        assert!(untracked_gpu_types("gres/gpu:a100", ["gpu:a100"].into_iter()).is_empty());
    }

    #[test]
    fn parses_the_fields_we_use() {
        let text = "Configuration data as of 2026-11-30T15:00:00\n\
            AccountingStorageType   = accounting_storage/none\n\
            JobCompType             = jobcomp/filetxt\n\
            MaxArraySize            = 1001\n\
            MinJobAge               = 1800 sec\n\
            AccountingStoreFlags    = job_comment,job_env\n\
            PrivateData             = accounts,jobs\n\
            SLURM_VERSION           = 22.05.8\n";
        let c = ControllerConfig::parse(text);
        assert_eq!(c.get("MaxArraySize"), Some("1001"));
        assert_eq!(c.get("MinJobAge"), Some("1800 sec"));
        assert!(c.has_jobcomp());
        assert!(c.stores_job_comment() && c.private_jobs());
        let bare = ControllerConfig::parse("PrivateData = none\n");
        assert!(!bare.stores_job_comment() && !bare.private_jobs());
        assert_eq!(c.get("SLURM_VERSION"), Some("22.05.8"));
    }
}
