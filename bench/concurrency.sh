#!/usr/bin/env bash
# How many trainings share the MIG slices at once: N runs (the stand-in
# trainer, a fixed epoch time) submitted together to a partition, once with
# the requests yolo-sched made before stage resources were shaped to the node
# (`cpus = 9` for Ultralytics' 8 dataloader workers + 1, `mem = "16G"`), once
# with a spec that leaves CPUs and memory out (the slice's share of the node).
# Measured from the job-written start/end records: peak concurrent trainings,
# mean and max wait (start − submission), makespan. Paired in one run.
#
#   bash bench/concurrency.sh [PARTITION] [N] [EPOCH_SECONDS]
#
# Default: partition gpu of the local cluster (node1, node2: 16 CPUs,
# 64000 MB, four 1g.5gb slices each), N=16, 2 s epochs, 3 epochs. Needs
# `slurm/cluster.sh up` (NODES=2). Leaves nothing queued.
set -euo pipefail
cd "$(dirname "$0")/.."
partition=${1:-gpu}
n=${2:-16}
epoch=${3:-2}
bin=${YOLO_SCHED_BIN:-target/release/yolo-sched}
[ -x "$bin" ] || cargo build --release --quiet
out=$(mktemp -d /tmp/bench-concurrency.XXXXXX)
chmod 1777 "$out"
trap 'rm -rf "$out"' EXIT
export XDG_STATE_HOME="$out/state"
export YOLO_SCHED_YOLO="$PWD/tests/standin/yolo"
export YOLO_STANDIN_EPOCH_SECONDS="$epoch"
data="$PWD/examples/pcb/dataset/data.yaml"

spec() { # spec NAME EXTRA
    cat <<EOF
version = 1
[run]
name = "$1"
partition = "$partition"
[train]
model = "yolov8n.yaml"
data = "$data"
epochs = 3
imgsz = 640
batch = 16
[stages]
prepare = false
[stages.export]
enabled = false
$2
EOF
}

measure() { # measure LABEL EXTRA
    local label=$1 extra=$2 dir="$out/$1" ids=()
    mkdir -p "$dir"
    spec "$label" "$extra" >"$dir/spec.toml"
    local t0
    t0=$(date -u +%s.%N)
    for i in $(seq 1 "$n"); do
        if ! "$bin" submit "$dir/spec.toml" --workdir "$dir/run$i" --json >"$dir/submit$i.json" 2>"$dir/submit$i.err"; then
            echo "$label: submit refused: $(head -c 300 "$dir/submit$i.err")"
            return 0
        fi
        ids+=("$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["jobs"][0]["job_id"])' "$dir/submit$i.json")")
    done
    local req
    req=$(python3 -c 'import json,sys; j=json.load(open(sys.argv[1]))["jobs"][0]; print(j["cpus"], "CPUs,", j["mem"])' "$dir/submit1.json")
    local deadline=$((SECONDS + 900))
    while squeue -h -j "$(IFS=,; echo "${ids[*]}")" -t pending,running,configuring,completing 2>/dev/null | grep -q .; do
        [ $SECONDS -lt $deadline ] || { echo "$label: not finished in 900 s" >&2; scancel "${ids[@]}"; return 1; }
        sleep 0.5
    done
    python3 - "$dir" "$n" "$t0" "$label" "$req" <<'PY'
import json, sys
from datetime import datetime
d, n, t0, label, req = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5]
ts = lambda s: datetime.fromisoformat(s.replace("Z", "+00:00")[:26] + "+00:00").timestamp()
spans = []
for i in range(1, n + 1):
    st = json.load(open(f"{d}/run{i}/state/train.start.json"))
    en = json.load(open(f"{d}/run{i}/state/train.end.json"))
    spans.append((ts(st["started"]), ts(en["ended"])))
events = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans], key=lambda e: (e[0], e[1]))
cur = peak = 0
for _, e in events:
    cur += e
    peak = max(peak, cur)
waits = [a - t0 for a, _ in spans]
print(f"{label}: {n} trainings asking {req}: peak {peak} at once, mean wait {sum(waits)/n:.1f} s, "
      f"max wait {max(waits):.1f} s, makespan {max(b for _, b in spans) - t0:.1f} s")
PY
}

echo "partition $partition, $n runs, 3 epochs of ${epoch} s each (stand-in trainer)"
echo "nodes: $(sinfo -h -p "$partition" -o '%N: %c CPUs, %m MB, %G' | head -n1)"
measure before $'[resources]\ncpus = 9\nmem = "16G"'
measure after ""
