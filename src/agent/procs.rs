//! The trainer's processes, from `/proc`: is it alive, which processes descend
//! from it (the job's processes on a whole GPU), and stopping it: TERM (the
//! signal the train script's trainer exits on, keeping the last epoch's
//! `last.pt`), a grace period, then KILL for it and its descendants.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// `(state, ppid)` from `/proc/<pid>/stat`; the command name may hold spaces
/// and parentheses, so the fields are read after its last `)`.
fn stat(pid: i32) -> Option<(char, i32)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 1..];
    let mut f = rest.split_whitespace();
    let state = f.next()?.chars().next()?;
    let ppid = f.next()?.parse().ok()?;
    Some((state, ppid))
}

/// A process that exists and is not a zombie waiting to be reaped.
pub fn alive(pid: i32) -> bool {
    matches!(stat(pid), Some((s, _)) if s != 'Z' && s != 'X')
}

/// `pid` and every process below it.
pub fn tree(pid: i32) -> BTreeSet<u32> {
    let mut children: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for e in entries.flatten() {
            let Some(p) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
                continue;
            };
            if let Some((_, ppid)) = stat(p) {
                children.entry(ppid).or_default().push(p);
            }
        }
    }
    let mut out = BTreeSet::new();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        if p > 0 && out.insert(p as u32) {
            todo.extend(children.get(&p).into_iter().flatten().copied());
        }
    }
    out
}

/// How a stop went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stopped {
    /// It exited within the grace period after TERM.
    Terminated,
    /// It was still there after the grace period and got KILL.
    Killed,
    /// It was gone already.
    Gone,
}

/// TERM to `pid` and every process below it (a DDP trainer's ranks are its
/// children's children: TERM to the trainer alone would leave them running,
/// orphaned, on the GPUs), up to `grace` for all of them to exit, then KILL
/// to what is left of them.
pub fn stop(pid: i32, grace: Duration) -> Stopped {
    if !alive(pid) {
        return Stopped::Gone;
    }
    let below = tree(pid);
    let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
    for p in below.iter().filter(|p| **p as i32 != pid) {
        let _ = kill(Pid::from_raw(*p as i32), Signal::SIGTERM);
    }
    let any_alive = |set: &BTreeSet<u32>| set.iter().any(|p| alive(*p as i32));
    let until = Instant::now() + grace;
    while Instant::now() < until {
        if !any_alive(&below) {
            return Stopped::Terminated;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    if !any_alive(&below) {
        return Stopped::Terminated;
    }
    for p in below.into_iter().chain(tree(pid)) {
        let _ = kill(Pid::from_raw(p as i32), Signal::SIGKILL);
    }
    Stopped::Killed
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn a_process_that_exits_on_term_is_terminated_and_one_that_ignores_it_is_killed() {
        let mut polite = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = polite.id() as i32;
        assert!(alive(pid));
        assert!(tree(std::process::id() as i32).contains(&(pid as u32)));
        let reaper = std::thread::spawn(move || polite.wait());
        assert_eq!(stop(pid, Duration::from_secs(5)), Stopped::Terminated);
        reaper.join().unwrap().unwrap();

        let mut stubborn = Command::new("bash")
            .args(["-c", "trap '' TERM; sleep 30 & wait"])
            .spawn()
            .unwrap();
        let pid = stubborn.id() as i32;
        std::thread::sleep(Duration::from_millis(300));
        let reaper = std::thread::spawn(move || stubborn.wait());
        assert_eq!(stop(pid, Duration::from_millis(300)), Stopped::Killed);
        reaper.join().unwrap().unwrap();
        assert_eq!(stop(pid, Duration::from_millis(10)), Stopped::Gone);
    }

    #[test]
    fn a_stop_ends_the_ranks_below_the_trainer_too() {
        // A DDP trainer: a launcher whose children are the ranks. TERM to the
        // launcher alone would leave them running.
        let mut trainer = Command::new("bash")
            .args(["-c", "sleep 31 & sleep 32 & wait"])
            .spawn()
            .unwrap();
        let pid = trainer.id() as i32;
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let ranks = loop {
            let below: Vec<u32> = tree(pid).into_iter().filter(|p| *p as i32 != pid).collect();
            if below.len() == 2 {
                break below;
            }
            assert!(std::time::Instant::now() < deadline, "no ranks: {below:?}");
            std::thread::sleep(Duration::from_millis(50));
        };
        let reaper = std::thread::spawn(move || trainer.wait());
        assert_eq!(stop(pid, Duration::from_secs(10)), Stopped::Terminated);
        reaper.join().unwrap().unwrap();
        for r in ranks {
            assert!(!alive(r as i32), "rank {r} outlived the stop");
        }
    }
}
