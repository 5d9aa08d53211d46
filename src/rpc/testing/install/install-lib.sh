# shellcheck shell=bash
# Sourced by install-test.sh and public-headers-test.sh: a temporary directory removed on exit,
# rrpc installed into it, and protoc run with the installed plugin, as a user outside the tree
# would run them.
install_test_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# Makes $tmp and removes it on exit, after stopping the process in $child_pid (if any): the
# tests start at most one and stop only that one.
make_tmp() {
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/rrpc-$1.XXXXXX")
  child_pid=
  trap 'stop_child; rm -rf "$tmp"' EXIT
}

stop_child() {
  if [ -n "$child_pid" ]; then
    kill "$child_pid" 2>/dev/null || true
    wait "$child_pid" 2>/dev/null || true
    child_pid=
  fi
}

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# install_rrpc BUILD_DIR: `cmake --install` into $tmp/prefix; sets $prefix and PKG_CONFIG_PATH.
install_rrpc() {
  prefix=$tmp/prefix
  cmake --install "$1" --prefix "$prefix" >"$tmp/install.log" 2>&1 ||
    { cat "$tmp/install.log" >&2; fail "cmake --install $1 failed (is everything built?)"; }
  local pc
  pc=$(find "$prefix" -name rrpc.pc -path '*/pkgconfig/*')
  [ -n "$pc" ] || fail "no rrpc.pc installed"
  PKG_CONFIG_PATH=$(dirname "$pc")
  export PKG_CONFIG_PATH
}

# generate_hello OUT_DIR: hello/hello.{pb,rrpc}.{h,cc} from the test project's .proto, with
# the installed plugin and rrpc's installed .proto files (found through rrpc.pc).
generate_hello() {
  mkdir -p "$1"
  protoc -I"$install_test_dir/hello/proto" -I"$(pkg-config --variable=protodir rrpc)" \
    --plugin=protoc-gen-rrpc="$(pkg-config --variable=protoc_gen_rrpc rrpc)" \
    --cpp_out="$1" --rrpc_out="$1" hello/hello.proto || fail "protoc with the installed plugin"
}

# doc_snippet DOC MARKER NAME OUT: the code block the document DOC (a path from the repository
# root) marks with `<!-- MARKER: NAME -->` (the fenced block that starts on the next line),
# written to OUT as it stands.
doc_snippet() {
  local doc="$install_test_dir/../../../../$1"
  awk -v mark="<!-- $2: $3 -->" '
    $0 == mark { marked = 1; next }
    marked == 1 { if ($0 ~ /^```/) { marked = 2; next } else { exit 3 } }
    marked == 2 { if ($0 ~ /^```/) { found = 1; exit 0 } print }
    END { if (!found) exit 3 }' "$doc" >"$4" ||
    fail "$1 has no code block marked <!-- $2: $3 --> (or it is not closed)"
  [ -s "$4" ] || fail "$1's snippet $3 is empty"
}

# readme_snippet NAME OUT: README.md's block marked `<!-- readme-snippet: NAME -->`.
readme_snippet() { doc_snippet README.md readme-snippet "$1" "$2"; }
