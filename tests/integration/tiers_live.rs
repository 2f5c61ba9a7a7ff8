//! Permission tiers from Slurm, live: three Unix users in two accounts on the
//! cluster with accounting and `PrivateData=jobs` (slurm.conf and
//! slurmdbd.conf): `ys-alice` and `ys-bob` in `vision`, alice its
//! coordinator; `ys-carol` in `robots`, a Slurm operator. Each sees what
//! Slurm lets them see; the coordinator cancels a team member's run; a plain
//! user's attempt is refused and nothing is cancelled; a run whose directory
//! the team lead cannot read is shown from Slurm's data.
//!
//! `slurm/test-all.sh` runs these in its accounting pass.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;

use crate::common::{self, *};

const NEEDS: &str = "needs the local Slurm cluster with accounting (ACCOUNTING=1 MIN_JOB_AGE=10 slurm/cluster.sh up)";

const ALICE: &str = "ys-alice";
const BOB: &str = "ys-bob";
const CAROL: &str = "ys-carol";
/// A plain member of `robots` (the registry's outsider to `vision`).
const DAVE: &str = "ys-dave";

fn sh(cmd: &str) -> Output {
    Command::new("bash").args(["-c", cmd]).output().unwrap()
}

/// The users, accounts, coordinator and operator: made once per test binary
/// (every test of this module calls this; the first does the work while the
/// others wait on the lock), idempotent, and safe beside another process
/// doing the same (`slurm/users.sh` serialises user creation across
/// processes; sacctmgr's "nothing new added" is success).
fn setup_tiers() {
    static DONE: std::sync::Mutex<bool> = std::sync::Mutex::new(false);
    let mut done = DONE.lock().unwrap_or_else(|e| e.into_inner());
    if !*done {
        setup_tiers_once();
        *done = true;
    }
}

fn setup_tiers_once() {
    let conf = String::from_utf8_lossy(
        &Command::new("scontrol")
            .args(["show", "config"])
            .output()
            .unwrap()
            .stdout,
    )
    .to_string();
    assert!(
        conf.lines()
            .any(|l| l.starts_with("PrivateData") && l.contains("jobs")),
        "this test {NEEDS} (PrivateData=jobs)"
    );
    // Homes are private, as on a real cluster.
    common::ensure_users(true, &[ALICE, BOB, CAROL, DAVE]);
    for cmd in [
        "sacctmgr -i add account vision Description=vision Organization=tests",
        "sacctmgr -i add account robots Description=robots Organization=tests",
        "sacctmgr -i add user ys-alice Account=vision",
        "sacctmgr -i add user ys-bob Account=vision",
        "sacctmgr -i add user ys-carol Account=robots",
        "sacctmgr -i add user ys-dave Account=robots",
        // An account with no Unix group of its name.
        "sacctmgr -i add account lab Description=lab Organization=tests",
        "sacctmgr -i add user ys-bob Account=lab",
        "sacctmgr -i add coordinator account=vision names=ys-alice",
        "sacctmgr -i modify user ys-carol set AdminLevel=Operator",
    ] {
        let out = sh(cmd);
        // "Nothing new added" is success too; a refusal is not.
        assert!(
            out.status.success() || out.status.code() == Some(1),
            "{cmd}: {out:?}"
        );
    }
    // The Unix groups named as the accounts (a `file://` registry's mapping,
    // docs/registry.md): the members, the coordinators and the operator.
    common::ensure_group("vision", &[ALICE, BOB, CAROL]);
    common::ensure_group("robots", &[CAROL, DAVE]);
    let users = String::from_utf8_lossy(
        &sh("sacctmgr -n -P show user ys-alice,ys-carol withcoord format=User,AdminLevel,Coordinators").stdout,
    )
    .to_string();
    assert!(users.contains("ys-alice|None|vision"), "{users}");
    assert!(users.contains("ys-carol|Operator|"), "{users}");
    wait_for_slurmctld_to_know_the_tiers();
}

/// sacctmgr writes the database; slurmctld learns of a new coordinator or
/// operator from slurmdbd a moment later. Until then, with
/// `PrivateData=jobs`, squeue hides a member's jobs from the coordinator
/// (on a machine where the tiers were just made, `list --account` missed
/// bob's run). So: a held job of bob's in `vision`, polled until the
/// coordinator and the operator both see it. Twice, on the first run after
/// `slurm/reset.sh`, slurmctld had not learnt it after minutes (not seen
/// on a cluster brought up by hand, quiet): if it has not after 30 s,
/// `scontrol reconfigure` (which also gives slurmctld the uids of users
/// that Unix did not know when their records came), and a failure says what
/// slurmctld and the database hold.
#[track_caller]
fn wait_for_slurmctld_to_know_the_tiers() {
    let out = sh(&format!(
        "runuser -u {BOB} -- sbatch --parsable -H --account=vision --chdir=/tmp \
         --output=/dev/null --job-name=tiers-probe --wrap=true"
    ));
    assert!(out.status.success(), "the probe job: {out:?}");
    let job = String::from_utf8_lossy(&out.stdout)
        .trim()
        .split(';')
        .next()
        .unwrap_or("")
        .to_string();
    assert!(job.parse::<u64>().is_ok(), "the probe job's id: {out:?}");
    // Cancelled however this ends, a failure included.
    struct Probe(String);
    impl Drop for Probe {
        fn drop(&mut self) {
            let _ = sh(&format!("scancel {}", self.0));
        }
    }
    let _probe = Probe(job.clone());
    let sees = |user: &str| {
        let seen = sh(&format!("runuser -u {user} -- squeue -h -j {job} -o %i"));
        String::from_utf8_lossy(&seen.stdout).trim() == job
    };
    let both = || [ALICE, CAROL].iter().all(|u| sees(u));
    let first = std::time::Instant::now();
    let patience = crate::common::patience(Duration::from_secs(30));
    while !both() && first.elapsed() < patience {
        std::thread::sleep(Duration::from_millis(300));
    }
    if !both() {
        let out = sh("scontrol reconfigure");
        assert!(out.status.success(), "scontrol reconfigure: {out:?}");
        let state = || {
            String::from_utf8_lossy(
                &sh("sacctmgr -n -P show cluster format=Cluster,ControlHost,ControlPort; \
                     sacctmgr -n -P show user ys-alice,ys-bob,ys-carol withcoord format=User,AdminLevel,Coordinators; \
                     scontrol show assoc_mgr users=ys-alice,ys-bob,ys-carol flags=users")
                .stdout,
            )
            .to_string()
        };
        crate::common::wait_until(
            Duration::from_secs(60),
            &format!(
                "slurmctld showing {BOB}'s job {job} to {ALICE} and {CAROL} after `scontrol reconfigure` \
                 (what it and the database hold: {})",
                state()
            ),
            both,
        );
    }
}

struct Tiers {
    dir: tempfile::TempDir,
    standin: PathBuf,
    bin: PathBuf,
}

impl Tiers {
    fn new() -> Tiers {
        let dir = shared_tempdir();
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/pcb");
        copy_dir(&src.join("dataset"), &dir.path().join("dataset"));
        let standin = copy_for_everyone(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/standin/yolo"),
            dir.path(),
        );
        Tiers {
            dir,
            standin,
            bin: bin_for_everyone(),
        }
    }

    /// yolo-sched run as `user`, with their own home and state.
    fn cmd(&self, user: &str) -> Command {
        self.cmd_with(user, &[])
    }

    /// `cmd` with more variables.
    fn cmd_with(&self, user: &str, vars: &[(&str, &str)]) -> Command {
        let mut c = Command::new("runuser");
        c.args(["-u", user, "--", "env"]);
        for (k, v) in vars {
            c.arg(format!("{k}={v}"));
        }
        c.arg(format!("HOME=/home/{user}"))
            .arg("XDG_STATE_HOME=")
            .arg(format!("YOLO_SCHED_YOLO={}", self.standin.display()))
            .arg("YOLO_STANDIN_EPOCH_SECONDS=2")
            .arg("NO_COLOR=1")
            .arg(&self.bin);
        c
    }

    fn yolo(&self, user: &str, args: &[&str]) -> Output {
        run(self.cmd(user).args(args))
    }

    #[track_caller]
    fn json(&self, user: &str, args: &[&str]) -> Value {
        let out = self.yolo(user, args);
        assert_eq!(out.status.code(), Some(0), "{user} {args:?}: {out:?}");
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{user} {args:?}: {e}: {out:?}"))
    }

    /// A long run (40 epochs of 2 s) of `user` in `account`, its run
    /// directory at `workdir`; the run id.
    fn submit(&self, user: &str, account: &str, name: &str, workdir: &Path) -> String {
        let spec = format!(
            "version = 1\n[run]\nname = \"{name}\"\naccount = \"{account}\"\npartition = \"gpu\"\nworkdir = \"{}\"\n\
             [train]\nmodel = \"yolov8n.yaml\"\ndata = \"{}\"\nepochs = 40\nimgsz = 64\nbatch = 8\nworkers = 1\n\
             [stages.prepare]\npartition = \"cpu\"\n[stages.export]\npartition = \"cpu\"\nformats = [\"onnx\"]\n",
            workdir.display(),
            self.dir.path().join("dataset/data.yaml").display()
        );
        let path = self.dir.path().join(format!("{name}.toml"));
        std::fs::write(&path, spec).unwrap();
        let v = self.json(user, &["submit", "--json", path.to_str().unwrap()]);
        v["run_id"].as_str().unwrap().to_string()
    }
}

/// Root's view of a run's jobs: (job id, state) from `squeue -t all`.
fn jobs_of(run_id: &str) -> Vec<(String, String)> {
    let out = Command::new("squeue")
        .args(["-h", "-t", "all", "-O", "JobID:|,State:|,Comment:|"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(&format!("yolo-sched:{run_id}:")))
        .map(|l| {
            let f: Vec<&str> = l.split('|').collect();
            (f[0].trim().to_string(), f[1].trim().to_string())
        })
        .collect()
}

/// Jobs of the run that Slurm has not finished with. COMPLETING counts: a
/// cancelled job stays so while its processes are killed, and the run
/// model (rightly) still calls its stage running.
fn active(run_id: &str) -> usize {
    jobs_of(run_id)
        .iter()
        .filter(|(_, s)| {
            !matches!(
                s.as_str(),
                "COMPLETED"
                    | "CANCELLED"
                    | "FAILED"
                    | "TIMEOUT"
                    | "OUT_OF_MEMORY"
                    | "NODE_FAIL"
                    | "PREEMPTED"
                    | "BOOT_FAIL"
                    | "DEADLINE"
            )
        })
        .count()
}

fn run_ids(list: &Value) -> Vec<String> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|r| r["run_id"].as_str().unwrap().to_string())
        .collect()
}

#[track_caller]
fn row<'a>(list: &'a Value, run_id: &str) -> &'a Value {
    list.as_array()
        .unwrap()
        .iter()
        .find(|r| r["run_id"] == run_id)
        .unwrap_or_else(|| panic!("{run_id} not in {list}"))
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
#[ignore = "needs the local Slurm cluster with accounting (ACCOUNTING=1 MIN_JOB_AGE=10 slurm/cluster.sh up)"]
fn each_tier_sees_and_cancels_what_slurm_allows() {
    let _cluster = common::cluster(module_path!());
    setup_tiers();
    let t = Tiers::new();
    let tag = format!(
        "{}-{}",
        std::process::id(),
        t.dir.path().file_name().unwrap().to_string_lossy()
    );
    // bob's run lives in his private home: alice cannot read it.
    let bob_dir = PathBuf::from(format!("/home/{BOB}/tiers-{tag}/run"));
    let bob_run = t.submit(BOB, "vision", "tiers-bob", &bob_dir);
    // alice's run is in a directory everyone can read.
    let alice_run = t.submit(
        ALICE,
        "vision",
        "tiers-alice",
        &t.dir.path().join("alice-run"),
    );
    let carol_run = t.submit(
        CAROL,
        "robots",
        "tiers-carol",
        &t.dir.path().join("carol-run"),
    );
    for r in [&bob_run, &alice_run, &carol_run] {
        assert!(active(r) > 0, "{r} is queued: {:?}", jobs_of(r));
    }

    // The coordinator sees the account's runs, bob's from Slurm's data alone.
    let list = t.json(ALICE, &["list", "--account", "vision", "--json"]);
    let ids = run_ids(&list);
    assert!(ids.contains(&bob_run) && ids.contains(&alice_run), "{list}");
    assert!(!ids.contains(&carol_run), "{list}");
    let b = row(&list, &bob_run);
    assert_eq!(b["user"], BOB, "{b}");
    assert_eq!(b["account"], "vision", "{b}");
    assert_eq!(b["facts"]["kind"], "slurm", "bob's home is private: {b}");
    assert_eq!(b["workdir"], bob_dir.display().to_string(), "{b}");
    assert!(
        ["pending", "running"].contains(&b["state"].as_str().unwrap()),
        "{b}"
    );
    let a = row(&list, &alice_run);
    assert_eq!(a["facts"]["kind"], "manifest", "{a}");
    assert_eq!(a["name"], "tiers-alice", "{a}");
    // One squeue and one sacct, whatever the number of runs.
    let trace = t.dir.path().join("list-trace");
    let out = run(t
        .cmd_with(
            ALICE,
            &[("YOLO_SCHED_SLURM_TRACE", trace.to_str().unwrap())],
        )
        .args(["list", "--account", "vision", "--json"]));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let calls = read(&trace);
    let programs: Vec<&str> = calls
        .lines()
        .map(|l| l.split_whitespace().next().unwrap_or(""))
        .collect();
    assert_eq!(programs, ["squeue", "sacct"], "{calls}");
    // Text output marks the run shown from Slurm's data.
    let out = t.yolo(ALICE, &["list", "--account", "vision"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let table = text(&out);
    assert!(table.contains(&format!("{bob_run} *")), "{table}");
    assert!(
        table.contains("cannot read: shown from Slurm's data"),
        "{table}"
    );

    // --all-users: the coordinator sees vision only; the operator sees all.
    let all = run_ids(&t.json(ALICE, &["list", "--all-users", "--json"]));
    assert!(
        all.contains(&bob_run) && !all.contains(&carol_run),
        "{all:?}"
    );
    let all = run_ids(&t.json(CAROL, &["list", "--all-users", "--json"]));
    for r in [&bob_run, &alice_run, &carol_run] {
        assert!(all.contains(r), "the operator sees {r}: {all:?}");
    }
    // A plain user sees their own jobs only, whatever they ask for.
    let mine = run_ids(&t.json(BOB, &["list", "--account", "vision", "--json"]));
    assert!(
        mine.contains(&bob_run) && !mine.contains(&alice_run),
        "{mine:?}"
    );
    let none = t.json(BOB, &["list", "--account", "robots", "--json"]);
    assert_eq!(none, serde_json::json!([]));
    let out = t.yolo(BOB, &["list", "--account", "robots"]);
    assert!(
        text(&out).contains("no runs of account robots that Slurm shows you"),
        "{out:?}"
    );

    // status of a team member's run, found through Slurm by its id.
    let st = t.json(ALICE, &["status", "--json", &bob_run]);
    assert_eq!(st["run_id"], bob_run.as_str(), "{st}");
    assert_eq!(st["user"], BOB, "{st}");
    assert_eq!(st["facts"]["kind"], "slurm", "{st}");
    let stages: Vec<&str> = st["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["stage"].as_str().unwrap())
        .collect();
    assert_eq!(stages, ["prepare", "train", "export"], "{st}");
    assert_eq!(st["stages"][1]["gres"], "gpu:1g.5gb:1", "the slice: {st}");
    let out = t.yolo(ALICE, &["status", &bob_run]);
    assert!(text(&out).contains("from Slurm's data only"), "{out:?}");
    // bob cannot even see alice's run by id (PrivateData): invalid input, nothing done.
    let out = t.yolo(BOB, &["status", &alice_run]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");

    // A plain user's cancel of a run he can read but not act on: Slurm's
    // refusal in plain words, exit 1, nothing cancelled.
    let before = active(&alice_run);
    // Once (stop 33, run 2, two CPU hogs) alice's training had failed by
    // here, 7 s after it started, and nothing said why: say it if it recurs.
    if before == 0 {
        let logs = t.yolo(ALICE, &["logs", &alice_run, "train"]);
        panic!(
            "alice's run {alice_run} ended before bob's cancel: {:?}\n{}\n{}",
            jobs_of(&alice_run),
            text(&logs),
            String::from_utf8_lossy(&logs.stderr)
        );
    }
    let out = t.yolo(
        BOB,
        &["cancel", t.dir.path().join("alice-run").to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let said = text(&out);
    assert!(said.contains("Slurm refused to cancel"), "{said}");
    assert!(said.contains("permission denied"), "{said}");
    assert!(
        said.contains(&format!("nothing of run {alice_run} was cancelled")),
        "{said}"
    );
    assert!(said.contains("coordinator"), "{said}");
    assert_eq!(
        active(&alice_run),
        before,
        "nothing of alice's run was cancelled"
    );

    // The coordinator cancels a team member's run.
    let out = t.yolo(ALICE, &["cancel", "--json", &bob_run]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let c: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(!c["cancelled"].as_array().unwrap().is_empty(), "{c}");
    crate::common::wait_until(Duration::from_secs(30), "bob's run cancelled", || {
        active(&bob_run) == 0
    });
    assert!(
        jobs_of(&bob_run).iter().any(|(_, s)| s == "CANCELLED"),
        "{:?}",
        jobs_of(&bob_run)
    );
    // The coordinator watches it end (found through Slurm, as status is).
    let out = run_bounded(
        t.cmd_with(ALICE, &[("YOLO_SCHED_WATCH_INTERVAL", "0.5")])
            .args(["watch", &bob_run]),
        Duration::from_secs(60),
    )
    .expect("watch ended");
    assert_eq!(out.status.code(), Some(1), "a cancelled run: {out:?}");
    assert!(text(&out).contains("cancelled"), "{out:?}");
    // Its logs are in bob's private directory: said so, exit 1.
    let out = t.yolo(ALICE, &["logs", &bob_run]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(text(&out).contains("cannot be read"), "{out:?}");
    // The operator cancels anyone's run.
    let out = t.yolo(CAROL, &["cancel", &alice_run]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    crate::common::wait_until(Duration::from_secs(30), "alice's run cancelled", || {
        active(&alice_run) == 0
    });
    // report --account: the team's runs through Slurm, in the one run model.
    let rep = t.json(
        ALICE,
        &[
            "report",
            "--account",
            "vision",
            "--section",
            "runs",
            "--json",
        ],
    );
    let by_run = rep["runs"]["by_run"]
        .as_array()
        .unwrap_or_else(|| panic!("{rep}"));
    for r in [&bob_run, &alice_run] {
        let one = by_run
            .iter()
            .find(|x| x["run_id"] == r.as_str())
            .unwrap_or_else(|| panic!("{r} in {rep}"));
        assert_eq!(one["state"], "cancelled", "{one}");
    }
    assert!(
        !by_run.iter().any(|x| x["run_id"] == carol_run.as_str()),
        "{rep}"
    );
    let ids: Vec<String> = jobs_of(&carol_run).into_iter().map(|(id, _)| id).collect();
    if !ids.is_empty() {
        let _ = Command::new("scancel").args(&ids).output();
    }
    let _ = std::fs::remove_dir_all(format!("/home/{BOB}/tiers-{tag}"));
}

/// The registry's rights come from the same accounts: a private version of
/// `vision` is read by its members (bob publishes, alice coordinates), by an
/// operator (carol), and by nobody else (dave, of `robots`): not listed, not
/// shown, not pulled, not trained from (exit 2, nothing queued), and on the
/// `file://` registry not even readable as a file. Tags and removal are for
/// the publisher, the coordinator and operators; a public version is read by
/// all; a record written by one user in another's name is not used.
#[test]
#[ignore = "needs the local Slurm cluster with accounting (ACCOUNTING=1 MIN_JOB_AGE=10 slurm/cluster.sh up)"]
fn registry_versions_are_read_by_their_accounts_members_only() {
    let _cluster = common::cluster(module_path!());
    setup_tiers();
    let t = Tiers::new();
    let reg = t.dir.path().join("registry");
    std::fs::create_dir(&reg).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&reg, std::fs::Permissions::from_mode(0o1777)).unwrap();
    }
    let site = t.dir.path().join("site.toml");
    std::fs::write(
        &site,
        format!("[registry]\nurl = \"file://{}\"\n", reg.display()),
    )
    .unwrap();
    let weights = t.dir.path().join("weights.pt");
    let ok = Command::new("python3")
        .args([
            "-c",
            "import zipfile,sys; z=zipfile.ZipFile(sys.argv[1],'w'); z.writestr('archive/data.pkl', b'w'*5000); z.close()",
        ])
        .arg(&weights)
        .status()
        .unwrap();
    assert!(ok.success());
    let models = |user: &str, args: &[&str]| {
        run(t
            .cmd_with(user, &[("YOLO_SCHED_SITE", site.to_str().unwrap())])
            .arg("models")
            .args(args))
    };
    let code = |o: &Output| o.status.code();
    let stderr = |o: &Output| String::from_utf8_lossy(&o.stderr).to_string();

    // Bob publishes under his default account (vision, from accounting).
    let w = weights.to_str().unwrap();
    let out = models(BOB, &["import", w, "--name", "pcb-vision", "--json"]);
    assert_eq!(code(&out), Some(0), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["model"]["account"], "vision", "{v}");
    assert_eq!(v["model"]["public"], false);
    let record = reg.join("models/pcb-vision/versions/00000001.json");
    let st = sh(&format!("stat -c '%a %U %G' {}", record.display()));
    assert_eq!(
        String::from_utf8_lossy(&st.stdout).trim(),
        "640 ys-bob vision"
    );
    let out = models(BOB, &["import", w, "--name", "base", "--public", "--json"]);
    assert_eq!(code(&out), Some(0), "{out:?}");
    // Under an account with no Unix group the file system cannot help: said,
    // and yolo-sched's own check is what refuses outsiders.
    let out = models(BOB, &["import", w, "--name", "pcb-lab", "--account", "lab"]);
    assert_eq!(code(&out), Some(0), "{out:?}");
    assert!(
        stderr(&out).contains("there is no Unix group `lab` here"),
        "{}",
        stderr(&out)
    );

    // Members, the coordinator and the operator read it.
    for user in [ALICE, BOB, CAROL] {
        let out = models(user, &["show", "pcb-vision", "--json"]);
        assert_eq!(code(&out), Some(0), "{user}: {out:?}");
    }
    let listed = |user: &str| {
        let out = models(user, &["list", "--json"]);
        assert_eq!(code(&out), Some(0), "{user}: {out:?}");
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        let names: Vec<String> = v["models"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| format!("{}@{}", m["name"].as_str().unwrap(), m["version"]))
            .collect();
        (names, v["hidden"].as_u64().unwrap())
    };
    assert_eq!(
        listed(ALICE),
        (vec!["base@1".into(), "pcb-vision@1".into()], 1)
    );
    assert_eq!(listed(CAROL).0.len(), 3);

    // Dave (robots) does not: not listed, not shown, not pulled, not a file he can open.
    assert_eq!(listed(DAVE), (vec!["base@1".into()], 2));
    let out = models(DAVE, &["show", "pcb-vision@1"]);
    assert_eq!(code(&out), Some(2), "{out:?}");
    assert!(
        stderr(&out).contains("file system does not let you read its record"),
        "{}",
        stderr(&out)
    );
    let out = models(DAVE, &["show", "pcb-lab@1"]);
    assert_eq!(code(&out), Some(2), "{out:?}");
    assert!(
        stderr(&out).contains("belongs to the Slurm account `lab` and is not public"),
        "{}",
        stderr(&out)
    );
    let pulled = t.dir.path().join("dave-pull");
    let out = models(
        DAVE,
        &["pull", "pcb-vision@1", "--to", pulled.to_str().unwrap()],
    );
    assert_eq!(code(&out), Some(2), "{out:?}");
    assert!(!pulled.exists(), "nothing is written for a refused pull");
    let out = models(DAVE, &["show", "pcb-vision"]);
    assert_eq!(code(&out), Some(2), "{out:?}");
    assert!(
        stderr(&out).contains("no version of model `pcb-vision` is readable by you"),
        "{}",
        stderr(&out)
    );
    let cat = sh(&format!("runuser -u {DAVE} -- cat {}", record.display()));
    assert!(
        !cat.status.success(),
        "the file system keeps the record to vision too"
    );
    // The public version he reads and pulls (its blob is 0644 in a 1733 directory).
    let out = models(DAVE, &["pull", "base", "--to", pulled.to_str().unwrap()]);
    assert_eq!(code(&out), Some(0), "{out:?}");
    assert!(pulled.join("weights.pt").is_file());
    let ls = sh(&format!(
        "runuser -u {DAVE} -- ls {}",
        reg.join("blobs/sha256").display()
    ));
    assert!(!ls.status.success(), "nobody lists the blobs: {ls:?}");

    // doctor says what he reads, and what an administrator opened up.
    let doctor = |user: &str| {
        let out = run(t
            .cmd_with(user, &[("YOLO_SCHED_SITE", site.to_str().unwrap())])
            .arg("doctor"));
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let said = doctor(DAVE);
    assert!(
        said.contains("registry accounts: you read the private versions of `robots`"),
        "{said}"
    );
    assert!(said.contains("ok    registry directory:"), "{said}");
    assert!(!said.contains("registry blobs"), "{said}");
    sh(&format!(
        "chmod 0755 {}",
        reg.join("blobs/sha256").display()
    ));
    let said = doctor(DAVE);
    sh(&format!(
        "chmod 1733 {}",
        reg.join("blobs/sha256").display()
    ));
    assert!(
        said.contains("warn  registry blobs:") && said.contains("chmod 1733"),
        "{said}"
    );

    // The site's default model must be public, or newcomers cannot use it.
    let plain_site = read(&site);
    std::fs::write(
        &site,
        format!("{plain_site}[defaults]\nmodel = \"registry:base\"\n"),
    )
    .unwrap();
    let said = doctor(DAVE);
    assert!(
        said.contains(
            "ok    registry default model: [defaults] model = \"registry:base\" is base@1, public"
        ),
        "{said}"
    );
    std::fs::write(
        &site,
        format!("{plain_site}[defaults]\nmodel = \"registry:pcb-lab\"\n"),
    )
    .unwrap();
    let said = doctor(BOB);
    assert!(
        said.contains("warn  registry default model:") && said.contains("not public"),
        "{said}"
    );
    let said = doctor(DAVE);
    assert!(
        said.contains("FAIL  registry default model:") && said.contains("`lab`"),
        "{said}"
    );
    std::fs::write(&site, plain_site).unwrap();

    // Nor does he train from it: exit 2 at the spec's line, nothing queued.
    let spec = t.dir.path().join("dave.toml");
    std::fs::write(
        &spec,
        format!(
            "version = 1\n[run]\nname = \"dave-reg\"\naccount = \"robots\"\npartition = \"gpu\"\nworkdir = \"{}\"\n\
             [train]\nmodel = \"registry:pcb-lab@1\"\ndata = \"{}\"\nepochs = 1\nimgsz = 64\nbatch = 8\n",
            t.dir.path().join("dave-runs").display(),
            t.dir.path().join("dataset/data.yaml").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&spec, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let before = sh(&format!("squeue -h -u {DAVE} -t all | wc -l"));
    let out = run(
        Tiers::cmd_with(&t, DAVE, &[("YOLO_SCHED_SITE", site.to_str().unwrap())])
            .args(["submit"])
            .arg(&spec),
    );
    assert_eq!(code(&out), Some(2), "{out:?}");
    let err = stderr(&out);
    assert!(
        err.contains("dave.toml:"),
        "the spec's file and line: {err}"
    );
    assert!(err.contains("belongs to the Slurm account `lab`"), "{err}");
    let after = sh(&format!("squeue -h -u {DAVE} -t all | wc -l"));
    assert_eq!(before.stdout, after.stdout, "nothing queued");
    // Carol (an operator) may: the same spec validates for her.
    let out = run(
        Tiers::cmd_with(&t, CAROL, &[("YOLO_SCHED_SITE", site.to_str().unwrap())])
            .args(["validate"])
            .arg(&spec),
    );
    assert_eq!(code(&out), Some(0), "{out:?}");

    // Dave cannot publish in vision's name, tag or remove its version.
    let out = models(
        DAVE,
        &["import", w, "--name", "fake", "--account", "vision"],
    );
    assert_eq!(code(&out), Some(2), "{out:?}");
    assert!(
        stderr(&out).contains("not a member of the Slurm account `vision`"),
        "{}",
        stderr(&out)
    );
    let out = models(DAVE, &["remove", "base@1"]);
    assert_eq!(code(&out), Some(2), "{out:?}");
    assert!(
        stderr(&out)
            .contains("only its publisher, a coordinator of its account, or a Slurm operator"),
        "{}",
        stderr(&out)
    );
    // The refused attempt is in Dave's audit trail.
    let trail = read(Path::new("/home/ys-dave/.local/state/yolo-sched/audit.log"));
    assert!(
        trail.lines().any(|l| l.contains("\"models remove\"")
            && l.contains("refused")
            && l.contains("base@1")),
        "{trail}"
    );
    // Alice, the coordinator, tags and removes bob's version.
    let out = models(ALICE, &["tag", "pcb-vision@1", "production"]);
    assert_eq!(code(&out), Some(0), "{out:?}");
    let out = models(ALICE, &["remove", "pcb-vision@1"]);
    assert_eq!(code(&out), Some(0), "{out:?}");

    // A record Dave writes in Bob's name is not used.
    let forged = reg.join("models/base/versions/00000002.json");
    let text = read(&reg.join("models/base/versions/00000001.json"))
        .replace("\"version\": 1,", "\"version\": 2,");
    let out = sh(&format!(
        "runuser -u {DAVE} -- tee {} >/dev/null <<'EOF'\n{text}\nEOF",
        forged.display()
    ));
    assert!(out.status.success(), "{out:?}");
    let out = models(ALICE, &["list", "--json"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let problems = v["problems"].to_string();
    assert!(
        problems.contains("says ys-bob published it, but its file belongs to ys-dave"),
        "{v}"
    );
    assert!(
        !v["models"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["version"] == 2),
        "{v}"
    );
}
