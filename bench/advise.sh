#!/usr/bin/env bash
# `yolo-sched advise` on a generated week of a busy site: N GPU jobs (default
# 100,000) in sacct's --parsable2 form, read with --sacct-file against the
# local cluster's nodes (slurm/cluster.sh up), or, with NODES=K, against K stand-in
# nodes of the recorded shape (three A100-40GB each: 1g.5gb*4, 2g.10gb*2, a100) from a
# stand-in `scontrol` (no cluster needed). Prints wall time and peak RSS.
# Usage: [NODES=64] bash bench/advise.sh [N] [BINARY]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-100000}
bin=${2:-target/release/yolo-sched}
[ -x "$bin" ] || cargo build --release -q
file=$(mktemp /tmp/advise-sacct.XXXXXX)
trap 'rm -f "$file"' EXIT
python3 - "$n" >"$file" <<'PY'
import random, sys
from datetime import datetime, timedelta
n = int(sys.argv[1]); r = random.Random(7)
start = datetime.now() - timedelta(days=7)
types = [("1g.5gb", 60), ("2g.10gb", 15), ("3g.20gb", 10), ("a100", 10), (None, 5)]
pick = [t for t, w in types for _ in range(w)]
for i in range(n):
    t = r.choice(pick)
    sub = start + timedelta(seconds=r.randrange(7 * 86400))
    wait = r.randrange(3600)
    run = 60 + r.randrange(4 * 3600)
    st = sub + timedelta(seconds=wait); en = st + timedelta(seconds=run)
    f = lambda d: d.strftime("%Y-%m-%dT%H:%M:%S")
    req = f"billing=1,cpu=1,gres/gpu:{t}=1,gres/gpu=1,mem=4G,node=1" if t else "billing=1,cpu=1,gres/gpu=1,mem=4G,node=1"
    print(f"{1000+i}|gpu|team{i%9}|user{i%40}|COMPLETED|{f(sub)}|{f(st)}|{f(en)}|{run}|{(run//60)+30}|{req}|{req}")
PY
echo "advise: $(wc -l <"$file") lines, $(du -h "$file" | cut -f1)"
if [ -n "${NODES:-}" ]; then
    bin=$(realpath "$bin")
    stand=$(mktemp -d /tmp/advise-nodes.XXXXXX)
    trap 'rm -f "$file"; rm -rf "$stand"' EXIT
    python3 - "$NODES" tests/data/scontrol-shape-22.05.txt >"$stand/shape.txt" <<'PY'
import re, sys
k = int(sys.argv[1]); text = open(sys.argv[2]).read()
out = []
for line in text.splitlines():
    if line.startswith("PartitionName="):
        line = re.sub(r"Nodes=node\[1-2\]", f"Nodes=node[1-{k}]", line)
    if line.startswith("NodeName=node1 "):
        out += [line.replace("NodeName=node1 ", f"NodeName=node{i} ", 1) for i in range(1, k + 1)]
        continue
    if line.startswith("NodeName=node2 "):
        continue
    out.append(line)
print("\n".join(out))
PY
    mkdir -p "$stand/bin"
    printf '#!/bin/sh\nexec cat %s/shape.txt\n' "$stand" >"$stand/bin/scontrol"
    chmod +x "$stand/bin/scontrol"
    export PATH="$stand/bin:$PATH"
    echo "advise: $NODES stand-in nodes ($(grep -c '^NodeName=' "$stand/shape.txt") in the shape)"
fi
/usr/bin/time -f "advise: %e s wall, %M kB peak RSS" "$bin" advise --since 8d --partition gpu --sacct-file "$file" --json >/dev/null
