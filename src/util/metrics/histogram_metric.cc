#include "util/metrics/histogram_metric.h"

#include <glog/logging.h>

#include <algorithm>

namespace rrpc {

namespace {
int HistogramStripes() {
  return std::min(metrics_internal::NumStripes(), HistogramMetric::kMaxStripes);
}
}  // namespace

HistogramMetric::HistogramMetric(const MetricPrototype* prototype)
    : Metric(prototype),
      max_value_(prototype->EffectiveHistogramMax()),
      mask_(HistogramStripes() - 1),
      stripes_(new std::atomic<Stripe*>[HistogramStripes()]) {
  DCHECK(prototype->type == MetricType::kHistogram) << prototype->name;
  for (int i = 0; i <= mask_; i++) stripes_[i].store(nullptr, std::memory_order_relaxed);
}

HistogramMetric::~HistogramMetric() {
  for (int i = 0; i <= mask_; i++) delete stripes_[i].load(std::memory_order_acquire);
}

HistogramMetric::Stripe* HistogramMetric::CreateStripe(int index) {
  // Two threads sharing the slot may race here; the loser frees its copy and uses the winner's.
  auto fresh = std::make_unique<Stripe>(max_value_);
  Stripe* expected = nullptr;
  if (stripes_[index].compare_exchange_strong(expected, fresh.get(), std::memory_order_acq_rel,
                                              std::memory_order_acquire)) {
    return fresh.release();
  }
  return expected;
}

Histogram HistogramMetric::Snapshot() const {
  Histogram merged(max_value_);
  for (int i = 0; i <= mask_; i++) {
    Stripe* stripe = stripes_[i].load(std::memory_order_acquire);
    if (stripe == nullptr) continue;
    metrics_internal::StripeLockGuard l(&stripe->lock);
    merged.Merge(stripe->histogram);
  }
  return merged;
}

uint64_t HistogramMetric::TotalCount() const {
  uint64_t total = 0;
  for (int i = 0; i <= mask_; i++) {
    Stripe* stripe = stripes_[i].load(std::memory_order_acquire);
    if (stripe == nullptr) continue;
    metrics_internal::StripeLockGuard l(&stripe->lock);
    total += stripe->histogram.count();
  }
  return total;
}

void HistogramMetric::ReadInto(MetricSnapshot* out) const {
  out->prototype = &prototype();
  out->histogram = std::make_unique<Histogram>(Snapshot());
}

}  // namespace rrpc
