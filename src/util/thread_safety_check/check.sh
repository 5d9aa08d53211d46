#!/usr/bin/env bash
# Proves the thread-safety annotations are checked, not decoration: with clang -Wthread-safety
# -Werror, correct.cc must compile and every VIOLATION line of violation.cc must be refused.
# Usage: check.sh CLANGXX SRC_ROOT   (exit 77, "skipped", where clang++ is missing)
set -uo pipefail
clangxx=$1
src=$2
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v "$clangxx" >/dev/null 2>&1; then
  echo "skipped: no clang++ ($clangxx) to run the thread-safety analysis"
  exit 77
fi
flags=(-std=c++17 -fsyntax-only -Wthread-safety -Werror -I"$src")
if ! "$clangxx" "${flags[@]}" "$here/correct.cc"; then
  echo "FAIL: correct.cc does not compile under -Wthread-safety"
  exit 1
fi
out=$("$clangxx" "${flags[@]}" "$here/violation.cc" 2>&1)
if [ $? -eq 0 ]; then
  echo "FAIL: violation.cc compiled: the annotations check nothing"
  exit 1
fi
expected=$(grep -c 'VIOLATION:' "$here/violation.cc")
# One diagnostic per offending line, each on a line that carries the marker.
refused=0
while IFS= read -r line; do
  n=$(sed -E 's/.*violation\.cc:([0-9]+):.*/\1/' <<<"$line")
  if sed -n "${n}p" "$here/violation.cc" | grep -q 'VIOLATION:'; then refused=$((refused + 1)); fi
done < <(grep -E 'violation\.cc:[0-9]+:[0-9]+: error: .*\[-Werror,-Wthread-safety' <<<"$out" | sort -u -t: -k2,2n)
if [ "$refused" -ne "$expected" ]; then
  echo "FAIL: expected $expected thread-safety errors on the VIOLATION lines, got $refused:"
  echo "$out"
  exit 1
fi
echo "ok: correct.cc compiles; all $expected violations refused"
