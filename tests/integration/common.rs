//! Helpers shared by the integration tests that drive the built binary and
//! the live local Slurm cluster (`slurm/cluster.sh up`).
#![allow(dead_code)] // not every helper is used by every module

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// Set by the README's test command and CI: the cluster must be there.
pub const EXPECT_CLUSTER_ENV: &str = "YOLO_SCHED_EXPECT_CLUSTER";

pub fn bin() -> PathBuf {
    // `YOLO_SCHED_TEST_BIN`: another build of the binary (a release build,
    // for the timings a test prints, docs/benchmarks.md).
    std::env::var_os("YOLO_SCHED_TEST_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_yolo-sched")))
}

/// A `yolo-sched` command with a clean environment for settings: no
/// `YOLO_SCHED_*` variable of the developer's shell leaks in, and `HOME`,
/// `XDG_STATE_HOME` and `XDG_CONFIG_HOME` point into this test's own scratch
/// directory (`test_home`), so no test reads or writes the real
/// `~/.local/state`. A test that wants other places sets them after this.
pub fn yolo() -> Command {
    let mut cmd = Command::new(bin());
    isolate(&mut cmd);
    cmd
}

/// What `yolo()` does to a command: every `YOLO_SCHED_*` variable removed,
/// `HOME` and the XDG directories in `test_home()`, no colour. For commands
/// that run the binary some other way (under `sh -c`, `runuser`).
pub fn isolate(cmd: &mut Command) -> &mut Command {
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("YOLO_SCHED_") {
            cmd.env_remove(&name);
        }
    }
    let home = test_home();
    cmd.env("HOME", &home)
        .env("XDG_STATE_HOME", home.join(".local/state"))
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("NO_COLOR", "1")
}

thread_local! {
    static TEST_HOME: std::cell::OnceCell<tempfile::TempDir> = const { std::cell::OnceCell::new() };
}

/// This test's stand-in home directory, made on first use and removed when the
/// test ends. libtest runs each test on its own thread, so "per thread" is "per
/// test"; a helper thread a test spawns gets a home of its own. Mode 1777 like
/// `shared_tempdir`: a command run as another user (`runuser`) may write there.
pub fn test_home() -> PathBuf {
    TEST_HOME.with(|home| {
        home.get_or_init(|| {
            use std::os::unix::fs::PermissionsExt;
            let dir = tempfile::Builder::new()
                .prefix("yolo-sched-home-")
                .tempdir()
                .expect("a test home directory");
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777))
                .expect("opening the test home to every user");
            dir
        })
        .path()
        .to_path_buf()
    })
}

/// Run with a time limit (scaled by `patience`, so it catches a hang, not a
/// slow machine); `None` when it had to be killed.
pub fn run_bounded(cmd: &mut Command, limit: Duration) -> Option<Output> {
    use std::process::Stdio;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running yolo-sched");
    // Read both pipes as the child writes, so a full pipe cannot stall it.
    let drain = |mut pipe: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            bytes
        })
    };
    let out = drain(Box::new(child.stdout.take().expect("piped")));
    let err = drain(Box::new(child.stderr.take().expect("piped")));
    let start = Instant::now();
    let limit = patience(limit);
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for yolo-sched") {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    Some(Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    })
}

/// The first label file (by name) of a dataset's labels directory.
#[track_caller]
pub fn first_label(labels: &Path) -> PathBuf {
    std::fs::read_dir(labels)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "txt"))
        .min()
        .unwrap_or_else(|| panic!("no label file in {}", labels.display()))
}

/// Run and return the output, printing it when the test fails later.
pub fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("running yolo-sched");
    eprintln!(
        "*** {:?}\n--- status: {}\n--- stdout:\n{}\n--- stderr:\n{}",
        cmd,
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn cluster_answers() -> bool {
    Command::new("scontrol")
        .arg("ping")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("is UP"))
        .unwrap_or(false)
}

/// Which modules' tests hold the cluster, and how many of each run.
struct Turn {
    holders: Vec<Holder>,
}

struct Holder {
    module: &'static str,
    /// Whether other shared modules may hold the cluster beside it.
    shared: bool,
    active: usize,
    /// When the module took its turn (for `YOLO_SCHED_TEST_TURNS`).
    since: Instant,
}

/// At most this many tests of one module on the cluster at once, however many
/// test threads there are (the test command runs many, so that tests that
/// need no cluster are not held up by those waiting for their turn).
const TESTS_PER_MODULE: usize = 4;

impl Turn {
    /// May a test of `module` start now?
    fn admits(&self, module: &str, shared: bool) -> bool {
        if let Some(h) = self.holders.iter().find(|h| h.module == module) {
            return h.active < TESTS_PER_MODULE;
        }
        if shared {
            self.holders.iter().all(|h| h.shared)
        } else {
            self.holders.is_empty()
        }
    }
}

static TURN: std::sync::Mutex<Turn> = std::sync::Mutex::new(Turn {
    holders: Vec::new(),
});

/// With `YOLO_SCHED_TEST_TURNS=FILE`, each module's turn on the cluster is
/// appended to FILE (`<module> <seconds>`), and each test's time on it
/// (`test <name> <seconds>`): where the suite's time goes.
fn note_turn(module: &str, since: Instant) {
    let Some(path) = std::env::var_os("YOLO_SCHED_TEST_TURNS") else {
        return;
    };
    use std::io::Write;
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = writeln!(f, "{module} {:.1}", since.elapsed().as_secs_f64());
    }
}
static TURN_CHANGED: std::sync::Condvar = std::sync::Condvar::new();

/// A live test's hold on the cluster; released when dropped (also on panic).
pub struct ClusterGuard {
    module: &'static str,
    /// When this test got the cluster (for `YOLO_SCHED_TEST_TURNS`).
    since: Instant,
}

impl Drop for ClusterGuard {
    fn drop(&mut self) {
        // libtest names each test's thread after the test.
        let test = std::thread::current().name().unwrap_or("?").to_string();
        note_turn(&format!("test {test}"), self.since);
        let mut turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = turn.holders.iter().position(|h| h.module == self.module) {
            turn.holders[i].active -= 1;
            if turn.holders[i].active == 0 {
                let done = turn.holders.remove(i);
                note_turn(done.module, done.since);
            }
        }
        TURN_CHANGED.notify_all();
    }
}

/// The live cluster for a test of `module` (`module_path!()`), alone: the
/// tests of one module run side by side, as they did when each file was its
/// own binary, and no other module's test runs meanwhile. For modules that
/// stop daemons, reconfigure the cluster, fill every slice or count every
/// job in it. Live tests are `#[ignore]`d, so this runs only when they were
/// asked for: no cluster then is a failure, not a skip.
#[track_caller]
pub fn cluster(module: &'static str) -> ClusterGuard {
    take_turn(module, false)
}

/// The live cluster for a test of `module`, beside other modules that share
/// it: for modules that only submit their own runs and look only at those
/// (jobs, run directories, their own stand-ins and relays), so another
/// module's jobs on the nodes change nothing they check. `slurm/test-all.sh`
/// runs the modules that take the cluster alone in a pass of their own.
#[track_caller]
pub fn cluster_shared(module: &'static str) -> ClusterGuard {
    take_turn(module, true)
}

#[track_caller]
fn take_turn(module: &'static str, shared: bool) -> ClusterGuard {
    let mut turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    while !turn.admits(module, shared) {
        turn = TURN_CHANGED.wait(turn).unwrap_or_else(|e| e.into_inner());
    }
    let now = Instant::now();
    match turn.holders.iter_mut().find(|h| h.module == module) {
        Some(h) => h.active += 1,
        None => turn.holders.push(Holder {
            module,
            shared,
            active: 1,
            since: now,
        }),
    }
    drop(turn);
    // Asked only once the turn is ours: a module before may have had
    // slurmctld stopped until the moment it gave the turn back. On failure
    // the guard's drop gives the turn back.
    let guard = ClusterGuard { module, since: now };
    assert!(
        cluster_answers(),
        "this test needs the local Slurm cluster but `scontrol ping` does not answer; \
         run `slurm/cluster.sh up`"
    );
    guard
}

/// A job's state from `squeue -t all` (finished jobs stay listed for MinJobAge).
pub fn job_state(job: u64) -> Option<String> {
    let out = Command::new("squeue")
        .args(["-h", "-t", "all", "-j", &job.to_string(), "-o", "%T"])
        .output()
        .ok()?;
    let s = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (!s.is_empty()).then_some(s)
}

/// Wait until every job has left PENDING/RUNNING; returns their final states.
#[track_caller]
pub fn wait_jobs(jobs: &[u64], limit: Duration) -> Vec<String> {
    let start = Instant::now();
    let limit = patience(limit);
    loop {
        let states: Vec<String> = jobs
            .iter()
            .map(|j| job_state(*j).unwrap_or_else(|| "UNKNOWN".into()))
            .collect();
        let done = states.iter().all(|s| {
            !matches!(
                s.as_str(),
                "PENDING" | "RUNNING" | "CONFIGURING" | "COMPLETING" | "UNKNOWN"
            )
        });
        if done {
            return states;
        }
        if start.elapsed() > limit {
            panic!("jobs {jobs:?} still not finished after {limit:?}: {states:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A scratch directory every user can write (jobs may run as `researcher`).
pub fn shared_tempdir() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("yolo-sched-test-")
        .tempdir_in(std::env::temp_dir())
        .expect("tempdir");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    dir
}

#[track_caller]
pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// A copy of the yolo-sched binary that every user can run, for tests that act
/// as an ordinary user: the checkout may live where only root can reach it
/// (under /root, mode 0700). Made once per test binary.
pub fn bin_for_everyone() -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    static COPY: std::sync::OnceLock<(tempfile::TempDir, PathBuf)> = std::sync::OnceLock::new();
    COPY.get_or_init(|| {
        let dir = tempfile::Builder::new()
            .prefix("yolo-sched-bin-")
            .tempdir()
            .unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = dir.path().join("yolo-sched");
        std::fs::copy(bin(), &path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        (dir, path)
    })
    .1
    .clone()
}

/// Copy `file` into `dir` with mode 0755 and return the copy's path.
pub fn copy_for_everyone(file: &Path, dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dest = dir.join(file.file_name().unwrap());
    std::fs::copy(file, &dest).unwrap();
    std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(0o755)).unwrap();
    dest
}

/// Copy a directory tree (the demo dataset into a test's scratch directory).
#[track_caller]
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap_or_else(|e| panic!("{}: {e}", from.display())) {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), &dest).unwrap();
        }
    }
}

/// The first `max` characters of a long output, for failure messages.
pub fn head(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        None => s.to_string(),
        Some((at, _)) => format!("{}… ({} more bytes)", &s[..at], s.len() - at),
    }
}

/// The real Ultralytics trainer's venv (`slurm/trainer.sh install`).
pub fn trainer_venv() -> PathBuf {
    PathBuf::from(
        std::env::var("YOLO_TRAINER_VENV")
            .unwrap_or_else(|_| "/opt/yolo-sched/trainer-ultralytics-8.4.190".into()),
    )
}

/// yolo-sched as live tests with the real trainer run it: `dir`'s own state,
/// the real Ultralytics on CPU as `yolo`, quick `watch` polling.
pub fn use_real_trainer(c: &mut Command, dir: &Path) {
    c.env("XDG_STATE_HOME", dir.join("state"))
        .env("YOLO_TRAINER_VENV", trainer_venv())
        .env(
            "YOLO_SCHED_YOLO",
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/trainer/yolo-cpu"),
        )
        .env("YOLO_SCHED_WATCH_INTERVAL", "0.5")
        .env("YOLO_SCHED_WATCH_MAX_INTERVAL", "2");
}

/// The job ids in `submit --json` output, in stage order.
pub fn submitted_ids(submit_json: &serde_json::Value) -> Vec<u64> {
    submit_json["jobs"]
        .as_array()
        .expect("submit --json has jobs")
        .iter()
        .map(|j| j["job_id"].as_u64().expect("a submitted job has an id"))
        .collect()
}

/// The epochs a `results.csv` records, in order (a resumed run appends rows).
pub fn epochs_in(results: &Path) -> Vec<u32> {
    std::fs::read_to_string(results)
        .unwrap_or_default()
        .lines()
        .skip(1)
        .filter_map(|l| l.split(',').next()?.trim().parse::<f64>().ok())
        .map(|e| e as u32)
        .collect()
}

#[test]
fn yolo_points_home_and_xdg_at_the_test_s_own_directory() {
    let env_of = |cmd: &Command, key: &str| {
        cmd.get_envs()
            .find(|(k, _)| *k == key)
            .and_then(|(_, v)| v.map(PathBuf::from))
    };
    let cmd = yolo();
    let home = test_home();
    assert!(home.is_dir() && home.starts_with(std::env::temp_dir()));
    assert_eq!(env_of(&cmd, "HOME"), Some(home.clone()));
    for key in ["XDG_STATE_HOME", "XDG_CONFIG_HOME"] {
        assert!(
            env_of(&cmd, key).is_some_and(|p| p.starts_with(&home)),
            "{key}"
        );
    }
    for (name, value) in cmd.get_envs() {
        if name.to_string_lossy().starts_with("YOLO_SCHED_") {
            assert_eq!(value, None, "{name:?} leaks in");
        }
    }
    // Another test (thread) gets another home; this one keeps its own.
    let other = std::thread::spawn(test_home).join().unwrap();
    assert_ne!(other, home);
    assert_eq!(test_home(), home);
}

/// A test's own world for the built binary: a scratch directory whose `bin/`
/// comes first on PATH (stand-in tools), whose `state/` is `XDG_STATE_HOME`,
/// and `yolo-sched` commands with `yolo()`'s clean environment (no
/// `YOLO_SCHED_*` of the developer's shell, `HOME` in `test_home`). Whole
/// outputs are compared with `assert_snapshot`, after `masked` takes the
/// scratch directory's path out of them.
///
/// ```ignore
/// let t = Test::new();
/// t.standin("squeue", "cat /path/to/recorded.txt")
///     .env("TZ", "UTC");
/// let text = t.stdout(&["list"]);
/// ```
pub struct Test {
    dir: tempfile::TempDir,
    env: std::cell::RefCell<Vec<(String, std::ffi::OsString)>>,
}

impl Default for Test {
    fn default() -> Self {
        Self::new()
    }
}

impl Test {
    pub fn new() -> Test {
        let dir = tempfile::Builder::new()
            .prefix("yolo-sched-test-")
            .tempdir()
            .expect("a test directory");
        std::fs::create_dir_all(dir.path().join("bin")).expect("the stand-ins' directory");
        Test {
            dir,
            env: Default::default(),
        }
    }

    /// The scratch directory.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A stand-in `name` first on PATH: a `/bin/sh` script running `body`.
    #[track_caller]
    pub fn standin(&self, name: &str, body: &str) -> &Test {
        use std::os::unix::fs::PermissionsExt;
        let path = self.path().join("bin").join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n"))
            .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        self
    }

    /// Write `text` to `rel` in the scratch directory (parents made);
    /// returns the file's path.
    #[track_caller]
    pub fn file(&self, rel: &str, text: &str) -> PathBuf {
        let path = self.path().join(rel);
        std::fs::create_dir_all(path.parent().expect("a file in a directory")).unwrap();
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        path
    }

    /// Set `key` for every command of this test.
    pub fn env(&self, key: &str, value: impl AsRef<std::ffi::OsStr>) -> &Test {
        self.env
            .borrow_mut()
            .push((key.to_string(), value.as_ref().to_os_string()));
        self
    }

    /// `yolo-sched` in this world.
    pub fn cmd(&self) -> Command {
        let mut c = yolo();
        let path = format!(
            "{}:{}",
            self.path().join("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        c.env("PATH", path)
            .env("XDG_STATE_HOME", self.path().join("state"));
        for (k, v) in self.env.borrow().iter() {
            c.env(k, v);
        }
        c
    }

    /// Run `yolo-sched ARGS` (output printed if the test fails later).
    pub fn run(&self, args: &[&str]) -> Output {
        run(self.cmd().args(args))
    }

    /// The standard output of `yolo-sched ARGS`, which must exit 0.
    #[track_caller]
    pub fn stdout(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("UTF-8 output")
    }

    /// `stdout` read as JSON.
    #[track_caller]
    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let text = self.stdout(args);
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{args:?}: {e}: {text}"))
    }

    /// `text` with this test's scratch directory written `<dir>`, so a
    /// snapshot does not depend on where the test ran.
    pub fn masked(&self, text: &str) -> String {
        text.replace(&self.path().display().to_string(), "<dir>")
    }
}

/// The environment variable that rewrites snapshots instead of comparing them.
pub const UPDATE_SNAPSHOTS_ENV: &str = "UPDATE_SNAPSHOTS";

/// Compare `actual` with the file `tests/snapshots/<name>`, or write the file
/// when `UPDATE_SNAPSHOTS=1`. A mismatch fails with a unified diff (snapshot →
/// actual); review the change and rerun with `UPDATE_SNAPSHOTS=1` to accept it.
#[track_caller]
pub fn assert_snapshot(name: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/snapshots")
        .join(name);
    if std::env::var(UPDATE_SNAPSHOTS_ENV).is_ok_and(|v| v == "1") {
        std::fs::create_dir_all(path.parent().expect("a snapshot directory")).unwrap();
        std::fs::write(&path, actual).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "snapshot {}: {e}; run with {UPDATE_SNAPSHOTS_ENV}=1 to write it",
            path.display()
        )
    });
    if expected != actual {
        let mut diff = yolo_sched::gres::unified_diff(&expected, actual, name, "actual");
        if !diff.contains("@@") {
            diff.push_str("(only line endings or the final newline differ)\n");
        }
        panic!(
            "output differs from the snapshot {}:\n{diff}\nif the change is intended, rerun with {UPDATE_SNAPSHOTS_ENV}=1 and commit the file",
            path.display()
        );
    }
}

/// Test users made by `slurm/users.sh`: created one at a time across
/// processes (its flock) and within this binary (a lock held while the script
/// runs), repaired when an interrupted earlier run left a home owned by
/// another uid, and asked of the script once per binary and user. `private`
/// gives the homes mode 0700, as on a real cluster.
#[track_caller]
pub fn ensure_users(private: bool, users: &[&str]) {
    use std::collections::BTreeSet;
    use std::sync::Mutex;
    static DONE: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
    let mut done = DONE.lock().unwrap_or_else(|e| e.into_inner());
    let key = |u: &str| format!("{u}:{private}");
    let missing: Vec<&str> = users
        .iter()
        .copied()
        .filter(|u| !done.contains(&key(u)))
        .collect();
    if missing.is_empty() {
        return;
    }
    let mut cmd = Command::new("bash");
    cmd.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("slurm/users.sh"))
        .arg("ensure");
    if private {
        cmd.arg("--private");
    }
    let out = cmd.args(&missing).output().expect("running slurm/users.sh");
    assert!(
        out.status.success(),
        "slurm/users.sh ensure {missing:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    done.extend(missing.iter().map(|u| key(u)));
}

/// `GROUP` exists with exactly `members` (`slurm/users.sh group`).
#[track_caller]
pub fn ensure_group(group: &str, members: &[&str]) {
    let out = Command::new("bash")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("slurm/users.sh"))
        .args(["group", group])
        .args(members)
        .output()
        .expect("running slurm/users.sh");
    assert!(
        out.status.success(),
        "slurm/users.sh group {group}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// How much longer than written a test waits before calling something hung.
/// A limit in a test catches a hang; it does not measure speed (benchmarks
/// do). The limits in these tests are written for a quiet machine; the test
/// command runs them in a debug build (about ten times slower than release)
/// on two cores loaded with real trainings and other tests, and under a CPU
/// hog. So every `run_bounded` and poll deadline is multiplied by this: 4 in
/// a debug build, 2 in a release one. `YOLO_SCHED_TEST_PATIENCE` (a positive
/// integer) overrides it, e.g. on a slower machine.
pub fn patience_factor() -> u32 {
    std::env::var("YOLO_SCHED_TEST_PATIENCE")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .filter(|&n| n > 0 && n <= 100)
        .unwrap_or(if cfg!(debug_assertions) { 4 } else { 2 })
}

/// `limit` scaled by `patience_factor`.
pub fn patience(limit: Duration) -> Duration {
    limit * patience_factor()
}

/// The one poll of the tests: call `find` every 200 ms until it returns
/// `Some`, and return what it found. When it still finds nothing after
/// `patience(limit)`, fail naming `what` was awaited. (`tune_live` and
/// `agent_fake` still poll by hand, to be moved here once the tune work
/// that edits them now has landed.)
#[track_caller]
pub fn wait_for<T>(limit: Duration, what: &str, find: impl FnMut() -> Option<T>) -> T {
    wait_for_seen(limit, what, String::new, find)
}

/// `wait_for`, whose failure also shows `seen()`: what there was instead
/// (the run's status, the processes left), asked once, at the deadline.
#[track_caller]
pub fn wait_for_seen<T>(
    limit: Duration,
    what: &str,
    seen: impl FnOnce() -> String,
    mut find: impl FnMut() -> Option<T>,
) -> T {
    let start = Instant::now();
    let limit = patience(limit);
    loop {
        if let Some(found) = find() {
            return found;
        }
        if start.elapsed() >= limit {
            let seen = seen();
            let seen = if seen.is_empty() {
                String::new()
            } else {
                format!("; seen instead: {seen}")
            };
            panic!("waited {limit:?} for {what}, in vain{seen}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `wait_for` a condition: poll `ok` until it holds; returns how long that
/// took.
#[track_caller]
pub fn wait_until(limit: Duration, what: &str, mut ok: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    wait_for(limit, what, || ok().then_some(()));
    start.elapsed()
}

/// Whether this test may act as root and as the user `nobody`. Where it may
/// not, it is skipped with a note, unless the run expects the cluster machine
/// (`YOLO_SCHED_EXPECT_CLUSTER=1`, the README's test command and CI): then it
/// fails, so a check that needs root can never pass by not running there.
#[track_caller]
pub fn as_root_and_nobody(what: &str) -> bool {
    let missing = if !nix::unistd::geteuid().is_root() {
        Some("not running as root")
    } else if nix::unistd::User::from_name("nobody")
        .ok()
        .flatten()
        .is_none()
    {
        Some("there is no user nobody")
    } else {
        None
    };
    match missing {
        None => true,
        Some(why) if std::env::var(EXPECT_CLUSTER_ENV).as_deref() == Ok("1") => {
            panic!("{what} cannot run: {why}, but {EXPECT_CLUSTER_ENV}=1")
        }
        Some(why) => {
            eprintln!("skipped: {what}: {why}");
            false
        }
    }
}
