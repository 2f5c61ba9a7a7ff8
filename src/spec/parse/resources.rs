//! `[resources]` and the Slurm resources of a stage: GPU, time, CPUs, memory, `on_oom`.

use std::collections::BTreeMap;

use toml::de::{DeTable, DeValue};

use super::cx::{join, Cx, Val};
use super::keys::{MAX_OOM_STEPS, RESOURCE_KEYS};
use super::tables::slurm_name;
use crate::spec::types::*;
use crate::spec::values;

pub(super) fn read_resources(cx: &mut Cx<'_>, t: &DeTable<'_>) -> Option<Resources> {
    let f = cx.fields("resources", t, RESOURCE_KEYS);
    let gpu = match f.get("gpu") {
        Some(v) => read_gpu_count(cx, v),
        None => Some((GpuRequest::Auto, 1)),
    };
    let gpus = read_gpus(cx, &f, gpu.as_ref());
    let time = opt_time(cx, &f, "resources");
    let cpus = opt_cpus(cx, &f, "resources");
    let mem = opt_mem(cx, &f, "resources");
    let on_oom = read_on_oom(cx, &f);
    let (gpu, written) = gpu?;
    Some(Resources {
        gpu,
        gpus: gpus?.or((written > 1).then_some(written)),
        time: time.ok()?,
        cpus: cpus.ok()?,
        mem: mem.ok()?,
        on_oom: on_oom?,
    })
}

/// `on_oom = "stop" | "resume-bigger"` and `on_oom_steps = 1..=4` (default 2).
fn read_on_oom(cx: &mut Cx<'_>, f: &BTreeMap<String, &Val<'_>>) -> Option<OnOom> {
    let policy = read_oom_policy(cx, f);
    let steps = read_oom_steps(cx, f, policy);
    Some(match policy? {
        "stop" => OnOom::Stop,
        _ => OnOom::ResumeBigger { steps: steps? },
    })
}

fn read_oom_policy(cx: &mut Cx<'_>, f: &BTreeMap<String, &Val<'_>>) -> Option<&'static str> {
    match f.get("on_oom") {
        None => Some("stop"),
        Some(v) => {
            let s = cx.str_of("resources.on_oom", v, "\"stop\" or \"resume-bigger\"")?;
            match s {
                "stop" => Some("stop"),
                "resume-bigger" => Some("resume-bigger"),
                other => {
                    cx.error(
                        v.span(),
                        "resources.on_oom",
                        format!(
                            "{:?} is not a policy; expected \"stop\" or \"resume-bigger\"",
                            crate::text::clip(other)
                        ),
                        Some(format!(
                            "on_oom = \"resume-bigger\" resumes on the next larger slice{}",
                            crate::suggest::did_you_mean(other, ["stop", "resume-bigger"])
                        )),
                    );
                    None
                }
            }
        }
    }
}

fn read_oom_steps(
    cx: &mut Cx<'_>,
    f: &BTreeMap<String, &Val<'_>>,
    policy: Option<&str>,
) -> Option<u32> {
    match f.get("on_oom_steps") {
        None => Some(2),
        Some(v) => {
            let n = cx.int_of("resources.on_oom_steps", v, "a number of steps from 1 to 4")?;
            if !(1..=MAX_OOM_STEPS).contains(&n) {
                cx.error(
                    v.span(),
                    "resources.on_oom_steps",
                    format!("{n} is out of range; expected 1 to {MAX_OOM_STEPS} moves to a bigger slice"),
                    None,
                );
                return None;
            }
            if policy == Some("stop") {
                cx.warn_at(
                    "resources.on_oom_steps",
                    "has no effect unless on_oom = \"resume-bigger\"".into(),
                    None,
                );
            }
            Some(n as u32)
        }
    }
}

/// `[resources] gpu`, with the count of whole GPUs it may carry (`"h100:4"`).
fn read_gpu_count(cx: &mut Cx<'_>, v: &Val<'_>) -> Option<(GpuRequest, u32)> {
    let path = "resources.gpu";
    let s = match v.get_ref() {
        DeValue::String(s) => s.as_ref(),
        _ => {
            cx.wrong_type(
                path,
                v,
                "a string: \"auto\", a MIG profile (\"1g.5gb\"), a GPU type (\"a100\", or \"h100:4\" for four of one node), \"shard:N\" or \"none\"",
                Some("write gpu = \"auto\" to let yolo-sched pick the smallest slice that fits".into()),
            );
            return None;
        }
    };
    match values::parse_gpu_count(s) {
        Ok(g) => Some(g),
        Err(p) => {
            cx.problem(v.span(), path, p);
            None
        }
    }
}

/// `[resources] gpus = N`: whole GPUs of one node. Only with `gpu = "auto"`
/// (the planner picks the type) or a GPU type without a count of its own.
/// `Some(None)` when not written; `None` after an error.
fn read_gpus(
    cx: &mut Cx<'_>,
    f: &BTreeMap<String, &Val<'_>>,
    gpu: Option<&(GpuRequest, u32)>,
) -> Option<Option<u32>> {
    let Some(v) = f.get("gpus") else {
        return Some(None);
    };
    let path = "resources.gpus";
    let n = cx.int_of(
        path,
        v,
        "a number of whole GPUs of one node (an integer ≥ 1)",
    )?;
    let max = i64::from(values::MAX_GPUS);
    if !(1..=max).contains(&n) {
        cx.error(
            v.span(),
            path,
            format!("{n} is out of range; expected 1 to {max} GPUs of one node"),
            Some(
                "Ultralytics trains on the GPUs of one node; ask for at most as many as a node has"
                    .into(),
            ),
        );
        return None;
    }
    let n = n as u32;
    let refuse = |cx: &mut Cx<'_>, why: String, help: String| {
        cx.error(v.span(), path, why, Some(help));
    };
    match gpu {
        Some((GpuRequest::Mig(t), _)) if n > 1 => {
            refuse(
                cx,
                format!("{n} GPUs on the MIG slice {t:?}: one CUDA process sees only one MIG device, so training could use only one of them"),
                "ask for whole GPUs (gpu = \"auto\" or a GPU type such as \"a100\"), or one larger slice without `gpus`".into(),
            );
            None
        }
        Some((GpuRequest::Shard(_), _)) if n > 1 => {
            refuse(
                cx,
                format!("{n} GPUs with shards: shards are pieces of one GPU, not several GPUs"),
                "ask for whole GPUs (gpu = \"auto\" or a GPU type such as \"a100\")".into(),
            );
            None
        }
        Some((GpuRequest::None, _)) => {
            refuse(
                cx,
                format!("{n} GPU(s), but gpu = \"none\" trains on the CPU"),
                "remove `gpus`, or set gpu = \"auto\"".into(),
            );
            None
        }
        Some((GpuRequest::Type(t), c)) if *c > 1 && *c != n => {
            refuse(
                cx,
                format!("{n} GPUs, but `gpu` already asks for {c} ({t}:{c})"),
                format!("write the count once: gpu = \"{t}:{n}\" without `gpus`, or gpu = \"{t}\" with gpus = {n}"),
            );
            None
        }
        _ => Some(Some(n)),
    }
}

pub(super) fn read_gpu(cx: &mut Cx<'_>, path: &str, v: &Val<'_>) -> Option<GpuRequest> {
    let s = match v.get_ref() {
        DeValue::String(s) => s.as_ref(),
        _ => {
            cx.wrong_type(
                path,
                v,
                "a string: \"auto\", a MIG profile (\"1g.5gb\"), a GPU type (\"a100\"), \"shard:N\" or \"none\"",
                Some("write gpu = \"auto\" to let yolo-sched pick the smallest slice that fits".into()),
            );
            return None;
        }
    };
    match values::parse_gpu(s) {
        Ok(g) => Some(g),
        Err(p) => {
            cx.problem(v.span(), path, p);
            None
        }
    }
}

fn opt_time(
    cx: &mut Cx<'_>,
    f: &BTreeMap<String, &Val<'_>>,
    table: &str,
) -> Result<Option<SlurmTime>, ()> {
    let Some(v) = f.get("time") else {
        return Ok(None);
    };
    let path = join(table, "time");
    let help = match v.get_ref() {
        DeValue::Integer(i) => Some(format!(
            "Slurm reads a bare number as minutes: write \"{}\" for {} minutes, or \"HH:MM:SS\"",
            i.as_str(),
            i.as_str()
        )),
        _ => None,
    };
    let s = match v.get_ref() {
        DeValue::String(s) => s.as_ref(),
        _ => {
            cx.wrong_type(&path, v, "a Slurm time string such as \"08:00:00\"", help);
            return Err(());
        }
    };
    match values::parse_slurm_time(s) {
        Ok(t) => Ok(Some(t)),
        Err(p) => {
            cx.problem(v.span(), &path, p);
            Err(())
        }
    }
}

fn opt_mem(
    cx: &mut Cx<'_>,
    f: &BTreeMap<String, &Val<'_>>,
    table: &str,
) -> Result<Option<MemSize>, ()> {
    let Some(v) = f.get("mem") else {
        return Ok(None);
    };
    let path = join(table, "mem");
    let s = match v.get_ref() {
        DeValue::String(s) => s.as_ref(),
        DeValue::Integer(i) => {
            let help = Some(format!(
                "write \"{}M\" (megabytes) or a size in G, e.g. \"32G\"",
                i.as_str()
            ));
            cx.wrong_type(&path, v, "a Slurm memory size string such as \"32G\"", help);
            return Err(());
        }
        _ => {
            cx.wrong_type(&path, v, "a Slurm memory size string such as \"32G\"", None);
            return Err(());
        }
    };
    match values::parse_mem(s) {
        Ok(m) => Ok(Some(m)),
        Err(p) => {
            cx.problem(v.span(), &path, p);
            Err(())
        }
    }
}

/// Most CPUs one task may ask for; more is certainly a typo.
const MAX_CPUS: i64 = 4096;

fn opt_cpus(
    cx: &mut Cx<'_>,
    f: &BTreeMap<String, &Val<'_>>,
    table: &str,
) -> Result<Option<u32>, ()> {
    let Some(v) = f.get("cpus") else {
        return Ok(None);
    };
    let path = join(table, "cpus");
    let n = cx
        .int_of(&path, v, "a number of CPUs (an integer ≥ 1)")
        .ok_or(())?;
    if !(1..=MAX_CPUS).contains(&n) {
        cx.error(
            v.span(),
            &path,
            format!("{n} is out of range; expected a number of CPUs from 1 to {MAX_CPUS}"),
            None,
        );
        return Err(());
    }
    Ok(Some(n as u32))
}

pub(super) fn stage_resources(
    cx: &mut Cx<'_>,
    f: &BTreeMap<String, &Val<'_>>,
    table: &str,
) -> Option<StageResources> {
    let partition = slurm_name(cx, f, table, "partition", true);
    let time = opt_time(cx, f, table);
    let cpus = opt_cpus(cx, f, table);
    let mem = opt_mem(cx, f, table);
    Some(StageResources {
        partition: partition.ok()?,
        time: time.ok()?,
        cpus: cpus.ok()?,
        mem: mem.ok()?,
    })
}
