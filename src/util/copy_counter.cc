#include "util/copy_counter.h"

#include <atomic>

namespace rrpc {

namespace {

constexpr int kStripes = 32;

// One cache line per stripe: threads on different stripes never share a line.
struct alignas(64) Stripe {
  std::atomic<uint64_t> bytes[2][2];
};
Stripe stripes[kStripes];
std::atomic<int> next_stripe{0};

Stripe& ThisThreadStripe() {
  thread_local Stripe* const stripe =
      &stripes[next_stripe.fetch_add(1, std::memory_order_relaxed) % kStripes];
  return *stripe;
}

}  // namespace

void CountCopy(CopySide side, CopyKind kind, size_t bytes) {
  ThisThreadStripe().bytes[static_cast<int>(side)][static_cast<int>(kind)].fetch_add(
      bytes, std::memory_order_relaxed);
}

CopyTotals ReadCopyTotals() {
  CopyTotals out;
  for (const Stripe& s : stripes) {
    for (int side = 0; side < 2; side++) {
      for (int kind = 0; kind < 2; kind++) {
        out.bytes[side][kind] += s.bytes[side][kind].load(std::memory_order_relaxed);
      }
    }
  }
  return out;
}

}  // namespace rrpc
