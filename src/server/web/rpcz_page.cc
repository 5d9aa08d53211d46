// /rpcz: the calls in flight now, and the recent slow and failed calls with their timelines
// (rpc/observe/rpcz_store.h), each with its trace id and parent span when it has a trace context;
// /rpcz?trace=ID: the spans of one trace (its calls in flight, and its finished calls kept by the
// store; docs/tracing.md). Runs on the web server's threads.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "rpc/observe/rpcz_store.h"
#include "rrpc/rpc/trace_context.h"
#include "server/web/web_page_areas.h"
#include "server/web/web_page_common.h"
#include "server/web/web_page_format.h"
#include "server/web/webserver.h"
#include "util/metrics/json_writer.h"

namespace rrpc::web_page {

namespace {

// An offset from a call's arrival in microseconds; -1 when the call has not got there.
int64_t OffsetMicros(MonoDelta offset) {
  return offset.ToNanoseconds() < 0 ? -1 : offset.ToMicroseconds();
}

std::string TraceIdOf(const rpc::RpczTraceIds& t) {
  return t.present() ? rpc::FormatTraceId(t.trace_id_high, t.trace_id_low) : "";
}
std::string SpanOf(const rpc::RpczTraceIds& t, uint64_t span) {
  return t.present() ? rpc::FormatSpanId(span) : "";
}

// The trace members of a call's JSON object: empty strings when it has no trace context.
void TraceJson(const rpc::RpczTraceIds& t, JsonObject* o) {
  o->Str("trace_id", TraceIdOf(t))
      .Str("span_id", SpanOf(t, t.span_id))
      .Str("parent_span_id", SpanOf(t, t.parent_span_id))
      .Bool("sampled", t.present() && t.sampled());
}

// An in-flight call's JSON members (the /rpcz page adds its phase times after them).
void InFlightCallJson(const rpc::RpczInFlightCall& c, JsonObject* o) {
  o->Str("service", c.service)
      .Str("method", c.method)
      .Str("peer", c.peer)
      .Int("call_id", c.call_id)
      .Str("state", rpc::RpczCallStateName(c.state))
      .Int("elapsed_us", c.elapsed.ToMicroseconds());
  TraceJson(c.trace, o);
  if (c.is_stream) {
    JsonObject s(o->Member("stream"));
    s.Uint("messages_sent", c.stream.messages_sent)
        .Uint("messages_received", c.stream.messages_received)
        .Uint("bytes_sent", c.stream.bytes_sent)
        .Uint("bytes_received", c.stream.bytes_received)
        .Int("send_credit_bytes", c.stream.send_credit)
        .Uint("unread_bytes", c.stream.unread_bytes)
        .Int("stalled_us", c.stream.stalled.ToMicroseconds());
    s.Close();
  }
}

// A trace cell: the trace id, linking to its spans, and the parent span under it.
void TraceCell(const rpc::RpczTraceIds& t, std::string* out) {
  if (!t.present()) return Cell("mono", "", out);
  const std::string id = TraceIdOf(t);
  *out += "<td class=\"mono\"><a href=\"/rpcz?trace=" + id + "\">" + id + "</a><br>parent " +
          SpanOf(t, t.parent_span_id) + "</td>";
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
        TraceJson(s.trace, o);
      },
      out);
}

std::string RpczJson(const rpc::RpczStore* store, size_t max_calls) {
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
        InFlightCallJson(c, o);
        o->IntOrNull("started_us", OffsetMicros(c.started))
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

// An open stream's figures (docs/streams.md): messages and bytes each way, the writer's credit
// left, what the reader has not read yet, how long the writer has waited for credit.
void StreamCell(const rpc::RpczInFlightCall& c, std::string* out) {
  if (!c.is_stream) return Cell("mono", "", out);
  const rpc::RpczStreamStats& s = c.stream;
  std::string text = "sent " + std::to_string(s.messages_sent) + " (" +
                     std::to_string(s.bytes_sent) + " B), received " +
                     std::to_string(s.messages_received) + " (" + std::to_string(s.bytes_received) +
                     " B); credit " + std::to_string(s.send_credit) + " B, unread " +
                     std::to_string(s.unread_bytes) + " B";
  if (s.stalled > MonoDelta())
    text += ", waiting for credit " + FormatMicros(s.stalled.ToMicroseconds());
  Cell("mono", text, out);
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
              {"In handler", true},
              {"Stream", false},
              {"Trace", false}},
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
    StreamCell(c, out);
    TraceCell(c.trace, out);
    *out += "</tr>\n";
  }
  if (in_flight.calls.empty()) EmptyRow(9, "No calls in flight.", out);
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
                                 {"Sending", true},  {"Total", true},    {"Trace", false}};
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
    TraceCell(s.trace, out);
    if (failed) {
      Cell("err", s.error_code, out);
      Cell("", s.error_message, out);
    }
    *out += "</tr>\n";
  }
  if (rows.empty()) EmptyRow(columns.size(), failed ? "No failed calls." : "No slow calls.", out);
  EndTable(out);
}

std::string RpczHtml(const PageEnv& env, const rpc::RpczStore* store, size_t max_calls) {
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

// One trace: its calls in flight here and the finished ones the store kept.
struct TraceView {
  std::vector<rpc::RpczInFlightCall> in_flight;
  std::vector<rpc::RpczSpan> finished;
};

TraceView ListTrace(const rpc::RpczStore* store, size_t max_calls, uint64_t high, uint64_t low) {
  TraceView view;
  for (rpc::RpczInFlightCall& c : store->ListInFlight(max_calls).calls) {
    if (c.trace.SameTrace(high, low)) view.in_flight.push_back(std::move(c));
  }
  view.finished = store->ListSpans(high, low);
  return view;
}

std::string TraceJsonPage(const TraceView& view, const std::string& trace_id) {
  std::string out;
  JsonObject root(&out);
  root.Int("timestamp_unix_us", NowUnixMicros()).Str("trace_id", trace_id);
  AppendJsonArray(
      view.in_flight, [](const rpc::RpczInFlightCall& c, JsonObject* o) { InFlightCallJson(c, o); },
      root.Member("in_flight"));
  AppendJsonArray(
      view.finished,
      [](const rpc::RpczSpan& span, JsonObject* o) {
        const rpc::RpczSample& s = span.call;
        o->Str("service", span.service)
            .Str("method", span.method)
            .Str("peer", s.peer)
            .Int("call_id", s.call_id)
            .Int("arrival_unix_us", s.arrival_unix_us)
            .IntOrNull("done_us", s.done_us)
            .Str("error_code", s.error_code);
        TraceJson(s.trace, o);
      },
      root.Member("spans"));
  root.Close();
  return out;
}

std::string TraceHtmlPage(const PageEnv& env, const TraceView& view, const std::string& trace_id) {
  std::string content;
  BeginTable("Spans of trace " + trace_id,
             std::to_string(view.in_flight.size() + view.finished.size()),
             "this server's spans: in flight, then finished (sampled traces only), oldest first",
             {{"Arrived", false},
              {"Method", false},
              {"Peer", false},
              {"Call id", true},
              {"Span", false},
              {"Parent span", false},
              {"Total", true},
              {"Error", false}},
             &content);
  for (const rpc::RpczInFlightCall& c : view.in_flight) {
    content += "<tr>";
    Cell("mono nowrap", "in flight", &content);
    MethodCell(c.service, c.method, &content);
    Cell("mono", c.peer, &content);
    Cell("num", std::to_string(c.call_id), &content);
    Cell("mono", SpanOf(c.trace, c.trace.span_id), &content);
    Cell("mono", SpanOf(c.trace, c.trace.parent_span_id), &content);
    Cell("num", FormatMicros(c.elapsed.ToMicroseconds()), &content);
    PillCell(rpc::RpczCallStateName(c.state), &content);
    content += "</tr>\n";
  }
  for (const rpc::RpczSpan& span : view.finished) {
    const rpc::RpczSample& s = span.call;
    content += "<tr>";
    Cell("mono nowrap", FormatWallTime(s.arrival_unix_us), &content);
    MethodCell(span.service, span.method, &content);
    Cell("mono", s.peer, &content);
    Cell("num", std::to_string(s.call_id), &content);
    Cell("mono", SpanOf(s.trace, s.trace.span_id), &content);
    Cell("mono", SpanOf(s.trace, s.trace.parent_span_id), &content);
    Cell("num", FormatMicros(s.done_us), &content);
    Cell("err", s.error_code, &content);
    content += "</tr>\n";
  }
  if (view.in_flight.empty() && view.finished.empty()) {
    EmptyRow(8, "No spans of this trace on this server.", &content);
  }
  EndTable(&content);
  return RenderPage(env, {"RPCs", "/rpcz", "the spans of one trace"}, content);
}

}  // namespace

void RegisterRpczPage(Webserver* web, std::shared_ptr<const PageEnv> env,
                      const rpc::RpczStore* store, size_t max_calls) {
  web->RegisterPage("/rpcz", [env, store, max_calls](const WebRequest& req, WebResponse* resp) {
    const bool as_json = req.GetParam("format") == "json";
    NoStore(resp);
    const std::string trace = req.GetParam("trace");
    if (trace.empty()) {
      resp->content_type = as_json ? kJsonContentType : kHtmlContentType;
      resp->body = as_json ? RpczJson(store, max_calls) : RpczHtml(*env, store, max_calls);
      return;
    }
    uint64_t high = 0, low = 0;
    const Status s = rpc::ParseTraceId(trace, &high, &low);
    if (!s.ok()) {
      resp->status = 400;
      resp->content_type = "text/plain; charset=utf-8";
      resp->body = "bad trace parameter: " + s.message() + "\n";
      return;
    }
    const TraceView view = ListTrace(store, max_calls, high, low);
    const std::string id = rpc::FormatTraceId(high, low);
    resp->content_type = as_json ? kJsonContentType : kHtmlContentType;
    resp->body = as_json ? TraceJsonPage(view, id) : TraceHtmlPage(*env, view, id);
  });
}

}  // namespace rrpc::web_page
