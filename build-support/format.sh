#!/usr/bin/env bash
# Formats our C++ sources with clang-format (.clang-format: Google base, 100 columns).
# Usage: build-support/format.sh          rewrite files in place
#        build-support/format.sh --check  list files that need formatting; exit 1 if any
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files 'src/*.h' 'src/*.cc' 'examples/*.h' 'examples/*.cc')
if [ "${1:-}" = "--check" ]; then
  bad=0
  for f in "${files[@]}"; do
    if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then
      echo "needs formatting: $f"
      bad=1
    fi
  done
  exit $bad
fi
clang-format -i "${files[@]}"
