#!/usr/bin/env bash
# Smoke test of one benchmark peer (raw-tcp-limit or grpc-peer), on 127.0.0.1 only: every mode
# runs and prints a well-formed RESULT line, uneven request/response sizes and large payloads are
# echoed correctly, a --server_only server serves a --server_addr client, and a corrupted response
# or a bad flag fails the run. It asserts nothing about speed.
#
# Usage: peer-smoke-test.sh PEER_BINARY IMPL_NAME
set -u
bin=$1
impl=$2
tmp=$(mktemp -d)
server_pid=""
cleanup() {
  if [[ -n $server_pid ]]; then
    kill "$server_pid" 2>/dev/null
    wait "$server_pid" 2>/dev/null
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

passed=0
failed=0
short=(--run_seconds=0.5 --warmup_seconds=0.2)
num='[0-9]+(\.[0-9]+)?'

pass() { echo "PASS: $1"; passed=$((passed + 1)); }
fail() {
  echo "FAIL: $1"
  sed 's/^/    /' "$tmp/out" "$tmp/err" | tail -n 20
  failed=$((failed + 1))
}

# expect_result NAME MODE PAYLOAD CONC ARGS...: the run succeeds and its last RESULT line matches.
expect_result() {
  local name=$1 mode=$2 payload=$3 conc=$4
  shift 4
  # A loaded machine can leave the 0.5 s window without a finished call: that run is repeated
  # (at most 5 tries), any other failure is one.
  local try ok=0
  for try in 1 2 3 4 5; do
    if timeout 60 "$bin" "${short[@]}" "$@" >"$tmp/out" 2>"$tmp/err"; then
      ok=1
      break
    fi
    grep -q "no call completed" "$tmp/err" || break
  done
  if [[ $ok -eq 0 ]]; then
    fail "$name (exit status)"
    return
  fi
  local line
  line=$(grep '^RESULT ' "$tmp/out" | tail -n 1)
  local re="^RESULT impl=$impl mode=$mode transport=tcp payload=$payload conc=$conc "
  re+="reqs_per_sec=$num p50_us=$num p99_us=$num p999_us=$num user_cpu_s=$num sys_cpu_s=$num "
  re+="rss_kb=[0-9]+ cpu_us_per_req=$num cs_per_req=$num bytes_per_sec=$num"
  [[ $mode == stream ]] && re+=" msgs_per_sec=$num"
  re+="$"
  if [[ $line =~ $re ]]; then pass "$name"; else fail "$name (RESULT line: '$line')"; fi
}

# expect_failure NAME MESSAGE ARGS...: the run exits non-zero and says MESSAGE on stderr.
expect_failure() {
  local name=$1 message=$2
  shift 2
  timeout 60 "$bin" "${short[@]}" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [[ $rc -ne 0 && $rc -ne 124 ]] && grep -q "$message" "$tmp/err"; then
    pass "$name"
  else
    fail "$name (exit $rc, wanted non-zero with '$message')"
  fi
}

expect_result throughput throughput 64 16 --mode=throughput --client_threads=2 \
  --async_call_concurrency=8
expect_result latency latency 64 1 --mode=latency --client_threads=3
expect_result cps cps 64 2 --mode=cps --client_threads=2
expect_result stream stream 65536 2 --mode=stream --client_threads=2 --payload_bytes=65536
expect_result larger-response throughput 100 4 --async_call_concurrency=4 --payload_bytes=100 \
  --response_bytes=1000
expect_result empty-request latency 0 1 --mode=latency --payload_bytes=0 --response_bytes=16
expect_result one-mib throughput 1048576 8 --async_call_concurrency=8 --payload_bytes=1048576
expect_failure corrupt-response "content mismatch" --corrupt_responses_for_test
expect_failure bad-mode "must be throughput, latency, cps or stream" --mode=bogus
if [[ $impl == raw-tcp ]]; then
  # Worker threads answer (out of order inside the server, in order on the wire).
  expect_result workers throughput 64 32 --server_workers=3 --client_threads=2 \
    --async_call_concurrency=16
  expect_result workers-uneven throughput 70000 4 --server_workers=2 --async_call_concurrency=4 \
    --payload_bytes=70000 --response_bytes=100
  expect_result workers-empty latency 0 1 --mode=latency --server_workers=1 --payload_bytes=0 \
    --response_bytes=0
  expect_failure workers-corrupt "content mismatch" --server_workers=2 --corrupt_responses_for_test
fi

# A separate server process, found through the port it prints.
"$bin" --server_only --port=0 --server_threads=2 >"$tmp/server" 2>&1 &
server_pid=$!
port=""
for _ in $(seq 1 100); do
  port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$tmp/server")
  [[ -n $port ]] && break
  sleep 0.1
done
if [[ -z $port ]]; then
  echo "server did not start:" && cat "$tmp/server"
  failed=$((failed + 1))
else
  expect_result external-server throughput 256 32 --server_addr="127.0.0.1:$port" \
    --payload_bytes=256 --client_threads=2 --async_call_concurrency=16
  expect_result external-server-cps cps 256 1 --server_addr="127.0.0.1:$port" --mode=cps \
    --payload_bytes=256
fi
kill "$server_pid" 2>/dev/null
wait "$server_pid"
server_rc=$?
server_pid=""
if [[ $server_rc -eq 0 ]] && grep -q "server stopped by signal" "$tmp/server"; then
  pass "server-only stops cleanly on SIGTERM"
else
  echo "FAIL: server-only exit $server_rc" && cat "$tmp/server"
  failed=$((failed + 1))
fi

echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
