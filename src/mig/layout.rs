//! MIG layouts: which profiles each GPU of a node should be cut into.
//!
//! A layout is a list of entries; each entry selects GPUs (all, by index, by
//! model name, or both) and says either `mig = false` or what to create. Layouts
//! come from `--layout` (`1g.5gb*7`, `3g.20gb,2g.10gb,1g.5gb*2`,
//! `3g.20gb=1,1g.5gb=2`, or a built-in word), or from named tables in the site
//! file (`[node_setup.layouts.<name>]`, schema in `docs/mig-layouts.md`). This
//! module only parses; `planner` checks a layout against a GPU's geometry.

use std::collections::BTreeMap;
use std::fmt;

use anyhow::Result;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};

use super::builtin;
use super::profile::{normalize_profile_name, GpuGeometry};
use crate::error::invalid;
use crate::suggest::{closest, did_you_mean, ticked_list};

/// The most instances one item of a layout may ask for; no GPU has more slices.
pub const MAX_COUNT: u32 = 64;

/// Built-in layout words, as accepted on the command line and in `mig = "…"`.
pub const BUILTIN_WORDS: &[&str] = &[
    "disabled",
    "all-disabled",
    "enabled",
    "all-enabled",
    "all-1g",
    "balanced",
    "all-balanced",
    "auto",
];

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

/// What one GPU should look like.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum GpuLayout {
    /// MIG mode off: the GPU is used whole.
    Disabled,
    /// MIG mode on with exactly these instances (empty = MIG on, no instances).
    Profiles(ProfileCounts),
    /// `all-1g`: as many of the smallest plain profile as fit (`1g.5gb` ×7 on an A100-40GB).
    AllSmallest,
    /// `balanced`: mig-parted's `all-balanced` (2×1g + 1×2g + 1×3g on a 7-slice GPU).
    Balanced,
    /// `auto`: chosen from the demand of pending and recent jobs.
    Auto,
}

impl fmt::Display for GpuLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GpuLayout::Disabled => f.write_str("disabled"),
            GpuLayout::Profiles(c) if c.is_empty() => f.write_str("enabled"),
            GpuLayout::Profiles(c) => c.fmt(f),
            GpuLayout::AllSmallest => f.write_str("all-1g"),
            GpuLayout::Balanced => f.write_str("balanced"),
            GpuLayout::Auto => f.write_str("auto"),
        }
    }
}

/// In JSON a GPU layout is its text form (`"3g.20gb,1g.5gb*2"`, `"disabled"`).
impl Serialize for GpuLayout {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl std::str::FromStr for GpuLayout {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> Result<GpuLayout> {
        parse_gpu_layout(s)
    }
}

/// Parse one GPU's layout: a built-in word or a profile list.
///
/// Profile lists are comma-separated items `name`, `name*N` or `name=N`; a
/// profile named twice adds up (`1g.5gb,1g.5gb` = `1g.5gb*2`). Names are
/// checked for shape only; `planner::check` checks them against a GPU.
pub fn parse_gpu_layout(text: &str) -> Result<GpuLayout> {
    parse_with(text, None)
}

/// Parse a layout for a known GPU model: every profile name must be one of
/// `geometry`'s, and a wrong one is answered with the nearest name and the
/// model's list (`1g.5g` → "did you mean `1g.5gb`? … its profiles are …").
pub fn parse_gpu_layout_for(text: &str, geometry: &GpuGeometry) -> Result<GpuLayout> {
    parse_with(text, Some(geometry))
}

fn parse_with(text: &str, gpu: Option<&GpuGeometry>) -> Result<GpuLayout> {
    let s = text.trim();
    if s.is_empty() {
        return Err(invalid(
            "empty MIG layout: give a profile list such as `1g.5gb*7` or `3g.20gb,2g.10gb,1g.5gb*2`, \
             or one of `all-1g`, `balanced`, `disabled`, `enabled`, `auto`",
        ));
    }
    match s.to_ascii_lowercase().as_str() {
        "disabled" | "all-disabled" => return Ok(GpuLayout::Disabled),
        "enabled" | "all-enabled" => return Ok(GpuLayout::Profiles(ProfileCounts::new())),
        "all-1g" => return Ok(GpuLayout::AllSmallest),
        "balanced" | "all-balanced" => return Ok(GpuLayout::Balanced),
        "auto" => return Ok(GpuLayout::Auto),
        _ => {}
    }
    let mut counts = ProfileCounts::new();
    for item in s.split(',') {
        let item = item.trim();
        if item.is_empty() {
            return Err(invalid(format!(
                "MIG layout `{s}` has an empty item: separate profiles with single commas, \
                 e.g. `3g.20gb,1g.5gb*2`"
            )));
        }
        let (name, count) = parse_item(item, s, gpu)?;
        let total = counts.get(&name) + count;
        if total > MAX_COUNT {
            return Err(invalid(format!(
                "MIG layout `{s}` asks for {total} instances of {name}; no GPU has more than {MAX_COUNT} slices"
            )));
        }
        counts.add(&name, count);
    }
    Ok(GpuLayout::Profiles(counts))
}

/// `1g.5gb*7`, `1g.5gb=7` or `1g.5gb` → (name, count).
fn parse_item(item: &str, whole: &str, gpu: Option<&GpuGeometry>) -> Result<(String, u32)> {
    let (name, count) = match item.find(['*', '=']) {
        Some(pos) => {
            let raw = item[pos + 1..].trim();
            let n: u32 = raw.parse().map_err(|_| {
                invalid(format!(
                    "MIG layout `{whole}`: count `{raw}` in `{item}` is not a whole number; \
                     write `{}*2`",
                    item[..pos].trim()
                ))
            })?;
            if n == 0 || n > MAX_COUNT {
                return Err(invalid(format!(
                    "MIG layout `{whole}`: count {n} in `{item}` must be from 1 to {MAX_COUNT} \
                     (leave a profile out instead of giving it 0)"
                )));
            }
            (item[..pos].trim(), n)
        }
        None => (item, 1),
    };
    let name = normalize_profile_name(name);
    check_profile_name(&name, whole, gpu)?;
    Ok((name, count))
}

/// True for names shaped like a GPU-instance profile: `<g>g.<mem>gb`, optionally
/// with attribute suffixes such as `+me`, `-me`, `+gfx`, `+me.all`
/// (`profile::ProfileName`, the one check).
pub fn is_profile_name(name: &str) -> bool {
    super::profile::ProfileName::parse(name).is_some()
}

fn check_profile_name(name: &str, whole: &str, gpu: Option<&GpuGeometry>) -> Result<()> {
    if let Some(g) = gpu {
        if g.profile(name).is_some() {
            return Ok(());
        }
        let names = g.profile_names();
        return Err(invalid(format!(
            "MIG layout `{whole}`: {} has no MIG profile `{name}`{}; its profiles are {}",
            g.model(),
            did_you_mean(name, names.iter().copied()),
            ticked_list(names.iter().copied())
        )));
    }
    if is_profile_name(name) {
        return Ok(());
    }
    let known = builtin::known_profile_names();
    let hint = did_you_mean(name, known.iter().map(String::as_str));
    Err(invalid(format!(
        "MIG layout `{whole}`: `{name}` is not a MIG profile name (expected <compute>g.<memory>gb, \
         such as `1g.5gb` or `3g.20gb`){hint}"
    )))
}

/// Which GPUs of a node a layout entry applies to. Empty = all GPUs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize)]
pub struct GpuSelector {
    /// NVML indices; `None` = any index.
    pub indices: Option<Vec<u32>>,
    /// Case-insensitive substring of the NVML device name (`A100-SXM4-40GB`, `H200`); `None` = any model.
    pub model: Option<String>,
}

impl GpuSelector {
    /// Every GPU.
    pub fn all() -> GpuSelector {
        GpuSelector::default()
    }

    /// True when this selector picks the GPU with `index` and NVML name `model`.
    pub fn matches(&self, index: u32, model: &str) -> bool {
        let index_ok = self.indices.as_ref().is_none_or(|ix| ix.contains(&index));
        let model_ok = self
            .model
            .as_ref()
            .is_none_or(|m| model.to_ascii_lowercase().contains(&m.to_ascii_lowercase()));
        index_ok && model_ok
    }

    /// More specific selectors win: index and model (3) > index (2) > model (1) > all (0).
    pub fn specificity(&self) -> u8 {
        2 * u8::from(self.indices.is_some()) + u8::from(self.model.is_some())
    }
}

impl fmt::Display for GpuSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.indices, &self.model) {
            (None, None) => f.write_str("all GPUs"),
            (Some(ix), model) => {
                let list: Vec<String> = ix.iter().map(u32::to_string).collect();
                let noun = if ix.len() == 1 { "GPU" } else { "GPUs" };
                write!(f, "{noun} {}", list.join(","))?;
                if let Some(m) = model {
                    write!(f, " (model ~ {m:?})")?;
                }
                Ok(())
            }
            (None, Some(m)) => write!(f, "GPUs with model ~ {m:?}"),
        }
    }
}

/// One entry of a layout: a selector and what the selected GPUs become.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LayoutEntry {
    pub selector: GpuSelector,
    pub gpu: GpuLayout,
}

/// A whole-node layout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Layout {
    /// The site-file name, the built-in word, or the canonical profile list.
    pub name: String,
    pub description: Option<String>,
    pub entries: Vec<LayoutEntry>,
}

impl Layout {
    /// A layout with one entry for every GPU.
    pub fn uniform(gpu: GpuLayout) -> Layout {
        Layout {
            name: gpu.to_string(),
            description: None,
            entries: vec![LayoutEntry {
                selector: GpuSelector::all(),
                gpu,
            }],
        }
    }

    /// What the GPU with `index` and NVML name `model` should become: the
    /// matching entry with the most specific selector. `Ok(None)` when no entry
    /// selects it (the GPU is left as it is); an error when two equally
    /// specific entries select it.
    pub fn for_gpu(&self, index: u32, model: &str) -> Result<Option<&GpuLayout>> {
        let matching: Vec<(usize, &LayoutEntry)> = self
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.selector.matches(index, model))
            .collect();
        let Some(best) = matching.iter().map(|(_, e)| e.selector.specificity()).max() else {
            return Ok(None);
        };
        let top: Vec<&(usize, &LayoutEntry)> = matching
            .iter()
            .filter(|(_, e)| e.selector.specificity() == best)
            .collect();
        if let [first, second, ..] = top.as_slice() {
            return Err(invalid(format!(
                "layout `{}`: GPU {index} ({model}) is selected by entry {} ({}) and entry {} ({}) \
                 equally; give one of them a GPU index or a narrower model filter",
                self.name,
                first.0 + 1,
                first.1.selector,
                second.0 + 1,
                second.1.selector
            )));
        }
        Ok(Some(&top[0].1.gpu))
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

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

/// Resolve a `--layout` argument: a site-file name, then a built-in word, then a
/// profile list applied to every GPU.
pub fn resolve_layout_arg(arg: &str, named: &BTreeMap<String, Layout>) -> Result<Layout> {
    let trimmed = arg.trim();
    if let Some(layout) = named.get(trimmed) {
        return Ok(layout.clone());
    }
    match parse_gpu_layout(trimmed) {
        Ok(gpu) => Ok(Layout::uniform(gpu)),
        Err(_) if looks_like_a_name(trimmed) => {
            let candidates: Vec<&str> = named
                .keys()
                .map(String::as_str)
                .chain(BUILTIN_WORDS.iter().copied())
                .collect();
            let hint = match closest(trimmed, candidates.iter().copied()) {
                Some(c) => format!(" Did you mean `{c}`?"),
                None => String::new(),
            };
            let site = if named.is_empty() {
                "the site file defines no layouts".to_string()
            } else {
                format!(
                    "the site file defines {}",
                    ticked_list(named.keys().map(String::as_str))
                )
            };
            Err(invalid(format!(
                "unknown layout `{trimmed}`: {site}; built-ins are `all-1g`, `balanced`, `disabled`, \
                 `enabled`, `auto`; or give profiles such as `1g.5gb*7`.{hint}"
            )))
        }
        Err(err) => Err(err),
    }
}

/// A word without profile punctuation reads as a layout name, not a profile list.
fn looks_like_a_name(s: &str) -> bool {
    !s.contains(['*', '=', ',', '.'])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::exit_code_for;

    fn counts(s: &str) -> ProfileCounts {
        match parse_gpu_layout(s).unwrap() {
            GpuLayout::Profiles(c) => c,
            other => panic!("{s} parsed as {other:?}"),
        }
    }

    #[test]
    fn the_three_list_forms_agree() {
        let a = counts("3g.20gb,2g.10gb,1g.5gb*2");
        let b = counts("3g.20gb=1, 2g.10gb=1, 1g.5gb=2");
        let c = counts(" 1g.5gb , 3G.20GB ,1g.5gb,2g.10gb ");
        assert_eq!(a, b);
        assert_eq!(a, c);
        assert_eq!(a.get("1g.5gb"), 2);
        assert_eq!(a.total(), 4);
        assert_eq!(a.to_string(), "3g.20gb,2g.10gb,1g.5gb*2");
        assert_eq!(counts("1g.5gb*7").to_string(), "1g.5gb*7");
    }

    #[test]
    fn built_in_words() {
        assert_eq!(parse_gpu_layout("disabled").unwrap(), GpuLayout::Disabled);
        assert_eq!(
            parse_gpu_layout("ALL-BALANCED").unwrap(),
            GpuLayout::Balanced
        );
        assert_eq!(parse_gpu_layout("all-1g").unwrap(), GpuLayout::AllSmallest);
        assert_eq!(parse_gpu_layout("auto").unwrap(), GpuLayout::Auto);
        let enabled = parse_gpu_layout("enabled").unwrap();
        assert_eq!(enabled, GpuLayout::Profiles(ProfileCounts::new()));
        assert_eq!(enabled.to_string(), "enabled");
    }

    #[test]
    fn bad_profile_names_get_a_suggestion_and_exit_2() {
        let err = parse_gpu_layout("1g.5g*7").unwrap_err();
        assert_eq!(exit_code_for(&err), 2);
        let msg = err.to_string();
        assert!(msg.contains("`1g.5g` is not a MIG profile name"), "{msg}");
        assert!(msg.contains("did you mean `1g.5gb`"), "{msg}");
    }

    #[test]
    fn parsing_for_a_known_gpu_lists_its_profiles() {
        let a100 = builtin::a100_40gb();
        let ok = parse_gpu_layout_for("3g.20gb,1g.5gb*4", &a100).unwrap();
        assert_eq!(ok.to_string(), "3g.20gb,1g.5gb*4");
        for wrong in ["1g.5g*7", "1g.18gb*7"] {
            let err = parse_gpu_layout_for(wrong, &a100).unwrap_err();
            assert_eq!(exit_code_for(&err), 2);
            let msg = err.to_string();
            assert!(
                msg.contains("NVIDIA A100-SXM4-40GB has no MIG profile"),
                "{msg}"
            );
            assert!(
                msg.contains("its profiles are `7g.40gb`, `4g.20gb`"),
                "{msg}"
            );
        }
        let msg = parse_gpu_layout_for("1g.5g*7", &a100)
            .unwrap_err()
            .to_string();
        assert!(msg.contains("did you mean `1g.5gb`?"), "{msg}");
        assert_eq!(
            parse_gpu_layout_for("balanced", &a100).unwrap(),
            GpuLayout::Balanced
        );
    }

    #[test]
    fn bad_counts_and_items_are_explained() {
        for (input, needle) in [
            ("1g.5gb*x", "is not a whole number"),
            ("1g.5gb*0", "must be from 1 to 64"),
            ("1g.5gb*65", "must be from 1 to 64"),
            ("1g.5gb*40,1g.5gb*40", "80 instances"),
            ("1g.5gb,,2g.10gb", "empty item"),
            ("", "empty MIG layout"),
            ("3g", "not a MIG profile name"),
        ] {
            let err = parse_gpu_layout(input).unwrap_err();
            assert_eq!(exit_code_for(&err), 2, "{input}");
            assert!(err.to_string().contains(needle), "{input}: {err}");
        }
    }

    #[test]
    fn profile_name_shapes() {
        for ok in [
            "1g.5gb",
            "7g.141gb",
            "1g.5gb+me",
            "1g.24gb+me.all",
            "1g.10gb-me",
            "1g.18gb+gfx",
        ] {
            assert!(is_profile_name(ok), "{ok}");
        }
        for bad in [
            "1g.5g",
            "g.5gb",
            "1g.gb",
            "1c.3g.20gb",
            "1g.5gb+",
            "1g.5gb+ME",
            "a100",
            "1g.5gb x",
        ] {
            assert!(!is_profile_name(bad), "{bad}");
        }
    }

    #[test]
    fn selectors_pick_the_most_specific_entry() {
        let layout = Layout {
            name: "mixed".into(),
            description: None,
            entries: vec![
                LayoutEntry {
                    selector: GpuSelector::all(),
                    gpu: GpuLayout::AllSmallest,
                },
                LayoutEntry {
                    selector: GpuSelector {
                        indices: None,
                        model: Some("h200".into()),
                    },
                    gpu: GpuLayout::Balanced,
                },
                LayoutEntry {
                    selector: GpuSelector {
                        indices: Some(vec![3]),
                        model: None,
                    },
                    gpu: GpuLayout::Disabled,
                },
            ],
        };
        let a100 = "NVIDIA A100-SXM4-40GB";
        let h200 = "NVIDIA H200 141GB HBM3e";
        assert_eq!(
            layout.for_gpu(0, a100).unwrap(),
            Some(&GpuLayout::AllSmallest)
        );
        assert_eq!(layout.for_gpu(1, h200).unwrap(), Some(&GpuLayout::Balanced));
        assert_eq!(layout.for_gpu(3, h200).unwrap(), Some(&GpuLayout::Disabled));
    }

    #[test]
    fn equally_specific_matches_are_an_error_and_unmatched_gpus_are_left_alone() {
        let entry = |model: &str| LayoutEntry {
            selector: GpuSelector {
                indices: None,
                model: Some(model.into()),
            },
            gpu: GpuLayout::Balanced,
        };
        let layout = Layout {
            name: "x".into(),
            description: None,
            entries: vec![entry("A100"), entry("40GB")],
        };
        let err = layout.for_gpu(0, "NVIDIA A100-SXM4-40GB").unwrap_err();
        assert_eq!(exit_code_for(&err), 2);
        assert!(err.to_string().contains("entry 1"), "{err}");
        assert_eq!(layout.for_gpu(0, "NVIDIA H200").unwrap(), None);
    }

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

    #[test]
    fn layout_arguments_resolve_in_order() {
        let named = BTreeMap::new();
        assert_eq!(
            resolve_layout_arg("balanced", &named).unwrap().entries[0].gpu,
            GpuLayout::Balanced
        );
        let l = resolve_layout_arg("1g.5gb*7", &named).unwrap();
        assert_eq!(l.name, "1g.5gb*7");
        assert_eq!(l.entries[0].selector, GpuSelector::all());
        let err = resolve_layout_arg("balancd", &named).unwrap_err();
        assert_eq!(exit_code_for(&err), 2);
        assert!(
            err.to_string().contains("Did you mean `balanced`?"),
            "{err}"
        );
        let err = resolve_layout_arg("1g.5g", &named).unwrap_err();
        assert!(err.to_string().contains("did you mean `1g.5gb`"), "{err}");
    }

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
