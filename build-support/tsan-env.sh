# shellcheck shell=bash
# The one TSAN setup, sourced by run-tests.sh and sanitizers.sh before they run ctest in a
# -DRRPC_SANITIZE=thread build. Sets:
#   TSAN_OPTIONS        stop at the first report, both stacks of a lock-order inversion, and
#                       tsan-suppressions.txt (third-party code only)
#   GTEST_FILTER        the gtest cases left out (exported: every test binary reads it)
#   tsan_ctest_exclude  ctest -E regex of the tests left out
#   tsan_wrap           the command prefix to run ctest under (setarch -R: TSAN cannot map its
#                       shadow memory under newer kernels' high-entropy ASLR)
# Left out: the RocksDB example's tests (kv-test, kv_stream-test, kv_cluster-test,
# kv-cluster-bench-test, kv-cluster-bench-overload-test, kv-soak-exactly-once, and the rrpc-cli
# case that drives a spawned kv-server). Debian's librocksdb is not built with TSAN: TSAN does
# not see its locks (its write group hands batches between threads unseen), and the uninstrumented library slowed the spawned server past its test's deadline; under
# TSAN a signal that lands on a thread parked inside it is deferred, so a kv-server child may never
# see SIGTERM (docs/reliability.md, "Sanitizers"). rrpc's own threads in those tests are the same
# code the other tests run under TSAN.
tsan_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$tsan_root/build-support/tsan-suppressions.txt"
export GTEST_FILTER=-RrpcCliTest.DrivesTheKvServerEndToEnd
tsan_ctest_exclude='^(kv-test|kv_stream-test|kv_cluster-test|kv-cluster-bench-test|kv-cluster-bench-overload-test|kv-soak-exactly-once)$'
tsan_wrap=()
if command -v setarch >/dev/null; then
  tsan_wrap=(setarch "$(uname -m)" -R)
fi
