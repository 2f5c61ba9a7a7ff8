#!/usr/bin/env bash
# `yolo-sched compare` and `report --format html` over many runs: whole-process
# time (median of N), peak RSS and output size. The runs are copies of the
# runs the real trainer recorded (tests/data/compare: a 2-variant sweep and a
# single run, 2 epochs each), RUNS copies of each pair; Slurm is a stand-in
# that knows none of the jobs (squeue and sacct print nothing; sinfo prints a
# recorded document), so every figure is yolo-sched's own reading of files.
#
#   bash bench/compare.sh [RUNS] [N]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-250}
n=${2:-5}
bin=${YOLO_SCHED_BIN:-target/release/yolo-sched}
[ -x "$bin" ] || cargo build --release --quiet
out=$(mktemp -d /tmp/bench-compare.XXXXXX)
trap 'rm -rf "$out"' EXIT
mkdir -p "$out/index" "$out/runs" "$out/bin"
python3 - "$runs" "$out" <<'PY'
import json, shutil, sys, os
runs, out = int(sys.argv[1]), sys.argv[2]
for i in range(runs):
    for name in ("sweep", "relabelled"):
        dst = f"{out}/runs/{name}-{i}"
        shutil.copytree(f"tests/data/compare/{name}", dst)
        m = json.load(open(f"{dst}/manifest.json"))
        m["run_id"] = f"{m['run_id']}-{i}"
        json.dump(m, open(f"{dst}/manifest.json", "w"))
        json.dump({"run_id": m["run_id"], "name": m["name"], "workdir": dst,
                   "submitted_at": m["submitted_at"]}, open(f"{out}/index/{name}-{i}.json", "w"))
PY
printf '#!/bin/sh\nexit 0\n' >"$out/bin/squeue"
cp "$out/bin/squeue" "$out/bin/sacct"
printf '#!/bin/sh\ncat %s\n' "$PWD/tests/data/sinfo-22.05-one-node.json" >"$out/bin/sinfo"
chmod +x "$out/bin/"*
export PATH="$out/bin:$PATH" YOLO_SCHED_RUNS_DIR="$out/index"
ms() { echo $(( $(date +%s%N) / 1000000 )); }
measure() { # label, then the command
    local label=$1
    shift
    : >"$out/ms"
    for _ in $(seq 1 "$n"); do
        t0=$(ms)
        "$@" >"$out/stdout" 2>/dev/null
        t1=$(ms)
        echo $((t1 - t0)) >>"$out/ms"
    done
    rss=$(/usr/bin/time -v "$@" 2>&1 >/dev/null | awk -F': ' '/Maximum resident/ {print $2}')
    median=$(sort -n "$out/ms" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    bytes=$(wc -c <"$out/stdout")
    printf '%-36s median %5d ms of %d  peak RSS %6d KiB  output %8d bytes\n' "$label" "$median" "$n" "$rss" "$bytes"
}
rows=$((runs * 3))
echo "$((runs * 2)) runs, $rows rows"
measure "compare (table)" "$bin" compare
measure "compare --json" "$bin" compare --json
measure "compare --format csv" "$bin" compare --format csv
measure "report --format html" "$bin" report --format html
