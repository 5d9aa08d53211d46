// MetricPrototype: the static description of a metric (name, label, unit, help text, type),
// declared once per program and instantiated per entity. Plain constant data: thread-safe.
//
// Declare prototypes as `inline constexpr` in a header (one object program-wide, so every
// translation unit sees the same address) or as `constexpr` in the one .cc that uses them:
//
//   inline constexpr MetricPrototype METRIC_rpc_calls_total = MetricPrototype::Counter(
//       "calls_total", "Calls", MetricUnit::kRequests, "RPC calls handled by this method.");
//   inline constexpr MetricPrototype METRIC_handler_time_us = MetricPrototype::Histogram(
//       "handler_time_us", "Handler time", MetricUnit::kMicroseconds,
//       "Time from a worker picking a call up to the handler returning.");
//
//   Counter* calls = method_entity->FindOrCreateCounter(&METRIC_rpc_calls_total);  // cache it
//   calls->Increment();                                                           // hot path
//
// Naming: snake_case, unit last, counters ending in `_total` ("sent_bytes_total"). The JSON
// writer uses the name as written; the Prometheus writer derives `rrpc_<name>` with Prometheus'
// unit suffix (see prometheus_writer.h).
#pragma once

#include <cstdint>

namespace rrpc {

enum class MetricType { kCounter, kGauge, kHistogram };

// What one unit of a metric's value counts. Time units are integer counts of that unit.
enum class MetricUnit {
  kUnits,  // a plain count with no better name
  kRequests,
  kCalls,
  kErrors,
  kConnections,
  kMessages,
  kEntries,
  kThreads,
  kBytes,
  kNanoseconds,
  kMicroseconds,
  kMilliseconds,
  kSeconds,
};

// "counter", "gauge", "histogram".
const char* MetricTypeName(MetricType type);
// "requests", "bytes", "microseconds", ...: the JSON "unit" field.
const char* MetricUnitName(MetricUnit unit);
// For time units, how many of the unit make a second (1'000'000 for microseconds); 0 for other
// units. An integer, so that value / MetricUnitsPerSecond() is the double nearest the exact
// quotient (40 us prints as 4e-05, not 3.9999999999999996e-05 as 40 * 1e-6 would).
uint64_t MetricUnitsPerSecond(MetricUnit unit);

struct MetricPrototype {
  const char* name;   // unique within an entity, snake_case: "handler_time_us"
  const char* label;  // a short human title: "Handler time"
  MetricUnit unit;
  const char* description;  // help text: what is counted, and when
  MetricType type;
  // Histograms only: the largest value tracked with full precision, in `unit`. 0 picks a
  // default: 60 s for time units, 1 GiB for bytes, 10^9 otherwise.
  uint64_t histogram_max_value = 0;

  static constexpr MetricPrototype Counter(const char* name, const char* label, MetricUnit unit,
                                           const char* description) {
    return MetricPrototype{name, label, unit, description, MetricType::kCounter, 0};
  }
  static constexpr MetricPrototype Gauge(const char* name, const char* label, MetricUnit unit,
                                         const char* description) {
    return MetricPrototype{name, label, unit, description, MetricType::kGauge, 0};
  }
  static constexpr MetricPrototype Histogram(const char* name, const char* label, MetricUnit unit,
                                             const char* description, uint64_t max_value = 0) {
    return MetricPrototype{name, label, unit, description, MetricType::kHistogram, max_value};
  }

  // histogram_max_value, or the unit's default when it is 0.
  uint64_t EffectiveHistogramMax() const;
};

// True when `name` is a usable metric name: [a-z_][a-z0-9_]*, not empty.
bool IsValidMetricName(const char* name);

}  // namespace rrpc
