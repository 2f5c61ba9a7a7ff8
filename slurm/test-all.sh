#!/usr/bin/env bash
# Everything the test suite needs, then the suite: Debian packages, two local
# Slurm clusters (two nodes each, fake MIG GRES), the real trainer, the S3
# server, formatting and lint checks, and `cargo test` over the workspace with
# the clusters required. The clusters are taken down at the end, also when
# something fails, and the script checks that `up` twice is a no-op and that
# `down` leaves none of their daemons.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
export NODES="${NODES:-2}"
# Each phase's start, in seconds since the script began, and how busy the CPUs
# were since the last phase began (from /proc/stat: all processes, the Slurm
# jobs' included), so a slow phase shows whether it waited or computed.
cpu_ticks() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8 + $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9}' /proc/stat; }
read -r last_busy last_total < <(cpu_ticks)
phase() {
    local busy total pct=0
    read -r busy total < <(cpu_ticks)
    [ "$total" -gt "$last_total" ] && pct=$(((busy - last_busy) * 100 / (total - last_total)))
    last_busy=$busy last_total=$total
    echo "=== test-all: $* (at ${SECONDS} s; CPUs ${pct}% busy since the last phase)" >&2
}

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
trainer_pid="" alone_pid="" faults_pid=""
stop_builds() { for p in $build_pid $clippy_pid $trainer_pid $alone_pid $faults_pid; do stop_tree "$p"; done; }
trap stop_builds EXIT
# cluster-conf (which writes the clusters' configuration) first: it needs
# the library the tests link too, so it is the first part of the same build
# (Cargo.toml makes `cargo build` and `cargo test` resolve the same features),
# and `cluster.sh up` below waits only for it, not for the tests. The clusters
# then use it through YOLO_CLUSTER_CONF and never run cargo themselves (cargo's
# lock would make them wait for the whole test build).
rm -f target/cluster-conf.status target/cluster-conf.json
if command -v cargo >/dev/null 2>&1; then
    phase "test build and clippy (in the background)"
    (
        set +e
        cargo build --quiet --bin cluster-conf --message-format=json-render-diagnostics >target/cluster-conf.json
        echo $? >target/cluster-conf.status
        exec cargo test --workspace --no-run --quiet
    ) >target/test-build.log 2>&1 </dev/null &
    build_pid=$!
    CARGO_TARGET_DIR=target/clippy nice -n 19 ionice -c 3 \
        cargo clippy --workspace --all-targets --quiet -- -D warnings >target/clippy.log 2>&1 </dev/null &
    clippy_pid=$!
fi

phase "packages"
bash slurm/deps.sh
phase "trainer venv (in the background)"
# The real Ultralytics trainer for the live training tests (reused when
# present). On a fresh machine it is minutes of downloads and unpacking, and
# only the live modules that train need it: the others run meanwhile.
bash slurm/trainer.sh install >target/trainer.log 2>&1 </dev/null &
trainer_pid=$!

# The test command runs clusters of the same shape side by side
# (slurm/cluster.sh INSTANCE): the live modules that take a cluster alone (they
# stop daemons, reconfigure, fill every slice or count every job) on instance
# 1, and the modules that look only at their own runs, most of them real
# trainings, on instance 2 at the same time. The first kind mostly waits on
# Slurm, the second computes, so side by side they share the two cores
# instead of taking turns.
# A third, instance 3, is for the module that stops slurmctld and kills a
# slurmd under running jobs: it takes as long as its daemons take to come back,
# and would hold the first cluster that long.
readonly SECOND_CONF=/etc/slurm-yolo2/slurm.conf THIRD_CONF=/etc/slurm-yolo3/slurm.conf
daemon_pids() { cat /run/yolo-slurm/*.pid /run/yolo-slurm-[23]/*.pid 2>/dev/null | sort -n | tr '\n' ' '; }
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
    stop_builds # an early exit must not leave a build or a pass running behind it
    bash slurm/s3.sh down
    INSTANCE=2 bash slurm/cluster.sh down
    INSTANCE=3 bash slurm/cluster.sh down
    bash slurm/cluster.sh down
    bash slurm/cluster.sh down >/dev/null # twice: must be harmless
    # shellcheck disable=SC2086 # one word per pid
    left=$(alive $started_pids)
    # munged serves every instance on the host: with another cluster up
    # beside this run (an instance of someone else's), `down` hands it over
    # to that one instead of stopping it, and it is not left behind.
    local handed p kept=""
    handed=$(cat /run/yolo-slurm-[4-9]/munged.pid 2>/dev/null | tr -dc '0-9\n' || true)
    for p in $left; do printf '%s\n' "$handed" | grep -qx "$p" || kept="$kept$p "; done
    left=$kept
    if [ -n "$left" ]; then
        echo "test-all: cluster.sh down left daemons running: $left" >&2
        status=1
    fi
    exit "$status"
}
started_pids=""
trap finish EXIT

phase "s3 and clusters up"
# The S3-compatible server of the checkpoint-backup tests (SeaweedFS on 127.0.0.1).
bash slurm/s3.sh up
bash slurm/s3.sh up # twice: must be a no-op
phase "waiting for cluster-conf (the first part of the test build; cluster.sh writes the config with it)"
while [ -n "$build_pid" ] && [ ! -s target/cluster-conf.status ] && kill -0 "$build_pid" 2>/dev/null; do sleep 0.5; done
if [ "$(cat target/cluster-conf.status 2>/dev/null)" = 0 ]; then
    YOLO_CLUSTER_CONF=$(sed -n 's/.*"executable":"\([^"]*\/cluster-conf\)".*/\1/p' target/cluster-conf.json | tail -n 1)
    export YOLO_CLUSTER_CONF
elif [ -n "$build_pid" ]; then
    cat target/test-build.log >&2
    echo "test-all: cluster-conf did not build" >&2
    exit 1
fi

# Instances 1 and 2 run as a production site configures a cluster (cgroups:
# devices, memory and cores constrained, memory consumable; CGROUPS=1,
# docs/local-cluster.md), so every live module is shown to work there.
# Instance 3 has none (sites differ): the faults module and
# isolation_none_live run on it, then it is brought up again with cgroups for
# isolation_live. The settings are named, not kept from an interrupted run.
# Instance 2 has the exclusive pool too (POOL=1: pool1 gpu:a100:4, pool2
# gpu:h100:8, partition pool) for pool_live; its other modules look only at
# their own runs on the standard nodes.
pool_of() { if [ "$1" = 2 ]; then echo 1; else echo 0; fi; }
cgroups_of() { if [ "$1" = 3 ]; then echo 0; else echo 1; fi; }
for k in 1 2 3; do INSTANCE=$k POOL=$(pool_of "$k") CGROUPS=$(cgroups_of "$k") bash slurm/cluster.sh up; done
started_pids=$(daemon_pids)
for k in 1 2 3; do INSTANCE=$k POOL=$(pool_of "$k") CGROUPS=$(cgroups_of "$k") bash slurm/cluster.sh up; done
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
# The integration binary itself: the shared pass runs it directly, beside the
# `cargo test` of the other pass (two cargo commands would wait on each
# other's lock of the target directory).
integration=$(cargo test --test integration --no-run --message-format=json 2>/dev/null |
    sed -n 's/.*"executable":"\([^"]*\/integration-[0-9a-f]*\)".*/\1/p' | tail -n 1)
[ -x "$integration" ] || { echo "test-all: no integration test binary found" >&2; exit 1; }
# The fake libnvidia-ml.so, built once before the streams: a test that built
# it itself would wait on cargo's lock while the unit tests run beside it.
cargo build -q -p fake-nvml
YOLO_SCHED_FAKE_NVML_DIR="$PWD/target/debug"
export YOLO_SCHED_FAKE_NVML_DIR

set +e
# Live tests are #[ignore]d (a plain `cargo test` lists them as ignored); here they run.
# Threads are many because a test waiting for its module's turn holds one;
# `common` lets at most four tests of a module run at once.
shared=(advise agent_live backup_live compare_live escalate_live pool_live registry_live runs_agree_live spec_corpus syslog_live trainer_live tune_live)
alone=(cluster_live faults_live node_setup_slurm report_live resources_live runs_live)
disrupting=(faults_cluster_live isolation_none_live) # instance 3, without cgroups
constrained=(isolation_live) # instance 3 again, with cgroups (CGROUPS=1), once the faults are done
later=(accounting_live tiers_live) # the accounting pass below
export YOLO_SCHED_EXPECT_CLUSTER=1 YOLO_SCHED_EXPECT_TRAINER=1
# pass NAME COMMAND...: COMMAND's output to target/test-NAME.log and, each line
# marked with the pass, to the terminal; the exit status is COMMAND's.
pass() {
    local name=$1
    shift
    "$@" 2>&1 | tee "target/test-$name.log" | sed -u "s/^/[$name] /"
    return "${PIPESTATUS[0]}"
}
# Instance 1, in the background: the integration binary over the modules
# alone, and beside them, in the CPU time their waiting leaves, every
# integration test that needs no cluster; then the same cluster with MariaDB +
# slurmdbd and a short MinJobAge, so finished jobs leave slurmctld within
# seconds and only sacct knows them. This stream is the longest: it runs the
# binary itself, so that it never waits for a cargo lock.
instance_one() {
    local skips=() status=0
    for m in "${shared[@]}" "${disrupting[@]}" "${constrained[@]}" "${later[@]}"; do skips+=(--skip "$m::"); done
    phase "[alone] cluster 1: the live modules that take the cluster alone (${alone[*]}), and the integration tests without a cluster"
    pass alone "$integration" --include-ignored --test-threads=16 "${skips[@]}" || status=1
    phase "[accounting] cluster 1 with accounting (ACCOUNTING=1 MIN_JOB_AGE=10)"
    if ACCOUNTING=1 MIN_JOB_AGE=10 CGROUPS=1 bash slurm/cluster.sh up; then
        pass accounting "$integration" --include-ignored accounting_live:: tiers_live:: || status=1
    else
        echo "test-all: the cluster did not come up with accounting" >&2
        status=1
    fi
    phase "[alone] cluster 1 done"
    return "$status"
}
instance_one </dev/null &
alone_pid=$!
# Instance 3, without cgroups: the module that stops daemons and the test of
# what a site without cgroups lets a job do; then the same cluster restarted
# with cgroups (CGROUPS=1, docs/local-cluster.md) for the isolation tests,
# which take it alone.
instance_three() {
    local filters=() status=0
    for m in "${disrupting[@]}"; do filters+=("$m::"); done
    phase "[faults] cluster 3 without cgroups: ${disrupting[*]}"
    pass faults env INSTANCE=3 SLURM_CONF="$THIRD_CONF" "$integration" --include-ignored "${filters[@]}" || status=1
    filters=()
    for m in "${constrained[@]}"; do filters+=("$m::"); done
    phase "[isolation] cluster 3 with cgroups (CGROUPS=1): ${constrained[*]}"
    if INSTANCE=3 CGROUPS=1 bash slurm/cluster.sh up; then
        pass isolation env INSTANCE=3 SLURM_CONF="$THIRD_CONF" "$integration" --include-ignored "${filters[@]}" || status=1
    else
        echo "test-all: cluster 3 did not come up with cgroups" >&2
        status=1
    fi
    return "$status"
}
instance_three </dev/null &
faults_pid=$!

# In the foreground: the unit and doc tests of both crates, and on instance 2
# the live modules that share a cluster once the trainer is there (the unit
# tests first while it still installs, else after them).
unit_tests() {
    phase "[unit] the unit and doc tests"
    pass unit cargo test --workspace --no-fail-fast --lib --bins || return 1
    pass doc cargo test --workspace --no-fail-fast --doc || return 1
}
shared_modules() {
    local trainer_status=0 filters=()
    if [ -n "$trainer_pid" ]; then
        phase "waiting for the trainer venv"
        wait "$trainer_pid" || trainer_status=$?
        trainer_pid=""
        sed 's/^/[trainer] /' target/trainer.log
    fi
    if [ "$trainer_status" != 0 ]; then
        echo "test-all: the trainer venv did not install (above); the live modules that train are not run" >&2
        return 1
    fi
    YOLO_TRAINER_VENV=$(tail -n 1 target/trainer.log)
    export YOLO_TRAINER_VENV
    phase "[shared] cluster 2: the live modules that share a cluster"
    for m in "${shared[@]}"; do filters+=("$m::"); done
    # One CPU thread per training (the job scripts keep an exported
    # OMP_NUM_THREADS): several real trainings share this machine's cores,
    # and PyTorch's threads would spin-wait on each other (152 s and 244
    # CPU-seconds for these modules alone with 2 threads each, 135 s and 214 with 1).
    pass shared env SLURM_CONF="$SECOND_CONF" OMP_NUM_THREADS=1 "$integration" --include-ignored --test-threads=8 "${filters[@]}"
}
status=0
if kill -0 "$trainer_pid" 2>/dev/null; then
    unit_tests || status=1
    shared_modules || status=1
else
    shared_modules || status=1
    unit_tests || status=1
fi
phase "waiting for clusters 1 and 3"
wait "$alone_pid" || status=1
alone_pid=""
wait "$faults_pid" || status=1
faults_pid=""
phase "waiting for clippy"
# Nothing of ours competes with it now: back to normal priority, or on a
# machine busy with other work (a CPU hog) it would get almost no CPU.
renice_tree() {
    local c
    for c in $(pgrep -P "$1" 2>/dev/null); do renice_tree "$c"; done
    renice -n 0 -p "$1" >/dev/null 2>&1 || true
    ionice -c 2 -n 4 -p "$1" >/dev/null 2>&1 || true
}
renice_tree "$clippy_pid"
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
cat target/test-{alone,faults,isolation,accounting,shared,unit,doc}.log 2>/dev/null >target/test-all.log
grep -E '^test result:' target/test-all.log | awk '{p+=$4; f+=$6; i+=$8} END {printf "passed %d, failed %d, ignored %d in %d test runs\n", p, f, i, NR}'
exit "$status"
