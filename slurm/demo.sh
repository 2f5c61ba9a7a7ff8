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

# Three things take the time on a fresh machine, and they wait on different
# things: the build on the CPU, the trainer's venv (6 GB of wheels) on the
# network, the packages on dpkg. All three start at once.
#
# A debug build: about a quarter of the release build's time on two cores
# (which, with thin LTO, took most of the demo's 9 minutes on a fresh
# machine), and the same target/debug the test command builds, so either
# makes the other warm. What the demo does (submit, watch, the job agent
# beside a CPU training) is not limited by it. For a real installation use
# `cargo install --path . --bin yolo-sched` (release), as the README says
# (without `--bin`, the local cluster's cluster-conf would be installed too).
mkdir -p target
build_log=target/demo-build.log trainer_log=target/demo-trainer.log trainer_out=target/demo-trainer.out
say "building yolo-sched in the background (a debug build: a minute or two the first time)"
command -v cargo >/dev/null 2>&1 || bash slurm/deps.sh demo # says how to get Rust
cargo build >"$build_log" 2>&1 </dev/null &
build_pid=$!
trainer_pid=""
trap 'kill $build_pid $trainer_pid 2>/dev/null || true' EXIT

say "Slurm 22.05, munge and the trainer's system libraries (installed when missing)"
bash slurm/deps.sh demo

say "the real trainer: Ultralytics in a venv (about a minute and 6 GB the first time), in the background"
bash slurm/trainer.sh install >"$trainer_out" 2>"$trainer_log" </dev/null &
trainer_pid=$!

say "the local cluster with fake MIG slices, configured like a production site (cgroups: each job sees only its slice, its memory and its CPUs)"
# cluster.sh writes the configuration with cluster-conf, a program of this
# build: its `cargo build --bin cluster-conf` waits for the build above (which
# makes it too, with the same library) and then has nothing left to do.
CGROUPS=1 bash slurm/cluster.sh up

say "waiting for the build (at ${SECONDS} s)"
if ! wait "$build_pid"; then
    cat "$build_log" >&2
    echo "demo: the build failed (log above)" >&2
    exit 1
fi
grep -E '^ *Finished' "$build_log" || true
bin="$PWD/target/debug/yolo-sched"
[ -x "$bin" ] || { echo "demo: the build made no $bin" >&2; exit 1; }
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
