//! Which NVML devices are the job's own (pure): the decision the agent makes
//! before it reads anything, from what Slurm gives the job and what the node's
//! gres.conf says. The effects are at the edges: the CLI reads the environment,
//! gres.conf and `mig-minors` (through `fsutil`), `run` opens the devices
//! through `nvml::memory`.
//!
//! Why it is not just `CUDA_VISIBLE_DEVICES`: with `ConstrainDevices` Slurm
//! renumbers it from 0 inside the job (a slice at GRES index 6 sees `0`), and
//! with a hand-written gres.conf (a Slurm without the NVML plugin) a MIG slice
//! is a plain GRES index, not a `MIG-<uuid>`. `SLURM_STEP_GPUS` and
//! `SLURM_JOB_GPUS` keep the node's GRES indices: the position of the unit
//! among the node's `Name=gpu` units in gres.conf order, counted across types
//! (measured: `shared/reference/slurm-on-one-host.md` §4). The gres.conf line
//! of that unit names its device files: `/dev/nvidia<minor>` for a whole GPU
//! (or the GPU of a shard), and for a MIG slice also the GPU- and
//! compute-instance access capabilities `/dev/nvidia-caps/nvidia-cap<N>`,
//! whose minors `mig-minors` turns into the instance ids. docs/agent.md
//! §"Which devices are the job's" has the rules as a table.

use anyhow::Result;

use crate::gres::{GresConf, MigMinors};
use crate::nvml::memory::{parse_visible_devices, DeviceId};

/// An NVML device the agent opens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// By UUID or NVML index, as named.
    Id(DeviceId),
    /// The whole GPU whose device file is `/dev/nvidia<minor>`.
    Gpu { minor: u32 },
    /// The MIG device of GPU instance `gi`, compute instance `ci` on the GPU
    /// `/dev/nvidia<minor>`.
    Mig { minor: u32, gi: u32, ci: u32 },
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Id(id) => write!(f, "{id}"),
            Target::Gpu { minor } => write!(f, "/dev/nvidia{minor}"),
            Target::Mig { minor, gi, ci } => {
                write!(
                    f,
                    "/dev/nvidia{minor} GPU instance {gi} compute instance {ci}"
                )
            }
        }
    }
}

/// One `Name=gpu` unit of the node's gres.conf, in GRES index order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GresUnit {
    /// The gres.conf line it comes from.
    pub line: usize,
    /// Its device, or why its line names none this agent can use.
    pub target: Result<Target, String>,
}

/// A device file's kind by its name (the directory may be a test's sysroot).
enum DevFile {
    Gpu(u32),
    Cap(u32),
    Other,
}

fn dev_file(path: &str) -> DevFile {
    let name = path.rsplit('/').next().unwrap_or(path);
    let number = |rest: &str| {
        (!rest.is_empty() && rest.chars().all(|c| c.is_ascii_digit()))
            .then(|| rest.parse().ok())
            .flatten()
    };
    if let Some(n) = name.strip_prefix("nvidia-cap").and_then(number) {
        DevFile::Cap(n)
    } else if let Some(n) = name.strip_prefix("nvidia").and_then(number) {
        DevFile::Gpu(n)
    } else {
        DevFile::Other
    }
}

/// The `Name=gpu` units gres.conf gives `node`, in GRES index order: one per
/// `File=` path, one per `MultipleFiles=` line, `Count=` units for a line
/// without files. `minors` (`mig-minors`) turns capability files into MIG
/// instance ids; `None` when it could not be read. `Err` when the order of the
/// units is not the file's: the node autodetects through NVML.
pub fn gres_units(
    conf: &GresConf,
    node: &str,
    minors: Option<&MigMinors>,
) -> Result<Vec<GresUnit>, String> {
    // A node's own AutoDetect overrides a global one (gres.conf(5)).
    let auto_detect = |node_lines: bool| {
        conf.for_node(node)
            .filter(|l| l.node_names.is_some() == node_lines)
            .filter_map(|l| l.auto_detect.as_deref().map(|a| (l.line, a)))
            .last()
    };
    if let Some((line, a)) = auto_detect(true).or_else(|| auto_detect(false)) {
        if !a.eq_ignore_ascii_case("off") {
            return Err(format!(
                "gres.conf line {line} sets AutoDetect={a}: Slurm orders such GPUs itself"
            ));
        }
    }
    let mut units = Vec::new();
    for l in conf.for_node(node) {
        if !l
            .name
            .as_deref()
            .is_some_and(|n| n.eq_ignore_ascii_case("gpu"))
        {
            continue;
        }
        let unit = |target| GresUnit {
            line: l.line,
            target,
        };
        if l.files.is_empty() {
            for _ in 0..l.units() {
                units.push(unit(Err(format!(
                    "gres.conf line {} names no device file",
                    l.line
                ))));
            }
        } else if l.multiple_files {
            units.push(unit(one_device(&l.files, l.line, minors)));
        } else {
            for f in &l.files {
                units.push(unit(one_device(std::slice::from_ref(f), l.line, minors)));
            }
        }
    }
    Ok(units)
}

/// The device the files of one GRES unit stand for: a GPU file alone is the
/// whole GPU; with a compute instance's access capability, that MIG device.
fn one_device(files: &[String], line: usize, minors: Option<&MigMinors>) -> Result<Target, String> {
    let mut gpu = None;
    let mut caps = Vec::new();
    for f in files {
        match dev_file(f) {
            DevFile::Gpu(m) => gpu = Some(m),
            DevFile::Cap(c) => caps.push(c),
            DevFile::Other => {}
        }
    }
    let Some(minor) = gpu else {
        return Err(format!(
            "gres.conf line {line} names no /dev/nvidia<N> ({})",
            files.join(",")
        ));
    };
    if caps.is_empty() {
        return Ok(Target::Gpu { minor });
    }
    let Some(minors) = minors else {
        return Err(format!(
            "gres.conf line {line} names MIG capabilities, and mig-minors could not be read"
        ));
    };
    let instance = caps.iter().find_map(|&c| match minors.capability(c) {
        Some((g, gi, Some(ci))) if g == minor => Some((gi, ci)),
        _ => None,
    });
    match instance {
        Some((gi, ci)) => Ok(Target::Mig { minor, gi, ci }),
        None => Err(format!(
            "gres.conf line {line}: no compute instance of /dev/nvidia{minor} in mig-minors has capability {}",
            caps.iter()
                .map(|c| format!("nvidia-cap{c}"))
                .collect::<Vec<_>>()
                .join(" or ")
        )),
    }
}

/// What the job was given, as the agent found it.
#[derive(Debug, Clone)]
pub struct JobGres<'a> {
    /// `CUDA_VISIBLE_DEVICES`, or `--devices`.
    pub visible: &'a str,
    /// `visible` came from `--devices`: NVML's own names (UUIDs, or host
    /// NVML indices), used as given.
    pub explicit: bool,
    /// `("SLURM_STEP_GPUS", value)` or `("SLURM_JOB_GPUS", value)`: the
    /// node's GRES indices; `None` outside a Slurm job.
    pub gres_indices: Option<(&'static str, &'a str)>,
    /// The node's `Name=gpu` units (`gres_units`), or why there are none.
    pub units: Result<&'a [GresUnit], String>,
}

/// The job's devices, or why they cannot be known.
#[derive(Debug, Clone, PartialEq)]
pub enum Mapping {
    /// Open these; `how` says how they were found (for the log).
    Known { targets: Vec<Target>, how: String },
    /// The guard reads nothing and never stops; `why` is logged as a warning.
    Unknown { why: String },
}

/// A comma list of GRES indices, with `a-b` ranges (`0,2-3`), by Slurm's
/// one range rule (`gres::hostlist::spans`), at most 1025 of them.
fn index_list(value: &str) -> Option<Vec<u32>> {
    crate::gres::hostlist::indices(value.trim(), 1025)
        .ok()?
        .into_iter()
        .map(|i| u32::try_from(i).ok())
        .collect()
}

/// Which devices are the job's (docs/agent.md §"Which devices are the job's"):
///
/// 1. `--devices`: as given.
/// 2. `CUDA_VISIBLE_DEVICES` of UUIDs (`MIG-…`, `GPU-…`; Slurm's NVML
///    autodetect): those devices, renumbering or not.
/// 3. Indices outside a Slurm job (no `SLURM_*_GPUS`): NVML indices.
/// 4. Indices in a Slurm job: `SLURM_STEP_GPUS` (else `SLURM_JOB_GPUS`) are
///    GRES indices; each names its gres.conf unit and that unit's device.
/// 5. No gres.conf map: the indices are taken as NVML indices only when
///    `CUDA_VISIBLE_DEVICES` equals the GRES indices (nothing renumbered);
///    else the mapping is unknown.
///
/// Unknown too: a GRES index gres.conf does not resolve, or a count that
/// differs between `CUDA_VISIBLE_DEVICES` and the GRES indices. An error only
/// for a `CUDA_VISIBLE_DEVICES` that is no device list at all.
pub fn resolve(job: &JobGres<'_>) -> Result<Mapping> {
    let ids = parse_visible_devices(job.visible)?;
    let as_given = |how: String| Mapping::Known {
        targets: ids.iter().cloned().map(Target::Id).collect(),
        how,
    };
    if job.explicit {
        return Ok(as_given("as given (--devices)".into()));
    }
    let indices: Vec<u32> = ids
        .iter()
        .filter_map(|id| match id {
            DeviceId::Index(i) => Some(*i),
            _ => None,
        })
        .collect();
    if indices.is_empty() {
        return Ok(as_given("by UUID (CUDA_VISIBLE_DEVICES)".into()));
    }
    let visible = job.visible.trim();
    if indices.len() != ids.len() {
        return Ok(Mapping::Unknown {
            why: format!("CUDA_VISIBLE_DEVICES={visible} mixes UUIDs and indices"),
        });
    }
    let Some((var, value)) = job.gres_indices else {
        return Ok(as_given(format!(
            "CUDA_VISIBLE_DEVICES={visible} as NVML indices (no SLURM_STEP_GPUS or SLURM_JOB_GPUS: not in a Slurm job)"
        )));
    };
    let value = value.trim();
    let Some(gres) = index_list(value) else {
        return Ok(Mapping::Unknown {
            why: format!("{var}={value:?} is not a list of GRES indices"),
        });
    };
    if gres.len() != indices.len() {
        return Ok(Mapping::Unknown {
            why: format!(
                "CUDA_VISIBLE_DEVICES={visible} lists {} device(s) and {var}={value} {}: which is which cannot be told",
                indices.len(),
                gres.len()
            ),
        });
    }
    let units = match &job.units {
        Ok(units) if !units.is_empty() => units,
        Ok(_) => {
            return Ok(unmapped(
                &indices,
                &gres,
                visible,
                var,
                value,
                "gres.conf lists no GPU for this node",
            ))
        }
        Err(why) => return Ok(unmapped(&indices, &gres, visible, var, value, why)),
    };
    let mut targets = Vec::with_capacity(gres.len());
    let mut lines = Vec::with_capacity(gres.len());
    for &g in &gres {
        match units.get(g as usize) {
            Some(GresUnit {
                line,
                target: Ok(t),
            }) => {
                targets.push(t.clone());
                lines.push(line.to_string());
            }
            // A line gres.conf cannot map (its file is no NVIDIA device, as
            // on the test clusters' fake slices), or no line at all: as
            // without a map, the indices stand only where nothing was
            // renumbered.
            Some(GresUnit {
                target: Err(why), ..
            }) => {
                let why = format!("GRES index {g}: {why}");
                return Ok(unmapped(&indices, &gres, visible, var, value, &why));
            }
            None => {
                let why = format!(
                    "gres.conf lists {} GPU unit(s) for this node, none at GRES index {g}",
                    units.len()
                );
                return Ok(unmapped(&indices, &gres, visible, var, value, &why));
            }
        }
    }
    Ok(Mapping::Known {
        how: format!(
            "{var}={value} through gres.conf line(s) {} (CUDA_VISIBLE_DEVICES={visible})",
            lines.join(",")
        ),
        targets,
    })
}

/// Without a gres.conf map: the indices are NVML's only where nothing was renumbered.
fn unmapped(
    indices: &[u32],
    gres: &[u32],
    visible: &str,
    var: &str,
    value: &str,
    why: &str,
) -> Mapping {
    if indices == gres {
        Mapping::Known {
            targets: indices
                .iter()
                .map(|&i| Target::Id(DeviceId::Index(i)))
                .collect(),
            how: format!(
                "CUDA_VISIBLE_DEVICES={visible} as NVML indices (it equals {var}, so nothing was renumbered; {why})"
            ),
        }
    } else {
        Mapping::Unknown {
            why: format!(
                "CUDA_VISIBLE_DEVICES={visible} is renumbered from {var}={value} (Slurm's ConstrainDevices), and no gres.conf maps the GRES indices to devices ({why})"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An A100 cut into seven 1g.5gb slices (GRES 0–6: gi 7–13), then two
    /// whole A100s with shards (GRES 7, 8), as a hand-written gres.conf says.
    const GRES: &str = "\
NodeName=other Name=gpu Type=a100 File=/dev/nvidia9
NodeName=n1 Name=gpu Type=1g.5gb MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap66,/dev/nvidia-caps/nvidia-cap67
NodeName=n1 Name=gpu Type=1g.5gb MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap75,/dev/nvidia-caps/nvidia-cap76
NodeName=n1 Name=gpu Type=1g.5gb MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap84,/dev/nvidia-caps/nvidia-cap85
NodeName=n1 Name=gpu Type=1g.5gb MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap93,/dev/nvidia-caps/nvidia-cap94
NodeName=n1 Name=gpu Type=1g.5gb MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap102,/dev/nvidia-caps/nvidia-cap103
NodeName=n1 Name=gpu Type=1g.5gb MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap111,/dev/nvidia-caps/nvidia-cap112
NodeName=n1 Name=gpu Type=1g.5gb MultipleFiles=/tmp/root/dev/nvidia0,/tmp/root/dev/nvidia-caps/nvidia-cap120,/tmp/root/dev/nvidia-caps/nvidia-cap121
NodeName=n1 Name=gpu Type=a100 File=/dev/nvidia[1-2]
NodeName=n1 Name=shard Count=8 File=/dev/nvidia[1-2]
";

    fn minors() -> MigMinors {
        let mut m = MigMinors::default();
        for gi in 0..15 {
            let n = 3 + gi * 9;
            m.insert_gi(0, gi, n);
            m.insert_ci(0, gi, 0, n + 1);
        }
        m
    }

    fn units() -> Vec<GresUnit> {
        let conf = crate::gres::parse(GRES, "gres.conf").unwrap();
        gres_units(&conf, "n1", Some(&minors())).unwrap()
    }

    fn job<'a>(
        visible: &'a str,
        gres: Option<&'a str>,
        units: Result<&'a [GresUnit], String>,
    ) -> JobGres<'a> {
        JobGres {
            visible,
            explicit: false,
            gres_indices: gres.map(|g| ("SLURM_JOB_GPUS", g)),
            units,
        }
    }

    fn targets(m: Mapping) -> Vec<Target> {
        match m {
            Mapping::Known { targets, .. } => targets,
            Mapping::Unknown { why } => panic!("unknown: {why}"),
        }
    }

    fn why(m: Mapping) -> String {
        match m {
            Mapping::Unknown { why } => why,
            Mapping::Known { targets, how } => panic!("known: {targets:?} ({how})"),
        }
    }

    #[test]
    fn gres_conf_gives_each_index_its_device_in_file_order() {
        let u = units();
        assert_eq!(u.len(), 9, "{u:?}");
        assert_eq!(u[0].line, 2);
        assert_eq!(
            u[0].target,
            Ok(Target::Mig {
                minor: 0,
                gi: 7,
                ci: 0
            })
        );
        assert_eq!(
            u[6].target,
            Ok(Target::Mig {
                minor: 0,
                gi: 13,
                ci: 0
            }),
            "a device root before /dev changes nothing"
        );
        assert_eq!(u[7].target, Ok(Target::Gpu { minor: 1 }));
        assert_eq!(u[8].target, Ok(Target::Gpu { minor: 2 }));
        // Without mig-minors a slice's line cannot be resolved; a GPU's can.
        let conf = crate::gres::parse(GRES, "gres.conf").unwrap();
        let u = gres_units(&conf, "n1", None).unwrap();
        assert!(u[0].target.as_ref().unwrap_err().contains("mig-minors"));
        assert_eq!(u[7].target, Ok(Target::Gpu { minor: 1 }));
        // NVML autodetect orders the GPUs itself.
        let conf = crate::gres::parse("AutoDetect=nvml\nName=gpu Count=2\n", "g").unwrap();
        assert!(gres_units(&conf, "n1", None)
            .unwrap_err()
            .contains("AutoDetect=nvml"));
        let conf = crate::gres::parse(
            "AutoDetect=nvml\nNodeName=n1 AutoDetect=off Name=gpu Type=a100 File=/dev/nvidia3\n",
            "g",
        )
        .unwrap();
        assert_eq!(
            gres_units(&conf, "n1", None).unwrap()[0].target,
            Ok(Target::Gpu { minor: 3 }),
            "the node's own AutoDetect=off wins over the global one"
        );
        let conf = crate::gres::parse("Name=gpu Type=a100 Count=2\n", "g").unwrap();
        let u = gres_units(&conf, "n1", None).unwrap();
        assert_eq!(u.len(), 2);
        assert!(u[1].target.as_ref().unwrap_err().contains("no device file"));
    }

    /// The case: a 1g.5gb slice at GRES index 6 renumbered to 0.
    #[test]
    fn a_renumbered_slice_is_its_own_mig_device() {
        let u = units();
        let m = resolve(&job("0", Some("6"), Ok(&u))).unwrap();
        match &m {
            Mapping::Known { how, .. } => {
                assert!(
                    how.contains("SLURM_JOB_GPUS=6 through gres.conf line(s) 8"),
                    "{how}"
                )
            }
            Mapping::Unknown { why } => panic!("{why}"),
        }
        assert_eq!(
            targets(m),
            [Target::Mig {
                minor: 0,
                gi: 13,
                ci: 0
            }]
        );
    }

    #[test]
    fn renumbered_whole_gpus_shards_and_the_pool_are_their_own_gpus() {
        let u = units();
        // A whole GPU (or a shard of it: the same index) at GRES 7 seen as 0.
        assert_eq!(
            targets(resolve(&job("0", Some("7"), Ok(&u))).unwrap()),
            [Target::Gpu { minor: 1 }]
        );
        // The exclusive pool: GRES 7 and 8 seen as 0,1; a step's own list wins.
        let mut j = job("0,1", Some("7-8"), Ok(&u));
        assert_eq!(
            targets(resolve(&j).unwrap()),
            [Target::Gpu { minor: 1 }, Target::Gpu { minor: 2 }]
        );
        j.gres_indices = Some(("SLURM_STEP_GPUS", "8"));
        j.visible = "0";
        assert_eq!(targets(resolve(&j).unwrap()), [Target::Gpu { minor: 2 }]);
        // Not renumbered (no ConstrainDevices): the map still applies.
        assert_eq!(
            targets(resolve(&job("7,8", Some("7,8"), Ok(&u))).unwrap()),
            [Target::Gpu { minor: 1 }, Target::Gpu { minor: 2 }]
        );
    }

    #[test]
    fn uuids_and_explicit_devices_are_used_as_given() {
        let uuid = "MIG-4a2b36b7-8d1c-5f43-9a4e-2c0d6b3e7f10";
        assert_eq!(
            targets(resolve(&job(uuid, Some("6"), Err("none".into()))).unwrap()),
            [Target::Id(DeviceId::Mig(uuid.into()))]
        );
        let mut j = job("3", Some("6"), Err("none".into()));
        j.explicit = true;
        assert_eq!(
            targets(resolve(&j).unwrap()),
            [Target::Id(DeviceId::Index(3))]
        );
        // Outside Slurm an index is NVML's.
        assert_eq!(
            targets(resolve(&job("1", None, Err("none".into()))).unwrap()),
            [Target::Id(DeviceId::Index(1))]
        );
    }

    #[test]
    fn without_a_map_only_an_unrenumbered_list_is_taken_as_nvml_indices() {
        assert_eq!(
            targets(resolve(&job("2,3", Some("2,3"), Err("no gres.conf".into()))).unwrap()),
            [
                Target::Id(DeviceId::Index(2)),
                Target::Id(DeviceId::Index(3))
            ]
        );
        let w = why(resolve(&job("0", Some("6"), Err("no /etc/slurm/gres.conf".into()))).unwrap());
        assert!(
            w.contains("CUDA_VISIBLE_DEVICES=0 is renumbered from SLURM_JOB_GPUS=6")
                && w.contains("no /etc/slurm/gres.conf"),
            "{w}"
        );
        let empty: Vec<GresUnit> = vec![];
        let w = why(resolve(&job("0", Some("6"), Ok(&empty))).unwrap());
        assert!(w.contains("lists no GPU"), "{w}");
    }

    #[test]
    fn what_cannot_be_mapped_is_unknown_and_says_why() {
        let u = units();
        for (visible, gres, needle) in [
            ("0", "9", "none at GRES index 9"),
            ("0,1", "6", "lists 2 device(s) and SLURM_JOB_GPUS=6 1"),
            ("0", "x", "not a list of GRES indices"),
            ("0", "3-1", "not a list"),
            (
                "0,GPU-a1000040-0000-4000-8000-000000000001",
                "6,7",
                "mixes UUIDs",
            ),
        ] {
            let w = why(resolve(&job(visible, Some(gres), Ok(&u))).unwrap());
            assert!(w.contains(needle), "{visible} {gres}: {w}");
        }
        let conf = crate::gres::parse(GRES, "gres.conf").unwrap();
        let u = gres_units(&conf, "n1", None).unwrap();
        let w = why(resolve(&job("0", Some("6"), Ok(&u))).unwrap());
        assert!(
            w.contains("GRES index 6: gres.conf line 8") && w.contains("mig-minors"),
            "{w}"
        );
        // A CUDA_VISIBLE_DEVICES that is no list is still an error.
        assert!(resolve(&job("NoDevFiles", Some("6"), Ok(&u))).is_err());
    }

    #[test]
    fn index_lists_take_ranges() {
        assert_eq!(index_list("0,2-4"), Some(vec![0, 2, 3, 4]));
        assert_eq!(index_list(" 6 "), Some(vec![6]));
        for bad in ["", "a", "1,", "-1", "0-99999"] {
            assert_eq!(index_list(bad), None, "{bad}");
        }
    }
}
