//! The registry's place, `[registry] url` of the site file: `s3://bucket/prefix`
//! (checked as the backup's URLs are, `names::backup_url::BackupUrl`; credentials from the
//! AWS conventions, never from the URL) or `file:///absolute/directory` (a
//! shared file system, `Store::local_shared`: no link followed).

use std::fmt;
use std::path::PathBuf;

use anyhow::Result;

use crate::config::Site;
use crate::error::invalid;
use crate::names::backup_url::BackupUrl;

/// The keys of `[registry]` in the site file.
pub const SITE_KEYS: &[&str] = &["url"];

const MAX_URL: usize = 512;

/// A checked registry location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistryUrl {
    S3(BackupUrl),
    /// An absolute directory, without `.` or `..` segments.
    File(PathBuf),
}

impl RegistryUrl {
    /// Parse and check `s3://bucket[/prefix]` or `file:///dir`.
    pub fn parse(text: &str) -> Result<RegistryUrl, String> {
        if text.starts_with("s3://") {
            return BackupUrl::parse(text).map(RegistryUrl::S3);
        }
        let Some(path) = text.strip_prefix("file://") else {
            return Err(format!(
                "`{}` is neither an s3:// nor a file:// URL; expected \"s3://bucket/prefix\" or \"file:///shared/yolo-models\"",
                crate::text::echo(text)
            ));
        };
        if text.len() > MAX_URL {
            return Err(format!(
                "is {} characters long; at most {MAX_URL} are allowed",
                text.len()
            ));
        }
        let trimmed = path.trim_end_matches('/');
        let plain = path.starts_with('/')
            && !trimmed.is_empty()
            && !path.chars().any(|c| c.is_control() || c == '\\')
            && trimmed
                .split('/')
                .skip(1)
                .all(|s| !s.is_empty() && s != "." && s != "..");
        if !plain {
            return Err(format!(
                "`{}` is not a plain absolute directory: expected file:///shared/yolo-models (three slashes, no `.`, `..` or empty segments)",
                crate::text::echo(text)
            ));
        }
        let path = trimmed;
        Ok(RegistryUrl::File(PathBuf::from(path)))
    }
}

impl fmt::Display for RegistryUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RegistryUrl::S3(u) => write!(f, "{u}"),
            RegistryUrl::File(p) => write!(f, "file://{}", p.display()),
        }
    }
}

/// `[registry]` of the site file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SiteRegistry {
    /// `None`: the site has no registry.
    pub url: Option<RegistryUrl>,
}

impl SiteRegistry {
    /// Read `[registry]`: every key known, every value checked; a mistake is
    /// an invalid-input error naming the file, line and key, with a suggestion.
    pub fn from_site(site: &Site) -> Result<SiteRegistry> {
        let mut out = SiteRegistry::default();
        let Some(table) = site.table("registry")? else {
            return Ok(out);
        };
        let here = |key: &str| format!("{}: in [registry]", site.at(&["registry", key]));
        for (key, value) in table {
            let bad = |what: String| invalid(format!("{}: `{key}` {what}", here(key)));
            match key.as_str() {
                "url" => {
                    let s = value.as_str().ok_or_else(|| {
                        bad("expected a string such as \"file:///shared/yolo-models\" or \"s3://bucket/models\"".into())
                    })?;
                    out.url = Some(RegistryUrl::parse(s).map_err(bad)?);
                }
                other => return Err(site.unknown_key("registry", other, SITE_KEYS)),
            }
        }
        Ok(out)
    }

    /// The URL, or an invalid-input error saying how to configure one.
    pub fn require(&self) -> Result<&RegistryUrl> {
        self.url.as_ref().ok_or_else(|| {
            invalid(
                "no model registry is configured: the site file needs `[registry] url = \"file:///shared/yolo-models\"` or `\"s3://bucket/models\"` (docs/registry.md)",
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_strictly() {
        assert_eq!(
            RegistryUrl::parse("file:///shared/models/").unwrap(),
            RegistryUrl::File(PathBuf::from("/shared/models"))
        );
        assert!(matches!(
            RegistryUrl::parse("s3://models/yolo").unwrap(),
            RegistryUrl::S3(_)
        ));
        for bad in [
            "file://shared",
            "file:///a/../b",
            "file:///a//b",
            "file:///a/./b",
            "file:///a\nb",
            "http://x/y",
            "s3://AKIA:wJalrXUtnFEMI@b/x",
            "/shared/models",
        ] {
            let e = RegistryUrl::parse(bad).unwrap_err();
            assert!(!e.contains('\n'), "{e}");
            assert!(!e.contains("wJalr"), "{e}");
        }
    }

    #[test]
    fn the_site_section_is_checked_with_positions() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("site.toml");
        std::fs::write(&p, "[registry]\nulr = \"file:///x\"\n").unwrap();
        let site = Site::load(Some(&p)).unwrap();
        let e = SiteRegistry::from_site(&site).unwrap_err();
        let text = format!("{e:#}");
        assert!(text.contains(":2:") && text.contains("`url`"), "{text}");
        assert_eq!(crate::error::exit_code_for(&e), 2);
        std::fs::write(&p, "[registry]\nurl = \"file:///x/../y\"\n").unwrap();
        let site = Site::load(Some(&p)).unwrap();
        assert!(SiteRegistry::from_site(&site).is_err());
        std::fs::write(&p, "[registry]\nurl = \"file:///x/y\"\n").unwrap();
        let site = Site::load(Some(&p)).unwrap();
        assert_eq!(
            SiteRegistry::from_site(&site).unwrap().url,
            Some(RegistryUrl::File(PathBuf::from("/x/y")))
        );
    }
}
