#!/usr/bin/env bash
# getting-started-test: docs/getting-started.md's programs, built from the installed package and
# run as the page says. Takes the blocks marked <!-- guide-snippet: NAME --> (counter.proto,
# CMakeLists.txt, counter_server.cc, counter_client.cc), builds them against a fresh install,
# makes a CA and a server certificate for 127.0.0.1 (openssl), starts three counter-servers with
# TLS on free ports and runs the client through list:// over all three. Checks the client's output
# (the tracked Add, the sidecar read back, the cancelled and the timed-out call, connections on
# TLS), that the application counter is on a server's /metrics (promtool check metrics, when
# installed), and that a server given an RPC port another one listens on exits 1 with "the RPC
# port is taken" instead of aborting.
# Usage: getting-started-test.sh BUILD_DIR CXX [SANITIZER]   (skipped, exit 77, in a sanitizer
# build: the package does not carry the sanitizer's runtime)
set -euo pipefail
build=$1
cxx=$2
if [ -n "${3:-}" ]; then
  echo "skipped: sanitizer build ($3)"
  exit 77
fi
source "$(dirname "$0")/install-lib.sh"
make_tmp getting-started-test
servers=()
# The servers this test started, stopped on exit (by pid) before $tmp goes.
trap 'for p in "${servers[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; rm -rf "$tmp"' EXIT
install_rrpc "$build"

cd "$tmp"
export CCACHE_BASEDIR=$tmp CCACHE_NOHASHDIR=1
launcher=()
ccache=$(command -v ccache || true)
[ -z "$ccache" ] || launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER="$ccache")

src=$tmp/counter
mkdir -p "$src"
for name in counter.proto CMakeLists.txt counter_server.cc counter_client.cc; do
  doc_snippet docs/getting-started.md guide-snippet "$name" "$src/$name"
done
cmake -S "$src" -B "$src/build" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" "${launcher[@]}" \
  -DCMAKE_PREFIX_PATH="$prefix" >"$tmp/configure.log" 2>&1 ||
  { cat "$tmp/configure.log" >&2; fail "configuring the guide's project against the package"; }
cmake --build "$src/build" -j 2 >"$tmp/build.log" 2>&1 ||
  { cat "$tmp/build.log" >&2; fail "building the guide's programs against the package"; }
echo "built the guide's counter-server and counter-client"

# A CA and a server certificate naming 127.0.0.1 (an IP SAN: the client checks the address it
# dialled).
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=guide-ca -keyout ca.key -out ca.crt \
  >/dev/null 2>&1 || fail "openssl: CA"
openssl req -newkey rsa:2048 -nodes -subj /CN=counter -keyout server.key -out server.csr \
  >/dev/null 2>&1 || fail "openssl: server key"
printf 'subjectAltName=IP:127.0.0.1\n' >san.ext
openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 \
  -extfile san.ext -out server.crt >/dev/null 2>&1 || fail "openssl: server certificate"

# start_server N ARGS...: counter-server in the background; waits (bounded) for its first line,
# "rpc ADDR web URL", into $tmp/server-N.out.
start_server() {
  local n=$1
  shift
  "$src/build/counter-server" "$@" >"$tmp/server-$n.out" 2>"$tmp/server-$n.err" &
  servers+=($!)
  for _ in $(seq 600); do
    [ -s "$tmp/server-$n.out" ] && return 0
    kill -0 "${servers[-1]}" 2>/dev/null ||
      { cat "$tmp/server-$n.err" >&2; fail "counter-server $n exited"; }
    sleep 0.1
  done
  fail "counter-server $n printed no address in 60 s"
}
tls=(--rpc_certificate_file="$tmp/server.crt" --rpc_private_key_file="$tmp/server.key")
target=list://
for n in 1 2 3; do
  start_server "$n" --rpc_bind=127.0.0.1:0 --webserver_bind=127.0.0.1:0 "${tls[@]}"
  addr=$(awk '{print $2}' "$tmp/server-$n.out")
  target+=$([ "$n" = 1 ] || echo ,)$addr
done
echo "servers: $target"

out=$(timeout 120 "$src/build/counter-client" "$target" "$tmp/ca.crt") ||
  fail "counter-client failed: $out"
expected=$'apples=3\ndump keys=1\napples=3\nwait: cancelled\nshort wait: timed out'
[ "$(echo "$out" | grep -v '^connection ')" = "$expected" ] ||
  fail "counter-client printed '$out', expected '$expected' and its connections"
echo "$out" | grep -q '^connection ' || fail "counter-client listed no connection: '$out'"
if echo "$out" | grep '^connection ' | grep -vq '^connection tls$'; then
  fail "a client connection is not on TLS: '$out'"
fi
echo "client: $(echo "$out" | tr '\n' ' ')"

# The application counter on the /metrics of the server that ran the Add (one of the three).
found=
for n in 1 2 3; do
  web=$(awk '{print $4}' "$tmp/server-$n.out")
  curl -fsS "$web/metrics" >"$tmp/metrics-$n.txt" || fail "GET $web/metrics"
  if grep -q '^rrpc_app_adds_total{entity="app",id="counter"} 1$' "$tmp/metrics-$n.txt"; then
    found=$n
  fi
  if command -v promtool >/dev/null; then
    promtool check metrics <"$tmp/metrics-$n.txt" >"$tmp/promtool-$n.txt" 2>&1 ||
      { cat "$tmp/promtool-$n.txt" >&2; fail "promtool rejects $web/metrics"; }
  fi
done
[ -n "$found" ] || fail "no server's /metrics has rrpc_app_adds_total 1"
echo "rrpc_app_adds_total on server $found's /metrics$(command -v promtool >/dev/null &&
  echo ', promtool check metrics passes')"

# A second server on a taken RPC port: a clear error and exit 1, not an abort.
taken=$(awk '{print $2}' "$tmp/server-1.out")
status=0
timeout 60 "$src/build/counter-server" --rpc_bind="$taken" --webserver_bind= "${tls[@]}" \
  >/dev/null 2>"$tmp/second.err" || status=$?
[ "$status" = 1 ] || { cat "$tmp/second.err" >&2; fail "a server on a taken port exited $status"; }
grep -q "the RPC port is taken" "$tmp/second.err" ||
  { cat "$tmp/second.err" >&2; fail "a server on a taken port did not say so"; }
echo "a second server on $taken: $(grep -o 'the RPC port is taken[^;]*' "$tmp/second.err")"

# SIGTERM: each drains and exits 0.
for p in "${servers[@]}"; do kill -TERM "$p"; done
for p in "${servers[@]}"; do
  status=0
  timeout 60 tail --pid="$p" -f /dev/null || fail "counter-server $p still running 60 s after SIGTERM"
  wait "$p" || status=$?
  [ "$status" = 0 ] || fail "counter-server $p exited $status after SIGTERM"
done
servers=()
echo "PASS"
