#!/usr/bin/env bash
# The registry at scale, on a `file://` registry on this disk: `models list`
# over N versions as the publisher (no sacctmgr call), as an outsider of the
# account (every version refused: one sacctmgr call, then the pure check per
# record), and `models gc` (dry run, then real) with a tenth of the versions
# removed. Paired in one run: the outsider's list against the owner's is the
# price of the account check; gc against `list` is the price of collecting.
#
# Usage: bash bench/registry.sh [VERSIONS]   (default 10000; run as root, on
# the accounting cluster with the tiers users: `ACCOUNTING=1 slurm/cluster.sh
# up`, then `cargo test --test integration -- --include-ignored tiers_live::`
# once, which makes ys-bob and ys-dave)
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-10000}
cargo build --release -q
bin=$(mktemp -d)/yolo-sched
cp target/release/yolo-sched "$bin"
chmod 0755 "$(dirname "$bin")" "$bin"
work=$(mktemp -d /tmp/yolo-sched-bench-registry-XXXXXX)
chmod 1777 "$work"
reg=$work/registry
install -d -m 1777 "$reg"
printf '[registry]\nurl = "file://%s"\n' "$reg" >"$work/site.toml"
chmod 0644 "$work/site.toml"
export YOLO_SCHED_SITE=$work/site.toml XDG_STATE_HOME=$work/state

python3 -c "import zipfile,sys; z=zipfile.ZipFile(sys.argv[1],'w'); z.writestr('archive/data.pkl', b'w'*4096); z.close()" "$work/w.pt"
chmod 0644 "$work/w.pt"
# One real publication by ys-bob (private, account `lab`, which has no Unix
# group: the records stay readable on the file system, so the outsider's list
# reads every record and yolo-sched's account check refuses each), then its
# record copied as versions 2..N, as ys-bob, so every record is his and valid.
runuser -u ys-bob -- env YOLO_SCHED_SITE="$YOLO_SCHED_SITE" HOME=/home/ys-bob "$bin" models import "$work/w.pt" --name bench --account lab >/dev/null 2>&1
versions=$reg/models/bench/versions
runuser -u ys-bob -- python3 - "$versions" "$n" <<'EOF'
import json, os, sys
d, n = sys.argv[1], int(sys.argv[2])
first = json.load(open(os.path.join(d, "00000001.json")))
os.umask(0o022)
for v in range(2, n + 1):
    first["version"] = v
    first["publish_id"] = "%032x" % v
    with open(os.path.join(d, "%08d.json" % v), "w") as f:
        json.dump(first, f)
EOF
# A tenth removed, a month ago (the removal records' own times).
python3 - "$reg/models/bench/removed" "$n" <<'EOF'
import json, os, sys
d, n = sys.argv[1], int(sys.argv[2])
os.makedirs(d, exist_ok=True)
for v in range(1, n + 1, 10):
    with open(os.path.join(d, "%08d.json" % v), "w") as f:
        json.dump({"format": 1, "name": "bench", "version": v, "user": "root",
                   "time": "2026-10-01T00:00:00Z"}, f)
EOF
touch -d 2026-10-01 "$reg"/models/bench/removed/*.json

t() { # label, command...
    local label=$1; shift
    local start end
    start=$(date +%s.%N)
    "$@" >/dev/null
    end=$(date +%s.%N)
    printf '%-52s %6.2f s\n' "$label" "$(echo "$end - $start" | bc)"
}
as() { local u=$1; shift; runuser -u "$u" -- env YOLO_SCHED_SITE="$YOLO_SCHED_SITE" HOME="/home/$u" "$bin" "$@"; }

echo "registry: $n versions of one model, file:// ($reg)"
t "sacctmgr show user (the one call an outsider costs)" sacctmgr -nP show user ys-dave withassoc withcoord format=User,DefaultAccount,AdminLevel,Account,Coordinators
for i in 1 2 3; do
    t "models list --json as the publisher (ys-bob), run $i" as ys-bob models list --json
    t "models list --json as an outsider (ys-dave), run $i" as ys-dave models list --json
done
hidden=$(as ys-dave models list --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["hidden"])')
echo "outsider: $hidden hidden"
t "models show bench (newest, as the publisher)" as ys-bob models show bench
t "models show bench as an outsider (all $n read, refused: exit 2)" bash -c "as() { runuser -u \$1 -- env YOLO_SCHED_SITE=$YOLO_SCHED_SITE HOME=/home/\$1 $bin models show bench; }; as ys-dave 2>/dev/null; [ \$? = 2 ]"
t "models gc --dry-run --keep-removed 7d (root)" "$bin" models gc --dry-run --keep-removed 7d
t "models gc --keep-removed 7d (root, deletes $((n / 10)) versions)" "$bin" models gc --keep-removed 7d
left=$(ls "$versions" | wc -l)
echo "after gc: $left version records"
rm -rf "$work" "$(dirname "$bin")"
