#!/usr/bin/env python3
"""What batching costs each sampler of `[tune]` (docs/benchmarks.md).

A known objective stands in for training: a shifted, noisy test function of
lr0 (log scale), momentum, weight_decay, box, cls and mosaic, whose optimum
the sampler does not know. Each search asks its trials in batches of
`parallel` exactly as yolo-sched's ask job does (templates/tune.py: a fresh
sampler per batch, seeded per batch, TPE with constant_liar, `evolve` as
written there), tells the batch, and goes on. Reported: the best objective
after N trials, mean and standard deviation over the seeds, per sampler and
`parallel`. No Slurm, no training.

    python bench/tune_quality.py [--trials 32] [--seeds 10] [--parallel 1,4,8]
        [--samplers tpe,gp,random,evolve]

Needs optuna==5.0.0 (and torch and scipy for gp), e.g. the trainer's venv.
"""
import argparse
import importlib.util
import math
import os
import random
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("tune", os.path.join(HERE, "..", "templates", "tune.py"))
tune = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tune)

import optuna  # noqa: E402
from optuna.trial import TrialState  # noqa: E402

optuna.logging.set_verbosity(optuna.logging.ERROR)

SPACE = [
    {"name": "lr0", "type": "float", "min": 1e-5, "max": 1e-1, "log": True},
    {"name": "momentum", "type": "float", "min": 0.6, "max": 0.98, "log": False},
    {"name": "weight_decay", "type": "float", "min": 0.0, "max": 0.001, "log": False},
    {"name": "box", "type": "float", "min": 1.0, "max": 20.0, "log": False},
    {"name": "cls", "type": "float", "min": 0.1, "max": 4.0, "log": False},
    {"name": "mosaic", "type": "float", "min": 0.0, "max": 1.0, "log": False},
]
# The optimum, off the ranges' centres (in each range's own scale: 0..1).
OPTIMUM = {"lr0": 0.72, "momentum": 0.81, "weight_decay": 0.23, "box": 0.36, "cls": 0.12, "mosaic": 0.9}
WEIGHTS = {"lr0": 3.0, "momentum": 1.5, "weight_decay": 0.5, "box": 1.0, "cls": 1.0, "mosaic": 0.7}


def unit(p, v):
    if p["log"]:
        return (math.log(v) - math.log(p["min"])) / (math.log(p["max"]) - math.log(p["min"]))
    return (v - p["min"]) / (p["max"] - p["min"])


def objective(params, rng):
    """A mAP-like value in (0, 1]: 0.8 at the optimum, a Gaussian bowl with
    a ripple (a local optimum along lr0), plus noise of 0.005."""
    d = sum(WEIGHTS[p["name"]] * (unit(p, params[p["name"]]) - OPTIMUM[p["name"]]) ** 2 for p in SPACE)
    ripple = 0.04 * math.cos(12 * unit(SPACE[0], params["lr0"]))
    return 0.8 * math.exp(-2.5 * d) + ripple + rng.gauss(0, 0.005)


def search(sampler, parallel, trials, seed):
    s = {"sampler": sampler, "seed": seed, "space": SPACE, "direction": "maximize",
         "trials": trials, "parallel": parallel}
    study = optuna.create_study(direction="maximize")
    dists = tune.distributions(optuna, s)
    noise = random.Random(seed * 7919)
    best = -math.inf
    for batch in range(math.ceil(trials / parallel)):
        asked = len(study.trials)
        study.sampler = tune.make_sampler(optuna, s, batch, asked)
        rng = random.Random(tune.seed_for(s, batch, asked))
        batch_trials = []
        for _ in range(min(parallel, trials - asked)):
            if sampler == "evolve":
                done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
                params = tune.evolve(s, done, rng, "maximize")
                if params is not None:
                    study.enqueue_trial(params, skip_if_exists=False)
            batch_trials.append(study.ask(dists))
        for t in batch_trials:
            v = objective(t.params, noise)
            study.tell(t, v)
            best = max(best, v)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=32)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--parallel", default="1,4,8")
    ap.add_argument("--samplers", default="tpe,gp,random,evolve")
    a = ap.parse_args()
    print(f"optuna {optuna.__version__}, python {sys.version.split()[0]}; {a.trials} trials, "
          f"{a.seeds} seeds; best objective after all trials, mean ± sd (optimum ≈ 0.778)")
    print(f"{'sampler':8} {'parallel':>8} {'best (mean ± sd)':>20} {'s per search':>13}")
    for sampler in a.samplers.split(","):
        for parallel in (int(p) for p in a.parallel.split(",")):
            t0 = time.time()
            bests = [search(sampler, parallel, a.trials, seed) for seed in range(a.seeds)]
            per = (time.time() - t0) / a.seeds
            print(f"{sampler:8} {parallel:>8} {statistics.mean(bests):>12.4f} ± {statistics.stdev(bests):.4f} {per:>13.2f}",
                  flush=True)


if __name__ == "__main__":
    main()
