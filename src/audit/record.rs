//! One record of the audit trail: who ran which state-changing command, on
//! which run and jobs, with what outcome. The user's log and syslog both
//! write it (`Trail`, `syslog::Syslog`).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AuditRecord {
    pub time: DateTime<Utc>,
    pub user: String,
    pub host: String,
    /// `submit`, `cancel`, `resume`, `node-setup`.
    pub command: String,
    pub run_id: Option<String>,
    #[serde(default)]
    pub job_ids: Vec<u64>,
    /// `ok`, or the error message.
    pub outcome: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl AuditRecord {
    pub fn new(command: &str, run_id: Option<&str>, job_ids: Vec<u64>, outcome: &str) -> Self {
        AuditRecord {
            time: Utc::now(),
            user: crate::identity::current_user(),
            host: crate::identity::host_name(),
            command: command.to_string(),
            run_id: run_id.map(str::to_string),
            job_ids,
            outcome: outcome.to_string(),
            detail: None,
        }
    }
}
