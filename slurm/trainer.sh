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
# several GPUs (ultralytics/utils/dist.py, DDP). And Optuna, pinned, for
# `[tune]` (docs/spec.md): the ask and tell jobs of a hyperparameter search run
# its samplers offline with this venv's Python; the GP sampler needs torch (a
# pin) and scipy, which Ultralytics 8.4 no longer brings. Added to a venv that
# has the pins without a rebuild.
readonly OPTUNA=5.0.0
readonly SCIPY=1.17.1
readonly EXTRAS="cloudpickle>=3.1.1 optuna==$OPTUNA scipy==$SCIPY"
readonly EXTRAS_CHECK="import cloudpickle, optuna, scipy; assert optuna.__version__ == '$OPTUNA', optuna.__version__; assert scipy.__version__ == '$SCIPY', scipy.__version__"
VENV=${YOLO_TRAINER_VENV:-/opt/yolo-sched/trainer-ultralytics-$ULTRALYTICS}
readonly MARK=.yolo-sched-pins
readonly BYTECODE_MARK=.yolo-sched-bytecode
# The installer: uv (Astral's, pinned, from PyPI into a small venv of its own
# beside the trainer's) downloads the ~2.5 GB of wheels in parallel and links
# them from its cache: 41 s for these pins on a fresh machine here, where pip
# took minutes (docs/benchmarks.md). pip stays the fallback when uv cannot be
# installed; YOLO_TRAINER_INSTALLER=pip forces it.
readonly UV_VERSION=0.13.9
UV_VENV=$(dirname "$VENV")/uv-$UV_VERSION
INSTALLER=${YOLO_TRAINER_INSTALLER:-uv}

log() { printf 'trainer: %s\n' "$*" >&2; }
die() { printf 'trainer: error: %s\n' "$*" >&2; exit 1; }

matches() { # the venv at $1 is complete, made for these pins, and in its place
    [ -r "$1/$MARK" ] && [ "$(cat "$1/$MARK")" = "$PINS" ] &&
        head -n 1 "$1/bin/yolo" 2>/dev/null | grep -qE "^#!$1/bin/python[0-9.]*\$" &&
        "$1/bin/python" -c 'import ultralytics, onnx, onnxruntime, onnxslim' 2>/dev/null
}

extras() { # install EXTRAS into the venv at $1 when they are missing
    "$1/bin/python" -c "$EXTRAS_CHECK" 2>/dev/null && return 0
    log "installing $EXTRAS into $1"
    # shellcheck disable=SC2086 # one word per requirement
    "$1/bin/pip" install --disable-pip-version-check --no-input --progress-bar off $EXTRAS 2>&1 |
        sed -u 's/^/trainer: pip: /' >&2 || true
    "$1/bin/python" -c "$EXTRAS_CHECK" || die "$EXTRAS did not install into $1; see the pip lines above"
}

# bytecode VENV: compile every module of the venv once, as root, at install.
# Jobs run as users who cannot write __pycache__ under /opt, and uv installs
# without bytecode: every Python a job started compiled its ~1,300 modules
# again (15 s of an ONNX `val` on a busy 2-core node; docs/benchmarks.md).
# Done for a reused venv too, once (the mark).
bytecode() {
    [ -e "$1/$BYTECODE_MARK" ] && return 0
    log "compiling the venv's modules to bytecode (once; every job's start is seconds faster)"
    local start=$SECONDS
    # Some packages ship files that are not valid Python 3.11 (templates,
    # tests for other versions): compileall says so and goes on; its status
    # is not the venv's health, which matches() checks.
    env -u PYTHONPYCACHEPREFIX "$1/bin/python" -m compileall -q -j 0 "$1/lib" >/dev/null 2>&1 || true
    : >"$1/$BYTECODE_MARK"
    log "bytecode compiled in $((SECONDS - start)) s"
}

# uv_path: the pinned uv, installed into its own small venv when missing.
uv_path() {
    if [ -x "$UV_VENV/bin/uv" ] && "$UV_VENV/bin/uv" --version 2>/dev/null | grep -q "^uv $UV_VERSION\b"; then
        echo "$UV_VENV/bin/uv"
        return 0
    fi
    rm -rf "$UV_VENV"
    /usr/bin/python3 -m venv "$UV_VENV" &&
        "$UV_VENV/bin/pip" install --disable-pip-version-check --no-input -q "uv==$UV_VERSION" >&2 &&
        [ -x "$UV_VENV/bin/uv" ] || { rm -rf "$UV_VENV"; return 1; }
    echo "$UV_VENV/bin/uv"
}

# missing_libraries VENV: when the venv's imports fail for a shared library
# the system lacks (opencv-python loads X and GL libraries that a minimal
# Debian does not have), say which and the Debian package; fail otherwise.
missing_libraries() {
    local err lib pkg
    err=$("$1/bin/python" -c 'import cv2, ultralytics' 2>&1 >/dev/null) && return 1
    lib=$(printf '%s\n' "$err" | sed -n 's/.*ImportError: \([^:]*\.so[^:]*\): cannot open shared object file.*/\1/p' | head -n 1)
    [ -n "$lib" ] || return 1
    case "$lib" in
    libxcb.so*) pkg=libxcb1 ;;
    libGL.so*) pkg=libgl1 ;;
    libglib-2.0.so* | libgthread-2.0.so* | libgobject-2.0.so*) pkg=libglib2.0-0 ;;
    libSM.so*) pkg=libsm6 ;;
    libXext.so*) pkg=libxext6 ;;
    libICE.so*) pkg=libice6 ;;
    *) pkg="" ;;
    esac
    printf 'the trainer in %s cannot import OpenCV: the system library %s is missing%s (slurm/deps.sh installs what the wheels need: bash slurm/deps.sh demo)' \
        "$1" "$lib" "${pkg:+; install it with: apt-get install $pkg}"
}

install() {
    # Two installs at once (the demo beside the test command) would remove
    # each other's half-made venv: one at a time.
    mkdir -p "$(dirname "$VENV")"
    exec 8>"$(dirname "$VENV")/.trainer-install.lock"
    flock 8
    local why
    if [ -r "$VENV/$MARK" ] && [ "$(cat "$VENV/$MARK")" = "$PINS" ] && why=$(missing_libraries "$VENV"); then
        die "$why"
    fi
    if matches "$VENV"; then
        extras "$VENV"
        bytecode "$VENV"
        log "reusing $VENV (ultralytics $ULTRALYTICS)"
        echo "$VENV"
        return 0
    fi
    if ! /usr/bin/python3 -c 'import venv, ensurepip' 2>/dev/null; then
        log "installing python3-venv"
        export DEBIAN_FRONTEND=noninteractive
        apt-get -o DPkg::Lock::Timeout=600 update -qq && apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends python3-venv >/dev/null ||
            die "apt-get install python3-venv failed"
    fi
    local new="$VENV" start=$SECONDS
    rm -rf "$new"
    mkdir -p "$(dirname "$VENV")"
    log "creating $new and installing $PINS (about a minute with uv, and 6 GB, on a fresh machine)"
    /usr/bin/python3 -m venv "$new"
    local uv=""
    [ "$INSTALLER" != uv ] || uv=$(uv_path) || log "uv did not install; using pip (slower)"
    if [ -n "$uv" ]; then
        # The system's certificates (a site's proxy CA among them), as pip
        # uses them, and pip's index where one is set.
        local index=()
        [ -z "${PIP_INDEX_URL:-}" ] || index=(--index-url "$PIP_INDEX_URL")
        # shellcheck disable=SC2086 # one word per pin
        UV_NATIVE_TLS=1 "$uv" pip install --python "$new/bin/python" "${index[@]}" $PINS $EXTRAS 2>&1 |
            sed -u 's/^ */trainer: uv: /' >&2
        if [ "${PIPESTATUS[0]}" != 0 ]; then
            log "uv failed (above); installing with pip instead"
            uv=""
        fi
    fi
    if [ -z "$uv" ]; then
        # One line per package as it is collected and installed: never minutes of silence.
        "$new/bin/pip" install --disable-pip-version-check --no-input --progress-bar off $PINS 2>&1 |
            grep --line-buffered -E '^(Collecting|Downloading|Installing|Successfully|ERROR|error)' |
            sed -u 's/^/trainer: pip: /' >&2 ||
            true
    fi
    if ! "$new/bin/python" -c 'import ultralytics, onnx, onnxruntime, onnxslim'; then
        # A missing system library is not the venv's fault: keep the download
        # (6 GB) and say what to install; anything else, start again next time.
        if why=$(missing_libraries "$new"); then
            echo "$PINS" >"$new/$MARK"
            die "$why"
        fi
        rm -rf "$new"
        die "the install in $new does not import; see the pip lines above"
    fi
    extras "$new"
    bytecode "$new"
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
