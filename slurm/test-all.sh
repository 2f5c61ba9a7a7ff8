#!/usr/bin/env bash
# Everything the test suite needs, then the suite: Debian packages, the local
# Slurm cluster (two nodes, fake MIG GRES), formatting and lint checks, and
# `cargo test` over the workspace with the cluster required. The cluster is
# taken down at the end, also when something fails, and the script checks
# that `up` twice is a no-op and that `down` leaves none of its daemons.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
export NODES="${NODES:-2}"
# Each phase's start, in seconds since the script began, so a slow phase shows.
phase() { echo "=== test-all: $* (at ${SECONDS} s)" >&2; }

# The tests build while the packages, the trainer venv, S3 and the cluster
# come up: on a fresh machine those are minutes of downloads and unpacking.
# Clippy checks in a target directory of its own at the lowest CPU and I/O
# priority, so it uses only the time the build and the live tests (which
# mostly wait on Slurm) leave idle; its verdict is awaited before the summary.
mkdir -p target
build_pid="" clippy_pid=""
# They stay in this script's session: with the kernel's autogroup scheduling a
# session of their own would get half the CPU whatever its nice value, and
# the tests would lose it. Until `finish` takes over below, a failed set-up
# stops them, compilers and all (`stop_tree`).
stop_tree() {
    local c
    for c in $(pgrep -P "$1" 2>/dev/null); do stop_tree "$c"; done
    kill "$1" 2>/dev/null || true
}
stop_builds() { for p in $build_pid $clippy_pid; do stop_tree "$p"; done; }
trap stop_builds EXIT
if command -v cargo >/dev/null 2>&1; then
    phase "test build and clippy (in the background)"
    cargo test --workspace --no-run --quiet >target/test-build.log 2>&1 </dev/null &
    build_pid=$!
    CARGO_TARGET_DIR=target/clippy nice -n 19 ionice -c 3 \
        cargo clippy --workspace --all-targets --quiet -- -D warnings >target/clippy.log 2>&1 </dev/null &
    clippy_pid=$!
fi

phase "packages"
bash slurm/deps.sh
phase "trainer venv"
# The real Ultralytics trainer for the live training tests (reused when present).
YOLO_TRAINER_VENV=$(bash slurm/trainer.sh install | tail -n 1)
export YOLO_TRAINER_VENV YOLO_SCHED_EXPECT_TRAINER=1

daemon_pids() { cat /run/yolo-slurm/*.pid 2>/dev/null | sort -n | tr '\n' ' '; }
alive() { # pids still running (zombies count as gone)
    local p state
    for p in "$@"; do
        state=$(awk '/^State:/ {print $2}' "/proc/$p/status" 2>/dev/null || true)
        [ -n "$state" ] && [ "$state" != Z ] && printf '%s ' "$p"
    done
    return 0
}
finish() {
    local status=$?
    stop_builds # an early exit must not leave a build running behind it
    bash slurm/s3.sh down
    bash slurm/cluster.sh down
    bash slurm/cluster.sh down >/dev/null # twice: must be harmless
    # shellcheck disable=SC2086 # one word per pid
    left=$(alive $started_pids)
    if [ -n "$left" ]; then
        echo "test-all: cluster.sh down left daemons running: $left" >&2
        status=1
    fi
    exit "$status"
}
started_pids=""
trap finish EXIT

phase "s3 and cluster up"
# The S3-compatible server of the checkpoint-backup tests (SeaweedFS on 127.0.0.1).
bash slurm/s3.sh up
bash slurm/s3.sh up # twice: must be a no-op

bash slurm/cluster.sh up
started_pids=$(daemon_pids)
bash slurm/cluster.sh up
if [ "$(daemon_pids)" != "$started_pids" ]; then
    echo "test-all: a second 'cluster.sh up' restarted daemons ($started_pids -> $(daemon_pids))" >&2
    exit 1
fi

phase "fmt"
cargo fmt --all -- --check
phase "replay unit tests"
# The trace replay's pure parts (trace format, generator, metrics).
python3 -m unittest discover -s bench/replay -p 'test_*.py' 2>&1 | tail -n 3
phase "waiting for the test build"
if [ -z "$build_pid" ]; then # cargo was found only by deps.sh's hints
    echo "test-all: cargo not found" >&2
    exit 1
fi
build_status=0
wait "$build_pid" || build_status=$?
build_pid=""
cat target/test-build.log
[ "$build_status" = 0 ] || { echo "test-all: the test build failed" >&2; exit 1; }
phase "cargo test, accounting off: the live modules that share the cluster"
set +e
# Live tests are #[ignore]d (a plain `cargo test` lists them as ignored); here they run.
# First pass: the cluster without accounting, as many sites run it, in two parts.
# The live modules that share the cluster (`common::cluster_shared`: each
# looks only at its own runs) run side by side first; most of them train with
# the real trainer, so this part keeps the two cores busy. Then the modules
# that take the cluster alone (`common::cluster`: they stop daemons,
# reconfigure, fill every slice or count every job), one module at a time,
# and beside them, in the CPU time their waiting on Slurm leaves, every test
# that needs no cluster. Threads are many because a test waiting for its
# module's turn holds one; `common` lets at most four tests of a module run.
shared=(agent_live backup_live compare_live escalate_live runs_agree_live spec_corpus syslog_live trainer_live)
alone=(cluster_live faults_cluster_live faults_live node_setup_slurm report_live resources_live runs_live)
later=(accounting_live tiers_live) # the accounting pass below
filters=()
for m in "${shared[@]}"; do filters+=("$m::"); done
YOLO_SCHED_EXPECT_CLUSTER=1 cargo test --test integration --no-fail-fast -- --include-ignored \
    --test-threads=8 "${filters[@]}" 2>&1 | tee target/test-all.log
status=${PIPESTATUS[0]}
phase "cargo test, accounting off: the modules alone, and the tests without a cluster"
skips=()
for m in "${shared[@]}" "${later[@]}"; do skips+=(--skip "$m::"); done
YOLO_SCHED_EXPECT_CLUSTER=1 cargo test --workspace --no-fail-fast -- --include-ignored \
    --test-threads=16 "${skips[@]}" 2>&1 | tee -a target/test-all.log
[ "${PIPESTATUS[0]}" = 0 ] || status=1
# Second pass: the same cluster with MariaDB + slurmdbd and a short MinJobAge,
# so finished jobs leave slurmctld within seconds and only sacct knows them.
phase "accounting on (ACCOUNTING=1 MIN_JOB_AGE=10)"
if ACCOUNTING=1 MIN_JOB_AGE=10 bash slurm/cluster.sh up; then
    YOLO_SCHED_EXPECT_CLUSTER=1 cargo test --test integration --no-fail-fast -- --include-ignored \
        accounting_live:: tiers_live:: 2>&1 | tee -a target/test-all.log
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
else
    echo "test-all: the cluster did not come up with accounting" >&2
    status=1
fi
phase "waiting for clippy"
if wait "$clippy_pid"; then
    echo "clippy: no warnings"
else
    cat target/clippy.log
    echo "test-all: clippy found problems (above)" >&2
    status=1
fi
clippy_pid=""
set -e
phase "test summary"
grep -E '^test result:' target/test-all.log | awk '{p+=$4; f+=$6; i+=$8} END {printf "passed %d, failed %d, ignored %d in %d test binaries\n", p, f, i, NR}'
exit "$status"
