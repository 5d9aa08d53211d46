#include "util/metrics/striping.h"

#include <sched.h>

#include <algorithm>
#include <thread>

#include "util/spin_wait.h"

namespace rrpc {
namespace metrics_internal {

int NumStripes() {
  static const int stripes = [] {
    const int cpus = std::max(1u, std::thread::hardware_concurrency());
    int n = 4;
    while (n < 2 * cpus && n < 64) n *= 2;
    return n;
  }();
  return stripes;
}

int AssignThisThreadStripe() {
  // Round-robin, so the first NumStripes() threads that update metrics all get stripes of their
  // own, whatever CPUs they happen to run on.
  static std::atomic<unsigned> next_stripe{0};
  tls_stripe = static_cast<int>(next_stripe.fetch_add(1, std::memory_order_relaxed) %
                                static_cast<unsigned>(NumStripes()));
  return tls_stripe;
}

void StripeLock::LockSlow() {
  int spins = 0;
  do {
    // Wait on a plain load so waiters do not bounce the line, then try again.
    while (locked_.load(std::memory_order_relaxed)) {
      if (++spins < 100) {
        CpuRelax();
      } else {
        sched_yield();
      }
    }
  } while (locked_.exchange(true, std::memory_order_acquire));
}

}  // namespace metrics_internal
}  // namespace rrpc
