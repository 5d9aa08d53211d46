#!/usr/bin/env bash
# Soak: builds kv-soak (RelWithDebInfo, build/rel) and runs mixed kv load with faults injected
# on both sides for N minutes (examples/kv/kv_soak_main.cc). It checks that every call got
# exactly one answer, no acknowledged write was lost, and RSS stayed flat; the figures it prints
# ("SOAK ..." lines) go to docs/reliability.md. Exits non-zero if a check failed.
# Usage: build-support/soak.sh [--minutes N] [--build DIR] [kv-soak flags...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
minutes=1
build=build/rel
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) minutes=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
    *) extra+=("$1"); shift ;;
  esac
done
export CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=1
if [ ! -f "$build/build.ninja" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
ninja -C "$build" kv-soak
"$build/examples/kv/kv-soak" --minutes="$minutes" "${extra[@]}"
