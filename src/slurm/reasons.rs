//! Slurm's pending-reason codes in plain words, and which of them mean a job
//! can never start.

/// The code of a reason as Slurm prints it: `ReqNodeNotAvail,
/// UnavailableNodes:node2` → `ReqNodeNotAvail`. Reasons that are sentences
/// (`Nodes required for job are DOWN, DRAINED …`) are kept whole.
pub fn code(reason: &str) -> &str {
    let reason = reason.trim();
    match reason.split_once(',') {
        Some((head, _)) if !head.contains(' ') => head,
        _ => reason,
    }
}

/// True for reasons that only change when someone fixes or cancels the job
/// (or an administrator changes the cluster's configuration): such jobs are
/// called out in the report, and `status`/`watch` say the run will never run.
/// `ReqNodeNotAvail` and `PartitionDown` are not among them: nodes and
/// partitions come back.
pub fn never_runnable(code: &str) -> bool {
    matches!(
        code,
        "DependencyNeverSatisfied"
            | "BadConstraints"
            | "PartitionTimeLimit"
            | "PartitionNodeLimit"
            | "PartitionConfig"
            | "MaxMemPerLimit"
            | "InvalidAccount"
            | "InvalidQOS"
            | "AccountNotAllowed"
            | "QOSNotAllowed"
    ) || ((code.starts_with("QOSMax") || code.starts_with("AssocMax"))
        && code.ends_with("PerJobLimit"))
}

/// A reason code in plain words. Unknown codes come back as they are.
pub fn describe(code: &str) -> String {
    let words = match code {
        "" | "None" => "just submitted, not yet considered",
        "Resources" => "waiting for free resources",
        "Priority" => "waiting behind higher-priority jobs",
        "Dependency" => "waiting for the jobs it depends on",
        "DependencyNeverSatisfied" => "can never run: dependency failed",
        "BadConstraints" => "can never run: asks for resources no node has",
        "ReqNodeNotAvail" => "the nodes it needs are down, drained or reserved",
        "Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority partitions" => {
            "the nodes it needs are down, drained or reserved"
        }
        "NodeDown" => "a node it needs is down",
        "BeginTime" => "waiting for its start time (--begin)",
        "JobHeldUser" => "held by its owner (scontrol release)",
        "JobHeldAdmin" => "held by an administrator",
        "JobArrayTaskLimit" => "array throttle reached (%N of --array)",
        "Reservation" => "waiting for its reservation",
        "Licenses" => "waiting for licenses",
        "PartitionDown" => "its partition is down",
        "PartitionInactive" => "its partition is inactive",
        "PartitionNodeLimit" => "asks for more nodes than its partition allows",
        "PartitionTimeLimit" => "time limit longer than its partition allows",
        "PartitionConfig" => "does not fit its partition's settings",
        "MaxMemPerLimit" => "asks more memory than the partition's MaxMemPerNode/MaxMemPerCPU",
        "AccountNotAllowed" => "its account may not use the partition",
        "QOSNotAllowed" => "its QOS may not use the partition",
        "InvalidAccount" => "invalid account",
        "InvalidQOS" => "invalid QOS",
        "QOSMaxJobsPerUserLimit" => "user's running-job limit in the QOS reached",
        "QOSMaxGRESPerUser" => "user's GPU/GRES limit in the QOS reached",
        "QOSGrpGRES" => "the QOS's total GPU/GRES limit reached",
        "AssocMaxJobsLimit" => "the account's running-job limit reached",
        "AssocGrpGRES" => "the account's total GPU/GRES limit reached",
        "launch failed requeued held" => "launch failed; requeued and held",
        "Prolog" => "running its prolog",
        "Cleaning" => "previous run being cleaned up",
        other if other.starts_with("QOS") => return format!("a QOS limit reached ({other})"),
        other if other.starts_with("Assoc") => {
            return format!("an account limit reached ({other})")
        }
        other => return other.to_string(),
    };
    words.to_string()
}

/// How a pending reason that never clears is shown.
pub const NEVER_RUNS: &str = "will never run: ";

/// A pending reason in plain words.
pub fn reason_in_words(reason: &str, gres: Option<&str>, upstream: Option<&str>) -> Option<String> {
    let slice = gres
        .and_then(crate::slurm::gres::parse_item)
        .map(|i| match i.kind {
            Some(k) if i.name == "gpu" => format!("a free {k} slice"),
            Some(k) => format!("free {} {k}", i.name),
            None => format!("a free {}", i.name),
        });
    let code = code(reason);
    if never_runnable(code) && code != "DependencyNeverSatisfied" {
        let words = match code {
            "BadConstraints" => "the request does not fit any node".to_string(),
            "PartitionTimeLimit" => {
                "its time limit is longer than the partition allows".to_string()
            }
            other => describe(other),
        };
        return Some(format!("{NEVER_RUNS}{words} ({code})"));
    }
    let text = match reason {
        "" | "None" => return None,
        "Resources" => format!(
            "waiting for {}",
            slice.unwrap_or_else(|| "free resources".into())
        ),
        "Priority" => "waiting behind jobs of higher priority".into(),
        "Dependency" => match upstream {
            Some(u) => format!("waiting for {u} to finish"),
            None => "waiting for the stage before it".into(),
        },
        "DependencyNeverSatisfied" => match upstream {
            Some(u) => format!("will never run: {u} failed"),
            None => "will never run: the stage before it failed".into(),
        },
        "JobHeldUser" | "JobHeldAdmin" => "held; `scontrol release` it".into(),
        "BeginTime" => "waiting for its start time".into(),
        "JobArrayTaskLimit" => "waiting: the sweep's max_parallel tasks are running".into(),
        "ReqNodeNotAvail" => "a node it needs is down, drained or reserved".into(),
        "QOSMaxJobsPerUserLimit" | "AssocMaxJobsLimit" => {
            "you have as many jobs running as your limit allows".into()
        }
        "QOSMaxGRESPerUser" | "AssocGrpGRES" => {
            "your group holds as many GPUs as its limit allows".into()
        }
        "NonZeroExitCode" => "the script exited with an error".into(),
        "TimeLimit" => "ran out of time".into(),
        "OutOfMemory" => "ran out of memory".into(),
        other if other.starts_with("Nodes required for job are DOWN") => {
            "a node it needs is down, drained or reserved".into()
        }
        other => other.to_string(),
    };
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes() {
        assert_eq!(
            code("ReqNodeNotAvail, UnavailableNodes:node2"),
            "ReqNodeNotAvail"
        );
        assert_eq!(code(" Resources "), "Resources");
        let sentence =
            "Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority partitions";
        assert_eq!(code(sentence), sentence);
    }

    #[test]
    fn words() {
        assert_eq!(describe("Resources"), "waiting for free resources");
        assert_eq!(
            describe("DependencyNeverSatisfied"),
            "can never run: dependency failed"
        );
        assert_eq!(
            describe("QOSMaxWallDurationPerJobLimit"),
            "a QOS limit reached (QOSMaxWallDurationPerJobLimit)"
        );
        assert_eq!(
            describe("AssocGrpCpuLimit"),
            "an account limit reached (AssocGrpCpuLimit)"
        );
        assert_eq!(describe("SomethingNew"), "SomethingNew");
        assert_eq!(
            describe(code("Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority partitions")),
            "the nodes it needs are down, drained or reserved"
        );
    }

    #[test]
    fn never_runnable_codes() {
        assert!(never_runnable("DependencyNeverSatisfied"));
        assert!(never_runnable("BadConstraints"));
        assert!(!never_runnable("Dependency"));
        assert!(!never_runnable("Resources"));
        assert!(never_runnable("MaxMemPerLimit"));
        assert!(never_runnable("PartitionTimeLimit"));
        assert!(never_runnable("QOSMaxWallDurationPerJobLimit"));
        assert!(!never_runnable("QOSMaxJobsPerUserLimit"));
        assert!(!never_runnable("ReqNodeNotAvail"));
    }
}
