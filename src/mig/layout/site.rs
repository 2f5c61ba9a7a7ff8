//! The site file's schema: `[node_setup.layouts.<name>]` tables, checked
//! and turned into `Layout`s.

use std::collections::BTreeMap;
use std::fmt;

use anyhow::Result;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use super::counts::ProfileCounts;
use super::select::GpuLayout;
use super::select::{GpuSelector, Layout, LayoutEntry};
use super::text::{is_profile_name, parse_gpu_layout, BUILTIN_WORDS, MAX_COUNT};
use crate::error::invalid;
use crate::mig::builtin;
use crate::mig::profile::normalize_profile_name;
use crate::suggest::did_you_mean;

// ---------------------------------------------------------------- site file

/// `[node_setup.layouts.<name>]` in the site file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayoutDef {
    /// Free text shown by `node-setup --show`.
    #[serde(default)]
    pub description: Option<String>,
    /// `[[node_setup.layouts.<name>.gpus]]` entries.
    pub gpus: Vec<GpuEntryDef>,
}

/// One `[[node_setup.layouts.<name>.gpus]]` entry.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuEntryDef {
    /// `"all"` (the default), one index, or a list of indices.
    #[serde(default)]
    pub devices: DevicesDef,
    /// Substring of the NVML device name, case-insensitive.
    #[serde(default)]
    pub model: Option<String>,
    /// `false`, a layout string (`"balanced"`, `"1g.5gb*7"`), or a table of counts.
    pub mig: MigDef,
}

/// The `devices` key: `"all"` or GPU indices.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum DevicesDef {
    #[default]
    All,
    Indices(Vec<u32>),
}

/// The `mig` key as written.
#[derive(Debug, Clone, PartialEq)]
pub enum MigDef {
    Off,
    Spec(String),
    Counts(Vec<(String, i64)>),
}

impl<'de> Deserialize<'de> for DevicesDef {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = DevicesDef;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("\"all\" or a list of GPU indices such as [0, 1]")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<DevicesDef, E> {
                if v.eq_ignore_ascii_case("all") {
                    Ok(DevicesDef::All)
                } else {
                    Err(E::custom(format!(
                        "devices = {v:?}: expected \"all\" or a list of GPU indices such as [0, 1]"
                    )))
                }
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<DevicesDef, E> {
                index(v).map(|i| DevicesDef::Indices(vec![i]))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<DevicesDef, A::Error> {
                let mut out = Vec::new();
                while let Some(v) = seq.next_element::<i64>()? {
                    let i = index(v)?;
                    if !out.contains(&i) {
                        out.push(i);
                    }
                }
                if out.is_empty() {
                    return Err(de::Error::custom(
                        "devices = []: list at least one GPU index, or write devices = \"all\"",
                    ));
                }
                Ok(DevicesDef::Indices(out))
            }
        }
        fn index<E: de::Error>(v: i64) -> Result<u32, E> {
            u32::try_from(v).map_err(|_| E::custom(format!("GPU index {v} is not a valid index")))
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for MigDef {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = MigDef;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(
                    "false, a layout string such as \"balanced\" or \"1g.5gb*7\", \
                     or a table of profile counts such as { \"1g.5gb\" = 7 }",
                )
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<MigDef, E> {
                if v {
                    Err(E::custom(
                        "mig = true does not say which slices to create: write mig = { \"1g.5gb\" = 7 }, \
                         mig = \"balanced\", mig = \"all-1g\" or mig = \"enabled\" (MIG on, no slices)",
                    ))
                } else {
                    Ok(MigDef::Off)
                }
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<MigDef, E> {
                Ok(MigDef::Spec(v.to_string()))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<MigDef, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, toml::Value>()? {
                    match v.as_integer() {
                        Some(n) => out.push((k, n)),
                        None => {
                            return Err(de::Error::custom(format!(
                                "mig.\"{k}\" = {v}: a count must be a whole number, e.g. mig = {{ \"{k}\" = 2 }}"
                            )))
                        }
                    }
                }
                Ok(MigDef::Counts(out))
            }
        }
        d.deserialize_any(V)
    }
}

/// All `[node_setup.layouts.*]` tables, by name.
pub type LayoutDefs = BTreeMap<String, LayoutDef>;

/// Check the site file's layout tables and turn them into layouts.
/// `origin` names the file for messages.
pub fn named_layouts(defs: &LayoutDefs, origin: &str) -> Result<BTreeMap<String, Layout>> {
    let mut out = BTreeMap::new();
    for (name, def) in defs {
        let at = format!("{origin}: [node_setup.layouts.{name}]");
        check_layout_name(name, &at)?;
        if def.gpus.is_empty() {
            return Err(invalid(format!(
                "{at}: no [[node_setup.layouts.{name}.gpus]] entry; add one with `mig = …`"
            )));
        }
        let mut entries: Vec<LayoutEntry> = Vec::new();
        for (i, e) in def.gpus.iter().enumerate() {
            let at = format!("{at} gpus entry {}", i + 1);
            let selector = GpuSelector {
                indices: match &e.devices {
                    DevicesDef::All => None,
                    DevicesDef::Indices(ix) => Some(ix.clone()),
                },
                model: match &e.model {
                    Some(m) if m.trim().is_empty() => {
                        return Err(invalid(format!(
                            "{at}: model = \"\" matches every GPU; leave `model` out instead"
                        )))
                    }
                    Some(m) => Some(m.trim().to_string()),
                    None => None,
                },
            };
            let gpu = match &e.mig {
                MigDef::Off => GpuLayout::Disabled,
                MigDef::Spec(s) => {
                    parse_gpu_layout(s).map_err(|err| invalid(format!("{at}: {err}")))?
                }
                MigDef::Counts(items) => counts_from_table(items, &at)?,
            };
            if let Some(j) = entries.iter().position(|x| x.selector == selector) {
                return Err(invalid(format!(
                    "{at}: selects the same GPUs ({selector}) as entry {}; merge them",
                    j + 1
                )));
            }
            entries.push(LayoutEntry { selector, gpu });
        }
        out.insert(
            name.clone(),
            Layout {
                name: name.clone(),
                description: def.description.clone(),
                entries,
            },
        );
    }
    Ok(out)
}

fn counts_from_table(items: &[(String, i64)], at: &str) -> Result<GpuLayout> {
    let mut counts = ProfileCounts::new();
    for (raw, n) in items {
        let name = normalize_profile_name(raw);
        if !is_profile_name(&name) {
            let known = builtin::known_profile_names();
            let hint = did_you_mean(&name, known.iter().map(String::as_str));
            return Err(invalid(format!(
                "{at}: mig key `{raw}` is not a MIG profile name (expected <compute>g.<memory>gb, \
                 such as \"1g.5gb\"){hint}"
            )));
        }
        if *n < 1 || *n > i64::from(MAX_COUNT) {
            return Err(invalid(format!(
                "{at}: mig.\"{raw}\" = {n}: a count must be from 1 to {MAX_COUNT} (leave the profile out instead of 0)"
            )));
        }
        counts.add(&name, *n as u32);
    }
    Ok(GpuLayout::Profiles(counts))
}

fn check_layout_name(name: &str, at: &str) -> Result<()> {
    let ok_chars = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if !ok_chars {
        return Err(invalid(format!(
            "{at}: layout names may use letters, digits, `-`, `_` and `.` only"
        )));
    }
    if BUILTIN_WORDS.contains(&name.to_ascii_lowercase().as_str()) {
        return Err(invalid(format!(
            "{at}: `{name}` is a built-in layout; give yours another name"
        )));
    }
    if parse_gpu_layout(name).is_ok() {
        return Err(invalid(format!(
            "{at}: `{name}` reads as a profile list; give the layout a name that is not one"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::exit_code_for;

    use crate::mig::layout::resolve_layout_arg;

    const SITE: &str = r#"
[node_setup.layouts.training]
description = "big slices for training"

[[node_setup.layouts.training.gpus]]
model = "A100-SXM4-40GB"
mig = { "3g.20gb" = 2 }

[[node_setup.layouts.training.gpus]]
model = "H200"
mig = "3g.71gb*2"

[[node_setup.layouts.training.gpus]]
devices = [7]
mig = false

[[node_setup.layouts.training.gpus]]
mig = "balanced"
"#;

    #[derive(Deserialize)]
    struct Doc {
        node_setup: NodeSetup,
    }
    #[derive(Deserialize)]
    struct NodeSetup {
        layouts: LayoutDefs,
    }

    fn site_layouts(text: &str) -> Result<BTreeMap<String, Layout>> {
        let doc: Doc = toml::from_str(text).map_err(|e| invalid(e.to_string()))?;
        named_layouts(&doc.node_setup.layouts, "site.toml")
    }

    #[test]
    fn site_file_layouts_serve_a_mixed_node() {
        let named = site_layouts(SITE).unwrap();
        let t = &named["training"];
        assert_eq!(t.description.as_deref(), Some("big slices for training"));
        assert_eq!(t.entries.len(), 4);
        let a100 = t.for_gpu(0, "NVIDIA A100-SXM4-40GB").unwrap().unwrap();
        assert_eq!(a100.to_string(), "3g.20gb*2");
        let h200 = t.for_gpu(1, "NVIDIA H200 141GB HBM3e").unwrap().unwrap();
        assert_eq!(h200.to_string(), "3g.71gb*2");
        assert_eq!(
            t.for_gpu(7, "NVIDIA H200").unwrap(),
            Some(&GpuLayout::Disabled)
        );
        assert_eq!(
            t.for_gpu(2, "NVIDIA H100 80GB HBM3").unwrap(),
            Some(&GpuLayout::Balanced)
        );
        let resolved = resolve_layout_arg("training", &named).unwrap();
        assert_eq!(&resolved, t);
    }

    #[test]
    fn site_file_mistakes_are_named() {
        let cases = [
            ("[node_setup.layouts.x]\ngpus = [{ mig = false, modle = \"H200\" }]\n", "modle"),
            ("[node_setup.layouts.x]\ngpus = [{ mig = true }]\n", "mig = true"),
            ("[node_setup.layouts.x]\ngpus = [{ mig = { \"1g.5g\" = 7 } }]\n", "did you mean `1g.5gb`"),
            ("[node_setup.layouts.x]\ngpus = [{ mig = { \"1g.5gb\" = 0 } }]\n", "from 1 to 64"),
            ("[node_setup.layouts.x]\ngpus = [{ mig = \"1g.5gb*x\" }]\n", "gpus entry 1"),
            ("[node_setup.layouts.x]\ngpus = [{ devices = \"some\", mig = false }]\n", "devices"),
            ("[node_setup.layouts.x]\ngpus = []\n", "no [[node_setup.layouts.x.gpus]]"),
            ("[node_setup.layouts.balanced]\ngpus = [{ mig = false }]\n", "built-in layout"),
            (
                "[node_setup.layouts.x]\ngpus = [{ mig = false }, { devices = \"all\", mig = \"auto\" }]\n",
                "same GPUs",
            ),
            ("[node_setup.layouts.x]\ndescr = 1\ngpus = [{ mig = false }]\n", "descr"),
            (
                "[node_setup.layouts.x]\ngpus = [{ mig = { \"1g.5gb\" = \"7\" } }]\n",
                "a count must be a whole number",
            ),
        ];
        for (text, needle) in cases {
            let err = site_layouts(text).unwrap_err();
            assert_eq!(exit_code_for(&err), 2, "{text}");
            assert!(format!("{err:#}").contains(needle), "{text}: {err:#}");
        }
    }

    /// The way node-setup reads them: its own `[node_setup]` struct holding `layouts`.
    #[test]
    fn layouts_load_through_the_site_file() {
        #[derive(Debug, Default, Deserialize)]
        #[serde(deny_unknown_fields, default)]
        struct NodeSetupSection {
            layouts: LayoutDefs,
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("site.toml");
        std::fs::write(&path, SITE).unwrap();
        let site = crate::config::Site::load(Some(&path)).unwrap();
        let section: NodeSetupSection = site.section("node_setup").unwrap();
        let named = named_layouts(&section.layouts, &site.describe()).unwrap();
        assert_eq!(named["training"].entries.len(), 4);

        std::fs::write(&path, "[node_setup.layouts.x]\ngpus = [{ mig = true }]\n").unwrap();
        let site = crate::config::Site::load(Some(&path)).unwrap();
        let err = site.section::<NodeSetupSection>("node_setup").unwrap_err();
        assert_eq!(exit_code_for(&err), 2);
        assert!(
            err.to_string()
                .contains("mig = true does not say which slices"),
            "{err}"
        );
    }
}
