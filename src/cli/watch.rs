//! `yolo-sched watch`: follow a run until it ends.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Result;
use clap::Args;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::args::RunArg;
use super::Context;
use crate::run::query;
use crate::run::status::{RunState, RunStatus, StageStatus, TaskState};

#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  yolo-sched watch pcb-defects-20261130T150000-1a2b
  yolo-sched submit spec.toml --json | jq -r .run_id | xargs yolo-sched watch

Progress bars on a terminal, one line per change otherwise. One Slurm query per
round for the whole run; rounds start 2 s apart and grow to 30 s while nothing
changes. Exit status: 0 when the run completed, 1 when it failed or was cancelled.")]
pub struct WatchArgs {
    #[command(flatten)]
    pub target: RunArg,
    /// First pause between rounds, seconds (0.05 to 3600).
    #[arg(long, default_value_t = 2.0, env = "YOLO_SCHED_WATCH_INTERVAL", value_parser = pause_seconds)]
    pub interval: f64,
    /// Longest pause between rounds, seconds (0.05 to 3600).
    #[arg(long, default_value_t = 30.0, env = "YOLO_SCHED_WATCH_MAX_INTERVAL", value_parser = pause_seconds)]
    pub max_interval: f64,
}

/// A pause in seconds within bounds a watch can use (no `inf`, NaN or 1e300).
fn pause_seconds(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if v.is_finite() && (0.05..=3600.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{s:?} is outside 0.05 to 3600 seconds"))
    }
}

/// One line per stage, in stage order: what changed is printed in plain mode.
fn stage_lines(st: &RunStatus) -> Vec<(String, String)> {
    st.stages
        .iter()
        .map(|s| {
            let mut line = if s.tasks.len() > 1 {
                let parts: Vec<String> = s.counts.iter().map(|(k, n)| format!("{n} {k}")).collect();
                format!("{} ({})", s.state.word(), parts.join(", "))
            } else {
                s.state.word().to_string()
            };
            if let Some(stop) = s.tasks.iter().find_map(|t| t.guard_stop()) {
                line.push_str(&format!(": {stop}"));
            }
            if s.state == TaskState::Pending {
                if let Some(r) = s.tasks.iter().find_map(|t| t.reason_text.clone()) {
                    line.push_str(&format!(": {r}"));
                }
            }
            if s.state == TaskState::Running && !s.progress.is_empty() {
                let done: u32 = s.progress.iter().map(|(_, p)| p.epoch).sum();
                match s.progress[0].1.epochs {
                    Some(n) => {
                        line.push_str(&format!(", epoch {done} of {}", n as usize * s.tasks.len()))
                    }
                    None => line.push_str(&format!(", epoch {done}")),
                }
            }
            if let (Some(search), "tell") = (&st.tune, s.stage.as_str()) {
                // A search: how many trials are told, and the best so far.
                let told = search
                    .trials
                    .iter()
                    .filter(|t| t.state != "running")
                    .count();
                line.push_str(&format!(
                    "; {told} of {} trials told",
                    search.trials_planned
                ));
                if let Some(b) = &search.best {
                    line.push_str(&format!(
                        ", best so far trial {} ({} = {})",
                        b.trial, search.objective, b.value
                    ));
                }
            }
            (s.stage.clone(), line)
        })
        .collect()
}

/// How a stage's bar is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Look {
    /// Filled with `=` as work completes.
    Progress,
    /// Failed, lost or cancelled: filled with `x` up to what was done.
    Broken,
}

/// A stage's bar: position, length and look. Only completed tasks (or, for a
/// single training, finished epochs) fill it; a stage that failed or was
/// cancelled is drawn with `x`, never as a successful `=` bar.
fn bar_of(s: &StageStatus) -> (u64, u64, Look) {
    let look = match s.state {
        TaskState::Failed | TaskState::Lost | TaskState::Cancelled => Look::Broken,
        _ => Look::Progress,
    };
    let (pos, len) = match (s.stage.as_str(), s.progress.first()) {
        ("train", Some((_, p))) if s.tasks.len() == 1 => (
            u64::from(p.epoch),
            u64::from(p.epochs.unwrap_or(p.epoch.max(1))),
        ),
        _ => (
            s.counts.get("completed").copied().unwrap_or(0) as u64,
            s.tasks.len().max(1) as u64,
        ),
    };
    (pos.min(len), len, look)
}

pub fn run(ctx: &mut Context, args: &WatchArgs) -> Result<i32> {
    // A team member's run (found through Slurm) is watched the same way:
    // its job ids are known, and Slurm shows the caller their states.
    let mut manifest = match crate::run::team::locate(&ctx.slurm, &args.target.run)? {
        crate::run::team::Located::Own(m) => *m,
        crate::run::team::Located::Team(r) => r.manifest,
    };
    let tty = ctx.printer.err_is_terminal();
    let multi = MultiProgress::with_draw_target(if tty {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    });
    let style = ProgressStyle::with_template("{prefix:>8} [{bar:30}] {pos}/{len} {msg}")
        .expect("static template")
        .progress_chars("=> ");
    let broken = style.clone().progress_chars("xx ");
    let mut bars: BTreeMap<String, ProgressBar> = BTreeMap::new();
    let mut last: Vec<(String, String)> = Vec::new();
    let first = Duration::from_secs_f64(args.interval.max(0.05));
    let max = Duration::from_secs_f64(args.max_interval.max(args.interval));
    let mut pause = first;
    let mut failures = 0;
    loop {
        let (st, error) = query::run_status(&ctx.slurm, &mut manifest);
        if let Some(e) = &error {
            failures += 1;
            if failures >= 5 {
                return Err(anyhow::anyhow!(
                    "Slurm did not answer {failures} times in a row: {e}"
                ));
            }
        } else {
            failures = 0;
        }
        let lines = stage_lines(&st);
        let changed = lines != last;
        if tty {
            for s in &st.stages {
                let bar = bars.entry(s.stage.clone()).or_insert_with(|| {
                    let b = multi.add(ProgressBar::new(1));
                    b.set_style(style.clone());
                    b.set_prefix(s.stage.clone());
                    b
                });
                let (pos, len, look) = bar_of(s);
                if look == Look::Broken {
                    bar.set_style(broken.clone());
                }
                bar.set_length(len);
                bar.set_position(pos);
                let line = lines
                    .iter()
                    .find(|(k, _)| *k == s.stage)
                    .map(|(_, l)| l.clone());
                bar.set_message(line.unwrap_or_default());
            }
        } else if changed {
            let now = chrono::Local::now().format("%H:%M:%S");
            for (stage, line) in &lines {
                if !last.iter().any(|(k, l)| k == stage && l == line) {
                    ctx.printer
                        .line(format!("{now} {} {stage}: {line}", st.run_id))?;
                }
            }
        }
        if changed {
            pause = first;
        }
        last = lines;
        if st.state.is_finished() && error.is_none() {
            // `abandon`, not `finish`: finish would fill every bar to its end.
            for b in bars.values() {
                b.abandon();
            }
            ctx.printer
                .line(format!("run {}: {}", st.run_id, st.state.describe()))?;
            return Ok(if st.state == RunState::Completed {
                0
            } else {
                1
            });
        }
        std::thread::sleep(pause);
        pause = (pause * 3 / 2).min(max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stage(name: &str, state: TaskState, tasks: &[TaskState]) -> StageStatus {
        let mut counts = BTreeMap::new();
        for t in tasks {
            *counts.entry(t.word().to_string()).or_insert(0) += 1;
        }
        StageStatus {
            stage: name.into(),
            state,
            attempt: 1,
            job_id: Some(1),
            gres: None,
            attempts: vec![],
            time_limit: "1:00:00".into(),
            tasks: tasks
                .iter()
                .enumerate()
                .map(|(i, s)| crate::run::status::TaskStatus {
                    task: (tasks.len() > 1).then_some(i as u32),
                    job_id: "1".into(),
                    state: *s,
                    slurm_state: None,
                    reason: None,
                    reason_text: None,
                    elapsed: None,
                    time_limit: None,
                    node: None,
                    slice: None,
                    exit_code: None,
                    source: crate::run::status::Source::Squeue,
                    guard: None,
                })
                .collect(),
            counts,
            progress: vec![],
            exported_validation: vec![],
        }
    }

    #[test]
    fn failed_and_cancelled_stages_are_not_full_bars() {
        use TaskState::*;
        assert_eq!(
            bar_of(&stage("prepare", Completed, &[Completed])),
            (1, 1, Look::Progress)
        );
        assert_eq!(
            bar_of(&stage("prepare", Failed, &[Failed])),
            (0, 1, Look::Broken)
        );
        assert_eq!(
            bar_of(&stage("export", Cancelled, &[Cancelled])),
            (0, 1, Look::Broken)
        );
        let sweep = stage("train", Failed, &[Completed, Failed, Completed]);
        assert_eq!(bar_of(&sweep), (2, 3, Look::Broken));
        // A training that ran every epoch and then failed keeps its count, drawn broken.
        let mut train = stage("train", Failed, &[Failed]);
        train.progress = vec![(
            None,
            crate::rundir::ultralytics::TrainProgress {
                epoch: 3,
                epochs: Some(3),
                best_map50_95: None,
                best_map50: None,
                final_validation: None,
            },
        )];
        assert_eq!(bar_of(&train), (3, 3, Look::Broken));
        train.state = Running;
        train.tasks[0].state = Running;
        assert_eq!(bar_of(&train), (3, 3, Look::Progress));
    }
}
