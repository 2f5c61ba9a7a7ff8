//! Early stopping of a search's trials (`[tune] early_stop`, docs/spec.md):
//! the median rule and successive halving over the epochs trials reached.
//! Pure: the trial's own objective per epoch and its peers' in, a decision
//! out. The agent of each trial (`run`) reads the curves and acts.
//!
//! A trial's value at epoch `e` is its best value of the objective over
//! epochs 1..=e (higher is better when maximising): a noisy epoch neither
//! saves nor condemns a trial. Its peers are the trials of the search told
//! so far and the other trials of its own batch, running or not.
//!
//! * **median** (Optuna's `MedianPruner`): from epoch `min_epochs` on, with
//!   at least `min_trials` peers that reached the epoch, a trial worse than
//!   their median there is stopped.
//! * **halving** (successive halving, Optuna's `SuccessiveHalvingPruner`):
//!   at the rungs `min_epochs × eta^k` (below the trial's last epoch), a
//!   trial goes on only if it is among the best `⌊n / eta⌋` (at least one) of
//!   the `n` trials, itself included, that reached the rung; with fewer than
//!   `min_trials` of them there, it goes on. Each rung is decided once, when
//!   the trial first reaches it (asynchronous, as ASHA does).

use serde::Serialize;

use crate::spec::{Direction, EarlyStop, PruneRule};

/// The decision to stop a trial, with the numbers it was made on.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Prune {
    pub rule: PruneRule,
    /// The epoch the trial was judged at (its last, or the rung).
    pub epoch: u32,
    /// Its best value up to that epoch.
    pub value: f64,
    /// What it had to reach: the peers' median, or the worst value kept at the rung.
    pub reference: f64,
    /// The values it was compared with (peers for the median; the rung's
    /// trials, itself included, for halving).
    pub compared: u32,
    /// Halving: how many of them go on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kept: Option<u32>,
}

impl Prune {
    /// The job-log line.
    pub fn describe(&self, objective: &str) -> String {
        match self.rule {
            PruneRule::Median => format!(
                "stopped early (median rule): {objective} {:.5} by epoch {} is worse than the median {:.5} of {} other trial(s) there",
                self.value, self.epoch, self.reference, self.compared
            ),
            PruneRule::Halving => format!(
                "stopped early (successive halving): {objective} {:.5} by epoch {} is not among the best {} of the {} trial(s) that reached it (the last kept has {:.5})",
                self.value,
                self.epoch,
                self.kept.unwrap_or(1),
                self.compared,
                self.reference
            ),
        }
    }
}

/// What a look at the curves decided.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Go on (`rungs`: the rungs passed so far, for halving).
    Go {
        rungs: u32,
    },
    Stop(Prune),
}

/// Better under the direction (ties are not better).
fn better(dir: Direction, a: f64, b: f64) -> bool {
    match dir {
        Direction::Maximize => a > b,
        Direction::Minimize => a < b,
    }
}

/// The best finite value of `curve` over epochs 1..=`epoch` (`curve[i]` is
/// epoch i + 1's); `None` when the curve does not reach `epoch` or has no
/// finite value there.
pub fn best_by(curve: &[Option<f64>], epoch: u32, dir: Direction) -> Option<f64> {
    let e = epoch as usize;
    if e == 0 || curve.len() < e {
        return None;
    }
    curve[..e]
        .iter()
        .flatten()
        .copied()
        .filter(|v| v.is_finite())
        .reduce(|a, b| if better(dir, b, a) { b } else { a })
}

/// The objective's column of a `results.csv`, one entry per epoch row
/// (`None` where the cell is missing or not a number); empty without the column.
pub fn objective_curve(csv: &str, column: &str) -> Vec<Option<f64>> {
    let mut lines = csv.lines().filter(|l| !l.trim().is_empty());
    let Some(header) = lines.next() else {
        return Vec::new();
    };
    let Some(col) = header.split(',').map(str::trim).position(|c| c == column) else {
        return Vec::new();
    };
    lines
        .map(|l| {
            l.split(',')
                .nth(col)
                .and_then(|v| v.trim().parse::<f64>().ok())
                .filter(|v| v.is_finite())
        })
        .collect()
}

/// The median (the mean of the middle two for an even count).
fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// The rungs of successive halving at or below `epochs` (none for the
/// median rule): those a trial that already has `epochs` epochs when its
/// agent starts (its job requeued, or moved to a bigger slice after running
/// out of memory, resumes from its checkpoint) passed under its earlier
/// job's agent. Each rung is decided once, when first reached: judged again
/// now, against the trials that reached it since, a trial kept then could be
/// stopped for a rung it passed.
pub fn rungs_reached(cfg: &EarlyStop, epochs: u32) -> u32 {
    if cfg.rule != PruneRule::Halving {
        return 0;
    }
    let eta = u64::from(cfg.eta.max(2));
    let first = u64::from(cfg.min_epochs.max(1));
    let mut n = 0;
    while eta
        .checked_pow(n)
        .and_then(|f| f.checked_mul(first))
        .is_some_and(|r| r <= u64::from(epochs))
    {
        n += 1;
    }
    n
}

/// Decide on a trial that reached `own.len()` epochs. `rungs`: the rungs
/// of successive halving it passed so far (0 at first; the median rule
/// keeps no state).
pub fn decide(
    cfg: &EarlyStop,
    dir: Direction,
    own: &[Option<f64>],
    peers: &[Vec<Option<f64>>],
    rungs: u32,
) -> Verdict {
    let reached = own.len() as u32;
    let go = Verdict::Go { rungs };
    if reached < cfg.min_epochs.max(1) {
        return go;
    }
    match cfg.rule {
        PruneRule::Median => {
            let Some(value) = best_by(own, reached, dir) else {
                return go;
            };
            let mut others: Vec<f64> = peers
                .iter()
                .filter_map(|p| best_by(p, reached, dir))
                .collect();
            if others.len() < cfg.min_trials as usize {
                return go;
            }
            let m = median(&mut others);
            if better(dir, m, value) {
                Verdict::Stop(Prune {
                    rule: PruneRule::Median,
                    epoch: reached,
                    value,
                    reference: m,
                    compared: others.len() as u32,
                    kept: None,
                })
            } else {
                go
            }
        }
        PruneRule::Halving => {
            let eta = u64::from(cfg.eta.max(2));
            let mut passed = rungs;
            loop {
                let Some(rung) = eta
                    .checked_pow(passed)
                    .and_then(|f| f.checked_mul(u64::from(cfg.min_epochs.max(1))))
                    .filter(|r| *r <= u64::from(reached))
                else {
                    return Verdict::Go { rungs: passed };
                };
                let rung = rung as u32;
                let Some(value) = best_by(own, rung, dir) else {
                    // No value at the rung (NaN epochs): nothing to judge on.
                    passed += 1;
                    continue;
                };
                let mut at: Vec<f64> = peers.iter().filter_map(|p| best_by(p, rung, dir)).collect();
                at.push(value);
                if at.len() < cfg.min_trials as usize {
                    passed += 1;
                    continue;
                }
                // Best first.
                at.sort_by(|a, b| match dir {
                    Direction::Maximize => b.total_cmp(a),
                    Direction::Minimize => a.total_cmp(b),
                });
                let kept = (at.len() as u64 / eta).max(1) as usize;
                let last_kept = at[kept - 1];
                if better(dir, last_kept, value) {
                    return Verdict::Stop(Prune {
                        rule: PruneRule::Halving,
                        epoch: rung,
                        value,
                        reference: last_kept,
                        compared: at.len() as u32,
                        kept: Some(kept as u32),
                    });
                }
                passed += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn median_rule(min_epochs: u32, min_trials: u32) -> EarlyStop {
        EarlyStop {
            rule: PruneRule::Median,
            min_epochs,
            min_trials,
            eta: 4,
        }
    }

    fn halving(min_epochs: u32, min_trials: u32, eta: u32) -> EarlyStop {
        EarlyStop {
            rule: PruneRule::Halving,
            min_epochs,
            min_trials,
            eta,
        }
    }

    fn c(v: &[f64]) -> Vec<Option<f64>> {
        v.iter().map(|x| Some(*x)).collect()
    }

    const MAX: Direction = Direction::Maximize;

    #[test]
    fn the_objective_is_read_by_its_column_name() {
        let csv = "  epoch,  metrics/mAP50(B),  metrics/mAP50-95(B)\n 1, 0.5, 0.25\n 2, 0.6, nan\n\n 3, 0.7, 0.4\n";
        assert_eq!(
            objective_curve(csv, "metrics/mAP50-95(B)"),
            vec![Some(0.25), None, Some(0.4)]
        );
        assert!(objective_curve(csv, "nope").is_empty());
        assert!(objective_curve("", "x").is_empty());
    }

    #[test]
    fn best_so_far_ignores_nan_and_epochs_not_reached() {
        let curve = vec![Some(0.2), Some(f64::NAN), None, Some(0.1)];
        assert_eq!(best_by(&curve, 2, MAX), Some(0.2));
        assert_eq!(best_by(&curve, 4, Direction::Minimize), Some(0.1));
        assert_eq!(best_by(&curve, 5, MAX), None);
        assert_eq!(best_by(&curve, 0, MAX), None);
        assert_eq!(best_by(&[Some(f64::NAN)], 1, MAX), None);
    }

    #[test]
    fn the_median_rule_stops_a_trial_below_the_median_of_its_peers() {
        let peers = vec![c(&[0.3, 0.5, 0.6]), c(&[0.2, 0.4, 0.5]), c(&[0.1, 0.3])];
        // Epoch 2: peers' best 0.5, 0.4, 0.3 → median 0.4.
        let v = decide(&median_rule(1, 3), MAX, &c(&[0.1, 0.35]), &peers, 0);
        let Verdict::Stop(p) = v else { panic!("{v:?}") };
        assert_eq!(
            (p.epoch, p.value, p.reference, p.compared),
            (2, 0.35, 0.4, 3)
        );
        assert!(
            p.describe("mAP").contains("median 0.40000 of 3"),
            "{}",
            p.describe("mAP")
        );
        // At the median: goes on (ties are not worse).
        assert_eq!(
            decide(&median_rule(1, 3), MAX, &c(&[0.1, 0.4]), &peers, 0),
            Verdict::Go { rungs: 0 }
        );
        // Its best so far counts, not its last epoch.
        assert_eq!(
            decide(&median_rule(1, 3), MAX, &c(&[0.45, 0.1]), &peers, 0),
            Verdict::Go { rungs: 0 }
        );
        // Minimising: the peers' lowest by epoch 2 are 0.3, 0.2 and 0.1, so
        // the median is 0.2 and 0.35 is worse.
        let v = decide(
            &median_rule(1, 3),
            Direction::Minimize,
            &c(&[0.9, 0.35]),
            &peers,
            0,
        );
        assert!(
            matches!(v, Verdict::Stop(Prune { epoch: 2, reference, .. }) if reference == 0.2),
            "{v:?}"
        );
        assert_eq!(
            decide(
                &median_rule(1, 3),
                Direction::Minimize,
                &c(&[0.9, 0.15]),
                &peers,
                0
            ),
            Verdict::Go { rungs: 0 }
        );
    }

    #[test]
    fn the_median_rule_waits_for_its_warm_up_and_enough_peers() {
        let peers = vec![c(&[0.9, 0.9, 0.9]), c(&[0.9, 0.9, 0.9])];
        let bad = c(&[0.1, 0.1]);
        // Before min_epochs.
        assert_eq!(
            decide(&median_rule(3, 2), MAX, &bad, &peers, 0),
            Verdict::Go { rungs: 0 }
        );
        // Too few peers reached epoch 2 (the third has one epoch).
        let few = vec![c(&[0.9, 0.9]), c(&[0.9])];
        assert_eq!(
            decide(&median_rule(1, 2), MAX, &bad, &few, 0),
            Verdict::Go { rungs: 0 }
        );
        assert!(matches!(
            decide(&median_rule(2, 2), MAX, &bad, &peers, 0),
            Verdict::Stop(_)
        ));
        // A trial with no value yet is never judged.
        assert_eq!(
            decide(&median_rule(1, 1), MAX, &[None, None], &peers, 0),
            Verdict::Go { rungs: 0 }
        );
    }

    #[test]
    fn halving_keeps_the_best_of_each_rung_and_decides_each_rung_once() {
        // eta 2, rungs at epochs 1, 2, 4.
        let cfg = halving(1, 2, 2);
        let peers = vec![
            c(&[0.5, 0.6, 0.7, 0.8]),
            c(&[0.1, 0.2, 0.3, 0.4]),
            c(&[0.4]),
        ];
        // Rung 1: 0.5, 0.4, 0.3 (own), 0.1 → keep 2: 0.5 and 0.4; own 0.3 stops.
        let Verdict::Stop(p) = decide(&cfg, MAX, &c(&[0.3]), &peers, 0) else {
            panic!()
        };
        assert_eq!(
            (p.epoch, p.value, p.reference, p.compared, p.kept),
            (1, 0.3, 0.4, 4, Some(2))
        );
        assert!(p.describe("mAP").contains("best 2 of the 4"));
        // 0.45 passes rung 1; at epoch 2, rung 2: 0.6, 0.2, own 0.45 → keep 1: stops.
        assert_eq!(
            decide(&cfg, MAX, &c(&[0.45]), &peers, 0),
            Verdict::Go { rungs: 1 }
        );
        let v = decide(&cfg, MAX, &c(&[0.45, 0.45]), &peers, 1);
        assert!(
            matches!(
                v,
                Verdict::Stop(Prune {
                    epoch: 2,
                    kept: Some(1),
                    ..
                })
            ),
            "{v:?}"
        );
        // A rung passed is not judged again, however many arrive later.
        let crowd = vec![c(&[0.9]), c(&[0.9]), c(&[0.9]), c(&[0.9])];
        assert_eq!(
            decide(&cfg, MAX, &c(&[0.45]), &crowd, 1),
            Verdict::Go { rungs: 1 }
        );
        // The first to reach a rung, alone (under min_trials), goes on.
        assert_eq!(
            decide(&cfg, MAX, &c(&[0.01]), &[], 0),
            Verdict::Go { rungs: 1 }
        );
    }

    #[test]
    fn a_trial_started_again_is_not_judged_again_on_the_rungs_it_passed() {
        // eta 2, rungs at epochs 1, 2, 4. The trial passed rungs 1 and 2
        // under its first job (alone there: under min_trials), then was
        // requeued at epoch 3. Meanwhile three trials reached rungs 1 and 2
        // ahead of it.
        let cfg = halving(1, 2, 2);
        assert_eq!(rungs_reached(&cfg, 0), 0);
        assert_eq!(rungs_reached(&cfg, 1), 1);
        assert_eq!(rungs_reached(&cfg, 3), 2);
        assert_eq!(rungs_reached(&cfg, 4), 3);
        assert_eq!(rungs_reached(&halving(2, 2, 3), 5), 1);
        assert_eq!(rungs_reached(&median_rule(1, 2), 9), 0);
        let crowd = vec![
            c(&[0.9, 0.9, 0.9]),
            c(&[0.8, 0.8, 0.8]),
            c(&[0.7, 0.7, 0.7]),
        ];
        let own = c(&[0.3, 0.35, 0.4, 0.45]);
        // A new agent that starts from nothing re-judges rung 1 against the
        // crowd and stops it there: the wrong decision.
        assert!(matches!(
            decide(&cfg, MAX, &own, &crowd, 0),
            Verdict::Stop(Prune { epoch: 1, .. })
        ));
        // Started with the rungs its 3 epochs passed, it is judged at rung 4
        // only, when it gets there: the crowd has not reached it, so it goes on.
        let passed = rungs_reached(&cfg, 3);
        assert_eq!(
            decide(&cfg, MAX, &own, &crowd, passed),
            Verdict::Go { rungs: 3 }
        );
    }

    #[test]
    fn halving_with_one_trial_kept_keeps_only_the_best() {
        // Three trials at rung 1, eta 4: ⌊3/4⌋ = 0 → one is kept, the best.
        let cfg = halving(1, 3, 4);
        let peers = vec![c(&[0.5]), c(&[0.4])];
        assert!(matches!(
            decide(&cfg, MAX, &c(&[0.45]), &peers, 0),
            Verdict::Stop(_)
        ));
        assert_eq!(
            decide(&cfg, MAX, &c(&[0.55]), &peers, 0),
            Verdict::Go { rungs: 1 }
        );
        // Min: the lowest is the best.
        assert_eq!(
            decide(&cfg, Direction::Minimize, &c(&[0.3]), &peers, 0),
            Verdict::Go { rungs: 1 }
        );
    }
}
