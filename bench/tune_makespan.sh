#!/usr/bin/env bash
# The makespan of a `[tune]` search (docs/benchmarks.md): N trials with
# parallel = K on K 1g.5gb slices, against the same N trials one at a time on
# one whole GPU (what Ultralytics' `model.tune()` does), on the local test
# cluster with the stand-in trainer; and the ask and tell jobs' overhead per
# batch, as a share of a trial's time. Reads only the run directories' job
# records (state/*.start.json, *.end.json).
#
#   SLURM_CONF=/etc/slurm-yolo6/slurm.conf YOLO_SCHED_PYTHON=/path/to/venv/bin/python \
#       bash bench/tune_makespan.sh
#
# Settings: N (8), K (4), EPOCHS (5), EPOCH_SECONDS (2: the stand-in's pace),
# YOLO_SCHED_BIN (target/debug/yolo-sched, or $CARGO_TARGET_DIR/debug/yolo-sched).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-8} K=${K:-4} EPOCHS=${EPOCHS:-5} EPOCH_SECONDS=${EPOCH_SECONDS:-2}
BIN=${YOLO_SCHED_BIN:-${CARGO_TARGET_DIR:-target}/debug/yolo-sched}
: "${YOLO_SCHED_PYTHON:?name a Python with optuna==5.0.0 (as in the trainer venv)}"
[ -x "$BIN" ] || { echo "bench: build first (cargo build): no $BIN" >&2; exit 2; }
dir=$(mktemp -d /tmp/tune-makespan.XXXXXX)
trap 'rm -rf "$dir"' EXIT
chmod 1777 "$dir"
cp -r examples/pcb/dataset "$dir/"
export XDG_STATE_HOME="$dir/state" YOLO_SCHED_YOLO="$PWD/tests/standin/yolo" \
    YOLO_STANDIN_EPOCH_SECONDS=$EPOCH_SECONDS YOLO_SCHED_WATCH_INTERVAL=0.5 YOLO_SCHED_WATCH_MAX_INTERVAL=1

spec() { # NAME GPU PARALLEL
    cat >"$dir/$1.toml" <<EOF
version = 1
[run]
name = "$1"
partition = "gpu"
[train]
model = "yolov8n.yaml"
data = "$dir/dataset/data.yaml"
imgsz = 64
batch = 8
workers = 1
[resources]
gpu = "$2"
[stages.prepare]
partition = "cpu"
[stages.export]
enabled = false
[tune]
trials = $N
parallel = $3
epochs = $EPOCHS
sampler = "random"
seed = 1
[tune.space]
lr0 = { min = 1e-4, max = 1e-1, log = true }
EOF
}

measure() { # NAME
    local id
    id=$("$BIN" submit --json "$dir/$1.toml" | python3 -c 'import json,sys; print(json.load(sys.stdin)["run_id"])')
    "$BIN" watch "$id" >/dev/null || { echo "bench: run $id did not complete" >&2; "$BIN" status "$id" >&2; exit 1; }
    python3 - "$dir/runs/$1" "$1" <<'PY'
import glob, json, os, sys
from datetime import datetime
d, name = sys.argv[1], sys.argv[2]
def t(s): return datetime.fromisoformat(s[:26].rstrip("Z")).timestamp()
def span(key):
    s = json.load(open(os.path.join(d, "state", key + ".start.json")))
    e = json.load(open(os.path.join(d, "state", key + ".end.json")))
    return t(s["started"]), t(e["ended"])
keys = [os.path.basename(p)[:-len(".start.json")] for p in glob.glob(os.path.join(d, "state", "*.start.json"))]
trials = [span(k) for k in keys if k.startswith("train.")]
asks = [span(k) for k in keys if k.startswith("ask.")]
tells = [span(k) for k in keys if k.startswith("tell.")]
first = min(s for s, _ in asks)
last = max(e for _, e in tells)
trial = sum(e - s for s, e in trials) / len(trials)
# Per batch: from the end of its last trial to the start of the next batch's
# first trial (tell, scheduling, ask): the time no trial of the search runs.
batches = sorted(set(int(k.split(".")[1]) for k in keys if k.startswith("ask.")))
print(json.dumps({"run": name, "trials": len(trials), "batches": len(batches),
                  "makespan_s": round(last - first, 1), "trial_s": round(trial, 1),
                  "ask_s": round(sum(e - s for s, e in asks) / len(asks), 1),
                  "tell_s": round(sum(e - s for s, e in tells) / len(tells), 1)}))
PY
}

spec sliced 1g.5gb "$K"
spec whole a100 1
echo "bench: $N trials of $EPOCHS epochs x ${EPOCH_SECONDS}s; parallel=$K on 1g.5gb slices, then one at a time on an a100" >&2
a=$(measure sliced)
b=$(measure whole)
echo "$a"
echo "$b"
python3 - "$a" "$b" "$K" <<'PY'
import json, sys
a, b, k = json.loads(sys.argv[1]), json.loads(sys.argv[2]), int(sys.argv[3])
print(f"makespan ratio sliced/whole = {a['makespan_s'] / b['makespan_s']:.2f} (1/K = {1 / k:.2f})")
for r in (a, b):
    gap = (r["makespan_s"] - r["batches"] * r["trial_s"]) / r["batches"]
    print(f"{r['run']}: per batch {gap:.1f} s outside trials (ask {r['ask_s']} s, tell {r['tell_s']} s, and Slurm's scheduling), "
          f"{gap / r['trial_s']:.0%} of a trial's {r['trial_s']} s")
PY
