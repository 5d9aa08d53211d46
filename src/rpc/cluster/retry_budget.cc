#include "rrpc/rpc/cluster/retry_budget.h"

namespace rrpc::rpc {

RetryBudget::RetryBudget(const RetryBudgetOptions& options)
    : per_call_milli_(static_cast<int64_t>(options.ratio * 1000)),
      max_milli_(static_cast<int64_t>(options.max_tokens) * 1000),
      floor_per_second_(options.floor_per_second),
      milli_(max_milli_) {}

bool RetryBudget::TryWithdraw(MonoTime now) {
  int64_t have = milli_.load(std::memory_order_relaxed);
  while (have >= 1000) {
    if (milli_.compare_exchange_weak(have, have - 1000, std::memory_order_relaxed)) return true;
  }
  MutexLock l(mu_);
  if (now - second_start_ >= MonoDelta::FromSeconds(1)) {
    second_start_ = now;
    floor_used_ = 0;
  }
  if (floor_used_ < floor_per_second_) {
    floor_used_++;
    return true;
  }
  refused_.fetch_add(1, std::memory_order_relaxed);
  return false;
}

}  // namespace rrpc::rpc
