#!/usr/bin/env bash
# Installs what is missing, builds the Release binaries and runs rpc-bench: an in-process server
# and client on loopback. Extra arguments go to rpc-bench (e.g. --mode=latency).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash thirdparty/install-deps.sh
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release -DRRPC_BUILD_TESTS=OFF >/dev/null
ninja -C build/release -j "$(nproc)" rpc-bench
exec build/release/bench/rpc-bench "$@"
