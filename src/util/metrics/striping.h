// Striping: how hot-path metric updates avoid shared cache lines. Each metric keeps several
// cache-line-sized stripes; each thread picks one stripe for life (round-robin at its first
// update) and only ever writes that one; readers add the stripes up. Threads outnumbering stripes
// share a stripe, which stays correct (updates are atomic or locked) but may contend.
//
// Also here: StripeLock, the tiny spin lock that guards one histogram stripe. All functions are
// thread-safe.
#pragma once

#include <atomic>
#include <cstddef>

namespace rrpc {
namespace metrics_internal {

// The line size of the x86-64 and most ARM servers we target; stripes are aligned to it.
constexpr size_t kCacheLineSize = 64;

// The number of stripes a counter has: a power of two, about twice the CPU count (so threads
// rarely share), between 4 and 64. Fixed at first call.
int NumStripes();

// Assigns the calling thread its stripe; use ThisThreadStripe().
int AssignThisThreadStripe();

inline thread_local int tls_stripe = -1;

// The calling thread's stripe, in [0, NumStripes()). One thread-local load after the first call.
inline int ThisThreadStripe() {
  const int stripe = tls_stripe;
  if (__builtin_expect(stripe >= 0, 1)) return stripe;
  return AssignThisThreadStripe();
}

// A test-and-test-and-set spin lock for critical sections of a few dozen instructions, held by
// one thread at a time; it yields the CPU after a short spin so a preempted holder can finish.
// Uncontended, Lock() is one atomic exchange and Unlock() one store.
class StripeLock {
 public:
  void Lock() {
    if (!locked_.exchange(true, std::memory_order_acquire)) return;
    LockSlow();
  }
  void Unlock() { locked_.store(false, std::memory_order_release); }

 private:
  void LockSlow();
  std::atomic<bool> locked_{false};
};

class StripeLockGuard {
 public:
  explicit StripeLockGuard(StripeLock* lock) : lock_(lock) { lock_->Lock(); }
  ~StripeLockGuard() { lock_->Unlock(); }
  StripeLockGuard(const StripeLockGuard&) = delete;
  StripeLockGuard& operator=(const StripeLockGuard&) = delete;

 private:
  StripeLock* const lock_;
};

}  // namespace metrics_internal
}  // namespace rrpc
