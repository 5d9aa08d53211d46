// /connections: the messenger's connections (peer, direction, state, transport and what it says of
// itself, reactor, bytes, calls in flight, age). Runs on the web server's threads.
#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "rrpc/rpc/connection_info.h"
#include "rrpc/rpc/messenger.h"
#include "server/web/web_page_areas.h"
#include "server/web/web_page_format.h"

namespace rrpc::web_page {

namespace {

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
  AppendJsonArray(
      conns,
      [](const rpc::ConnectionInfo& c, JsonObject* o) {
        o->Str("peer", c.remote)
            .Str("direction", c.direction)
            .Str("state", c.state)
            .Str("transport", c.transport);
        if (!c.transport_details.empty()) {
          JsonObject details(o->Member("transport_details"));
          for (const auto& [name, value] : c.transport_details) details.Str(name, value);
          details.Close();
        }
        o->Int("reactor", c.reactor)
            .Uint("bytes_received", c.bytes_received)
            .Uint("bytes_sent", c.bytes_sent)
            .Uint("calls_in_flight", c.calls_in_flight)
            .Bool("reads_paused", c.reads_paused)
            .Int("inbound_memory_bytes", c.inbound_memory_bytes)
            .Int("inbound_memory_peak_bytes", c.inbound_memory_peak_bytes)
            .Double("age_seconds", c.age_seconds);
      },
      root.Member("connections"));
  root.Close();
  return out;
}

std::string ConnectionsHtml(const PageEnv& env, rpc::Messenger* messenger) {
  const std::vector<rpc::ConnectionInfo> conns = SortedConnections(messenger);
  std::string content;
  const std::vector<Column> columns = {
      {"Peer", false},      {"Direction", false},      {"State", false},
      {"Transport", false}, {"Reactor", true},         {"Bytes in", true},
      {"Bytes out", true},  {"Calls in flight", true}, {"Inbound memory (peak)", true},
      {"Age", true}};
  BeginTable("Connections", std::to_string(conns.size()), "", columns, &content);
  for (const rpc::ConnectionInfo& c : conns) {
    content += "<tr>";
    Cell("mono", c.remote, &content);
    Cell("", c.direction, &content);
    // A server connection whose peer leaves its responses unread stops being read from.
    PillCell(c.reads_paused ? c.state + " (reads paused)" : c.state, &content);
    // What the transport says of itself (RDMA: credits, inline and non-inline sends...).
    std::string transport = c.transport;
    for (size_t i = 0; i < c.transport_details.size(); ++i) {
      transport += (i == 0 ? " (" : ", ") + c.transport_details[i].first + " " +
                   c.transport_details[i].second;
    }
    if (!c.transport_details.empty()) transport += ")";
    Cell("", transport, &content);
    Cell("num", std::to_string(c.reactor), &content);
    Cell("num", FormatBytes(c.bytes_received), &content);
    Cell("num", FormatBytes(c.bytes_sent), &content);
    Cell("num", std::to_string(c.calls_in_flight), &content);
    // Server side: what the connection holds against the inbound memory budget.
    Cell("num",
         c.direction == "server"
             ? FormatBytes(static_cast<uint64_t>(c.inbound_memory_bytes)) + " (" +
                   FormatBytes(static_cast<uint64_t>(c.inbound_memory_peak_bytes)) + ")"
             : std::string("-"),
         &content);
    Cell("num", FormatAge(c.age_seconds), &content);
    content += "</tr>\n";
  }
  if (conns.empty()) EmptyRow(columns.size(), "No connections.", &content);
  EndTable(&content);
  return RenderPage(env,
                    {"Connections", "/connections",
                     "server connections were accepted from the peer; client connections were "
                     "opened to it"},
                    content);
}

}  // namespace

void RegisterConnectionsPage(Webserver* web, std::shared_ptr<const PageEnv> env,
                             rpc::Messenger* messenger) {
  RegisterHtmlOrJsonPage(
      web, "/connections", [env, messenger] { return ConnectionsHtml(*env, messenger); },
      [messenger] { return ConnectionsJson(messenger); });
}

}  // namespace rrpc::web_page
