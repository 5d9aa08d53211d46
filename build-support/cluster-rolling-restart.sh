#!/bin/bash
# Rolling restart of three kv-servers registered in a private etcd, under kv-bench writes through
# the etcd target (docs/cluster.md, "Rolling restart"). Each server in turn gets SIGTERM (it
# withdraws from etcd, then drains), exits, and starts again on its data; the next goes once etcd
# lists three servers again. kv-bench stops at its first failed call and exits 1, so exit 0 of
# kv-bench means no call failed.
#
#   build-support/cluster-rolling-restart.sh [BUILD_DIR] [SECONDS] [CONCURRENCY]
set -u
build=${1:-build/ci}
seconds=${2:-20}
conc=${3:-16}
work=$(mktemp -d /tmp/cluster-restart.XXXXXX)
declare -a pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

client_port=$(free_port)
peer_port=$(free_port)
etcd --name=default --data-dir="$work/etcd" \
  --listen-client-urls="http://127.0.0.1:$client_port" \
  --advertise-client-urls="http://127.0.0.1:$client_port" \
  --listen-peer-urls="http://127.0.0.1:$peer_port" \
  --initial-advertise-peer-urls="http://127.0.0.1:$peer_port" \
  --initial-cluster="default=http://127.0.0.1:$peer_port" --log-level=error >"$work/etcd.log" 2>&1 &
pids+=($!)
endpoint="127.0.0.1:$client_port"
for _ in $(seq 600); do
  etcdctl --endpoints="$endpoint" endpoint health >/dev/null 2>&1 && break
  sleep 0.1
done
target="etcd://$endpoint/kv"
registered() { etcdctl --endpoints="$endpoint" get --prefix --keys-only /kv/ | grep -c . ; }

declare -a server_pid=()
start_server() {
  local i=$1
  rm -f "$work/s$i.port"
  "$build/examples/kv/kv-server" --rpc_bind=127.0.0.1:0 --webserver_bind= \
    --data_dir="$work/s$i" --port_file="$work/s$i.port" --registry="$target" \
    --rpc_service_queue_length=256 >>"$work/s$i.log" 2>&1 &
  server_pid[$i]=$!
  pids+=($!)
  for _ in $(seq 600); do
    [ -s "$work/s$i.port" ] && return 0
    sleep 0.1
  done
  echo "kv-server $i did not start; its log: $work/s$i.log" >&2
  exit 1
}
wait_registered() {
  for _ in $(seq 600); do
    [ "$(registered)" = 3 ] && return 0
    sleep 0.05
  done
  echo "etcd did not list three servers again" >&2
  exit 1
}

for i in 0 1 2; do start_server "$i"; done
wait_registered
"$build/examples/kv/kv-bench" --server="$target" --mode=put --conc="$conc" \
  --duration_s="$seconds" --keys=10000 >"$work/bench.out" 2>"$work/bench.err" &
bench=$!
sleep 3
for i in 0 1 2; do
  start=$(date +%s%N)
  kill -TERM "${server_pid[$i]}"
  wait "${server_pid[$i]}"
  code=$?
  stopped=$(date +%s%N)
  start_server "$i"
  wait_registered
  back=$(date +%s%N)
  printf 'RESTART server=%d exit=%d stop_ms=%d back_in_etcd_ms=%d\n' "$i" "$code" \
    $(((stopped - start) / 1000000)) $(((back - start) / 1000000))
  sleep 2
done
wait "$bench"
rc=$?
cat "$work/bench.out"
grep -m3 "E[0-9]" "$work/bench.err"
echo "RESTART kv_bench_exit=$rc (0: no call failed)"
exit "$rc"
