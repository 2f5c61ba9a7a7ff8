"""The replay's pure parts: reading and checking a trace, and the metrics.

Trace format (bench/replay/README.md): CSV, comma-separated, no quoting. Lines
that are empty or start with `#` are ignored. The first other line is the
header: the five column names below, in any order. Each further line is one job:

  submit_s      seconds since the trace's start, >= 0
  duration_s    run time in seconds, > 0
  gpu_mem_gib   peak GPU memory in GiB, > 0 (yolo-sched adds its 10 % headroom)
  gpu_fraction  fraction of one GPU, 0 < f <= 1 (the memory of that share)
  user          1-64 characters of [A-Za-z0-9._@-]

Exactly one of gpu_mem_gib and gpu_fraction is set per job; the other is empty.
Python 3 standard library only.
"""

import math
import re

COLUMNS = ("submit_s", "duration_s", "gpu_mem_gib", "gpu_fraction", "user")
MAX_BYTES = 8 * 1024 * 1024
MAX_JOBS = 20000
MAX_LINE = 1024
# A week: longer jobs or traces are not what a compressed replay is for.
MAX_SECONDS = 7 * 24 * 3600
MAX_GIB = 1024.0
USER_RE = re.compile(r"^[A-Za-z0-9._@-]{1,64}$")


class TraceError(Exception):
    """A trace that does not follow the format: where, and what was expected."""

    def __init__(self, path, line, column, expected, got):
        self.path, self.line, self.column = path, line, column
        self.expected, self.got = expected, got
        where = f"{path}:{line}" + (f": column {column}" if column else "")
        super().__init__(f"{where}: expected {expected}, got {got!r}")


def _number(path, lineno, column, text, lo, lo_open, hi):
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise TraceError(path, lineno, column, "a number", text)
    if value < lo or (lo_open and value == lo) or value > hi:
        bound = f"{'>' if lo_open else '>='} {lo:g} and <= {hi:g}"
        raise TraceError(path, lineno, column, f"a number {bound}", text)
    return value


def parse(text, path="trace"):
    """Jobs of a trace as dicts (line, submit_s, duration_s, gpu_mem_gib,
    gpu_fraction, user), sorted by submission (ties keep file order)."""
    if len(text.encode("utf-8")) > MAX_BYTES:
        raise TraceError(path, 0, None, f"at most {MAX_BYTES} bytes", "a larger file")
    header = None
    jobs = []
    # "\n" only, as Rust's str::lines (examples/replay_plan.rs numbers lines the same way).
    for lineno, raw in enumerate(text.split("\n"), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if len(line) > MAX_LINE:
            raise TraceError(path, lineno, None, f"a line of at most {MAX_LINE} characters", line[:40] + "...")
        if '"' in line:
            raise TraceError(path, lineno, None, "fields without quotes (the format has no quoting)", line)
        fields = [f.strip() for f in line.split(",")]
        if header is None:
            if sorted(fields) != sorted(COLUMNS):
                raise TraceError(path, lineno, None, "the header " + ",".join(COLUMNS) + " (any order)", line)
            header = fields
            continue
        if len(fields) != len(header):
            raise TraceError(path, lineno, None, f"{len(header)} comma-separated fields", f"{len(fields)} fields: {line}")
        if len(jobs) >= MAX_JOBS:
            raise TraceError(path, lineno, None, f"at most {MAX_JOBS} jobs", "more")
        row = dict(zip(header, fields))
        job = {"line": lineno}
        job["submit_s"] = _number(path, lineno, "submit_s", row["submit_s"], 0.0, False, MAX_SECONDS)
        job["duration_s"] = _number(path, lineno, "duration_s", row["duration_s"], 0.0, True, MAX_SECONDS)
        mem, frac = row["gpu_mem_gib"], row["gpu_fraction"]
        if mem and frac:
            raise TraceError(path, lineno, "gpu_fraction", "empty when gpu_mem_gib is set (one of the two per job)", frac)
        if not mem and not frac:
            raise TraceError(path, lineno, "gpu_mem_gib", "a value in gpu_mem_gib or gpu_fraction", "both empty")
        job["gpu_mem_gib"] = _number(path, lineno, "gpu_mem_gib", mem, 0.0, True, MAX_GIB) if mem else None
        job["gpu_fraction"] = _number(path, lineno, "gpu_fraction", frac, 0.0, True, 1.0) if frac else None
        if not USER_RE.match(row["user"]):
            raise TraceError(path, lineno, "user", "1-64 characters of A-Z a-z 0-9 . _ @ -", row["user"])
        job["user"] = row["user"]
        jobs.append(job)
    if header is None:
        raise TraceError(path, 0, None, "a header line", "an empty file")
    if not jobs:
        raise TraceError(path, 0, None, "at least one job", "none")
    jobs.sort(key=lambda j: j["submit_s"])
    return jobs


def load(path):
    with open(path, "rb") as f:
        data = f.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise TraceError(path, 0, None, f"at most {MAX_BYTES} bytes", "a larger file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise TraceError(path, 0, None, "UTF-8 text", f"byte {e.start}") from None
    return parse(text, path)


def percentile(values, q):
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[rank - 1]


def metrics(runs, total_units, compression, total_gib=None):
    """Figures of one replay from the real jobs' times.

    runs: dicts with `submit`, `start`, `end` (real seconds, any origin) and
    `units` (GPU compute units the job held: 1 for a 1g slice, 7 for a whole
    GPU). total_units: the cluster's units. compression: trace seconds per
    real second. Waits, makespan: trace hours; concurrency: jobs. With
    total_gib (the cluster's GPU memory) and `need_gib` per run, also the share
    of that memory the jobs needed while they ran."""
    if not runs:
        return {"jobs": 0}
    hour = 3600.0 / compression  # real seconds per trace hour
    waits = [max(0.0, r["start"] - r["submit"]) / hour for r in runs]
    t0 = min(r["submit"] for r in runs)
    t1 = max(r["end"] for r in runs)
    span = max(t1 - t0, 1e-9)
    events = sorted([(r["start"], 1) for r in runs] + [(r["end"], -1) for r in runs])
    current = peak = 0
    area = 0.0
    last = t0
    for t, delta in events:
        area += current * (t - last)
        last = t
        current += delta
        peak = max(peak, current)
    busy = sum(r["units"] * (r["end"] - r["start"]) for r in runs)
    out = {
        "jobs": len(runs),
        "mean_wait_h": sum(waits) / len(waits),
        "p95_wait_h": percentile(waits, 95),
        "max_wait_h": max(waits),
        "peak_concurrent": peak,
        "mean_concurrent": area / span,
        "makespan_h": span / hour,
        "unit_utilisation": busy / (total_units * span) if total_units else 0.0,
    }
    if total_gib:
        needed = sum(r["need_gib"] * (r["end"] - r["start"]) for r in runs)
        out["memory_need_utilisation"] = needed / (total_gib * span)
    return out
