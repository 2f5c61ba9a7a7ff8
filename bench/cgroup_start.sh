#!/usr/bin/env bash
# What the cgroup plugins add to a job's start: the same one-line batch job
# submitted N times to two clusters of the same shape on this host, one with
# cgroups (CGROUPS=1: task/cgroup,task/affinity, proctrack/cgroup,
# PrologFlags=Contain, cgroup.conf constraining cores, devices, RAM and swap)
# and one without, alternately (paired: the same load on the host for both).
# The time is from just before `sbatch` to the first line of the job script
# (slurmctld's scheduling, the launch, slurmstepd setting up the job's
# cgroups and its extern step); the job holds one 1g.5gb slice and 1 CPU.
#
#   bash bench/cgroup_start.sh WITH_CONF WITHOUT_CONF [N]
#
# e.g. INSTANCE=5 CGROUPS=1 slurm/cluster.sh up; INSTANCE=6 slurm/cluster.sh up;
#      bash bench/cgroup_start.sh /etc/slurm-yolo5/slurm.conf /etc/slurm-yolo6/slurm.conf 20
set -euo pipefail
with=$1 without=$2 n=${3:-20}
out=$(mktemp -d /tmp/bench-cgroup-start.XXXXXX)
chmod 1777 "$out"
trap 'rm -rf "$out"' EXIT
one() { # one CONF LABEL I: seconds from sbatch to the job's first line
    local conf=$1 f="$out/$2-$3" t0 t1
    t0=$(date +%s.%N)
    SLURM_CONF=$conf sbatch --wait --quiet -p gpu --gres=gpu:1g.5gb:1 -c 1 --mem=200M -t 2 \
        -o "$f.out" --wrap 'date +%s.%N' >/dev/null
    t1=$(head -n1 "$f.out")
    python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.4f}')" "$t0" "$t1"
}
for i in $(seq 1 "$n"); do
    if [ $((i % 2)) = 0 ]; then
        a=$(one "$with" with "$i"); b=$(one "$without" without "$i")
    else
        b=$(one "$without" without "$i"); a=$(one "$with" with "$i")
    fi
    echo "$a $b"
done | python3 -c '
import statistics, sys
rows = [tuple(map(float, l.split())) for l in sys.stdin if l.strip()]
w = [r[0] for r in rows]; o = [r[1] for r in rows]; d = [r[0] - r[1] for r in rows]
q = lambda v: statistics.quantiles(v, n=20)[18] if len(v) > 1 else v[0]
print(f"{len(rows)} pairs; sbatch to the job script first line, seconds")
print(f"with cgroups:    median {statistics.median(w):.3f}  mean {statistics.mean(w):.3f}  p95 {q(w):.3f}")
print(f"without cgroups: median {statistics.median(o):.3f}  mean {statistics.mean(o):.3f}  p95 {q(o):.3f}")
print(f"added by cgroups (paired): median {statistics.median(d):+.3f}  mean {statistics.mean(d):+.3f}")
'
