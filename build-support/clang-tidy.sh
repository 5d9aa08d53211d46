#!/usr/bin/env bash
# Runs clang-tidy (the checks in .clang-tidy) on every .cc of ours (src/, bench/, examples/; not the
# generated .pb.cc/.rrpc.cc), with a build's compile_commands.json. The build must have run
# (protoc's headers exist). Exit 1 on any finding.
# Usage: build-support/clang-tidy.sh BUILD_DIR [JOBS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$1" && pwd)
jobs=${2:-$(nproc)}
[ -f "$build/compile_commands.json" ] || { echo "no $build/compile_commands.json" >&2; exit 2; }
run=$(command -v run-clang-tidy || command -v run-clang-tidy-14 || true)
[ -n "$run" ] || { echo "run-clang-tidy not found (apt-get install clang-tidy)" >&2; exit 2; }
cd "$root"
# run-clang-tidy takes a regex of the file names in compile_commands.json: ours, not the
# generated ones (under the build directory).
count=$(grep -cE "\"file\": \"$root/(src|bench|examples)/" "$build/compile_commands.json" || true)
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
"$run" -p "$build" -j "$jobs" -quiet "^$root/(src|bench|examples)/" >"$log" 2>&1 || status=$?
# Keep the findings (colour codes stripped), not the per-file "N warnings generated" chatter.
sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -E "(error|warning): |^ +[0-9]+ \| |^ +\| +\^" |
  grep -v "warnings generated" || true
if [ "$status" != 0 ]; then
  echo "clang-tidy: findings above (checks in .clang-tidy)" >&2
  exit 1
fi
echo "clang-tidy: $count files, no findings"
