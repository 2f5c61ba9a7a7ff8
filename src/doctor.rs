//! Environment checks behind `yolo-sched doctor`.
//!
//! Each check yields a `Check` with a status; the environment is usable when
//! no check failed. Warnings are things that work but will bite.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use crate::nvml::{self, NvmlProbe};
use crate::slurm::{config, sacct, sinfo, version, Slurm};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Info,
    Warn,
    Fail,
}

#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: String,
    pub status: Status,
    pub detail: String,
}

/// Everything `doctor` found out.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub usable: bool,
    pub checks: Vec<Check>,
    pub slurm_version: Option<String>,
    pub partitions: Vec<String>,
    pub gres: BTreeMap<String, u64>,
    pub accounting: Accounting,
    pub nvml: NvmlProbe,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Accounting {
    /// slurmdbd answers: `sacct` works.
    Slurmdbd,
    /// Only the job completion log: `sacct -c` works.
    JobcompOnly,
    None,
    Unknown,
}

/// Slurm client commands yolo-sched runs; the first five are required.
pub const COMMANDS: [&str; 6] = ["sbatch", "squeue", "sinfo", "scontrol", "scancel", "sacct"];

fn check(checks: &mut Vec<Check>, name: &str, status: Status, detail: impl Into<String>) {
    checks.push(Check {
        name: name.to_string(),
        status,
        detail: detail.into(),
    });
}

/// Run every check. `nvml_lib` is the library path from `--nvml-lib` if given.
pub fn gather(slurm: &Slurm, nvml_lib: Option<&std::path::PathBuf>) -> Report {
    let mut checks = Vec::new();
    let required_missing = commands_check(&mut checks);
    let slurm_version = version_check(slurm, &mut checks, &required_missing);
    let ctld_up = controller_check(slurm, &mut checks, &required_missing);

    let mut cluster = ClusterSeen::default();
    let mut accounting = Accounting::Unknown;
    if ctld_up {
        cluster = nodes_checks(slurm, &mut checks);
        let ctl = config::fetch(slurm).ok();
        accounting = accounting_checks(slurm, &mut checks, ctl.as_ref(), &cluster.gres);
        if let Some(ctl) = &ctl {
            autodetect_check(&mut checks, ctl);
            checks.extend(isolation_checks(ctl, &cluster.gpu_nodes));
        }
    }

    let nvml = nvml_check(&mut checks, nvml_lib);
    let usable = !checks.iter().any(|c| c.status == Status::Fail);
    Report {
        usable,
        checks,
        slurm_version,
        partitions: cluster.partitions,
        gres: cluster.gres,
        accounting,
        nvml,
    }
}

/// What `sinfo` showed of the cluster: nothing when the controller is down.
#[derive(Default)]
struct ClusterSeen {
    partitions: Vec<String>,
    gres: BTreeMap<String, u64>,
    /// The nodes with any GRES, for the isolation checks.
    gpu_nodes: Vec<String>,
}

/// Slurm's client commands on `PATH`; the required ones missing (`sacct` is not).
fn commands_check(checks: &mut Vec<Check>) -> Vec<&'static str> {
    let mut missing = Vec::new();
    let mut found = Vec::new();
    for cmd in COMMANDS {
        match which::which(cmd) {
            Ok(p) => found.push(p.display().to_string()),
            Err(_) => missing.push(cmd),
        }
    }
    let required_missing: Vec<&str> = missing.iter().copied().filter(|c| *c != "sacct").collect();
    if required_missing.is_empty() {
        check(
            checks,
            "slurm commands",
            Status::Ok,
            format!("on PATH: {}", found.join(", ")),
        );
    } else {
        check(
            checks,
            "slurm commands",
            Status::Fail,
            format!(
                "not on PATH: {} (install slurm-client, or fix PATH)",
                required_missing.join(", ")
            ),
        );
    }
    required_missing
}

/// The client's Slurm version, and its known MIG bugs; none without `sinfo`.
fn version_check(
    slurm: &Slurm,
    checks: &mut Vec<Check>,
    required_missing: &[&str],
) -> Option<String> {
    let mut slurm_version = None;
    match version::client(slurm) {
        Ok(out) => match version::parse(&out) {
            Some(v) => {
                slurm_version = Some(v.to_string());
                let warnings = version::mig_warnings(v);
                if warnings.is_empty() {
                    check(checks, "slurm version", Status::Ok, v.to_string());
                } else {
                    check(
                        checks,
                        "slurm version",
                        Status::Warn,
                        format!(
                            "{v}: known MIG bugs, upgrade to {} or later: {}",
                            version::MIG_SAFE,
                            warnings.join("; ")
                        ),
                    );
                }
            }
            None => check(
                checks,
                "slurm version",
                Status::Warn,
                format!("unrecognised: {}", out.trim()),
            ),
        },
        // The missing `sinfo` has its line already.
        Err(_) if required_missing.contains(&"sinfo") => {}
        Err(e) => check(checks, "slurm version", Status::Fail, format!("{e:#}")),
    }
    slurm_version
}

/// Whether slurmctld answers `scontrol ping` (not asked without `scontrol`).
fn controller_check(slurm: &Slurm, checks: &mut Vec<Check>, required_missing: &[&str]) -> bool {
    let mut ctld_up = false;
    if !required_missing.contains(&"scontrol") {
        match config::ping(slurm) {
            Ok(out) if out.stdout_str().contains("is UP") => {
                ctld_up = true;
                check(
                    checks,
                    "slurmctld",
                    Status::Ok,
                    out.stdout_str().trim().to_string(),
                );
            }
            Ok(out) => check(
                checks,
                "slurmctld",
                Status::Fail,
                format!(
                    "does not answer: {}{}",
                    out.stdout_str().trim(),
                    out.stderr_str().trim()
                ),
            ),
            Err(e) => check(checks, "slurmctld", Status::Fail, format!("{e:#}")),
        }
    }
    ctld_up
}

/// The partitions, the GPU GRES and the nodes down or drained, from `sinfo`.
fn nodes_checks(slurm: &Slurm, checks: &mut Vec<Check>) -> ClusterSeen {
    let mut seen = ClusterSeen::default();
    match sinfo::nodes(slurm) {
        Ok(nodes) => {
            seen.gpu_nodes = nodes
                .iter()
                .filter(|n| !n.gres.is_empty())
                .map(|n| n.name.clone())
                .collect();
            seen.gpu_nodes.dedup();
            seen.partitions = sinfo::partitions(&nodes);
            seen.gres = sinfo::gres_totals(&nodes);
            if seen.partitions.is_empty() {
                check(
                    checks,
                    "partitions",
                    Status::Fail,
                    "sinfo lists no partitions",
                );
            } else {
                check(checks, "partitions", Status::Ok, seen.partitions.join(", "));
            }
            let gpu: Vec<String> = seen
                .gres
                .iter()
                .filter(|(k, _)| k.starts_with("gpu") || k.starts_with("shard"))
                .map(|(k, n)| format!("{k}:{n}"))
                .collect();
            if gpu.is_empty() {
                check(
                    checks,
                    "gres",
                    Status::Warn,
                    "no GPU GRES in the cluster: GPU stages cannot run",
                );
            } else {
                check(checks, "gres", Status::Ok, gpu.join(", "));
            }
            let unhealthy: Vec<String> = nodes
                .iter()
                .filter(|n| n.is_unhealthy())
                .map(|n| {
                    if n.reason.is_empty() {
                        format!("{} ({})", n.name, n.display_state())
                    } else {
                        format!("{} ({}: {})", n.name, n.display_state(), n.reason)
                    }
                })
                .collect();
            if unhealthy.is_empty() {
                check(
                    checks,
                    "nodes",
                    Status::Ok,
                    format!("{} node(s), none down or drained", nodes.len()),
                );
            } else {
                check(
                    checks,
                    "nodes",
                    Status::Warn,
                    format!("not usable: {}", unhealthy.join(", ")),
                );
            }
        }
        Err(e) => check(checks, "partitions", Status::Fail, format!("{e:#}")),
    }
    seen
}

/// Which accounting the cluster keeps; with slurmdbd, whether it keeps job
/// comments and every GPU type jobs ask for.
fn accounting_checks(
    slurm: &Slurm,
    checks: &mut Vec<Check>,
    ctl: Option<&config::ControllerConfig>,
    gres: &BTreeMap<String, u64>,
) -> Accounting {
    let accounting = accounting_state(slurm, ctl);
    let (status, detail) = match accounting {
        Accounting::Slurmdbd => (Status::Ok, "slurmdbd answers; sacct works".to_string()),
        Accounting::JobcompOnly => (
            Status::Warn,
            "no slurmdbd: sacct is disabled; finished jobs are read from the jobcomp log (sacct -c) and job-written files".to_string(),
        ),
        Accounting::None => (
            Status::Warn,
            "no accounting: finished jobs are known only from job-written files".to_string(),
        ),
        Accounting::Unknown => (Status::Warn, "could not tell whether accounting works".to_string()),
    };
    check(checks, "accounting", status, detail);
    if let (Accounting::Slurmdbd, Some(ctl)) = (accounting, ctl) {
        // Runs are found through Slurm by the run id in each job's
        // comment (docs/teams.md), and the job agent's measured GPU
        // memory reaches `advise` the same way (docs/advise.md).
        let (status, detail) = job_comments_check(ctl);
        check(checks, "job_comments", status, detail);
        // The layout advisor reads what each job asked for from sacct,
        // which keeps a GPU type only where AccountingStorageTRES names it.
        let untracked = config::untracked_gpu_types(
            ctl.get("AccountingStorageTRES").unwrap_or(""),
            gres.keys().map(String::as_str),
        );
        let (status, detail) = if untracked.is_empty() {
            (
                Status::Ok,
                "AccountingStorageTRES records every GPU type: `yolo-sched advise` sees what jobs asked for".to_string(),
            )
        } else {
            (
                Status::Warn,
                format!(
                    "AccountingStorageTRES does not record GPU type(s) {}: sacct keeps only gres/gpu=N for their jobs, \
                     so `yolo-sched advise` cannot tell what they asked for; add {} to AccountingStorageTRES in slurm.conf",
                    untracked.join(", "),
                    untracked
                        .iter()
                        .map(|t| format!("gres/gpu:{t}"))
                        .collect::<Vec<_>>()
                        .join(",")
                ),
            )
        };
        check(checks, "typed_gpu_accounting", status, detail);
    }
    accounting
}

/// Whether Slurm was built with NVML (`gpu_nvml.so` in its `PluginDir`), so
/// that `AutoDetect=nvml` is possible.
fn autodetect_check(checks: &mut Vec<Check>, ctl: &config::ControllerConfig) {
    if let Some(plugin_dir) = ctl.get("PluginDir") {
        let has_nvml = plugin_dir
            .split(':')
            .any(|d| Path::new(d).join("gpu_nvml.so").exists());
        if has_nvml {
            check(
                checks,
                "gpu autodetect",
                Status::Ok,
                "gpu_nvml.so present: AutoDetect=nvml is possible",
            );
        } else {
            check(
                checks,
                "gpu autodetect",
                Status::Info,
                format!("Slurm was built without NVML (no gpu_nvml.so in {plugin_dir}): AutoDetect=nvml is unavailable; `yolo-sched node-setup` writes explicit gres.conf lines"),
            );
        }
    }
}

/// Whether NVML loads on this host (needed only on GPU nodes), and what it sees.
fn nvml_check(checks: &mut Vec<Check>, nvml_lib: Option<&std::path::PathBuf>) -> NvmlProbe {
    let lib = nvml::library_path(nvml_lib);
    let nvml = nvml::probe(&lib);
    if nvml.loaded {
        check(
            checks,
            "nvml",
            Status::Ok,
            format!(
                "{} loaded: driver {}, {} GPU(s)",
                nvml.library,
                nvml.driver_version.as_deref().unwrap_or("unknown"),
                nvml.device_count
                    .map(|c| c.to_string())
                    .unwrap_or_else(|| "?".into())
            ),
        );
    } else {
        check(
            checks,
            "nvml",
            Status::Info,
            format!(
                "tried {}: {} (needed only on GPU nodes, for node-setup)",
                nvml.library,
                nvml.error.as_deref().unwrap_or("not loaded")
            ),
        );
    }
    nvml
}

/// Whether slurmdbd keeps job comments: the run ids for `list --account`,
/// and the carrier of each job's measured GPU memory for `advise`.
pub fn job_comments_check(ctl: &config::ControllerConfig) -> (Status, String) {
    if ctl.stores_job_comment() {
        let seen = if ctl.private_jobs() {
            "PrivateData=jobs: users see their own runs, coordinators their accounts', operators all"
        } else {
            "PrivateData does not hide jobs: every user sees every run's jobs"
        };
        (
            Status::Ok,
            format!(
                "sacct keeps job comments: list --account finds finished runs, and the GPU memory \
                 each job's agent measured reaches `yolo-sched advise`; {seen}"
            ),
        )
    } else {
        (
            Status::Warn,
            "AccountingStoreFlags lacks job_comment: sacct does not keep the run id, so `list --account`, \
             `status` of a team member's run and `report --account` find only runs still in the queue, \
             and the GPU memory each job's agent measured never reaches `yolo-sched advise`, which then \
             plans every job from the type it asked for; add AccountingStoreFlags=job_comment to slurm.conf"
                .to_string(),
        )
    }
}

/// The isolation between jobs the site enforces (`slurm::isolation`): one
/// line per layer, each gap a warning that says what a job can do and how to
/// close it. gres.conf is read beside the controller's slurm.conf, where this
/// host has it (a login node often does; `node-setup --check` reads the node's).
pub fn isolation_checks(ctl: &config::ControllerConfig, gpu_nodes: &[String]) -> Vec<Check> {
    use crate::slurm::isolation;
    let mut out = Vec::new();
    let mut findings = isolation::findings(ctl, gpu_nodes);
    let gres_conf = ctl
        .get("SLURM_CONF")
        .map(|c| Path::new(c).with_file_name("gres.conf"))
        .unwrap_or_else(|| Path::new("/etc/slurm/gres.conf").to_path_buf());
    let text = crate::fsutil::read_regular(&gres_conf, crate::gres::CONF_LIMIT).ok();
    findings.push(isolation::device_files_finding(
        text.as_deref(),
        &gres_conf.display().to_string(),
    ));
    findings.push(process_visibility_here());
    for f in findings {
        let status = if f.ok { Status::Ok } else { Status::Warn };
        check(&mut out, f.name, status, f.detail);
    }
    out
}

/// `/proc`'s hidepid on the host this runs on (a login node for `doctor`,
/// the node itself for `node-setup --check`).
pub fn process_visibility_here() -> crate::slurm::isolation::Finding {
    let mountinfo = crate::fsutil::read_regular(Path::new("/proc/self/mountinfo"), 4 << 20).ok();
    let host = Some(crate::identity::host_name())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "this host".to_string());
    crate::slurm::isolation::process_visibility_finding(mountinfo.as_deref(), &host)
}

fn accounting_state(slurm: &Slurm, ctl: Option<&config::ControllerConfig>) -> Accounting {
    if sacct::probe(slurm) {
        return Accounting::Slurmdbd;
    }
    match ctl {
        Some(c) if c.has_jobcomp() => Accounting::JobcompOnly,
        Some(_) => Accounting::None,
        None => Accounting::Unknown,
    }
}

/// The model registry, when the site has one (`[registry] url`): reachable,
/// a `file://` directory others can publish to and whose blobs they cannot
/// list, and whether the caller's Slurm accounts are known (the read rule
/// rests on them) and have Unix groups (what `file://` enforces with).
/// Nothing when the site has no registry.
pub fn registry_checks(site: &crate::config::Site) -> Vec<Check> {
    use crate::registry::{Caller, Reads, Registry, RegistryUrl, SiteRegistry};
    use std::os::unix::fs::MetadataExt;
    let mut checks = Vec::new();
    let url = match SiteRegistry::from_site(site) {
        Err(e) => {
            check(
                &mut checks,
                "model registry",
                Status::Fail,
                format!("{e:#}"),
            );
            return checks;
        }
        Ok(SiteRegistry { url: None, .. }) => return checks,
        Ok(SiteRegistry { url: Some(u), .. }) => u,
    };
    match Registry::open(&url).and_then(|r| r.names().map(|n| (r, n))) {
        Ok((_, names)) => check(
            &mut checks,
            "model registry",
            Status::Ok,
            format!("{url}: {} model name(s)", names.len()),
        ),
        Err(e) => {
            check(
                &mut checks,
                "model registry",
                Status::Fail,
                format!("{url}: {e:#}"),
            );
            return checks;
        }
    }
    if let RegistryUrl::File(dir) = &url {
        if let Ok(meta) = std::fs::metadata(dir) {
            let mode = meta.mode() & 0o7777;
            let (status, detail) = if crate::registry::unix_anyone_publishes(mode) {
                (
                    Status::Ok,
                    format!(
                        "{} is mode {mode:o}: anyone publishes, nobody replaces another's record",
                        dir.display()
                    ),
                )
            } else {
                (Status::Info, format!("{} is mode {mode:o}: only its owner{} can publish; `chmod 1777` it for every user (docs/registry.md)", dir.display(), if mode & 0o020 != 0 { " and group" } else { "" }))
            };
            check(&mut checks, "registry directory", status, detail);
        }
        if let Some(note) = crate::registry::unix_listable_blobs_note(dir) {
            check(&mut checks, "registry blobs", Status::Warn, note);
        }
    }
    let caller = Caller::current();
    // The site's default model, when it names the registry: what every spec
    // without a model trains from, so it must resolve and be readable by all.
    let default_model = crate::plan::Policy::from_site(site)
        .ok()
        .and_then(|p| p.defaults.model)
        .and_then(|m| {
            m.strip_prefix(crate::names::model::PREFIX)
                .map(str::to_string)
        });
    if let Some(text) = default_model {
        let (status, detail) = match crate::names::model::ModelRef::parse(&text)
            .map_err(anyhow::Error::msg)
            .and_then(|r| Registry::open(&url)?.resolve(&r, &caller))
        {
            Ok(l) if l.record.public => (
                Status::Ok,
                format!("[defaults] model = \"registry:{text}\" is {}, public", l.record.id()),
            ),
            Ok(l) => (
                Status::Warn,
                format!(
                    "[defaults] model = \"registry:{text}\" is {}, which is not public: users outside its account cannot train with the site's default (import it with --public)",
                    l.record.id()
                ),
            ),
            Err(e) => (
                Status::Fail,
                format!("[defaults] model = \"registry:{text}\": {e:#}"),
            ),
        };
        check(&mut checks, "registry default model", status, detail);
    }
    match caller.membership() {
        Err(why) => check(
            &mut checks,
            "registry accounts",
            Status::Warn,
            format!("your Slurm accounts are not known ({why}): only public versions and your own are readable"),
        ),
        Ok(m) => {
            let mut detail = match caller.reads(m) {
                Reads::Every => "you read every version (root or a Slurm operator)".to_string(),
                Reads::OfAccounts(accounts) if accounts.is_empty() => {
                    "accounting knows no account of yours: only public versions and your own are readable".to_string()
                }
                Reads::OfAccounts(accounts) => format!(
                    "you read the private versions of {}",
                    crate::suggest::ticked_list(accounts.iter().map(String::as_str))
                ),
            };
            let mut status = Status::Ok;
            if matches!(url, RegistryUrl::File(_)) {
                let groupless: Vec<&str> = m
                    .accounts
                    .iter()
                    .filter(|a| crate::registry::unix_group_for(Some(a)).is_err())
                    .map(String::as_str)
                    .collect();
                if !groupless.is_empty() {
                    status = Status::Info;
                    detail.push_str(&format!(
                        "; on this file system the private versions you publish under {} stay readable by every user (no Unix group of that name you are in)",
                        crate::suggest::ticked_list(groupless.into_iter())
                    ));
                }
            }
            check(&mut checks, "registry accounts", status, detail);
        }
    }
    checks
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 34: a site whose accounting drops job comments gets a line
    /// that says the advisor plans from asked types, and what to set.
    #[test]
    fn job_comments_carry_the_measured_need_or_the_line_says_what_to_set() {
        let kept = config::ControllerConfig::parse(
            "AccountingStoreFlags    = job_comment\nPrivateData             = jobs\n",
        );
        let (status, detail) = job_comments_check(&kept);
        assert_eq!(status, Status::Ok);
        assert!(detail.contains("reaches `yolo-sched advise`"), "{detail}");
        let dropped = config::ControllerConfig::parse("AccountingStoreFlags    = (null)\n");
        let (status, detail) = job_comments_check(&dropped);
        assert_eq!(status, Status::Warn);
        for said in [
            "never reaches `yolo-sched advise`",
            "the type it asked for",
            "AccountingStoreFlags=job_comment",
        ] {
            assert!(detail.contains(said), "{said}: {detail}");
        }
    }
}
