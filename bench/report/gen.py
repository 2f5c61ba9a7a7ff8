#!/usr/bin/env python3
"""Synthetic Slurm 22.05 output for the report benchmark: one queue of N jobs
written twice, as `squeue --json` (every one of the 111 fields a job has,
pretty-printed like Slurm) and as the compact listing yolo-sched asks for;
plus `sinfo --json` for a cluster of that size and a day of `sacct
--parsable2`. Job records are the recorded ones from tests/data/report with
their values varied.

usage: gen.py JOBS OUTDIR
"""
import copy
import json
import os
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "..", "tests", "data", "report")
SEP = "\x1f"


def main():
    jobs, out = int(sys.argv[1]), sys.argv[2]
    os.makedirs(out, exist_ok=True)
    rng = random.Random(20261130)
    recorded = json.load(open(os.path.join(DATA, "squeue-22.05.json")))
    template = next(j for j in recorded["jobs"] if j["job_id"] == 6)  # a running job
    sinfo = json.load(open(os.path.join(DATA, "sinfo-22.05-two-nodes.json")))
    node_template = sinfo["nodes"][0]

    now = int(time.time())
    running = pending = 0
    with open(os.path.join(out, "squeue.json"), "w") as js, open(
        os.path.join(out, "squeue.compact"), "w"
    ) as cp:
        head = {k: v for k, v in recorded.items() if k != "jobs"}
        js.write(json.dumps(head, indent=2)[:-2] + ',\n  "jobs": [\n')
        for i in range(jobs):
            j = copy.deepcopy(template)
            job_id = 100000 + i
            roll = rng.random()
            state = "RUNNING" if roll < 0.45 else "PENDING" if roll < 0.95 else "COMPLETED"
            kind = rng.choice(["1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb", "a100"])
            user = "u%03d" % rng.randrange(300)
            account = "acct%02d" % rng.randrange(40)
            submit = now - rng.randrange(3 * 86400)
            reason = "None"
            if state == "PENDING":
                reason = rng.choice(
                    ["Resources", "Priority", "Priority", "Dependency", "DependencyNeverSatisfied"]
                )
                pending += 1
            elif state == "RUNNING":
                running += 1
            j.update(
                job_id=job_id,
                name="train-%d" % i,
                job_state=state,
                state_reason=reason,
                user_name=user,
                account=account,
                submit_time=submit,
                eligible_time=submit,
                accrue_time=submit,
                start_time=submit + 60 if state != "PENDING" else 0,
                partition="gpu",
                tres_per_node="gres:gpu:%s:1" % kind,
                dependency="afterok:%d(failed)" % (job_id - 1)
                if reason == "DependencyNeverSatisfied"
                else "",
                gres_detail=["gpu:%s:1(IDX:%d)" % (kind, rng.randrange(7))]
                if state == "RUNNING"
                else [],
                nodes="node%d" % (1 + rng.randrange(250)) if state == "RUNNING" else "",
            )
            body = json.dumps(j, indent=2).replace("/", "\\/")
            body = "\n".join("    " + line for line in body.split("\n"))
            js.write(body + (",\n" if i + 1 < jobs else "\n"))
            cols = [
                str(job_id),
                state,
                "gpu",
                user,
                account,
                time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(submit)),
                "1",
                "1",
                j["tres_per_node"],
                "N/A",
                "N/A",
                "cpu=1,node=1,billing=1",
                j["dependency"] or "(null)",
                reason,
            ]
            cp.write(SEP.join(cols) + SEP + "\n")
        js.write("  ]\n}\n")

    nodes = []
    for n in range(250):
        node = copy.deepcopy(node_template)
        node["name"] = node["hostname"] = "node%d" % (n + 1)
        nodes.append(node)
    sinfo["nodes"] = nodes
    with open(os.path.join(out, "sinfo.json"), "w") as f:
        json.dump(sinfo, f, indent=2)

    with open(os.path.join(out, "sacct.txt"), "w") as f:
        for i in range(jobs):
            start = now - rng.randrange(86400)
            end = start + rng.randrange(7200)
            kind = rng.choice(["1g.5gb", "2g.10gb", "a100"])
            user, account = rng.randrange(300), rng.randrange(40)
            f.write(
                # slurm::sacct::WINDOW_FIELDS: JobIDRaw, Partition, Account,
                # User, State, Submit, Start, End, ElapsedRaw, TimelimitRaw,
                # ReqTRES, AllocTRES, TRESUsageInMax, Comment.
                "%d|gpu|acct%02d|u%03d|COMPLETED|%s|%s|%s|%d|120||billing=1,cpu=1,gres/gpu:%s=1,gres/gpu=1,mem=4G,node=1||\n"
                % (
                    200000 + i,
                    account,
                    user,
                    time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(start)),
                    time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(start)),
                    time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(min(end, now))),
                    min(end, now) - start,
                    kind,
                )
            )

    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump({"running_jobs": running, "pending_jobs": pending}, f)


if __name__ == "__main__":
    main()
