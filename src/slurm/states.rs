//! Slurm's job states, and whether `sacct` says the cluster keeps no
//! accounting: the one place that knows what each state means for a run.
//! `status`, `watch`, `list` (through `run::status`) and `report` (its
//! queue counts and its runs section) all classify states here. Pending
//! reasons are in `reasons`.
//!
//! Slurm prints long state names (`squeue -O State`, `sacct -o State`);
//! `sacct` may add words or a `+` (`CANCELLED by 1000`, `CANCELLED+`), which
//! [`base`] strips.

/// What a job state means for the job's stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Class {
    /// In the queue, not started (or put back into it): it may still run.
    Waiting,
    /// Started and holding its allocation (slices, memory), stopped or not.
    Running,
    /// Ended with exit code 0.
    Completed,
    /// Ended without finishing its work, for a reason the owner did not ask for.
    Failed,
    /// Withdrawn by a person (`scancel`, an administrator) or by federation.
    Cancelled,
    /// A state this version does not know.
    Unknown,
}

/// The state word without what `sacct` adds: `CANCELLED by 1000` and
/// `CANCELLED+` → `CANCELLED`. Upper case, as Slurm prints it.
pub fn base(state: &str) -> &str {
    let word = state.split_whitespace().next().unwrap_or("");
    word.trim_end_matches('+')
}

/// Classify a long state name (`RUNNING`, `OUT_OF_MEMORY`, `CANCELLED by 0`).
///
/// The choices that are not obvious:
///
/// - `SUSPENDED` (and `STOPPED`) are **running**. Neither pending nor finished:
///   the job started, is paused (`scontrol suspend`, gang scheduling, preemption
///   with `PreemptMode=SUSPEND`) and keeps its allocation, so its slice stays
///   taken and it carries on where it stopped once resumed. It never goes back
///   to waiting in the queue, and `watch` must keep following it. `status`
///   still shows Slurm's own word (`suspended`) in the task row.
/// - `DEADLINE` is **failed**, like `TIMEOUT`: Slurm ended the job because it
///   could not finish by its `--deadline`; nobody cancelled it.
/// - `PREEMPTED` is **failed**: the job was ended to make room for another
///   (`PreemptMode=CANCEL`); its owner did not ask for that, and `resume`
///   restarts it. A preemption that requeues shows as `REQUEUED`: waiting.
/// - `BOOT_FAIL`, `NODE_FAIL`, `OUT_OF_MEMORY`, `TIMEOUT` are **failed**: the
///   script did not finish its work.
/// - `SPECIAL_EXIT` is **failed**: the script ended with an exit value the site
///   marks as special, and the job stays held until someone acts.
/// - `REQUEUED`, `REQUEUE_HOLD`, `REQUEUE_FED`, `RESV_DEL_HOLD` are **waiting**:
///   the job is back in the queue and may still run.
/// - `REVOKED` is **cancelled**: a federated sibling withdrawn because the job
///   started on another cluster.
/// - `COMPLETING`, `CONFIGURING`, `STAGE_OUT`, `SIGNALING`, `RESIZING` are
///   **running**: the job holds its allocation; only `COMPLETED` is completed.
pub fn classify(state: &str) -> Class {
    match base(state) {
        "PENDING" | "REQUEUED" | "REQUEUE_HOLD" | "REQUEUE_FED" | "RESV_DEL_HOLD" => Class::Waiting,
        "RUNNING" | "CONFIGURING" | "COMPLETING" | "STAGE_OUT" | "SIGNALING" | "RESIZING"
        | "SUSPENDED" | "STOPPED" => Class::Running,
        "COMPLETED" => Class::Completed,
        "FAILED" | "TIMEOUT" | "OUT_OF_MEMORY" | "NODE_FAIL" | "BOOT_FAIL" | "PREEMPTED"
        | "DEADLINE" | "SPECIAL_EXIT" => Class::Failed,
        "CANCELLED" | "REVOKED" => Class::Cancelled,
        _ => Class::Unknown,
    }
}

/// True when `sacct`'s complaint means the cluster keeps no job accounting
/// (no slurmdbd), not a passing failure: callers then stop asking it.
pub fn accounting_off(stderr: &str) -> bool {
    let text = stderr.to_lowercase();
    text.contains("accounting storage is disabled") || text.contains("not configured with slurmdbd")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every state Slurm 22.05–24.x documents for jobs, with its class.
    const TABLE: &[(&str, Class)] = &[
        ("PENDING", Class::Waiting),
        ("REQUEUED", Class::Waiting),
        ("REQUEUE_HOLD", Class::Waiting),
        ("REQUEUE_FED", Class::Waiting),
        ("RESV_DEL_HOLD", Class::Waiting),
        ("RUNNING", Class::Running),
        ("CONFIGURING", Class::Running),
        ("COMPLETING", Class::Running),
        ("STAGE_OUT", Class::Running),
        ("SIGNALING", Class::Running),
        ("RESIZING", Class::Running),
        ("SUSPENDED", Class::Running),
        ("STOPPED", Class::Running),
        ("COMPLETED", Class::Completed),
        ("FAILED", Class::Failed),
        ("TIMEOUT", Class::Failed),
        ("OUT_OF_MEMORY", Class::Failed),
        ("NODE_FAIL", Class::Failed),
        ("BOOT_FAIL", Class::Failed),
        ("PREEMPTED", Class::Failed),
        ("DEADLINE", Class::Failed),
        ("SPECIAL_EXIT", Class::Failed),
        ("CANCELLED", Class::Cancelled),
        ("REVOKED", Class::Cancelled),
    ];

    #[test]
    fn every_documented_state_has_its_class() {
        for (state, class) in TABLE {
            assert_eq!(classify(state), *class, "{state}");
        }
        assert_eq!(classify("SOME_FUTURE_STATE"), Class::Unknown);
        assert_eq!(classify(""), Class::Unknown);
    }

    #[test]
    fn suspended_is_neither_waiting_nor_finished() {
        assert_eq!(classify("SUSPENDED"), Class::Running);
        assert_eq!(classify("PENDING"), Class::Waiting);
    }

    #[test]
    fn what_sacct_adds_is_stripped() {
        assert_eq!(base("CANCELLED by 1000"), "CANCELLED");
        assert_eq!(base("CANCELLED+"), "CANCELLED");
        assert_eq!(classify("CANCELLED by 0"), Class::Cancelled);
        assert_eq!(classify(" COMPLETED "), Class::Completed);
    }

    #[test]
    fn accounting_off_is_recognised() {
        assert!(accounting_off(
            "sacct: error: Slurm accounting storage is disabled"
        ));
        assert!(accounting_off(
            "sacct: fatal: slurm not configured with slurmdbd"
        ));
        assert!(!accounting_off(
            "sacct: error: Socket timed out on send/recv operation"
        ));
    }
}
