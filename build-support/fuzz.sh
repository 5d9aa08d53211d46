#!/usr/bin/env bash
# Builds the fuzz targets (src/**/*-fuzz.cc) with clang, libFuzzer and ASAN+UBSAN, and runs each
# for a bounded time, starting from its seed corpus in the repo (src/rpc/core/fuzz-corpus/NAME).
# New inputs go to build/fuzz/corpus/NAME (the repo's corpus is only read), crashes to
# build/fuzz/crashes/. Prints one line per target:
#   FUZZ target=NAME seed=S seconds=N execs=N execs_per_sec=N coverage_edges=N corpus=FILES/BYTES
#        saved_files=N saved_bytes=N crashes=N
# (corpus: libFuzzer's final corpus, seeds included; saved: everything build/fuzz/corpus/NAME
# holds, which grows run after run).
# and exits non-zero if any target crashed, hung, leaked or failed a check.
# A crash is fixed with the crashing input copied into the target's corpus folder as regress-*
# (ctest replays the folder in every build).
# --seed S fixes libFuzzer's random seed (0, the default: a new one each run, drawn here and
# printed as "fuzz: seed S" so a crash found by it can be replayed). With a fixed seed and the same
# starting corpus, a single-threaded target repeats the same inputs in the same order.
# (server_connection-fuzz runs a messenger's threads, so its path can still vary a little.) CI
# draws a new seed each run, so each run searches somewhere new; the corpus replay (ctest's
# <target>-corpus) keeps what earlier runs found.
# Usage: build-support/fuzz.sh [--seconds N] [--seed S] [--jobs J] [--build DIR] [TARGET...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
seconds=60
seed=0
jobs=$(nproc)
build=build/fuzz
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) targets+=("$1"); shift ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=(frame_codec-fuzz negotiation-fuzz server_connection-fuzz tls_connection-fuzz
  bootstrap-fuzz)

if [ "$seed" = 0 ]; then
  seed=$(($(od -An -N4 -tu4 /dev/urandom | tr -d ' ') % 4294967295 + 1))
fi
echo "fuzz: seed $seed (replay: build-support/fuzz.sh --seed $seed --seconds $seconds ${targets[*]})"

export CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=1
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DRRPC_FUZZ=ON -DRRPC_SANITIZE=address -DRRPC_BUILD_PEERS=OFF >/dev/null
ninja -C "$build" -j "$jobs" "${targets[@]}"

failed=0
for t in "${targets[@]}"; do
  seeds=$(find src -type d -path "*/fuzz-corpus/$t" | head -1)
  work="$build/corpus/$t"
  crashes="$build/crashes"
  mkdir -p "$work" "$crashes"
  log="$build/$t.log"
  bin=$(find "$build/src" -type f -name "$t" -perm -u+x | head -1)
  before=$(find "$crashes" -name "$t-*" -type f | wc -l)
  status=0
  # -timeout: one input taking this long is a hang. -max_len: frames and handshakes of interest
  # fit; bigger inputs only slow the search. Leak checks stay on (ASAN_OPTIONS).
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$bin" -seed="$seed" -max_total_time="$seconds" -print_final_stats=1 -timeout=25 \
    -max_len=4096 -rss_limit_mb=2048 -artifact_prefix="$crashes/$t-" "$work" "$seeds" \
    >"$log" 2>&1 || status=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  # libFuzzer's last status line: edges covered and the corpus it ended with (seeds + new).
  done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1 || true)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$done_line")
  corp=$(sed -n 's/.* corp: \([0-9]*\/[0-9]*[a-zA-Z]*\).*/\1/p' <<<"$done_line")
  files=$(find "$work" -type f | wc -l)
  bytes=$(find "$work" -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}')
  found=$(($(find "$crashes" -name "$t-*" -type f | wc -l) - before))
  rate=$(awk -v e="${execs:-0}" -v s="$seconds" 'BEGIN {printf "%.0f", e / s}')
  echo "FUZZ target=$t seed=$seed seconds=$seconds execs=${execs:-0} execs_per_sec=$rate" \
    "coverage_edges=${cov:-0} corpus=${corp:-0} saved_files=$files saved_bytes=$bytes crashes=$found"
  if [ "$status" != 0 ] || [ "$found" != 0 ]; then
    echo "fuzz: $t failed (exit $status); last lines of $log:" >&2
    tail -40 "$log" >&2
    failed=1
  fi
done
exit $failed
