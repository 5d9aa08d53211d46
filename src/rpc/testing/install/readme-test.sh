#!/usr/bin/env bash
# readme-test: README.md's code builds as shown, against the installed package. Takes the blocks
# README marks with <!-- readme-snippet: NAME --> and builds two out-of-tree projects:
#  - "Using it": kv.proto, the CMake lines (after the three lines every project starts with:
#    cmake_minimum_required, project, find_package(rrpc)) and kv_demo.cc, which includes only
#    the generated kv.rrpc.h and serves, listens and calls (sync and async);
#  - "Building a server against an installed rrpc": its CMakeLists.txt as it stands, with
#    proto/store/kv.proto = README's kv.proto and small sources of ours for the files it names
#    (server_main.cc is kv_demo.cc including "store/kv.rrpc.h").
# Builds only: the demo listens on 0.0.0.0:7000, which a test must not take (install-test runs
# a program of the same shape on loopback).
# Usage: readme-test.sh BUILD_DIR CXX [SANITIZER]   (skipped, exit 77, in a sanitizer build)
set -euo pipefail
build=$1
cxx=$2
if [ -n "${3:-}" ]; then
  echo "skipped: sanitizer build ($3)"
  exit 77
fi
source "$(dirname "$0")/install-lib.sh"
make_tmp readme-test
install_rrpc "$build"

cd "$tmp"
export CCACHE_BASEDIR=$tmp CCACHE_NOHASHDIR=1
launcher=()
ccache=$(command -v ccache || true)
[ -z "$ccache" ] || launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER="$ccache")

# build_project DIR WHAT: configure and build DIR against the installed package.
build_project() {
  cmake -S "$1" -B "$1/build" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" "${launcher[@]}" \
    -DCMAKE_PREFIX_PATH="$prefix" >"$1/configure.log" 2>&1 ||
    { cat "$1/configure.log" >&2; fail "configuring $2 against the installed package"; }
  cmake --build "$1/build" -j 2 >"$1/build.log" 2>&1 ||
    { cat "$1/build.log" >&2; fail "building $2 against the installed package"; }
  echo "built $2"
}

using=$tmp/using-it
mkdir -p "$using"
readme_snippet kv.proto "$using/kv.proto"
readme_snippet kv_demo.cc "$using/kv_demo.cc"
readme_snippet using-it.cmake "$tmp/using-it.cmake"
{
  printf 'cmake_minimum_required(VERSION 3.20)\nproject(kvdemo CXX)\n'
  printf 'set(CMAKE_CXX_STANDARD 17)\nfind_package(rrpc CONFIG REQUIRED)\n'
  cat "$tmp/using-it.cmake"
} >"$using/CMakeLists.txt"
grep -q '^#include "kv.rrpc.h"$' "$using/kv_demo.cc" ||
  fail "README's kv_demo.cc no longer includes \"kv.rrpc.h\""
other=$(grep '^#include "' "$using/kv_demo.cc" | grep -v '"kv.rrpc.h"' || true)
[ -z "$other" ] || fail "README's kv_demo.cc includes more than the generated header: $other"
build_project "$using" "README's \"Using it\" (kv.proto, its CMake lines, kv_demo.cc)"

installed=$tmp/installed
mkdir -p "$installed/proto/store"
readme_snippet installed.cmake "$installed/CMakeLists.txt"
cp "$using/kv.proto" "$installed/proto/store/kv.proto"
sed 's|^#include "kv.rrpc.h"$|#include "store/kv.rrpc.h"|' "$using/kv_demo.cc" \
  >"$installed/server_main.cc"
printf '// The service lives in server_main.cc here.\n#include "store/kv.rrpc.h"\n' \
  >"$installed/kv_service.cc"
cat >"$installed/cli_main.cc" <<'CC'
#include "store/kv.rrpc.h"

int main() {
  auto client = rrpc::rpc::MessengerBuilder("cli").Build();
  if (!client.ok()) return 1;
  demo::KvServiceProxy proxy(client.value(), rrpc::Sockaddr::Loopback(7000));
  return 0;
}
CC
build_project "$installed" "README's \"Building a server against an installed rrpc\""
echo "PASS"
