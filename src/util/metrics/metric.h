// Metric: the base of every metric instance (Counter, Gauge, CallbackGauge, HistogramMetric). An
// instance belongs to one MetricEntity, which owns it and keeps it as long as the entity lives.
// Updates are each subclass' own non-virtual, thread-safe methods; this base only serves readers.
#pragma once

#include "util/metrics/metric_prototype.h"
#include "util/metrics/snapshot.h"

namespace rrpc {

class Metric {
 public:
  virtual ~Metric() = default;
  Metric(const Metric&) = delete;
  Metric& operator=(const Metric&) = delete;

  const MetricPrototype& prototype() const { return *prototype_; }

  // Fills `out` with the current value. Thread-safe; may run while other threads update.
  virtual void ReadInto(MetricSnapshot* out) const = 0;

 protected:
  explicit Metric(const MetricPrototype* prototype) : prototype_(prototype) {}

 private:
  const MetricPrototype* const prototype_;  // static data
};

}  // namespace rrpc
