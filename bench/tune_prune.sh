#!/usr/bin/env bash
# What `[tune] early_stop` saves (docs/benchmarks.md): the same search (N
# trials, parallel = K, on 1g.5gb slices, `sampler = "random"` with one seed,
# so both runs ask the very same trials) without early stopping and with the
# median rule, on the local test cluster with the stand-in trainer. Reports
# the slice-seconds the trials held (their jobs' start to end), the makespan,
# the trials pruned and the best objective found. Reads only the run
# directories' job records and summaries.
#
#   SLURM_CONF=/etc/slurm-yolo7/slurm.conf YOLO_SCHED_PYTHON=/path/to/venv/bin/python \
#       YOLO_SCHED_SITE=site-with-guard-interval.toml bash bench/tune_prune.sh
#
# Settings: N (8), K (4), EPOCHS (10), EPOCH_SECONDS (1: the stand-in's pace),
# RULE (`{ rule = "median", min_epochs = 2, min_trials = 3 }`),
# YOLO_SCHED_BIN (target/debug/yolo-sched, or $CARGO_TARGET_DIR/debug/yolo-sched).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-8} K=${K:-4} EPOCHS=${EPOCHS:-10} EPOCH_SECONDS=${EPOCH_SECONDS:-1}
RULE=${RULE:-'{ rule = "median", min_epochs = 2, min_trials = 3 }'}
BIN=${YOLO_SCHED_BIN:-${CARGO_TARGET_DIR:-target}/debug/yolo-sched}
: "${YOLO_SCHED_PYTHON:?name a Python with optuna==5.0.0 (as in the trainer venv)}"
[ -x "$BIN" ] || { echo "bench: build first (cargo build): no $BIN" >&2; exit 2; }
dir=$(mktemp -d /tmp/tune-prune.XXXXXX)
trap 'rm -rf "$dir"' EXIT
chmod 1777 "$dir"
cp -r examples/pcb/dataset "$dir/"
export XDG_STATE_HOME="$dir/state" YOLO_SCHED_YOLO="$PWD/tests/standin/yolo" \
    YOLO_STANDIN_EPOCH_SECONDS=$EPOCH_SECONDS YOLO_SCHED_WATCH_INTERVAL=0.5 YOLO_SCHED_WATCH_MAX_INTERVAL=1

spec() { # NAME EXTRA
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
gpu = "1g.5gb"
[stages.prepare]
partition = "cpu"
[stages.export]
enabled = false
[tune]
trials = $N
parallel = $K
epochs = $EPOCHS
sampler = "random"
seed = 1
$2
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
summary = json.load(open(os.path.join(d, "tune", "trials.json")))
states = [t["state"] for t in summary["trials"]]
print(json.dumps({"run": name, "trials": len(trials),
                  "slice_s": round(sum(e - s for s, e in trials), 1),
                  "makespan_s": round(max(e for _, e in tells) - min(s for s, _ in asks), 1),
                  "pruned": states.count("pruned"), "complete": states.count("complete"),
                  "epochs_trained": sum(t["epochs"] for t in summary["trials"]),
                  "best": summary["best"]}))
PY
}

spec plain ""
spec pruned "early_stop = $RULE"
echo "bench: $N trials of $EPOCHS epochs x ${EPOCH_SECONDS}s, parallel=$K on 1g.5gb; without, then with early_stop = $RULE" >&2
a=$(measure plain)
b=$(measure pruned)
echo "$a"
echo "$b"
python3 - "$a" "$b" <<'PY'
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(f"slice-seconds {a['slice_s']} -> {b['slice_s']} ({b['slice_s'] / a['slice_s'] - 1:+.0%}), "
      f"epochs trained {a['epochs_trained']} -> {b['epochs_trained']}, {b['pruned']} of {b['trials']} trials pruned; "
      f"makespan {a['makespan_s']} -> {b['makespan_s']} s; best {a['best']} -> {b['best']}")
PY
