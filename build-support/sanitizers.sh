#!/usr/bin/env bash
# Builds and runs the whole suite under ASAN+UBSAN and under TSAN (one after the other).
# Usage: build-support/sanitizers.sh [address|thread]...   (default: both)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash thirdparty/install-deps.sh
kinds=("$@")
[ ${#kinds[@]} -gt 0 ] || kinds=(address thread)
for kind in "${kinds[@]}"; do
  dir=build/san-$kind
  echo "=== $kind sanitizer ==="
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DRRPC_SANITIZE="$kind" \
    -DRRPC_BUILD_PEERS=OFF >/dev/null
  ninja -C "$dir" -j "$(nproc)"
  if [ "$kind" = thread ]; then
    # The one TSAN setup (options, suppressions, the tests left out), shared with run-tests.sh.
    (
      source build-support/tsan-env.sh
      cd "$dir" && "${tsan_wrap[@]}" ctest --output-on-failure -j "$(nproc)" -E "$tsan_ctest_exclude"
    )
  else
    (cd "$dir" && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j "$(nproc)")
  fi
done
