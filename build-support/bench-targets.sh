#!/bin/bash
# Runs every A/B set behind the performance targets in docs/performance.md and keeps the runs:
#
#   build-support/bench-targets.sh TAG BUILD_DIR [ROUNDS]
#   BENCH_SETS='^stream-' build-support/bench-targets.sh TAG BUILD_DIR 3   (only the sets matching)
#
# BUILD_DIR is a Release build with rpc-bench and the peers (raw-tcp-limit, grpc-peer). Each set
# alternates A and B for ROUNDS rounds (default 10) with build-support/bench-compare; its table
# goes to stdout and its runs to runs/TAG-<set>.json, for build-support/bench-ratio.
set -u
tag=$1
build=$2
rounds=${3:-10}
here=$(cd "$(dirname "$0")" && pwd)
B=$build/bench/rpc-bench
RAW=$build/bench/peers/raw-tcp-limit
GRPC=$build/bench/peers/grpc-peer
mkdir -p runs
S="--payload_bytes=64 --run_seconds=2 --warmup_seconds=0.5"
TP="--mode=throughput --client_threads=1 --async_call_concurrency=64 $S"
LT="--mode=latency $S"
CP="--mode=cps $S"
SERVER="--server_reactors=2 --worker_threads=2"
only=${BENCH_SETS:-.}
run() {
  local name=$1
  shift
  [[ $name =~ $only ]] || return 0
  echo "== $name $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)"
  "$here/bench-compare" --rounds "$rounds" --json "runs/$tag-$name.json" "$@" |
    grep -E "^(field|reqs_per_sec|p50_us|p99_us|cpu_us_per_req|cs_per_req|bytes_per_sec|msgs_per_sec|probe_p99_us) "
}
run tp-worker --label-a raw --label-b rrpc --a "$RAW $TP --server_threads=2" --b "$B $TP $SERVER"
run tp-inline --label-a raw --label-b rrpc --a "$RAW $TP --server_threads=2" \
  --b "$B $TP $SERVER --inline_handlers"
run lat-inline --label-a raw --label-b rrpc --a "$RAW $LT --server_threads=2" \
  --b "$B $LT $SERVER --inline_handlers"
run lat-worker --label-a raw --label-b rrpc --a "$RAW $LT --server_threads=2" --b "$B $LT $SERVER"
run lat-sync --label-a raw --label-b rrpc --a "$RAW $LT --server_threads=2" \
  --b "$B $LT $SERVER --latency_calls=sync"
if [[ -x $GRPC ]]; then
  run tp-grpc --label-a grpc --label-b rrpc --a "$GRPC $TP --server_threads=2" --b "$B $TP $SERVER"
fi
run cps-raw --label-a raw --label-b rrpc --a "$RAW $CP --server_threads=2 --client_threads=1" \
  --b "$B $CP $SERVER --client_threads=1"
run cps-reactors --label-a reactors1 --label-b reactors2 \
  --a "$B $CP --server_reactors=1 --worker_threads=2 --client_threads=2" \
  --b "$B $CP --server_reactors=2 --worker_threads=2 --client_threads=2"
# Streams (docs/streams-figures.md): one stream of 64 KiB messages against raw TCP's one-way
# stream and gRPC server streaming; 64-byte stream messages against pipelined 64-byte unary calls;
# a unary probe's p99 beside a full-speed stream (compare probe_p99_us with the latency run's
# p99_us); the 1 MiB sidecar echo through workers.
ST="--mode=stream --run_seconds=2 --warmup_seconds=0.5"
run stream-64k-raw --label-a raw --label-b rrpc --a "$RAW $ST --payload_bytes=65536" \
  --b "$B $ST --payload_bytes=65536 $SERVER"
run stream-64k-sidecar-raw --label-a raw --label-b rrpc --a "$RAW $ST --payload_bytes=65536" \
  --b "$B $ST --payload_bytes=0 --sidecar_bytes=65536 $SERVER"
if [[ -x $GRPC ]]; then
  run stream-64k-grpc --label-a grpc --label-b rrpc --a "$GRPC $ST --payload_bytes=65536" \
    --b "$B $ST --payload_bytes=65536 $SERVER"
fi
run stream-64b-unary --label-a unary --label-b stream --a "$B $TP $SERVER" \
  --b "$B $ST --payload_bytes=64 $SERVER"
run stream-probe --label-a alone --label-b beside-stream \
  --a "$B $LT $SERVER --client_reactors=2" \
  --b "$B $ST --payload_bytes=64 --sidecar_bytes=65536 --with_unary_probe $SERVER"
# bench-compare lists only the fields both sides print: the probe's own, from the kept runs.
if [[ -f runs/$tag-stream-probe.json && stream-probe =~ $only ]]; then
  python3 -c '
import json, statistics, sys
doc = json.load(open(sys.argv[1]))
med = lambda side, key: statistics.median(float(r[key]) for r in doc[side]["runs"])
print("alone p50_us/p99_us median: %.1f / %.1f; beside-stream probe_p50_us/probe_p99_us median: "
      "%.1f / %.1f (probe_calls_per_sec %.0f)" % (med("a", "p50_us"), med("a", "p99_us"),
      med("b", "probe_p50_us"), med("b", "probe_p99_us"), med("b", "probe_calls_per_sec")))
' "runs/$tag-stream-probe.json"
fi
W1M="--client_threads=1 --async_call_concurrency=2 --payload_bytes=64 --sidecar_bytes=1048576"
run stream-1m-echo --label-a raw --label-b rrpc --a "$RAW $W1M $S --server_threads=1" \
  --b "$B $W1M $S --client_reactors=1 --server_reactors=1 --worker_threads=2"
echo "== done $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)"
