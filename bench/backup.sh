#!/usr/bin/env bash
# Checkpoint backup figures against the local S3 server (slurm/s3.sh up):
#  1. upload throughput of a 50 MB checkpoint (`backup sync --once`: upload to
#     the staging key, read back and hash, server-side copy), 5 runs;
#  2. time from a checkpoint write to its verified backup under the watch loop
#     (`backup sync --watch`), for a look every 1 s and every 5 s.
# Usage: bench/backup.sh [path/to/yolo-sched]   (default target/release/yolo-sched)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-target/release/yolo-sched}
bash slurm/s3.sh status || { echo "bench: the S3 server is not up (slurm/s3.sh up)" >&2; exit 1; }
eval "$(bash slurm/s3.sh env)"
W=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$W"' EXIT

settings() { # $1 workdir, $2 interval
    mkdir -p "$1/state/backup" "$1/train/weights"
    echo '{}' >"$1/manifest.json"
    printf '{"url":{"bucket":"%s","prefix":"bench/%s"},"interval":%s}\n' \
        "$YOLO_S3_BUCKET" "$(basename "$1")-$(date +%s%N)" "$2" >"$1/state/backup/settings.json"
}
checkpoint() { # $1 path, $2 MB: a stored zip with ckpt/data.pkl, like torch.save
    python3 -c 'import zipfile,sys,os; z=zipfile.ZipFile(sys.argv[1]+".tmp","w"); z.writestr("ckpt/data.pkl", os.urandom(int(float(sys.argv[2])*1e6))); z.close(); os.replace(sys.argv[1]+".tmp", sys.argv[1])' "$1" "$2"
}

echo "== upload of a 50 MB checkpoint (sync --once: put, read back + SHA-256, copy)"
settings "$W/once" 30
for i in 1 2 3 4 5; do
    checkpoint "$W/once/train/weights/last.pt" 50
    touch -d '-5 seconds' "$W/once/train/weights/last.pt"
    "$BIN" backup sync "$W/once/train" --once | grep -o 'backed up weights/last.pt ([^)]*)' |
        sed -E 's/.*\(([0-9.]+) MB in ([0-9.]+) s.*/\1 \2/' |
        awk -v i="$i" '{printf "run %d: %s MB in %s s = %.0f MB/s\n", i, $1, $2, $1/$2}'
done

echo "== reference: one plain signed PUT of the same 50 MB with curl (no check, no copy)"
for i in 1 2 3; do
    curl -s -o /dev/null -w '%{size_upload} %{time_total}\n' --aws-sigv4 "aws:amz:$AWS_REGION:s3" \
        --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" -T "$W/once/train/weights/last.pt" \
        "$AWS_ENDPOINT_URL/$YOLO_S3_BUCKET/bench/curl-$i.pt" |
        awk -v i="$i" '{printf "run %d: %.1f MB in %.2f s = %.0f MB/s\n", i, $1/1e6, $2, $1/1e6/$2}'
done

for interval in 1 5; do
    echo "== write to backup, watch loop every $interval s, a 50 MB checkpoint rewritten every 12 s (5 writes)"
    settings "$W/watch$interval" "$interval"
    sleep 1000 &
    keeper=$!
    "$BIN" backup sync "$W/watch$interval/train" --watch --pid "$keeper" >"$W/watch$interval.log" 2>&1 &
    watcher=$!
    for _ in 1 2 3 4 5; do
        checkpoint "$W/watch$interval/train/weights/last.pt" 50
        sleep 12
    done
    kill "$keeper"
    wait "$watcher" || true
    grep -o 'backed up weights/last.pt ([^)]*)' "$W/watch$interval.log" |
        sed -E 's/.*, ([0-9.]+) s after it was written.*/\1/' |
        awk '{s+=$1; if ($1>m) m=$1; printf "%s s ", $1} END {printf "\nmean %.1f s, max %.1f s over %d writes\n", s/NR, m, NR}'
done
