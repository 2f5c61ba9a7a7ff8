#!/usr/bin/env bash
# Shows that cluster-conf (src/bin/cluster-conf.rs, as slurm/cluster.sh calls
# it) writes byte for byte what cluster.sh's own bash functions wrote before
# it (OLD_REF's slurm/cluster.sh, default the last commit that had them), for
# a matrix of settings; and that the fake device files asked for are the same.
# Starts nothing, writes nothing outside a temporary directory (and, with
# --golden, tests/fixtures/cluster-conf/cases/). Needs no root.
#
#   bash slurm/conf-identity.sh [--golden] [OLD_REF]
#
# Each case sources the old functions and the new cluster.sh's write_conf
# (extracted by name, with the same variables set, `hostname` answering
# "host"), runs both, and diffs slurm.conf, gres.conf, cgroup.conf and the
# mknod/install calls make_fake_devices makes (stubbed). Error cases must fail
# on both sides. --golden stores each case's new files and the argument list
# cluster.sh passed, for tests/integration/cluster_conf.rs.
# YOLO_CLUSTER_CONF names a built cluster-conf; otherwise it is built.
set -euo pipefail
cd "$(dirname "$0")/.."
golden=0
if [ "${1:-}" = --golden ]; then golden=1; shift; fi
readonly OLD_REF=${1:-6477a56}
readonly FIX=tests/fixtures/cluster-conf
work=$(mktemp -d "${TMPDIR:-/tmp}/conf-identity.XXXXXX")
trap 'rm -rf "$work"' EXIT

if [ -z "${YOLO_CLUSTER_CONF:-}" ]; then
    built=$(cargo build -q --bin cluster-conf --message-format=json-render-diagnostics </dev/null)
    YOLO_CLUSTER_CONF=$(sed -n 's/.*"executable":"\([^"]*\/cluster-conf\)".*/\1/p' <<<"$built" | tail -n 1)
fi
real_bin=$YOLO_CLUSTER_CONF
# A wrapper that records the arguments cluster.sh passes.
cat >"$work/wrap" <<EOT
#!/usr/bin/env bash
printf '%s\n' "\$@" >"\$ARGS_LOG"
exec "$real_bin" "\$@"
EOT
chmod +x "$work/wrap"

# extract FILE NAME...: the definitions of these shell functions in FILE.
extract() {
    local file=$1
    shift
    awk -v names=" $* " '
        !infn && /^[a-z_]+\(\) \{/ {
            n = substr($0, 1, index($0, "(") - 1)
            if (index(names, " " n " ")) {
                print
                if ($0 !~ /\{$/) next # a one-line function
                infn = 1
                next
            }
        }
        infn { print; if ($0 ~ /^}$/) infn = 0 }
    ' "$file"
}
git show "$OLD_REF:slurm/cluster.sh" >"$work/old-cluster.sh"
extract "$work/old-cluster.sh" die node_gres gres_devices standard_node_names pool_nodes pool_node_names \
    node_names node_dev_dir make_fake_devices gres_types_tres write_slurm_conf write_cgroup_conf \
    write_gres_conf pool_node_lines mig_node_lines node_setup_blocks validate_settings >"$work/old.sh"
extract slurm/cluster.sh die standard_node_names pool_node_names node_names conf_program write_conf \
    make_fake_devices validate_settings >"$work/new.sh"
for f in write_slurm_conf write_gres_conf node_setup_blocks; do
    grep -q "^$f() {" "$work/old.sh" || { echo "conf-identity: $OLD_REF has no $f" >&2; exit 1; }
done
grep -q '^write_conf() {' "$work/new.sh" || { echo "conf-identity: slurm/cluster.sh has no write_conf" >&2; exit 1; }

# The variables cluster.sh derives (its formulas), for INSTANCE and CONF_DIR.
derive() {
    MARKER="# managed by yolo-sched slurm/cluster.sh"
    if [ "$INSTANCE" = 1 ]; then CLUSTER_NAME=yolo suffix=""; else CLUSTER_NAME=yolo$INSTANCE suffix="-$INSTANCE"; fi
    RUN_DIR=/run/yolo-slurm$suffix SPOOL_DIR=/var/spool/yolo-slurm$suffix LOG_DIR=/var/log/yolo-slurm$suffix
    # A directory that does not exist here: make_fake_devices's checks all say "make it".
    DEV_DIR=/dev/yolo-fakegpu-conf-identity DEV_MAJOR=240
    CTLD_PORT=$((6817 + 10 * (INSTANCE - 1)))
    SLURMD_BASE_PORT=$((17000 + 1000 * (INSTANCE - 1)))
    FIRST_JOB_ID=$((1000000 * (INSTANCE - 1) + 1))
    DBD_PORT=$((6819 + 10 * (INSTANCE - 1)))
    MIG_NODE_NAME=mig1 MIG_NODE_PORT=$((SLURMD_BASE_PORT + 100)) MIG_INCLUDE=$CONF_DIR/yolo-mig-node.conf
    SMALL_NODE_NAME=small1 SMALL_NODE_PORT=$((SLURMD_BASE_PORT + 200))
}
# The stubs make_fake_devices runs against: each call printed, nothing made.
stubs='install() { echo "install $*"; }; mknod() { echo "mknod $*"; }; mv() { echo "mv $*"; }; rm() { echo "rm $*"; }; stat() { echo "stat $*"; }; hostname() { echo host; }'

# side old|new DIR: run one side's functions in a subshell with the case's settings.
side() {
    local which=$1 dir=$2
    mkdir -p "$dir"
    (
        derive
        eval "$stubs"
        # shellcheck disable=SC1090
        source "$work/$which.sh"
        validate_settings
        if [ "$which" = old ]; then
            write_slurm_conf "$dir/slurm.conf"
            write_gres_conf "$dir/gres.conf"
            write_cgroup_conf "$dir/cgroup.conf"
            make_fake_devices >"$dir/devcalls"
        else
            ARGS_LOG="$dir/args" YOLO_CLUSTER_CONF="$work/wrap" write_conf "$dir" || exit
            make_fake_devices "$dir/devices" >"$dir/devcalls"
        fi
    )
}

pass=0 fail=0
# both_sides DIR [VAR=VALUE...]: the old and the new writer on the same
# settings (the rest at cluster.sh's defaults), each side's files under
# DIR/old and DIR/new and its exit status in DIR.old.rc and DIR.new.rc.
both_sides() {
    local d=$1
    shift
    (
        INSTANCE=1 NODES=1 ACCOUNTING=0 MIN_JOB_AGE=1800 IDLE_TIMEOUT=60 MIG_NODE=0 POOL=0 CGROUPS=0 HIDEPID=0
        NODE_GRES="" SCHED_PARAMS="" CONF_DIR=$FIX/etc-none
        for kv in "$@"; do
            # shellcheck disable=SC2163 # the names are the settings'
            export "${kv?}"
        done
        side old "$d/old" 2>"$d.old.err" && echo 0 >"$d.old.rc" || echo $? >"$d.old.rc"
        side new "$d/new" 2>"$d.new.err" && echo 0 >"$d.new.rc" || echo $? >"$d.new.rc"
    ) || true
}
# case NAME [VAR=VALUE...]: the settings (the rest at cluster.sh's defaults).
case_() {
    local name=$1
    shift
    local d="$work/$name"
    both_sides "$d" "$@"
    local ok=1 f
    if [ "$(cat "$d.old.rc")" != 0 ] || [ "$(cat "$d.new.rc")" != 0 ]; then
        echo "FAIL $name: old exited $(cat "$d.old.rc"), new $(cat "$d.new.rc")"
        cat "$d.old.err" "$d.new.err" | sed 's/^/    /'
        ok=0
    else
        for f in slurm.conf gres.conf cgroup.conf devcalls; do
            cmp -s "$d/old/$f" "$d/new/$f" || { ok=0; echo "FAIL $name: $f differs"; diff -u "$d/old/$f" "$d/new/$f" | head -n 20 | sed 's/^/    /'; }
        done
    fi
    if [ "$ok" = 1 ]; then
        pass=$((pass + 1))
        echo "ok   $name ($(cat "$d/new/slurm.conf" "$d/new/gres.conf" "$d/new/cgroup.conf" | wc -c) bytes, $(grep -c mknod "$d/new/devcalls") device files)"
        if [ "$golden" = 1 ] && [ "$name" != nodes-99 ]; then # that one is 60 kB
            local g="$FIX/cases/$name"
            mkdir -p "$g"
            cp "$d/new/slurm.conf" "$d/new/gres.conf" "$d/new/cgroup.conf" "$d/new/devices" "$g/"
            # The arguments, the output directory left to the test.
            awk 'skip { skip = 0; next } $0 == "--out" { skip = 1; next } { print }' "$d/new/args" >"$g/args"
        fi
    else
        fail=$((fail + 1))
    fi
}
# fails NAME [VAR=VALUE...]: bad settings, refused by both (messages shown).
fails() {
    local name=$1
    shift
    local d="$work/$name"
    both_sides "$d" "$@"
    if [ "$(cat "$d.old.rc")" != 0 ] && [ "$(cat "$d.new.rc")" != 0 ]; then
        pass=$((pass + 1))
        echo "ok   $name: refused by both (old exit $(cat "$d.old.rc"), new exit $(cat "$d.new.rc"))"
        sed 's/^/    old: /' "$d.old.err" | tail -n 1
        sed 's/^/    new: /' "$d.new.err" | tail -n 1
    else
        fail=$((fail + 1))
        echo "FAIL $name: old exited $(cat "$d.old.rc"), new $(cat "$d.new.rc")"
    fi
}

case_ default
case_ nodes-3 NODES=3
case_ pool POOL=1 NODES=2 INSTANCE=2
case_ cgroups CGROUPS=1
case_ accounting ACCOUNTING=1 MIN_JOB_AGE=10 INSTANCE=3
case_ sched-params SCHED_PARAMS=bf_max_job_test=2000,sched_min_interval=0 NODES=2
case_ node-gres NODES=4 NODE_GRES=$FIX/node-gres.txt
case_ gres-conf-node1 NODES=2 GRES_CONF_NODE1=$FIX/gres-node1.conf
case_ gres-conf-over-node-gres NODES=3 NODE_GRES=$FIX/node-gres.txt GRES_CONF_NODE1=$FIX/gres-node1.conf
case_ mig-node MIG_NODE=1 CONF_DIR=$FIX/etc-mig
case_ existing-mig-0 MIG_NODE=0 NODES=2 CONF_DIR=$FIX/etc-existing
case_ existing-mig-1 MIG_NODE=1 NODES=2 CONF_DIR=$FIX/etc-mig
case_ everything INSTANCE=1 NODES=3 POOL=1 CGROUPS=1 ACCOUNTING=1 MIN_JOB_AGE=0010 MIG_NODE=1 \
    CONF_DIR=$FIX/etc-mig NODE_GRES=$FIX/node-gres.txt SCHED_PARAMS=bf_interval=2 \
    GRES_CONF_SMALL1=$FIX/gres-node1.conf GRES_CONF_POOL2=$FIX/gres-pool2.conf
case_ nodes-99 NODES=99 POOL=1 INSTANCE=9
fails bad-node-gres NODES=2 NODE_GRES=$FIX/bad-node-gres.txt
fails missing-node-gres NODE_GRES=$FIX/no-such-file
fails mig-without-include MIG_NODE=1 CONF_DIR=$FIX/etc-existing
fails mig-on-instance-2 MIG_NODE=1 INSTANCE=2 CONF_DIR=$FIX/etc-mig
fails bad-sched-params "SCHED_PARAMS=a b"
fails bad-nodes NODES=0
fails bad-cgroups CGROUPS=2
echo "conf-identity: $pass passed, $fail failed (old: $OLD_REF:slurm/cluster.sh)"
[ "$fail" = 0 ]
