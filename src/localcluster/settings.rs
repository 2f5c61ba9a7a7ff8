//! The script's settings, checked: what `slurm/cluster.sh` passes, as text,
//! and the typed form the files are written from. A bad value is an
//! exit-status-2 error naming the setting and the value.

use anyhow::Result;

use crate::error::invalid;

/// The settings as given (the script's variables, unchecked).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RawSettings {
    /// The first line of every file the script owns.
    pub marker: String,
    pub instance: String,
    pub cluster_name: String,
    /// `SlurmctldHost=` and every node's `NodeHostname=`.
    pub hostname: String,
    pub ctld_port: String,
    /// Node `node<i>` listens on base + i, `mig1` on base + 100, `small1` on
    /// base + 200, the pool's on base + 300 and + 301.
    pub slurmd_base_port: String,
    pub dbd_port: String,
    pub first_job_id: String,
    pub spool_dir: String,
    pub run_dir: String,
    pub log_dir: String,
    /// The fake device files' directory (one directory per node below it).
    pub dev_dir: String,
    /// Their character-device major (named in gres.conf's header).
    pub dev_major: String,
    pub nodes: String,
    pub accounting: String,
    pub pool: String,
    pub cgroups: String,
    pub mig_node: String,
    pub min_job_age: String,
    pub sched_params: String,
    /// Path of node-setup's slurm.conf include (read by the caller; named in
    /// messages and comments).
    pub mig_include: String,
    /// Path of the `NODE_GRES` file, empty for none.
    pub node_gres: String,
}

/// The settings, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub marker: String,
    pub instance: u32,
    pub cluster_name: String,
    pub hostname: String,
    pub ctld_port: u32,
    pub slurmd_base_port: u32,
    pub dbd_port: u32,
    pub first_job_id: u64,
    pub spool_dir: String,
    pub run_dir: String,
    pub log_dir: String,
    pub dev_dir: String,
    pub dev_major: u32,
    pub nodes: u32,
    pub accounting: bool,
    pub pool: bool,
    pub cgroups: bool,
    pub mig_node: bool,
    /// As given (digits), written as given.
    pub min_job_age: String,
    pub sched_params: String,
    pub mig_include: String,
    pub node_gres: Option<String>,
}

fn flag(name: &str, v: &str) -> Result<bool> {
    match v {
        "0" => Ok(false),
        "1" => Ok(true),
        _ => Err(invalid(format!("{name} must be 0 or 1, got '{v}'"))),
    }
}

fn number<T: std::str::FromStr>(name: &str, v: &str) -> Result<T> {
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid(format!("{name} must be a number, got '{v}'")));
    }
    v.parse()
        .map_err(|_| invalid(format!("{name} is out of range, got '{v}'")))
}

/// A value written into a config file as one word: no blanks, no `#`, no
/// line break.
fn word(name: &str, v: &str) -> Result<String> {
    if v.is_empty() || v.contains(|c: char| c.is_whitespace() || c == '#' || c.is_control()) {
        return Err(invalid(format!(
            "{name} must be one word without `#`, got '{v}'"
        )));
    }
    Ok(v.to_string())
}

impl Settings {
    /// Checks every setting, with the script's own wording where it had one.
    pub fn check(raw: &RawSettings) -> Result<Settings> {
        let nodes = &raw.nodes;
        let b = nodes.as_bytes();
        let nodes_ok = matches!(b.len(), 1 | 2)
            && (b'1'..=b'9').contains(&b[0])
            && b[1..].iter().all(u8::is_ascii_digit);
        if !nodes_ok {
            return Err(invalid(format!("NODES must be 1..99, got '{nodes}'")));
        }
        let accounting = flag("ACCOUNTING", &raw.accounting)?;
        let pool = flag("POOL", &raw.pool)?;
        let cgroups = flag("CGROUPS", &raw.cgroups)?;
        let mig_node = flag("MIG_NODE", &raw.mig_node)?;
        let age = &raw.min_job_age;
        if age.is_empty() || !age.bytes().all(|b| b.is_ascii_digit()) {
            return Err(invalid(format!("MIN_JOB_AGE must be seconds, got '{age}'")));
        }
        let sp = &raw.sched_params;
        if !sp
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_=,.:-".contains(&b))
        {
            return Err(invalid(format!(
                "SCHED_PARAMS must be comma-separated key=value items, got '{sp}'"
            )));
        }
        let instance: u32 = number("INSTANCE", &raw.instance)?;
        if !(1..=9).contains(&instance) || raw.instance.len() != 1 {
            return Err(invalid(format!(
                "INSTANCE must be 1..9, got '{}'",
                raw.instance
            )));
        }
        if instance != 1 && mig_node {
            return Err(invalid(
                "MIG_NODE=1 is for instance 1 only (node-setup's end-to-end test)",
            ));
        }
        if !raw.marker.starts_with('#') || raw.marker.contains('\n') {
            return Err(invalid(format!(
                "the marker must be one comment line, got {:?}",
                raw.marker
            )));
        }
        Ok(Settings {
            marker: raw.marker.clone(),
            instance,
            cluster_name: word("the cluster name", &raw.cluster_name)?,
            hostname: word("the host name", &raw.hostname)?,
            ctld_port: number("the slurmctld port", &raw.ctld_port)?,
            slurmd_base_port: number("the slurmd base port", &raw.slurmd_base_port)?,
            dbd_port: number("the slurmdbd port", &raw.dbd_port)?,
            first_job_id: number("the first job id", &raw.first_job_id)?,
            spool_dir: word("the spool directory", &raw.spool_dir)?,
            run_dir: word("the run directory", &raw.run_dir)?,
            log_dir: word("the log directory", &raw.log_dir)?,
            dev_dir: word("the device directory", &raw.dev_dir)?,
            dev_major: number("the device major", &raw.dev_major)?,
            nodes: number("NODES", nodes)?,
            accounting,
            pool,
            cgroups,
            mig_node,
            min_job_age: age.clone(),
            sched_params: sp.clone(),
            mig_include: word("the MIG node's include", &raw.mig_include)?,
            node_gres: (!raw.node_gres.is_empty()).then(|| raw.node_gres.clone()),
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::error::exit_code_for;

    /// Instance 1's settings as `slurm/cluster.sh` passes them by default.
    pub(crate) fn raw() -> RawSettings {
        RawSettings {
            marker: "# managed by yolo-sched slurm/cluster.sh".into(),
            instance: "1".into(),
            cluster_name: "yolo".into(),
            hostname: "host".into(),
            ctld_port: "6817".into(),
            slurmd_base_port: "17000".into(),
            dbd_port: "6819".into(),
            first_job_id: "1".into(),
            spool_dir: "/var/spool/yolo-slurm".into(),
            run_dir: "/run/yolo-slurm".into(),
            log_dir: "/var/log/yolo-slurm".into(),
            dev_dir: "/dev/yolo-fakegpu".into(),
            dev_major: "240".into(),
            nodes: "1".into(),
            accounting: "0".into(),
            pool: "0".into(),
            cgroups: "0".into(),
            mig_node: "0".into(),
            min_job_age: "1800".into(),
            sched_params: String::new(),
            mig_include: "/etc/slurm/yolo-mig-node.conf".into(),
            node_gres: String::new(),
        }
    }

    /// A change to the settings, and what the error must say.
    type Case = (fn(&mut RawSettings), &'static str);

    #[test]
    fn bad_values_name_the_setting_and_exit_2() {
        let cases: Vec<Case> = vec![
            (|r| r.nodes = "0".into(), "NODES must be 1..99, got '0'"),
            (|r| r.nodes = "100".into(), "NODES must be 1..99"),
            (|r| r.pool = "2".into(), "POOL must be 0 or 1, got '2'"),
            (|r| r.cgroups = "yes".into(), "CGROUPS must be 0 or 1"),
            (|r| r.accounting = "".into(), "ACCOUNTING must be 0 or 1"),
            (|r| r.mig_node = "x".into(), "MIG_NODE must be 0 or 1"),
            (
                |r| r.min_job_age = "1m".into(),
                "MIN_JOB_AGE must be seconds",
            ),
            (
                |r| r.sched_params = "a=b c".into(),
                "SCHED_PARAMS must be comma-separated",
            ),
            (|r| r.instance = "10".into(), "INSTANCE must be 1..9"),
            (
                |r| {
                    r.instance = "2".into();
                    r.mig_node = "1".into();
                },
                "MIG_NODE=1 is for instance 1 only",
            ),
            (
                |r| r.hostname = "a b".into(),
                "the host name must be one word",
            ),
            (
                |r| r.ctld_port = "-1".into(),
                "the slurmctld port must be a number",
            ),
        ];
        for (change, want) in cases {
            let mut r = raw();
            change(&mut r);
            let err = Settings::check(&r).unwrap_err();
            assert_eq!(exit_code_for(&err), 2, "{err}");
            assert!(err.to_string().contains(want), "{err} (want {want})");
        }
        let ok = Settings::check(&raw()).unwrap();
        assert_eq!((ok.nodes, ok.instance, ok.node_gres), (1, 1, None));
    }
}
