#!/usr/bin/env bash
# Whole-process `yolo-sched submit` of a spec (default: the 3-stage demo)
# against the bare Slurm calls it makes (the one `scontrol` query for the
# cluster's shape, the same sbatch --hold chain and one scontrol release),
# N rounds each, interleaved, each round in a fresh run directory, on the
# local cluster.
# Every submitted chain is cancelled at once so the cluster stays idle.
# Prints the medians, their ratio, and the Slurm commands per submission.
#
#   bash bench/submit.sh [SPEC] [N]
set -euo pipefail
cd "$(dirname "$0")/.."
spec=${1:-examples/pcb/spec.toml}
n=${2:-10}
bin=${YOLO_SCHED_BIN:-target/release/yolo-sched}
[ -x "$bin" ] || cargo build --release --quiet
out=$(mktemp -d /tmp/bench-submit.XXXXXX)
export XDG_STATE_HOME="$out/state"
ms() { echo $(( $(date +%s%N) / 1000000 )); }
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

: >"$out/tool.ms"; : >"$out/bare.ms"
for i in $(seq 1 "$n"); do
    wd="$out/run$i"
    t0=$(ms)
    YOLO_SCHED_SLURM_TRACE="$out/trace$i" "$bin" submit "$spec" --workdir "$wd" --json >"$out/submit$i.json"
    t1=$(ms)
    echo $((t1 - t0)) >>"$out/tool.ms"
    ids=$(python3 -c 'import json,sys; print(",".join(str(j["job_id"]) for j in json.load(open(sys.argv[1]))["jobs"]))' "$out/submit$i.json")
    scancel ${ids//,/ }

    # The same chain with bare commands, on the scripts yolo-sched wrote.
    scripts=("$wd"/scripts/prepare.sh "$wd"/scripts/train.sh "$wd"/scripts/export.sh)
    t0=$(ms)
    printf 'show partition\nshow node\nshow config\n' | scontrol -o >/dev/null
    a=$(sbatch --parsable --hold "${scripts[0]}")
    b=$(sbatch --parsable --hold --dependency=afterok:$a "${scripts[1]}")
    c=$(sbatch --parsable --hold --dependency=afterok:$b "${scripts[2]}")
    scontrol release "$a,$b,$c"
    t1=$(ms)
    echo $((t1 - t0)) >>"$out/bare.ms"
    scancel "$a" "$b" "$c"
done
tool=$(median <"$out/tool.ms")
bare=$(median <"$out/bare.ms")
calls=$(wc -l <"$out/trace1")
echo "yolo-sched submit: median ${tool} ms over $n runs"
echo "bare sbatch chain: median ${bare} ms over $n runs"
python3 -c "print(f'ratio: {$tool/$bare:.2f}')"
paste "$out/tool.ms" "$out/bare.ms" | awk '{print $1 - $2}' | median | sed 's/^/median paired difference (ms): /'
echo "Slurm commands per submission: $calls"
sed 's/^/  /' "$out/trace1"
rm -rf "$out"
