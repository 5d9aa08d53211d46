// Turns a mode's measurements into rpc-bench's output: a human summary, optionally one JSON
// object, and the RESULT line that build-support/bench-compare and the peers share:
//   RESULT impl=rrpc mode=<mode> transport=tcp payload=<bytes> conc=<n> reqs_per_sec=<f>
//     p50_us=<f> p99_us=<f> p999_us=<f> user_cpu_s=<f> sys_cpu_s=<f> rss_kb=<i>
//     [conns=<n> rss_per_conn_kb=<f>] [bytes_per_sec=<f>] <mode's fields>
//     <client/server split fields>
// Stream mode: reqs_per_sec and msgs_per_sec are messages per second, bytes_per_sec one way, the
// latency fields the messages' delivery; probe_* the unary probe's calls.
// Main thread only.
#pragma once

#include <cstdio>

#include "bench/bench_config.h"
#include "bench/bench_runner.h"

namespace rrpc::bench {

// Writes the summary, the JSON object (when `json`) and the RESULT line to `out`.
void PrintReport(const BenchConfig& config, const ModeOutput& output, bool json, FILE* out);

}  // namespace rrpc::bench
