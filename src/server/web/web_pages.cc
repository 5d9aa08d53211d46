#include "server/web/web_pages.h"

#include <dirent.h>
#include <gflags/gflags.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <initializer_list>
#include <map>
#include <memory>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "rpc/core/reactor.h"
#include "rpc/core/service_pool.h"
#include "rpc/messenger.h"
#include "rpc/observe/rpcz_store.h"
#include "server/web/webserver.h"
#include "util/metrics/json_writer.h"
#include "util/metrics/metric_registry.h"
#include "util/metrics/prometheus_writer.h"
#include "util/thread.h"

namespace rrpc {

namespace {

constexpr char kHtmlContentType[] = "text/html; charset=utf-8";

// The pages' own styles, on top of the dashboard's (whose variables, top bar and panels they
// reuse). Served as a file: the content policy refuses inline styles.
constexpr char kPagesCss[] =
    R"css(/* rrpc data pages (/rpcz, /varz, ...): tables on the dashboard's look. */
a.brand { color: inherit; text-decoration: none; }
a.brand:hover { text-decoration: none; }
.links a.active { background: rgba(255, 255, 255, 0.14); color: #fff; }

.page-head {
  display: flex;
  flex-wrap: wrap;
  align-items: baseline;
  gap: 6px 14px;
  margin: 4px 0 18px;
}
.page-head h1 { font-size: 20px; font-weight: 700; margin: 0; }
.page-head .sub { color: var(--muted); }
.page-head .formats { margin-left: auto; font-size: 12.5px; }
.formats a {
  font-family: var(--mono);
  padding: 3px 8px;
  border: 1px solid var(--border);
  border-radius: 6px;
  background: var(--panel);
}

.section-head .count { color: var(--muted); font-weight: 500; }
.section-head .note { color: var(--muted); font-size: 12.5px; }

.table-panel {
  background: var(--panel);
  border: 1px solid var(--border);
  border-radius: 12px;
  box-shadow: var(--shadow);
  overflow-x: auto;
}
table.data { width: 100%; border-collapse: collapse; font-size: 13px; }
table.data th {
  text-align: left;
  color: var(--faint);
  font-weight: 600;
  font-size: 11.5px;
  text-transform: uppercase;
  letter-spacing: 0.04em;
  padding: 9px 12px 7px;
  border-bottom: 1px solid var(--border);
  white-space: nowrap;
}
table.data td { padding: 6px 12px; border-bottom: 1px solid var(--grid); vertical-align: top; }
table.data tr:last-child td { border-bottom: none; }
table.data tbody tr:hover td { background: rgba(37, 99, 235, 0.04); }
table.data .num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
table.data .mono { font-family: var(--mono); font-size: 12.5px; overflow-wrap: anywhere; }
table.data .muted { color: var(--muted); }
table.data .nowrap { white-space: nowrap; overflow-wrap: normal; }
table.data td.desc { color: var(--muted); min-width: 260px; }
table.data tr.changed td.value { font-weight: 650; color: var(--accent); }
.svc { color: var(--muted); }
.fn { font-weight: 650; }

.pill {
  display: inline-block;
  font-size: 11px;
  font-weight: 650;
  text-transform: uppercase;
  letter-spacing: 0.04em;
  padding: 1px 8px;
  border-radius: 999px;
  background: var(--grid);
  color: var(--muted);
}
.pill.queued { background: rgba(247, 144, 9, 0.14); color: var(--warn); }
.pill.running { background: rgba(37, 99, 235, 0.12); color: var(--accent); }
.pill.sending, .pill.open { background: rgba(18, 183, 106, 0.14); color: var(--ok); }
.pill.failed, .pill.closed { background: rgba(240, 68, 56, 0.12); color: var(--bad); }
.err { color: var(--bad); font-family: var(--mono); font-size: 12.5px; }
.empty-row { color: var(--muted); font-style: italic; padding: 14px 12px; }
)css";

struct NavLink {
  const char* path;
  const char* label;
};
// The dashboard's links (index.html), so that every page has the same top bar.
constexpr NavLink kNavLinks[] = {
    {"/metrics", "/metrics"}, {"/metrics.json", "/metrics.json"}, {"/rpcz", "/rpcz"},
    {"/varz", "/varz"},       {"/threadz", "/threadz"},           {"/connections", "/connections"},
    {"/healthz", "/healthz"},
};

// ---------------------------------------------------------------- formatting

void AppendEscaped(std::string_view s, std::string* out) {
  for (char c : s) {
    switch (c) {
      case '&':
        *out += "&amp;";
        break;
      case '<':
        *out += "&lt;";
        break;
      case '>':
        *out += "&gt;";
        break;
      case '"':
        *out += "&quot;";
        break;
      case '\'':
        *out += "&#39;";
        break;
      default:
        out->push_back(c);
    }
  }
}

std::string Printf(const char* format, double v) {
  char buf[64];
  snprintf(buf, sizeof(buf), format, v);
  return buf;
}

// "850 µs", "12.3 ms", "2.05 s"; "—" for a negative (not reached) time.
std::string FormatMicros(int64_t us) {
  if (us < 0) return "—";
  if (us < 1000) return std::to_string(us) + " µs";
  if (us < 10'000) return Printf("%.2f ms", static_cast<double>(us) / 1e3);
  if (us < 1'000'000) return Printf("%.1f ms", static_cast<double>(us) / 1e3);
  return Printf("%.2f s", static_cast<double>(us) / 1e6);
}

// The time from `from_us` to `to_us` on a call's timeline, or "—" if it never got to either.
std::string FormatPhase(int64_t from_us, int64_t to_us) {
  return from_us < 0 || to_us < 0 ? "—" : FormatMicros(to_us - from_us);
}

std::string FormatBytes(uint64_t bytes) {
  if (bytes < 1024) return std::to_string(bytes) + " B";
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes) / 1024;
  size_t u = 0;
  while (v >= 1024 && u + 1 < sizeof(units) / sizeof(units[0])) {
    v /= 1024;
    u++;
  }
  return Printf(v < 10 ? "%.2f " : "%.1f ", v) + units[u];
}

// "42 s", "3 m 12 s", "2 h 05 m", "4 d 03 h".
std::string FormatAge(double seconds) {
  if (seconds < 0) seconds = 0;
  const int64_t s = static_cast<int64_t>(seconds);
  char buf[64];
  if (s < 60) {
    snprintf(buf, sizeof(buf), "%.1f s", seconds);
  } else if (s < 3600) {
    snprintf(buf, sizeof(buf), "%" PRId64 " m %02" PRId64 " s", s / 60, s % 60);
  } else if (s < 86400) {
    snprintf(buf, sizeof(buf), "%" PRId64 " h %02" PRId64 " m", s / 3600, s % 3600 / 60);
  } else {
    snprintf(buf, sizeof(buf), "%" PRId64 " d %02" PRId64 " h", s / 86400, s % 86400 / 3600);
  }
  return buf;
}

// "2026-12-02 14:02:41.123 UTC".
std::string FormatWallTime(int64_t unix_us) {
  const time_t secs = static_cast<time_t>(unix_us / 1'000'000);
  tm t{};
  gmtime_r(&secs, &t);
  char buf[64];
  snprintf(buf, sizeof(buf), "%04d-%02d-%02d %02d:%02d:%02d.%03d UTC", t.tm_year + 1900,
           t.tm_mon + 1, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec,
           static_cast<int>(unix_us % 1'000'000 / 1000));
  return buf;
}

int64_t NowUnixMicros() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000 + ts.tv_nsec / 1000;
}

// Appends one JSON object member by member: {"a":1,"b":"x"}. Strings are escaped.
class JsonObject {
 public:
  explicit JsonObject(std::string* out) : out_(out) { out_->push_back('{'); }
  JsonObject& Str(std::string_view key, std::string_view value) {
    AppendJsonString(value, Key(key));
    return *this;
  }
  JsonObject& Int(std::string_view key, int64_t value) {
    *Key(key) += std::to_string(value);
    return *this;
  }
  // Null for a negative value: a time on a call's timeline that was not reached.
  JsonObject& IntOrNull(std::string_view key, int64_t value) {
    *Key(key) += value < 0 ? "null" : std::to_string(value);
    return *this;
  }
  JsonObject& Uint(std::string_view key, uint64_t value) {
    *Key(key) += std::to_string(value);
    return *this;
  }
  JsonObject& Double(std::string_view key, double value) {
    *Key(key) += Printf("%.6g", value);
    return *this;
  }
  JsonObject& Bool(std::string_view key, bool value) {
    *Key(key) += value ? "true" : "false";
    return *this;
  }
  // Starts a member whose value (an array, an object) the caller appends to the result next.
  std::string* Member(std::string_view key) { return Key(key); }
  void Close() { out_->push_back('}'); }

 private:
  std::string* Key(std::string_view key) {
    if (!first_) out_->push_back(',');
    first_ = false;
    AppendJsonString(key, out_);
    out_->push_back(':');
    return out_;
  }
  std::string* out_;
  bool first_ = true;
};

// ---------------------------------------------------------------- page frame

struct PageEnv {
  std::string server_name;
};

bool WantsJson(const WebRequest& req) { return req.GetParam("format") == "json"; }

void NoStore(WebResponse* resp) { resp->headers.emplace_back("Cache-Control", "no-store"); }

// The document head, the top bar with `active` highlighted, and the page's title line.
void BeginPage(const PageEnv& env, std::string_view title, std::string_view active,
               std::string_view subtitle, bool has_json, std::string* out) {
  *out +=
      "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>rrpc · ";
  AppendEscaped(title, out);
  if (!env.server_name.empty()) {
    *out += " · ";
    AppendEscaped(env.server_name, out);
  }
  *out +=
      "</title>\n<link rel=\"icon\" href=\"/static/favicon.svg\" type=\"image/svg+xml\">\n"
      "<link rel=\"stylesheet\" href=\"/static/dashboard.css\">\n"
      "<link rel=\"stylesheet\" href=\"/static/pages.css\">\n</head>\n<body>\n"
      "<header class=\"topbar\">\n  <a class=\"brand\" href=\"/\">"
      "<img class=\"logo\" src=\"/static/favicon.svg\" alt=\"\" width=\"26\" height=\"26\">"
      "<span class=\"name\">rrpc</span><span class=\"server\">";
  AppendEscaped(env.server_name, out);
  *out += "</span></a>\n  <nav class=\"links\" aria-label=\"Server pages\">\n";
  for (const NavLink& link : kNavLinks) {
    const bool is_active = active == link.path;
    *out += "    <a href=\"";
    *out += link.path;
    *out += is_active ? "\" class=\"active\" aria-current=\"page\">" : "\">";
    *out += link.label;
    *out += "</a>\n";
  }
  *out += "  </nav>\n</header>\n<main>\n<div class=\"page-head\"><h1>";
  AppendEscaped(title, out);
  *out += "</h1><span class=\"sub\">";
  AppendEscaped(subtitle, out);
  *out += "</span>";
  if (has_json) {
    *out += "<span class=\"formats\"><a href=\"";
    *out += active;
    *out += "?format=json\">JSON</a></span>";
  }
  *out += "</div>\n";
}

void EndPage(std::string* out) {
  *out += "</main>\n<footer>Generated ";
  AppendEscaped(FormatWallTime(NowUnixMicros()), out);
  *out += " · reload for fresh values</footer>\n</body>\n</html>\n";
}

// A section: a heading with a count and a note, then a table in a panel.
void BeginTable(std::string_view heading, std::string_view count, std::string_view note,
                std::initializer_list<std::pair<const char*, bool>> columns, std::string* out) {
  *out += "<section>\n<div class=\"section-head\"><h2>";
  AppendEscaped(heading, out);
  if (!count.empty()) {
    *out += " <span class=\"count\">";
    AppendEscaped(count, out);
    *out += "</span>";
  }
  *out += "</h2>";
  if (!note.empty()) {
    *out += "<span class=\"note\">";
    AppendEscaped(note, out);
    *out += "</span>";
  }
  *out += "</div>\n<div class=\"table-panel\"><table class=\"data\">\n<thead><tr>";
  for (const auto& [name, numeric] : columns) {
    *out += numeric ? "<th class=\"num\">" : "<th>";
    *out += name;
    *out += "</th>";
  }
  *out += "</tr></thead>\n<tbody>\n";
}

void EmptyRow(size_t columns, std::string_view text, std::string* out) {
  *out += "<tr><td class=\"empty-row\" colspan=\"" + std::to_string(columns) + "\">";
  AppendEscaped(text, out);
  *out += "</td></tr>\n";
}

void EndTable(std::string* out) { *out += "</tbody>\n</table></div>\n</section>\n"; }

// One cell: `cls` may be empty.
void Cell(std::string_view cls, std::string_view text, std::string* out) {
  if (cls.empty()) {
    *out += "<td>";
  } else {
    *out += "<td class=\"";
    *out += cls;
    *out += "\">";
  }
  AppendEscaped(text, out);
  *out += "</td>";
}

// "rrpc.rtest.EchoService" + "Echo" as the dashboard shows a method: service muted, method bold.
void MethodCell(std::string_view service, std::string_view method, std::string* out) {
  *out += "<td class=\"mono\"><span class=\"svc\">";
  AppendEscaped(service, out);
  *out += ".</span><span class=\"fn\">";
  AppendEscaped(method, out);
  *out += "</span></td>";
}

void PillCell(std::string_view state, std::string* out) {
  *out += "<td><span class=\"pill ";
  AppendEscaped(state, out);
  *out += "\">";
  AppendEscaped(state, out);
  *out += "</span></td>";
}

// ---------------------------------------------------------------- /rpcz

void AppendSampleJson(const rpc::RpczSample& s, std::string* out) {
  JsonObject o(out);
  o.Str("peer", s.peer)
      .Int("call_id", s.call_id)
      .Int("arrival_unix_us", s.arrival_unix_us)
      .IntOrNull("started_us", s.started_us)
      .IntOrNull("responded_us", s.responded_us)
      .IntOrNull("done_us", s.done_us)
      .Bool("sent", s.sent)
      .Str("error_code", s.error_code)
      .Str("error_message", s.error_message);
  o.Close();
}

void AppendSamplesJson(const std::vector<rpc::RpczSample>& samples, std::string* out) {
  out->push_back('[');
  for (size_t i = 0; i < samples.size(); i++) {
    if (i > 0) out->push_back(',');
    AppendSampleJson(samples[i], out);
  }
  out->push_back(']');
}

std::string RpczJson(rpc::RpczStore* store, size_t max_calls) {
  const rpc::RpczInFlightList in_flight = store->ListInFlight(max_calls);
  const std::vector<rpc::RpczMethodSamples> methods = store->ListSamples();
  std::string out;
  JsonObject root(&out);
  root.Int("timestamp_unix_us", NowUnixMicros())
      .Int("slow_threshold_us", store->slow_threshold().ToMicroseconds())
      .Uint("in_flight_total", in_flight.total);
  std::string* calls = root.Member("in_flight");
  calls->push_back('[');
  for (size_t i = 0; i < in_flight.calls.size(); i++) {
    const rpc::RpczInFlightCall& c = in_flight.calls[i];
    if (i > 0) calls->push_back(',');
    JsonObject o(calls);
    o.Str("service", c.service)
        .Str("method", c.method)
        .Str("peer", c.peer)
        .Int("call_id", c.call_id)
        .Str("state", rpc::RpczCallStateName(c.state))
        .Int("elapsed_us", c.elapsed.ToMicroseconds())
        .IntOrNull("started_us", c.started.ToNanoseconds() < 0 ? -1 : c.started.ToMicroseconds())
        .IntOrNull("responded_us",
                   c.responded.ToNanoseconds() < 0 ? -1 : c.responded.ToMicroseconds());
    o.Close();
  }
  calls->push_back(']');
  std::string* ms = root.Member("methods");
  ms->push_back('[');
  for (size_t i = 0; i < methods.size(); i++) {
    const rpc::RpczMethodSamples& m = methods[i];
    if (i > 0) ms->push_back(',');
    JsonObject o(ms);
    o.Str("service", m.service)
        .Str("method", m.method)
        .Uint("slow_seen", m.slow_seen)
        .Uint("failed_seen", m.failed_seen);
    AppendSamplesJson(m.slow, o.Member("slow"));
    AppendSamplesJson(m.failed, o.Member("failed"));
    o.Close();
  }
  ms->push_back(']');
  root.Uint("samples_dropped", store->samples_dropped());
  root.Close();
  return out;
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
  if (failed) {
    BeginTable(heading, count, note,
               {{"Arrived", false},
                {"Method", false},
                {"Peer", false},
                {"Call id", true},
                {"In queue", true},
                {"In handler", true},
                {"Sending", true},
                {"Total", true},
                {"Error", false},
                {"Message", false}},
               out);
  } else {
    BeginTable(heading, count, note,
               {{"Arrived", false},
                {"Method", false},
                {"Peer", false},
                {"Call id", true},
                {"In queue", true},
                {"In handler", true},
                {"Sending", true},
                {"Total", true}},
               out);
  }
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
  if (rows.empty()) EmptyRow(failed ? 10 : 8, failed ? "No failed calls." : "No slow calls.", out);
  EndTable(out);
}

std::string RpczHtml(const PageEnv& env, rpc::RpczStore* store, size_t max_calls) {
  const rpc::RpczInFlightList in_flight = store->ListInFlight(max_calls);
  const std::vector<rpc::RpczMethodSamples> methods = store->ListSamples();
  std::string out;
  BeginPage(env, "RPCs", "/rpcz", "calls in flight now, and recent slow and failed calls", true,
            &out);

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
             &out);
  for (const rpc::RpczInFlightCall& c : in_flight.calls) {
    const int64_t elapsed = c.elapsed.ToMicroseconds();
    const int64_t started = c.started.ToNanoseconds() < 0 ? -1 : c.started.ToMicroseconds();
    const int64_t responded = c.responded.ToNanoseconds() < 0 ? -1 : c.responded.ToMicroseconds();
    const int64_t waited = started < 0 ? elapsed : started;
    const int64_t handler = started < 0 ? -1 : (responded < 0 ? elapsed : responded) - started;
    out += "<tr>";
    MethodCell(c.service, c.method, &out);
    Cell("mono", c.peer, &out);
    Cell("num", std::to_string(c.call_id), &out);
    PillCell(rpc::RpczCallStateName(c.state), &out);
    Cell("num", FormatMicros(elapsed), &out);
    Cell("num", FormatMicros(waited), &out);
    Cell("num", FormatMicros(handler), &out);
    out += "</tr>\n";
  }
  if (in_flight.calls.empty()) EmptyRow(7, "No calls in flight.", &out);
  EndTable(&out);

  const std::string threshold = FormatMicros(store->slow_threshold().ToMicroseconds());
  AppendSampleTable("Recent slow calls", "successful calls that took " + threshold + " or more",
                    /*failed=*/false, methods, &out);
  AppendSampleTable("Recent failed calls",
                    "answered with an error, or whose response could not be sent",
                    /*failed=*/true, methods, &out);
  EndPage(&out);
  return out;
}

// ---------------------------------------------------------------- /connections

std::vector<rpc::ConnectionInfo> SortedConnections(rpc::Messenger* messenger) {
  std::vector<rpc::ConnectionInfo> conns = messenger->DumpConnections();
  std::sort(conns.begin(), conns.end(), [](const auto& a, const auto& b) {
    return std::tie(a.direction, a.remote, a.reactor) < std::tie(b.direction, b.remote, b.reactor);
  });
  return conns;
}

std::string ConnectionsJson(rpc::Messenger* messenger) {
  const std::vector<rpc::ConnectionInfo> conns = SortedConnections(messenger);
  std::string out;
  JsonObject root(&out);
  root.Str("messenger", messenger->name()).Uint("total", conns.size());
  std::string* arr = root.Member("connections");
  arr->push_back('[');
  for (size_t i = 0; i < conns.size(); i++) {
    const rpc::ConnectionInfo& c = conns[i];
    if (i > 0) arr->push_back(',');
    JsonObject o(arr);
    o.Str("peer", c.remote)
        .Str("direction", c.direction)
        .Str("state", c.state)
        .Str("transport", c.transport)
        .Int("reactor", c.reactor)
        .Uint("bytes_received", c.bytes_received)
        .Uint("bytes_sent", c.bytes_sent)
        .Uint("calls_in_flight", c.calls_in_flight)
        .Bool("reads_paused", c.reads_paused)
        .Double("age_seconds", c.age_seconds);
    o.Close();
  }
  arr->push_back(']');
  root.Close();
  return out;
}

std::string ConnectionsHtml(const PageEnv& env, rpc::Messenger* messenger) {
  const std::vector<rpc::ConnectionInfo> conns = SortedConnections(messenger);
  std::string out;
  BeginPage(env, "Connections", "/connections",
            "server connections were accepted from the peer; client connections were opened to "
            "it",
            true, &out);
  BeginTable("Connections", std::to_string(conns.size()), "",
             {{"Peer", false},
              {"Direction", false},
              {"State", false},
              {"Transport", false},
              {"Reactor", true},
              {"Bytes in", true},
              {"Bytes out", true},
              {"Calls in flight", true},
              {"Age", true}},
             &out);
  for (const rpc::ConnectionInfo& c : conns) {
    out += "<tr>";
    Cell("mono", c.remote, &out);
    Cell("", c.direction, &out);
    // A server connection whose peer leaves its responses unread stops being read from.
    PillCell(c.reads_paused ? c.state + " (reads paused)" : c.state, &out);
    Cell("", c.transport, &out);
    Cell("num", std::to_string(c.reactor), &out);
    Cell("num", FormatBytes(c.bytes_received), &out);
    Cell("num", FormatBytes(c.bytes_sent), &out);
    Cell("num", std::to_string(c.calls_in_flight), &out);
    Cell("num", FormatAge(c.age_seconds), &out);
    out += "</tr>\n";
  }
  if (conns.empty()) EmptyRow(9, "No connections.", &out);
  EndTable(&out);
  EndPage(&out);
  return out;
}

// ---------------------------------------------------------------- /varz

// Flags whose values may be secrets are listed with their value hidden: the UI has no
// authentication.
bool IsSensitiveFlag(const std::string& name) {
  std::string lower = name;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* word : {"password", "passwd", "secret", "token", "credential"}) {
    if (lower.find(word) != std::string::npos) return true;
  }
  return false;
}

constexpr char kRedacted[] = "<redacted>";

std::vector<gflags::CommandLineFlagInfo> SortedFlags() {
  std::vector<gflags::CommandLineFlagInfo> flags;
  gflags::GetAllFlags(&flags);
  std::sort(flags.begin(), flags.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  for (auto& f : flags) {
    if (IsSensitiveFlag(f.name)) {
      if (!f.current_value.empty()) f.current_value = kRedacted;
      if (!f.default_value.empty()) f.default_value = kRedacted;
    }
  }
  return flags;
}

std::string BaseName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string VarzJson() {
  const auto flags = SortedFlags();
  std::string out;
  JsonObject root(&out);
  std::string* arr = root.Member("flags");
  arr->push_back('[');
  for (size_t i = 0; i < flags.size(); i++) {
    const auto& f = flags[i];
    if (i > 0) arr->push_back(',');
    JsonObject o(arr);
    o.Str("name", f.name)
        .Str("type", f.type)
        .Str("value", f.current_value)
        .Str("default", f.default_value)
        .Bool("is_default", f.is_default)
        .Str("description", f.description)
        .Str("file", BaseName(f.filename));
    o.Close();
  }
  arr->push_back(']');
  root.Close();
  return out;
}

std::string VarzHtml(const PageEnv& env) {
  const auto flags = SortedFlags();
  size_t changed = 0;
  for (const auto& f : flags) changed += f.is_default ? 0 : 1;
  std::string out;
  BeginPage(env, "Flags", "/varz", "every command-line flag, its current value and its default",
            true, &out);
  BeginTable("Flags", std::to_string(flags.size()) + " (" + std::to_string(changed) + " set)",
             "flags that were set are highlighted",
             {{"Name", false},
              {"Value", false},
              {"Default", false},
              {"Type", false},
              {"Description", false},
              {"Defined in", false}},
             &out);
  for (const auto& f : flags) {
    out += f.is_default ? "<tr>" : "<tr class=\"changed\">";
    Cell("mono nowrap", f.name, &out);
    Cell("mono value", f.current_value, &out);
    Cell("mono muted", f.default_value, &out);
    Cell("muted", f.type, &out);
    Cell("desc", f.description, &out);
    Cell("mono muted nowrap", BaseName(f.filename), &out);
    out += "</tr>\n";
  }
  if (flags.empty()) EmptyRow(6, "No flags.", &out);
  EndTable(&out);
  EndPage(&out);
  return out;
}

// ---------------------------------------------------------------- /threadz

struct ThreadRow {
  std::string category;  // "" for a thread rrpc did not start
  std::string name;
  pid_t tid = 0;
  char state = '?';
  double user_cpu_s = -1;  // -1: unknown (the thread exited meanwhile)
  double system_cpu_s = -1;
};

// Reads /proc/self/task/<tid>/stat: the OS name, state and CPU times. False if it is gone.
bool ReadTaskStat(pid_t tid, std::string* comm, char* state, double* user_s, double* system_s) {
  const std::string path = "/proc/self/task/" + std::to_string(tid) + "/stat";
  FILE* f = fopen(path.c_str(), "re");
  if (f == nullptr) return false;
  char buf[1024];
  const size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  // "tid (comm) S ppid ...": comm may hold spaces and parentheses, so parse around the last ')'.
  const std::string_view line(buf, n);
  const size_t open = line.find('(');
  const size_t close = line.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open) {
    return false;
  }
  *comm = std::string(line.substr(open + 1, close - open - 1));
  // After ") ": field 3 (state) onwards; utime and stime are fields 14 and 15.
  std::vector<std::string_view> fields;
  size_t pos = close + 1;
  while (pos < line.size() && fields.size() < 13) {
    while (pos < line.size() && line[pos] == ' ') pos++;
    const size_t end = std::min(line.find(' ', pos), line.size());
    if (end > pos) fields.push_back(line.substr(pos, end - pos));
    pos = end;
  }
  if (fields.size() < 13) return false;
  static const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  *state = fields[0].empty() ? '?' : fields[0][0];
  *user_s =
      static_cast<double>(std::strtoull(std::string(fields[11]).c_str(), nullptr, 10)) / ticks;
  *system_s =
      static_cast<double>(std::strtoull(std::string(fields[12]).c_str(), nullptr, 10)) / ticks;
  return true;
}

std::vector<pid_t> ListTaskIds() {
  std::vector<pid_t> tids;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return tids;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    tids.push_back(static_cast<pid_t>(std::atoi(e->d_name)));
  }
  closedir(dir);
  std::sort(tids.begin(), tids.end());
  return tids;
}

// rrpc's threads first (as the registry sorts them), then the process's other threads by tid.
std::vector<ThreadRow> CollectThreads() {
  std::vector<ThreadRow> rows;
  std::set<pid_t> listed;
  for (const ThreadInfo& t : ThreadRegistry::Get()->List()) {
    ThreadRow row;
    row.category = t.category;
    row.name = t.name;
    row.tid = t.tid;
    std::string comm;
    ReadTaskStat(t.tid, &comm, &row.state, &row.user_cpu_s, &row.system_cpu_s);
    listed.insert(t.tid);
    rows.push_back(std::move(row));
  }
  for (pid_t tid : ListTaskIds()) {
    if (listed.count(tid) > 0) continue;
    ThreadRow row;
    row.tid = tid;
    if (!ReadTaskStat(tid, &row.name, &row.state, &row.user_cpu_s, &row.system_cpu_s)) continue;
    rows.push_back(std::move(row));
  }
  return rows;
}

std::string ThreadzJson() {
  const std::vector<ThreadRow> rows = CollectThreads();
  std::string out;
  JsonObject root(&out);
  root.Int("pid", getpid());
  std::string* arr = root.Member("threads");
  arr->push_back('[');
  for (size_t i = 0; i < rows.size(); i++) {
    const ThreadRow& t = rows[i];
    if (i > 0) arr->push_back(',');
    JsonObject o(arr);
    o.Str("category", t.category)
        .Str("name", t.name)
        .Int("tid", t.tid)
        .Bool("registered", !t.category.empty())
        .Str("state", std::string(1, t.state));
    if (t.user_cpu_s >= 0) {
      o.Double("user_cpu_s", t.user_cpu_s).Double("system_cpu_s", t.system_cpu_s);
    }
    o.Close();
  }
  arr->push_back(']');
  root.Close();
  return out;
}

std::string ThreadzHtml(const PageEnv& env) {
  const std::vector<ThreadRow> rows = CollectThreads();
  size_t registered = 0;
  for (const ThreadRow& t : rows) registered += t.category.empty() ? 0 : 1;
  std::string out;
  BeginPage(env, "Threads", "/threadz",
            "rrpc's threads, then the process's others; CPU time from /proc since each started",
            true, &out);
  BeginTable("Threads", std::to_string(rows.size()) + " (" + std::to_string(registered) + " rrpc)",
             "state: R running, S sleeping, D disk wait",
             {{"Category", false},
              {"Name", false},
              {"TID", true},
              {"State", false},
              {"User CPU", true},
              {"System CPU", true}},
             &out);
  for (const ThreadRow& t : rows) {
    out += "<tr>";
    Cell(t.category.empty() ? "muted" : "", t.category.empty() ? "other" : t.category, &out);
    Cell("mono", t.name, &out);
    Cell("num", std::to_string(t.tid), &out);
    Cell("mono", std::string(1, t.state), &out);
    Cell("num", t.user_cpu_s < 0 ? "—" : Printf("%.2f s", t.user_cpu_s), &out);
    Cell("num", t.system_cpu_s < 0 ? "—" : Printf("%.2f s", t.system_cpu_s), &out);
    out += "</tr>\n";
  }
  if (rows.empty()) EmptyRow(6, "No threads.", &out);
  EndTable(&out);
  EndPage(&out);
  return out;
}

// A page served as HTML, or as JSON when the request asks for it (?format=json); never cached.
void RegisterHtmlOrJsonPage(Webserver* web, const std::string& path,
                            std::function<std::string()> html, std::function<std::string()> json) {
  web->RegisterPage(path, [html = std::move(html), json = std::move(json)](const WebRequest& req,
                                                                           WebResponse* resp) {
    const bool as_json = WantsJson(req);
    resp->content_type = as_json ? kJsonContentType : kHtmlContentType;
    resp->body = as_json ? json() : html();
    NoStore(resp);
  });
}

}  // namespace

std::string EscapeHtml(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  AppendEscaped(s, &out);
  return out;
}

void RegisterRpcPages(Webserver* web, rpc::Messenger* messenger, MetricRegistry* registry,
                      WebPagesOptions options) {
  if (registry == nullptr && messenger != nullptr) registry = messenger->metric_registry();
  auto env = std::make_shared<PageEnv>();
  env->server_name = !options.server_name.empty() ? options.server_name
                     : messenger != nullptr       ? messenger->name()
                                                  : "";
  web->RegisterStaticAsset("/static/pages.css", "text/css; charset=utf-8", kPagesCss);

  if (registry != nullptr) {
    web->RegisterPage("/metrics", [registry](const WebRequest&, WebResponse* resp) {
      resp->content_type = kPrometheusContentType;
      resp->body = FormatPrometheus(registry->TakeSnapshot());
      NoStore(resp);
    });
    web->RegisterPage("/metrics.json", [registry](const WebRequest&, WebResponse* resp) {
      resp->content_type = kJsonContentType;
      resp->body = FormatJson(registry->TakeSnapshot());
      NoStore(resp);
    });
  }

  if (messenger != nullptr) {
    rpc::RpczStore* store = messenger->service_pool()->rpcz_store();
    const size_t max_calls = options.max_rpcz_calls;
    RegisterHtmlOrJsonPage(
        web, "/rpcz", [env, store, max_calls] { return RpczHtml(*env, store, max_calls); },
        [store, max_calls] { return RpczJson(store, max_calls); });
    RegisterHtmlOrJsonPage(
        web, "/connections", [env, messenger] { return ConnectionsHtml(*env, messenger); },
        [messenger] { return ConnectionsJson(messenger); });
  }

  RegisterHtmlOrJsonPage(
      web, "/varz", [env] { return VarzHtml(*env); }, [] { return VarzJson(); });
  RegisterHtmlOrJsonPage(
      web, "/threadz", [env] { return ThreadzHtml(*env); }, [] { return ThreadzJson(); });

  auto health_check = std::move(options.health_check);
  web->RegisterPage("/healthz", [messenger, health_check](const WebRequest&, WebResponse* resp) {
    Status s = health_check ? health_check() : Status::OK();
    if (s.ok() && messenger != nullptr && messenger->closing()) {
      s = Status::ServiceUnavailable("messenger shutting down");
    }
    NoStore(resp);
    if (s.ok()) {
      resp->body = "OK\n";
    } else {
      resp->status = 503;
      resp->body = "UNHEALTHY: " + s.ToString() + "\n";
    }
  });
}

}  // namespace rrpc
