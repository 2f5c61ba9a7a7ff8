//! `[sweep]`: the axes of a job array, in the file's order, and `max_parallel`.

use std::ops::Range;

use toml::de::{DeTable, DeValue};
use toml::Spanned;

use super::cx::{Cx, Val};
use super::keys::MAX_VARIANTS;
use super::tables::ok_arg_name;
use crate::spec::args;
use crate::spec::types::*;
use crate::spec::ultralytics;
use crate::suggest;

pub(super) fn read_sweep(cx: &mut Cx<'_>, t: &DeTable<'_>, header: Range<usize>) -> Option<Sweep> {
    let mut entries: Vec<(&Spanned<std::borrow::Cow<'_, str>>, &Val<'_>)> = t.iter().collect();
    // The table is stored sorted by key; the axes follow the file's order.
    entries.sort_by_key(|(k, _)| k.span().start);
    let mut sweep = Sweep::default();
    let mut ok = true;
    for (k, v) in entries {
        let key = k.get_ref().as_ref();
        let path = format!("sweep.{key}");
        cx.locations.insert(path.clone(), cx.at(&v.span()));
        if key == "max_parallel" {
            match cx.int_of(&path, v, "a number of array tasks (an integer ≥ 1)") {
                Some(n) if (1..=i64::from(u32::MAX)).contains(&n) => {
                    sweep.max_parallel = Some(n as u32)
                }
                Some(n) => {
                    cx.error(
                        v.span(),
                        &path,
                        format!("{n} is out of range; expected an integer ≥ 1"),
                        None,
                    );
                    ok = false;
                }
                None => ok = false,
            }
            continue;
        }
        if !ok_arg_name(key)
            || (ultralytics::find(key).is_none()
                && args::controlled_reason(StageKind::Train, key).is_none())
        {
            let mut p = args::unknown_arg(key, StageKind::Train);
            if p.help.is_none() && suggest::distance(key, "max_parallel") <= 3 {
                p = p.help("did you mean `max_parallel`?");
            }
            cx.problem(k.span(), &path, p);
            ok = false;
            continue;
        }
        if let Some(reason) = args::controlled_reason(StageKind::Train, key) {
            cx.error(
                k.span(),
                &path,
                format!("`{key}` is set by yolo-sched and cannot be swept: {reason}"),
                None,
            );
            ok = false;
            continue;
        }
        if key == "data" {
            cx.error(
                k.span(),
                &path,
                "the dataset cannot be swept: the prepare stage checks (and caches) one dataset per run".into(),
                Some("submit one run per dataset, e.g. one spec each".into()),
            );
            ok = false;
            continue;
        }
        let items = match v.get_ref() {
            DeValue::Array(a) => a,
            DeValue::Table(_) => {
                cx.wrong_type(&path, v, "a list of values to try", None);
                ok = false;
                continue;
            }
            _ => {
                let help = Some(format!(
                    "write {key} = [{}] (a list of the values to try)",
                    cx.snippet(&v.span())
                ));
                cx.wrong_type(&path, v, "a list of values to try", help);
                ok = false;
                continue;
            }
        };
        if items.is_empty() {
            cx.error(
                v.span(),
                &path,
                "is an empty list, which makes zero variants; expected at least one value".into(),
                Some(format!(
                    "list the values of `{key}` to try, or remove the line"
                )),
            );
            ok = false;
            continue;
        }
        match axis_values(cx, key, &path, items) {
            Some(values) => sweep.axes.push(SweepAxis {
                key: key.to_string(),
                values,
            }),
            None => ok = false,
        }
    }
    if sweep.axes.is_empty() && ok && sweep.max_parallel.is_some() {
        cx.warn(
            header.clone(),
            "sweep",
            "[sweep] has `max_parallel` but no argument to sweep: one variant".into(),
            None,
        );
    }
    let n = sweep.variant_count();
    if ok && n > MAX_VARIANTS {
        cx.error(
            header,
            "sweep",
            format!(
                "the sweep makes {n} variants; no Slurm cluster runs an array that large (MaxArraySize is at most {MAX_VARIANTS})"
            ),
            Some("sweep fewer values, or split the sweep into several runs".into()),
        );
        ok = false;
    }
    ok.then_some(sweep)
}

/// One axis's values: each a valid value of the argument, none twice;
/// `None` (with the problems reported) when one is not.
fn axis_values(cx: &mut Cx<'_>, key: &str, path: &str, items: &[Val<'_>]) -> Option<Vec<ArgValue>> {
    let mut values: Vec<ArgValue> = Vec::with_capacity(items.len());
    // Duplicates by their written form, in a set: a list of 256,000
    // values must not cost 256,000² comparisons.
    let mut seen = std::collections::HashSet::with_capacity(items.len());
    let mut axis_ok = true;
    for (i, item) in items.iter().enumerate() {
        let item_path = format!("{path}[{i}]");
        let value = match args::to_arg_value(item.get_ref()) {
            Ok(a) => a,
            Err(p) => {
                cx.problem(item.span(), &item_path, p);
                axis_ok = false;
                continue;
            }
        };
        if let Err(p) = args::check_arg(StageKind::Train, key, &value, true) {
            cx.problem(item.span(), &item_path, p);
            axis_ok = false;
            continue;
        }
        if !seen.insert(value.to_string()) {
            cx.error(
                item.span(),
                &item_path,
                format!("{value} is listed twice; each variant would run twice"),
                Some("remove the duplicate".into()),
            );
            axis_ok = false;
            continue;
        }
        values.push(value);
    }
    axis_ok.then_some(values)
}
