#!/usr/bin/python3
"""Test of build-support/bench-compare: fake benchmark commands print RESULT lines with known
numbers, and the reported medians, differences, intervals and p-values must match values computed
by hand (formulas beside each constant). Also checks the A B A B order and that a failed run or a
missing RESULT line aborts with a clear error. Needs only /usr/bin/python3 (with python3-scipy)."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH_COMPARE = os.path.join(HERE, "bench-compare")

# A fake benchmark run. Each call takes the next value from comma-separated lists (one counter
# file per side), logs its side's name, prints a decoy RESULT line, a human line, then the real
# RESULT line, which is the last one starting with RESULT.
FAKE = r"""#!/bin/sh
state=$1 side=$2 log=$3 reqs=$4 p99=$5
n=$(cat "$state" 2>/dev/null || echo 0)
n=$((n + 1))
echo "$n" > "$state"
printf '%s ' "$side" >> "$log"
pick() { echo "$1" | cut -d, -f"$n"; }
echo "RESULT impl=decoy mode=throughput transport=tcp payload=1 conc=1 reqs_per_sec=999999 p50_us=999 p99_us=999 p999_us=1 user_cpu_s=9 sys_cpu_s=9 rss_kb=9"
echo "fake $side: human summary"
echo "RESULT impl=fake mode=throughput transport=tcp payload=64 conc=64 reqs_per_sec=$(pick "$reqs") p50_us=$(pick 10,12,14) p99_us=$(pick "$p99") p999_us=50 user_cpu_s=1.5 sys_cpu_s=2.5 rss_kb=1000"
"""


class BenchCompareTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        self.fake = os.path.join(self.dir, "fake.sh")
        with open(self.fake, "w") as f:
            f.write(FAKE)
        os.chmod(self.fake, 0o755)
        self.log = os.path.join(self.dir, "order.log")

    def tearDown(self):
        self.tmp.cleanup()

    def fake_cmd(self, side, reqs, p99):
        state = os.path.join(self.dir, f"state-{side}")
        return f"{self.fake} {state} {side} {self.log} {reqs} {p99}"

    def run_compare(self, a, b, rounds=3, extra=()):
        out_json = os.path.join(self.dir, "out.json")
        proc = subprocess.run(
            ["/usr/bin/python3", BENCH_COMPARE, "--rounds", str(rounds), "--a", a, "--b", b,
             "--label-a", "base", "--label-b", "cand", "--json", out_json, *extra],
            capture_output=True, text=True, timeout=60)
        doc = None
        if proc.returncode == 0:
            with open(out_json) as f:
                doc = json.load(f)
        return proc, doc

    def test_statistics_match_hand_computed_values(self):
        proc, doc = self.run_compare(self.fake_cmd("A", "100,110,120", "20,30,40"),
                                     self.fake_cmd("B", "130,150,170", "40,50,60"))
        self.assertEqual(proc.returncode, 0, proc.stderr)
        fields = doc["fields"]

        # reqs_per_sec: A = 100,110,120 (mean 110, var 100); B = 130,150,170 (mean 150, var 400).
        r = fields["reqs_per_sec"]
        self.assertEqual(r["median_a"], 110)
        self.assertEqual(r["median_b"], 150)
        self.assertAlmostEqual(r["diff"], 40)
        self.assertAlmostEqual(r["diff_pct"], 40 / 110 * 100)  # 36.36%
        # se^2 = 100/3 + 400/3; t = 40 / sqrt(500/3) = 3.098387;
        # df = (500/3)^2 / ((100/3)^2/2 + (400/3)^2/2) = 250000/85000 = 2.941176.
        self.assertAlmostEqual(r["t"], 3.098387, places=5)
        self.assertAlmostEqual(r["df"], 2.941176, places=5)
        # Two-sided p = I_{df/(df+t^2)}(df/2, 1/2) (regularized incomplete beta) = 0.054787.
        self.assertAlmostEqual(r["p_value"], 0.054787, places=5)
        # CI = 40 -/+ t_{0.975, 2.941176} * 12.909944 = 40 -/+ 3.218759 * 12.909944.
        self.assertAlmostEqual(r["ci_low"], -1.553995, places=4)
        self.assertAlmostEqual(r["ci_high"], 81.553995, places=4)

        # p99_us: equal variances (100) and sizes, so df = 2 * (3 - 1) = 4 exactly.
        # t = 20 / sqrt(200/3) = 2.449490; t-table: t_{0.975, 4} = 2.776445, so the interval is
        # 20 -/+ 2.776445 * 8.164966 = 20 -/+ 22.669545; p = 0.070484.
        q = fields["p99_us"]
        self.assertEqual(q["median_a"], 30)
        self.assertEqual(q["median_b"], 50)
        self.assertAlmostEqual(q["df"], 4)
        self.assertAlmostEqual(q["t"], 2.449490, places=5)
        self.assertAlmostEqual(q["ci_low"], 20 - 22.669545, places=4)
        self.assertAlmostEqual(q["ci_high"], 20 + 22.669545, places=4)
        self.assertAlmostEqual(q["p_value"], 0.070484, places=5)

        # p50_us: identical samples; no difference, p = 1.
        s = fields["p50_us"]
        self.assertEqual(s["median_a"], 12)
        self.assertAlmostEqual(s["diff"], 0)
        self.assertAlmostEqual(s["p_value"], 1.0)

        # Constant fields: exact difference, no test possible (null p-value), no crash.
        c = fields["user_cpu_s"]
        self.assertEqual(c["diff"], 0)
        self.assertIsNone(c["p_value"])

        # Setup fields are not compared; the decoy RESULT line was ignored.
        self.assertNotIn("payload", fields)
        self.assertNotIn("conc", fields)
        self.assertEqual(doc["a"]["runs"][0]["impl"], "fake")
        self.assertEqual(len(doc["b"]["runs"]), 3)

        # The text report shows both medians and the p-value.
        line = next(l for l in proc.stdout.splitlines() if l.startswith("reqs_per_sec"))
        self.assertEqual(line.split()[1:3], ["110.0", "150.0"])
        self.assertIn("0.0548", line)

    def test_runs_alternate_a_and_b(self):
        proc, _ = self.run_compare(self.fake_cmd("A", "1,2,3,4", "1,2,3,4"),
                                   self.fake_cmd("B", "1,2,3,4", "1,2,3,4"), rounds=4)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        with open(self.log) as f:
            self.assertEqual(f.read().split(), ["A", "B"] * 4)

    def test_failing_run_aborts_with_clear_error(self):
        proc, _ = self.run_compare(self.fake_cmd("A", "1,2,3", "1,2,3"),
                                   "echo partial output; echo oops >&2; exit 3")
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("exited with status 3", proc.stderr)
        self.assertIn("cand (round 1)", proc.stderr)
        self.assertIn("oops", proc.stderr)

    def test_missing_result_line_aborts(self):
        proc, _ = self.run_compare("echo no result here", self.fake_cmd("B", "1,2,3", "1,2,3"))
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("printed no RESULT line", proc.stderr)
        self.assertIn("base (round 1)", proc.stderr)

    def test_single_round_is_refused(self):
        proc, _ = self.run_compare("true", "true", rounds=1)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("--rounds must be at least 2", proc.stderr)


if __name__ == "__main__":
    result = unittest.main(exit=False, verbosity=2).result
    failed = len(result.failures) + len(result.errors)
    print(f"{result.testsRun - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
