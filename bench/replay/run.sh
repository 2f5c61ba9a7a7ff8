#!/usr/bin/env bash
# Replay a trace on the local Slurm cluster once per GPU set-up (README.md here).
#
#   sudo bash bench/replay/run.sh [TRACE] [replay.py options...]
#
# Default TRACE: bench/replay/yolo-trace.csv (gen_yolo_trace.py, defaults). Builds
# yolo-sched, the fake NVML library and examples/replay_plan (debug), then runs
# replay.py, which writes bench/replay/results/{results.json,results.md,<setup>.jobs.json}.
# The standard cluster (NODES=2 slurm/cluster.sh up) is restored at the end and
# on failure.
set -euo pipefail
cd "$(dirname "$0")/../.."
trace=${1:-bench/replay/yolo-trace.csv}
[ "$#" -eq 0 ] || shift
[ "$(id -u)" -eq 0 ] || { echo "run.sh: must run as root (it reconfigures the local cluster)" >&2; exit 2; }
[ -r "$trace" ] || { echo "run.sh: cannot read trace '$trace'" >&2; exit 2; }
restore() {
    local rc=$?
    if [ "$rc" -ne 0 ]; then
        echo "run.sh: failed (exit $rc); making sure the standard cluster is back" >&2
        env -u NODE_GRES -u SCHED_PARAMS NODES=2 bash slurm/cluster.sh up >&2 || true
    fi
    exit "$rc"
}
trap restore EXIT
cargo build -q --bin yolo-sched
cargo build -q -p fake-nvml
cargo build -q --example replay_plan
python3 bench/replay/replay.py "$trace" "$@"
