#!/usr/bin/env bash
# The main job on one machine: bring up the local Slurm cluster, build
# yolo-sched, and run it against the cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
bash slurm/deps.sh
bash slurm/cluster.sh up
cargo build --release --quiet
./target/release/yolo-sched doctor
