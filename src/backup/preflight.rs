//! The store checked before a run is submitted: credentials present, a probe
//! object written, read back and deleted.

use anyhow::Result;

use super::{config, RunBackup, SiteBackup};
use crate::config::Site;
use crate::error::{invalid, with_hint};
use crate::names::backup_url::BackupUrl;
use crate::objstore::store;
use crate::objstore::{Credentials, Store};
use crate::spec::Spec;

/// The run's backup settings from the site and the spec, with the store
/// checked when `probe` (submission, not `--dry-run`): credentials present,
/// and a small object written, read back and deleted under the run's prefix.
/// Refused credentials or no credentials are invalid input (exit 2); a store
/// that cannot be reached is a runtime failure (exit 1). Nothing is
/// submitted in either case.
pub fn preflight(site: &Site, spec: &Spec, run_id: &str, probe: bool) -> Result<Option<RunBackup>> {
    let site_backup = SiteBackup::from_site(site)?;
    let Some(run) = config::resolve(&site_backup, spec, run_id)? else {
        return Ok(None);
    };
    if probe {
        check_store(&run.url, &Credentials::from_process())?;
    }
    Ok(Some(run))
}

/// The site's `[backup]` and the spec's within it, checked as submission
/// checks them but without the store: every key and URL of the site's
/// table, the spec's URL within the site's `url`/`allowed_urls`, an opt-out
/// the site forbids. `validate` runs it, and `submit` before it asks Slurm.
pub fn check(site: &Site, spec: &Spec) -> Result<()> {
    let site_backup = SiteBackup::from_site(site)?;
    // Any plain run id: the place is checked, not decided.
    config::resolve(&site_backup, spec, "validate").map(|_| ())
}

/// Write, read back and delete a probe object under `url`.
pub fn check_store(url: &BackupUrl, creds: &Credentials) -> Result<()> {
    let hint = "set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (or AWS_PROFILE), AWS_ENDPOINT_URL and AWS_REGION for the store, or turn the backup off with `[backup] enabled = false` in the spec (docs/backup.md)";
    let store = Store::s3(url, creds)
        .map_err(|e| with_hint(invalid(format!("checkpoint backup to {url}: {e:#}")), hint))?;
    let key = url.key(".yolo-sched-preflight");
    let body = b"yolo-sched preflight\n".to_vec();
    let outcome = store
        .put_bytes(&key, body.clone())
        .and_then(|()| store.get_bytes(&key, 1024))
        .and_then(|got| {
            if got.as_deref() == Some(body.as_slice()) {
                Ok(())
            } else {
                Err(anyhow::anyhow!(
                    "{} returned other bytes than were written",
                    store.name
                ))
            }
        });
    let _ = store.delete(&key);
    outcome.map_err(|e| {
        let refused = e.downcast_ref::<store::Refused>().is_some();
        let message = format!("checkpoint backup to {url}: the store check failed: {e:#}");
        if refused {
            with_hint(invalid(message), hint)
        } else {
            with_hint(anyhow::anyhow!(message), hint)
        }
    })
}
