#!/usr/bin/env bash
# Everything the test suite needs, then the suite: Debian packages, the local
# Slurm cluster (two nodes, fake MIG GRES), formatting and lint checks, and
# `cargo test` over the workspace with the cluster required. The cluster is
# taken down at the end, also when something fails.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
export NODES="${NODES:-2}"

bash slurm/deps.sh
trap 'bash slurm/cluster.sh down' EXIT
bash slurm/cluster.sh up

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
set +e
YOLO_SCHED_EXPECT_CLUSTER=1 cargo test --workspace --no-fail-fast 2>&1 | tee target/test-all.log
status=${PIPESTATUS[0]}
set -e
echo "=== test summary"
grep -E '^test result:' target/test-all.log | awk '{p+=$4; f+=$6; i+=$8} END {printf "passed %d, failed %d, ignored %d in %d test binaries\n", p, f, i, NR}'
exit "$status"
