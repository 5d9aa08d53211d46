// AdaptiveLimit: a pool's concurrency limit (calls queued or running at once), moved by how long
// calls wait in the pool's queue (AdaptiveLimitOptions, rrpc/rpc/service_pool_options.h). Time is
// whatever the caller passes, so tests drive it; the pool passes the times it already read for
// each call (arrival, start of handling). Thread-safe: limit() from reactors, OnStarted() and
// OnRefused() from any thread.
//
//   AdaptiveLimit limit(options, /*min=*/2, /*max=*/66);
//   reactor:  if (in_flight >= limit.limit()) { limit.OnRefused(); RespondTooBusy(call); }
//   worker:   limit.OnStarted(call->handling_started() - call->arrival_time(), now);
#pragma once

#include <atomic>
#include <cstdint>

#include "rrpc/rpc/service_pool_options.h"
#include "rrpc/util/monotime.h"
#include "rrpc/util/mutex.h"

namespace rrpc::rpc {

class AdaptiveLimit {
 public:
  // `min_limit` and `max_limit` are the resolved bounds (the options' zeros already replaced).
  AdaptiveLimit(const AdaptiveLimitOptions& options, int min_limit, int max_limit);

  int limit() const { return limit_.load(std::memory_order_relaxed); }
  int min_limit() const { return min_limit_; }
  int max_limit() const { return max_limit_; }

  // A call started its handler at `now` after waiting `queue_time` in the queue. Closes the
  // window when `now` is past its end, and moves the limit.
  void OnStarted(MonoDelta queue_time, MonoTime now) RRPC_EXCLUDES(mu_);
  // A call was refused because the pool held `limit()` calls: the limit was the constraint, so a
  // window without queueing may raise it.
  void OnRefused() { refused_.store(true, std::memory_order_relaxed); }

 private:
  const AdaptiveLimitOptions options_;
  const int min_limit_;
  const int max_limit_;
  std::atomic<int> limit_;
  std::atomic<bool> refused_{false};

  Mutex mu_;
  bool window_open_ RRPC_GUARDED_BY(mu_) = false;  // false: the next call opens one
  MonoTime window_end_ RRPC_GUARDED_BY(mu_);
  int64_t window_calls_ RRPC_GUARDED_BY(mu_) = 0;
  int64_t window_queue_us_ RRPC_GUARDED_BY(mu_) = 0;  // summed over the window's calls
};

}  // namespace rrpc::rpc
