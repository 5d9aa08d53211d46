// HistogramMetric: a Histogram (util/histogram.h) that many threads record into at once, for
// latencies and sizes. Record() takes no global lock and writes no line other threads write:
// each thread records into its own stripe's Histogram under that stripe's spin lock, which is
// uncontended unless more threads than stripes record at the same instant. Readers merge the
// stripes. Thread-safe.
//
// Memory: a stripe's Histogram (about 20 KiB for 60 s in microseconds) is allocated on the first
// Record() that needs it, so a metric costs only as many stripes as threads have used it, at most
// kMaxStripes.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "util/histogram.h"
#include "util/metrics/metric.h"
#include "util/metrics/striping.h"

namespace rrpc {

class HistogramMetric final : public Metric {
 public:
  // Caps the memory of a histogram metric on large machines.
  static constexpr int kMaxStripes = 8;

  // Use MetricEntity::FindOrCreateHistogram; public for tests and stand-alone use. Values up to
  // prototype->EffectiveHistogramMax() are tracked with full precision.
  explicit HistogramMetric(const MetricPrototype* prototype);
  ~HistogramMetric() override;

  void Record(uint64_t value) {
    const int index = metrics_internal::ThisThreadStripe() & mask_;
    Stripe* stripe = stripes_[index].load(std::memory_order_acquire);
    if (__builtin_expect(stripe == nullptr, 0)) stripe = CreateStripe(index);
    metrics_internal::StripeLockGuard l(&stripe->lock);
    stripe->histogram.Record(value);
  }

  // Every stripe merged: the values recorded before this call (and maybe some racing with it).
  Histogram Snapshot() const;
  // The number of values recorded, without copying buckets.
  uint64_t TotalCount() const;

  void ReadInto(MetricSnapshot* out) const override;

 private:
  struct alignas(metrics_internal::kCacheLineSize) Stripe {
    explicit Stripe(uint64_t max_value) : histogram(max_value) {}
    metrics_internal::StripeLock lock;
    Histogram histogram;  // Guarded by lock.
  };

  Stripe* CreateStripe(int index);

  const uint64_t max_value_;
  const int mask_;  // number of stripes - 1
  // Written once per slot (null to a Stripe this object owns), then only read.
  const std::unique_ptr<std::atomic<Stripe*>[]> stripes_;
};

}  // namespace rrpc
