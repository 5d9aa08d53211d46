#!/usr/bin/env python3
"""Docs name rrpc's metrics as /metrics shows them.

Reads every metric prototype in the sources (MetricPrototype::Counter/Gauge/Histogram with a
literal name and unit) and derives its Prometheus name the way prometheus_writer.cc does
("rrpc_" + name; a time unit's suffix becomes "_seconds"; bytes end in "_bytes"; counters in
"_total"). Then looks in README.md and docs/*.md for a registry name in backquotes where the
Prometheus name differs (`calls_total` instead of `rrpc_calls_total`) and fails naming each one.

Usage: doc-metric-names.py ROOT          check (ctest runs this)
       doc-metric-names.py ROOT --fix    rewrite the docs in place
"""
import glob
import os
import re
import sys

PROTOTYPE = re.compile(
    r'MetricPrototype::(Counter|Gauge|Histogram)\(\s*"([a-z0-9_]+)"\s*,\s*"[^"]*"\s*,'
    r'\s*MetricUnit::(k\w+)', re.S)
# Registry names that are also option names (MessengerOptions::service_queue_length,
# SetMaxConcurrency's max_concurrency): a doc naming the option is right, so these are not checked.
AMBIGUOUS = {"service_queue_length", "max_concurrency"}
TIME_UNITS = {"kNanoseconds", "kMicroseconds", "kMilliseconds", "kSeconds"}
# prometheus_writer.cc's kTimeSuffixes, longest first as there.
TIME_SUFFIXES = ["_nanoseconds", "_microseconds", "_milliseconds", "_seconds", "_nanos",
                 "_micros", "_millis", "_nsec", "_usec", "_msec", "_sec", "_ns", "_us", "_ms",
                 "_s"]


def prometheus_name(name, kind, unit):
    base = name
    counter = kind == "Counter"
    if counter and base.endswith("_total"):
        base = base[:-len("_total")]
    if unit in TIME_UNITS:
        for suffix in TIME_SUFFIXES:
            if base.endswith(suffix) and len(base) > len(suffix):
                base = base[:-len(suffix)]
                break
        base += "_seconds"
    elif unit == "kBytes" and not base.endswith("_bytes"):
        base += "_bytes"
    if counter:
        base += "_total"
    return "rrpc_" + base


def metric_names(root):
    names = {}
    for pattern in ("src/**/*.cc", "src/**/*.h", "examples/**/*.cc", "include/**/*.h"):
        for path in glob.glob(os.path.join(root, pattern), recursive=True):
            base = os.path.basename(path)
            if "-test" in base or "-bench" in base:
                continue
            with open(path, encoding="utf-8") as f:
                for m in PROTOTYPE.finditer(f.read()):
                    if m.group(2) in AMBIGUOUS:
                        continue
                    names[m.group(2)] = prometheus_name(m.group(2), m.group(1), m.group(3))
    return names


def main():
    root = sys.argv[1]
    fix = "--fix" in sys.argv[2:]
    names = metric_names(root)
    if len(names) < 50:
        print(f"found only {len(names)} metric prototypes: has the pattern changed?")
        return 1
    # A registry name in backquotes, alone (not part of a longer name or a path).
    pattern = re.compile(r"`(" + "|".join(sorted(map(re.escape, names), key=len, reverse=True))
                         + r")`")
    docs = [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs/*.md")))
    bad = 0
    for path in docs:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        wrong = [m for m in pattern.finditer(text) if names[m.group(1)] != m.group(1)]
        if not wrong:
            continue
        if fix:
            text = pattern.sub(lambda m: "`" + names[m.group(1)] + "`", text)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            print(f"{os.path.relpath(path, root)}: {len(wrong)} names rewritten")
            continue
        for m in wrong:
            line = text.count("\n", 0, m.start()) + 1
            print(f"{os.path.relpath(path, root)}:{line}: `{m.group(1)}` is "
                  f"`{names[m.group(1)]}` on /metrics")
            bad += 1
    if bad:
        print(f"{bad} metric names as the registry spells them; /metrics shows the names above "
              f"(build-support/doc-metric-names.py ROOT --fix rewrites them)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
