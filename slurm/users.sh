#!/usr/bin/env bash
# The Unix users and groups of the local cluster's tests and demo, made once,
# one at a time, and repaired. Needs root.
#
#   slurm/users.sh ensure [--private] USER...   each USER exists, once, with a home it owns
#                                                (--private: mode 0700, as on a real cluster)
#   slurm/users.sh group GROUP USER...           GROUP exists with exactly these members
#   slurm/users.sh remove USER...                each USER and its home gone (slurm/reset.sh)
#   slurm/users.sh remove-group GROUP...         each GROUP gone
#
# Serialised across processes by flock on $LOCK: two tests creating the same
# user at once used to run `id U || useradd U` side by side; both found no
# user, and the second useradd rewrote the first's passwd entry with a new uid
# while the home stayed the first uid's. Under the lock the second caller
# finds the user. A home that an interrupted earlier run left owned by another
# uid (or missing) is given back to its user.
set -euo pipefail

readonly LOCK=${YOLO_USERS_LOCK:-/run/lock/yolo-sched-users.lock}

log() { printf 'users: %s\n' "$*" >&2; }
die() { printf 'users: error: %s\n' "$*" >&2; exit 1; }
usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0" >&2; exit 2; }

[ "$(id -u)" -eq 0 ] || die "must run as root (it creates users and groups)"

# Names as useradd accepts them, and nothing a shell or a path could misread.
check_name() {
    [[ "$1" =~ ^[a-z_][a-z0-9_-]{0,31}$ ]] || { printf 'users: error: not a user or group name: %q\n' "$1" >&2; exit 2; }
}

# ensure_user PRIVATE USER: create USER when missing; repair its home.
ensure_user() {
    local private=$1 user=$2 uid gid home
    if ! id -u "$user" >/dev/null 2>&1; then
        useradd -m -s /bin/bash "$user" || die "useradd $user failed"
        log "created $user"
    fi
    uid=$(id -u "$user")
    gid=$(id -g "$user")
    home=$(getent passwd "$user" | cut -d: -f6)
    [ -n "$home" ] && [ "$home" != / ] || die "$user has no home directory in passwd"
    if [ -L "$home" ] || { [ -e "$home" ] && [ ! -d "$home" ]; }; then
        die "$home (home of $user) is not a directory; remove it and rerun"
    fi
    if [ ! -d "$home" ]; then
        install -d -m 0755 -o "$uid" -g "$gid" "$home"
        cp -a /etc/skel/. "$home/" 2>/dev/null || true
        chown -R "$uid:$gid" "$home"
        log "made the missing home $home of $user"
    elif [ "$(stat -c %u "$home")" != "$uid" ] ||
        [ -n "$(find "$home" -xdev \( ! -uid "$uid" \) -print -quit 2>/dev/null)" ]; then
        # Left by a run whose user had another uid: everything under it is this user's.
        chown -R -h "$uid:$gid" "$home"
        log "gave $home back to $user (uid $uid)"
    fi
    if [ "$private" = 1 ]; then chmod 0700 "$home"; fi
}

ensure_group() {
    local group=$1
    shift
    getent group "$group" >/dev/null || groupadd "$group" || die "groupadd $group failed"
    local members
    members=$(
        IFS=,
        echo "$*"
    )
    gpasswd -M "$members" "$group" >/dev/null || die "gpasswd -M $members $group failed"
}

remove_user() {
    local user=$1 home
    id -u "$user" >/dev/null 2>&1 || return 0
    home=$(getent passwd "$user" | cut -d: -f6)
    pkill -KILL -u "$user" 2>/dev/null || true
    userdel "$user" 2>/dev/null || userdel -f "$user" || die "userdel $user failed"
    case "$home" in /home/?*) rm -rf --one-file-system "$home" ;; esac
    rm -f "/var/mail/$user" "/var/spool/mail/$user"
    log "removed $user"
}

cmd=${1:-}
[ -n "$cmd" ] || usage
shift
private=0
if [ "$cmd" = ensure ] && [ "${1:-}" = --private ]; then
    private=1
    shift
fi
[ "$#" -gt 0 ] || usage
for name in "$@"; do check_name "$name"; done

mkdir -p "$(dirname "$LOCK")"
exec 9>"$LOCK"
flock 9
case "$cmd" in
ensure) for u in "$@"; do ensure_user "$private" "$u"; done ;;
group)
    group=$1
    shift
    [ "$#" -gt 0 ] || usage
    for u in "$@"; do id -u "$u" >/dev/null 2>&1 || die "group $group: no user $u (ensure it first)"; done
    ensure_group "$group" "$@"
    ;;
remove) for u in "$@"; do remove_user "$u"; done ;;
remove-group)
    for g in "$@"; do
        if getent group "$g" >/dev/null; then groupdel "$g" || die "groupdel $g failed"; fi
    done
    ;;
*) usage ;;
esac
