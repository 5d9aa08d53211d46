#!/usr/bin/env bash
# The hot-path guard: counts the instructions of one 64-byte echo call through a worker with
# callgrind (build-support/echo-cost: a fixed number of calls, client and server in one process,
# every thread counted) and fails when the count exceeds the budget below. Instruction counts do
# not move with machine load, so unlike a timing this catches a few percent of regression.
#
# Raise the budget only with a reason in the commit message (a feature that must cost more);
# lower it when a change makes calls cheaper, so the gain is kept. The figure is for the
# RelWithDebInfo build with the compiler of thirdparty/packages.txt.
#
# Exits 77 (ctest: skipped) where the count means nothing: no valgrind, or a Debug or
# sanitizer build.
# Usage: echo-cost-budget-test.sh ECHO_COST_BINARY ECHO_COST_SCRIPT BUILD_TYPE SANITIZER
set -euo pipefail

# The budget is the last measured count plus 5% (RelWithDebInfo, the lowest of 3 runs); the
# measured figure and how it moved are in docs/performance.md and performance-history.md.
budget=7163

bin=$1 script=$2 build_type=$3 sanitizer=$4
if ! command -v valgrind >/dev/null; then
  echo "SKIPPED: valgrind is not installed"
  exit 77
fi
if [ -n "$sanitizer" ] || [ "$build_type" != RelWithDebInfo ]; then
  echo "SKIPPED: the budget holds for the RelWithDebInfo build only (this is '$build_type'${sanitizer:+, sanitizer $sanitizer})"
  exit 77
fi
# The lowest of 3 counts: the same binary and input give the same work, but where the threads'
# turns fall (valgrind runs one at a time) moves a count by 0.5-2% (a futex wake more or less);
# the lowest is the least disturbed.
per_call=
for run in 1 2 3; do
  line=$("$script" "$bin" --calls=1000 --warmup_calls=200)
  echo "run $run: $line"
  n=$(sed -n 's/^instructions_per_call=\([0-9]*\) .*/\1/p' <<<"$line")
  [ -n "$n" ] || { echo "FAILED: no instructions_per_call in: $line"; exit 1; }
  if [ -z "$per_call" ] || [ "$n" -lt "$per_call" ]; then per_call=$n; fi
done
if [ "$per_call" -gt "$budget" ]; then
  echo "FAILED: $per_call instructions per echo call exceed the budget of $budget"
  echo "  (profile it: valgrind --tool=callgrind $bin --calls=1000; callgrind_annotate)"
  exit 1
fi
echo "OK: $per_call <= $budget instructions per echo call"
