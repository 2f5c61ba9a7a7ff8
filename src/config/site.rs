//! The site file an administrator writes: `/etc/yolo-sched/site.toml`.

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::error::invalid;

/// Where the site file lives unless `--site` or `YOLO_SCHED_SITE` says otherwise.
pub const SITE_PATH: &str = "/etc/yolo-sched/site.toml";
/// Environment variable naming the site file.
pub const SITE_ENV: &str = "YOLO_SCHED_SITE";

/// The loaded site file. Each subsystem reads its own table from `raw` with
/// typed structs, so an unknown key is reported by the subsystem that owns it.
#[derive(Debug, Clone, Default)]
pub struct Site {
    /// The file it came from; `None` when no site file exists.
    pub path: Option<PathBuf>,
    pub raw: toml::Table,
    /// The file's text, so a section's checks can say `line:column`.
    pub text: String,
}

/// Every section a site file may have; another is a mistake (`[defualts]`).
pub const SECTIONS: &[&str] = &[
    "defaults",
    "limits",
    "pools",
    "gpu_memory",
    "resources",
    "paths",
    "audit",
    "node_setup",
    "guard",
    "backup",
    "registry",
];

/// The largest site file read.
const SITE_LIMIT: u64 = 1 << 20;

impl Site {
    /// Load the site file. An explicitly named file must exist; the default
    /// path may be absent (defaults apply).
    pub fn load(explicit: Option<&Path>) -> Result<Site> {
        // An empty `YOLO_SCHED_SITE=` means unset, as for any variable.
        let explicit = explicit.filter(|p| !p.as_os_str().is_empty());
        let (path, required) = match explicit {
            Some(p) => (p.to_path_buf(), true),
            None => (PathBuf::from(SITE_PATH), false),
        };
        if !path.exists() {
            if !required {
                return Ok(Site::default());
            }
            // A file the user named that is not there is a mistake in the input.
            return Err(invalid(format!(
                "site file {} does not exist (named by --site or YOLO_SCHED_SITE)",
                path.display()
            )));
        }
        // A FIFO, a device or a huge file is refused without blocking or reading it all.
        let text = crate::fsutil::read_regular(&path, SITE_LIMIT)
            .map_err(|e| invalid(format!("site file: {e:#}")))?;
        let raw: toml::Table = text.parse().map_err(|e: toml::de::Error| {
            let at = e
                .span()
                .map(|r| {
                    let line = text[..r.start.min(text.len())].matches('\n').count() + 1;
                    format!(":{line}")
                })
                .unwrap_or_default();
            invalid(format!("site file {}{at}: {}", path.display(), e.message()))
        })?;
        for key in raw.keys() {
            if !SECTIONS.contains(&key.as_str()) {
                return Err(invalid(format!(
                    "site file {}: unknown section [{key}]{}; the sections are {}",
                    path.display(),
                    crate::suggest::did_you_mean(key, SECTIONS.iter().copied()),
                    crate::suggest::ticked_list(SECTIONS.iter().copied())
                )));
            }
        }
        Ok(Site {
            path: Some(path),
            raw,
            text,
        })
    }

    /// `line:column` (1-based) of the value at `keys` (`["backup", "url"]`,
    /// `["guard", "limits", "max_window_s"]`); `None` when it is not there.
    pub fn position(&self, keys: &[&str]) -> Option<(usize, usize)> {
        use toml::de::{DeTable, DeValue};
        let root = DeTable::parse(&self.text).ok()?;
        let mut table: &DeTable<'_> = root.get_ref();
        let mut span = None;
        for (i, key) in keys.iter().enumerate() {
            let (_, v) = table.iter().find(|(k, _)| k.get_ref().as_ref() == *key)?;
            span = Some(v.span());
            match v.get_ref() {
                DeValue::Table(t) if i + 1 < keys.len() => table = t,
                _ if i + 1 < keys.len() => return None,
                _ => {}
            }
        }
        Some(line_column(&self.text, span?.start))
    }

    /// `site file PATH:LINE:COLUMN` of the value at `keys` (the innermost of
    /// them that is there), for messages about the site file.
    pub fn at(&self, keys: &[&str]) -> String {
        let found = (1..=keys.len())
            .rev()
            .find_map(|n| self.position(&keys[..n]));
        match found {
            Some((line, column)) => format!("site file {}:{line}:{column}", self.describe()),
            None => format!("site file {}", self.describe()),
        }
    }

    /// A section read key by key (`[backup]`, `[registry]`): its table, `None`
    /// when absent, an invalid-input error at its place when it is no table.
    pub fn table(&self, name: &str) -> Result<Option<&toml::Table>> {
        match self.raw.get(name) {
            None => Ok(None),
            Some(v) => v.as_table().map(Some).ok_or_else(|| {
                invalid(format!(
                    "{}: in [{name}]: expected a table",
                    self.at(&[name])
                ))
            }),
        }
    }

    /// The error of an unknown `key` in the section `name` read by `table`:
    /// its place, a did-you-mean among `keys`, and the keys there are.
    pub fn unknown_key(&self, name: &str, key: &str, keys: &[&str]) -> anyhow::Error {
        invalid(format!(
            "{}: in [{name}]: unknown key `{}`{}; the keys are {}",
            self.at(&[name, key]),
            crate::text::shown(key, 60),
            crate::suggest::did_you_mean(key, keys.iter().copied()),
            crate::suggest::ticked_list(keys.iter().copied())
        ))
    }

    /// A section of the site file deserialized into `T` (defaults when absent).
    pub fn section<T>(&self, name: &str) -> Result<T>
    where
        T: serde::de::DeserializeOwned + Default,
    {
        match self.raw.get(name) {
            None => Ok(T::default()),
            Some(value) => value.clone().try_into().map_err(|e: toml::de::Error| {
                // Read again from the text, for where in the file it is.
                let at = toml::Deserializer::parse(&self.text)
                    .and_then(|d| serde::de::DeserializeSeed::deserialize(Pick::<T>::new(name), d))
                    .err()
                    .and_then(|e| e.span())
                    .map(|span| {
                        let (line, column) = line_column(&self.text, span.start);
                        format!(":{line}:{column}")
                    })
                    .unwrap_or_default();
                invalid(format!(
                    "site file {}{at}: in [{name}]: {}",
                    self.describe(),
                    e.message()
                ))
            }),
        }
    }

    pub fn describe(&self) -> String {
        match &self.path {
            Some(p) => p.display().to_string(),
            None => "(none)".to_string(),
        }
    }
}

/// 1-based line and column (in characters) of byte `offset` of `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut at = offset.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    let before = &text[..at];
    let line = before.matches('\n').count() + 1;
    let column = before[before.rfind('\n').map_or(0, |i| i + 1)..]
        .chars()
        .count()
        + 1;
    (line, column)
}

/// Deserializes one section `name` of a whole site file (the others are
/// skipped), so a mistake in it comes with its position in the text.
struct Pick<'n, T> {
    name: &'n str,
    _t: std::marker::PhantomData<T>,
}

impl<'n, T> Pick<'n, T> {
    fn new(name: &'n str) -> Self {
        Pick {
            name,
            _t: std::marker::PhantomData,
        }
    }
}

impl<'de, T: serde::de::DeserializeOwned> serde::de::DeserializeSeed<'de> for Pick<'_, T> {
    type Value = Option<T>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Option<T>, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, T: serde::de::DeserializeOwned> serde::de::Visitor<'de> for Pick<'_, T> {
    type Value = Option<T>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a site file")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Option<T>, A::Error> {
        let mut out = None;
        while let Some(key) = map.next_key::<String>()? {
            if key == self.name {
                out = Some(map.next_value::<T>()?);
            } else {
                map.next_value::<serde::de::IgnoredAny>()?;
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Default, Deserialize)]
    #[serde(deny_unknown_fields, default)]
    struct Limits {
        max_array_size: Option<u64>,
    }

    #[test]
    fn missing_default_file_gives_defaults_but_explicit_must_exist() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("site.toml");
        let err = Site::load(Some(&missing)).unwrap_err();
        assert_eq!(crate::error::exit_code_for(&err), 2);
        assert!(err.to_string().contains("does not exist"), "{err}");
    }

    #[test]
    fn sections_deserialize_and_reject_unknown_keys() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("site.toml");
        std::fs::write(&p, "[limits]\nmax_array_size = 100\n").unwrap();
        let site = Site::load(Some(&p)).unwrap();
        let l: Limits = site.section("limits").unwrap();
        assert_eq!(l.max_array_size, Some(100));

        std::fs::write(&p, "[limits]\nmax_aray_size = 100\n").unwrap();
        let site = Site::load(Some(&p)).unwrap();
        let err = site.section::<Limits>("limits").unwrap_err();
        assert_eq!(crate::error::exit_code_for(&err), 2);
        assert!(err.to_string().contains("max_aray_size"), "{err}");
    }

    #[test]
    fn unknown_sections_fifos_and_binary_files_are_invalid_input() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("site.toml");
        std::fs::write(&p, "[defualts]\nbatch = 8\n").unwrap();
        let e = Site::load(Some(&p)).unwrap_err();
        assert_eq!(crate::error::exit_code_for(&e), 2);
        assert!(
            e.to_string()
                .contains("unknown section [defualts]; did you mean `defaults`?"),
            "{e}"
        );
        std::fs::write(&p, b"\x00\xff\xfe binary").unwrap();
        let e = Site::load(Some(&p)).unwrap_err();
        assert_eq!(crate::error::exit_code_for(&e), 2, "{e:#}");
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let e = Site::load(Some(&fifo)).unwrap_err();
        assert!(format!("{e:#}").contains("not a regular file"), "{e:#}");
        let e = Site::load(Some(Path::new("/dev/zero"))).unwrap_err();
        assert!(format!("{e:#}").contains("not a regular file"), "{e:#}");
        // Empty means unset: the default path (absent here) gives defaults.
        assert!(Site::load(Some(Path::new(""))).is_ok());
    }

    #[test]
    fn a_section_error_says_where_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("site.toml");
        std::fs::write(&p, "[audit]\n\n[limits]\nmax_aray_size = 100\n").unwrap();
        let site = Site::load(Some(&p)).unwrap();
        let err = site.section::<Limits>("limits").unwrap_err().to_string();
        assert!(
            err.contains(&format!("{}:4:1: in [limits]", p.display())),
            "{err}"
        );
        assert_eq!(site.position(&["limits", "max_aray_size"]), Some((4, 17)));
        assert_eq!(site.position(&["limits", "nope"]), None);
        assert_eq!(
            site.at(&["limits", "nope"]),
            format!("site file {}:3:1", p.display())
        );
    }

    #[test]
    fn broken_toml_is_invalid_input() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("site.toml");
        std::fs::write(&p, "[limits\n").unwrap();
        let err = Site::load(Some(&p)).unwrap_err();
        assert_eq!(crate::error::exit_code_for(&err), 2);
    }
}
