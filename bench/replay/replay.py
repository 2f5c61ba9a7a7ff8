#!/usr/bin/env python3
"""Replay a job trace on the real local Slurm cluster, time-compressed, once per
GPU set-up on the same hardware, and measure the real jobs (README.md here).

    python3 bench/replay/replay.py TRACE [--setups whole,all-1g,balanced,auto]
        [--nodes 4] [--gpus-per-node 2] [--seconds-per-hour 24] [--out DIR]

Run as root from the repository root, with the binaries built (bench/replay/run.sh
builds them and calls this). Each set-up: the per-GPU layout comes from
`yolo-sched node-setup --dry-run --json` on a fake NVML node with the GPUs,
the cluster gets that GRES (slurm/cluster.sh NODE_GRES), each job asks for what
examples/replay_plan prints (yolo-sched's planner and shaping), and is a
`sleep` of its scaled duration submitted by `sbatch` at its scaled submit time.
At the end, and on any failure, the standard cluster comes back
(`NODES=2 slurm/cluster.sh up`). Python 3 standard library only.
"""

import argparse
import concurrent.futures
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tracefile as tracefmt  # noqa: E402

GPU_MODEL = "NVIDIA A100-SXM4-40GB"
WHOLE_TYPE = "a100"
FIXTURE = "tests/fixtures/nvml/a100-sxm4-40gb.json"
UNITS_PER_GPU = 7
WHOLE_GIB = 39.5  # usable memory of an A100-40GB (7g.40gb), as examples/replay_plan uses
PARTITION = "gpu"
DEV_DIR = "/dev/yolo-fakegpu"
# The cluster: slurm/cluster.sh's INSTANCE (run.sh exports it and its SLURM_CONF,
# which every Slurm command here and yolo-sched then read).
INSTANCE = os.environ.get("INSTANCE", "1")
JOBCOMP = "/var/log/yolo-slurm{}/jobcomp.log".format("" if INSTANCE == "1" else f"-{INSTANCE}")
# Backfill every second: the default 30 s would be 30 s x compression of trace time.
SCHED_PARAMS = "bf_interval=1"
LAYOUTS = {"whole": "disabled", "all-1g": "all-1g", "balanced": "balanced", "auto": "auto"}


def log(msg):
    print(f"replay: {msg}", file=sys.stderr, flush=True)


def run(cmd, env=None, check=True, capture=True, timeout=300):
    r = subprocess.run(cmd, env=env, text=True, timeout=timeout,
                       stdout=subprocess.PIPE if capture else None,
                       stderr=subprocess.PIPE if capture else None)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}: {(r.stderr or '')[-2000:]}")
    return r


class Replay:
    def __init__(self, a):
        self.a = a
        self.bin = a.bin
        self.plan_bin = a.plan_bin
        self.work = tempfile.mkdtemp(prefix="yolo-replay.")
        os.chmod(self.work, 0o755)
        self.devices_before = self._devices()
        self.jobs = tracefmt.load(a.trace)
        self.hour = a.seconds_per_hour  # real seconds per trace hour
        self.compression = 3600.0 / self.hour
        self.ids = []

    # ------------------------------------------------------------ cluster

    def cluster_up(self, node_gres=None):
        env = dict(os.environ)
        for k in ("NODE_GRES", "SCHED_PARAMS", "NODES", "GRES_CONF_NODE1", "MIG_NODE"):
            env.pop(k, None)
        if node_gres is None:
            env["NODES"] = "2"
        else:
            env.update(NODES=str(self.a.nodes), NODE_GRES=node_gres, SCHED_PARAMS=SCHED_PARAMS)
        run(["bash", "slurm/cluster.sh", "up"], env=env, capture=False, timeout=600)

    def restore(self):
        log("restoring the standard cluster: NODES=2 slurm/cluster.sh up")
        self.cancel()
        try:
            self.cluster_up(None)
        finally:
            for path in sorted(self._devices() - self.devices_before, reverse=True):
                try:
                    (os.rmdir if os.path.isdir(path) else os.remove)(path)
                except OSError:
                    pass

    def cancel(self):
        if self.ids:
            subprocess.run(["scancel", "--quiet", *self.ids], check=False)

    @staticmethod
    def _devices():
        """The fake devices of node1..nodeN: the only ones the replay makes (the
        other instances' pool and MIG nodes have theirs beside them, not ours to remove)."""
        found = set()
        for root, dirs, files in os.walk(DEV_DIR):
            found.update(os.path.join(root, x) for x in dirs + files)
        return {p for p in found if re.match(r"node[0-9]+(/|$)", os.path.relpath(p, DEV_DIR))}

    # ------------------------------------------------------------ GRES per node

    def fake_node(self, name):
        """A fake NVML node with --gpus-per-node A100-40GB, MIG mode on."""
        d = os.path.join(self.work, "nvml", name)
        os.makedirs(d, exist_ok=True)
        with open(FIXTURE) as f:
            fx = json.load(f)
        gpu = fx["gpus"][0]
        gpus = []
        for i in range(self.a.gpus_per_node):
            g = dict(gpu, minor=i, mig_enabled=True, uuid=gpu["uuid"][:-2] + f"{i + 1:02d}",
                     pci_bus_id=f"00000000:{7 + 8 * i:02X}:00.0")
            gpus.append(g)
        fx["gpus"] = gpus
        fx["comment"] = f"bench/replay: {len(gpus)} x {GPU_MODEL}, MIG mode on"
        fixture = os.path.join(d, "fake-nvml.json")
        with open(fixture, "w") as f:
            json.dump(fx, f, indent=1)
        lib = os.path.join(d, "libnvidia-ml.so.1")
        shutil.copy(self.a.fake_lib, lib)
        site = os.path.join(d, "site.toml")
        open(site, "w").close()
        env = dict(os.environ, YOLO_SCHED_NVML_LIB=lib, FAKE_NVML_FIXTURE=fixture,
                   FAKE_NVML_SYSROOT=os.path.join(d, "sysroot"), YOLO_SCHED_SITE=site)
        return d, env

    def node_setup(self, setup, node, demand=None):
        d, env = self.fake_node(f"{setup}-{node}")
        gres_conf = os.path.join(d, "gres.conf")
        open(gres_conf, "w").close()
        cmd = [self.bin, "node-setup", "--dry-run", "--json", "--layout", LAYOUTS[setup],
               "--node", node, "--gres-conf", gres_conf, "--sysroot", os.path.join(d, "sysroot")]
        if demand:
            cmd += ["--demand", demand]  # reads the live cluster for the other nodes' instances
        else:
            cmd += ["--no-slurm"]
        out = run(cmd, env=env).stdout
        with open(os.path.join(d, "dry-run.json"), "w") as f:
            f.write(out)
        if demand:  # keep auto's decisions with the results
            shutil.copy(os.path.join(d, "dry-run.json"), os.path.join(self.a.out, f"auto-{node}.dry-run.json"))
            shutil.copy(demand, os.path.join(self.a.out, "auto-demand.csv"))
        plan = json.loads(out)
        layouts = []
        for g in plan["decision"]["gpus"]:
            counts = {}
            for i in g["target"].get("instances", []):
                counts[i["profile"]] = counts.get(i["profile"], 0) + 1
            layouts.append(" + ".join(p if n == 1 else f"{p}*{n}" for p, n in counts.items()) or "whole")
        for line in plan["slurm_conf"].splitlines():
            if line.startswith(f"NodeName={node} Gres="):
                return line.split("Gres=", 1)[1].split()[0], layouts
        raise RuntimeError(f"node-setup printed no Gres= line for {node}: {plan['slurm_conf']!r}")

    def write_node_gres(self, setup, shapes):
        path = os.path.join(self.work, f"node-gres-{setup}.txt")
        with open(path, "w") as f:
            for node, gres in shapes.items():
                f.write(f"{node} {gres}\n")
        return path

    def demand_supported(self):
        r = run([self.bin, "node-setup", "--help"], check=False)
        return "--demand" in (r.stdout or "")

    def configure(self, setup):
        nodes = [f"node{k}" for k in range(1, self.a.nodes + 1)]
        if setup != "auto":
            shapes, layouts = {}, {}
            for n in nodes:
                shapes[n], layouts[n] = self.node_setup(setup, n)
            path = self.write_node_gres(setup, shapes)
            self.cluster_up(path)
            return shapes, layouts, None
        demand = os.path.join(self.work, "demand.csv")
        with open(demand, "w") as f:
            f.write(run([self.plan_bin, "demand", self.a.trace, GPU_MODEL, WHOLE_TYPE]).stdout)
        # Roll out node by node: nodes not set up yet offer no GPU, so each
        # node-setup sees only the instances of the nodes before it.
        shapes = {n: "-" for n in nodes}
        layouts = {}
        self.cluster_up(self.write_node_gres(setup, shapes))
        for n in nodes:
            shapes[n], layouts[n] = self.node_setup(setup, n, demand)
            log(f"auto: {n} gets {shapes[n]} ({'; '.join(layouts[n])})")
            self.cluster_up(self.write_node_gres(setup, shapes))
        return shapes, layouts, demand

    # ------------------------------------------------------------ one replay

    def plan(self):
        out = run([self.plan_bin, "plan", self.a.trace, PARTITION, GPU_MODEL]).stdout
        asks = {}
        for row in out.splitlines():
            f = row.split("\t")
            if f[1] == "ok":
                asks[int(f[0])] = {"gres": f[2], "cpus": int(f[3]), "mem_mib": int(f[4]), "units": int(f[5])}
            else:
                asks[int(f[0])] = {"unrunnable": f[2]}
        missing = [j["line"] for j in self.jobs if j["line"] not in asks]
        if missing:
            raise RuntimeError(f"replay_plan gave no answer for trace lines {missing[:10]}")
        return asks

    def submit_all(self, setup, asks, jobdir):
        records = {}
        lock = threading.Lock()
        t0 = time.time() + 2.0

        def submit(job):
            ask = asks[job["line"]]
            due = t0 + job["submit_s"] / self.compression
            time.sleep(max(0.0, due - time.time()))
            sleep_s = job["duration_s"] / self.compression
            stem = os.path.join(jobdir, str(job["line"]))
            wrap = (f"/bin/date +%s.%N > {stem}.start; /bin/sleep {sleep_s:.3f}; "
                    f"/bin/date +%s.%N > {stem}.end")
            cmd = ["sbatch", "--parsable", "-p", PARTITION, f"--gres={ask['gres']}",
                   f"--cpus-per-task={ask['cpus']}", f"--mem={ask['mem_mib']}M",
                   f"--job-name=replay-{setup}-{job['line']}", "--output=/dev/null",
                   f"--comment=trace-user:{job['user']}", f"--chdir={jobdir}", f"--wrap={wrap}"]
            if self.a.user != "root":
                cmd = ["runuser", "-u", self.a.user, "--"] + cmd
            submitted = time.time()
            r = subprocess.run(cmd, text=True, capture_output=True, timeout=60)
            need = job["gpu_mem_gib"] if job["gpu_mem_gib"] is not None else job["gpu_fraction"] * WHOLE_GIB
            rec = {"line": job["line"], "due": due, "submit": submitted, "units": ask["units"], "need_gib": need,
                   "gres": ask["gres"], "cpus": ask["cpus"], "user": job["user"]}
            if r.returncode != 0:
                rec["refused"] = r.stderr.strip()[-300:]
            else:
                rec["job_id"] = r.stdout.strip().split(";")[0]
                with lock:
                    self.ids.append(rec["job_id"])
            with lock:
                records[job["line"]] = rec

        runnable = [j for j in self.jobs if "unrunnable" not in asks[j["line"]]]
        with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
            for fut in [pool.submit(submit, j) for j in runnable]:
                fut.result()
        return t0, records

    def wait_done(self, records, deadline):
        ids = [r["job_id"] for r in records.values() if "job_id" in r]
        while True:
            r = run(["squeue", "-h", "-t", "PD,R,CG,CF,S", "-o", "%i|%T|%r", "-j", ",".join(ids)], check=False)
            left = [line for line in (r.stdout or "").splitlines() if line.strip()]
            if not left:
                return None
            if time.time() > deadline:
                self.cancel()
                return f"{len(left)} job(s) not finished by the deadline, cancelled: {left[:5]}"
            time.sleep(1.0)

    @staticmethod
    def jobcomp(ids):
        """Start and end (epoch seconds, 1 s resolution) of these jobs from jobcomp/filetxt."""
        want, out = set(ids), {}
        try:
            with open(JOBCOMP) as f:
                for line in f:
                    kv = dict(p.split("=", 1) for p in line.split() if "=" in p)
                    if kv.get("JobId") in want:
                        out[kv["JobId"]] = {k: time.mktime(time.strptime(kv[k], "%Y-%m-%dT%H:%M:%S"))
                                            for k in ("StartTime", "EndTime", "SubmitTime") if kv.get(k, "Unknown") != "Unknown"}
                        out[kv["JobId"]]["state"] = kv.get("JobState")
                        out[kv["JobId"]]["node"] = kv.get("NodeList")
        except OSError:
            pass
        return out

    def one(self, setup, shapes=None, expect=None):
        """Replay the trace on one set-up: a built-in layout or `auto` set up
        by node-setup, or, with `shapes`, the given Gres per node (advise's
        plan). `expect`: {trace line: GPU type} each job must ask for (checked
        before anything is submitted)."""
        log(f"{setup}: configuring {self.a.nodes} nodes x {self.a.gpus_per_node} GPUs")
        if shapes is None:
            shapes, layouts, demand = self.configure(setup)
        else:
            layouts = {}
            self.cluster_up(self.write_node_gres(setup, shapes))
        asks = self.plan()
        if expect is not None:
            wrong = type_mismatches(asks, expect)
            if wrong:
                raise RuntimeError(f"{setup}: {len(wrong)} job(s) would not ask for the type expected "
                                   f"(trace line, asks, expected): {wrong[:10]}")
        jobdir = os.path.join(self.work, f"jobs-{setup}")
        os.makedirs(jobdir)
        os.chmod(jobdir, 0o1777)
        unrunnable = {line: a["unrunnable"] for line, a in asks.items() if "unrunnable" in a}
        span = max(j["submit_s"] + j["duration_s"] for j in self.jobs) / self.compression
        log(f"{setup}: GRES per node {shapes}; {len(asks) - len(unrunnable)} jobs to replay, "
            f"{len(unrunnable)} unrunnable; trace span at least {span:.0f} s real")
        started = time.time()
        load_before = os.getloadavg()[0]
        t0, records = self.submit_all(setup, asks, jobdir)
        deadline = time.time() + self.a.max_minutes * 60
        problem = self.wait_done(records, deadline)
        time.sleep(1.5)  # jobcomp is written as the job completes
        comp = self.jobcomp([r["job_id"] for r in records.values() if "job_id" in r])
        runs, refused, lost, drift = [], [], [], []
        for rec in records.values():
            if "refused" in rec:
                refused.append(rec)
                continue
            stem = os.path.join(jobdir, str(rec["line"]))
            try:
                with open(stem + ".start") as f:
                    rec["start"] = float(f.read())
                with open(stem + ".end") as f:
                    rec["end"] = float(f.read())
            except (OSError, ValueError):
                lost.append(rec)
                continue
            c = comp.get(rec["job_id"], {})
            rec["jobcomp"] = c
            if "StartTime" in c:
                drift.append(abs(c["StartTime"] - rec["start"]))
            runs.append(rec)
        gpus = self.a.nodes * self.a.gpus_per_node
        m = tracefmt.metrics(runs, gpus * UNITS_PER_GPU, self.compression, gpus * WHOLE_GIB)
        m.update({
            "setup": setup, "compression": self.compression, "gres_per_node": shapes, "gpu_layouts": layouts,
            "unrunnable": len(unrunnable), "refused": len(refused), "lost": len(lost),
            "problem": problem, "real_seconds": time.time() - started,
            # The host's load: Slurm's latency, in trace time, grows with it.
            "load_average_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
            "submit_lag_s_max": max((r["submit"] - r["due"] for r in records.values()), default=0.0),
            "jobcomp_matched": len(drift),
            "jobcomp_start_diff_s_max": max(drift, default=None),
            "asks": sorted({f"{r['gres']} -c {r['cpus']}" for r in runs}),
        })
        with open(os.path.join(self.a.out, f"{setup}.jobs.json"), "w") as f:
            json.dump({"records": sorted(records.values(), key=lambda r: r["line"]),
                       "unrunnable": unrunnable, "t0": t0}, f, indent=1)
        log(f"{setup}: {json.dumps({k: m[k] for k in m if k not in ('gres_per_node', 'gpu_layouts', 'asks')})}")
        return m


def type_mismatches(asks, expect):
    """(line, GPU type asked, type expected) of each job whose planned GRES is
    not of the expected type (an unrunnable job asks for none)."""
    wrong = []
    for line, want in sorted(expect.items()):
        ask = asks.get(line, {})
        got = ask["gres"].split(":")[1] if "gres" in ask else None
        if got != want:
            wrong.append((line, got, want))
    return wrong


def common_waits(results, out_dir):
    """Mean wait (trace hours) per set-up over the jobs that every set-up ran."""
    waits = {}
    for r in results:
        path = os.path.join(out_dir, f"{r['setup']}.jobs.json")
        try:
            with open(path) as f:
                recs = json.load(f)["records"]
        except (OSError, ValueError, KeyError):
            return {}
        hour = 3600.0 / r["compression"]
        waits[r["setup"]] = {x["line"]: max(0.0, x["start"] - x["submit"]) / hour
                             for x in recs if "start" in x and "end" in x}
    common = set.intersection(*(set(w) for w in waits.values())) if waits else set()
    if not common:
        return {}
    return {s: (sum(w[k] for k in common) / len(common), len(common)) for s, w in waits.items()}


def table(results, compression, hour, out_dir=None):
    cols = [("set-up", "setup", "{}"), ("jobs run", "jobs", "{}"), ("unrunnable", "unrunnable", "{}"),
            ("mean wait (h)", "mean_wait_h", "{:.2f}"), ("p95 wait (h)", "p95_wait_h", "{:.2f}"),
            ("peak concurrent", "peak_concurrent", "{}"), ("mean concurrent", "mean_concurrent", "{:.1f}"),
            ("makespan (h)", "makespan_h", "{:.1f}"), ("GPU-unit utilisation", "unit_utilisation", "{:.0%}"),
            ("GPU memory needed / total", "memory_need_utilisation", "{:.0%}")]
    lines = ["| " + " | ".join(c[0] for c in cols) + " |", "|" + "---|" * len(cols)]
    for r in results:
        cells = []
        for _, key, fmt in cols:
            v = r.get(key)
            cells.append("–" if v is None else fmt.format(v))
        lines.append("| " + " | ".join(cells) + " |")
    common = common_waits(results, out_dir) if out_dir else {}
    if common and len(results) > 1:
        n = next(iter(common.values()))[1]
        lines.append("")
        lines.append(f"Mean wait over the {n} jobs every set-up ran: "
                     + ", ".join(f"{s} {w:.2f} h" for s, (w, _) in common.items()) + ".")
    base = next((r for r in results if r["setup"] == "whole" and r.get("jobs")), None)
    if base:
        lines.append("")
        lines.append("| vs whole GPUs | mean wait whole/this | p95 wait whole/this | peak concurrent this/whole | mean concurrent this/whole |")
        lines.append("|---|---|---|---|---|")
        for r in results:
            if r is base or not r.get("jobs"):
                continue
            def ratio(a, b):
                return "∞" if b == 0 else f"{a / b:.1f}×"
            lines.append(f"| {r['setup']} | {ratio(base['mean_wait_h'], r['mean_wait_h'])} | "
                         f"{ratio(base['p95_wait_h'], r['p95_wait_h'])} | "
                         f"{ratio(r['peak_concurrent'], base['peak_concurrent'])} | "
                         f"{ratio(r['mean_concurrent'], base['mean_concurrent'])} |")
    lines.append("")
    lines.append(f"Time compressed {compression:g}×: one trace hour = {hour:g} s of real time. "
                 "Waits and makespan in trace hours.")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description="replay a job trace on the local Slurm cluster")
    ap.add_argument("trace")
    ap.add_argument("--setups", default="whole,all-1g,balanced,auto")
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--gpus-per-node", type=int, default=2)
    ap.add_argument("--seconds-per-hour", type=float, default=24.0, help="real seconds per trace hour")
    ap.add_argument("--max-minutes", type=float, default=10.0, help="real minutes a set-up may take after its last submission")
    ap.add_argument("--max-trace-hours", type=float, default=24.0, help="refuse traces whose submissions span more")
    ap.add_argument("--user", default="researcher", help="local user that submits (default researcher)")
    ap.add_argument("--out", default="bench/replay/results")
    ap.add_argument("--bin", default="target/debug/yolo-sched")
    ap.add_argument("--plan-bin", default="target/debug/examples/replay_plan")
    ap.add_argument("--fake-lib", default="target/debug/libnvidia_ml.so")
    ap.add_argument("--table-only", action="store_true",
                    help="print the table of the results in --out again; run nothing (TRACE is ignored)")
    a = ap.parse_args(argv)
    if a.table_only:
        with open(os.path.join(a.out, "results.json")) as f:
            saved = json.load(f)
        for r in saved["results"]:
            r.setdefault("compression", saved["compression"])
        md = table(saved["results"], saved["compression"], saved["seconds_per_trace_hour"], a.out)
        with open(os.path.join(a.out, "results.md"), "w") as f:
            f.write(md + "\n")
        print(md)
        return 0
    setups = [s for s in a.setups.split(",") if s]
    bad = [s for s in setups if s not in LAYOUTS]
    if bad or not setups:
        ap.error(f"--setups: unknown {bad}; choose from {','.join(LAYOUTS)}")
    if not (1 <= a.nodes <= 16 and 1 <= a.gpus_per_node <= 8 and 5 <= a.seconds_per_hour <= 3600):
        ap.error("need 1 <= --nodes <= 16, 1 <= --gpus-per-node <= 8, 5 <= --seconds-per-hour <= 3600")
    if os.geteuid() != 0:
        ap.error("must run as root (it reconfigures the local cluster)")
    for p in (a.bin, a.plan_bin, a.fake_lib):
        if not os.path.exists(p):
            ap.error(f"{p} is missing: build with bench/replay/run.sh (or cargo build; cargo build -p fake-nvml; cargo build --example replay_plan)")
    try:
        jobs = tracefmt.load(a.trace)
    except tracefmt.TraceError as e:
        print(f"replay: invalid trace: {e}", file=sys.stderr)
        return 2
    last = max(j["submit_s"] for j in jobs) / 3600
    if last > a.max_trace_hours:
        print(f"replay: the trace's submissions span {last:.1f} h, more than --max-trace-hours {a.max_trace_hours:g}", file=sys.stderr)
        return 2
    os.makedirs(a.out, exist_ok=True)
    rp = Replay(a)
    if "auto" in setups and not rp.demand_supported():
        log("auto skipped: this yolo-sched has no `node-setup --demand` yet (it is coming in main); "
            "rerun with --setups auto once it is merged")
        setups.remove("auto")
    def on_term(*_):
        raise KeyboardInterrupt("SIGTERM")

    signal.signal(signal.SIGTERM, on_term)
    results = []
    try:
        for s in setups:
            results.append(rp.one(s))
            with open(os.path.join(a.out, "results.json"), "w") as f:
                json.dump({"trace": a.trace, "jobs_in_trace": len(jobs), "nodes": a.nodes,
                           "gpus_per_node": a.gpus_per_node, "gpu_model": GPU_MODEL,
                           "seconds_per_trace_hour": a.seconds_per_hour,
                           "compression": rp.compression, "results": results}, f, indent=1)
    finally:
        rp.restore()
        shutil.rmtree(rp.work, ignore_errors=True)
    md = table(results, rp.compression, a.seconds_per_hour, a.out)
    with open(os.path.join(a.out, "results.md"), "w") as f:
        f.write(md + "\n")
    print(md)
    return 0 if all(not r.get("problem") for r in results) else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt as e:
        print(f"replay: interrupted ({e or 'Ctrl-C'}); the standard cluster was restored", file=sys.stderr)
        sys.exit(130)
