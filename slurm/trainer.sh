#!/usr/bin/env bash
# The real Ultralytics trainer for yolo-sched's live tests and demo: a venv
# outside the checkout with pinned Ultralytics, torch and the ONNX export
# packages, from the package registry. Reused when it is there and matches
# the pins; rebuilt (beside, then swapped in) when it does not.
#
#   slurm/trainer.sh install   install or reuse; prints the venv's path last
#   slurm/trainer.sh path      the venv's path (whether or not installed)
#   slurm/trainer.sh check     exit 0 when installed and matching the pins
#
# Settings: YOLO_TRAINER_VENV (default /opt/yolo-sched/trainer-ultralytics-<version>).
# torch from PyPI is the CUDA build (PyPI has no CPU-only wheel): about 6 GB.
set -euo pipefail

readonly ULTRALYTICS=8.4.190
readonly PINS="ultralytics==$ULTRALYTICS torch==2.15.0 onnx onnxruntime onnxslim"
# What Ultralytics would pip-install at run time, which the offline switches of
# the job scripts (YOLO_AUTOINSTALL=false) forbid: cloudpickle, for training on
# several GPUs (ultralytics/utils/dist.py, DDP). Added to a venv that has the
# pins without a rebuild.
readonly EXTRAS="cloudpickle>=3.1.1"
VENV=${YOLO_TRAINER_VENV:-/opt/yolo-sched/trainer-ultralytics-$ULTRALYTICS}
readonly MARK=.yolo-sched-pins

log() { printf 'trainer: %s\n' "$*" >&2; }
die() { printf 'trainer: error: %s\n' "$*" >&2; exit 1; }

matches() { # the venv at $1 is complete, made for these pins, and in its place
    [ -r "$1/$MARK" ] && [ "$(cat "$1/$MARK")" = "$PINS" ] &&
        head -n 1 "$1/bin/yolo" 2>/dev/null | grep -qE "^#!$1/bin/python[0-9.]*\$" &&
        "$1/bin/python" -c 'import ultralytics, onnx, onnxruntime, onnxslim' 2>/dev/null
}

extras() { # install EXTRAS into the venv at $1 when they are missing
    "$1/bin/python" -c 'import cloudpickle' 2>/dev/null && return 0
    log "installing $EXTRAS into $1"
    "$1/bin/pip" install --disable-pip-version-check --no-input --progress-bar off "$EXTRAS" 2>&1 |
        sed -u 's/^/trainer: pip: /' >&2 || true
    "$1/bin/python" -c 'import cloudpickle' || die "$EXTRAS did not install into $1; see the pip lines above"
}

install() {
    if matches "$VENV"; then
        extras "$VENV"
        log "reusing $VENV (ultralytics $ULTRALYTICS)"
        echo "$VENV"
        return 0
    fi
    if ! /usr/bin/python3 -c 'import venv, ensurepip' 2>/dev/null; then
        log "installing python3-venv"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq && apt-get install -y -qq --no-install-recommends python3-venv >/dev/null ||
            die "apt-get install python3-venv failed"
    fi
    local new="$VENV" start=$SECONDS
    rm -rf "$new"
    mkdir -p "$(dirname "$VENV")"
    log "creating $new and installing $PINS (about 2 minutes and 6 GB on a fresh machine)"
    /usr/bin/python3 -m venv "$new"
    # One line per package as it is collected and installed: never minutes of silence.
    "$new/bin/pip" install --disable-pip-version-check --no-input --progress-bar off $PINS 2>&1 |
        grep --line-buffered -E '^(Collecting|Downloading|Installing|Successfully|ERROR|error)' |
        sed -u 's/^/trainer: pip: /' >&2 ||
        true
    "$new/bin/python" -c 'import ultralytics, onnx, onnxruntime, onnxslim' ||
        { rm -rf "$new"; die "the install in $new does not import; see the pip lines above"; }
    extras "$new"
    echo "$PINS" >"$new/$MARK"
    log "installed in $VENV in $((SECONDS - start)) s ($(du -sh "$VENV" | cut -f1))"
    echo "$VENV"
}

case "${1:-}" in
install) install ;;
path) echo "$VENV" ;;
check) matches "$VENV" ;;
*)
    sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
