//! The text syntax of a layout (`--layout`, `mig = "…"`): `1g.5gb*7`,
//! `3g.20gb,2g.10gb,1g.5gb*2`, `3g.20gb=1,1g.5gb=2` or a built-in word, and
//! how a `--layout` argument resolves against the site file's names.

use std::collections::BTreeMap;

use anyhow::Result;

use super::counts::ProfileCounts;
use super::select::{GpuLayout, Layout};
use crate::error::invalid;
use crate::mig::builtin;
use crate::mig::profile::{normalize_profile_name, GpuGeometry};
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
    // Messages echo the layout cut and escaped: a 10,000-profile list is not
    // printed back whole.
    let shown = crate::text::echo(s);
    for item in s.split(',') {
        let item = item.trim();
        if item.is_empty() {
            return Err(invalid(format!(
                "MIG layout `{shown}` has an empty item: separate profiles with single commas, \
                 e.g. `3g.20gb,1g.5gb*2`"
            )));
        }
        let (name, count) = parse_item(item, &shown, gpu)?;
        let total = counts.get(&name) + count;
        if total > MAX_COUNT {
            return Err(invalid(format!(
                "MIG layout `{shown}` asks for {total} instances of {name}; no GPU has more than {MAX_COUNT} slices"
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
                    "MIG layout `{whole}`: count `{}` in `{}` is not a whole number; \
                     write `{}*2`",
                    crate::text::echo(raw),
                    crate::text::echo(item),
                    crate::text::echo(item[..pos].trim())
                ))
            })?;
            if n == 0 || n > MAX_COUNT {
                return Err(invalid(format!(
                    "MIG layout `{whole}`: count {n} in `{}` must be from 1 to {MAX_COUNT} \
                     (leave a profile out instead of giving it 0)",
                    crate::text::echo(item)
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
    crate::mig::profile::ProfileName::parse(name).is_some()
}

fn check_profile_name(name: &str, whole: &str, gpu: Option<&GpuGeometry>) -> Result<()> {
    if let Some(g) = gpu {
        if g.profile(name).is_some() {
            return Ok(());
        }
        let names = g.profile_names();
        return Err(invalid(format!(
            "MIG layout `{whole}`: {} has no MIG profile `{}`{}; its profiles are {}",
            g.model(),
            crate::text::echo(name),
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
        "MIG layout `{whole}`: `{}` is not a MIG profile name (expected <compute>g.<memory>gb, \
         such as `1g.5gb` or `3g.20gb`){hint}",
        crate::text::echo(name)
    )))
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
                "unknown layout `{}`: {site}; built-ins are `all-1g`, `balanced`, `disabled`, \
                 `enabled`, `auto`; or give profiles such as `1g.5gb*7`.{hint}",
                crate::text::echo(trimmed)
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
    use crate::mig::layout::GpuSelector;

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
}
