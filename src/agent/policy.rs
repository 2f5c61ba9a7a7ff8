//! The memory guard's policy (site `[guard]` with a spec's `[guard]` inside the
//! site's limits) and its decisions, made on the series alone. Pure.
//!
//! The rules (docs/agent.md):
//! * **warn** once when the job's memory passes `warn_fraction` of its device
//!   (of its share, on a shared GPU); again only after it fell 5 points below;
//! * **stop** on sustained growth: after the warm-up (the first
//!   `warmup_epochs` epochs, at most `warmup_max_s`), the samples of the last
//!   `window_s` grew faster than `growth_mb_per_min` as a whole, and each half
//!   of the window grew faster than half of it, so one step (an allocator
//!   taking a block) is not a leak;
//! * **stop** when the job holds more than its share of a shared GPU (shard or
//!   a whole GPU shared by time-slicing) in two samples in a row.

use std::path::PathBuf;

use serde::Serialize;

use super::series::{Rate, Sample, Series};
use super::site::{self, GuardSite};
use crate::spec::guard::GuardSpec;

const MB: f64 = 1e6;
const GIB: f64 = (1u64 << 30) as f64;

/// The settings one job's agent runs with.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GuardPolicy {
    pub enabled: bool,
    pub interval_s: f64,
    pub warn_fraction: f64,
    pub growth_mb_per_min: f64,
    pub window_s: f64,
    pub warmup_epochs: u32,
    pub warmup_max_s: f64,
    pub grace_s: f64,
    pub may_stop: bool,
    pub textfile_dir: Option<PathBuf>,
    pub series_max_samples: usize,
    pub log_every_s: f64,
    pub shards_per_gpu: Option<u32>,
}

/// A spec value beyond what the site allows.
#[derive(Debug, Clone, PartialEq)]
pub struct OverLimit {
    /// `guard.warn_fraction`.
    pub key: String,
    pub message: String,
    pub help: String,
}

impl GuardPolicy {
    /// The site's policy with the spec's settings where the site allows them.
    /// A spec may tighten anything; loosening past `[guard.limits]` is refused.
    pub fn resolve(site: &GuardSite, spec: &GuardSpec) -> Result<GuardPolicy, Vec<OverLimit>> {
        let warn = site.warn_fraction.unwrap_or(site::DEFAULT_WARN_FRACTION);
        let growth = site
            .growth_mb_per_min
            .unwrap_or(site::DEFAULT_GROWTH_MB_PER_MIN);
        let window = site.window_s.unwrap_or(site::DEFAULT_WINDOW_S);
        let warmup = site.warmup_epochs.unwrap_or(site::DEFAULT_WARMUP_EPOCHS);
        let l = &site.limits;
        let mut errors = Vec::new();
        let mut pick = |key: &str, asked: Option<f64>, site_value: f64, max: f64, unit: &str| {
            match asked {
                Some(x) if x > max => {
                    errors.push(OverLimit {
                        key: format!("guard.{key}"),
                        message: format!(
                            "{key} = {x} is above what the site allows ({max}{unit}; the site's default is {site_value}{unit})"
                        ),
                        help: format!("use at most {max}, or leave it out for the site's {site_value}"),
                    });
                    site_value
                }
                Some(x) => x,
                None => site_value,
            }
        };
        let warn_fraction = pick(
            "warn_fraction",
            spec.warn_fraction,
            warn,
            l.max_warn_fraction
                .unwrap_or(site::DEFAULT_MAX_WARN_FRACTION)
                .max(warn),
            "",
        );
        let growth_mb_per_min = pick(
            "growth_mb_per_min",
            spec.growth_mb_per_min,
            growth,
            l.max_growth_mb_per_min.unwrap_or(2.0 * growth).max(growth),
            " MB/min",
        );
        let window_s = pick(
            "window_s",
            spec.window_s,
            window,
            l.max_window_s.unwrap_or(2.0 * window).max(window),
            " s",
        );
        let warmup_epochs = pick(
            "warmup_epochs",
            spec.warmup_epochs.map(f64::from),
            f64::from(warmup),
            f64::from(
                l.max_warmup_epochs
                    .unwrap_or(site::DEFAULT_MAX_WARMUP_EPOCHS)
                    .max(warmup),
            ),
            " epochs",
        ) as u32;
        let site_grace = site.grace_s.unwrap_or(site::DEFAULT_GRACE_S);
        let grace_s = pick(
            "grace_s",
            spec.grace_s,
            site_grace,
            site_grace.max(site::DEFAULT_GRACE_S),
            " s",
        );
        let site_enabled = site.enabled.unwrap_or(true);
        let enabled = match spec.enabled {
            Some(false) if site_enabled && !l.allow_disable.unwrap_or(false) => {
                errors.push(OverLimit {
                    key: "guard.enabled".into(),
                    message: "enabled = false: this site does not let a spec turn the memory guard off".into(),
                    help: "remove it; loosen `growth_mb_per_min` or `warn_fraction` within the site's limits instead".into(),
                });
                true
            }
            Some(asked) => asked && site_enabled,
            None => site_enabled,
        };
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(GuardPolicy {
            enabled,
            interval_s: site.interval_s.unwrap_or(site::DEFAULT_INTERVAL_S),
            warn_fraction,
            growth_mb_per_min,
            window_s,
            warmup_epochs,
            warmup_max_s: site.warmup_max_s.unwrap_or(site::DEFAULT_WARMUP_MAX_S),
            grace_s,
            may_stop: site.may_stop.unwrap_or(true),
            textfile_dir: site.textfile_dir.clone(),
            series_max_samples: site
                .series_max_samples
                .unwrap_or(site::DEFAULT_SERIES_MAX)
                // The ring must hold a whole window.
                .max((window_s / site.interval_s.unwrap_or(site::DEFAULT_INTERVAL_S)) as usize + 8),
            log_every_s: site.log_every_s.unwrap_or(site::DEFAULT_LOG_EVERY_S),
            shards_per_gpu: site.shards_per_gpu,
        })
    }

    /// The growth limit in bytes per second.
    pub fn growth_limit_bps(&self) -> f64 {
        self.growth_mb_per_min * MB / 60.0
    }
}

/// Bytes as GiB with the precision the guard's messages use ("4.4").
pub fn gib(bytes: u64) -> String {
    let g = bytes as f64 / GIB;
    let text = if g >= 100.0 {
        format!("{g:.0}")
    } else if g >= 10.0 {
        format!("{g:.1}")
    } else {
        format!("{g:.2}")
    };
    // "4.40" → "4.4", "16.0" → "16"; "4.75" stays.
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    }
}

/// A span of time in the words of the messages ("3 min", "45 s").
pub fn span(seconds: f64) -> String {
    if seconds >= 119.5 {
        let m = seconds / 60.0;
        if (m - m.round()).abs() < 0.05 {
            format!("{m:.0} min")
        } else {
            format!("{m:.1} min")
        }
    } else {
        format!("{seconds:.0} s")
    }
}

/// Why the guard stops a job.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "cause", rename_all = "snake_case")]
pub enum StopCause {
    /// Sustained growth faster than the limit.
    Growth {
        mb_per_min: f64,
        for_s: f64,
        used: u64,
        total: u64,
        limit_mb_per_min: f64,
    },
    /// More than the job's share of a shared GPU.
    OverShare {
        used: u64,
        share_bytes: u64,
        share: f64,
        total: u64,
    },
}

impl StopCause {
    /// "grew 640 MB/min for 3 min, 4.4 of 4.75 GiB".
    pub fn describe(&self) -> String {
        match self {
            StopCause::Growth {
                mb_per_min,
                for_s,
                used,
                total,
                ..
            } => format!(
                "grew {mb_per_min:.0} MB/min for {}, {} of {} GiB",
                span(*for_s),
                gib(*used),
                gib(*total)
            ),
            StopCause::OverShare {
                used,
                share_bytes,
                share,
                total,
            } => format!(
                "holds {} GiB, over its share of the shared GPU ({} of {} GiB, {:.0}%)",
                gib(*used),
                gib(*share_bytes),
                gib(*total),
                share * 100.0
            ),
        }
    }
}

/// One thing the guard decided, with the numbers it decided on.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum Decision {
    /// The warm-up is over: growth counts from now on.
    WarmupOver { at_s: f64, epochs: Option<u32> },
    /// A search's trial fell behind its peers (`[tune] early_stop`): stop
    /// its trainer, so its slice is freed; its tell records it pruned.
    Prune {
        #[serde(flatten)]
        prune: super::prune::Prune,
        objective: String,
    },
    /// Memory passed the warning fraction.
    Warn {
        used: u64,
        /// The slice's memory, or the job's share of a shared GPU.
        limit: u64,
        fraction: f64,
        warn_fraction: f64,
        /// `limit` is a share of a shared GPU.
        of_share: bool,
    },
    /// Stop the trainer (or, where the site lets the guard only warn or the
    /// job's own use cannot be known, say it would).
    Stop {
        cause: StopCause,
        may_stop: bool,
        /// Why the samples are not the job's own, when they are not: the
        /// growth may be another process's, so the guard only warns.
        #[serde(skip_serializing_if = "Option::is_none")]
        unattributed: Option<String>,
    },
}

impl Decision {
    /// The job-log line for this decision.
    pub fn describe(&self) -> String {
        match self {
            Decision::WarmupOver { at_s, epochs } => format!(
                "warm-up over after {}{}; memory growth counts from now",
                span(*at_s),
                epochs
                    .map(|e| format!(" ({e} epoch{} done)", if e == 1 { "" } else { "s" }))
                    .unwrap_or_default()
            ),
            Decision::Prune { prune, objective } => prune.describe(objective),
            Decision::Warn {
                used,
                limit,
                fraction,
                warn_fraction,
                of_share,
            } => format!(
                "warning: memory at {} of {} GiB{} ({:.0}%, warns at {:.0}%)",
                gib(*used),
                gib(*limit),
                if *of_share {
                    ", the job's share of the shared GPU"
                } else {
                    ""
                },
                fraction * 100.0,
                warn_fraction * 100.0
            ),
            Decision::Stop {
                cause,
                unattributed: Some(why),
                ..
            } => format!(
                "warning: would stop the job, but its own memory cannot be told apart from other processes' on this GPU ({why}), so the guard does not stop it: {}",
                cause.describe()
            ),
            Decision::Stop { cause, may_stop, .. } => {
                if *may_stop {
                    format!("stopped by the memory guard: {}", cause.describe())
                } else {
                    format!(
                        "would stop the job (the site lets the guard only warn): {}",
                        cause.describe()
                    )
                }
            }
        }
    }
}

/// The guard's state over one job.
#[derive(Debug, Clone)]
pub struct Breaker {
    pub policy: GuardPolicy,
    /// The job's share of its GPU (0..1) when the GPU is shared; `None` on a
    /// slice or a GPU of its own.
    pub share: Option<f64>,
    started: f64,
    warmup_end: Option<f64>,
    warned: bool,
    over_share: u32,
    stopped: bool,
    /// A held-back stop was said for the current growth (said once per crossing).
    held_back: bool,
}

impl Breaker {
    pub fn new(policy: GuardPolicy, share: Option<f64>, started: f64) -> Breaker {
        let warmup_end = (policy.warmup_epochs == 0).then_some(started);
        Breaker {
            policy,
            share,
            started,
            warmup_end,
            warned: false,
            over_share: 0,
            stopped: false,
            held_back: false,
        }
    }

    /// When growth started to count (Unix seconds), once the warm-up is over.
    pub fn warmup_end(&self) -> Option<f64> {
        self.warmup_end
    }

    /// Whether a stop was decided.
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// Look at the series after a new sample. `epochs_done` is the trainer's
    /// completed epochs (from results.csv) when known; `unattributed` why the
    /// newest samples are not the job's own use, when they are not.
    pub fn observe(
        &mut self,
        series: &Series,
        epochs_done: Option<u32>,
        unattributed: Option<&str>,
    ) -> Vec<Decision> {
        let mut out = Vec::new();
        let Some(&now) = series.last() else {
            return out;
        };
        if self.stopped {
            return out;
        }
        if self.warmup_end.is_none() {
            let epochs_reached = epochs_done.is_some_and(|e| e >= self.policy.warmup_epochs);
            if epochs_reached || now.t - self.started >= self.policy.warmup_max_s {
                self.warmup_end = Some(now.t);
                out.push(Decision::WarmupOver {
                    at_s: now.t - self.started,
                    epochs: epochs_done,
                });
            }
        }
        let limit = match self.share {
            Some(f) => (now.total as f64 * f) as u64,
            None => now.total,
        };
        if limit > 0 {
            let fraction = now.used as f64 / limit as f64;
            if !self.warned && fraction >= self.policy.warn_fraction {
                self.warned = true;
                out.push(Decision::Warn {
                    used: now.used,
                    limit,
                    fraction,
                    warn_fraction: self.policy.warn_fraction,
                    of_share: self.share.is_some(),
                });
            } else if self.warned && fraction < self.policy.warn_fraction - 0.05 {
                self.warned = false;
            }
        }
        if let Some(share) = self.share {
            // Only the job's own use can be over its share.
            if now.own && now.used > limit {
                self.over_share += 1;
            } else {
                self.over_share = 0;
            }
            if self.over_share >= 2 {
                out.push(self.stop(StopCause::OverShare {
                    used: now.used,
                    share_bytes: limit,
                    share,
                    total: now.total,
                }));
                return out;
            }
        }
        match self.growth(series, &now) {
            Some((cause, true)) => {
                self.held_back = false;
                out.push(self.stop(cause));
            }
            // The window holds samples of the device's use, not the job's:
            // the growth may be another job's. A stop needs evidence that
            // the job itself grew, so this is said once, as a warning.
            Some((cause, false)) => {
                if !self.held_back {
                    self.held_back = true;
                    out.push(Decision::Stop {
                        cause,
                        may_stop: false,
                        unattributed: Some(
                            unattributed
                                .unwrap_or("the job's own use is not known")
                                .to_string(),
                        ),
                    });
                }
            }
            // Said again only after the memory has stopped growing: a window
            // a loaded machine sampled too sparsely is no end of the growth.
            None => {
                let calm = series
                    .rate_since(now.t - self.policy.window_s)
                    .is_some_and(|r| r.bytes_per_s <= self.policy.growth_limit_bps());
                if calm {
                    self.held_back = false;
                }
            }
        }
        out
    }

    fn stop(&mut self, cause: StopCause) -> Decision {
        self.stopped = self.policy.may_stop;
        if !self.policy.may_stop {
            // Said once per crossing: start the count again.
            self.over_share = 0;
        }
        Decision::Stop {
            cause,
            may_stop: self.policy.may_stop,
            unattributed: None,
        }
    }

    /// Sustained growth over the last window after the warm-up, or `None`;
    /// with whether every sample of the window is the job's own use.
    fn growth(&self, series: &Series, now: &Sample) -> Option<(StopCause, bool)> {
        let counted_from = self.warmup_end?;
        let from = (now.t - self.policy.window_s).max(counted_from);
        let whole = series.rate_since(from)?;
        let limit = self.policy.growth_limit_bps();
        // The window must be (nearly) covered: a short span after the warm-up
        // is not "sustained".
        let covered = whole.span_s >= self.policy.window_s - 1.5 * self.policy.interval_s
            && whole.samples >= 4;
        if !covered || whole.bytes_per_s <= limit {
            return None;
        }
        let mid = from + (now.t - from) / 2.0;
        let halves_grow = |r: Option<Rate>| r.is_some_and(|r| r.bytes_per_s > limit / 2.0);
        let first_half = super::series::rate_of(series.since(from).filter(|s| s.t <= mid));
        let second_half = series.rate_since(mid);
        if !(halves_grow(first_half) && halves_grow(second_half)) {
            return None;
        }
        // How long it has grown this fast: the longest span back from now
        // (after the warm-up) whose rate stays over the limit.
        let mut for_s = whole.span_s;
        let mut rate = whole.bytes_per_s;
        for s in series.since(counted_from) {
            if s.t >= from {
                break;
            }
            if let Some(r) = series.rate_since(s.t) {
                if r.bytes_per_s > limit {
                    for_s = r.span_s;
                    rate = r.bytes_per_s;
                    break;
                }
            }
        }
        let own = series.since(from).all(|s| s.own);
        Some((
            StopCause::Growth {
                mb_per_min: rate * 60.0 / MB,
                for_s,
                used: now.used,
                total: now.total,
                limit_mb_per_min: self.policy.growth_mb_per_min,
            },
            own,
        ))
    }
}

/// What one read of the device counts as the job's memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counted {
    /// Bytes the guard counts.
    pub used: u64,
    /// `None`: `used` is the job's own; else why it is the device's instead.
    pub unattributed: Option<&'static str>,
}

/// The job's memory from one read: the device's use on a slice, or on a
/// whole GPU Slurm gave the job alone (no shards, no share: Slurm's device
/// cgroup keeps other jobs off it, so whatever NVML lists there is the job's,
/// even under a PID namespace whose pids do not match NVML's); the sum over
/// the job's own processes where the GPU is shared. Where that sum cannot be
/// known, the device's use stands in and says why: such samples warn, never stop.
pub fn count(
    is_mig: bool,
    shared: bool,
    device_used: u64,
    job_used: Option<u64>,
    others: Option<usize>,
    have_pids: bool,
) -> Counted {
    let own = |used| Counted {
        used,
        unattributed: None,
    };
    if is_mig {
        return own(device_used);
    }
    if !shared {
        // The whole device is the job's: its use includes what no process
        // is charged for (the driver's reservations).
        return own(device_used);
    }
    match job_used {
        Some(used) => own(used),
        None => Counted {
            used: device_used,
            unattributed: Some(if !have_pids {
                "no trainer pid (--pid) tells the job's processes from others'"
            } else if others.is_none() {
                "NVML cannot list the GPU's processes"
            } else {
                "NVML reports no memory for the job's processes"
            }),
        },
    }
}

/// The job's share of a shared GPU from Slurm's `SLURM_SHARDS_ON_NODE` and the
/// site's shards per GPU, or an explicit fraction (`--share`).
pub fn share_of(explicit: Option<f64>, shards: Option<u32>, per_gpu: Option<u32>) -> Option<f64> {
    if let Some(f) = explicit {
        return Some(f);
    }
    match (shards, per_gpu) {
        (Some(n), Some(per)) if n > 0 && per > 0 => Some((f64::from(n) / f64::from(per)).min(1.0)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::series::Sample;

    const MIB: u64 = 1 << 20;
    /// A 1g.5gb slice: 4864 MiB = 4.75 GiB.
    const SLICE: u64 = 4864 * MIB;

    fn policy() -> GuardPolicy {
        let mut p = GuardPolicy::resolve(&GuardSite::default(), &GuardSpec::default()).unwrap();
        p.warmup_epochs = 0;
        p
    }

    /// Feed samples every `dt` seconds from `used(t)`; the decisions of each.
    fn drive(
        b: &mut Breaker,
        secs: f64,
        dt: f64,
        used: impl Fn(f64) -> f64,
    ) -> Vec<(f64, Decision)> {
        let mut series = Series::new(b.policy.series_max_samples);
        let mut out = Vec::new();
        let mut t = 0.0;
        while t <= secs {
            series.push(Sample {
                t: 1000.0 + t,
                used: used(t) as u64,
                device_used: used(t) as u64,
                total: SLICE,
                own: true,
            });
            for d in b.observe(&series, None, None) {
                out.push((t, d));
            }
            t += dt;
        }
        out
    }

    fn stops(d: &[(f64, Decision)]) -> Vec<&(f64, Decision)> {
        d.iter()
            .filter(|(_, d)| matches!(d, Decision::Stop { .. }))
            .collect()
    }

    #[test]
    fn defaults_are_the_seeds() {
        let p = GuardPolicy::resolve(&GuardSite::default(), &GuardSpec::default()).unwrap();
        assert_eq!(p.warn_fraction, 0.8);
        assert_eq!(p.growth_mb_per_min, 500.0);
        assert_eq!(p.window_s, 180.0);
        assert_eq!(p.warmup_epochs, 1);
        assert!(p.enabled && p.may_stop);
    }

    #[test]
    fn a_600_mb_per_min_leak_is_stopped_after_the_window_with_its_numbers() {
        let mut b = Breaker::new(policy(), None, 1000.0);
        let d = drive(&mut b, 600.0, 3.0, |t| 1.5e9 + 10e6 * t);
        let s = stops(&d);
        assert_eq!(s.len(), 1, "{d:?}");
        let (
            at,
            Decision::Stop {
                cause, may_stop, ..
            },
        ) = s[0]
        else {
            unreachable!()
        };
        assert!(*may_stop);
        assert!((177.0..=183.0).contains(at), "stopped at {at}");
        let text = s[0].1.describe();
        assert!(
            text.starts_with("stopped by the memory guard: grew 600 MB/min for 3 min, "),
            "{text}"
        );
        let StopCause::Growth { used, total, .. } = cause else {
            unreachable!()
        };
        assert_eq!(*total, SLICE);
        assert!(
            text.ends_with(&format!("{} of 4.75 GiB", gib(*used))),
            "{text}"
        );
    }

    #[test]
    fn steady_slow_and_one_step_are_not_stopped() {
        for (name, f) in [
            ("steady", Box::new(|_t: f64| 2e9) as Box<dyn Fn(f64) -> f64>),
            ("slow growth, 300 MB/min", Box::new(|t: f64| 1e9 + 5e6 * t)),
            (
                "one step of 1.5 GB",
                Box::new(|t: f64| if t < 200.0 { 1e9 } else { 2.5e9 }),
            ),
        ] {
            let mut b = Breaker::new(policy(), None, 1000.0);
            let d = drive(&mut b, 900.0, 3.0, f);
            assert!(stops(&d).is_empty(), "{name}: {d:?}");
        }
    }

    #[test]
    fn crossing_80_percent_warns_once_and_does_not_stop() {
        let mut b = Breaker::new(policy(), None, 1000.0);
        let d = drive(&mut b, 300.0, 3.0, |t| {
            if t < 100.0 {
                3.0e9
            } else {
                0.85 * SLICE as f64
            }
        });
        let warns: Vec<_> = d
            .iter()
            .filter(|(_, d)| matches!(d, Decision::Warn { .. }))
            .collect();
        assert_eq!(warns.len(), 1, "{d:?}");
        assert_eq!(
            warns[0].1.describe(),
            "warning: memory at 4.04 of 4.75 GiB (85%, warns at 80%)"
        );
        assert!(stops(&d).is_empty());
    }

    #[test]
    fn growth_in_the_warm_up_does_not_count() {
        let mut p = policy();
        p.warmup_epochs = 1;
        p.warmup_max_s = 400.0;
        let mut b = Breaker::new(p, None, 1000.0);
        // A leak-like ramp during the first 300 s, flat afterwards.
        let d = drive(&mut b, 900.0, 3.0, |t| 1e9 + 10e6 * t.min(300.0));
        assert!(stops(&d).is_empty(), "{d:?}");
        assert!(d
            .iter()
            .any(|(t, d)| matches!(d, Decision::WarmupOver { .. }) && *t >= 399.0));
    }

    #[test]
    fn over_the_share_of_a_shared_gpu_is_stopped_and_a_warn_only_site_only_says_so() {
        let mut b = Breaker::new(policy(), Some(0.25), 1000.0);
        let d = drive(&mut b, 60.0, 3.0, |t| if t < 30.0 { 0.5e9 } else { 1.3e9 });
        let s = stops(&d);
        assert_eq!(s.len(), 1, "{d:?}");
        assert!(s[0].1.describe().contains("over its share"), "{:?}", s[0]);
        let mut p = policy();
        p.may_stop = false;
        let mut b = Breaker::new(p, None, 1000.0);
        let d = drive(&mut b, 400.0, 3.0, |t| 1e9 + 10e6 * t);
        assert!(!b.stopped());
        assert!(stops(&d)
            .iter()
            .all(|(_, d)| d.describe().starts_with("would stop")));
    }

    #[test]
    fn growth_that_may_be_another_jobs_is_said_once_and_never_stops() {
        // The same leak as a stop, but every sample is the device's use
        // standing in for the job's: a warning, once, with the reason.
        let mut b = Breaker::new(policy(), None, 1000.0);
        let mut series = Series::new(b.policy.series_max_samples);
        let mut out = Vec::new();
        for i in 0..200 {
            let t = f64::from(i) * 3.0;
            series.push(Sample {
                t: 1000.0 + t,
                used: (1e9 + 20e6 * t) as u64,
                device_used: (1e9 + 20e6 * t) as u64,
                total: SLICE * 8,
                own: false,
            });
            out.extend(b.observe(&series, None, Some("NVML cannot list the GPU's processes")));
        }
        assert!(!b.stopped());
        let held: Vec<_> = out
            .iter()
            .filter(|d| matches!(d, Decision::Stop { .. }))
            .collect();
        assert_eq!(held.len(), 1, "{out:?}");
        let line = held[0].describe();
        assert!(
            line.starts_with(
                "warning: would stop the job, but its own memory cannot be told apart"
            ) && line.contains("(NVML cannot list the GPU's processes)"),
            "{line}"
        );
        assert!(matches!(
            held[0],
            Decision::Stop {
                may_stop: false,
                ..
            }
        ));
    }

    #[test]
    fn a_held_back_stop_is_not_repeated_across_sparse_samples() {
        // A loaded machine: samples come late, so some windows are not
        // covered; the growth goes on and the warning is still said once.
        let mut b = Breaker::new(policy(), None, 1000.0);
        let mut series = Series::new(b.policy.series_max_samples);
        let mut held = 0;
        let mut t = 0.0;
        for i in 0..300 {
            t += if i % 7 == 0 { 150.0 } else { 3.0 };
            series.push(Sample {
                t: 1000.0 + t,
                used: (1e9 + 20e6 * t) as u64,
                device_used: (1e9 + 20e6 * t) as u64,
                total: SLICE * 8,
                own: false,
            });
            held += b
                .observe(&series, None, Some("why"))
                .iter()
                .filter(|d| matches!(d, Decision::Stop { .. }))
                .count();
        }
        assert_eq!(held, 1);
    }

    #[test]
    fn the_jobs_memory_is_its_own_only_where_that_is_known() {
        const G: u64 = 1 << 30;
        // A slice: the device's use, whatever else.
        assert_eq!(
            count(true, true, 5 * G, None, None, false).unattributed,
            None
        );
        // A whole GPU of its own: the device's use, whatever NVML lists
        // (its pids may be another namespace's).
        for (job, others) in [(Some(8 * G), Some(0)), (Some(0), Some(1)), (None, None)] {
            let c = count(false, false, 9 * G, job, others, true);
            assert_eq!((c.used, c.unattributed), (9 * G, None));
        }
        // Shared (shards, or a share given): the job's processes.
        let c = count(false, true, 16 * G, Some(6 * G), Some(1), true);
        assert_eq!((c.used, c.unattributed), (6 * G, None));
        // Shared, and the job's use cannot be known: the device's, flagged.
        for (job, others, pids, why) in [
            (None, None, false, "no trainer pid"),
            (None, None, true, "cannot list"),
            (None, Some(1), true, "no memory for the job's processes"),
        ] {
            let c = count(false, true, 16 * G, job, others, pids);
            assert_eq!(c.used, 16 * G);
            assert!(c.unattributed.is_some_and(|w| w.contains(why)), "{c:?}");
        }
    }

    #[test]
    fn over_the_share_counts_only_the_jobs_own_use() {
        let mut b = Breaker::new(policy(), Some(0.25), 1000.0);
        let mut series = Series::new(64);
        for i in 0..10 {
            series.push(Sample {
                t: 1000.0 + f64::from(i),
                used: SLICE,
                device_used: SLICE,
                total: SLICE,
                own: false,
            });
            let d = b.observe(&series, None, Some("why"));
            assert!(
                !d.iter().any(|d| matches!(d, Decision::Stop { .. })),
                "{d:?}"
            );
        }
    }

    #[test]
    fn a_spec_may_tighten_but_loosens_only_within_the_site_limits() {
        let site = GuardSite::default();
        let tight = GuardSpec {
            warn_fraction: Some(0.5),
            growth_mb_per_min: Some(100.0),
            ..GuardSpec::default()
        };
        let p = GuardPolicy::resolve(&site, &tight).unwrap();
        assert_eq!((p.warn_fraction, p.growth_mb_per_min), (0.5, 100.0));
        let loose = GuardSpec {
            warn_fraction: Some(0.99),
            growth_mb_per_min: Some(5000.0),
            enabled: Some(false),
            ..GuardSpec::default()
        };
        let errs = GuardPolicy::resolve(&site, &loose).unwrap_err();
        let keys: Vec<&str> = errs.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "guard.warn_fraction",
                "guard.growth_mb_per_min",
                "guard.enabled"
            ]
        );
        assert!(
            errs[0].message.contains("above what the site allows (0.95"),
            "{errs:?}"
        );
        let mut lenient = GuardSite::default();
        lenient.limits.max_growth_mb_per_min = Some(10_000.0);
        lenient.limits.allow_disable = Some(true);
        let p = GuardPolicy::resolve(
            &lenient,
            &GuardSpec {
                growth_mb_per_min: Some(5000.0),
                enabled: Some(false),
                ..GuardSpec::default()
            },
        )
        .unwrap();
        assert_eq!(p.growth_mb_per_min, 5000.0);
        assert!(!p.enabled);
    }

    #[test]
    fn words_and_numbers() {
        assert_eq!(gib(SLICE), "4.75");
        assert_eq!(gib((4.4 * GIB) as u64), "4.4");
        assert_eq!(gib(16 << 30), "16");
        assert_eq!(gib(1 << 30), "1");
        assert_eq!(span(180.0), "3 min");
        assert_eq!(span(45.2), "45 s");
        assert_eq!(span(150.0), "2.5 min");
        assert_eq!(share_of(None, Some(2), Some(8)), Some(0.25));
        assert_eq!(share_of(None, Some(2), None), None);
        assert_eq!(share_of(Some(0.5), None, None), Some(0.5));
    }
}
