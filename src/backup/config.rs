//! The `[backup]` section of the site file, the spec's `[backup]` within it,
//! and the resolved settings of one run (saved in its state directory at
//! submission, so the job reads exactly what was decided then).
//!
//! Endpoint, region and credentials are never configured here: they come from
//! the usual AWS environment variables and files (`objstore::Credentials`), so
//! they never reach a script, a manifest or a log.

use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::config::Site;
use crate::error::invalid;
use crate::names::backup_url::BackupUrl;
use crate::spec::Spec;

/// The keys of `[backup]` in the site file.
pub const SITE_KEYS: &[&str] = &["url", "allowed_urls", "spec_may_disable", "interval"];

/// Seconds between two looks at the training directory unless the site says.
pub const DEFAULT_INTERVAL: u64 = 30;

/// `[backup]` of the site file, checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SiteBackup {
    /// Where runs are backed up unless their spec says otherwise; `None`: no backup by default.
    pub url: Option<BackupUrl>,
    /// Places a spec may choose instead (each with everything under it);
    /// `url` and everything under it is always allowed.
    pub allowed: Vec<BackupUrl>,
    /// Whether a spec may turn the backup off (default true).
    pub spec_may_disable: bool,
    /// Seconds between looks at the training directory (1 to 3600).
    pub interval: u64,
}

impl SiteBackup {
    /// Read `[backup]` from the site file: every key known, every value checked;
    /// a mistake is an invalid-input error naming the file and key, with a suggestion.
    pub fn from_site(site: &Site) -> Result<SiteBackup> {
        let mut out = SiteBackup {
            spec_may_disable: true,
            interval: DEFAULT_INTERVAL,
            ..SiteBackup::default()
        };
        let Some(table) = site.table("backup")? else {
            return Ok(out);
        };
        let here = |key: &str| format!("{}: in [backup]", site.at(&["backup", key]));
        for (key, value) in table {
            let bad = |what: String| invalid(format!("{}: `{key}` {what}", here(key)));
            match key.as_str() {
                "url" => {
                    let s = value.as_str().ok_or_else(|| {
                        bad("expected a string such as \"s3://bucket/prefix\"".into())
                    })?;
                    out.url = Some(BackupUrl::parse(s).map_err(bad)?);
                }
                "allowed_urls" => {
                    let list = value.as_array().ok_or_else(|| {
                        bad("expected a list of URLs such as [\"s3://bucket/team\"]".into())
                    })?;
                    for (i, item) in list.iter().enumerate() {
                        let s = item.as_str().ok_or_else(|| {
                            bad("expected strings such as \"s3://bucket/team\"".into())
                        })?;
                        out.allowed.push(
                            BackupUrl::parse(s).map_err(|e| bad(format!("item {}: {e}", i + 1)))?,
                        );
                    }
                }
                "spec_may_disable" => {
                    out.spec_may_disable = value
                        .as_bool()
                        .ok_or_else(|| bad("expected true or false".into()))?;
                }
                "interval" => {
                    out.interval = value
                        .as_integer()
                        .filter(|n| (1..=3600).contains(n))
                        .map(|n| n as u64)
                        .ok_or_else(|| {
                            bad(format!(
                                "= {} is out of range; expected whole seconds from 1 to 3600",
                                crate::text::shown(&value.to_string(), 40)
                            ))
                        })?;
                }
                other => return Err(site.unknown_key("backup", other, SITE_KEYS)),
            }
        }
        Ok(out)
    }

    fn allows(&self, url: &BackupUrl) -> bool {
        self.url
            .iter()
            .chain(&self.allowed)
            .any(|a| url.is_within(a))
    }
}

/// What one run's backup is, decided at submission and saved in its state directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunBackup {
    /// The run's place: the chosen URL with the run id appended; each training
    /// directory (`train`, `train-3`) is a prefix below it.
    pub url: BackupUrl,
    /// Seconds between looks at the training directory.
    pub interval: u64,
}

/// The site's and the spec's `[backup]` together: `None` when this run has no
/// backup. A spec URL the site does not allow, or an opt-out it forbids, is an
/// invalid-input error at the spec's line.
pub fn resolve(site: &SiteBackup, spec: &Spec, run_id: &str) -> Result<Option<RunBackup>> {
    let at = |key: &str| {
        let loc = spec.origin.locations.get(key);
        match loc {
            Some(l) => format!("{}:{}:{}: `{key}`", spec.origin.file, l.line, l.column),
            None => format!("{}: `{key}`", spec.origin.file),
        }
    };
    if spec.backup.enabled == Some(false) {
        if !site.spec_may_disable && site.url.is_some() {
            return Err(invalid(format!(
                "{} = false is not allowed: the site backs up every run (site `[backup] spec_may_disable = false`)",
                at("backup.enabled")
            )));
        }
        return Ok(None);
    }
    let chosen = match &spec.backup.url {
        Some(text) => {
            let url =
                BackupUrl::parse(text).map_err(|e| invalid(format!("{} {e}", at("backup.url"))))?;
            if !site.allows(&url) {
                let places: Vec<String> = site
                    .url
                    .iter()
                    .chain(&site.allowed)
                    .map(|u| u.to_string())
                    .collect();
                return Err(invalid(if places.is_empty() {
                    format!(
                        "{} = {url}: the site file allows no backup place (ask the administrators for a `[backup] url`, docs/backup.md)",
                        at("backup.url")
                    )
                } else {
                    format!(
                        "{} = {url} is not within what the site allows: {}; choose a prefix under one of them",
                        at("backup.url"),
                        places.join(", ")
                    )
                }));
            }
            url
        }
        None => match &site.url {
            Some(u) => u.clone(),
            None => return Ok(None),
        },
    };
    let url = chosen
        .join(run_id)
        .map_err(|e| invalid(format!("run id {run_id:?}: {e}")))?;
    Ok(Some(RunBackup {
        url,
        interval: site.interval,
    }))
}

/// `<workdir>/state/backup/`: the run's backup settings and, per training
/// directory, the record of what was backed up.
pub fn state_dir(workdir: &Path) -> PathBuf {
    workdir.join(state_rel())
}

/// `state/backup`, relative to the run directory.
pub fn state_rel() -> PathBuf {
    Path::new(crate::rundir::layout::STATE).join(crate::rundir::layout::BACKUP)
}

/// The saved settings of a run.
pub fn settings_path(workdir: &Path) -> PathBuf {
    state_dir(workdir).join("settings.json")
}

impl RunBackup {
    /// Save the settings where the jobs read them (atomically).
    pub fn save(&self, workdir: &Path) -> Result<()> {
        let text = serde_json::to_string_pretty(self)?;
        crate::fsutil::within::write(
            workdir,
            &state_rel().join("settings.json"),
            text.as_bytes(),
            0o644,
        )
    }

    /// The run's saved settings; `None` when the run has no backup.
    pub fn load(workdir: &Path) -> Result<Option<RunBackup>> {
        let path = settings_path(workdir);
        if !path.exists() {
            return Ok(None);
        }
        // The file is the user's: anything wrong in it is invalid input
        // (exit 2), checked as strictly as the site file.
        let damaged = |what: String| {
            crate::error::with_hint(
                invalid(format!(
                    "{}: the run's backup settings are damaged: {what}",
                    path.display()
                )),
                "the file is written by `submit`; restore it from the run's submission or resubmit (docs/backup.md)",
            )
        };
        let text =
            crate::fsutil::read_regular(&path, 64 << 10).map_err(|e| damaged(format!("{e:#}")))?;
        let saved: RunBackup = serde_json::from_str(&text).map_err(|e| damaged(e.to_string()))?;
        BackupUrl::parse(&saved.url.to_string()).map_err(|e| damaged(format!("`url` {e}")))?;
        if !(1..=3600).contains(&saved.interval) {
            return Err(damaged(format!(
                "`interval` = {} is out of range; expected whole seconds from 1 to 3600",
                saved.interval
            )));
        }
        Ok(Some(saved))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(text: &str) -> Result<SiteBackup> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("site.toml");
        std::fs::write(&p, text).unwrap();
        SiteBackup::from_site(&Site::load(Some(&p))?)
    }

    fn spec(backup: &str) -> Spec {
        let text = format!(
            "version = 1\n[run]\nname = \"r\"\n[train]\nmodel = \"yolov8n.yaml\"\ndata = \"d.yaml\"\n{backup}"
        );
        crate::spec::parse(&text, "spec.toml").unwrap()
    }

    #[test]
    fn site_section_is_strict() {
        let s = site("[backup]\nurl = \"s3://ckpt/yolo\"\ninterval = 5\n").unwrap();
        assert_eq!(s.url.unwrap().to_string(), "s3://ckpt/yolo");
        assert_eq!(s.interval, 5);
        assert!(s.spec_may_disable);

        let e = site("[backup]\nurll = \"s3://ckpt/yolo\"\n").unwrap_err();
        assert_eq!(crate::error::exit_code_for(&e), 2);
        assert!(e.to_string().contains("did you mean `url`"), "{e}");
        let e = site("[backup]\nurl = \"ftp://x/y\"\n").unwrap_err();
        assert!(
            e.to_string().contains("`url`") && e.to_string().contains("s3://"),
            "{e}"
        );
        let e = site("[backup]\ninterval = 0\n").unwrap_err();
        assert!(e.to_string().contains("1 to 3600"), "{e}");
        // Every mistake says line:column of its key's value.
        for (text, at) in [
            (
                "[backup]\ninterval = 0\n",
                "site.toml:2:12: in [backup]: `interval`",
            ),
            (
                "[backup]\n\nurl = \"s3://../x\"\n",
                "site.toml:3:7: in [backup]: `url`",
            ),
            (
                "[backup]\nallowed_urls = [\"s3://*\"]\n",
                "site.toml:2:16: in [backup]: `allowed_urls` item 1",
            ),
            (
                "[backup]\nurll = 1\n",
                "site.toml:2:8: in [backup]: unknown key `urll`",
            ),
        ] {
            let e = site(text).unwrap_err();
            assert_eq!(crate::error::exit_code_for(&e), 2, "{text}");
            assert!(e.to_string().contains(at), "{text}: {e}");
        }
        // Credentials in the site's URL: where, never what.
        let e = site("[backup]\nurl = \"s3://AKIAIOSFODNN7EXAMPLE:s3cr3tKEYvalue@ckpt/yolo\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("site.toml:2:7: in [backup]: `url` carries user information"),
            "{e}"
        );
        assert!(
            !e.contains("s3cr3tKEYvalue") && !e.contains("AKIAIOSFODNN7EXAMPLE"),
            "{e}"
        );
        let e = site("[backup]\nallowed_urls = \"s3://x/y\"\n").unwrap_err();
        assert!(e.to_string().contains("list"), "{e}");
        assert_eq!(site("").unwrap().url, None);
    }

    #[test]
    fn spec_chooses_within_the_site() {
        let s =
            site("[backup]\nurl = \"s3://ckpt/yolo\"\nallowed_urls = [\"s3://team/a\"]\n").unwrap();
        let r = resolve(&s, &spec(""), "run-1").unwrap().unwrap();
        assert_eq!(r.url.to_string(), "s3://ckpt/yolo/run-1");
        let r = resolve(&s, &spec("[backup]\nurl = \"s3://team/a/b\"\n"), "run-1")
            .unwrap()
            .unwrap();
        assert_eq!(r.url.to_string(), "s3://team/a/b/run-1");
        let e = resolve(&s, &spec("[backup]\nurl = \"s3://team/ab\"\n"), "run-1").unwrap_err();
        assert_eq!(crate::error::exit_code_for(&e), 2);
        assert!(e.to_string().contains(":8:7: `backup.url`"), "{e}");
        assert_eq!(
            resolve(&s, &spec("[backup]\nenabled = false\n"), "r").unwrap(),
            None
        );

        let strict =
            site("[backup]\nurl = \"s3://ckpt/yolo\"\nspec_may_disable = false\n").unwrap();
        let e = resolve(&strict, &spec("[backup]\nenabled = false\n"), "r").unwrap_err();
        assert!(e.to_string().contains("spec_may_disable"), "{e}");

        let none = site("").unwrap();
        assert_eq!(resolve(&none, &spec(""), "r").unwrap(), None);
        let e = resolve(&none, &spec("[backup]\nurl = \"s3://ckpt/x\"\n"), "r").unwrap_err();
        assert!(e.to_string().contains("allows no backup place"), "{e}");
    }

    #[test]
    fn spec_table_form_is_checked_at_parse() {
        let text = "version = 1\n[run]\nname = \"r\"\n[train]\nmodel = \"m.yaml\"\ndata = \"d.yaml\"\n[backup]\nurll = \"s3://a/b\"\n";
        let e = crate::spec::parse(text, "spec.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("did you mean `url`"), "{e}");
        let text = text.replace("urll = \"s3://a/b\"", "url = \"s3://A/b\"");
        let e = crate::spec::parse(&text, "spec.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("bucket"), "{e}");
    }

    #[test]
    fn settings_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(RunBackup::load(dir.path()).unwrap(), None);
        let r = RunBackup {
            url: BackupUrl::parse("s3://ckpt/yolo/run-1").unwrap(),
            interval: 30,
        };
        r.save(dir.path()).unwrap();
        assert_eq!(RunBackup::load(dir.path()).unwrap(), Some(r));
    }

    /// A tampered settings file is invalid input (exit 2) naming the file.
    #[test]
    fn tampered_settings_are_invalid_input() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(state_dir(dir.path())).unwrap();
        for text in [
            "{",
            "{\"url\": {\"bucket\": \"ckpt\", \"prefix\": \"../etc\"}, \"interval\": 30}",
            "{\"url\": {\"bucket\": \"ckpt\", \"prefix\": \"r\"}, \"interval\": 0}",
            "{\"url\": 3}",
        ] {
            std::fs::write(settings_path(dir.path()), text).unwrap();
            let e = RunBackup::load(dir.path()).unwrap_err();
            assert_eq!(crate::error::exit_code_for(&e), 2, "{text}: {e:#}");
            assert!(format!("{e:#}").contains("settings.json"), "{e:#}");
        }
    }
}
