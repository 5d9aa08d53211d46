// RetryBudget: a token bucket that caps a channel's extra attempts (retries, or hedges) at a
// share of its calls, plus a small floor per second so a quiet channel can still retry. Every
// call deposits `ratio` of a token (up to `max_tokens`; the bucket starts full, so a failure
// right after start may still fail over); an extra attempt takes one token, or one of the
// second's `floor_per_second` when the bucket is empty. Thread-safe: deposits are one
// relaxed atomic add; withdrawals (rare) take a lock only to use the floor.
#pragma once

#include <atomic>
#include <cstdint>

#include "rrpc/rpc/cluster/channel_options.h"
#include "rrpc/util/monotime.h"
#include "rrpc/util/mutex.h"

namespace rrpc::rpc {

class RetryBudget {
 public:
  explicit RetryBudget(const RetryBudgetOptions& options);

  void Deposit() {
    if (milli_.fetch_add(per_call_milli_, std::memory_order_relaxed) > max_milli_) {
      milli_.store(max_milli_, std::memory_order_relaxed);
    }
  }
  // Takes a token (or one of this second's floor); false when neither is left.
  bool TryWithdraw(MonoTime now);

  // Attempts refused so far (for tests and metrics).
  int64_t refused() const { return refused_.load(std::memory_order_relaxed); }

 private:
  const int64_t per_call_milli_;
  const int64_t max_milli_;
  const int floor_per_second_;
  std::atomic<int64_t> milli_;  // thousandths of a token
  std::atomic<int64_t> refused_{0};
  Mutex mu_;
  MonoTime second_start_ RRPC_GUARDED_BY(mu_);
  int floor_used_ RRPC_GUARDED_BY(mu_) = 0;
};

}  // namespace rrpc::rpc
