#!/usr/bin/env bash
# The main job on one machine: bring up the local Slurm cluster, build
# yolo-sched, submit the demo training spec (examples/pcb) and follow the run
# to completion. Exits 0 when the run completed.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
bash slurm/deps.sh
bash slurm/cluster.sh up
cargo build --release --quiet
bin="$PWD/target/release/yolo-sched"
"$bin" doctor

if ! command -v yolo >/dev/null 2>&1; then
    echo "######################################################################"
    echo "# Ultralytics 'yolo' is not installed: the demo uses the STAND-IN     #"
    echo "# trainer tests/standin/yolo. It trains nothing; it writes the files  #"
    echo "# a real run writes (weights, results.csv) so the pipeline can run.   #"
    echo "######################################################################"
    export YOLO_SCHED_YOLO="$PWD/tests/standin/yolo"
    export YOLO_STANDIN_EPOCH_SECONDS="${YOLO_STANDIN_EPOCH_SECONDS:-0.5}"
fi

workdir="/tmp/yolo-sched-demo/$(date +%Y%m%dT%H%M%S)"
mkdir -p "$(dirname "$workdir")"
"$bin" submit examples/pcb/spec.toml --workdir "$workdir" --explain
run_id=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["run_id"])' "$workdir/manifest.json")
"$bin" watch "$run_id"
"$bin" status "$run_id"
echo "demo run $run_id completed; its files are in $workdir"
