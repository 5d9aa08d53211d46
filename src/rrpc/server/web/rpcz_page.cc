// /rpcz: the calls in flight now, and the recent slow and failed calls with their timelines
// (rpc/observe/rpcz_store.h). Runs on the web server's threads.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "rrpc/rpc/observe/rpcz_store.h"
#include "rrpc/server/web/web_page_areas.h"
#include "rrpc/server/web/web_page_format.h"

namespace rrpc::web_page {

namespace {

// An offset from a call's arrival in microseconds; -1 when the call has not got there.
int64_t OffsetMicros(MonoDelta offset) {
  return offset.ToNanoseconds() < 0 ? -1 : offset.ToMicroseconds();
}

void AppendSamplesJson(const std::vector<rpc::RpczSample>& samples, std::string* out) {
  AppendJsonArray(
      samples,
      [](const rpc::RpczSample& s, JsonObject* o) {
        o->Str("peer", s.peer)
            .Int("call_id", s.call_id)
            .Int("arrival_unix_us", s.arrival_unix_us)
            .IntOrNull("started_us", s.started_us)
            .IntOrNull("responded_us", s.responded_us)
            .IntOrNull("done_us", s.done_us)
            .Bool("sent", s.sent)
            .Str("error_code", s.error_code)
            .Str("error_message", s.error_message);
      },
      out);
}

std::string RpczJson(rpc::RpczStore* store, size_t max_calls) {
  const rpc::RpczInFlightList in_flight = store->ListInFlight(max_calls);
  const std::vector<rpc::RpczMethodSamples> methods = store->ListSamples();
  std::string out;
  JsonObject root(&out);
  root.Int("timestamp_unix_us", NowUnixMicros())
      .Int("slow_threshold_us", store->slow_threshold().ToMicroseconds())
      .Uint("in_flight_total", in_flight.total);
  AppendJsonArray(
      in_flight.calls,
      [](const rpc::RpczInFlightCall& c, JsonObject* o) {
        o->Str("service", c.service)
            .Str("method", c.method)
            .Str("peer", c.peer)
            .Int("call_id", c.call_id)
            .Str("state", rpc::RpczCallStateName(c.state))
            .Int("elapsed_us", c.elapsed.ToMicroseconds())
            .IntOrNull("started_us", OffsetMicros(c.started))
            .IntOrNull("responded_us", OffsetMicros(c.responded));
      },
      root.Member("in_flight"));
  AppendJsonArray(
      methods,
      [](const rpc::RpczMethodSamples& m, JsonObject* o) {
        o->Str("service", m.service)
            .Str("method", m.method)
            .Uint("slow_seen", m.slow_seen)
            .Uint("failed_seen", m.failed_seen);
        AppendSamplesJson(m.slow, o->Member("slow"));
        AppendSamplesJson(m.failed, o->Member("failed"));
      },
      root.Member("methods"));
  root.Uint("samples_dropped", store->samples_dropped());
  root.Close();
  return out;
}

void AppendInFlightTable(const rpc::RpczInFlightList& in_flight, std::string* out) {
  std::string count = std::to_string(in_flight.total);
  if (in_flight.calls.size() < in_flight.total) {
    count += " (longest " + std::to_string(in_flight.calls.size()) + " shown)";
  }
  BeginTable("Calls in flight", count, "longest first; times since arrival",
             {{"Method", false},
              {"Peer", false},
              {"Call id", true},
              {"State", false},
              {"Elapsed", true},
              {"In queue", true},
              {"In handler", true}},
             out);
  for (const rpc::RpczInFlightCall& c : in_flight.calls) {
    const int64_t elapsed = c.elapsed.ToMicroseconds();
    const int64_t started = OffsetMicros(c.started);
    const int64_t responded = OffsetMicros(c.responded);
    const int64_t waited = started < 0 ? elapsed : started;
    const int64_t handler = started < 0 ? -1 : (responded < 0 ? elapsed : responded) - started;
    *out += "<tr>";
    MethodCell(c.service, c.method, out);
    Cell("mono", c.peer, out);
    Cell("num", std::to_string(c.call_id), out);
    PillCell(rpc::RpczCallStateName(c.state), out);
    Cell("num", FormatMicros(elapsed), out);
    Cell("num", FormatMicros(waited), out);
    Cell("num", FormatMicros(handler), out);
    *out += "</tr>\n";
  }
  if (in_flight.calls.empty()) EmptyRow(7, "No calls in flight.", out);
  EndTable(out);
}

// Samples of every method in one table, newest first.
struct SampleRow {
  const rpc::RpczMethodSamples* method;
  const rpc::RpczSample* sample;
};

std::vector<SampleRow> MergeSamples(const std::vector<rpc::RpczMethodSamples>& methods, bool failed,
                                    uint64_t* seen) {
  std::vector<SampleRow> rows;
  *seen = 0;
  for (const auto& m : methods) {
    *seen += failed ? m.failed_seen : m.slow_seen;
    for (const auto& s : failed ? m.failed : m.slow) rows.push_back({&m, &s});
  }
  std::stable_sort(rows.begin(), rows.end(), [](const SampleRow& a, const SampleRow& b) {
    return a.sample->arrival_unix_us > b.sample->arrival_unix_us;
  });
  return rows;
}

void AppendSampleTable(std::string_view heading, std::string_view note, bool failed,
                       const std::vector<rpc::RpczMethodSamples>& methods, std::string* out) {
  uint64_t seen = 0;
  const std::vector<SampleRow> rows = MergeSamples(methods, failed, &seen);
  const std::string count = std::to_string(rows.size()) + " kept of " + std::to_string(seen);
  std::vector<Column> columns = {{"Arrived", false}, {"Method", false},  {"Peer", false},
                                 {"Call id", true},  {"In queue", true}, {"In handler", true},
                                 {"Sending", true},  {"Total", true}};
  if (failed) columns.insert(columns.end(), {{"Error", false}, {"Message", false}});
  BeginTable(heading, count, note, columns, out);
  for (const SampleRow& row : rows) {
    const rpc::RpczSample& s = *row.sample;
    *out += "<tr>";
    Cell("mono nowrap", FormatWallTime(s.arrival_unix_us), out);
    MethodCell(row.method->service, row.method->method, out);
    Cell("mono", s.peer, out);
    Cell("num", std::to_string(s.call_id), out);
    Cell("num", FormatPhase(0, s.started_us), out);
    Cell("num", FormatPhase(s.started_us, s.responded_us), out);
    Cell("num", FormatPhase(s.responded_us, s.done_us), out);
    Cell("num", FormatMicros(s.done_us), out);
    if (failed) {
      Cell("err", s.error_code, out);
      Cell("", s.error_message, out);
    }
    *out += "</tr>\n";
  }
  if (rows.empty()) EmptyRow(columns.size(), failed ? "No failed calls." : "No slow calls.", out);
  EndTable(out);
}

std::string RpczHtml(const PageEnv& env, rpc::RpczStore* store, size_t max_calls) {
  const rpc::RpczInFlightList in_flight = store->ListInFlight(max_calls);
  const std::vector<rpc::RpczMethodSamples> methods = store->ListSamples();
  std::string content;
  AppendInFlightTable(in_flight, &content);
  const std::string threshold = FormatMicros(store->slow_threshold().ToMicroseconds());
  AppendSampleTable("Recent slow calls", "successful calls that took " + threshold + " or more",
                    /*failed=*/false, methods, &content);
  AppendSampleTable("Recent failed calls",
                    "answered with an error, or whose response could not be sent",
                    /*failed=*/true, methods, &content);
  return RenderPage(env, {"RPCs", "/rpcz", "calls in flight now, and recent slow and failed calls"},
                    content);
}

}  // namespace

void RegisterRpczPage(Webserver* web, std::shared_ptr<const PageEnv> env, rpc::RpczStore* store,
                      size_t max_calls) {
  RegisterHtmlOrJsonPage(
      web, "/rpcz", [env, store, max_calls] { return RpczHtml(*env, store, max_calls); },
      [store, max_calls] { return RpczJson(store, max_calls); });
}

}  // namespace rrpc::web_page
