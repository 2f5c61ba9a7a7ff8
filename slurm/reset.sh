#!/usr/bin/env bash
# Back to a fresh machine: remove what the README's two commands
# (slurm/demo.sh, slurm/test-all.sh) installed and created, so that the next
# run of either shows what a new user sees. Only for a throw-away machine or
# container: it removes users, packages and a database, so it refuses to run
# unless THROWAWAY_MACHINE=1 says that is where it is (as FORCE_CONF=1 does
# for a foreign slurm.conf).
#
#   THROWAWAY_MACHINE=1 bash slurm/reset.sh                 remove everything below
#   THROWAWAY_MACHINE=1 bash slurm/reset.sh --dry-run       say what would go; change nothing
#   THROWAWAY_MACHINE=1 bash slurm/reset.sh --cargo-cache   also cargo's registry and git
#                                                           checkouts (other builds on this
#                                                           machine download them again)
#
# What goes:
#   - the clusters' daemons (every instance) and the S3 server, stopped by their own scripts
#   - the test users (researcher, ys-alice, ys-bob, ys-carol, ys-dave), their homes, and the
#     account groups vision and robots (slurm/users.sh)
#   - the Slurm configuration the scripts wrote (files that carry cluster.sh's marker, and
#     /etc/slurm-yoloK), their state, logs, pid files and locks, the fake GPU devices
#   - the accounting database yolo_slurm_acct and its user (all of MariaDB's data when
#     deps.sh installed MariaDB), the munge key (and munge's files when deps.sh installed munge)
#   - /opt/yolo-sched (the trainer's and the S3 server's venvs), the S3 data, yolo-sched's
#     state of root (~/.local/state/yolo-sched), the demo's runs in /tmp
#   - the download caches those installs filled (pip's and uv's; with --cargo-cache also
#     cargo's registry and git checkouts): a fresh machine starts without them
#   - the Debian packages slurm/deps.sh installed (its record, /var/lib/yolo-sched/deps-installed),
#     then what only they needed (apt-get autoremove); nothing the machine had before
# The checkout (and its target/) is not touched: a fresh machine starts from a fresh clone.
set -euo pipefail
cd "$(dirname "$0")/.."

readonly MARKER="# managed by yolo-sched slurm/cluster.sh"
readonly RECORD=/var/lib/yolo-sched/deps-installed
readonly TEST_USERS=(researcher ys-alice ys-bob ys-carol ys-dave)
readonly TEST_GROUPS=(vision robots)

dry=0 cargo_cache=0
for arg in "$@"; do
    case "$arg" in
    --dry-run) dry=1 ;;
    --cargo-cache) cargo_cache=1 ;;
    *)
        awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0" >&2
        exit 2
        ;;
    esac
done

log() { printf 'reset: %s\n' "$*" >&2; }
die() { printf 'reset: error: %s\n' "$*" >&2; exit 1; }

if [ "${THROWAWAY_MACHINE:-0}" != 1 ]; then
    printf '%s\n' "reset: refusing: this removes users, Debian packages, a database and Slurm's configuration." \
        "reset: run it only on a throw-away machine or container, and say so: THROWAWAY_MACHINE=1 bash slurm/reset.sh" \
        "reset: (--dry-run lists what would go)" >&2
    exit 2
fi
[ "$(id -u)" -eq 0 ] || die "must run as root"

# do CMD...: run it, or under --dry-run say it.
do_() {
    if [ "$dry" = 1 ]; then
        printf 'would run: %s\n' "$*"
    else
        "$@"
    fi
}

# remove PATH...: each existing path, recursively, never across a mount.
remove() {
    local p
    for p in "$@"; do
        [ -e "$p" ] || [ -L "$p" ] || continue
        if [ "$dry" = 1 ]; then
            printf 'would remove: %s\n' "$p"
        else
            rm -rf --one-file-system -- "$p"
        fi
    done
}

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
recorded() { [ -r "$RECORD" ] && grep -qx -- "$1" "$RECORD"; }

log "stopping the clusters and the S3 server"
if [ "$dry" = 0 ]; then
    bash slurm/s3.sh down || log "warning: s3.sh down failed"
    for d in /etc/slurm-yolo[2-9]; do
        [ -d "$d" ] || continue
        k=${d#/etc/slurm-yolo}
        INSTANCE=$k bash slurm/cluster.sh down || log "warning: cluster.sh down (instance $k) failed"
    done
    if [ -f /etc/slurm/slurm.conf ] && head -n 1 /etc/slurm/slurm.conf | grep -qxF "$MARKER"; then
        bash slurm/cluster.sh down || log "warning: cluster.sh down failed"
    fi
else
    echo "would run: slurm/s3.sh down; slurm/cluster.sh down (every instance)"
fi

log "the test users and groups"
for u in "${TEST_USERS[@]}"; do
    id -u "$u" >/dev/null 2>&1 && do_ bash slurm/users.sh remove "$u"
done
for g in "${TEST_GROUPS[@]}"; do
    getent group "$g" >/dev/null && do_ bash slurm/users.sh remove-group "$g"
done

log "the accounting database"
if installed mariadb-server && ! recorded mariadb-server; then
    # A MariaDB the machine had before: only what cluster.sh made in it.
    if mariadb -e 'select 1' >/dev/null 2>&1; then
        do_ mariadb -e "DROP DATABASE IF EXISTS yolo_slurm_acct; DROP USER IF EXISTS 'slurm'@'localhost';"
    else
        log "warning: MariaDB (not installed by deps.sh) does not answer: drop yolo_slurm_acct and 'slurm'@'localhost' yourself"
    fi
fi

log "the Debian packages slurm/deps.sh installed"
if [ -r "$RECORD" ]; then
    mapfile -t pkgs < <(sort -u "$RECORD")
    remove_pkgs=()
    for p in "${pkgs[@]}"; do installed "$p" && remove_pkgs+=("$p"); done
    if [ "${#remove_pkgs[@]}" -gt 0 ]; then
        export DEBIAN_FRONTEND=noninteractive
        do_ apt-get -o DPkg::Lock::Timeout=600 purge -y -qq "${remove_pkgs[@]}"
        do_ apt-get -o DPkg::Lock::Timeout=600 autoremove --purge -y -qq
    fi
    # Purging keeps what the daemons made at run time.
    if recorded mariadb-server; then remove /var/lib/mysql /etc/mysql /run/mysqld /var/log/mysql; fi
    if recorded munge; then remove /etc/munge /var/lib/munge /var/log/munge /run/munge; fi
else
    log "no record of installed packages ($RECORD): none removed"
fi

log "Slurm's configuration, state and logs, the fake devices, the munge key"
for f in /etc/slurm/slurm.conf /etc/slurm/gres.conf /etc/slurm/slurmdbd.conf; do
    [ -f "$f" ] && head -n 1 "$f" | grep -qxF "$MARKER" && remove "$f"
done
# node-setup's include for the MIG node of the end-to-end test.
remove /etc/slurm/yolo-mig-node.conf /etc/slurm-yolo[2-9]
remove /var/spool/yolo-slurm /var/spool/yolo-slurm-[2-9] /var/log/yolo-slurm /var/log/yolo-slurm-[2-9]
remove /run/yolo-slurm /run/yolo-slurm-[2-9] /dev/yolo-fakegpu
remove /run/lock/yolo-sched-users.lock /run/lock/yolo-sched-cluster-setup.lock
# cluster.sh makes a key only where the package did not; without the
# package's own files (kept above when munge was there before) it is ours.
if ! installed munge; then remove /etc/munge/munge.key; fi

log "venvs, S3 data, state, scratch and download caches"
remove /opt/yolo-sched /var/lib/yolo-s3 "$HOME/.local/state/yolo-sched"
# The demo's runs (the tests remove their own scratch; a test running now keeps it).
remove /tmp/yolo-sched-demo
remove "$HOME/.cache/pip" "$HOME/.cache/uv"
if [ "$cargo_cache" = 1 ]; then remove "$HOME/.cargo/registry" "$HOME/.cargo/git"; fi
remove /var/lib/yolo-sched
if [ "$dry" = 1 ]; then log "dry run: nothing changed"; else log "done: this machine is as the README's commands found it"; fi
