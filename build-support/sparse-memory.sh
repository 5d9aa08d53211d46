#!/bin/bash
# sparse-memory.sh: one row of docs/performance.md's sparse-connection memory table. Runs an
# rpc-bench server (--server_only, on 0.0.0.0) and an rpc-bench sparse client (one client
# messenger holding N connections, 127.x.y.z each) as two processes, so each side's RSS is its
# own (with --rdma_soft_pin_memory, so registered memory counts in RSS as on hardware); reads the
# server's RSS before any connection and while all N are established and idle
# (--sparse_hold_seconds), and prints one line with both sides' figures and the client's latency.
#
#   build-support/sparse-memory.sh RPC_BENCH N TRANSPORT USE_SRQ [extra rpc-bench flags...]
#   build-support/sparse-memory.sh build/rel/bench/rpc-bench 10000 rdma true \
#       --rdma_buffer_bytes=4096 --rdma_srq_initial_credits=3
#
# Environment: SENDERS (4), SLEEP_US (1000), WARMUP (2), RUN (10), HOLD (3) seconds.
# Heavy at 10,000 connections (two processes, one descriptor or two per connection each side):
# run it by hand, never from ctest.
set -euo pipefail
if [[ $# -lt 4 ]]; then
  sed -n '2,12p' "$0" >&2
  exit 2
fi
BENCH=$1 N=$2 TRANSPORT=$3 SRQ=$4
shift 4
OUT=$(mktemp -d)
"$BENCH" --server_only --transport="$TRANSPORT" --rdma_backend=soft --rdma_use_srq="$SRQ"  --bind_host=0.0.0.0 \
  --port=0 --rdma_soft_pin_memory=true "$@" >"$OUT/server" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true; rm -rf "$OUT"' EXIT
for _ in $(seq 100); do
  grep -q listening "$OUT/server" && break
  sleep 0.1
done
PORT=$(grep -o 'listening on [0-9.]*:[0-9]*' "$OUT/server" | sed 's/.*://')
rss() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
SERVER_BASE=$(rss $SERVER)
"$BENCH" --mode=sparse --sparse_client=messenger --transport="$TRANSPORT" --rdma_backend=soft --rdma_use_srq="$SRQ" \
  --server_addr="127.0.0.1:$PORT" --connections="$N" --senders="${SENDERS:-4}" \
  --sleep_us="${SLEEP_US:-1000}" --warmup_seconds="${WARMUP:-2}" --run_seconds="${RUN:-10}" \
  --sparse_hold_seconds="${HOLD:-3}" --rdma_soft_pin_memory=true "$@" >"$OUT/client" 2>&1 &
CLIENT=$!
# Bounded: the client's set-up ends by its call timeout per connection.
while kill -0 $CLIENT 2>/dev/null && ! grep -q established "$OUT/client" 2>/dev/null; do
  sleep 0.2
done
sleep 1
SERVER_IDLE=$(rss $SERVER)
STATUS=0
wait $CLIENT || STATUS=$?
if [[ $STATUS -ne 0 ]]; then
  cat "$OUT/client" >&2
  exit 1
fi
RESULT=$(grep '^RESULT' "$OUT/client")
field() { echo "$RESULT" | tr ' ' '\n' | awk -F= -v k="$1" '$1 == k {print $2}'; }
CLIENT_OPEN=$(field rss_all_open_kb)
BY_TRANSPORT=$(grep -o 'established connections by transport:.*' "$OUT/client" | sed 's/.*: //')
printf 'n=%s transport=%s srq=%s conns[%s] client_rss_open_kb=%s client_kb_per_conn=%s ' \
  "$N" "$TRANSPORT" "$SRQ" "$BY_TRANSPORT" "$CLIENT_OPEN" "$(field rss_per_conn_kb)"
printf 'server_rss_base_kb=%s server_rss_idle_kb=%s server_kb_per_idle_conn=%s ' \
  "$SERVER_BASE" "$SERVER_IDLE" "$(echo "scale=2; ($SERVER_IDLE - $SERVER_BASE) / $N" | bc)"
printf 'mean_us=%s p50_us=%s p99_us=%s calls_per_sec=%s\n' "$(field mean_us)" "$(field p50_us)" \
  "$(field p99_us)" "$(field reqs_per_sec)"
