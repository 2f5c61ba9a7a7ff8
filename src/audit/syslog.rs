//! The site-wide audit trail: one structured record per state-changing
//! command sent to the system log, which ordinary users cannot rewrite.
//!
//! `[audit]` in the site file turns it on and picks the facility, the tag and
//! the socket (`/dev/log`, where journald and rsyslog both listen). Each
//! record is one RFC 5424 message whose MSGID is the command (`submit`,
//! `cancel`, `resume`, `node-setup`, `guard-stop`) and whose text is the same
//! JSON line the user's own audit log gets. journald adds the sender's
//! trusted `_UID`/`_PID`; rsyslog can too (`imuxsock` annotation).

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::Deserialize;

use super::record::AuditRecord;
use crate::config::Site;

/// Facilities by name, as syslog(3) numbers them.
const FACILITIES: [(&str, u8); 20] = [
    ("kern", 0),
    ("user", 1),
    ("mail", 2),
    ("daemon", 3),
    ("auth", 4),
    ("syslog", 5),
    ("lpr", 6),
    ("news", 7),
    ("uucp", 8),
    ("cron", 9),
    ("authpriv", 10),
    ("ftp", 11),
    ("local0", 16),
    ("local1", 17),
    ("local2", 18),
    ("local3", 19),
    ("local4", 20),
    ("local5", 21),
    ("local6", 22),
    ("local7", 23),
];

/// Severity of every record: notice (a normal but significant condition).
const NOTICE: u8 = 5;
/// RFC 5424 limits APP-NAME to 48 printable characters; shorter is kinder.
const MAX_TAG: usize = 32;
/// A datagram larger than this is cut by many syslog daemons.
const MAX_MESSAGE: usize = 8 * 1024;

/// `[audit]` of the site file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuditSection {
    /// Send every record to syslog too (default off).
    pub syslog: bool,
    /// Syslog facility (default `authpriv`: readable by administrators only
    /// on most distributions).
    pub facility: Option<String>,
    /// The APP-NAME (default `yolo-sched`).
    pub tag: Option<String>,
    /// The syslog socket (default `/dev/log`).
    pub socket: Option<PathBuf>,
}

/// Where and how records go to syslog.
#[derive(Debug, Clone)]
pub struct Syslog {
    pub facility: u8,
    pub tag: String,
    pub socket: PathBuf,
}

impl Syslog {
    /// From the site's `[audit]`: `None` when syslog is off. Bad values are
    /// invalid input naming the key.
    pub fn from_site(site: &Site) -> Result<Option<Syslog>> {
        let a: AuditSection = site.section("audit")?;
        let facility_name = a.facility.as_deref().unwrap_or("authpriv");
        let Some(&(_, facility)) = FACILITIES.iter().find(|(n, _)| *n == facility_name) else {
            return Err(crate::error::invalid(format!(
                "site file: [audit] facility = {:?} is not a syslog facility{}; expected one of {}",
                crate::text::clip(facility_name),
                crate::suggest::did_you_mean(facility_name, FACILITIES.iter().map(|(n, _)| *n)),
                FACILITIES.map(|(n, _)| n).join(", ")
            )));
        };
        let tag = a.tag.clone().unwrap_or_else(|| "yolo-sched".into());
        if tag.is_empty()
            || tag.len() > MAX_TAG
            || !tag
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        {
            return Err(crate::error::invalid(format!(
                "site file: [audit] tag = {:?}: expected 1 to {MAX_TAG} letters, digits, '-', '_' or '.'",
                crate::text::clip(&tag)
            )));
        }
        if !a.syslog {
            return Ok(None);
        }
        Ok(Some(Syslog {
            facility,
            tag,
            socket: a.socket.unwrap_or_else(|| PathBuf::from("/dev/log")),
        }))
    }

    /// One RFC 5424 message for `record`.
    pub fn message(&self, record: &AuditRecord) -> Result<Vec<u8>> {
        let pri = u16::from(self.facility) * 8 + u16::from(NOTICE);
        let host = sd_word(&record.host);
        let msgid = sd_word(&record.command);
        let json = serde_json::to_string(record)?;
        let mut text = format!(
            "<{pri}>1 {} {host} {} {} {msgid} - {json}",
            record
                .time
                .to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
            self.tag,
            std::process::id(),
        );
        if text.len() > MAX_MESSAGE {
            // The JSON stays whole in the user's own log; syslog gets its head.
            text = crate::text::clip_to(&text, MAX_MESSAGE - 64);
        }
        Ok(text.into_bytes())
    }

    /// Send one record; a second at most (a stuck daemon never holds a command).
    pub fn send(&self, record: &AuditRecord) -> Result<()> {
        let sock = UnixDatagram::unbound().context("opening a syslog socket")?;
        sock.set_write_timeout(Some(Duration::from_secs(1)))?;
        send_to(&sock, &self.message(record)?, &self.socket)
    }
}

fn send_to(sock: &UnixDatagram, bytes: &[u8], path: &Path) -> Result<()> {
    let n = sock
        .send_to(bytes, path)
        .with_context(|| format!("sending the audit record to syslog at {}", path.display()))?;
    if n != bytes.len() {
        bail!(
            "syslog at {} took {n} of {} bytes",
            path.display(),
            bytes.len()
        );
    }
    Ok(())
}

/// A header field: printable ASCII without spaces, or `-`.
fn sd_word(s: &str) -> String {
    let w: String = s
        .chars()
        .filter(|c| c.is_ascii_graphic())
        .take(48)
        .collect();
    if w.is_empty() {
        "-".into()
    } else {
        w
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(text: &str) -> Site {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("site.toml");
        std::fs::write(&p, text).unwrap();
        Site::load(Some(&p)).unwrap()
    }

    #[test]
    fn off_by_default_and_checked_when_on() {
        assert!(Syslog::from_site(&Site::default()).unwrap().is_none());
        let s = Syslog::from_site(&site("[audit]\nsyslog = true\nfacility = \"local3\"\n"))
            .unwrap()
            .unwrap();
        assert_eq!((s.facility, s.tag.as_str()), (19, "yolo-sched"));
        let e = Syslog::from_site(&site("[audit]\nsyslog = true\nfacility = \"local8\"\n"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("did you mean `local0`") || e.contains("local7"),
            "{e}"
        );
        assert!(Syslog::from_site(&site("[audit]\ntag = \"a b\"\n")).is_err());
        assert!(Syslog::from_site(&site("[audit]\nsyslgo = true\n")).is_err());
    }

    #[test]
    fn a_record_is_one_rfc5424_message_with_the_command_as_msgid() {
        let s = Syslog {
            facility: 10,
            tag: "yolo-sched".into(),
            socket: "/dev/null".into(),
        };
        let rec = AuditRecord::new("cancel", Some("run-1"), vec![42], "ok");
        let m = String::from_utf8(s.message(&rec).unwrap()).unwrap();
        assert!(m.starts_with("<85>1 "), "{m}");
        let fields: Vec<&str> = m.splitn(8, ' ').collect();
        assert_eq!(fields[3], "yolo-sched");
        assert_eq!(fields[5], "cancel");
        assert_eq!(fields[6], "-");
        let json: serde_json::Value = serde_json::from_str(fields[7]).unwrap();
        assert_eq!(json["run_id"], "run-1");
    }

    #[test]
    fn records_arrive_on_a_datagram_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.sock");
        let server = UnixDatagram::bind(&path).unwrap();
        let s = Syslog {
            facility: 16,
            tag: "t".into(),
            socket: path,
        };
        s.send(&AuditRecord::new("submit", Some("r"), vec![], "ok"))
            .unwrap();
        let mut buf = vec![0u8; 65536];
        let n = server.recv(&mut buf).unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).contains(" t "));
        let missing = Syslog {
            socket: dir.path().join("nobody"),
            ..s
        };
        assert!(missing
            .send(&AuditRecord::new("submit", None, vec![], "ok"))
            .is_err());
    }
}
