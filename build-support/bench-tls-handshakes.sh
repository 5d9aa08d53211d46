#!/bin/bash
# Handshakes per second on rrpc's TLS port beside openssl s_server, both driven by openssl s_time
# (one client process), the same EC P-256 certificate, the targets alternating per round:
# TLS 1.3 full handshakes, TLS 1.2 full, TLS 1.2 resumed (s_time -reuse cannot resume TLS 1.3:
# it reconnects before reading the tickets). docs/performance.md ("TLS against plain TCP").
#
#   build-support/bench-tls-handshakes.sh [BUILD_DIR] [ROUNDS] [SECONDS]
set -euo pipefail
build=${1:-build/rel}
rounds=${2:-6}
seconds=${3:-3}
bench="$build/bench/rpc-bench"
work=$(mktemp -d /tmp/bench-tls-handshakes.XXXXXX)
rrpc_port=17500
sserver_port=17501

"$bench" --server_only --transport=tls --port=$rrpc_port > "$work/rrpc.log" 2>&1 &
rrpc_pid=$!
for _ in $(seq 50); do grep -q "listening" "$work/rrpc.log" && break; sleep 0.1; done
dir=$(grep -o "certificate (EC P-256) in [^ ]*" "$work/rrpc.log" | awk '{print $NF}')
# s_server reads stdin: give it a FIFO we hold open, so it neither exits nor blocks us.
mkfifo "$work/stdin"
exec 3<>"$work/stdin"
openssl s_server -accept $sserver_port -cert "$dir/server.crt" -key "$dir/server.key" -quiet \
  < "$work/stdin" > /dev/null 2>&1 &
sserver_pid=$!
trap 'kill $rrpc_pid $sserver_pid 2>/dev/null; exec 3>&-' EXIT
sleep 1

for round in $(seq "$rounds"); do
  for mode in "-new" "-new -tls1_2" "-reuse -tls1_2"; do
    for target in "s_server:$sserver_port" "rrpc:$rrpc_port"; do
      # shellcheck disable=SC2086
      line=$(timeout $((seconds + 20)) openssl s_time -connect 127.0.0.1:${target#*:} $mode \
        -time "$seconds" -CAfile "$dir/ca.crt" 2>&1 | grep "connections in .* real seconds" || true)
      echo "round=$round mode='$mode' server=${target%%:*} $line"
    done
  done
done
