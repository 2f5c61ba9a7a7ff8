#!/usr/bin/env bash
# Replay a trace on the local Slurm cluster once per GPU set-up (README.md here).
#
#   sudo bash bench/replay/run.sh [TRACE] [replay.py options...]
#   sudo bash bench/replay/run.sh --advise [TRACE] [advise_check.py options...]
#   sudo INSTANCE=5 bash bench/replay/run.sh ...     # slurm/cluster.sh's instance 5
#
# Default TRACE: bench/replay/yolo-trace.csv (gen_yolo_trace.py, defaults). Builds
# yolo-sched, the fake NVML library and examples/replay_plan (debug), then runs
# replay.py, which writes bench/replay/results/{results.json,results.md,<setup>.jobs.json}.
# With --advise it runs advise_check.py instead: the window on whole GPUs, advise's
# prediction from it, the window again on advise's plan, and the table of predicted
# against measured waits (bench/replay/results-advise/).
# The cluster is slurm/cluster.sh's INSTANCE (default 1, /etc/slurm): every Slurm
# command of the replay reads that instance's SLURM_CONF. Its standard shape
# (NODES=2 slurm/cluster.sh up) is restored at the end and on failure.
set -euo pipefail
cd "$(dirname "$0")/../.."
script=bench/replay/replay.py
if [ "${1:-}" = --advise ]; then
    script=bench/replay/advise_check.py
    shift
fi
trace=${1:-bench/replay/yolo-trace.csv}
[ "$#" -eq 0 ] || shift
[ "$(id -u)" -eq 0 ] || { echo "run.sh: must run as root (it reconfigures the local cluster)" >&2; exit 2; }
{ [ -f "$trace" ] && [ -r "$trace" ]; } || { echo "run.sh: cannot read trace '$trace' (a readable regular file)" >&2; exit 2; }
INSTANCE=${INSTANCE:-1}
[[ "$INSTANCE" =~ ^[1-9]$ ]] || { echo "run.sh: INSTANCE must be 1..9, got '$INSTANCE'" >&2; exit 2; }
if [ "$INSTANCE" = 1 ]; then SLURM_CONF=/etc/slurm/slurm.conf; else SLURM_CONF=/etc/slurm-yolo$INSTANCE/slurm.conf; fi
export INSTANCE SLURM_CONF
echo "run.sh: cluster instance $INSTANCE ($SLURM_CONF)" >&2
restore() {
    local rc=$?
    if [ "$rc" -ne 0 ]; then
        echo "run.sh: failed (exit $rc); making sure the standard cluster is back" >&2
        env -u NODE_GRES -u SCHED_PARAMS NODES=2 bash slurm/cluster.sh up >&2 || true
    fi
    exit "$rc"
}
trap restore EXIT
target=${CARGO_TARGET_DIR:-target}
cargo build -q --bin yolo-sched --bin cluster-conf
# cluster.sh writes the configuration of each `up` with it (no cargo run of its own).
YOLO_CLUSTER_CONF=$(realpath "$target/debug/cluster-conf")
export YOLO_CLUSTER_CONF
cargo build -q -p fake-nvml
cargo build -q --example replay_plan
python3 "$script" "$trace" --bin "$target/debug/yolo-sched" --plan-bin "$target/debug/examples/replay_plan" \
    --fake-lib "$target/debug/libnvidia_ml.so" "$@"
