#!/usr/bin/env bash
# Debian packages the test suite needs besides Slurm itself (cluster.sh installs that):
#   prometheus                 promtool, to check the Prometheus exposition output
#   prometheus-node-exporter   a real textfile-collector scrape of that output
#   time                       /usr/bin/time -v for peak-memory figures in bench/
#   python3                    generates the demo dataset and stands in for `yolo` in tests
#   chromium                   a real headless browser loads `report --format html` in tests
#   rsyslog                    a real syslog daemon (on a private socket) receives the audit trail
#   python3-venv               the real trainer's venv (slurm/trainer.sh) and the S3 server's
#   Slurm, munge, MariaDB      what slurm/cluster.sh would install itself: here in the same
#                              apt-get run, before the trainer installs in the background
#   libxcb1 libgl1 libglib2.0-0  what the trainer's OpenCV wheel (opencv-python, an Ultralytics
#                              requirement) loads at import: a minimal Debian 12 lacks them
#                              ("ImportError: libxcb.so.1"), a desktop image happens to have them
# `deps.sh demo`: only what slurm/demo.sh uses (Slurm, munge, python3 and its
# venv for the trainer), not the test suite's browser, Prometheus, syslog or
# MariaDB.
# Idempotent: installs only what is missing, waiting for dpkg's lock when
# another installer holds it. Needs root. What it installed is recorded in
# $RECORD, so that slurm/reset.sh removes exactly that and nothing the machine
# had before.
set -euo pipefail
readonly RECORD=/var/lib/yolo-sched/deps-installed
readonly TRAINER_LIBS=(libxcb1 libgl1 libglib2.0-0)
case "${1:-tests}" in
tests)
    want=(prometheus prometheus-node-exporter time python3 chromium rsyslog python3-venv
        slurm-wlm slurmctld slurmd slurm-client munge slurmdbd mariadb-server "${TRAINER_LIBS[@]}")
    ;;
demo) want=(python3 python3-venv slurm-wlm slurmctld slurmd slurm-client munge "${TRAINER_LIBS[@]}") ;;
*)
    echo "deps: usage: deps.sh [tests|demo]" >&2
    exit 2
    ;;
esac
missing=()
for p in "${want[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    [ "$(id -u)" -eq 0 ] || { echo "deps: need root to install ${missing[*]}" >&2; exit 1; }
    echo "deps: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    mkdir -p "$(dirname "$RECORD")"
    printf '%s\n' "${missing[@]}" >>"$RECORD"
    apt-get -o DPkg::Lock::Timeout=600 update -qq
    apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# Rust: the machine's toolchain (rustup) must be at least the crate's rust-version.
if ! command -v cargo >/dev/null 2>&1; then
    for d in "$HOME/.cargo/bin" /usr/local/cargo/bin; do
        [ -x "$d/cargo" ] && export PATH="$d:$PATH"
    done
fi
command -v cargo >/dev/null 2>&1 || {
    echo "deps: cargo not found: install Rust 1.85 or newer with rustup (https://rustup.rs), then rerun" >&2
    exit 1
}
