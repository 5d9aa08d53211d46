#include "rpc/core/adaptive_limit.h"

#include <algorithm>
#include <cmath>

namespace rrpc::rpc {

AdaptiveLimit::AdaptiveLimit(const AdaptiveLimitOptions& options, int min_limit, int max_limit)
    : options_(options),
      min_limit_(std::max(1, min_limit)),
      max_limit_(std::max(std::max(1, min_limit), max_limit)),
      limit_(max_limit_) {}

void AdaptiveLimit::OnStarted(MonoDelta queue_time, MonoTime now) {
  MutexLock l(mu_);
  if (!window_open_) {
    window_open_ = true;
    window_end_ = now + options_.window;
  }
  window_calls_++;
  window_queue_us_ += queue_time.ToMicroseconds();
  if (now < window_end_) return;
  const int64_t mean_us = window_queue_us_ / window_calls_;
  const int current = limit_.load(std::memory_order_relaxed);
  int next = current;
  if (mean_us >= options_.target_queue_time.ToMicroseconds()) {
    next = static_cast<int>(std::floor(current * options_.decrease));
    if (next == current) next = current - 1;
  } else if (refused_.exchange(false, std::memory_order_relaxed)) {
    next = current + options_.increase;
  }
  limit_.store(std::clamp(next, min_limit_, max_limit_), std::memory_order_relaxed);
  window_end_ = now + options_.window;
  window_calls_ = 0;
  window_queue_us_ = 0;
}

}  // namespace rrpc::rpc
