#!/usr/bin/env bash
# `yolo-sched advise` on a generated week of a busy site: N GPU jobs (default
# 100,000) in sacct's --parsable2 form, read with --sacct-file against the
# local cluster's nodes (slurm/cluster.sh up). Prints wall time and peak RSS.
# Usage: bash bench/advise.sh [N] [BINARY]
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
/usr/bin/time -f "advise: %e s wall, %M kB peak RSS" "$bin" advise --since 8d --partition gpu --sacct-file "$file" --json >/dev/null
