// Counter: a monotonically increasing count (calls, bytes sent, errors). IncrementBy is the hot
// path: one relaxed atomic add to the calling thread's own cache-line stripe, with no lock and no
// line shared with other writers. value() adds the stripes up. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "util/metrics/metric.h"
#include "util/metrics/striping.h"

namespace rrpc {

class Counter final : public Metric {
 public:
  // Use MetricEntity::FindOrCreateCounter; public for tests and stand-alone use.
  explicit Counter(const MetricPrototype* prototype);

  // REQUIRES: n >= 0.
  void IncrementBy(int64_t n) {
    stripes_[metrics_internal::ThisThreadStripe() & mask_].value.fetch_add(
        n, std::memory_order_relaxed);
  }
  void Increment() { IncrementBy(1); }

  // The sum of every increment that happened before this call (increments racing with it may or
  // may not be counted).
  int64_t value() const;

  void ReadInto(MetricSnapshot* out) const override;

 private:
  struct alignas(metrics_internal::kCacheLineSize) Stripe {
    std::atomic<int64_t> value{0};
  };
  const int mask_;  // NumStripes() - 1
  const std::unique_ptr<Stripe[]> stripes_;
};

}  // namespace rrpc
