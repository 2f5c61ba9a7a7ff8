//! Slurm versions and the known problems of old ones.

use std::fmt;

/// A Slurm release such as 22.05.8.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
    pub micro: u32,
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:02}.{}", self.major, self.minor, self.micro)
    }
}

/// The first release with every MIG fix we know of (see `docs/admin-guide.md`).
pub const MIG_SAFE: Version = Version {
    major: 23,
    minor: 11,
    micro: 4,
};

/// What `sinfo --version` prints (`slurm 22.05.8`), for [`parse`].
pub fn client(slurm: &super::Slurm) -> anyhow::Result<String> {
    slurm.stdout("sinfo", &["--version"])
}

/// Parse the output of `sinfo --version`: `slurm-wlm 22.05.8`, `slurm 23.11.4`,
/// `slurm 24.05.0-0rc1`.
pub fn parse(output: &str) -> Option<Version> {
    let word = output
        .split_whitespace()
        .find(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit()))?;
    let mut it = word.split(['.', '-']);
    let major = it.next()?.parse().ok()?;
    let minor = it.next()?.parse().ok()?;
    let micro = it
        .next()
        .map(|m| {
            m.chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
        })
        .and_then(|m| m.parse().ok())
        .unwrap_or(0);
    Some(Version {
        major,
        minor,
        micro,
    })
}

/// Problems with MIG in releases older than 23.11.4, from Slurm's changelogs.
pub fn mig_warnings(v: Version) -> Vec<&'static str> {
    let mut w = Vec::new();
    let at = |major, minor, micro| Version {
        major,
        minor,
        micro,
    };
    if v < at(22, 5, 6) {
        w.push("before 22.05.6, MIG minor numbers are wrong when a device minor differs from its index");
    }
    if v < at(23, 2, 6) {
        w.push("before 23.02.6, MIG profile names may not match NVIDIA's names");
    }
    if v < at(23, 2, 7) {
        w.push("before 23.02.7, the wrong MIG devices can be constrained to a job");
    }
    if v < MIG_SAFE {
        w.push("before 23.11.4, --gpus-per-task shows the same MIG device to every task");
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_debian_and_upstream_forms() {
        assert_eq!(
            parse("slurm-wlm 22.05.8\n"),
            Some(Version {
                major: 22,
                minor: 5,
                micro: 8
            })
        );
        assert_eq!(
            parse("slurm 23.11.4"),
            Some(Version {
                major: 23,
                minor: 11,
                micro: 4
            })
        );
        assert_eq!(
            parse("slurm 24.05.0-0rc1"),
            Some(Version {
                major: 24,
                minor: 5,
                micro: 0
            })
        );
        assert_eq!(parse("garbage"), None);
    }

    #[test]
    fn old_releases_get_mig_warnings() {
        let v = parse("slurm-wlm 22.05.8").unwrap();
        assert_eq!(v.to_string(), "22.05.8");
        assert_eq!(mig_warnings(v).len(), 3);
        assert!(mig_warnings(MIG_SAFE).is_empty());
        assert!(v < MIG_SAFE);
    }
}
