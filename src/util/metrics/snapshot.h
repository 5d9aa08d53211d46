// Snapshots: plain copies of metric values taken at one moment, which the writers format. A
// snapshot owns its data and is not shared, so it needs no locking once taken.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "util/histogram.h"
#include "util/metrics/metric_prototype.h"

namespace rrpc {

struct MetricSnapshot {
  const MetricPrototype* prototype = nullptr;  // static data: outlives every snapshot
  int64_t value = 0;                           // counters and gauges
  std::unique_ptr<Histogram> histogram;        // histograms: all stripes merged
};

struct EntitySnapshot {
  std::string type;  // "server", "service", "method", "messenger", "client", ...
  std::string id;    // "rtest.EchoService.Echo"
  std::map<std::string, std::string> attributes;
  std::vector<MetricSnapshot> metrics;  // sorted by name
};

struct RegistrySnapshot {
  int64_t timestamp_ms = 0;              // wall clock, milliseconds since the Unix epoch
  std::vector<EntitySnapshot> entities;  // sorted by (type, id)
};

}  // namespace rrpc
