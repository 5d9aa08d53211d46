// /channels: the process's cluster channels (rpc/cluster/channel.h): target, balancer, resolver
// state, and each backend's health, calls outstanding, EWMA latency and ejections. Runs on the
// web server's threads.
#include <memory>
#include <string>
#include <vector>

#include "rrpc/rpc/cluster/channel.h"
#include "server/web/web_page_areas.h"
#include "server/web/web_page_format.h"

namespace rrpc::web_page {

namespace {

std::string ChannelsJson() {
  const auto channels = rpc::Channel::All();
  std::string out;
  JsonObject root(&out);
  root.Uint("total", channels.size());
  AppendJsonArray(
      channels,
      [](const std::shared_ptr<rpc::Channel>& c, JsonObject* o) {
        o->Str("name", c->name())
            .Str("target", c->target())
            .Str("balancer", rpc::BalancerPolicyName(c->options().balancer))
            .Str("resolver", c->resolver_status().ToString());
        AppendJsonArray(
            c->Backends(),
            [](const rpc::BackendInfo& b, JsonObject* bo) {
              bo->Str("address", b.addr.ToString())
                  .Str("health", b.health)
                  .Int("outstanding", b.outstanding)
                  .Int("ewma_latency_us", b.ewma_latency_us)
                  .Int("ejections", b.ejections)
                  .Int("calls", b.calls);
            },
            o->Member("backends"));
      },
      root.Member("channels"));
  root.Close();
  return out;
}

std::string ChannelsHtml(const PageEnv& env) {
  const auto channels = rpc::Channel::All();
  std::string content;
  const std::vector<Column> columns = {{"Backend", false},    {"Health", false},
                                       {"Outstanding", true}, {"EWMA latency (us)", true},
                                       {"Ejections", true},   {"Calls", true}};
  for (const auto& c : channels) {
    const std::vector<rpc::BackendInfo> backends = c->Backends();
    BeginTable(c->name(),
               std::string(rpc::BalancerPolicyName(c->options().balancer)) + ", resolver " +
                   c->resolver_status().ToString(),
               "", columns, &content);
    for (const rpc::BackendInfo& b : backends) {
      content += "<tr>";
      Cell("mono", b.addr.ToString(), &content);
      PillCell(b.health, &content);
      Cell("num", std::to_string(b.outstanding), &content);
      Cell("num", std::to_string(b.ewma_latency_us), &content);
      Cell("num", std::to_string(b.ejections), &content);
      Cell("num", std::to_string(b.calls), &content);
      content += "</tr>\n";
    }
    if (backends.empty()) EmptyRow(columns.size(), "No servers.", &content);
    EndTable(&content);
  }
  if (channels.empty()) {
    BeginTable("Channels", "0", "", columns, &content);
    EmptyRow(columns.size(), "No cluster channels in this process.", &content);
    EndTable(&content);
  }
  return RenderPage(
      env,
      {"Channels", "/channels", "cluster channels of this process and the state of each backend"},
      content);
}

}  // namespace

void RegisterChannelsPage(Webserver* web, std::shared_ptr<const PageEnv> env) {
  RegisterHtmlOrJsonPage(
      web, "/channels", [env] { return ChannelsHtml(*env); }, [] { return ChannelsJson(); });
}

}  // namespace rrpc::web_page
