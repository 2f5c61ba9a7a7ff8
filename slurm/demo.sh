#!/usr/bin/env bash
# The main job on one machine: bring up the local Slurm cluster, build
# yolo-sched, install the real Ultralytics trainer (slurm/trainer.sh; reused
# when present), submit the demo spec (examples/pcb: a real YOLOv8n trained
# from scratch on a 48-image PCB-defect set, on a 1g.5gb slice), follow it to
# completion, and show the metrics and files it made. Exits 0 when the run
# completed. The cluster is left running.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
say() { printf '\n=== %s\n' "$*"; }

say "Slurm 22.05 and munge (installed when missing), local cluster with fake MIG slices"
bash slurm/deps.sh demo
bash slurm/cluster.sh up

# The trainer's venv (minutes of downloads the first time) installs while
# yolo-sched builds (minutes of compiling): one waits on the network, the
# other on the CPU.
say "the real trainer: Ultralytics in a venv (about 2 minutes and 6 GB the first time), in the background"
mkdir -p target
trainer_log=target/demo-trainer.log trainer_out=target/demo-trainer.out
bash slurm/trainer.sh install >"$trainer_out" 2>"$trainer_log" </dev/null &
trainer_pid=$!
trap 'kill "$trainer_pid" 2>/dev/null || true' EXIT

say "building yolo-sched (release; a few minutes the first time)"
cargo build --release 2>&1 | grep --line-buffered -E '^ *(Compiling|Finished|error|warning: unused)' || true
bin="$PWD/target/release/yolo-sched"
[ -x "$bin" ] || { echo "demo: the build failed" >&2; exit 1; }
"$bin" doctor || true

say "waiting for the trainer venv (at ${SECONDS} s)"
if ! wait "$trainer_pid"; then
    cat "$trainer_log" >&2
    echo "demo: the trainer did not install (log above)" >&2
    exit 1
fi
trap - EXIT
venv=$(tail -n 1 "$trainer_out")
# The test cluster's slices are not real GPUs: the wrapper runs the real
# trainer with device=cpu and changes nothing else.
export YOLO_TRAINER_VENV="$venv"
export YOLO_SCHED_YOLO="$PWD/tests/trainer/yolo-cpu"

say "submitting examples/pcb/spec.toml"
workdir="/tmp/yolo-sched-demo/$(date +%Y%m%dT%H%M%S)"
mkdir -p "$(dirname "$workdir")"
"$bin" submit examples/pcb/spec.toml --workdir "$workdir" --explain
run_id=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["run_id"])' "$workdir/manifest.json")

say "following run $run_id (prepare on CPU → training on a 1g.5gb slice → ONNX export)"
"$bin" watch "$run_id"
"$bin" status "$run_id"

say "what the run made"
tail -n +1 "$workdir/train/results.csv" | cut -d, -f1,6-9 | column -t -s, 2>/dev/null || cat "$workdir/train/results.csv"
ls -l "$workdir/train/weights"
cat <<EOT

Demo run $run_id completed in ${SECONDS} s; its files are in $workdir.
What it shows is the pipeline, not accuracy: three epochs of a YOLOv8n from
scratch on 48 tiny images, on the CPU, learn next to nothing (mAP near 0).
It shows one spec becoming a prepare job on a CPU node, a training on the
smallest MIG slice that fits, and an ONNX export, chained by Slurm, with a
resumable checkpoint (weights/last.pt) and the metrics of every epoch.
The binary:         $bin
The cluster is still up (slurm/cluster.sh status); stop it with: bash slurm/cluster.sh down
Try next:           $bin status $run_id
                    $bin logs $run_id train
                    $bin report
EOT
