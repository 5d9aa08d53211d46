#!/usr/bin/env bash
# Installs what is missing, checks the format (build-support/format.sh --check), builds from
# nothing and runs every test under ctest: the RelWithDebInfo build; the whole tree under clang
# with -Wthread-safety -Werror (build only: it proves the lock annotations hold), then clang-tidy
# on it (.clang-tidy's checks; skip both with RRPC_SKIP_CLANG=1); a short fuzz run of every
# fuzz target with a new seed (skip it with RRPC_SKIP_FUZZ=1); then the ASAN+UBSAN build (skip
# the sanitizers with RRPC_SKIP_SANITIZERS=1).
# After each ctest run, build-support/check-skips.py fails the run when a test skipped that is not
# in build-support/ci-allowed-skips.txt (CI runs as root with every tool installed, so only the
# listed skips are expected). RRPC_ALLOW_SKIPS=1 turns the check off (a machine without root).
# Usage: build-support/run-tests.sh [extra ctest args]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash thirdparty/install-deps.sh
jobs=$(nproc)
# Let ccache share results between checkouts in different folders (CI clones afresh).
export CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=1

run_suite() {  # run_suite SUITE BUILD_DIR CMAKE_ARGS...
  local suite=$1 dir=$2 rc=0
  shift 2
  cmake -S . -B "$dir" -G Ninja "$@" >/dev/null
  ninja -C "$dir" -j "$jobs"
  (cd "$dir" && "${CTEST_WRAP[@]}" ctest --output-on-failure -j "$jobs" "${CTEST_ARGS[@]}") |
    tee "$dir/ctest-summary.txt" || rc=$?
  if [ "${RRPC_ALLOW_SKIPS:-0}" != 1 ]; then
    build-support/check-skips.py "$suite" "$dir" <"$dir/ctest-summary.txt" || rc=1
  fi
  return "$rc"
}

CTEST_ARGS=("$@")
CTEST_WRAP=()
echo "=== format: build-support/format.sh --check ==="
build-support/format.sh --check ||
  { echo "run build-support/format.sh to format the files above" >&2; exit 1; }
echo "=== tests: RelWithDebInfo build ==="
run_suite ci build/ci -DCMAKE_BUILD_TYPE=RelWithDebInfo
if [ "${RRPC_SKIP_CLANG:-0}" != 1 ]; then
  echo "=== clang -Wthread-safety -Werror build ==="
  CC=clang CXX=clang++ cmake -S . -B build/ci-clang -G Ninja -DCMAKE_BUILD_TYPE=Debug \
    -DRRPC_BUILD_PEERS=OFF >/dev/null
  ninja -C build/ci-clang -j "$jobs"
  echo "=== clang-tidy (.clang-tidy) on the clang build ==="
  build-support/clang-tidy.sh build/ci-clang "$jobs"
fi
if [ "${RRPC_SKIP_FUZZ:-0}" != 1 ]; then
  # Fuzz search: each libFuzzer target (clang, ASAN+UBSAN; all six) for 15 s from its seed
  # corpus, so the stage stays under ~2.5 min with a warm ccache; a crash, hang, leak or failed
  # check fails the run (docs/reliability.md). A new seed each run, printed first ("fuzz: seed
  # S"); RRPC_FUZZ_SEED=S replays a run. The corpus itself is replayed by ctest (<target>-corpus).
  echo "=== fuzz smoke: ${RRPC_FUZZ_SECONDS:-15} s per target ==="
  build-support/fuzz.sh --seconds "${RRPC_FUZZ_SECONDS:-15}" --seed "${RRPC_FUZZ_SEED:-0}" --jobs "$jobs" --build build/ci-fuzz \
    frame_codec-fuzz negotiation-fuzz server_connection-fuzz tls_connection-fuzz bootstrap-fuzz \
    compression-fuzz
fi
if [ "${RRPC_SKIP_SANITIZERS:-0}" != 1 ]; then
  echo "=== tests: ASAN+UBSAN build ==="
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    run_suite asan build/ci-asan -DCMAKE_BUILD_TYPE=Debug -DRRPC_SANITIZE=address -DRRPC_BUILD_PEERS=OFF
fi
if [ "${RRPC_SKIP_SANITIZERS:-0}" != 1 ] && [ "${RRPC_SKIP_TSAN:-0}" != 1 ]; then
  # The one TSAN setup (options, suppressions, the tests left out): build-support/tsan-env.sh.
  echo "=== tests: TSAN build ==="
  (
    source build-support/tsan-env.sh
    CTEST_ARGS=(-E "$tsan_ctest_exclude" "${CTEST_ARGS[@]}")
    CTEST_WRAP=("${tsan_wrap[@]}")
    run_suite tsan build/ci-tsan -DCMAKE_BUILD_TYPE=Debug -DRRPC_SANITIZE=thread -DRRPC_BUILD_PEERS=OFF
  )
fi
