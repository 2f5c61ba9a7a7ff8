"""advise_check.py's pure parts: the window as a saved sacct output, advise's
JSON and demand file read back, the tolerance, the table. No cluster needed.

    python3 -m unittest discover -s bench/replay -p 'test_*.py'
"""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import advise_check as ac  # noqa: E402
import replay  # noqa: E402
import tracefile as trace  # noqa: E402

HEADER = "submit_s,duration_s,gpu_mem_gib,gpu_fraction,user\n"


def advice(steps, offered):
    """advise --json's shape, as much of it as advise_check reads."""
    def setup(name, offered, mean_s, p95_s):
        return {"name": name, "offered": offered,
                "outcome": {"jobs": 3, "never_run": 0, "mean_wait_s": mean_s, "p95_wait_s": p95_s,
                            "peak_concurrent": 2}}
    return {"advice": {"setups": [setup("current", {"a100": 4}, 7200.0, 10800),
                                  setup("auto", offered, 90.0, 360)],
                       "steps": steps, "changes": bool(steps)},
            "needs": {"measured": {"jobs": 3}}}


class SacctWindow(unittest.TestCase):
    def setUp(self):
        self.jobs = trace.parse(HEADER + "0,3600,2.8,,alice\n30,600.4,12.6,,bob\n30,90,,0.5,bob\n")

    def test_every_job_asks_a_whole_a100_and_carries_its_own_measurement(self):
        lines = ac.sacct_lines(self.jobs, {2: 7200.2})
        self.assertEqual(len(lines), 3)
        fields = [line.split("|") for line in lines]
        for f in fields:
            # advise's fourteen fields, sacct --parsable2 (no trailing |).
            self.assertEqual(len(f), 14, f)
            self.assertEqual((f[1], f[2], f[4]), ("gpu", "vision", "COMPLETED"))
            self.assertIn("gres/gpu:a100=1", f[10])
            self.assertEqual(f[10], f[11])
            self.assertEqual(f[12], "")
            # The measurement names the very job it is stored with.
            self.assertIn(f"ysneed=1;job={f[0]};slice=a100;peak_mib=", f[13])
            self.assertNotIn("|", f[13])
        alice = fields[0]
        self.assertEqual(alice[0], str(ac.FIRST_ID + 2))
        self.assertEqual((alice[3], alice[5], alice[8], alice[9]), ("alice", "2026-11-30T08:00:00", "3600", "60"))
        # Started as it ran (two hours' wait), ended its run time later.
        self.assertEqual((alice[6], alice[7]), ("2026-11-30T10:00:00", "2026-11-30T11:00:00"))
        self.assertTrue(alice[13].endswith("peak_mib=2867/40960"))  # 2.8 GiB
        bob = fields[1]
        self.assertEqual((bob[5], bob[6], bob[8], bob[9]), ("2026-11-30T08:00:30", "2026-11-30T08:00:30", "600", "10"))
        # A fraction of the GPU is that share of its usable memory, less the headroom.
        half = fields[2][13].rsplit("=", 1)[1].split("/")[0]
        self.assertEqual(int(half), int(0.5 * 39.5 * 1024 / 1.1))

    def test_the_window_holds_every_job(self):
        since, until = ac.window(self.jobs)
        self.assertEqual(since, "2026-11-30T07:00:00")
        self.assertEqual(until, "2026-12-01T09:00:00")


class AdviseOutput(unittest.TestCase):
    nodes = ["node1", "node2"]

    def test_the_steps_give_each_node_its_gres_and_the_rest_stay_whole(self):
        a = advice([{"node": "node2", "gpus": ["1g.5gb*7", "3g.20gb,1g.5gb*4"], "changes": True}],
                   {"a100": 2, "1g.5gb": 11, "3g.20gb": 1})
        self.assertEqual(ac.node_gres(a, self.nodes, 2),
                         {"node1": "gpu:a100:2", "node2": "gpu:1g.5gb:11,gpu:3g.20gb:1"})
        a = advice([{"node": "node1", "gpus": ["whole", "2g.10gb*3"], "changes": True}],
                   {"a100": 3, "2g.10gb": 3})
        self.assertEqual(ac.node_gres(a, self.nodes, 2)["node1"], "gpu:2g.10gb:3,gpu:a100:1")

    def test_steps_that_disagree_with_the_auto_set_up_or_name_another_node_are_refused(self):
        a = advice([{"node": "node2", "gpus": ["1g.5gb*7", "whole"], "changes": True}], {"a100": 2, "1g.5gb": 7})
        with self.assertRaisesRegex(ValueError, "auto set-up offers"):
            ac.node_gres(a, self.nodes, 2)
        a = advice([{"node": "gpu9", "gpus": ["1g.5gb*7", "whole"], "changes": True}], {"a100": 3, "1g.5gb": 7})
        with self.assertRaisesRegex(ValueError, "gpu9"):
            ac.node_gres(a, self.nodes, 2)

    def test_predicted_waits_in_hours(self):
        p = ac.predicted(advice([], {"a100": 4}), "current")
        self.assertEqual((p["jobs"], p["mean_wait_h"], p["p95_wait_h"]), (3, 2.0, 3.0))
        with self.assertRaisesRegex(ValueError, "no set-up `balanced`"):
            ac.predicted(advice([], {}), "balanced")

    def test_each_job_gets_the_type_of_its_demand_row(self):
        jobs = trace.parse(HEADER + "0,3600,2.8,,a\n0,3600,2.9,,a\n30,600,12.6,,b\n")
        rows = ac.demand_types("# demand\ngres,time_limit_s,jobs,submit_s\n"
                               "gpu:1g.5gb:1,3600,2,0\ngpu:3g.20gb:1,600,1,30\n")
        self.assertEqual(ac.job_types(jobs, rows, 0), {2: "1g.5gb", 3: "1g.5gb", 4: "3g.20gb"})
        # The demand counts from --since, an hour before the window.
        late = ac.demand_types("gres,time_limit_s,jobs,submit_s\n"
                               "gpu:1g.5gb:1,3600,2,3600\ngpu:3g.20gb:1,600,1,3630\n")
        self.assertEqual(ac.job_types(jobs, late), {2: "1g.5gb", 3: "1g.5gb", 4: "3g.20gb"})
        with self.assertRaisesRegex(ValueError, "trace line 2"):
            ac.job_types(jobs, rows)
        # A job advise did not plan, or one more in its demand, is an error.
        short = ac.demand_types("gres,time_limit_s,jobs,submit_s\ngpu:1g.5gb:1,3600,2,0\n")
        with self.assertRaisesRegex(ValueError, "trace line 4"):
            ac.job_types(jobs, short, 0)
        more = ac.demand_types("gres,time_limit_s,jobs,submit_s\ngpu:1g.5gb:1,3600,3,0\ngpu:a100:1,600,1,30\n")
        with self.assertRaisesRegex(ValueError, "1 job"):
            ac.job_types(jobs, more, 0)


class Tolerance(unittest.TestCase):
    def test_ten_percent_or_five_hundredths_of_an_hour(self):
        self.assertTrue(ac.within(2.75, 3.0))
        self.assertFalse(ac.within(2.65, 3.0))
        self.assertTrue(ac.within(0.0, 0.05))
        self.assertFalse(ac.within(0.0, 0.06))
        self.assertTrue(ac.within(0.54, 0.5))
        self.assertFalse(ac.within(0.56, 0.5))

    def test_the_table_says_which_rows_are_within(self):
        m = {"jobs": 3, "mean_wait_h": 3.0, "p95_wait_h": 5.0, "peak_concurrent": 2}
        p = {"jobs": 3, "mean_wait_h": 2.9, "p95_wait_h": 4.0, "peak_concurrent": 2}
        md = ac.table([("whole", m, dict(p, p95_wait_h=4.9)), ("auto", m, p)], 150, 24)
        rows = md.splitlines()
        self.assertTrue(rows[2].startswith("| whole | 3 / 3 | 3.00 / 2.90 (-0.10 h, -3%) |"), rows[2])
        self.assertTrue(rows[2].endswith("| yes |"), rows[2])
        self.assertTrue(rows[3].endswith("| NO |"), rows[3])
        self.assertIn("150× (one trace hour = 24 s)", md)


class TypeCheck(unittest.TestCase):
    def test_a_job_asking_another_type_than_advise_planned_is_named(self):
        asks = {2: {"gres": "gpu:1g.5gb:1"}, 3: {"gres": "gpu:a100:1"}, 4: {"unrunnable": "too big"}}
        self.assertEqual(replay.type_mismatches(asks, {2: "1g.5gb"}), [])
        self.assertEqual(replay.type_mismatches(asks, {2: "1g.5gb", 3: "3g.20gb", 4: "a100"}),
                         [(3, "a100", "3g.20gb"), (4, None, "a100")])


if __name__ == "__main__":
    unittest.main()
