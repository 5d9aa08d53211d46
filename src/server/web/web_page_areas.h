// The data pages, one file per area, each registering its page (HTML, and JSON with
// ?format=json) on a Webserver; RegisterRpcPages (web_pages.cc) calls them. Thread-safety as
// Webserver::RegisterPage; the pages then run on the web server's threads, several at once.
#pragma once

#include <cstddef>
#include <memory>

#include "server/web/web_page_common.h"

namespace rrpc {

class Webserver;

namespace rpc {
class Messenger;
class RpczStore;
}  // namespace rpc

namespace web_page {

// /rpcz (rpcz_page.cc): the calls in flight, at most `max_calls` of them, longest first; then
// the recent slow and failed calls with their timelines. `store` must outlive the serving.
void RegisterRpczPage(Webserver* web, std::shared_ptr<const PageEnv> env,
                      const rpc::RpczStore* store, size_t max_calls);

// /connections (connections_page.cc): the messenger's connections. `messenger` must outlive the
// serving.
void RegisterConnectionsPage(Webserver* web, std::shared_ptr<const PageEnv> env,
                             rpc::Messenger* messenger);

// /pools (pools_page.cc): the messenger's service pools and admission limits. `messenger` must
// outlive the serving.
void RegisterPoolsPage(Webserver* web, std::shared_ptr<const PageEnv> env,
                       rpc::Messenger* messenger);

// /channels (channels_page.cc): the process's cluster channels and their backends.
void RegisterChannelsPage(Webserver* web, std::shared_ptr<const PageEnv> env);

// /varz (varz_page.cc): every gflag with its current and default value; secrets are hidden.
void RegisterVarzPage(Webserver* web, std::shared_ptr<const PageEnv> env);

// /threadz (threadz_page.cc): rrpc's threads, then the process's others, with their CPU time.
void RegisterThreadzPage(Webserver* web, std::shared_ptr<const PageEnv> env);

}  // namespace web_page
}  // namespace rrpc
