//! `ProfileCounts`: instances per MIG profile, in a canonical order.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

use crate::mig::profile::normalize_profile_name;

/// Instances per profile name, e.g. `3g.20gb` ×1, `1g.5gb` ×2.
///
/// Displayed (and compared) in a canonical order: larger profiles first
/// (`3g` before `2g`, then more memory first), so `Display` output parses back
/// to an equal value.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct ProfileCounts(BTreeMap<String, u32>);

impl ProfileCounts {
    pub fn new() -> ProfileCounts {
        ProfileCounts::default()
    }

    /// Add `n` instances of `profile` (names are normalized: `MIG 1G.5GB` → `1g.5gb`).
    pub fn add(&mut self, profile: &str, n: u32) {
        if n == 0 {
            return;
        }
        *self.0.entry(normalize_profile_name(profile)).or_insert(0) += n;
    }

    /// Instances of `profile` (0 when absent).
    pub fn get(&self, profile: &str) -> u32 {
        self.0
            .get(&normalize_profile_name(profile))
            .copied()
            .unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Total instances over all profiles.
    pub fn total(&self) -> u32 {
        self.0.values().sum()
    }

    /// `(profile, count)` pairs in canonical order (largest profile first).
    pub fn iter(&self) -> impl Iterator<Item = (&str, u32)> {
        let mut items: Vec<(&str, u32)> = self.0.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        items.sort_by(|a, b| profile_order(a.0, b.0));
        items.into_iter()
    }
}

impl<S: AsRef<str>> FromIterator<(S, u32)> for ProfileCounts {
    fn from_iter<T: IntoIterator<Item = (S, u32)>>(iter: T) -> Self {
        let mut counts = ProfileCounts::new();
        for (name, n) in iter {
            counts.add(name.as_ref(), n);
        }
        counts
    }
}

impl fmt::Display for ProfileCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (name, n) in self.iter() {
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if n == 1 {
                f.write_str(name)?;
            } else {
                write!(f, "{name}*{n}")?;
            }
        }
        Ok(())
    }
}

/// `(compute slices, memory GB)` of a profile name like `3g.20gb`, for ordering.
fn profile_size_key(name: &str) -> (u32, u32) {
    let (g, rest) = name.split_once("g.").unwrap_or(("0", name));
    let gb: String = rest.chars().take_while(char::is_ascii_digit).collect();
    (g.parse().unwrap_or(0), gb.parse().unwrap_or(0))
}

/// Larger profiles first, then by name.
fn profile_order(a: &str, b: &str) -> std::cmp::Ordering {
    profile_size_key(b)
        .cmp(&profile_size_key(a))
        .then_with(|| a.cmp(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_order_puts_large_profiles_first() {
        let c: ProfileCounts = [
            ("1g.5gb", 2),
            ("7g.40gb", 1),
            ("1g.10gb", 1),
            ("3g.20gb", 1),
        ]
        .into_iter()
        .collect();
        assert_eq!(c.to_string(), "7g.40gb,3g.20gb,1g.10gb,1g.5gb*2");
    }
}
