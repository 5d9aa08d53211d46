// The Prometheus writer: formats a RegistrySnapshot in the text exposition format 0.0.4, for a
// /metrics endpoint. Stateless functions: thread-safe.
//
//   # HELP rrpc_handler_time_seconds Time in the handler.
//   # TYPE rrpc_handler_time_seconds histogram
//   rrpc_handler_time_seconds_bucket{entity="method",id="rtest.EchoService.Echo",le="1e-06"} 0
//   ...
//   rrpc_handler_time_seconds_bucket{entity="method",id="rtest.EchoService.Echo",le="2e-05"} 3
//   ...
//   rrpc_handler_time_seconds_bucket{entity="method",id="rtest.EchoService.Echo",le="50"} 5
//   rrpc_handler_time_seconds_bucket{entity="method",id="rtest.EchoService.Echo",le="+Inf"} 5
//   rrpc_handler_time_seconds_sum{entity="method",id="rtest.EchoService.Echo"} 0.000123
//   rrpc_handler_time_seconds_count{entity="method",id="rtest.EchoService.Echo"} 5
//
// Names follow Prometheus' conventions (see PrometheusMetricName); time values are converted to
// seconds. All samples of one name form one group, whatever entity they come from; the entity's
// type and id are the labels (attributes are left to the JSON output, to keep label sets small
// and stable). A histogram lists cumulative counts at a fixed ladder of `le` boundaries, 1, 2 and
// 5 times each power of ten of its unit up to the histogram's range (1 us ... 50 s for a latency
// histogram in microseconds), then "+Inf": the same series on every scrape, whatever was
// recorded. The counts come from the fine Histogram buckets and never include a value above le
// (see AppendHistogram in the .cc for how a fine bucket straddling a boundary is counted).
#pragma once

#include <string>

#include "util/metrics/metric_prototype.h"
#include "util/metrics/snapshot.h"

namespace rrpc {

constexpr char kPrometheusContentType[] = "text/plain; version=0.0.4; charset=utf-8";

// "rrpc_" + the prototype's name, with the unit as Prometheus expects it: time units become a
// "_seconds" suffix (replacing a suffix like "_us" or "_ms"), bytes a "_bytes" suffix when the
// name lacks it, and counters end in "_total". E.g. counter "calls_total" (requests) ->
// rrpc_calls_total; histogram "handler_time_us" (microseconds) -> rrpc_handler_time_seconds;
// counter "sent_bytes_total" (bytes) -> rrpc_sent_bytes_total.
std::string PrometheusMetricName(const MetricPrototype& prototype);

std::string FormatPrometheus(const RegistrySnapshot& snapshot);

}  // namespace rrpc
