// The web UI's data pages: what an operator opens to see what a running server is doing. One
// call registers them all on a Webserver, next to the dashboard (web_dashboard.h):
//
//   /metrics        Prometheus text exposition (format 0.0.4) of the metric registry.
//   /metrics.json   The same as JSON (util/metrics/json_writer.h), which the dashboard polls.
//   /rpcz           Calls in flight (method, peer, elapsed, queued / running / sending) and the
//                   recent slow and failed calls with their timelines (rpc/observe/rpcz_store.h).
//   /connections    The messenger's connections: peer, direction, transport, reactor, bytes,
//                   calls in flight, age.
//   /pools          The messenger's service pools (workers, queued calls by priority, the
//                   adaptive limit, refusals) and the methods with admission limits.
//   /channels       The process's cluster channels (rpc/cluster/channel.h): each backend's
//                   health, outstanding calls, EWMA latency and ejections.
//   /varz           Every gflag with its current and default value.
//   /threadz        rrpc's threads (category, name, tid) and every other thread of the process,
//                   with their CPU time from /proc/self/task/<tid>/stat.
//   /healthz        "OK" with 200 while healthy ("DEGRADED: why" while degraded), 503 and the
//                   reason otherwise.
//
// The HTML pages share the dashboard's top bar and stylesheet, plus /static/pages.css (registered
// here); their frame is templates/page.html, and each page lives in a file of its own
// (rpcz_page.cc, connections_page.cc, pools_page.cc, varz_page.cc, threadz_page.cc;
// web_page_areas.h). No inline script or style, as the server's content policy forbids them.
// Every page except /metrics* and /healthz answers JSON instead with `?format=json`.
//
// Thread-safety: RegisterRpcPages may be called from any thread, as Webserver::RegisterPage.
// The pages run on the web server's threads, several at once; the messenger and the registry
// must outlive the web server's serving (stop the Webserver before destroying them).
//
//   Webserver web(web_options);
//   RegisterDashboard(&web);
//   RegisterRpcPages(&web, messenger.get(), messenger->metric_registry());
//   RRPC_RETURN_NOT_OK(web.Start());
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "rrpc/util/status.h"

namespace rrpc {

class MetricRegistry;
class Webserver;

namespace rpc {
class Messenger;
}  // namespace rpc

struct WebPagesOptions {
  // Shown in every page's top bar; empty: the messenger's name.
  std::string server_name;
  // /healthz answers 200 "OK" while this returns OK, and 503 with the status's message when it
  // does not (e.g. while a server drains). Unset: healthy until the messenger shuts down. Runs
  // on a web server thread; must be thread-safe and quick.
  std::function<Status()> health_check;
  // While health_check is OK: a note such as "DEGRADED: rocksdb: ..." that /healthz shows (still
  // with 200: the server serves, with less function); empty means plain "OK". Optional; same
  // threading as health_check.
  std::function<std::string()> health_note;
  // At most this many in-flight calls are listed by /rpcz (the total is always shown).
  size_t max_rpcz_calls = 1000;
};

// Registers the pages above on `web`. `messenger` may be null: /rpcz, /connections and /pools
// are then not registered, and /healthz depends on `health_check` only. `registry` null: the
// messenger's own registry (Messenger::metric_registry()); with neither, /metrics* are not
// registered.
void RegisterRpcPages(Webserver* web, rpc::Messenger* messenger, MetricRegistry* registry,
                      WebPagesOptions options = {});

// `s` with &, <, >, " and ' replaced by entities: safe as HTML text and attribute values.
std::string EscapeHtml(std::string_view s);

}  // namespace rrpc
