#include "util/metrics/metric_prototype.h"

namespace rrpc {

const char* MetricTypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "unknown";
}

const char* MetricUnitName(MetricUnit unit) {
  switch (unit) {
    case MetricUnit::kUnits:
      return "units";
    case MetricUnit::kRequests:
      return "requests";
    case MetricUnit::kCalls:
      return "calls";
    case MetricUnit::kErrors:
      return "errors";
    case MetricUnit::kConnections:
      return "connections";
    case MetricUnit::kMessages:
      return "messages";
    case MetricUnit::kEntries:
      return "entries";
    case MetricUnit::kThreads:
      return "threads";
    case MetricUnit::kBytes:
      return "bytes";
    case MetricUnit::kNanoseconds:
      return "nanoseconds";
    case MetricUnit::kMicroseconds:
      return "microseconds";
    case MetricUnit::kMilliseconds:
      return "milliseconds";
    case MetricUnit::kSeconds:
      return "seconds";
  }
  return "units";
}

uint64_t MetricUnitsPerSecond(MetricUnit unit) {
  switch (unit) {
    case MetricUnit::kNanoseconds:
      return 1'000'000'000;
    case MetricUnit::kMicroseconds:
      return 1'000'000;
    case MetricUnit::kMilliseconds:
      return 1'000;
    case MetricUnit::kSeconds:
      return 1;
    default:
      return 0;
  }
}

uint64_t MetricPrototype::EffectiveHistogramMax() const {
  if (histogram_max_value != 0) return histogram_max_value;
  switch (unit) {
    case MetricUnit::kNanoseconds:
      return 60'000'000'000;
    case MetricUnit::kMicroseconds:
      return 60'000'000;
    case MetricUnit::kMilliseconds:
      return 60'000;
    case MetricUnit::kSeconds:
      return 60;
    case MetricUnit::kBytes:
      return uint64_t{1} << 30;
    default:
      return 1'000'000'000;
  }
}

bool IsValidMetricName(const char* name) {
  if (name == nullptr || *name == '\0') return false;
  if (*name >= '0' && *name <= '9') return false;
  for (const char* p = name; *p != '\0'; p++) {
    const bool ok = (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_';
    if (!ok) return false;
  }
  return true;
}

}  // namespace rrpc
