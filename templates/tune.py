#!/usr/bin/env python3
"""yolo-sched's hyperparameter search between jobs (`[tune]`, docs/spec.md).

    tune.py ask  WORKDIR BATCH   propose the batch's trials, write their arguments
    tune.py tell WORKDIR BATCH   record the batch's outcomes, rewrite the summary

Run by the ask and tell jobs of a search, one at a time (the chain's
dependencies see to it), so Optuna's journal file in the run directory has
one writer at any moment even on a shared file system. Offline: Optuna and
its samplers come from the trainer's environment, nothing is downloaded.
Every file this writes is written to a temporary name and renamed.

Trial numbers: array task `n` of the trials' array is the search's trial `n`
(`train-<n>/`); it maps to the Optuna trial number in `tune/trial-<n>.json`,
which differs only after a resume re-asked a trial that had not finished.
"""
import csv
import json
import math
import os
import random
import sys
import time

TUNE = "tune"
SETTINGS = "scripts/tune.json"


def log(msg):
    print(f"tune: {msg}", flush=True)


def die(msg, code=1):
    print(f"tune: error: {msg}", file=sys.stderr, flush=True)
    sys.exit(code)


def write_atomic(path, text):
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def settings_of(workdir):
    s = read_json(os.path.join(workdir, SETTINGS))
    if not isinstance(s, dict):
        die(f"cannot read the search's settings {os.path.join(workdir, SETTINGS)}")
    return s


def batch_trials(s, batch):
    start = batch * s["parallel"]
    return list(range(min(start, s["trials"]), min(start + s["parallel"], s["trials"])))


def import_optuna():
    try:
        import optuna  # noqa: F401
    except ImportError as e:
        die(
            f"Optuna is not installed in {sys.executable} ({e}); install optuna=={SETTINGS_OPTUNA} "
            "into the trainer's environment (slurm/trainer.sh does) or name a Python that has it "
            "with `yolo-sched submit --python`"
        )
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


SETTINGS_OPTUNA = "5.0.0"
SETTINGS_SCIPY = "1.17.1"


def open_study(optuna, workdir, s, sampler=None):
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    os.makedirs(os.path.join(workdir, TUNE), exist_ok=True)
    path = os.path.join(workdir, TUNE, "study.journal")
    storage = JournalStorage(JournalFileBackend(path))
    return optuna.create_study(
        study_name=s["study"],
        storage=storage,
        direction=s["direction"],
        sampler=sampler,
        load_if_exists=True,
    )


def distributions(optuna, s):
    d = {}
    for p in s["space"]:
        if p["type"] == "float":
            d[p["name"]] = optuna.distributions.FloatDistribution(p["min"], p["max"], log=p["log"])
        elif p["type"] == "int":
            d[p["name"]] = optuna.distributions.IntDistribution(p["min"], p["max"], log=p["log"])
        else:
            d[p["name"]] = optuna.distributions.CategoricalDistribution(p["choices"])
    return d


def seed_for(s, batch, asked):
    # Samplers are made anew by every ask job: the same seed each batch would
    # repeat the same random draws, so each batch gets its own, and so does a
    # batch asked again after a resume (`asked`: the study's trials so far).
    if s.get("seed") is None:
        return None
    return (s["seed"] * 1000003 + batch * 1009 + asked) % (2**32)


def make_sampler(optuna, s, batch, asked):
    seed = seed_for(s, batch, asked)
    name = s["sampler"]
    if name == "tpe":
        # constant_liar: trials asked together are steered apart (Optuna 5's default).
        return optuna.samplers.TPESampler(seed=seed, constant_liar=True, multivariate=True)
    if name == "gp":
        # GPSampler needs torch and scipy, but only once it leaves its random
        # start (10 trials): a Python without them would fail a later ask,
        # after hours of trials. Say so at the first one instead.
        missing = []
        for module in ("torch", "scipy"):
            try:
                __import__(module)
            except ImportError:
                missing.append(module)
        if missing:
            die(
                f"sampler = \"gp\" needs {' and '.join(missing)} in {sys.executable}, which lacks it; "
                f"install scipy=={SETTINGS_SCIPY} (and torch) into the trainer's environment "
                "(slurm/trainer.sh does), name a Python that has them with `yolo-sched submit --python`, "
                "or use another sampler"
            )
        return optuna.samplers.GPSampler(seed=seed)
    # random, and evolve (whose proposals are enqueued; the rest are random).
    return optuna.samplers.RandomSampler(seed=seed)


def evolve(s, done, rng, direction):
    """Ultralytics' tuner's mutation (ultralytics 8.4.190 `Tuner._mutate`,
    without its covariance proposals): a parent chosen among the best nine
    with weights by fitness, each range mutated by a Gaussian step of 0.2 of
    its span (scaled by its gain, shrinking while the best stays the best),
    clipped to the range. A choice changes with probability 0.2. With no
    finished trial yet: a uniform draw."""
    space = s["space"]
    if not done:
        return None
    sign = 1 if direction == "maximize" else -1
    ranked = sorted(done, key=lambda t: -sign * t.value)[:9]
    fit = [sign * t.value for t in ranked]
    low = min(fit)
    weights = [f - low + 1e-6 for f in fit]
    parent = rng.choices(ranked, weights=weights, k=1)[0].params
    order = [t.number for t in sorted(done, key=lambda t: t.number)]
    best_number = ranked[0].number
    stale = len(order) - 1 - order.index(best_number)
    decay = 1 - 0.2 * min(stale / 25, 1)
    out = {}
    for p in space:
        name = p["name"]
        if p["type"] == "choice":
            cur = parent.get(name, p["choices"][0])
            out[name] = rng.choice(p["choices"]) if rng.random() < 0.2 else cur
            continue
        lo, hi, log_scale = p["min"], p["max"], p["log"]
        f = (lambda x: math.log(x)) if log_scale else (lambda x: x)
        g = (lambda x: math.exp(x)) if log_scale else (lambda x: x)
        a, b = f(lo), f(hi)
        cur = parent.get(name, g((a + b) / 2))
        x = (f(cur) - a) / (b - a)
        gain = 0.3 if name == "momentum" else 1.0
        for _ in range(10):
            y = x + rng.gauss(0, 0.2 * decay * gain)
            if 0 <= y <= 1:
                break
        y = min(max(y, 0.0), 1.0)
        v = g(a + y * (b - a))
        v = min(max(v, lo), hi)
        out[name] = int(round(v)) if p["type"] == "int" else float(v)
    return out


def args_lines(params):
    lines = []
    for k, v in params.items():
        if isinstance(v, bool):
            v = "True" if v else "False"
        elif isinstance(v, float):
            v = repr(float(v))
        if any(c in str(v) for c in "\n\r\0"):
            die(f"the value of {k} has a line break; it would be read as another argument")
        lines.append(f"{k}={v}")
    return "".join(line + "\n" for line in lines)


def fail_running(optuna, study, keep=()):
    """Tell every trial still RUNNING (and not in `keep`) failed: a zombie
    would steer TPE's constant liar for ever."""
    from optuna.trial import TrialState

    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if t.number in keep:
            continue
        try:
            study.tell(t.number, state=TrialState.FAIL)
            log(f"study trial {t.number} was left running by a stopped batch: told failed")
        except Exception as e:  # already finished by someone: nothing to do
            log(f"study trial {t.number}: {e}")


def ask(workdir, batch):
    s = settings_of(workdir)
    optuna = import_optuna()
    from optuna.trial import TrialState

    trials = batch_trials(s, batch)
    if not trials:
        die(f"batch {batch} has no trials (the search has {s['trials']} trials, {s['parallel']} per batch)", 2)
    asked = len(open_study(optuna, workdir, s).get_trials(deepcopy=False))
    study = open_study(optuna, workdir, s, make_sampler(optuna, s, batch, asked))
    # A resumed batch: trials that finished training but were never told
    # (their tell was cancelled) are told now, not trained again.
    tell_trials(workdir, s, study, trials, only_finished=True)
    fail_running(optuna, study)
    dists = distributions(optuna, s)
    by_number = {t.number: t for t in study.get_trials(deepcopy=False)}
    rng = random.Random(seed_for(s, batch, asked))
    tune_dir = os.path.join(workdir, TUNE)
    for n in trials:
        rec_path = os.path.join(tune_dir, f"trial-{n}.json")
        old = read_json(rec_path)
        if isinstance(old, dict) and by_number.get(old.get("number")) is not None:
            if by_number[old["number"]].state == TrialState.COMPLETE:
                log(f"trial {n} already told (objective {by_number[old['number']].value}): not run again")
                continue
            # Asked before and never finished (a resume): its training directory
            # holds another trial's checkpoint, which must not be resumed.
            save = os.path.join(workdir, f"train-{n}")
            if os.path.isdir(save):
                aside = f"{save}.study-trial-{old['number']}"
                os.replace(save, aside)
                log(f"trial {n}: moved the unfinished training to {aside}")
        if s["sampler"] == "evolve":
            done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            params = evolve(s, done, rng, s["direction"])
            if params is not None:
                study.enqueue_trial(params, skip_if_exists=False)
        trial = study.ask(dists)
        params = {k: trial.params[k] for k in (p["name"] for p in s["space"])}
        record = {"trial": n, "batch": batch, "number": trial.number, "params": params,
                  "asked": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        write_atomic(os.path.join(tune_dir, f"trial-{n}.args"), args_lines(params))
        write_atomic(rec_path, json.dumps(record, indent=1) + "\n")
        log(f"trial {n} (study trial {trial.number}): {args_lines(params).strip().replace(chr(10), ' ')}")
    write_summary(workdir, s, study, optuna)


def objective_of(workdir, n, s):
    """The trial's objective: its best epoch's value of the column, and the
    epochs it reached; None when it has none."""
    path = os.path.join(workdir, f"train-{n}", "results.csv")
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    except OSError:
        return None, 0
    col = s["objective"]
    values = []
    for r in rows:
        r = {(k or "").strip(): (v or "").strip() for k, v in r.items()}
        try:
            v = float(r.get(col, ""))
        except ValueError:
            continue
        if math.isfinite(v):
            values.append(v)
    if not values:
        return None, len(rows)
    best = max(values) if s["direction"] == "maximize" else min(values)
    return best, len(rows)


def objective_curve(workdir, n, s):
    """The objective per epoch of the trial's results.csv (None where missing)."""
    path = os.path.join(workdir, f"train-{n}", "results.csv")
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    except OSError:
        return []
    out = []
    for r in rows:
        r = {(k or "").strip(): (v or "").strip() for k, v in r.items()}
        try:
            v = float(r.get(s["objective"], ""))
        except ValueError:
            v = None
        out.append(v if v is not None and math.isfinite(v) else None)
    return out


def prune_record(workdir, n):
    """The record the trial's agent wrote when it stopped the trial early
    (`[tune] early_stop`): the rule, the epoch and the numbers."""
    rec = read_json(os.path.join(workdir, "state", f"train.{n}.prune.json"))
    return rec if isinstance(rec, dict) else None


def oom_reason(workdir, n):
    """Why the trial failed when its last job ran out of GPU memory (its
    train script's record, with `tune escalate`'s words when it was not
    moved to a bigger slice); None otherwise."""
    rec = read_json(os.path.join(workdir, "state", f"train.{n}.oom.json"))
    if not isinstance(rec, dict):
        return None
    why = f"out of GPU memory ({rec.get('cause') or 'out of memory'})"
    if rec.get("not_moved"):
        why += f"; not moved to a bigger slice: {rec['not_moved']}"
    elif rec.get("moved_to"):
        why += f"; moved to {rec['moved_to']} as job {rec.get('moved_job')}, which did not finish"
    return why


def trial_ended_well(workdir, n):
    end = read_json(os.path.join(workdir, "state", f"train.{n}.end.json"))
    done = os.path.exists(os.path.join(workdir, f"train-{n}", ".yolo-sched-train-done"))
    return isinstance(end, dict) and end.get("exit_code") == 0 and done


def tell(workdir, batch):
    s = settings_of(workdir)
    optuna = import_optuna()
    from optuna.trial import TrialState

    study = open_study(optuna, workdir, s)
    tell_trials(workdir, s, study, batch_trials(s, batch))
    # None of this batch may stay running, whatever happened to its files.
    fail_running(optuna, study)
    write_summary(workdir, s, study, optuna)


def tell_trials(workdir, s, study, trials, only_finished=False):
    """Tell each trial still running in the study its objective, pruned
    (its agent stopped it early), or failed (unless `only_finished`: then
    only those that finished well or were pruned)."""
    from optuna.trial import TrialState

    by_number = {t.number: t for t in study.get_trials(deepcopy=False)}
    for n in trials:
        rec = read_json(os.path.join(workdir, TUNE, f"trial-{n}.json"))
        if not isinstance(rec, dict) or rec.get("number") not in by_number:
            if not only_finished:
                log(f"trial {n}: never asked (its ask job did not write it); nothing to tell")
            continue
        number = rec["number"]
        if by_number[number].state != TrialState.RUNNING:
            if not only_finished:
                log(f"trial {n}: already told ({by_number[number].state.name})")
            continue
        value, epochs = objective_of(workdir, n, s)
        pruned = prune_record(workdir, n)
        if trial_ended_well(workdir, n) and value is not None:
            study.tell(number, value)
            log(f"trial {n}: {s['objective']} = {value} after {epochs} epoch(s)")
        elif pruned is not None:
            # Optuna's own record of a pruned trial: its curve as intermediate
            # values (the last becomes its value, which TPE ranks pruned
            # trials by), then PRUNED.
            trial_id = getattr(by_number[number], "_trial_id", None)
            for step, v in enumerate(objective_curve(workdir, n, s), start=1):
                if v is None or trial_id is None:
                    continue
                try:
                    study._storage.set_trial_intermediate_value(trial_id, step, v)
                except Exception as e:  # the state is what matters
                    log(f"trial {n}: could not record epoch {step}'s value: {e}")
                    break
            study.tell(number, state=TrialState.PRUNED)
            log(f"trial {n}: told pruned after {epochs} epoch(s): {pruned.get('message', '')}")
        elif not only_finished:
            why = oom_reason(workdir, n)
            if why is None:
                why = "it has no value of the objective" if value is None else "its training did not finish"
            trial_id = getattr(by_number[number], "_trial_id", None)
            if trial_id is not None:
                try:
                    study._storage.set_trial_user_attr(trial_id, "fail_reason", why)
                except Exception as e:  # the state is what matters
                    log(f"trial {n}: could not record why it failed: {e}")
            study.tell(number, state=TrialState.FAIL)
            log(f"trial {n}: told failed ({why}; {epochs} epoch(s))")


def write_summary(workdir, s, study, optuna):
    """tune/trials.json (what `status`, `compare` and `tune best` read),
    tune/best-trial, best_hyperparameters.yaml."""
    from optuna.trial import TrialState

    tune_dir = os.path.join(workdir, TUNE)
    by_number = {t.number: t for t in study.get_trials(deepcopy=False)}
    rows = []
    best = None
    sign = 1 if s["direction"] == "maximize" else -1
    for n in range(s["trials"]):
        rec = read_json(os.path.join(tune_dir, f"trial-{n}.json"))
        if not isinstance(rec, dict):
            continue
        t = by_number.get(rec.get("number"))
        state = t.state.name.lower() if t is not None else "unknown"
        value = t.value if t is not None and t.state == TrialState.COMPLETE else None
        _, epochs = objective_of(workdir, n, s)
        if value is not None and (best is None or sign * value > sign * best["value"]):
            best = {"trial": n, "value": value}
        row = {"trial": n, "batch": rec.get("batch"), "number": rec.get("number"),
               "params": rec.get("params", {}), "state": state, "value": value,
               "epochs": epochs, "best_so_far": best["value"] if best else None}
        if t is not None and t.state == TrialState.FAIL and t.user_attrs.get("fail_reason"):
            row["why"] = t.user_attrs["fail_reason"]
        rows.append(row)
    summary = {"objective": s["objective"], "direction": s["direction"], "sampler": s["sampler"],
               "trials_planned": s["trials"], "parallel": s["parallel"], "trials": rows,
               "best": best, "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    write_atomic(os.path.join(tune_dir, "trials.json"), json.dumps(summary, indent=1) + "\n")
    if best is not None:
        write_atomic(os.path.join(tune_dir, "best-trial"), f"{best['trial']}\n")
        params = next(r["params"] for r in rows if r["trial"] == best["trial"])
        done = sum(1 for r in rows if r["state"] == "complete")
        lines = [
            f"# yolo-sched search, trial {best['trial']} of {len(rows)} asked ({done} complete)",
            f"# Best fitness ({s['objective']}, {s['direction']}d) = {best['value']}",
            f"# Sampler: {s['sampler']}; trials' arguments beside this file (trial-<n>.args)",
            "",
        ]
        for k, v in params.items():
            lines.append(f"{k}: {json.dumps(v)}")
        write_atomic(os.path.join(tune_dir, "best_hyperparameters.yaml"), "\n".join(lines) + "\n")


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("ask", "tell") or not sys.argv[3].isdigit():
        die("usage: tune.py ask|tell WORKDIR BATCH", 2)
    mode, workdir, batch = sys.argv[1], sys.argv[2], int(sys.argv[3])
    (ask if mode == "ask" else tell)(workdir, batch)


if __name__ == "__main__":
    main()
