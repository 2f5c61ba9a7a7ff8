//! The guard policy a spec gets under the site, checked at submission and by `validate`.

use super::{GuardPolicy, GuardSite};

/// The effective guard policy of a spec under the site, or invalid input
/// naming each spec key past the site's limits (with its line). Submission and
/// `validate` call this, so a spec the agent would refuse is never submitted.
pub fn check_spec(
    site: &crate::config::Site,
    spec: &crate::spec::Spec,
) -> anyhow::Result<GuardPolicy> {
    let section = GuardSite::from_site(site)?;
    GuardPolicy::resolve(&section, &spec.guard).map_err(|errors| {
        let lines: Vec<String> = errors
            .iter()
            .map(|e| {
                let at = spec
                    .origin
                    .locations
                    .get(&e.key)
                    .map(|l| format!("{}:{}:{}", spec.origin.file, l.line, l.column))
                    .unwrap_or_else(|| spec.origin.file.clone());
                format!("{at}: {}: {}\n  hint: {}", e.key, e.message, e.help)
            })
            .collect();
        crate::error::invalid(format!(
            "the spec's [guard] goes past the site's limits (site file {}, [guard.limits]):\n{}",
            site.describe(),
            lines.join("\n")
        ))
    })
}
