//! `[backup]` of a spec: opt out of the site's checkpoint backup, or choose
//! another place within what the site allows (docs/backup.md). Only the form
//! is checked here; whether the site allows it is checked at submission
//! (`backup::config::resolve`), where the site file is known.

use serde::Serialize;
use toml::de::DeTable;

use super::keys::BACKUP_KEYS;
use super::Cx;

/// `[backup]` of a spec.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SpecBackup {
    /// `false`: no backup for this run (when the site lets a spec opt out).
    pub enabled: Option<bool>,
    /// `s3://bucket/prefix`, already checked for form.
    pub url: Option<String>,
}

pub(super) fn read_backup(cx: &mut Cx<'_>, t: &DeTable<'_>) -> Option<SpecBackup> {
    let f = cx.fields("backup", t, BACKUP_KEYS);
    let mut ok = true;
    let enabled = match f.get("enabled") {
        Some(v) => {
            let b = cx.bool_of("backup.enabled", v);
            ok &= b.is_some();
            b
        }
        None => None,
    };
    let url = match f.get("url") {
        Some(v) => match cx.str_of("backup.url", v, "a string such as \"s3://bucket/prefix\"") {
            Some(s) => match crate::names::backup_url::BackupUrl::parse(s) {
                Ok(u) => Some(u.to_string()),
                Err(message) => {
                    cx.error(
                        v.span(),
                        "backup.url",
                        format!("`url` {message}"),
                        Some("write it as url = \"s3://bucket/prefix\"".into()),
                    );
                    ok = false;
                    None
                }
            },
            None => {
                ok = false;
                None
            }
        },
        None => None,
    };
    if enabled == Some(false) && url.is_some() {
        cx.warn_at(
            "backup.url",
            "`url` is ignored: `enabled = false` turns the backup off".into(),
            Some("remove one of the two".into()),
        );
    }
    ok.then_some(SpecBackup { enabled, url })
}

impl SpecBackup {
    /// No `[backup]` table (serialisation leaves it out, so older specs hash alike).
    pub fn is_default(&self) -> bool {
        *self == SpecBackup::default()
    }
}
