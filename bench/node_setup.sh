#!/usr/bin/env bash
# `yolo-sched node-setup --dry-run --layout auto` for an 8-GPU H200 node (fake NVML,
# fixture 8xh200.json) against 10,000 pending jobs: a stand-in `squeue` on PATH
# prints 10,000 lines of node-setup's queue fields (`slurm::squeue::queue::FIELDS`,
# each followed by squeue's separator 0x1F): 1g.18gb / 2g.35gb / 3g.71gb, mixed,
# some without GPUs, time limits from 30 min to 8 h; with TYPES=7 every one of the
# H200's seven profiles. A stand-in `scontrol` prints the recorded answer of a
# two-node cluster (the other nodes). Whole-process time, median of N runs.
#
#   [TYPES=7] bash bench/node_setup.sh [N]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-10}
bin=${YOLO_SCHED_BIN:-target/release/yolo-sched}
lib=${FAKE_NVML_LIB:-target/release/libnvidia_ml.so}
[ -x "$bin" ] && [ -f "$lib" ] || cargo build --release --quiet --workspace
out=$(mktemp -d /tmp/bench-node-setup.XXXXXX)
[ -n "${KEEP:-}" ] && echo "kept: $out" >&2 || trap 'rm -rf "$out"' EXIT
cp tests/fixtures/nvml/8xh200.json "$out/fake-nvml.json"
cp "$lib" "$out/libnvidia-ml.so.1"
python3 - "$out/jobs.txt" "${TYPES:-3}" <<'PY'
import random, sys
random.seed(5)
kinds = ["gres:gpu:1g.18gb:1"] * 6 + ["gres:gpu:2g.35gb:1"] * 3 + ["gres:gpu:3g.71gb:1"] * 2 + ["N/A"]
if sys.argv[2] == "7":
    kinds += ["gres:gpu:1g.18gb+me:1", "gres:gpu:1g.35gb:1", "gres:gpu:4g.71gb:1", "gres:gpu:7g.141gb:1"]
limits = ["30:00", "1:00:00", "2:00:00", "4:00:00", "8:00:00"]
with open(sys.argv[1], "w") as f:
    for _ in range(10000):
        t = random.choice(limits)
        f.write("\x1f".join(["PENDING", "(null)", random.choice(kinds), t, t, "\n"]))
PY
mkdir -p "$out/bin"
# An empty site file (a site file must be a regular file; /dev/null is refused).
: >"$out/site.toml"
cat >"$out/bin/squeue" <<SQ
#!/bin/sh
exec cat "$out/jobs.txt"
SQ
cat >"$out/bin/scontrol" <<SC
#!/bin/sh
exec cat "$PWD/tests/data/scontrol-shape-22.05.txt"
SC
chmod +x "$out/bin/squeue" "$out/bin/scontrol"
export PATH="$out/bin:$PATH" YOLO_SCHED_NVML_LIB="$out/libnvidia-ml.so.1" \
    FAKE_NVML_FIXTURE="$out/fake-nvml.json" FAKE_NVML_SYSROOT="$out/root" YOLO_SCHED_SITE="$out/site.toml"
args=(node-setup --dry-run --layout auto --node h200x8 --no-slurm --sysroot "$out/root" --gres-conf "$out/gres.conf")
"$bin" "${args[@]}" >"$out/plan.txt"
ms() { echo $(( $(date +%s%N) / 1000000 )); }
: >"$out/ms"
for _ in $(seq 1 "$n"); do
    t0=$(ms)
    "$bin" "${args[@]}" >/dev/null
    t1=$(ms)
    echo $(( t1 - t0 )) >>"$out/ms"
done
sort -n "$out/ms" | awk '{a[NR]=$1} END {m = (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2;
    printf "node-setup --dry-run --layout auto, 8x H200, 10,000 jobs of '"${TYPES:-3}"' types: median %s ms, min %s ms, max %s ms (n=%d)\n", m, a[1], a[NR], NR}'
grep -E "GPU [0-9]|auto|pending|Gres=" "$out/plan.txt" | head -16
