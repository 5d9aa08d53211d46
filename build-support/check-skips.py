#!/usr/bin/env python3
"""Fails when a test skipped that CI must run (the allow-list: build-support/ci-allowed-skips.txt).

Usage: ctest ... | tee LOG; check-skips.py SUITE BUILD_DIR [ALLOW_LIST] < LOG
Skipped ctest entries come from ctest's summary on stdin ("12 - name (Skipped)"); the gtest tests
inside each come from BUILD_DIR/Testing/Temporary/LastTest.log, where a gtest binary prints
"rrpc-skipped: Suite.Test: reason" per skipped test (src/util/test_main.cc).
Exit status: 0 when every skip is allowed for SUITE, 1 otherwise (each one named on stderr).
"""
import fnmatch
import os
import re
import sys


def load_allow_list(path):
    rules = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            suites, pattern = line.split()[:2]
            rules.append((suites.split(","), pattern))
    return rules


def allowed(rules, suite, name):
    return any(("*" in suites or suite in suites) and fnmatch.fnmatchcase(name, pattern)
               for suites, pattern in rules)


def main():
    suite, build_dir = sys.argv[1], sys.argv[2]
    here = os.path.dirname(os.path.abspath(__file__))
    rules = load_allow_list(sys.argv[3] if len(sys.argv) > 3 else
                            os.path.join(here, "ci-allowed-skips.txt"))
    # gtest-level skips, by the ctest entry whose output holds them.
    gtest_skips = {}
    current = None
    with open(os.path.join(build_dir, "Testing", "Temporary", "LastTest.log"),
              errors="replace") as f:
        for line in f:
            m = re.match(r"\d+/\d+ Testing: (\S+)", line)
            if m:
                current = m.group(1)
                continue
            m = re.match(r"rrpc-skipped: ([^:\s]+): ?(.*)", line)
            if m and current:
                gtest_skips.setdefault(current, []).append((m.group(1), m.group(2).strip()))
    # ctest-level skips, from ctest's summary on stdin ("  12 - name (Skipped)").
    ctest_skips = re.findall(r"^\s*\d+ - (\S+) \(Skipped\)", sys.stdin.read(), re.M)
    skips = []
    for entry in ctest_skips:
        if entry in gtest_skips:
            skips += [(f"{entry}:{t}", why) for t, why in gtest_skips.pop(entry)]
        else:
            skips.append((entry, "exited 77"))
    # A binary whose tests skipped but which still failed is reported failed by ctest already.
    bad = [(n, why) for n, why in skips if not allowed(rules, suite, n)]
    for n, why in skips:
        print(f"skipped ({'NOT ALLOWED' if (n, why) in bad else 'allowed'}): {n}: {why}")
    if bad:
        print(f"check-skips: {len(bad)} test(s) skipped that suite '{suite}' must run; make them "
              "run or add them, with the reason, to build-support/ci-allowed-skips.txt",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
