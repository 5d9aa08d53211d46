#!/usr/bin/env bash
# install-test: rrpc as a storage server outside this tree sees it. Installs the build into a
# temporary prefix, configures and builds hello/ (its own CMakeLists.txt: find_package(rrpc),
# rrpc_proto()) against that prefix, and builds the client a second way, with nothing but protoc
# and rrpc.pc (pkg-config). Runs hello-server on a free loopback port and both clients against
# it, and checks the answers: once over TCP, once over RDMA (rrpc::rdma, rrpc/rpc/rdma.h, on the
# software backend: the connections must end on "rdma").
# Usage: install-test.sh BUILD_DIR CXX [SANITIZER]
# Skipped (exit 77) in a sanitizer build: its libraries need the sanitizer's runtime, which the
# package does not carry; the plain build checks the package.
set -euo pipefail
build=$1
cxx=$2
if [ -n "${3:-}" ]; then
  echo "skipped: sanitizer build ($3)"
  exit 77
fi
source "$(dirname "$0")/install-lib.sh"
make_tmp install-test
install_rrpc "$build"

# Everything under $tmp, the working directory too, so that ccache (which makes paths below
# CCACHE_BASEDIR relative to it) hits from run to run.
cp -r "$install_test_dir/hello" "$tmp/hello"
cd "$tmp"
export CCACHE_BASEDIR=$tmp CCACHE_NOHASHDIR=1
launcher=()
ccache=$(command -v ccache || true)
[ -z "$ccache" ] || launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER="$ccache")
cmake -S "$tmp/hello" -B "$tmp/build" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" "${launcher[@]}" \
  -DCMAKE_PREFIX_PATH="$prefix" >"$tmp/configure.log" 2>&1 ||
  { cat "$tmp/configure.log" >&2; fail "configuring hello/ against the installed package"; }
grep -qx "rrpc_DIR:PATH=$prefix/.*" "$tmp/build/CMakeCache.txt" ||
  fail "find_package(rrpc) found a package outside $prefix: $(grep rrpc_DIR "$tmp/build/CMakeCache.txt")"
cmake --build "$tmp/build" -j 2 >"$tmp/build.log" 2>&1 ||
  { cat "$tmp/build.log" >&2; fail "building hello/ against the installed package"; }

# The client built with pkg-config only: the generated code and the client's source, each
# compiled on its own (so ccache can keep it), linked with `pkg-config --libs rrpc`.
generate_hello "$tmp/pc"
objects=()
for src in "$tmp/pc/hello/hello.pb.cc" "$tmp/pc/hello/hello.rrpc.cc" "$tmp/hello/hello_client.cc"; do
  obj=$tmp/pc/$(basename "$src" .cc).o
  # shellcheck disable=SC2046  # pkg-config prints several words
  $ccache "$cxx" -std=c++17 -c -I"$tmp/pc" $(pkg-config --cflags rrpc) "$src" -o "$obj" ||
    fail "compiling $(basename "$src") with pkg-config --cflags rrpc"
  objects+=("$obj")
done
# shellcheck disable=SC2046
"$cxx" "${objects[@]}" $(pkg-config --libs rrpc) -o "$tmp/pc/hello-client" ||
  fail "linking with pkg-config --libs rrpc"

# serve_and_call MODE: runs hello-server (MODE "tcp", or "rdma": the RDMA transport factory on
# the software backend) and both clients against it, the clients in the same mode, and checks
# their answers and the transport their connection ended on; then stops the server with SIGTERM
# (graceful drain, exit 0).
serve_and_call() {
  local mode=$1 port out status server_args=() client_args=()
  if [ "$mode" = rdma ]; then
    server_args=(rdma)
    client_args=(rdma)
  fi
  rm -f "$tmp/port"
  # The server writes its port once it serves; wait for it (bounded), or for the server to die.
  "$tmp/build/hello-server" "$tmp/port" "${server_args[@]}" >"$tmp/server-$mode.log" 2>&1 &
  child_pid=$!
  for _ in $(seq 600); do
    [ -s "$tmp/port" ] && break
    kill -0 "$child_pid" 2>/dev/null ||
      { cat "$tmp/server-$mode.log" >&2; fail "hello-server ($mode) exited"; }
    sleep 0.1
  done
  [ -s "$tmp/port" ] ||
    { cat "$tmp/server-$mode.log" >&2; fail "hello-server ($mode) wrote no port in 60 s"; }
  port=$(cat "$tmp/port")

  local expected=$'greeting=hello, install-test\nsum=42\ntransport='"$mode"
  for client in "$tmp/build/hello-client" "$tmp/pc/hello-client"; do
    out=$(timeout 60 "$client" "$port" "${client_args[@]}") || fail "$client ($mode) failed"
    [ "$out" = "$expected" ] || fail "$client ($mode) printed '$out', expected '$expected'"
    echo "$client: $(echo "$out" | tr '\n' ' ')"
  done

  # SIGTERM: graceful drain, exit 0 (waited for at most 60 s).
  kill -TERM "$child_pid"
  for _ in $(seq 600); do
    kill -0 "$child_pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$child_pid" 2>/dev/null && fail "hello-server ($mode) still running 60 s after SIGTERM"
  status=0
  wait "$child_pid" || status=$?
  child_pid=
  [ "$status" = 0 ] ||
    { cat "$tmp/server-$mode.log" >&2; fail "hello-server ($mode) exited with $status"; }
}
serve_and_call tcp
serve_and_call rdma
echo "PASS"
