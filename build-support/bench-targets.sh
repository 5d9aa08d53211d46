#!/bin/bash
# Runs every A/B set behind the performance targets in docs/performance.md and keeps the runs:
#
#   build-support/bench-targets.sh TAG BUILD_DIR [ROUNDS]
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
run() {
  local name=$1
  shift
  echo "== $name $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)"
  "$here/bench-compare" --rounds "$rounds" --json "runs/$tag-$name.json" "$@" |
    grep -E "^(field|reqs_per_sec|p50_us|p99_us|cpu_us_per_req|cs_per_req) "
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
echo "== done $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)"
