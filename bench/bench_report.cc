#include "bench/bench_report.h"

#include <cinttypes>
#include <string>
#include <utility>
#include <vector>

namespace rrpc::bench {

namespace {

// One RESULT / JSON field, already formatted.
struct Field {
  std::string key;
  std::string value;
  bool numeric = true;
};

std::string Fmt(const char* format, double v) {
  char buf[64];
  snprintf(buf, sizeof(buf), format, v);
  return buf;
}

double PerRequest(double total, uint64_t requests) {
  return requests == 0 ? 0.0 : total / static_cast<double>(requests);
}

}  // namespace

void PrintReport(const BenchConfig& config, const ModeOutput& o, bool json, FILE* out) {
  const UsageDelta usage = SubtractUsage(o.window_start, o.window_end);
  const double seconds = o.measured.ToSeconds();
  const uint64_t n = o.completed;
  const double rate = seconds > 0 ? static_cast<double>(n) / seconds : 0.0;
  auto us = [&](double percentile) {
    return static_cast<double>(o.latency_ns.ValueAtPercentile(percentile)) / 1e3;
  };
  const double p50 = us(50), p99 = us(99), p999 = us(99.9);
  const double max_us = static_cast<double>(o.latency_ns.max()) / 1e3;
  const double mean_us = o.latency_ns.mean() / 1e3;
  const int64_t peak_rss_kb = ReadProcessStatusKb("VmHWM");
  const int64_t rss_kb = ReadProcessStatusKb("VmRSS");
  const bool sparse = config.mode == BenchMode::kSparse;
  const double rss_per_conn_kb =
      sparse && o.connections > 0
          ? static_cast<double>(o.rss_all_open_kb - o.rss_before_open_kb) / o.connections
          : 0.0;
  // Payload bytes moved per second, both directions: what raw-tcp-limit --sidecar_bytes reports.
  const double bytes_per_call =
      static_cast<double>(config.payload_bytes + config.response_bytes + 2 * config.sidecar_bytes);
  const double bulk_calls_per_sec =
      seconds > 0 ? static_cast<double>(o.bulk_completed) / seconds : 0.0;
  const bool stream = config.mode == BenchMode::kStream;
  const char* unit = config.mode == BenchMode::kCps ? "connections" : stream ? "messages" : "calls";
  // Stream mode: one way (the stream's messages, payload and sidecars).
  const double bytes_per_sec =
      config.mode == BenchMode::kMixed
          ? bulk_calls_per_sec * static_cast<double>(2 * (config.mixed_bulk_bytes + 64))
      : stream ? (seconds > 0 ? static_cast<double>(o.stream_bytes) / seconds : 0.0)
               : rate * bytes_per_call;
  const double probe_rate = seconds > 0 ? static_cast<double>(o.probe_completed) / seconds : 0.0;
  auto probe_us = [&](double percentile) {
    return static_cast<double>(o.probe_latency_ns.ValueAtPercentile(percentile)) / 1e3;
  };
  // Payload bytes copied per call over the window, by side and kind (util/copy_counter.h).
  auto copied = [&](CopySide side, CopyKind kind) {
    return PerRequest(static_cast<double>(o.window_end.copies.get(side, kind) -
                                          o.window_start.copies.get(side, kind)),
                      n);
  };
  const double client_body = copied(CopySide::kClient, CopyKind::kBody);
  const double client_stream = copied(CopySide::kClient, CopyKind::kStream);
  const double server_body = copied(CopySide::kServer, CopyKind::kBody);
  const double server_stream = copied(CopySide::kServer, CopyKind::kStream);

  // ---- Human summary.
  fprintf(out, "rpc-bench rrpc %s over %s: request %zu B, response %zu B, sidecar %zu B; ",
          ModeName(config.mode), config.transport.c_str(), config.payload_bytes,
          config.response_bytes, config.sidecar_bytes);
  switch (config.mode) {
    case BenchMode::kThroughput:
      fprintf(out, "%d client threads x %d calls in flight\n", config.client_threads,
              config.async_call_concurrency);
      break;
    case BenchMode::kLatency:
      fprintf(out, "1 call at a time (%s)\n",
              config.latency_sync_calls ? "synchronous calls from a client thread"
                                        : "each issued by the last one's callback");
      break;
    case BenchMode::kCps:
      fprintf(out, "%d client threads, one connection per call\n", config.client_threads);
      break;
    case BenchMode::kSparse:
      fprintf(out, "%d connections, %d senders, %" PRId64 " us between calls\n", config.connections,
              config.senders, config.sleep_us);
      break;
    case BenchMode::kMixed:
      fprintf(out,
              "small calls 1 at a time beside %d bulk calls in flight of %zu B sidecars (%s)\n",
              config.mixed_bulk_streams, config.mixed_bulk_bytes,
              config.mixed_separate_messenger ? "bulk through a messenger of its own"
                                              : "one client messenger for both");
      break;
    case BenchMode::kStream:
      fprintf(out, "%d stream(s) %s on one connection%s\n", config.streams,
              DirectionName(config.stream_direction),
              config.with_unary_probe ? ", beside a chain of unary calls (the probe)" : "");
      break;
  }
  if (!config.target.empty()) {
    fprintf(out, "  servers: through a channel over %s\n", config.target.c_str());
  } else {
    fprintf(out, "  server: %s %s\n",
            config.in_process_server ? "in this process at" : "external at",
            config.server.ToString().c_str());
  }
  fprintf(out, "  %" PRIu64 " %s in %.3f s = %.1f %s/s", n, unit, seconds, rate, unit);
  if (config.mode == BenchMode::kMixed) {
    fprintf(out, " small; bulk %.1f calls/s = %.3f GB/s of payload", bulk_calls_per_sec,
            bytes_per_sec / 1e9);
  } else if (stream) {
    fprintf(out, " = %.3f GB/s one way (payload and sidecars)", bytes_per_sec / 1e9);
  } else if (config.mode != BenchMode::kCps) {
    fprintf(out, " = %.3f GB/s of payload (requests + responses)", bytes_per_sec / 1e9);
  }
  fputc('\n', out);
  if (config.mode == BenchMode::kThroughput || config.mode == BenchMode::kLatency) {
    fprintf(out,
            "  payload bytes copied per call: client %.1f body + %.1f stream, server %.1f body + "
            "%.1f stream (body: protobuf serialize/parse; stream: frame or sidecar bytes moved)\n",
            client_body, client_stream, server_body, server_stream);
  }
  const double rejected_per_sec = seconds > 0 ? static_cast<double>(o.rejected) / seconds : 0.0;
  const double retries_per_call = PerRequest(static_cast<double>(o.retries), n);
  if (config.mode == BenchMode::kThroughput) {
    fprintf(out,
            "  too busy: %" PRIu64 " refusals (%.1f/s), %" PRIu64
            " calls sent again (%.4f retries per completed call)\n",
            o.rejected, rejected_per_sec, o.retries, retries_per_call);
  }
  fprintf(out, "  %slatency us: p50 %.1f  p99 %.1f  p99.9 %.1f  max %.1f  mean %.1f\n",
          stream ? "message delivery " : "", p50, p99, p999, max_us, mean_us);
  if (stream && config.with_unary_probe) {
    fprintf(out,
            "  probe: %" PRIu64
            " unary calls = %.1f/s; latency us: p50 %.1f  p99 %.1f  p99.9 "
            "%.1f\n",
            o.probe_completed, probe_rate, probe_us(50), probe_us(99), probe_us(99.9));
  }
  const CostTotals& p = usage.process;
  fprintf(out, "  process CPU: user %.3f s + sys %.3f s = %.2f cores; %.2f us per %s\n", p.user_s,
          p.sys_s, usage.elapsed_s > 0 ? p.cpu_s() / usage.elapsed_s : 0.0,
          PerRequest(p.cpu_s() * 1e6, n), config.mode == BenchMode::kCps ? "connection" : "call");
  fprintf(out,
          "  context switches: %" PRIu64 " voluntary + %" PRIu64 " involuntary = %.3f per %s\n",
          p.voluntary_cs, p.involuntary_cs, PerRequest(static_cast<double>(p.cs()), n),
          config.mode == BenchMode::kCps ? "connection" : "call");
  auto print_role = [&](const char* role, const CostTotals& c) {
    fprintf(out,
            "  %-6s threads: user %.3f s, sys %.3f s = %.2f us/req; cs %" PRIu64 " + %" PRIu64
            " = %.3f /req\n",
            role, c.user_s, c.sys_s, PerRequest(c.cpu_s() * 1e6, n), c.voluntary_cs,
            c.involuntary_cs, PerRequest(static_cast<double>(c.cs()), n));
  };
  print_role("client", usage.client);
  if (config.in_process_server) print_role("server", usage.server);
  print_role("other", usage.other);
  if (usage.threads_lost > 0) {
    fprintf(out,
            "  (%d threads ended inside the window: their CPU is missing from the split: %s)\n",
            usage.threads_lost, usage.lost_names.c_str());
  }
  fprintf(out, "  memory: RSS %" PRId64 " kB now, peak %" PRId64 " kB\n", rss_kb, peak_rss_kb);
  if (sparse) {
    fprintf(out,
            "  %" PRId64 " connections: RSS %" PRId64 " kB before opening, %" PRId64
            " kB all open (%.2f kB per connection), %" PRId64 " kB after the run (%.2f kB)\n",
            o.connections, o.rss_before_open_kb, o.rss_all_open_kb, rss_per_conn_kb,
            o.rss_after_run_kb,
            o.connections > 0
                ? static_cast<double>(o.rss_after_run_kb - o.rss_before_open_kb) / o.connections
                : 0.0);
    if (config.sparse_messenger_client) {
      fprintf(out, "  held by one client messenger; established connections by transport:");
      for (const auto& [transport, count] : o.connections_by_transport) {
        fprintf(out, " %s %" PRId64, transport.c_str(), count);
      }
      fputc('\n', out);
    }
    if (config.in_process_server) {
      fprintf(out, config.sparse_messenger_client
                       ? "  (client and server share this process: the figure is both sides' cost;"
                         " run --server_only and --server_addr to split them)\n"
                       : "  (client and server share this process: the figure is both sides' cost;"
                         " the raw client holds ~12 B per connection, so nearly all of it is the"
                         " server's)\n");
    } else {
      fprintf(out,
              "  (the server runs elsewhere: this is the client's cost only; the server's shows in"
              " its own RSS, which --server_only prints when it stops)\n");
    }
  }

  // ---- Machine-readable fields, in RESULT order.
  std::vector<Field> fields = {
      {"impl", "rrpc", false},
      {"mode", ModeName(config.mode), false},
      {"transport", config.transport, false},
      {"payload", std::to_string(config.payload_bytes)},
      {"conc", std::to_string(config.Concurrency())},
      {"reqs_per_sec", Fmt("%.1f", rate)},
      {"p50_us", Fmt("%.2f", p50)},
      {"p99_us", Fmt("%.2f", p99)},
      {"p999_us", Fmt("%.2f", p999)},
      {"user_cpu_s", Fmt("%.3f", p.user_s)},
      {"sys_cpu_s", Fmt("%.3f", p.sys_s)},
      {"rss_kb", std::to_string(peak_rss_kb)},
  };
  if (sparse) {
    fields.push_back({"conns", std::to_string(o.connections)});
    fields.push_back({"rss_per_conn_kb", Fmt("%.3f", rss_per_conn_kb)});
    fields.push_back({"rss_all_open_kb", std::to_string(o.rss_all_open_kb)});
    fields.push_back({"mean_us", Fmt("%.2f", mean_us)});
    fields.push_back(
        {"sparse_client", config.sparse_messenger_client ? "messenger" : "raw", false});
  }
  if (config.mode != BenchMode::kCps) {
    fields.push_back({"bytes_per_sec", Fmt("%.0f", bytes_per_sec)});
  }
  if (config.mode == BenchMode::kThroughput || config.mode == BenchMode::kLatency) {
    fields.push_back({"client_body_copy_bytes_per_call", Fmt("%.1f", client_body)});
    fields.push_back({"client_stream_copy_bytes_per_call", Fmt("%.1f", client_stream)});
    fields.push_back({"server_body_copy_bytes_per_call", Fmt("%.1f", server_body)});
    fields.push_back({"server_stream_copy_bytes_per_call", Fmt("%.1f", server_stream)});
  }
  if (config.mode == BenchMode::kMixed) {
    fields.push_back({"bulk_calls_per_sec", Fmt("%.1f", bulk_calls_per_sec)});
  }
  if (stream) {
    fields.push_back({"msgs_per_sec", Fmt("%.1f", rate)});
    fields.push_back({"direction", DirectionName(config.stream_direction), false});
    fields.push_back({"streams", std::to_string(config.streams)});
    fields.push_back({"sidecar_bytes", std::to_string(config.sidecar_bytes)});
    if (config.with_unary_probe) {
      fields.push_back({"probe_calls_per_sec", Fmt("%.1f", probe_rate)});
      fields.push_back({"probe_p50_us", Fmt("%.2f", probe_us(50))});
      fields.push_back({"probe_p99_us", Fmt("%.2f", probe_us(99))});
      fields.push_back({"probe_p999_us", Fmt("%.2f", probe_us(99.9))});
    }
  }
  if (config.mode == BenchMode::kThroughput) {
    fields.push_back({"compression",
                      std::string(rpc::CompressionName(config.client_messenger.compression.codec)),
                      false});
    if (o.wire_bytes >= 0) {
      fields.push_back(
          {"wire_bytes_per_call", Fmt("%.1f", PerRequest(static_cast<double>(o.wire_bytes), n))});
    }
    fields.push_back({"rejected_per_sec", Fmt("%.1f", rejected_per_sec)});
    fields.push_back({"retries_per_call", Fmt("%.4f", retries_per_call)});
  }
  fields.push_back({"cpu_us_per_req", Fmt("%.3f", PerRequest(p.cpu_s() * 1e6, n))});
  fields.push_back({"cs_per_req", Fmt("%.4f", PerRequest(static_cast<double>(p.cs()), n))});
  fields.push_back(
      {"client_cpu_us_per_req", Fmt("%.3f", PerRequest(usage.client.cpu_s() * 1e6, n))});
  if (config.in_process_server) {
    fields.push_back(
        {"server_cpu_us_per_req", Fmt("%.3f", PerRequest(usage.server.cpu_s() * 1e6, n))});
  }
  fields.push_back(
      {"client_cs_per_req", Fmt("%.4f", PerRequest(static_cast<double>(usage.client.cs()), n))});
  if (config.in_process_server) {
    fields.push_back(
        {"server_cs_per_req", Fmt("%.4f", PerRequest(static_cast<double>(usage.server.cs()), n))});
  }

  if (json) {
    // Extra context only JSON carries.
    std::vector<Field> all = fields;
    all.push_back({"response", std::to_string(config.response_bytes)});
    all.push_back({"sidecar", std::to_string(config.sidecar_bytes)});
    all.push_back({"completed", std::to_string(n)});
    all.push_back({"measured_s", Fmt("%.6f", seconds)});
    all.push_back({"max_us", Fmt("%.2f", max_us)});
    all.push_back({"mean_us", Fmt("%.2f", mean_us)});
    all.push_back({"voluntary_cs", std::to_string(p.voluntary_cs)});
    all.push_back({"involuntary_cs", std::to_string(p.involuntary_cs)});
    all.push_back({"client_cpu_s", Fmt("%.3f", usage.client.cpu_s())});
    if (config.in_process_server) {
      all.push_back({"server_cpu_s", Fmt("%.3f", usage.server.cpu_s())});
    }
    all.push_back({"in_process_server", config.in_process_server ? "true" : "false"});
    fputc('{', out);
    for (size_t i = 0; i < all.size(); i++) {
      // Keys and values are ours (no quotes or backslashes to escape).
      fprintf(out, "%s\"%s\":", i == 0 ? "" : ",", all[i].key.c_str());
      if (all[i].numeric || all[i].value == "true" || all[i].value == "false") {
        fputs(all[i].value.c_str(), out);
      } else {
        fprintf(out, "\"%s\"", all[i].value.c_str());
      }
    }
    fputs("}\n", out);
  }

  fputs("RESULT", out);
  for (const Field& f : fields) fprintf(out, " %s=%s", f.key.c_str(), f.value.c_str());
  fputc('\n', out);
  fflush(out);
}

}  // namespace rrpc::bench
