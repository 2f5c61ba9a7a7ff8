#!/bin/bash
# The job agent's resident memory and CPU time over a minute of sampling at a
# given interval, against the fake NVML (a MIG slice with a steady process),
# with the textfile gauges and the series written as in a job.
#
#   bash bench/agent/rss_cpu.sh [BINARY] [INTERVAL_S] [SECONDS]
#
# BINARY defaults to target/release/yolo-sched; INTERVAL_S to 3 (the default);
# SECONDS to 60. Prints VmRSS and VmHWM (kB) at the end, and the CPU time
# (utime + stime) as a share of one CPU.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${1:-target/release/yolo-sched}
INTERVAL=${2:-3}
SECONDS_RUN=${3:-60}
cargo build -q -p fake-nvml
T=$(mktemp -d)
trap 'kill "${SLEEPER:-}" "${AGENT:-}" 2>/dev/null || true; rm -rf "$T"' EXIT
cp target/debug/libnvidia_ml.so "$T/libnvidia-ml.so.1"
python3 - "$T" <<'PY'
import json, sys
t = sys.argv[1]
d = json.load(open("tests/fixtures/nvml/h200-partitioned-busy.json"))
d["gpus"][0]["processes"] = [{"pid": 4242, "gpu_instance_id": 9, "compute_instance_id": 0, "used_memory_mib": 6000}]
json.dump(d, open(t + "/fake-nvml.json", "w"))
json.dump({"schema_version": 1, "run_id": "bench-0001", "name": "bench", "user": "u", "host": "h",
           "submitted_at": "2026-12-01T00:00:00Z", "workdir": t + "/run", "spec_file": "/s.toml",
           "spec_hash": "0", "spec_text": "version = 1\n[run]\nname = \"bench\"\n[train]\nmodel = \"yolov8n.yaml\"\ndata = \"d.yaml\"\n",
           "variants": 1, "gpu_explanation": [], "estimate_gib": None, "stages": []},
          open(t + "/manifest.json", "w"))
PY
mkdir -p "$T/run" "$T/textfile"
mv "$T/manifest.json" "$T/run/manifest.json"
printf '[guard]\ninterval_s = %s\ntextfile_dir = "%s"\n' "$INTERVAL" "$T/textfile" >"$T/site.toml"
export YOLO_SCHED_NVML_LIB="$T/libnvidia-ml.so.1" FAKE_NVML_FIXTURE="$T/fake-nvml.json"
UUID=$("$BIN" node-setup --show --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
print(next(g for g in d["gpus"][0]["gpu_instances"] if g["id"] == 9)["compute_instances"][0]["uuid"])')
sleep $((SECONDS_RUN + 30)) &
SLEEPER=$!
"$BIN" --site "$T/site.toml" agent --workdir "$T/run" --pid "$SLEEPER" --devices "$UUID" 2>"$T/agent.log" &
AGENT=$!
sleep "$SECONDS_RUN"
TICKS=$(getconf CLK_TCK)
read -r UT ST < <(awk '{ sub(/.*\) /, ""); print $12, $13 }' /proc/$AGENT/stat)
RSS=$(awk '/^VmRSS/ {print $2}' /proc/$AGENT/status)
HWM=$(awk '/^VmHWM/ {print $2}' /proc/$AGENT/status)
SAMPLES=$(($(wc -l <"$T/run/state/train.memory.csv") - 1))
python3 -c "
ut, st, ticks, secs = $UT, $ST, $TICKS, $SECONDS_RUN
cpu = (ut + st) / ticks
print(f'binary $BIN, interval ${INTERVAL} s, {secs} s: VmRSS $RSS kB, VmHWM $HWM kB, '
      f'CPU {cpu:.3f} s = {100 * cpu / secs:.3f}% of one CPU, series samples flushed {$SAMPLES}')"
