// The JSON writer: formats a RegistrySnapshot in the schema the web UI dashboard reads.
// Stateless functions: thread-safe.
//
// {"timestamp_ms":N,"entities":[{"type":"method","id":"rtest.EchoService.Echo",
//   "attributes":{"k":"v"},"metrics":[
//     {"name":"calls_total","type":"counter","unit":"requests","help":"...","value":12},
//     {"name":"handler_time_us","type":"histogram","unit":"microseconds","help":"...",
//      "count":5,"sum":123,"min":1,"max":90,"mean":24.6,
//      "p50":20,"p75":30,"p95":80,"p99":90,"p999":90}]}]}
//
// Gauges look like counters with "type":"gauge". Histogram values stay in the metric's unit;
// percentiles carry the histogram's precision (util/histogram.h). Output is compact (one line)
// and valid UTF-8: ill-formed bytes in names or attributes become U+FFFD.
#pragma once

#include <string>
#include <string_view>

#include "util/metrics/snapshot.h"

namespace rrpc {

constexpr char kJsonContentType[] = "application/json";

std::string FormatJson(const RegistrySnapshot& snapshot);

// Appends `s` as a JSON string literal (quotes included), escaping as RFC 8259 requires.
void AppendJsonString(std::string_view s, std::string* out);

}  // namespace rrpc
