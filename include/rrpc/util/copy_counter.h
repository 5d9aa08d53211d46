// Payload bytes copied on the RPC paths, counted process-wide by side (client, server) and kind,
// so a benchmark or a test can report copies per call and prove a path copies nothing:
//  - kBody: protobuf body bytes serialized into a frame or parsed out of one (one pass each; a
//    protobuf message cannot be sent or read without it);
//  - kStream: frame or sidecar bytes memcpy'd between buffers after the socket or before it (a
//    partial frame moved to a bigger read block, a borrowed sidecar copied when its call gave up,
//    bytes handed from one transport to the next).
// Counting costs one relaxed atomic add on a per-thread stripe (no shared cache line between
// threads), inline: four counts per echo call. Thread-safe.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace rrpc {

enum class CopySide : int { kClient = 0, kServer = 1 };
enum class CopyKind : int { kBody = 0, kStream = 1 };

namespace copy_counter_internal {
// One cache line per stripe: threads on different stripes never share a line.
struct alignas(64) Stripe {
  std::atomic<uint64_t> bytes[2][2];
};
// This thread's stripe, once it has counted a copy (a trivially destructible thread_local: the
// inline path reaches it without a TLS wrapper call).
inline thread_local Stripe* tls_stripe = nullptr;
// Picks this thread's stripe (round robin) and remembers it in tls_stripe.
Stripe* AssignStripe();
}  // namespace copy_counter_internal

inline void CountCopy(CopySide side, CopyKind kind, size_t bytes) {
  copy_counter_internal::Stripe* stripe = copy_counter_internal::tls_stripe;
  if (__builtin_expect(stripe == nullptr, 0)) stripe = copy_counter_internal::AssignStripe();
  stripe->bytes[static_cast<int>(side)][static_cast<int>(kind)].fetch_add(
      bytes, std::memory_order_relaxed);
}

struct CopyTotals {
  uint64_t bytes[2][2] = {};  // [side][kind]
  uint64_t get(CopySide side, CopyKind kind) const {
    return bytes[static_cast<int>(side)][static_cast<int>(kind)];
  }
};

// The totals since the process started (take two and subtract for a window).
CopyTotals ReadCopyTotals();

}  // namespace rrpc
