#!/usr/bin/env python3
"""The advisor's own figures against the real scheduler (issue 34, item 4).

    python3 bench/replay/advise_check.py TRACE [--seconds-per-hour 24] [--out DIR]

The trace's window as a site running whole GPUs has it: every job asked for a
whole `a100`, and its measured peak (the trace's `gpu_mem_gib`) is in its
accounting comment, as yolo-sched's job agent writes it (`ysneed=1;...`,
docs/advise.md). In order:

1. replay the window on whole GPUs on the real cluster (replay.py's `whole`);
2. write it as a saved sacct output (`window.sacct`, the fourteen fields
   advise reads; each job's start as the replay measured it) and run
   `yolo-sched advise --json --demand-out` on it against that cluster;
3. give each node the GPUs advise's `auto` plan gives it (its steps), check
   that every job asks for the type advise simulates it on (its
   `--demand-out` type, on the offered types by `advise::simulate::runs_on`),
   and replay the window again;
4. compare advise's predicted mean and p95 wait (`current`, `auto`) with the
   measured ones: within 10 %, or within 0.05 trace hours when that is more.

Run as root from the repository root with the binaries built (run.sh
--advise builds them and calls this). Python 3 standard library only.
"""

import argparse
import collections
import datetime
import json
import os
import shutil
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import replay  # noqa: E402
import tracefile as tracefmt  # noqa: E402

# The window's start in the saved sacct output (local time; any past date).
WINDOW_START = datetime.datetime(2026, 11, 30, 8, 0, 0)
# A job id is FIRST_ID + its trace line.
FIRST_ID = 5000
DEVICE_MIB = 40960  # what an A100-40GB's NVML reports; the comment's device size
HEADROOM = 1.10  # the planner's and advise's headroom on a measured peak
WHOLE_TRES = "billing=8,cpu=8,gres/gpu:a100=1,gres/gpu=1,mem=31000M,node=1"
ACCOUNT = "vision"
# --since is this long before the window's first moment (advise counts a
# demand file's submit_s from --since).
LEAD = datetime.timedelta(hours=1)
REL_TOLERANCE = 0.10
ABS_TOLERANCE_H = 0.05


def stamp(t):
    return t.strftime("%Y-%m-%dT%H:%M:%S")


def peak_mib(job):
    """The peak the job agent would have measured, MiB: `gpu_mem_gib`, or for
    a `gpu_fraction` job the share of the usable memory less the headroom
    (the replay's planner takes a fraction as the need itself)."""
    if job["gpu_mem_gib"] is not None:
        return round(job["gpu_mem_gib"] * 1024)
    return int(job["gpu_fraction"] * replay.WHOLE_GIB * 1024 / HEADROOM)


def sacct_lines(jobs, waits_s=None):
    """The window as `sacct -X --parsable2` prints advise's fourteen fields:
    every job asked a whole a100 and carries its measurement in its comment.
    `waits_s`: {trace line: wait in trace seconds} (how it ran); else 0."""
    waits_s = waits_s or {}
    out = []
    for j in sorted(jobs, key=lambda j: (j["submit_s"], j["line"])):
        jid = FIRST_ID + j["line"]
        dur = max(1, round(j["duration_s"]))
        submit = WINDOW_START + datetime.timedelta(seconds=round(j["submit_s"]))
        start = submit + datetime.timedelta(seconds=max(0, round(waits_s.get(j["line"], 0))))
        end = start + datetime.timedelta(seconds=dur)
        comment = (f"yolo-sched:replay-{j['line']}:trace:train "
                   f"ysneed=1;job={jid};slice=a100;peak_mib={peak_mib(j)}/{DEVICE_MIB}")
        out.append("|".join([str(jid), replay.PARTITION, ACCOUNT, j["user"], "COMPLETED", stamp(submit),
                             stamp(start), stamp(end), str(dur), str(-(-dur // 60)), WHOLE_TRES, WHOLE_TRES,
                             "", comment]))
    return out


def window(jobs):
    """--since and --until around the window: an hour before the first
    submission, a day after the last end."""
    last = max(j["submit_s"] + j["duration_s"] for j in jobs)
    return (stamp(WINDOW_START - LEAD),
            stamp(WINDOW_START + datetime.timedelta(seconds=last + 24 * 3600)))


def outcome(advice, name):
    for s in advice["advice"]["setups"]:
        if s["name"] == name:
            return s["outcome"]
    raise ValueError(f"advise's JSON has no set-up `{name}`")


def predicted(advice, name):
    o = outcome(advice, name)
    return {"jobs": o["jobs"] - o["never_run"], "never_run": o["never_run"],
            "mean_wait_h": o["mean_wait_s"] / 3600.0, "p95_wait_h": o["p95_wait_s"] / 3600.0,
            "peak_concurrent": o["peak_concurrent"]}


def gpu_words(word, whole_type):
    """One GPU of a step (`whole`, `1g.5gb*4,3g.20gb`) as {type: count}."""
    if word == "whole":
        return {whole_type: 1}
    counts = {}
    for item in word.split(","):
        name, _, n = item.partition("*")
        counts[name] = counts.get(name, 0) + int(n or 1)
    return counts


def node_gres(advice, nodes, gpus_per_node, whole_type=replay.WHOLE_TYPE):
    """Each node's Gres once advise's plan is applied: the nodes its steps
    name get the GPUs the step gives, the others stay whole GPUs. Checked
    against the offered instances of advise's `auto` set-up."""
    per_node = {n: {whole_type: gpus_per_node} for n in nodes}
    for step in advice["advice"]["steps"]:
        if step["node"] not in per_node:
            raise ValueError(f"advise planned node {step['node']!r}, not one of {nodes}")
        counts = {}
        for word in step["gpus"]:
            for k, n in gpu_words(word, whole_type).items():
                counts[k] = counts.get(k, 0) + n
        per_node[step["node"]] = counts
    total = collections.Counter()
    for counts in per_node.values():
        total.update(counts)
    offered = next(s["offered"] for s in advice["advice"]["setups"] if s["name"] == "auto")
    if dict(total) != {k: v for k, v in offered.items() if v}:
        raise ValueError(f"advise's steps give {dict(total)}, its auto set-up offers {offered}")
    return {n: ",".join(f"gpu:{k}:{v}" for k, v in sorted(c.items())) for n, c in per_node.items()}


def demand_types(text):
    """advise --demand-out's rows as {(submit_s, time_limit_s): Counter(type)}."""
    rows = collections.defaultdict(collections.Counter)
    header = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        cols = line.split(",")
        if header is None:
            header = cols
            continue
        r = dict(zip(header, cols))
        kind = r["gres"].split(":")[1]
        rows[(int(r["submit_s"]), int(r["time_limit_s"]))][kind] += int(r["jobs"])
    return rows


def job_types(jobs, rows, lead_s=LEAD.total_seconds()):
    """{trace line: the type advise planned it as}, matching each job to a
    demand row by its submission (`lead_s` later in the demand, which counts
    from --since) and run time (seconds, as in the sacct file)."""
    rows = {k: collections.Counter(v) for k, v in rows.items()}
    out = {}
    for j in sorted(jobs, key=lambda j: (j["submit_s"], j["line"])):
        key = (round(j["submit_s"] + lead_s), max(1, round(j["duration_s"])))
        left = rows.get(key)
        if not left:
            raise ValueError(f"trace line {j['line']}: no job of advise's demand at submit_s {key[0]} "
                             f"running {key[1]} s")
        kind = sorted(left)[0]
        left[kind] -= 1
        if not left[kind]:
            del left[kind]
        out[j["line"]] = kind
    extra = sum(sum(c.values()) for c in rows.values())
    if extra:
        raise ValueError(f"advise's demand has {extra} job(s) more than the trace")
    return out


def within(pred, measured):
    """Whether a prediction is within the tolerance: 10 % of the measured
    value, or 0.05 trace hours when that is more (waits near zero)."""
    return abs(pred - measured) <= max(REL_TOLERANCE * measured, ABS_TOLERANCE_H) + 1e-9


def diff(pred, measured):
    d = pred - measured
    rel = f", {d / measured:+.0%}" if measured >= ABS_TOLERANCE_H else ""
    return f"{d:+.2f} h{rel}"


def table(rows, compression, hour):
    """rows: [(label, measured metrics, predicted)]."""
    lines = ["| set-up | jobs run measured / predicted | mean wait (h) measured / predicted | "
             "p95 wait (h) measured / predicted | peak concurrent measured / predicted | within tolerance |",
             "|---|---|---|---|---|---|"]
    for label, m, p in rows:
        ok = within(p["mean_wait_h"], m["mean_wait_h"]) and within(p["p95_wait_h"], m["p95_wait_h"])
        lines.append(
            f"| {label} | {m['jobs']} / {p['jobs']} | {m['mean_wait_h']:.2f} / {p['mean_wait_h']:.2f} "
            f"({diff(p['mean_wait_h'], m['mean_wait_h'])}) | {m['p95_wait_h']:.2f} / {p['p95_wait_h']:.2f} "
            f"({diff(p['p95_wait_h'], m['p95_wait_h'])}) | {m['peak_concurrent']} / {p['peak_concurrent']} | "
            f"{'yes' if ok else 'NO'} |")
    lines.append("")
    lines.append(f"Tolerance: |predicted − measured| ≤ 10 % of measured, or ≤ {ABS_TOLERANCE_H} trace hours "
                 f"when that is more. Time compressed {compression:g}× (one trace hour = {hour:g} s).")
    return "\n".join(lines)


def waits_from(jobs_json, compression):
    """{trace line: measured wait, trace seconds} of a replay's jobs."""
    with open(jobs_json) as f:
        recs = json.load(f)["records"]
    return {r["line"]: max(0.0, r["start"] - r["submit"]) * compression for r in recs if "start" in r}


def main(argv=None):
    ap = argparse.ArgumentParser(description="advise's predicted waits against the replay on the real scheduler")
    ap.add_argument("trace")
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--gpus-per-node", type=int, default=2)
    ap.add_argument("--seconds-per-hour", type=float, default=24.0)
    ap.add_argument("--max-minutes", type=float, default=10.0)
    ap.add_argument("--user", default="researcher")
    ap.add_argument("--out", default="bench/replay/results-advise")
    ap.add_argument("--bin", default="target/debug/yolo-sched")
    ap.add_argument("--plan-bin", default="target/debug/examples/replay_plan")
    ap.add_argument("--fake-lib", default="target/debug/libnvidia_ml.so")
    ap.add_argument("--table-only", action="store_true", help="print the table of --out's results.json again")
    a = ap.parse_args(argv)
    if a.table_only:
        with open(os.path.join(a.out, "results.json")) as f:
            saved = json.load(f)
        rows = [(r["label"], r["measured"], r["predicted"]) for r in saved["rows"]]
        print(table(rows, saved["compression"], saved["seconds_per_trace_hour"]))
        return 0
    if not (1 <= a.nodes <= 16 and 1 <= a.gpus_per_node <= 8 and 5 <= a.seconds_per_hour <= 3600):
        ap.error("need 1 <= --nodes <= 16, 1 <= --gpus-per-node <= 8, 5 <= --seconds-per-hour <= 3600")
    if os.geteuid() != 0:
        ap.error("must run as root (it reconfigures the local cluster)")
    for p in (a.bin, a.plan_bin, a.fake_lib):
        if not os.path.exists(p):
            ap.error(f"{p} is missing: build with bench/replay/run.sh --advise")
    try:
        jobs = tracefmt.load(a.trace)
    except tracefmt.TraceError as e:
        print(f"advise_check: invalid trace: {e}", file=sys.stderr)
        return 2
    os.makedirs(a.out, exist_ok=True)
    a.max_trace_hours = 24.0
    rp = replay.Replay(a)

    def on_term(*_):
        raise KeyboardInterrupt("SIGTERM")

    signal.signal(signal.SIGTERM, on_term)
    nodes = [f"node{k}" for k in range(1, a.nodes + 1)]
    try:
        whole = rp.one("whole")
        # The window as accounting has it, the starts as they were measured.
        sacct = os.path.join(a.out, "window.sacct")
        with open(sacct, "w") as f:
            f.write("\n".join(sacct_lines(jobs, waits_from(os.path.join(a.out, "whole.jobs.json"),
                                                           rp.compression))) + "\n")
        since, until = window(jobs)
        demand = os.path.join(a.out, "demand.csv")
        cmd = [a.bin, "advise", "--sacct-file", sacct, "--since", since, "--until", until,
               "--partition", replay.PARTITION, "--gpu-model", "a100-40gb", "--json", "--demand-out", demand]
        replay.log("advise: " + " ".join(cmd))
        out = replay.run(cmd).stdout
        with open(os.path.join(a.out, "advise.json"), "w") as f:
            f.write(out)
        advice = json.loads(out)
        needs = advice["needs"]
        if needs["measured"]["jobs"] != len(jobs):
            raise RuntimeError(f"advise planned {needs['measured']['jobs']} of {len(jobs)} jobs from their "
                               f"measurement: {needs}")
        shapes = node_gres(advice, nodes, a.gpus_per_node)
        replay.log(f"advise's auto plan: {shapes}")
        with open(demand) as f:
            planned = job_types(jobs, demand_types(f.read()))
        total = collections.Counter()
        for s in shapes.values():
            for item in s.split(","):
                _, k, n = item.split(":")
                total[k] += int(n)
        offered = ",".join(f"gpu:{k}:{n}" for k, n in sorted(total.items()))
        kinds = sorted(set(planned.values()))
        runs = dict(line.split("\t") for line in
                    replay.run([a.plan_bin, "runs-on", offered, *kinds]).stdout.splitlines())
        expect = {line: runs[k] for line, k in planned.items()}
        auto = rp.one("auto", shapes=shapes, expect=expect)
    finally:
        rp.restore()
        shutil.rmtree(rp.work, ignore_errors=True)
    rows = [("whole (as it ran)", whole, predicted(advice, "current")),
            ("advise's auto plan", auto, predicted(advice, "auto"))]
    md = table(rows, rp.compression, a.seconds_per_hour)
    result = {
        "trace": a.trace, "jobs_in_trace": len(jobs), "nodes": a.nodes, "gpus_per_node": a.gpus_per_node,
        "seconds_per_trace_hour": a.seconds_per_hour, "compression": rp.compression,
        "advise": {"command": cmd, "needs": needs, "gres_per_node": shapes, "steps": advice["advice"]["steps"]},
        "types_asked_in_auto": dict(collections.Counter(expect.values())),
        "rows": [{"label": label, "setup": m["setup"],
                  "measured": {k: m[k] for k in ("jobs", "mean_wait_h", "p95_wait_h", "peak_concurrent",
                                                 "makespan_h", "unrunnable", "refused", "lost", "problem",
                                                 "real_seconds")},
                  "predicted": p,
                  "within": {"mean": within(p["mean_wait_h"], m["mean_wait_h"]),
                             "p95": within(p["p95_wait_h"], m["p95_wait_h"])}} for label, m, p in rows],
    }
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(a.out, "results.md"), "w") as f:
        f.write(md + "\n")
    print(md)
    ok = all(r["within"]["mean"] and r["within"]["p95"] and not r["measured"]["problem"] for r in result["rows"])
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt as e:
        print(f"advise_check: interrupted ({e or 'Ctrl-C'}); the standard cluster was restored", file=sys.stderr)
        sys.exit(130)
    except (RuntimeError, ValueError, subprocess.SubprocessError) as e:
        print(f"advise_check: {e}", file=sys.stderr)
        sys.exit(1)
