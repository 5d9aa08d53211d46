#!/bin/bash
# Runs a command while every core also runs a `nice -n 19` busy loop, then stops the loops.
#
#   build-support/with-busy-cores.sh build-support/bench-targets.sh busy build-perf 10
#
# Why: on a VM an idle vCPU can take tens of microseconds to wake, so on a quiet machine every
# cross-thread wakeup costs that much and latency measures the hypervisor; on a busy one wakeups
# are cheap and the number of hand-offs shows. docs/performance.md reports both states.
set -u
pids=()
for _ in $(seq "$(nproc)"); do
  nice -n 19 sh -c 'while :; do :; done' &
  pids+=($!)
done
trap 'kill "${pids[@]}" 2>/dev/null' EXIT
"$@"
