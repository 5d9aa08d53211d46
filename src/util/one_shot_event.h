// OneShotEvent: one thread waits until another says "done", once; for a caller waiting on one
// response. Thread-safe: Notify() from any one thread, the waits from one other thread.
//
// Why not CountDownLatch: the latch wakes its waiter while holding its mutex, so the woken
// caller first blocks on that mutex (a second sleep and wake, measured on the synchronous call
// path: 3.6 context switches per call on the client where 2 are needed). Here the waiter sleeps
// on a futex word that Notify() sets before waking it: one wake, no lock, and a caller that finds
// it set (polling, or a response faster than the caller got to sleep) makes no syscall at all.
// The notifier touches the object only up to the wake syscall, which needs its address, not its
// memory: the waiter may destroy it as soon as a wait returns true.
//
//   OneShotEvent done;
//   StartCall([&done] { done.Notify(); });
//   done.Wait();
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

#include "rrpc/util/monotime.h"
#include "util/spin_wait.h"

namespace rrpc {

class OneShotEvent {
 public:
  OneShotEvent() = default;
  OneShotEvent(const OneShotEvent&) = delete;
  OneShotEvent& operator=(const OneShotEvent&) = delete;

  // Sets the event and wakes the waiter if it sleeps. Once.
  void Notify() {
    uint32_t* word = FutexWord();  // before the exchange: the event may be gone right after it
    if (state_.exchange(kSet, std::memory_order_acq_rel) == kSleeping) {
      syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
    }
  }

  bool IsSet() const { return state_.load(std::memory_order_acquire) == kSet; }

  // Polls for up to `spin` (util/spin_wait.h), true if the event came meanwhile.
  bool Poll(MonoDelta spin) {
    return SpinUntil([this] { return IsSet(); }, spin);
  }

  // Blocks until the event is set (true) or `deadline` passes (false). MonoTime::Max(): no limit.
  bool WaitUntil(MonoTime deadline) {
    uint32_t expected = kIdle;
    if (!state_.compare_exchange_strong(expected, kSleeping, std::memory_order_acq_rel) &&
        expected == kSet) {
      return true;
    }
    while (state_.load(std::memory_order_acquire) == kSleeping) {
      if (deadline.IsMax()) {
        syscall(SYS_futex, FutexWord(), FUTEX_WAIT_PRIVATE, kSleeping, nullptr, nullptr, 0);
        continue;
      }
      const int64_t ns = (deadline - MonoTime::Now()).ToNanoseconds();
      if (ns <= 0) return IsSet();
      const timespec left{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
      syscall(SYS_futex, FutexWord(), FUTEX_WAIT_PRIVATE, kSleeping, &left, nullptr, 0);
    }
    return true;
  }

  void Wait() { WaitUntil(MonoTime::Max()); }

 private:
  static constexpr uint32_t kIdle = 0;      // not set, nobody sleeping
  static constexpr uint32_t kSleeping = 1;  // the waiter is in (or entering) FUTEX_WAIT
  static constexpr uint32_t kSet = 2;
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) &&
                    std::atomic<uint32_t>::is_always_lock_free,
                "the futex syscall needs a plain 32-bit word");
  uint32_t* FutexWord() { return reinterpret_cast<uint32_t*>(&state_); }

  std::atomic<uint32_t> state_{kIdle};
};

}  // namespace rrpc
