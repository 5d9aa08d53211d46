// CountDownLatch: lets threads wait until a count, set at construction, has been counted down to
// zero (e.g. "all 4 reactors have started"). Thread-safe: any thread may count down or wait.
// Once the count reaches zero it stays there; every later Wait() returns at once.
//
//   CountDownLatch started(num_threads);
//   ... each thread calls started.CountDown() when ready ...
//   started.Wait();
#pragma once

#include <glog/logging.h>

#include <algorithm>
#include <cstdint>

#include "rrpc/util/monotime.h"
#include "rrpc/util/mutex.h"

namespace rrpc {

class CountDownLatch {
 public:
  explicit CountDownLatch(int64_t count) : count_(count) { DCHECK_GE(count, 0); }
  CountDownLatch(const CountDownLatch&) = delete;
  CountDownLatch& operator=(const CountDownLatch&) = delete;

  // Subtracts `n` (default 1) from the count, stopping at zero; wakes the waiters when it gets
  // there. The latch may be destroyed as soon as a waiter returns: nothing here touches it after
  // the waiters can run (the wake-up happens while the mutex is held).
  void CountDown(int64_t n = 1) RRPC_EXCLUDES(mu_) {
    DCHECK_GE(n, 0);
    MutexLock l(mu_);
    if (count_ == 0) return;
    count_ = std::max<int64_t>(0, count_ - n);
    if (count_ == 0) cv_.NotifyAll();
  }

  // Blocks until the count is zero.
  void Wait() RRPC_EXCLUDES(mu_) {
    MutexLock l(mu_);
    while (count_ != 0) cv_.Wait(mu_);
  }

  // Blocks until the count is zero (true) or `timeout` has passed (false).
  bool WaitFor(MonoDelta timeout) { return WaitUntil(MonoTime::Now() + timeout); }

  // Blocks until the count is zero (true) or `deadline` has passed (false). MonoTime::Max()
  // waits forever.
  bool WaitUntil(MonoTime deadline) RRPC_EXCLUDES(mu_) {
    MutexLock l(mu_);
    while (count_ != 0) {
      if (!cv_.WaitUntil(mu_, deadline)) return count_ == 0;
    }
    return true;
  }

  int64_t count() const RRPC_EXCLUDES(mu_) {
    MutexLock l(mu_);
    return count_;
  }

 private:
  mutable Mutex mu_;
  CondVar cv_;
  int64_t count_ RRPC_GUARDED_BY(mu_);
};

}  // namespace rrpc
