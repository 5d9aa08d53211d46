// AppMetrics: an application's own counters, gauges and histograms, published beside rrpc's in a
// metric registry: a ServerBase's (ServerBase::metric_registry()) shows them on /metrics, as
// `rrpc_app_<name>{entity="app",id="<group>"}`, on /metrics.json and on the web UI's metrics
// page. Look each metric up once (any thread; it takes a lock), keep the handle, and update it
// from any thread without a lock:
//
//   rrpc::AppMetrics metrics(server.metric_registry(), "counter-service");
//   rrpc::AppCounter adds = metrics.Counter("adds_total", "Add calls applied.").value();
//   rrpc::AppHistogram add_time =
//       metrics.Histogram("add_time_us", "Time to apply one Add.", rrpc::AppUnit::kMicroseconds)
//           .value();
//   ...
//   adds.Increment();            // in the handler
//   add_time.Record(elapsed_us);
//
// Names are snake_case ([a-z_][a-z0-9_]*); a counter's ends in "_total", a time's in its unit
// ("_us", "_ms", "_seconds": /metrics shows times in seconds). Asking again for a name returns the
// same metric. A handle stays valid while the registry lives. Names and help texts are kept for
// the life of the process (an application declares a few).
#pragma once

#include <cstdint>
#include <string>

#include "rrpc/util/status.h"

namespace rrpc {

class Counter;
class Gauge;
class HistogramMetric;
class MetricRegistry;

// What a metric counts; time units are integer counts of the unit.
enum class AppUnit { kUnits, kBytes, kRequests, kMicroseconds, kMilliseconds, kSeconds };

// A count that only grows. Thread-safe; copyable (a handle).
class AppCounter {
 public:
  void Increment() { IncrementBy(1); }
  void IncrementBy(int64_t n);
  int64_t value() const;

 private:
  friend class AppMetrics;
  explicit AppCounter(Counter* counter) : counter_(counter) {}
  Counter* counter_;  // owned by its entity in the registry
};

// A value that goes up and down. Thread-safe; copyable (a handle).
class AppGauge {
 public:
  void Set(int64_t value);
  void IncrementBy(int64_t n);
  int64_t value() const;

 private:
  friend class AppMetrics;
  explicit AppGauge(Gauge* gauge) : gauge_(gauge) {}
  Gauge* gauge_;  // owned by its entity in the registry
};

// A distribution (latencies, sizes): /metrics shows buckets, sum and count. Thread-safe.
class AppHistogram {
 public:
  void Record(uint64_t value);
  // Values recorded so far.
  uint64_t count() const;

 private:
  friend class AppMetrics;
  explicit AppHistogram(HistogramMetric* histogram) : histogram_(histogram) {}
  HistogramMetric* histogram_;  // owned by its entity in the registry
};

class AppMetrics {
 public:
  // The metrics of entity ("app", `group`) in `registry`, which must outlive every handle.
  AppMetrics(MetricRegistry* registry, std::string group);

  // InvalidArgument when `name` is not snake_case, or names a metric of another kind already.
  Result<AppCounter> Counter(const std::string& name, const std::string& help,
                             AppUnit unit = AppUnit::kUnits);
  Result<AppGauge> Gauge(const std::string& name, const std::string& help,
                         AppUnit unit = AppUnit::kUnits);
  Result<AppHistogram> Histogram(const std::string& name, const std::string& help,
                                 AppUnit unit = AppUnit::kMicroseconds);

 private:
  MetricRegistry* registry_;
  std::string group_;
};

}  // namespace rrpc
