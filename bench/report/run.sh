#!/usr/bin/env bash
# Benchmark of `yolo-sched report` on a queue of JOBS jobs (default 100000):
# Slurm's output is replayed from files by stand-in sinfo/squeue/sacct scripts
# first on PATH. For each format: whole-process wall time and peak memory
# (/usr/bin/time), the median of RUNS runs, next to merely piping the same
# bytes through `cat`, Python's json.load of the equivalent `squeue --json`,
# and a streaming serde reader of that JSON (the alternative not taken).
#
#   bash bench/report/run.sh            # builds release binaries, generates data
#   JOBS=20000 RUNS=3 bash bench/report/run.sh
#
# Needs: python3, /usr/bin/time (Debian package `time`), cargo.
set -euo pipefail
cd "$(dirname "$0")/../.."
JOBS=${JOBS:-100000}
RUNS=${RUNS:-5}
WORK=${WORK:-$(mktemp -d /tmp/yolo-sched-bench.XXXXXX)}
[ -x /usr/bin/time ] || { echo "bench: /usr/bin/time missing (apt-get install time)" >&2; exit 1; }

echo "bench: building release binaries" >&2
cargo build --release --quiet --bin yolo-sched
cargo bench --quiet --bench report_squeue_json --no-run 2>/dev/null
BIN=$PWD/target/release/yolo-sched
STREAM=$(ls -t target/release/deps/report_squeue_json-* | grep -v '\.d$' | head -1)

DATA=$WORK/data
if [ ! -s "$DATA/squeue.json" ]; then
    echo "bench: generating $JOBS jobs in $DATA" >&2
    python3 bench/report/gen.py "$JOBS" "$DATA"
fi

STANDIN=$WORK/standin
mkdir -p "$STANDIN"
printf '#!/bin/sh\nexec cat %q\n' "$DATA/sinfo.json" > "$STANDIN/sinfo"
printf '#!/bin/sh\nexec cat %q\n' "$DATA/squeue.compact" > "$STANDIN/squeue"
printf '#!/bin/sh\nexec cat %q\n' "$DATA/sacct.txt" > "$STANDIN/sacct"
chmod +x "$STANDIN"/*

# measure NAME CMD…: median wall seconds (nanosecond clock), median CPU
# seconds (user + system of every process of the command) and the largest
# peak RSS (the biggest process) of RUNS runs, from /usr/bin/time.
measure() {
    local name=$1; shift
    local walls=() cpus=() rss=0 start end kb user sys
    for _ in $(seq "$RUNS"); do
        start=$(date +%s%N)
        /usr/bin/time -o "$WORK/time.out" -f '%M %U %S' "$@" >/dev/null 2>&1
        end=$(date +%s%N)
        walls+=("$(( (end - start) / 1000 ))")
        read -r kb user sys < <(tail -1 "$WORK/time.out")
        cpus+=("$(awk -v u="$user" -v s="$sys" 'BEGIN {printf "%.2f", u + s}')")
        [ "$kb" -gt "$rss" ] && rss=$kb
    done
    local wall cpu
    wall=$(printf '%s\n' "${walls[@]}" | sort -n | awk '{a[NR]=$1} END {printf "%.3f", a[int((NR+1)/2)] / 1e6}')
    cpu=$(printf '%s\n' "${cpus[@]}" | sort -n | awk '{a[NR]=$1} END {printf "%.2f", a[int((NR+1)/2)]}')
    printf '%s %s %s %s\n' "$name" "$wall" "$rss" "$cpu"
}

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
RESULTS=$WORK/results.txt
: > "$RESULTS"
json_bytes=$(stat -c %s "$DATA/squeue.json")
compact_bytes=$(stat -c %s "$DATA/squeue.compact")

measure cat_compact sh -c "cat '$DATA/squeue.compact' | cat" >> "$RESULTS"
measure cat_json sh -c "cat '$DATA/squeue.json' | cat" >> "$RESULTS"
measure python_json_load sh -c "cat '$DATA/squeue.json' | python3 -c 'import json,sys; json.load(sys.stdin)'" >> "$RESULTS"
measure stream_json sh -c "cat '$DATA/squeue.json' | '$STREAM' json" >> "$RESULTS"
measure parse_compact sh -c "cat '$DATA/squeue.compact' | '$STREAM' compact" >> "$RESULTS"
for format in table json csv prometheus; do
    measure "report_$format" env PATH="$STANDIN:$PATH" NO_COLOR=1 YOLO_SCHED_RUNS_DIR="$WORK/no-runs" \
        "$BIN" report --format "$format" >> "$RESULTS"
done

# The report must have seen every job the generator wrote.
PATH="$STANDIN:$PATH" YOLO_SCHED_RUNS_DIR="$WORK/no-runs" "$BIN" report --format json --section queue > "$WORK/report.json"
python3 - "$WORK/report.json" "$DATA/expected.json" <<'EOF'
import json, sys
got, want = json.load(open(sys.argv[1]))["queue"], json.load(open(sys.argv[2]))
for k in ("running_jobs", "pending_jobs"):
    assert got[k] == want[k], (k, got[k], want[k])
EOF

echo
echo "Machine: $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p'), $(free -g | awk '/Mem:/ {print $2}') GiB RAM"
echo "Queue: $JOBS jobs; squeue --json $((json_bytes / 1000000)) MB, compact listing $((compact_bytes / 1000000)) MB"
echo
echo "Load average before: $LOAD_BEFORE; after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
awk -v json="$json_bytes" '
    { t[$1] = $2; m[$1] = $3; c[$1] = $4; order[NR] = $1 }
    END {
        printf "| %-18s | %8s | %6s | %8s | %10s | %13s |\n", "what", "wall s", "cpu s", "peak MB", "÷ cat json", "÷ cat compact"
        printf "|%s|%s|%s|%s|%s|%s|\n", "--------------------", "----------", "--------", "----------", "------------", "---------------"
        for (i = 1; i <= NR; i++) {
            k = order[i]
            cj = t["cat_json"] > 0 ? t[k] / t["cat_json"] : 0
            cc = t["cat_compact"] > 0 ? t[k] / t["cat_compact"] : 0
            printf "| %-18s | %8.3f | %6.2f | %8.1f | %10.2f | %13.1f |\n", k, t[k], c[k], m[k] / 1024, cj, cc
        }
        printf "\nwall ratios: median wall time over the median wall time of piping the bytes through cat\n"
        printf "peak memory limit asked for: half the JSON = %.0f MB\n", json / 2000000
    }' "$RESULTS"
echo "(raw figures: $RESULTS)"
