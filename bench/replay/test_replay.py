"""The replay's pure parts: trace parsing and validation, the generator's
determinism, the metrics from given start/end times. No cluster needed.

    python3 -m unittest discover -s bench/replay -p 'test_*.py'
"""

import collections
import contextlib
import io
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_yolo_trace  # noqa: E402
import tracefile as trace  # noqa: E402

HEADER = "submit_s,duration_s,gpu_mem_gib,gpu_fraction,user\n"


class Parse(unittest.TestCase):
    def test_a_valid_trace_with_comments_and_either_memory_column(self):
        jobs = trace.parse("# a comment\n\n" + HEADER + "30,600,2.8,,alice\n# x\n0,60,,0.25,bob\n")
        self.assertEqual([j["line"] for j in jobs], [6, 4])  # sorted by submission
        self.assertEqual(jobs[0]["gpu_fraction"], 0.25)
        self.assertIsNone(jobs[0]["gpu_mem_gib"])
        self.assertEqual(jobs[1]["gpu_mem_gib"], 2.8)
        self.assertEqual(jobs[1]["user"], "alice")

    def test_columns_in_any_order(self):
        jobs = trace.parse("user,gpu_fraction,gpu_mem_gib,duration_s,submit_s\nu,1,,10,5\n")
        self.assertEqual((jobs[0]["submit_s"], jobs[0]["duration_s"], jobs[0]["gpu_fraction"]), (5, 10, 1.0))

    def err(self, text):
        with self.assertRaises(trace.TraceError) as cm:
            trace.parse(text, "t.csv")
        return cm.exception

    def test_errors_name_the_line_the_column_and_what_was_expected(self):
        e = self.err(HEADER + "0,60,2,,a\n0,-5,2,,a\n")
        self.assertEqual((e.line, e.column), (3, "duration_s"))
        self.assertIn("t.csv:3: column duration_s: expected a number > 0", str(e))
        e = self.err(HEADER + "0,60,,1.5,a\n")
        self.assertEqual(e.column, "gpu_fraction")
        self.assertIn("<= 1", str(e))
        e = self.err(HEADER + "x,60,2,,a\n")
        self.assertEqual(e.column, "submit_s")
        self.assertIn("expected a number, got 'x'", str(e))
        self.assertEqual(self.err(HEADER + "0,60,nan,,a\n").column, "gpu_mem_gib")
        self.assertEqual(self.err(HEADER + "0,60,0,,a\n").column, "gpu_mem_gib")

    def test_exactly_one_of_memory_and_fraction(self):
        self.assertIn("one of the two", str(self.err(HEADER + "0,60,2,0.5,a\n")))
        self.assertIn("both empty", str(self.err(HEADER + "0,60,,,a\n")))

    def test_header_fields_users_quotes(self):
        self.assertIn("the header", str(self.err("submit,duration\n1,2\n")))
        self.assertIn("the header", str(self.err("submit_s,duration_s,gpu_mem_gib,gpu_fraction,user,extra\n")))
        e = self.err(HEADER + "0,60,2,a\n")
        self.assertEqual(e.line, 2)
        self.assertIn("5 comma-separated fields", str(e))
        self.assertEqual(self.err(HEADER + "0,60,2,,bad user\n").column, "user")
        self.assertIn("no quoting", str(self.err(HEADER + '0,60,2,,"a"\n')))
        self.assertIn("a header line", str(self.err("# only comments\n")))
        self.assertIn("at least one job", str(self.err(HEADER)))

    def test_size_is_bounded(self):
        old = trace.MAX_JOBS
        trace.MAX_JOBS = 2
        try:
            e = self.err(HEADER + "0,1,1,,a\n" * 3)
            self.assertEqual(e.line, 4)
            self.assertIn("at most 2 jobs", str(e))
        finally:
            trace.MAX_JOBS = old
        self.assertIn("bytes", str(self.err("#" * (trace.MAX_BYTES + 1))))
        self.assertIn("characters", str(self.err(HEADER + "0,1,1,,a" + " " * 2000 + "b\n")))
        self.assertEqual(self.err(HEADER + f"{trace.MAX_SECONDS + 1},1,1,,a\n").column, "submit_s")


class Generator(unittest.TestCase):
    def text(self, *args):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            gen_yolo_trace.main(list(args))
        return out.getvalue()

    def test_same_seed_same_trace_other_seed_other_trace(self):
        self.assertEqual(self.text("--seed", "3"), self.text("--seed", "3"))
        self.assertNotEqual(self.text("--seed", "3"), self.text("--seed", "4"))

    def test_the_trace_is_valid_and_yolo_like(self):
        jobs = trace.parse(self.text(), "generated")
        self.assertEqual(len(jobs), 95)
        small = [j for j in jobs if j["gpu_mem_gib"] * 1.1 <= 4.75]  # fits 1g.5gb
        self.assertGreater(len(small), len(jobs) / 2)
        self.assertTrue(all(j["gpu_mem_gib"] * 1.1 <= 39.5 for j in jobs))  # fits a whole A100-40GB
        self.assertTrue(any(j["gpu_mem_gib"] >= 10 for j in jobs))
        self.assertTrue(all(20 * 60 <= j["duration_s"] <= 5 * 3600 for j in jobs))
        bursts = collections.Counter((j["submit_s"], j["user"]) for j in jobs)
        self.assertGreaterEqual(max(bursts.values()), 8)  # a sweep submitted at once
        self.assertGreaterEqual(len({j["user"] for j in jobs}), 3)

    def test_the_committed_trace_is_the_default_output(self):
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "yolo-trace.csv")
        with open(path) as f:
            self.assertEqual(f.read(), self.text())

    def test_memory_follows_the_estimator(self):
        # src/plan/estimate.rs: yolov8s at 640 px, batch 16 is 4.0 GiB; batch 8 of m is 0.625 x 7.2.
        self.assertAlmostEqual(gen_yolo_trace.gpu_gib("s", 640, 16), 4.0)
        self.assertAlmostEqual(gen_yolo_trace.gpu_gib("m", 640, 8), 7.2 * 0.625)


class Metrics(unittest.TestCase):
    def test_figures_from_given_times(self):
        # Compression 3600: one real second is one trace hour.
        runs = [
            {"submit": 0, "start": 0, "end": 2, "units": 7, "need_gib": 4},
            {"submit": 0, "start": 2, "end": 3, "units": 7, "need_gib": 4},
            {"submit": 1, "start": 1, "end": 3, "units": 1, "need_gib": 2},
        ]
        m = trace.metrics(runs, total_units=14, compression=3600, total_gib=80)
        self.assertEqual(m["jobs"], 3)
        self.assertAlmostEqual(m["mean_wait_h"], 2 / 3)  # waits 0, 2, 0
        self.assertEqual(m["p95_wait_h"], 2)
        self.assertEqual(m["peak_concurrent"], 2)  # at t=1..2 and 2..3 (the end at 2 comes first)
        self.assertAlmostEqual(m["mean_concurrent"], (1 + 2 + 2) / 3)
        self.assertAlmostEqual(m["makespan_h"], 3)
        self.assertAlmostEqual(m["unit_utilisation"], (7 * 2 + 7 * 1 + 1 * 2) / (14 * 3))
        self.assertAlmostEqual(m["memory_need_utilisation"], (4 * 2 + 4 * 1 + 2 * 2) / (80 * 3))

    def test_scaling_back_to_trace_hours(self):
        runs = [{"submit": 10, "start": 40, "end": 70, "units": 1}]
        m = trace.metrics(runs, 7, compression=120)  # 30 real seconds per trace hour
        self.assertAlmostEqual(m["mean_wait_h"], 1.0)
        self.assertAlmostEqual(m["makespan_h"], 2.0)
        self.assertNotIn("memory_need_utilisation", m)

    def test_percentile_is_nearest_rank(self):
        self.assertEqual(trace.percentile(list(range(1, 21)), 95), 19)
        self.assertEqual(trace.percentile([5], 95), 5)
        self.assertEqual(trace.metrics([], 1, 1), {"jobs": 0})


if __name__ == "__main__":
    unittest.main()
