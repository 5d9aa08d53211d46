#include "rrpc/util/copy_counter.h"

#include <atomic>

namespace rrpc {

namespace copy_counter_internal {

namespace {
constexpr int kStripes = 32;
Stripe stripes[kStripes];
std::atomic<int> next_stripe{0};
}  // namespace

Stripe* AssignStripe() {
  tls_stripe = &stripes[next_stripe.fetch_add(1, std::memory_order_relaxed) % kStripes];
  return tls_stripe;
}

}  // namespace copy_counter_internal

CopyTotals ReadCopyTotals() {
  CopyTotals out;
  for (const copy_counter_internal::Stripe& s : copy_counter_internal::stripes) {
    for (int side = 0; side < 2; side++) {
      for (int kind = 0; kind < 2; kind++) {
        out.bytes[side][kind] += s.bytes[side][kind].load(std::memory_order_relaxed);
      }
    }
  }
  return out;
}

}  // namespace rrpc
