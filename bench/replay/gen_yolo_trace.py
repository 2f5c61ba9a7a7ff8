#!/usr/bin/env python3
"""Write a YOLO-like job trace (bench/replay/README.md) to stdout.

    python3 bench/replay/gen_yolo_trace.py [--seed 7] [--hours 5] [--jobs 95] [--users 6]

Deterministic for a given seed and arguments (random.Random(seed), no clock).
The mix: mostly YOLO n/s at imgsz 640 (2-4 GiB: a 1g.5gb slice of an A100-40GB),
some m/l/x at larger batches or image sizes (7-35 GiB), as single jobs or as
sweeps (8-20 near-identical jobs one user submits at once); run times from
about 20 minutes to a few hours. GPU memory follows src/plan/estimate.rs: the
measured batch-16 peak at 640 px per scale, a quarter of it fixed and the rest
growing with batch x pixels; yolo-sched's 10 % headroom is added by the planner,
not here.
"""

import argparse
import math
import random
import sys

# src/plan/estimate.rs: Scale::gib_at_640_batch16 and FIXED_FRACTION.
GIB_AT_640_BATCH16 = {"n": 2.8, "s": 4.0, "m": 7.2, "l": 9.8, "x": 12.2}
FIXED_FRACTION = 0.25


def gpu_gib(scale, imgsz, batch):
    m16 = GIB_AT_640_BATCH16[scale]
    return m16 * (FIXED_FRACTION + (1.0 - FIXED_FRACTION) * batch / 16.0 * (imgsz / 640.0) ** 2)


# (weight, scales, imgsz choices, batch choices, median minutes, spread): small
# jobs are quick n/s runs at 640; large ones are m/l/x at bigger batches or
# images. Memory from gpu_gib: n/s 1.9-4.0 GiB, m/l/x 7.2-35 GiB.
KINDS = [
    (0.72, "ns", (640,), (8, 16), 45, 0.55),
    (0.20, "mlx", (640,), (16, 32), 100, 0.45),
    (0.08, "mlx", (640, 1024), (32, 48), 150, 0.35),
]
MIN_S, MAX_S = 20 * 60, 5 * 3600
MAX_GIB = 35.0  # + 10 % headroom still fits a whole A100-40GB (39.5 GiB usable)


def pick_kind(rng):
    r = rng.random()
    for kind in KINDS:
        r -= kind[0]
        if r <= 0:
            return kind
    return KINDS[-1]


def one_config(rng):
    _, scales, sizes, batches, median_min, spread = pick_kind(rng)
    scale = rng.choice(scales)
    imgsz = rng.choice(sizes)
    batch = rng.choice(batches)
    gib = min(gpu_gib(scale, imgsz, batch), MAX_GIB)
    return scale, imgsz, batch, gib, median_min, spread


def duration(rng, median_min, spread):
    s = median_min * 60 * math.exp(rng.gauss(0.0, spread))
    return int(min(MAX_S, max(MIN_S, s)))


def generate(seed=7, hours=5.0, jobs=95, users=6, sweep_share=0.55):
    """Rows (submit_s, duration_s, gpu_mem_gib, comment, user), sorted by submission."""
    rng = random.Random(seed)
    names = [f"user{i + 1}" for i in range(users)]
    span = hours * 3600
    rows = []
    # Sweeps: a user submits 8-20 variants of one configuration at once.
    target_sweep = int(jobs * sweep_share)
    while sum(1 for r in rows if r[3].startswith("sweep")) < target_sweep:
        n = min(rng.randint(8, 20), target_sweep - sum(1 for r in rows if r[3].startswith("sweep")))
        n = max(n, 1)
        user = rng.choice(names)
        t = int(rng.uniform(0, span * 0.9))
        scale, imgsz, batch, gib, median_min, spread = one_config(rng)
        base = duration(rng, median_min, spread)
        sweep_id = sum(1 for r in rows if r[3].endswith("#0")) + 1
        for k in range(n):
            d = int(min(MAX_S, max(MIN_S, base * rng.uniform(0.85, 1.15))))
            rows.append((t, d, round(gib, 2), f"sweep{sweep_id} yolo{scale} {imgsz}px b{batch} #{k}", user))
    # Single jobs: Poisson arrivals over the span.
    while len(rows) < jobs:
        t = int(rng.uniform(0, span))
        scale, imgsz, batch, gib, median_min, spread = one_config(rng)
        rows.append((t, duration(rng, median_min, spread), round(gib, 2), f"single yolo{scale} {imgsz}px b{batch}", rng.choice(names)))
    rows.sort(key=lambda r: (r[0], r[4], r[3]))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--hours", type=float, default=5.0, help="submission window, trace hours")
    ap.add_argument("--jobs", type=int, default=95)
    ap.add_argument("--users", type=int, default=6)
    a = ap.parse_args(argv)
    if not (1 <= a.jobs <= 20000 and 0 < a.hours <= 168 and 1 <= a.users <= 1000):
        ap.error("need 1 <= --jobs <= 20000, 0 < --hours <= 168, 1 <= --users <= 1000")
    out = sys.stdout
    out.write(f"# YOLO-like trace: gen_yolo_trace.py --seed {a.seed} --hours {a.hours:g} --jobs {a.jobs} --users {a.users}\n")
    out.write("# gpu_mem_gib: peak training memory after src/plan/estimate.rs (the planner adds 10 % headroom)\n")
    out.write("submit_s,duration_s,gpu_mem_gib,gpu_fraction,user\n")
    for t, d, gib, what, user in generate(a.seed, a.hours, a.jobs, a.users):
        out.write(f"# {what}\n{t},{d},{gib:g},,{user}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
