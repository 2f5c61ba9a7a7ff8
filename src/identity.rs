//! Who and where: the user name and host name recorded in manifests and the
//! audit log, and the short host name node-setup uses as the Slurm node name.
//! One home, so every record names the user and host the same way.

use anyhow::{Context, Result};

/// The user's login name, or the numeric uid when the passwd database has none.
pub fn current_user() -> String {
    let uid = nix::unistd::getuid();
    nix::unistd::User::from_uid(uid)
        .ok()
        .flatten()
        .map(|u| u.name)
        .unwrap_or_else(|| uid.to_string())
}

/// The host name as the kernel has it (`gpu07.cluster.example`), empty when unreadable.
pub fn host_name() -> String {
    nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The host name up to the first dot (`gpu07`): Slurm's default node name.
pub fn short_host_name() -> Result<String> {
    let host = nix::unistd::gethostname().context("reading the hostname")?;
    let host = host.to_string_lossy();
    Ok(host.split('.').next().unwrap_or_default().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_read() {
        assert!(!current_user().is_empty());
        let short = short_host_name().unwrap();
        assert!(host_name().starts_with(&short), "{short}");
        assert!(!short.contains('.'));
    }
}
