#!/usr/bin/env bash
# A real Slurm 22.05 cluster on this one host, with fake MIG GPUs, for yolo-sched's
# tests and demo. Runs as root, without systemd.
#
#   slurm/cluster.sh up        install what is missing, write the config, start, wait for idle
#   slurm/cluster.sh down      stop the daemons this script started (and nothing else)
#   slurm/cluster.sh status    what runs, what the nodes say
#   slurm/cluster.sh env       print the settings in use
#   slurm/cluster.sh reload    rewrite the config; restart slurmctld only if slurm.conf changed,
#                              `scontrol reconfigure`, restart the MIG node's slurmd (node-setup's
#                              --reconfigure-cmd in the end-to-end test)
#   slurm/cluster.sh mig-up    MIG_NODE=1 + reload: add node mig1 (see MIG_NODE)
#   slurm/cluster.sh mig-down  MIG_NODE=0 + reload: remove mig1, its gres.conf block and include
#
# Settings (environment):
#   NODES=N           slurmd instances on this host (node1..nodeN, default 1; a cluster
#                     that is up, or whose daemons stopped without `down`, keeps its
#                     NODES, ACCOUNTING and MIN_JOB_AGE unless given)
#   ACCOUNTING=0|1    MariaDB + slurmdbd so that sacct works (default 0; jobcomp/filetxt is always on)
#   MIN_JOB_AGE=S     seconds slurmctld keeps finished jobs (default 1800; see docs/local-cluster.md)
#   IDLE_TIMEOUT=S    how long up waits for the nodes to become idle (default 60)
#   RESET_STATE=1     with the cluster down: forget slurmctld's saved jobs and node states
#   FORCE_CONF=1      overwrite an /etc/slurm/slurm.conf that this script did not write
#   GRES_CONF_NODE1=F use file F as gres.conf block for node1 (node-setup end-to-end tests)
#   MIG_NODE=0|1      a node mig1 (own slurmd, port 17100, partition mig) whose Gres= comes from
#                     the include /etc/slurm/yolo-mig-node.conf written by `node-setup
#                     --slurm-include`, and whose gres.conf lines are node-setup's block (such
#                     blocks are kept whenever this script rewrites gres.conf). Kept like NODES.
#   NODE_GRES=F       file of `<node> <Gres>` lines (e.g. `node3 gpu:3g.20gb:2,gpu:1g.5gb:4`): the
#                     nodes of node1..nodeN it names get that Gres= and one fake device per GPU
#                     or slice instead of the standard shape (typed gpu items only; `-`: no
#                     GPU, e.g. a node not set up yet). For bench/replay; not kept: `up`
#                     without it gives the standard shape again.
#   POOL=0|1          the exclusive pool: nodes pool1 (gpu:a100:4, 32 CPUs, 256000 MB) and
#                     pool2 (gpu:h100:8, 64 CPUs, 512000 MB), whole GPUs only, in a partition
#                     `pool` of their own (own slurmds, ports +300 and +301; fake devices
#                     gpu0.. under $DEV_DIR/poolK-<instance>). For the several-GPU tests
#                     (pool_live); default 0, so the other modules see the standard shape.
#                     Kept like NODES.
#   CGROUPS=0|1       isolation as on a production site: task/cgroup,task/affinity,
#                     proctrack/cgroup, memory a consumable resource (CR_CPU_Memory), and a
#                     cgroup.conf beside slurm.conf (cgroup/v1; ConstrainCores, ConstrainDevices,
#                     ConstrainRAMSpace, ConstrainSwapSpace). Default 0: no cgroups, every job
#                     sees every device and all memory (sites differ; see docs/local-cluster.md).
#                     Kept like NODES.
#   HIDEPID=0|1       each slurmd runs in a mount namespace of its own whose /proc is a fresh
#                     procfs mounted with hidepid=2, so every job and step of the cluster lists
#                     only its own user's processes, as on a site that mounts /proc so (this
#                     host's /proc is not touched). Default: CGROUPS's value. Kept like NODES;
#                     `up` restarts a running slurmd whose /proc does not match.
#   SCHED_PARAMS=P    more SchedulerParameters after batch_sched_delay=0,bf_interval=1
#                     (bench/replay names bf_interval=1 itself). Not kept either.
#   YOLO_CLUSTER_CONF=F  the cluster-conf program (src/bin/cluster-conf.rs) that writes
#                     slurm.conf, gres.conf and cgroup.conf from these settings. Without it,
#                     `up` and `reload` build it first (`cargo build --bin cluster-conf` in this
#                     checkout, one at a time; cargo must be on PATH or in ~/.cargo/bin).
#   INSTANCE=K        which cluster on this host (1..9, default 1). Instance K > 1 is a second
#                     cluster beside the first, of the same shape, with everything of its own:
#                     /etc/slurm-yoloK, /run/yolo-slurm-K, /var/spool/yolo-slurm-K,
#                     /var/log/yolo-slurm-K, cluster name yoloK, slurmctld port 6817+10(K-1),
#                     slurmd ports 17000+1000(K-1)+…, job ids from 1000000(K-1). Slurm commands
#                     reach it with SLURM_CONF=/etc/slurm-yoloK/slurm.conf (`env` prints it). The
#                     test command runs the live tests that stop daemons on instance 1 and the
#                     real trainings on instance 2 at the same time. munged and MariaDB are
#                     shared; with ACCOUNTING=1 instance K has its own slurmdbd (port
#                     6819+10(K-1), /etc/slurm-yoloK/slurmdbd.conf) and database
#                     (yolo_slurm_acct_K); the MIG node is instance 1's.
#
# Everything the script owns lives under these paths; down removes no file outside them.
set -euo pipefail
# The daemons started here must not inherit descriptors from whoever ran this
# script: a `flock LOCK slurm/cluster.sh up` would otherwise leave the lock
# held by slurmctld for ever. Close everything above stderr (bash reads this
# script on 255).
for _fd in /proc/$$/fd/*; do
    _fd=${_fd##*/}
    if [ "$_fd" -gt 2 ] 2>/dev/null && [ "$_fd" -lt 255 ]; then eval "exec $_fd>&-" 2>/dev/null || true; fi
done
unset _fd

# Temporary config files and directories of this run: removed on exit, so a
# refused `up` (a foreign slurm.conf) leaves no `.gres.conf.*` behind in /etc/slurm.
TMP_FILES=()
remove_tmp_files() { [ "${#TMP_FILES[@]}" -eq 0 ] || rm -rf "${TMP_FILES[@]}"; }
trap remove_tmp_files EXIT

readonly MARKER="# managed by yolo-sched slurm/cluster.sh"
INSTANCE=${INSTANCE:-1}
[[ "$INSTANCE" =~ ^[1-9]$ ]] || { printf 'cluster: error: INSTANCE must be 1..9, got %s\n' "'$INSTANCE'" >&2; exit 1; }
if [ "$INSTANCE" = 1 ]; then
    readonly CONF_DIR=/etc/slurm CLUSTER_NAME=yolo suffix=""
else
    readonly CONF_DIR=/etc/slurm-yolo$INSTANCE CLUSTER_NAME=yolo$INSTANCE suffix="-$INSTANCE"
fi
readonly RUN_DIR=/run/yolo-slurm$suffix
readonly SPOOL_DIR=/var/spool/yolo-slurm$suffix
readonly LOG_DIR=/var/log/yolo-slurm$suffix
# Every Slurm command and daemon this script runs reads this instance's file.
export SLURM_CONF=$CONF_DIR/slurm.conf
# One set of fake devices serves every instance: they only name slices.
readonly DEV_DIR=/dev/yolo-fakegpu
# 240-254 is the Linux "local/experimental use" char major range: nothing pretends to be NVIDIA (195).
readonly DEV_MAJOR=240
readonly CTLD_PORT=$((6817 + 10 * (INSTANCE - 1)))
readonly SLURMD_BASE_PORT=$((17000 + 1000 * (INSTANCE - 1)))
# Job ids of different instances never meet (a test that looks for a job's
# slurmstepd in /proc must not find another cluster's job of the same number).
readonly FIRST_JOB_ID=$((1000000 * (INSTANCE - 1) + 1))
# Accounting of instance K: its own slurmdbd and database in the shared MariaDB.
readonly DBD_PORT=$((6819 + 10 * (INSTANCE - 1)))
if [ "$INSTANCE" = 1 ]; then readonly ACCT_DB=yolo_slurm_acct; else readonly ACCT_DB=yolo_slurm_acct_$INSTANCE; fi
readonly TEST_USER=researcher

# A running cluster keeps its settings unless they are given again: `up`
# without NODES must not shrink a two-node cluster someone else started.
readonly SETTINGS_FILE=$RUN_DIR/settings
# HIDEPID follows a CGROUPS given now unless given itself (CGROUPS=0 on a
# running CGROUPS=1 cluster turns both off).
given_cgroups=${CGROUPS:-} given_hidepid=${HIDEPID:-}
# The file outlives a stopped slurmctld (which removes its pid file) and is
# removed by `down`: an `up` that restarts a stopped slurmctld keeps NODES.
if [ -r "$SETTINGS_FILE" ]; then
    while IFS='=' read -r key value; do
        case "$key" in
        NODES) NODES=${NODES:-$value} ;;
        ACCOUNTING) ACCOUNTING=${ACCOUNTING:-$value} ;;
        MIN_JOB_AGE) MIN_JOB_AGE=${MIN_JOB_AGE:-$value} ;;
        MIG_NODE) MIG_NODE=${MIG_NODE:-$value} ;;
        POOL) POOL=${POOL:-$value} ;;
        CGROUPS) CGROUPS=${CGROUPS:-$value} ;;
        HIDEPID) HIDEPID=${HIDEPID:-$value} ;;
        esac
    done <"$SETTINGS_FILE"
fi
NODES=${NODES:-1}
ACCOUNTING=${ACCOUNTING:-0}
MIN_JOB_AGE=${MIN_JOB_AGE:-1800}
IDLE_TIMEOUT=${IDLE_TIMEOUT:-60}
MIG_NODE=${MIG_NODE:-0}
POOL=${POOL:-0}
CGROUPS=${CGROUPS:-0}
if [ -z "$given_hidepid" ] && [ -n "$given_cgroups" ]; then HIDEPID=$CGROUPS; fi
HIDEPID=${HIDEPID:-$CGROUPS}
unset given_cgroups given_hidepid
NODE_GRES=${NODE_GRES:-}
SCHED_PARAMS=${SCHED_PARAMS:-}
readonly MIG_NODE_NAME=mig1
readonly MIG_INCLUDE=$CONF_DIR/yolo-mig-node.conf

log() { printf 'cluster: %s\n' "$*" >&2; }
die() { printf 'cluster: error: %s\n' "$*" >&2; exit 1; }

require_root() {
    [ "$(id -u)" -eq 0 ] || die "must run as root (it installs packages, writes /etc/slurm and starts daemons)"
}

# What only this script uses; cluster-conf (write_conf) checks every setting
# it writes into the files (NODES, ACCOUNTING, POOL, CGROUPS, MIG_NODE,
# MIN_JOB_AGE, SCHED_PARAMS, NODE_GRES), before anything is installed or started.
validate_settings() {
    [[ "$NODES" =~ ^[1-9][0-9]?$ ]] || die "NODES must be 1..99, got '$NODES'"
    [[ "$POOL" =~ ^[01]$ ]] || die "POOL must be 0 or 1, got '$POOL'"
    [[ "$HIDEPID" =~ ^[01]$ ]] || die "HIDEPID must be 0 or 1, got '$HIDEPID'"
    [[ "$IDLE_TIMEOUT" =~ ^[0-9]+$ ]] || die "IDLE_TIMEOUT must be seconds, got '$IDLE_TIMEOUT'"
}

# ---------------------------------------------------------------- install

install_packages() {
    local want=(slurm-wlm slurmctld slurmd slurm-client munge)
    if [ "$ACCOUNTING" = 1 ]; then want+=(slurmdbd mariadb-server); fi
    local missing=()
    for p in "${want[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    [ "${#missing[@]}" -eq 0 ] && return 0
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # Package postinst scripts try to start services; without systemd policy-rc.d refuses, which is harmless.
    # Another installer (deps.sh, trainer.sh, a second cluster) may hold dpkg's lock: wait for it.
    apt-get -o DPkg::Lock::Timeout=600 update -qq || die "apt-get update failed"
    apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
        die "apt-get install ${missing[*]} failed"
}

ensure_test_user() {
    # One at a time across processes, and repaired (slurm/users.sh).
    bash "$(dirname "$0")/users.sh" ensure "$TEST_USER"
}

# ---------------------------------------------------------------- processes we own

# pid_of NAME: the pid recorded in our pid file, or nothing.
pid_of() {
    local f="$RUN_DIR/$1.pid"
    [ -s "$f" ] || return 0
    tr -dc '0-9' <"$f"
}

# is_ours NAME PID COMM: the pid is alive, not a zombie, runs COMM, and (for slurmd) serves our node.
is_ours() {
    local name=$1 pid=$2 comm=$3
    [ -n "$pid" ] && [ -d "/proc/$pid" ] || return 1
    local state
    state=$(awk '/^State:/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
    [ "$state" != Z ] || return 1
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$comm" ] || return 1
    case "$name" in
    slurmd-*) tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qw -- "${name#slurmd-}" || return 1 ;;
    esac
    return 0
}

running() { # running NAME COMM
    is_ours "$1" "$(pid_of "$1")" "$2"
}

# stop NAME COMM: SIGTERM our process, wait, then SIGKILL; never by name.
stop_daemon() {
    local name=$1 comm=$2 pid
    pid=$(pid_of "$name")
    if is_ours "$name" "$pid" "$comm"; then
        log "stopping $name (pid $pid)"
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 1 100); do
            is_ours "$name" "$pid" "$comm" || break
            sleep 0.1
        done
        if is_ours "$name" "$pid" "$comm"; then
            log "$name did not stop in 10 s; sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
        fi
    fi
    rm -f "$RUN_DIR/$name.pid"
}

# other_instance_up: the run directory of another instance whose slurmctld runs, or fail.
other_instance_up() {
    local d pid
    for d in /run/yolo-slurm /run/yolo-slurm-[2-9]; do
        [ "$d" != "$RUN_DIR" ] && [ -s "$d/slurmctld.pid" ] || continue
        pid=$(tr -dc '0-9' <"$d/slurmctld.pid")
        [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = slurmctld ] && { echo "$d"; return 0; }
    done
    return 1
}

# other_dbd_up: the run directory of another instance whose slurmdbd runs, or fail.
other_dbd_up() {
    local d pid
    for d in /run/yolo-slurm /run/yolo-slurm-[2-9]; do
        [ "$d" != "$RUN_DIR" ] && [ -s "$d/slurmdbd.pid" ] || continue
        pid=$(tr -dc '0-9' <"$d/slurmdbd.pid")
        [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = slurmdbd ] && { echo "$d"; return 0; }
    done
    return 1
}

# ---------------------------------------------------------------- configuration

# slurm.conf, gres.conf and cgroup.conf are written by cluster-conf
# (src/bin/cluster-conf.rs over yolo_sched::localcluster, unit-tested there):
# the nodes' shapes, ports and GRES, NODE_GRES, the GRES_CONF_<NODE> files and
# the node-setup blocks kept from the installed gres.conf. This script only
# needs the node names (for the slurmds) and the fake device counts, which
# cluster-conf writes beside the files.
#
# node1..nodeN share one shape; small1 has another in partitions of its own;
# POOL=1 adds the exclusive pool's pool1 and pool2.
readonly SMALL_NODE_NAME=small1
standard_node_names() { seq -f 'node%g' 1 "$NODES"; }
pool_node_names() { if [ "$POOL" = 1 ]; then printf '%s\n' pool1 pool2; fi; }
node_names() {
    standard_node_names
    echo "$SMALL_NODE_NAME"
    pool_node_names
}

# conf_program: the path of cluster-conf. YOLO_CLUSTER_CONF names a built one
# (slurm/test-all.sh builds it before its test build, so no `up` waits on
# cargo's lock meanwhile); otherwise it is built here, in this checkout's
# target directory (CARGO_TARGET_DIR when set), one build at a time across
# the instances coming up at once. Cargo itself rebuilds only what changed.
REPO_DIR=$(cd "$(dirname "$0")/.." && pwd)
readonly REPO_DIR
readonly CONF_BUILD_LOCK=/run/lock/yolo-sched-cluster-conf.lock
conf_program() {
    if [ -n "${YOLO_CLUSTER_CONF:-}" ]; then
        [ -x "$YOLO_CLUSTER_CONF" ] || die "YOLO_CLUSTER_CONF=$YOLO_CLUSTER_CONF is not an executable file"
        echo "$YOLO_CLUSTER_CONF"
        return 0
    fi
    command -v cargo >/dev/null 2>&1 || PATH="$HOME/.cargo/bin:$PATH"
    command -v cargo >/dev/null 2>&1 ||
        die "cargo not found: the configuration is written by cluster-conf, built with 'cargo build --bin cluster-conf' (install Rust, see README.md, or set YOLO_CLUSTER_CONF to a built cluster-conf)"
    local built bin
    mkdir -p "$(dirname "$CONF_BUILD_LOCK")"
    log "building cluster-conf (cargo build --bin cluster-conf; waits for any cargo build of this checkout that runs)"
    built=$(
        exec 9>"$CONF_BUILD_LOCK"
        flock 9
        cargo build -q --manifest-path "$REPO_DIR/Cargo.toml" --bin cluster-conf \
            --message-format=json-render-diagnostics </dev/null
    ) || die "building cluster-conf failed (cargo build --bin cluster-conf; its errors are above)"
    bin=$(sed -n 's/.*"executable":"\([^"]*\/cluster-conf\)".*/\1/p' <<<"$built" | tail -n 1)
    [ -x "$bin" ] || die "cargo build --bin cluster-conf named no executable"
    echo "$bin"
}

# write_conf DIR: slurm.conf, gres.conf, cgroup.conf and devices (`<dir> <count>`
# per node) into DIR, from the settings; a bad setting fails here, before
# anything is installed or started.
write_conf() {
    local dir=$1 bin n var overrides=()
    bin=$(conf_program) || return 1
    for n in $(node_names); do
        var="GRES_CONF_${n^^}"
        [ -z "${!var:-}" ] || overrides+=(--gres-conf "$n=${!var}")
    done
    "$bin" --out "$dir" --marker "$MARKER" --instance "$INSTANCE" --cluster-name "$CLUSTER_NAME" \
        --hostname "$(hostname)" --ctld-port "$CTLD_PORT" --slurmd-base-port "$SLURMD_BASE_PORT" \
        --dbd-port "$DBD_PORT" --first-job-id "$FIRST_JOB_ID" --spool-dir "$SPOOL_DIR" \
        --run-dir "$RUN_DIR" --log-dir "$LOG_DIR" --dev-dir "$DEV_DIR" --dev-major "$DEV_MAJOR" \
        --nodes "$NODES" --accounting "$ACCOUNTING" --pool "$POOL" --cgroups "$CGROUPS" \
        --mig-node "$MIG_NODE" --min-job-age "$MIN_JOB_AGE" --sched-params "$SCHED_PARAMS" \
        --mig-include "$MIG_INCLUDE" --node-gres "$NODE_GRES" --existing-gres "$CONF_DIR/gres.conf" \
        "${overrides[@]}" || return
}

# make_fake_devices DEVICES: the device files DEVICES (write_conf's) asks for.
make_fake_devices() {
    local dir count i
    while read -r dir count; do
        install -d -m 0755 "$dir"
        for i in $(seq 0 $((count - 1))); do
            local dev="$dir/nvidia$i"
            # A node left by an interrupted run with another number, or not a
            # device at all, is made again (beside, then renamed: instances
            # coming up at once never see it missing).
            if [ ! -c "$dev" ] || [ "$(stat -c '%t:%T' "$dev")" != "$(printf '%x:%x' "$DEV_MAJOR" "$i")" ]; then
                rm -f "$dev.new.$$"
                mknod -m 0666 "$dev.new.$$" c "$DEV_MAJOR" "$i"
                mv -f "$dev.new.$$" "$dev"
            fi
        done
    done <"$1"
}

write_slurmdbd_conf() {
    local out=$1
    {
        echo "$MARKER"
        echo "AuthType=auth/munge"
        echo "DbdHost=localhost"
        echo "DbdPort=$DBD_PORT"
        echo "SlurmUser=slurm"
        echo "StorageType=accounting_storage/mysql"
        echo "StorageHost=localhost"
        echo "StorageLoc=$ACCT_DB"
        echo "StorageUser=slurm"
        echo "StoragePass=yolo-local-only"
        echo "LogFile=$LOG_DIR/slurmdbd.log"
        echo "PidFile=$RUN_DIR/slurmdbd.pid"
        # sacct answers from slurmdbd, which applies its own PrivateData.
        echo "PrivateData=jobs"
    } >"$out"
}

# install_conf SRC DEST MODE OWNER: replace DEST when it differs; return 0 when it changed.
install_conf() {
    local src=$1 dest=$2 mode=$3 owner=$4
    if [ -f "$dest" ] && cmp -s "$src" "$dest"; then
        rm -f "$src"
        return 1
    fi
    if [ -f "$dest" ] && ! head -n1 "$dest" | grep -qxF "$MARKER"; then
        if [ "${FORCE_CONF:-0}" != 1 ]; then
            rm -f "$src"
            die "$dest exists and was not written by this script; set FORCE_CONF=1 to replace it (a backup is kept)"
        fi
        cp -p "$dest" "$dest.bak.$(date +%Y%m%dT%H%M%S)"
    fi
    chmod "$mode" "$src"
    chown "$owner" "$src"
    mv -f "$src" "$dest"
    return 0
}

prepare_dirs() {
    install -d -m 0755 "$CONF_DIR" "$RUN_DIR" "$LOG_DIR" "$SPOOL_DIR"
    install -d -m 0755 -o slurm -g slurm "$SPOOL_DIR/ctld"
    chown slurm:slurm "$LOG_DIR"
    chmod 0775 "$LOG_DIR"
    # slurmctld writes its pid file as SlurmUser.
    chown slurm:slurm "$RUN_DIR"
    chmod 0775 "$RUN_DIR"
}

# ---------------------------------------------------------------- daemons

# The munge key, made once (Debian's package usually made it already).
ensure_munge_key() {
    [ -s /etc/munge/munge.key ] && return 0
    mungekey --create >/dev/null 2>&1 || /usr/sbin/mungekey -c
    chown munge:munge /etc/munge/munge.key
    chmod 0400 /etc/munge/munge.key
}

# What every instance shares and makes once (packages, the test user, the
# fake devices, the munge key): one `up` at a time, in a subshell, so no
# daemon started later inherits the lock. DEVICES: write_conf's device counts.
readonly SETUP_LOCK=/run/lock/yolo-sched-cluster-setup.lock
one_time_setup() {
    local devices=$1
    (
        mkdir -p "$(dirname "$SETUP_LOCK")"
        exec 9>"$SETUP_LOCK"
        flock 9
        install_packages
        ensure_test_user
        make_fake_devices "$devices"
        ensure_munge_key
    )
}

start_munge() {
    if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
        return 0 # a munged answers: use it, whoever started it
    fi
    install -d -o munge -g munge -m 0755 /run/munge
    log "starting munged"
    runuser -u munge -- /usr/sbin/munged --force
    for _ in $(seq 1 50); do
        if [ -s /run/munge/munged.pid ]; then
            cp /run/munge/munged.pid "$RUN_DIR/munged.pid"
            break
        fi
        sleep 0.1
    done
    munge -n | unmunge >/dev/null || die "munged does not answer (see /var/log/munge/munged.log)"
}

start_mariadb() {
    if [ -S /run/mysqld/mysqld.sock ] && mariadb -e 'select 1' >/dev/null 2>&1; then
        :
    else
        install -d -o mysql -g mysql /run/mysqld
        if [ ! -d /var/lib/mysql/mysql ]; then
            mariadb-install-db --user=mysql --datadir=/var/lib/mysql >/dev/null
        fi
        log "starting mariadbd"
        setsid /usr/sbin/mariadbd --user=mysql --skip-networking --socket=/run/mysqld/mysqld.sock \
            --pid-file=/run/mysqld/mysqld.pid >>"$LOG_DIR/mariadbd.log" 2>&1 </dev/null &
        for _ in $(seq 1 100); do
            mariadb -e 'select 1' >/dev/null 2>&1 && break
            sleep 0.1
        done
        [ -s /run/mysqld/mysqld.pid ] && cp /run/mysqld/mysqld.pid "$RUN_DIR/mariadbd.pid"
        mariadb -e 'select 1' >/dev/null 2>&1 || { tail -n 20 "$LOG_DIR/mariadbd.log" >&2; die "mariadbd did not start"; }
    fi
    mariadb -e "CREATE DATABASE IF NOT EXISTS $ACCT_DB;
        CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'yolo-local-only';
        ALTER USER 'slurm'@'localhost' IDENTIFIED BY 'yolo-local-only';
        GRANT ALL ON $ACCT_DB.* TO 'slurm'@'localhost';"
}

start_slurmdbd() {
    running slurmdbd slurmdbd && return 0
    log "starting slurmdbd"
    # slurmdbd reads slurmdbd.conf beside $SLURM_CONF (this instance's).
    /usr/sbin/slurmdbd
    for _ in $(seq 1 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$DBD_PORT") 2>/dev/null && return 0
        sleep 0.1
    done
    tail -n 20 "$LOG_DIR/slurmdbd.log" >&2
    die "slurmdbd did not start listening on port $DBD_PORT"
}

start_slurmctld() {
    running slurmctld slurmctld && return 0
    log "starting slurmctld"
    /usr/sbin/slurmctld -f "$SLURM_CONF"
    for _ in $(seq 1 100); do
        scontrol ping 2>/dev/null | grep -q 'is UP' && return 0
        sleep 0.1
    done
    tail -n 20 "$LOG_DIR/slurmctld.log" >&2
    die "slurmctld does not answer 'scontrol ping'"
}

# proc_hidden PID: the /proc that process PID sees (its mount namespace's) hides
# other users' processes (the last proc mount at /proc has hidepid=2).
proc_hidden() {
    awk '$5 == "/proc" && / - proc / { h = ($0 ~ /hidepid=(2|invisible)/) } END { exit !h }' \
        "/proc/$1/mountinfo" 2>/dev/null
}

# launch_slurmd NODE: start slurmd -N NODE (it puts itself in the background).
# With HIDEPID=1 it starts in a mount namespace of its own (slave: the host's
# later mounts reach it, its own reach nothing) with a fresh procfs on /proc
# mounted hidepid=2: each procfs mount has its own options (Linux 5.8+), so
# this host's /proc keeps its own. The namespace lives as long as the slurmd
# and the slurmstepd it forks, and every job step inherits it. The pid
# namespace is the host's: pids, pid files and `down` are unchanged.
launch_slurmd() {
    local n=$1
    install -d -m 0755 "$SPOOL_DIR/d-$n"
    if [ "$HIDEPID" = 1 ]; then
        log "starting slurmd -N $n (own /proc, hidepid=2)"
        # In a chroot (the fresh-root tool's minimal Debian) "/" is not a
        # mount point and unshare cannot make it a slave: there, the
        # namespace keeps the propagation it has and /proc alone is made a
        # slave first, so the new procfs still reaches nothing outside.
        unshare --mount --propagation slave -- /bin/sh -c 'mount -t proc -o hidepid=2 proc /proc && exec "$@"' \
            slurmd /usr/sbin/slurmd -f "$SLURM_CONF" -N "$n" ||
            unshare --mount --propagation unchanged -- /bin/sh -c 'mount --make-rslave /proc && mount -t proc -o hidepid=2 proc /proc && exec "$@"' \
                slurmd /usr/sbin/slurmd -f "$SLURM_CONF" -N "$n" ||
            die "slurmd -N $n did not start in a mount namespace with /proc mounted hidepid=2 (that needs root with CAP_SYS_ADMIN and Linux 5.8+; HIDEPID=0 starts it on this host's /proc; see $LOG_DIR/slurmd-$n.log)"
    else
        log "starting slurmd -N $n"
        /usr/sbin/slurmd -f "$SLURM_CONF" -N "$n"
    fi
}

start_slurmds() {
    local n pid want
    for n in $(node_names); do
        if running "slurmd-$n" slurmd; then
            # A slurmd started with the other HIDEPID is restarted (its jobs
            # keep running: their slurmstepd does not need it).
            pid=$(pid_of "slurmd-$n")
            want=0
            proc_hidden "$pid" && want=1
            [ "$want" != "$HIDEPID" ] || continue
            log "slurmd -N $n runs with HIDEPID=$want: restarting it"
            stop_daemon "slurmd-$n" slurmd
        fi
        launch_slurmd "$n"
    done
}

# Nodes that went DOWN/DRAIN/INVALID before (a restart with a new config) stay so until resumed.
resume_stuck_nodes() {
    local line node state
    while read -r node state; do
        case "$state" in
        down* | drain* | inval* | fail*) scontrol update NodeName="$node" State=RESUME 2>/dev/null || true ;;
        esac
    done < <(sinfo -h -N -o '%N %t' 2>/dev/null | sort -u)
}

wait_idle() {
    local deadline=$((SECONDS + IDLE_TIMEOUT)) resumed=0 states
    while [ $SECONDS -lt $deadline ]; do
        states=$(sinfo -h -N -o '%N %t' 2>/dev/null | sort -u)
        local total idle
        total=$(printf '%s\n' "$states" | grep -c . || true)
        idle=$(printf '%s\n' "$states" | awk '$2 == "idle" || $2 == "mix" || $2 == "alloc"' | grep -c . || true)
        local want
        want=$(node_names | grep -c .)
        if [ "$total" -eq "$want" ] && [ "$idle" -eq "$want" ] && registered_all; then
            log "all $want node(s) idle"
            return 0
        fi
        if [ $resumed = 0 ] && [ $((deadline - SECONDS)) -lt $((IDLE_TIMEOUT - 3)) ]; then
            resume_stuck_nodes
            resumed=1
        fi
        sleep 0.2
    done
    {
        echo "cluster: error: nodes did not become idle within ${IDLE_TIMEOUT}s:"
        sinfo -N -o '%N %t %E' 2>&1 || true
        echo "--- $LOG_DIR/slurmctld.log (last lines)"
        tail -n 15 "$LOG_DIR/slurmctld.log" 2>/dev/null || true
        for n in $(node_names); do
            echo "--- $LOG_DIR/slurmd-$n.log (last lines)"
            tail -n 15 "$LOG_DIR/slurmd-$n.log" 2>/dev/null || true
        done
    } >&2
    exit 1
}

# After a restart sinfo first shows the saved state; wait until every slurmd has registered.
registered_all() {
    local n
    for n in $(node_names); do
        scontrol -o show node "$n" 2>/dev/null | grep -q 'SlurmdStartTime=[0-9]' || return 1
    done
}

stop_slurmds() {
    local f name
    for f in "$RUN_DIR"/slurmd-*.pid; do
        [ -e "$f" ] || continue
        name=$(basename "$f" .pid)
        stop_daemon "$name" slurmd
    done
}

# slurmstepd lingers about a second after a job ends; stopping slurmd under it orphans it.
wait_jobs_gone() {
    if scontrol ping 2>/dev/null | grep -q 'is UP'; then
        local jobs
        jobs=$(squeue -h -t PENDING,RUNNING,SUSPENDED,CONFIGURING,COMPLETING -o %A 2>/dev/null | sort -u | tr '\n' ' ' || true)
        if [ -n "${jobs// /}" ]; then
            log "cancelling the jobs still in the queue"
            # shellcheck disable=SC2086 # one word per job id
            scancel --quiet $jobs 2>/dev/null || true
        fi
    fi
    for _ in $(seq 1 150); do
        [ -n "$(our_stepds)" ] || return 0
        sleep 0.1
    done
    log "warning: slurmstepd still running after 15 s"
}

# The slurmstepd processes of this instance's jobs ("slurmstepd: [JOB.STEP]"),
# told from another instance's by the job id range (FIRST_JOB_ID).
our_stepds() {
    local pid id
    for pid in $(pgrep -x slurmstepd 2>/dev/null); do
        id=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | sed -n 's/.*\[\([0-9][0-9]*\)[].].*/\1/p')
        [ -n "$id" ] && [ "$id" -ge "$FIRST_JOB_ID" ] && [ "$id" -lt $((FIRST_JOB_ID + 1000000)) ] && echo "$pid"
    done
    return 0
}

# ---------------------------------------------------------------- commands

cmd_up() {
    require_root
    validate_settings
    local gen
    gen=$(mktemp -d "${TMPDIR:-/tmp}/yolo-cluster-conf.XXXXXX")
    TMP_FILES+=("$gen")
    write_conf "$gen" || exit
    one_time_setup "$gen/devices"
    prepare_dirs

    if [ "${RESET_STATE:-0}" = 1 ]; then
        running slurmctld slurmctld && die "RESET_STATE=1 needs the cluster down first"
        rm -rf "${SPOOL_DIR:?}/ctld"/*
    fi

    local tmp_conf tmp_gres tmp_cgroup tmp_dbd changed=0 dbd_changed=0
    tmp_conf=$(mktemp "$CONF_DIR/.slurm.conf.XXXXXX")
    tmp_gres=$(mktemp "$CONF_DIR/.gres.conf.XXXXXX")
    tmp_cgroup=$(mktemp "$CONF_DIR/.cgroup.conf.XXXXXX")
    TMP_FILES+=("$tmp_conf" "$tmp_gres" "$tmp_cgroup")
    cat "$gen/slurm.conf" >"$tmp_conf"
    cat "$gen/gres.conf" >"$tmp_gres"
    cat "$gen/cgroup.conf" >"$tmp_cgroup"
    install_conf "$tmp_conf" "$CONF_DIR/slurm.conf" 0644 root:root && changed=1
    install_conf "$tmp_gres" "$CONF_DIR/gres.conf" 0644 root:root && changed=1
    install_conf "$tmp_cgroup" "$CONF_DIR/cgroup.conf" 0644 root:root && changed=1
    # Keep a record of the node count this config was written for, so down stops every slurmd.
    if [ "$ACCOUNTING" = 1 ]; then
        tmp_dbd=$(mktemp "$CONF_DIR/.slurmdbd.conf.XXXXXX")
        TMP_FILES+=("$tmp_dbd")
        write_slurmdbd_conf "$tmp_dbd"
        install_conf "$tmp_dbd" "$CONF_DIR/slurmdbd.conf" 0600 slurm:slurm && changed=1 && dbd_changed=1
    fi

    start_munge
    if [ "$changed" = 1 ]; then
        log "configuration changed: restarting the daemons this script runs"
        wait_jobs_gone
        stop_slurmds
        stop_daemon slurmctld slurmctld
        # slurmdbd reads its file only at start (PrivateData, storage).
        [ "$dbd_changed" = 0 ] || stop_daemon slurmdbd slurmdbd
    fi
    # Stop slurmd instances for nodes no longer configured (NODES went down).
    local f name
    for f in "$RUN_DIR"/slurmd-*.pid; do
        [ -e "$f" ] || continue
        name=$(basename "$f" .pid)
        # grep reads all of it: -q would quit early and, under pipefail, fail on SIGPIPE.
        node_names | grep -x "${name#slurmd-}" >/dev/null || stop_daemon "$name" slurmd
    done
    if [ "$ACCOUNTING" = 1 ]; then
        start_mariadb
        start_slurmdbd
    else
        stop_daemon slurmdbd slurmdbd
    fi
    start_slurmctld
    start_slurmds
    wait_idle
    write_settings
}

write_settings() {
    printf 'NODES=%s\nACCOUNTING=%s\nMIN_JOB_AGE=%s\nMIG_NODE=%s\nPOOL=%s\nCGROUPS=%s\nHIDEPID=%s\n' "$NODES" "$ACCOUNTING" "$MIN_JOB_AGE" "$MIG_NODE" "$POOL" "$CGROUPS" "$HIDEPID" >"$SETTINGS_FILE"
}

# Rewrite the configuration of a running cluster without stopping jobs: slurmctld
# restarts only when slurm.conf changed (adding a node or changing its Gres= needs
# that), every slurmd re-reads through `scontrol reconfigure`, and the MIG node's
# slurmd is restarted so that it reads its new gres.conf lines.
cmd_reload() {
    require_root
    validate_settings
    running slurmctld slurmctld || die "the cluster is not up; run 'slurm/cluster.sh up' first"
    local gen tmp_conf tmp_gres tmp_cgroup conf_changed=0
    gen=$(mktemp -d "${TMPDIR:-/tmp}/yolo-cluster-conf.XXXXXX")
    TMP_FILES+=("$gen")
    write_conf "$gen" || exit
    tmp_conf=$(mktemp "$CONF_DIR/.slurm.conf.XXXXXX")
    tmp_gres=$(mktemp "$CONF_DIR/.gres.conf.XXXXXX")
    tmp_cgroup=$(mktemp "$CONF_DIR/.cgroup.conf.XXXXXX")
    TMP_FILES+=("$tmp_conf" "$tmp_gres" "$tmp_cgroup")
    cat "$gen/slurm.conf" >"$tmp_conf"
    cat "$gen/gres.conf" >"$tmp_gres"
    cat "$gen/cgroup.conf" >"$tmp_cgroup"
    install_conf "$tmp_conf" "$CONF_DIR/slurm.conf" 0644 root:root && conf_changed=1
    install_conf "$tmp_gres" "$CONF_DIR/gres.conf" 0644 root:root || true
    install_conf "$tmp_cgroup" "$CONF_DIR/cgroup.conf" 0644 root:root || true
    [ "$MIG_NODE" = 1 ] || stop_daemon "slurmd-$MIG_NODE_NAME" slurmd
    if [ "$conf_changed" = 1 ]; then
        log "slurm.conf changed: restarting slurmctld"
        stop_daemon slurmctld slurmctld
        start_slurmctld
    fi
    scontrol reconfigure || log "warning: scontrol reconfigure failed"
    if [ "$MIG_NODE" = 1 ]; then
        stop_daemon "slurmd-$MIG_NODE_NAME" slurmd
        launch_slurmd "$MIG_NODE_NAME"
        local deadline=$((SECONDS + IDLE_TIMEOUT))
        until scontrol -o show node "$MIG_NODE_NAME" 2>/dev/null | grep -q 'SlurmdStartTime=[0-9]'; do
            [ $SECONDS -lt $deadline ] || die "$MIG_NODE_NAME did not register within ${IDLE_TIMEOUT}s (see $LOG_DIR/slurmd-$MIG_NODE_NAME.log)"
            sleep 0.2
        done
    fi
    write_settings
}

cmd_mig_down() {
    MIG_NODE=0
    cmd_reload
    rm -f "$MIG_INCLUDE"
    rm -rf "${SPOOL_DIR:?}/d-$MIG_NODE_NAME"
    log "$MIG_NODE_NAME removed"
}

cmd_down() {
    require_root
    wait_jobs_gone
    stop_slurmds
    stop_daemon slurmctld slurmctld
    stop_daemon slurmdbd slurmdbd
    local other
    # MariaDB serves every instance's slurmdbd: while another one runs, it
    # stays, and that instance's down stops it.
    if [ -s "$RUN_DIR/mariadbd.pid" ] && other=$(other_dbd_up); then
        log "mariadbd stays for the slurmdbd in $other"
        mv -f "$RUN_DIR/mariadbd.pid" "$other/mariadbd.pid"
    fi
    stop_daemon mariadbd mariadbd
    # munged serves every instance: while another one is up it stays, and that
    # instance's down stops it.
    if [ -s "$RUN_DIR/munged.pid" ] && other=$(other_instance_up); then
        log "munged stays for the cluster in $other"
        mv -f "$RUN_DIR/munged.pid" "$other/munged.pid"
    fi
    stop_daemon munged munged
    rm -f "$SETTINGS_FILE"
    log "down"
}

cmd_status() {
    local name comm f
    for f in "$RUN_DIR"/*.pid; do
        [ -e "$f" ] || continue
        name=$(basename "$f" .pid)
        comm=${name%%-*}
        if running "$name" "$comm"; then echo "$name: running (pid $(pid_of "$name"))"; else echo "$name: not running (stale pid file)"; fi
    done
    if ! running slurmctld slurmctld; then
        echo "slurmctld: not running; the cluster is down (slurm/cluster.sh up starts it)"
        return 1
    fi
    sinfo -N -o '%N %P %t %G'
}

cmd_env() {
    echo "INSTANCE=$INSTANCE NODES=$NODES ACCOUNTING=$ACCOUNTING MIN_JOB_AGE=$MIN_JOB_AGE MIG_NODE=$MIG_NODE POOL=$POOL CGROUPS=$CGROUPS HIDEPID=$HIDEPID CONF_DIR=$CONF_DIR RUN_DIR=$RUN_DIR LOG_DIR=$LOG_DIR DEV_DIR=$DEV_DIR SLURM_CONF=$SLURM_CONF"
}

case "${1:-}" in
up) cmd_up ;;
down) cmd_down ;;
status) cmd_status ;;
env) cmd_env ;;
reload) cmd_reload ;;
mig-up)
    MIG_NODE=1
    cmd_reload
    ;;
mig-down) cmd_mig_down ;;
*)
    # The header comment, up to the first line that is not a comment.
    awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"
    exit 2
    ;;
esac
