#!/usr/bin/env bash
# `yolo-sched status` of a 1,000-task sweep on the local cluster: whole-process
# time (median of N) and the Slurm commands it runs. The sweep is submitted
# with max_parallel=1 and cancelled at the end.
#
#   bash bench/status.sh [N]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-10}
bin=${YOLO_SCHED_BIN:-target/release/yolo-sched}
[ -x "$bin" ] || cargo build --release --quiet
out=$(mktemp -d /tmp/bench-status.XXXXXX)
export XDG_STATE_HOME="$out/state"
mkdir -p "$out/data"
printf 'path: %s\ntrain: images\nval: images\nnames: [a]\n' "$out/data" >"$out/data.yaml"
lr=$(python3 -c 'print(", ".join(f"{i/100000:.5f}" for i in range(1, 1001)))')
cat >"$out/spec.toml" <<SPEC
version = 1
[run]
name = "status-bench"
partition = "gpu"
[train]
model = "yolov8n.yaml"
data = "data.yaml"
epochs = 1
[stages.prepare]
enabled = false
[stages.export]
partition = "cpu"
[sweep]
lr0 = [$lr]
max_parallel = 1
SPEC
run_id=$("$bin" submit "$out/spec.toml" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["run_id"])')
ms() { echo $(( $(date +%s%N) / 1000000 )); }
: >"$out/ms"
for i in $(seq 1 "$n"); do
    t0=$(ms)
    YOLO_SCHED_SLURM_TRACE="$out/trace$i" "$bin" status --tasks --json "$run_id" >"$out/status.json"
    t1=$(ms)
    echo $((t1 - t0)) >>"$out/ms"
done
"$bin" cancel "$run_id" >/dev/null
tasks=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(sum(len(s["tasks"]) for s in d["stages"]))' "$out/status.json")
med=$(sort -n "$out/ms" | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}')
echo "status of a 1,000-variant sweep ($tasks task rows): median ${med} ms over $n runs"
echo "Slurm commands per status: $(wc -l <"$out/trace1")"
sed 's/^/  /' "$out/trace1"
rm -rf "$out"
