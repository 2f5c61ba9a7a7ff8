//! The one model of a Slurm node, filled by both readers:
//! `cluster::parse` (`scontrol -o show node`, what submit, resume and
//! node-setup plan against) and `sinfo::parse_nodes` (`sinfo --json`, what
//! report and doctor show). The state predicates live here so that both
//! readers' nodes are judged the same way.
//!
//! | field | `scontrol -o show node` | `sinfo --json` (22.05) |
//! |---|---|---|
//! | `name` | `NodeName` | `name` |
//! | `state` | `State` as printed (`MIXED+DRAIN`, `DOWN*`) | `state` (`idle`) |
//! | `state_flags` | empty (the flags are in `state`) | `state_flags` (`DRAIN`) |
//! | `partitions` | `Partitions` | `partitions` |
//! | `gres` | `Gres` | `gres` |
//! | `gres_used` | empty (not asked) | `gres_used` |
//! | `cpus` | `CPUEfctv`, else `CPUTot` | `cpus` |
//! | `alloc_cpus` | `CPUAlloc` | `alloc_cpus` |
//! | `real_memory_mib` | `RealMemory` | `real_memory` |
//! | `memory_mib` | `RealMemory` − `MemSpecLimit` | `real_memory` (no spec limit given) |
//! | `reason` | `Reason` | `reason` |

use serde::Serialize;

use super::gres::GresItem;

/// One node, from either reader (see the table above for who fills what).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Node {
    pub name: String,
    /// The state as the source spells it: `IDLE`, `MIXED+DRAIN`, `DOWN*`
    /// from scontrol; the base state (`idle`) from sinfo.
    pub state: String,
    /// Flags given apart from the state (sinfo's `state_flags`: `DRAIN`,
    /// `NOT_RESPONDING`); empty from scontrol, which folds them into `state`.
    pub state_flags: Vec<String>,
    pub partitions: Vec<String>,
    #[serde(skip)]
    pub gres: Vec<GresItem>,
    /// GRES held by jobs now; only sinfo gives it.
    #[serde(skip)]
    pub gres_used: Vec<GresItem>,
    /// CPUs jobs can use (`CPUEfctv`: configured minus specialised cores).
    pub cpus: u32,
    pub alloc_cpus: u32,
    /// Configured memory, MiB.
    pub real_memory_mib: u64,
    /// Memory jobs can use, MiB (`RealMemory` minus `MemSpecLimit`).
    pub memory_mib: u64,
    /// Why an admin drained or downed it; empty when none.
    pub reason: String,
}

/// States and flags in which the scheduler places no job on a node.
const UNAVAILABLE: [&str; 10] = [
    "DOWN",
    "DRAIN",
    "DRAINED",
    "DRAINING",
    "FAIL",
    "FAILING",
    "FUTURE",
    "INVAL",
    "NOT_RESPONDING",
    "UNKNOWN",
];

impl Node {
    /// The state's words and the flags, upper case, whichever reader filled them.
    fn words(&self) -> impl Iterator<Item = String> + '_ {
        self.state
            .split('+')
            .map(|w| w.trim_end_matches('*').to_ascii_uppercase())
            .chain(self.state_flags.iter().map(|f| f.to_ascii_uppercase()))
    }

    /// Whether jobs can be placed on it now or once it frees up: not down,
    /// drained, failed, not responding or a future node.
    pub fn is_available(&self) -> bool {
        if self.state.ends_with('*') {
            return false; // not responding
        }
        !self.words().any(|w| UNAVAILABLE.contains(&w.as_str()))
    }

    /// `drained`, `idle`, `mixed` … with flags such as DRAIN folded in.
    pub fn display_state(&self) -> String {
        let mut s = self.state.to_lowercase();
        for flag in &self.state_flags {
            let flag = flag.to_lowercase();
            if !s.contains(&flag) {
                s.push('+');
                s.push_str(&flag);
            }
        }
        s
    }

    /// Down, drained, failed or not responding, as doctor lists them.
    pub fn is_unhealthy(&self) -> bool {
        let s = self.display_state();
        ["down", "drain", "inval", "fail", "not_responding"]
            .iter()
            .any(|b| s.contains(b))
    }

    /// The state in words people use: `drained` (drain flag, nothing
    /// running), `draining` (drain flag, jobs still running), else Slurm's
    /// base state with the flags that matter to a user.
    pub fn state_in_words(&self) -> String {
        let base = self.state.to_lowercase();
        let flags: Vec<String> = self.state_flags.iter().map(|f| f.to_lowercase()).collect();
        let has = |f: &str| flags.iter().any(|x| x == f) || base.contains(f);
        if has("drain") {
            return if matches!(base.as_str(), "mixed" | "allocated" | "completing") {
                "draining".to_string()
            } else if base == "down" {
                "down+drain".to_string()
            } else {
                "drained".to_string()
            };
        }
        let mut state = base;
        for f in ["not_responding", "maint", "reserved", "fail", "invalid"] {
            if flags.iter().any(|x| x == f) {
                state.push('+');
                state.push_str(f);
            }
        }
        state
    }

    /// How many GRES `name[:kind]` the node has.
    pub fn gres_count(&self, name: &str, kind: Option<&str>) -> u64 {
        self.gres
            .iter()
            .filter(|g| g.name == name && (kind.is_none() || g.kind.as_deref() == kind))
            .map(|g| g.count)
            .sum()
    }
}

/// True when the scheduler starts jobs on a node whose
/// [`Node::state_in_words`] is this.
pub fn accepts_jobs(state_in_words: &str) -> bool {
    matches!(
        state_in_words,
        "idle" | "mixed" | "allocated" | "completing"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(state: &str, flags: &[&str]) -> Node {
        Node {
            state: state.into(),
            state_flags: flags.iter().map(|f| f.to_string()).collect(),
            ..Node::default()
        }
    }

    #[test]
    fn both_spellings_of_a_drained_node_are_unavailable() {
        // scontrol folds the flag into the state; sinfo lists it apart.
        assert!(!node("IDLE+DRAIN", &[]).is_available());
        assert!(!node("idle", &["DRAIN"]).is_available());
        assert!(!node("mixed", &["NOT_RESPONDING"]).is_available());
        assert!(node("idle", &[]).is_available());
        assert!(node("idle", &["CLOUD"]).is_available());
        assert!(node("idle", &["DRAIN"]).is_unhealthy());
        assert!(node("DOWN*", &[]).is_unhealthy());
        assert!(!node("MIXED", &[]).is_unhealthy());
    }

    #[test]
    fn both_readers_fill_the_same_node() {
        let shape =
            super::super::cluster::parse(include_str!("../../tests/data/scontrol-shape-22.05.txt"))
                .unwrap();
        let listed = super::super::sinfo::parse_nodes(include_str!(
            "../../tests/data/sinfo-22.05-one-node.json"
        ))
        .unwrap();
        let (a, b) = (&shape.nodes[0], &listed[0]);
        assert_eq!(a.name, b.name);
        assert_eq!((a.cpus, a.alloc_cpus), (b.cpus, b.alloc_cpus));
        assert_eq!(
            (a.real_memory_mib, a.memory_mib),
            (b.real_memory_mib, b.memory_mib)
        );
        assert_eq!(a.partitions, b.partitions);
        assert_eq!(a.gres, b.gres);
        assert_eq!(a.display_state(), b.display_state());
        assert!(a.is_available() && b.is_available());
        assert!(b.gres_used.iter().all(|g| g.count == 0));

        let down = super::super::cluster::parse(
            "NodeName=n1 CPUTot=8 CPUAlloc=2 RealMemory=1000 State=DOWN* Reason=cable pulled [root@2026-12-01T10:00:00]\n",
        )
        .unwrap();
        assert_eq!(down.nodes[0].alloc_cpus, 2);
        assert_eq!(
            down.nodes[0].reason,
            "cable pulled [root@2026-12-01T10:00:00]"
        );
    }
}
