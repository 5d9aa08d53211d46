// /pools: the messenger's service pools (docs/isolation.md): workers, queued calls by priority,
// background calls running against their cap, the adaptive limit and its refusals; then every
// method that takes admission, with its static limit and refusals. Runs on the web server's
// threads.
#include <string>
#include <vector>

#include "rrpc/rpc/messenger.h"
#include "server/web/web_page_areas.h"
#include "server/web/web_page_format.h"

namespace rrpc::web_page {

namespace {

const char* PriorityName(rpc::CallPriority p) {
  return p == rpc::CallPriority::kBackground ? "background" : "foreground";
}

std::string PoolsJson(rpc::Messenger* messenger) {
  const std::vector<rpc::ServicePoolInfo> pools = messenger->service_pools();
  std::string out;
  JsonObject root(&out);
  root.Str("messenger", messenger->name());
  AppendJsonArray(
      pools,
      [](const rpc::ServicePoolInfo& p, JsonObject* o) {
        o->Str("name", p.name)
            .Int("num_workers", p.num_workers)
            .Uint("queue_length", p.queue_length)
            .Uint("queued_foreground", p.queued_foreground)
            .Uint("queued_background", p.queued_background)
            .Uint("background_running", p.background_running)
            .Uint("background_cap", p.background_cap)
            .Int("in_flight", p.in_flight)
            .Int("limit", p.limit)
            .Int("limit_refusals", p.limit_refusals)
            .Int("method_refusals", p.method_refusals)
            .Int("overflows", p.overflows);
        AppendJsonArray(
            p.methods,
            [](const rpc::ServicePoolInfo::Method& m, JsonObject* mo) {
              mo->Str("method", m.name)
                  .Str("priority", PriorityName(m.priority))
                  .Int("max_concurrency", m.max_concurrency)
                  .Int("in_flight", m.in_flight)
                  .Int("refusals", m.refusals);
            },
            o->Member("methods"));
      },
      root.Member("pools"));
  root.Close();
  return out;
}

std::string PoolsHtml(const PageEnv& env, rpc::Messenger* messenger) {
  const std::vector<rpc::ServicePoolInfo> pools = messenger->service_pools();
  std::string content;
  const std::vector<Column> columns = {
      {"Pool", false},          {"Workers", true},          {"Queued fg", true},
      {"Queued bg", true},      {"Bg running / cap", true}, {"In flight", true},
      {"Adaptive limit", true}, {"Limit refusals", true},   {"Queue overflows", true}};
  BeginTable("Pools", std::to_string(pools.size()), "queue length per priority class", columns,
             &content);
  for (const rpc::ServicePoolInfo& p : pools) {
    content += "<tr>";
    Cell("mono", p.name, &content);
    Cell("num", std::to_string(p.num_workers), &content);
    Cell("num", std::to_string(p.queued_foreground) + " / " + std::to_string(p.queue_length),
         &content);
    Cell("num", std::to_string(p.queued_background) + " / " + std::to_string(p.queue_length),
         &content);
    Cell("num", std::to_string(p.background_running) + " / " + std::to_string(p.background_cap),
         &content);
    Cell("num", std::to_string(p.in_flight), &content);
    Cell("num", p.limit > 0 ? std::to_string(p.limit) : "off", &content);
    Cell("num", std::to_string(p.limit_refusals), &content);
    Cell("num", std::to_string(p.overflows), &content);
    content += "</tr>\n";
  }
  EndTable(&content);
  const std::vector<Column> method_columns = {{"Method", false},   {"Pool", false},
                                              {"Priority", false}, {"Limit", true},
                                              {"In flight", true}, {"Refusals", true}};
  size_t methods = 0;
  for (const rpc::ServicePoolInfo& p : pools) methods += p.methods.size();
  BeginTable("Methods", std::to_string(methods),
             "methods in a named pool, background, or with a concurrency limit", method_columns,
             &content);
  for (const rpc::ServicePoolInfo& p : pools) {
    for (const rpc::ServicePoolInfo::Method& m : p.methods) {
      content += "<tr>";
      const size_t dot = m.name.rfind('.');
      MethodCell(m.name.substr(0, dot), m.name.substr(dot + 1), &content);
      Cell("mono", p.name, &content);
      PillCell(PriorityName(m.priority), &content);
      Cell("num", m.max_concurrency > 0 ? std::to_string(m.max_concurrency) : "none", &content);
      Cell("num", std::to_string(m.in_flight), &content);
      Cell("num", std::to_string(m.refusals), &content);
      content += "</tr>\n";
    }
  }
  if (methods == 0) {
    EmptyRow(method_columns.size(), "Every method takes the default pool's plain queue.", &content);
  }
  EndTable(&content);
  return RenderPage(
      env,
      {"Pools", "/pools", "service pools, priorities and admission limits (docs/isolation.md)"},
      content);
}

}  // namespace

void RegisterPoolsPage(Webserver* web, std::shared_ptr<const PageEnv> env,
                       rpc::Messenger* messenger) {
  RegisterHtmlOrJsonPage(
      web, "/pools", [env, messenger] { return PoolsHtml(*env, messenger); },
      [messenger] { return PoolsJson(messenger); });
}

}  // namespace rrpc::web_page
