//! `cluster-conf`: slurm.conf, gres.conf and cgroup.conf of the local test
//! cluster, and the fake device counts, written into a directory for
//! `slurm/cluster.sh` to install. The settings are the script's; the work is
//! `yolo_sched::localcluster` (pure), this file reads and writes. Exit status
//! 2 for a bad setting or input file, 1 when a file cannot be read or written.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Parser;
use yolo_sched::error::{exit_code_for, invalid};
use yolo_sched::localcluster::{render, Inputs, Override, RawSettings, Settings};

/// Writes slurm.conf, gres.conf, cgroup.conf and `devices` (`<dir> <count>`
/// per node) of slurm/cluster.sh's local cluster into --out.
#[derive(Parser, Debug)]
#[command(name = "cluster-conf", version)]
struct Args {
    /// Directory the files are written into (it must exist).
    #[arg(long)]
    out: PathBuf,
    /// First line of every file (cluster.sh's MARKER).
    #[arg(long)]
    marker: String,
    #[arg(long)]
    instance: String,
    #[arg(long)]
    cluster_name: String,
    #[arg(long)]
    hostname: String,
    #[arg(long)]
    ctld_port: String,
    #[arg(long)]
    slurmd_base_port: String,
    #[arg(long)]
    dbd_port: String,
    #[arg(long)]
    first_job_id: String,
    #[arg(long)]
    spool_dir: String,
    #[arg(long)]
    run_dir: String,
    #[arg(long)]
    log_dir: String,
    #[arg(long)]
    dev_dir: String,
    #[arg(long)]
    dev_major: String,
    #[arg(long)]
    nodes: String,
    #[arg(long)]
    accounting: String,
    #[arg(long)]
    pool: String,
    #[arg(long)]
    cgroups: String,
    #[arg(long)]
    mig_node: String,
    #[arg(long)]
    min_job_age: String,
    #[arg(long, default_value = "")]
    sched_params: String,
    /// node-setup's slurm.conf include (read for MIG_NODE=1's Gres=).
    #[arg(long)]
    mig_include: String,
    /// The NODE_GRES file, if any.
    #[arg(long, default_value = "")]
    node_gres: String,
    /// The gres.conf installed now, whose node-setup blocks are kept (missing: none).
    #[arg(long)]
    existing_gres: PathBuf,
    /// NODE=FILE: FILE's lines as NODE's gres.conf lines (GRES_CONF_<NODE>).
    #[arg(long = "gres-conf", value_name = "NODE=FILE")]
    gres_conf: Vec<String>,
}

fn read_if_there(path: &Path) -> Result<Option<String>> {
    match std::fs::read(path) {
        Ok(bytes) => String::from_utf8(bytes)
            .map(Some)
            .map_err(|_| invalid(format!("{} is not UTF-8 text", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

fn run(a: Args) -> Result<()> {
    let settings = Settings::check(&RawSettings {
        marker: a.marker,
        instance: a.instance,
        cluster_name: a.cluster_name,
        hostname: a.hostname,
        ctld_port: a.ctld_port,
        slurmd_base_port: a.slurmd_base_port,
        dbd_port: a.dbd_port,
        first_job_id: a.first_job_id,
        spool_dir: a.spool_dir,
        run_dir: a.run_dir,
        log_dir: a.log_dir,
        dev_dir: a.dev_dir,
        dev_major: a.dev_major,
        nodes: a.nodes,
        accounting: a.accounting,
        pool: a.pool,
        cgroups: a.cgroups,
        mig_node: a.mig_node,
        min_job_age: a.min_job_age,
        sched_params: a.sched_params,
        mig_include: a.mig_include,
        node_gres: a.node_gres,
    })?;
    let node_gres = match &settings.node_gres {
        Some(path) => Some(
            std::fs::read(path)
                .ok()
                .and_then(|b| String::from_utf8(b).ok())
                .ok_or_else(|| invalid(format!("NODE_GRES: cannot read '{path}'")))?,
        ),
        None => None,
    };
    let mut overrides = Vec::new();
    for spec in &a.gres_conf {
        let (node, path) = spec
            .split_once('=')
            .filter(|(n, p)| !n.is_empty() && !p.is_empty())
            .ok_or_else(|| invalid(format!("--gres-conf wants NODE=FILE, got {spec:?}")))?;
        let text = read_if_there(Path::new(path))?.ok_or_else(|| {
            invalid(format!(
                "GRES_CONF_{}: no file {path}",
                node.to_ascii_uppercase()
            ))
        })?;
        overrides.push(Override {
            node: node.to_string(),
            path: path.to_string(),
            text,
        });
    }
    let inputs = Inputs {
        node_gres,
        existing_gres: read_if_there(&a.existing_gres)?,
        mig_include: read_if_there(Path::new(&settings.mig_include))?,
        overrides,
    };
    let files = render(&settings, &inputs)?;
    for (name, text) in [
        ("slurm.conf", &files.slurm_conf),
        ("gres.conf", &files.gres_conf),
        ("cgroup.conf", &files.cgroup_conf),
        ("devices", &files.devices),
    ] {
        let path = a.out.join(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cluster-conf: error: {e:#}");
            ExitCode::from(exit_code_for(&e) as u8)
        }
    }
}
