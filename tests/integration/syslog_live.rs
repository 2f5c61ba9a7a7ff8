//! The site-wide audit trail, live: a real `rsyslogd` (Debian's rsyslog) on a
//! private socket receives one RFC 5424 record per state-changing command
//! (`submit`, `cancel`, `resume`), with the command as MSGID, the user, the
//! run and the jobs in its JSON, and the sender's trusted uid.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use crate::common::{self, *};
use crate::run_fixture::RunFixture;
use serde_json::Value;

/// rsyslogd in the foreground on `dir/log.sock`, writing `dir/messages`.
struct Rsyslog {
    child: Child,
    dir: PathBuf,
}

impl Rsyslog {
    #[track_caller]
    fn start(dir: &Path) -> Rsyslog {
        let conf = format!(
            "global(workDirectory=\"{d}\")\n\
             module(load=\"imuxsock\" SysSock.Use=\"off\")\n\
             input(type=\"imuxsock\" Socket=\"{d}/log.sock\" CreatePath=\"on\" Annotate=\"on\" \
             ParseTrusted=\"on\" UseSpecialParser=\"off\" ParseHostname=\"on\")\n\
             template(name=\"t\" type=\"string\" string=\"%syslogfacility-text%.%syslogseverity-text% \
             app=%app-name% msgid=%msgid% uid=%$!uid% %msg%\\n\")\n\
             *.* action(type=\"omfile\" file=\"{d}/messages\" template=\"t\")\n",
            d = dir.display()
        );
        std::fs::write(dir.join("rsyslog.conf"), conf).unwrap();
        let child = Command::new("rsyslogd")
            .args(["-n", "-f"])
            .arg(dir.join("rsyslog.conf"))
            .arg("-i")
            .arg(dir.join("rsyslog.pid"))
            .spawn()
            .unwrap_or_else(|e| panic!("rsyslogd is needed (Debian package rsyslog): {e}"));
        crate::common::wait_until(Duration::from_secs(20), "rsyslogd's socket", || {
            dir.join("log.sock").exists()
        });
        Rsyslog {
            child,
            dir: dir.to_path_buf(),
        }
    }

    /// The records received so far with this MSGID, as (line, JSON).
    fn records(&self, msgid: &str) -> Vec<(String, Value)> {
        let text = std::fs::read_to_string(self.dir.join("messages")).unwrap_or_default();
        text.lines()
            .filter(|l| l.contains(&format!(" msgid={msgid} ")))
            .map(|l| {
                let json = &l[l.find('{').expect("JSON in the message")..];
                (l.to_string(), serde_json::from_str(json).unwrap())
            })
            .collect()
    }

    #[track_caller]
    fn wait_for(&self, msgid: &str, n: usize) -> Vec<(String, Value)> {
        crate::common::wait_for_seen(
            Duration::from_secs(20),
            &format!("{n} `{msgid}` record(s)"),
            || format!("{:?}", std::fs::read_to_string(self.dir.join("messages"))),
            || Some(self.records(msgid)).filter(|r| r.len() >= n),
        )
    }
}

impl Drop for Rsyslog {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
#[ignore = "needs the local Slurm cluster (slurm/cluster.sh up) and rsyslogd"]
fn every_state_changing_command_reaches_syslog_with_user_run_and_jobs() {
    let _cluster = common::cluster_shared(module_path!());
    let f = RunFixture::new();
    let log = tempfile::tempdir().unwrap();
    let rsyslog = Rsyslog::start(log.path());
    let site = f.path().join("site.toml");
    std::fs::write(
        &site,
        format!(
            "[audit]\nsyslog = true\nfacility = \"local3\"\ntag = \"yolo-audit\"\nsocket = \"{}\"\n",
            log.path().join("log.sock").display()
        ),
    )
    .unwrap();
    let spec = f.spec("syslogged");
    let mut c = f.cmd();
    c.env("YOLO_SCHED_SITE", &site)
        .env("YOLO_STANDIN_EPOCH_SECONDS", "5");
    let out = run(c.args(["submit", "--json"]).arg(&spec));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let run_id = v["run_id"].as_str().unwrap().to_string();
    let ids = crate::common::submitted_ids(&v);

    let submit = rsyslog.wait_for("submit", 1);
    let (line, rec) = &submit[0];
    assert!(
        line.starts_with("local3.notice app=yolo-audit msgid=submit uid=0 "),
        "{line}"
    );
    assert_eq!(rec["run_id"], run_id.as_str());
    assert_eq!(rec["outcome"], "ok");
    assert_eq!(rec["user"], yolo_sched::identity::current_user().as_str());
    let sent: Vec<u64> = rec["job_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j.as_u64().unwrap())
        .collect();
    assert_eq!(sent, ids);

    let mut c = f.cmd();
    c.env("YOLO_SCHED_SITE", &site);
    let out = run(c.args(["cancel", &run_id]));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let cancel = rsyslog.wait_for("cancel", 1);
    assert_eq!(cancel[0].1["run_id"], run_id.as_str());
    assert!(!cancel[0].1["job_ids"].as_array().unwrap().is_empty());
    common::wait_jobs(&ids, Duration::from_secs(60));

    let mut c = f.cmd();
    c.env("YOLO_SCHED_SITE", &site)
        .env("YOLO_STANDIN_EPOCH_SECONDS", "0.1");
    let out = run(c.args(["resume", &run_id]));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let resume = rsyslog.wait_for("resume", 1);
    assert_eq!(resume[0].1["run_id"], run_id.as_str());
    // The user's own log has the same records.
    let own = read(&f.path().join("state/yolo-sched/audit.log"));
    assert_eq!(own.lines().count(), 3, "{own}");
    let mut c = f.cmd();
    c.env("YOLO_SCHED_SITE", &site);
    let _ = run(c.args(["cancel", &run_id]));
}

#[test]
fn a_misspelt_audit_section_or_facility_is_invalid_input() {
    let dir = tempfile::tempdir().unwrap();
    let site = dir.path().join("site.toml");
    std::fs::write(&site, "[audit]\nsyslog = true\nfacility = \"locl3\"\n").unwrap();
    let spec = dir.path().join("s.toml");
    std::fs::write(&spec, "version = 1\n").unwrap();
    let out = run(yolo()
        .env("YOLO_SCHED_SITE", &site)
        .args(["audit", "--json"]));
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("did you mean `local3`"),
        "{out:?}"
    );
}
