#include "server/web/web_pages.h"

#include <glog/logging.h>

#include <memory>
#include <utility>

#include "rrpc/rpc/messenger.h"
#include "server/web/web_dashboard.h"
#include "server/web/web_page_areas.h"
#include "server/web/web_page_common.h"
#include "server/web/webserver.h"
#include "util/metrics/json_writer.h"
#include "util/metrics/metric_registry.h"
#include "util/metrics/prometheus_writer.h"

namespace rrpc {

namespace {

void RegisterMetricsPages(Webserver* web, MetricRegistry* registry) {
  web->RegisterPage("/metrics", [registry](const WebRequest&, WebResponse* resp) {
    resp->content_type = kPrometheusContentType;
    resp->body = FormatPrometheus(registry->TakeSnapshot());
    web_page::NoStore(resp);
  });
  web->RegisterPage("/metrics.json", [registry](const WebRequest&, WebResponse* resp) {
    resp->content_type = kJsonContentType;
    resp->body = FormatJson(registry->TakeSnapshot());
    web_page::NoStore(resp);
  });
}

void RegisterHealthzPage(Webserver* web, rpc::Messenger* messenger,
                         std::function<Status()> health_check,
                         std::function<std::string()> health_note) {
  web->RegisterPage("/healthz",
                    [messenger, health_check = std::move(health_check),
                     health_note = std::move(health_note)](const WebRequest&, WebResponse* resp) {
                      Status s = health_check ? health_check() : Status::OK();
                      if (s.ok() && messenger != nullptr && messenger->closing()) {
                        s = Status::ServiceUnavailable("messenger shutting down");
                      }
                      web_page::NoStore(resp);
                      if (s.ok()) {
                        const std::string note = health_note ? health_note() : std::string();
                        resp->body = (note.empty() ? "OK" : note) + "\n";
                      } else {
                        resp->status = 503;
                        resp->body = "UNHEALTHY: " + s.ToString() + "\n";
                      }
                    });
}

}  // namespace

std::string EscapeHtml(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  web_page::AppendEscaped(s, &out);
  return out;
}

void RegisterRpcPages(Webserver* web, rpc::Messenger* messenger, MetricRegistry* registry,
                      WebPagesOptions options) {
  if (registry == nullptr && messenger != nullptr) registry = messenger->metric_registry();
  auto env = std::make_shared<web_page::PageEnv>();
  env->server_name = !options.server_name.empty() ? options.server_name
                     : messenger != nullptr       ? messenger->name()
                                                  : "";
  // The pages' own stylesheet (assets/pages.css). RegisterDashboard serves it too, but the pages
  // may be registered without the dashboard.
  CHECK(RegisterEmbeddedAsset(web, "pages.css")) << "assets/pages.css is not embedded";

  if (registry != nullptr) RegisterMetricsPages(web, registry);
  if (messenger != nullptr) {
    web_page::RegisterRpczPage(web, env, messenger->rpcz_store(), options.max_rpcz_calls);
    web_page::RegisterConnectionsPage(web, env, messenger);
    web_page::RegisterPoolsPage(web, env, messenger);
  }
  web_page::RegisterChannelsPage(web, env);
  web_page::RegisterVarzPage(web, env);
  web_page::RegisterThreadzPage(web, env);
  RegisterHealthzPage(web, messenger, std::move(options.health_check),
                      std::move(options.health_note));
}

}  // namespace rrpc
