// The operator dashboard: registers the embedded static files (server/web/web_assets.h) on a
// Webserver, with index.html at "/" and every other file at "/static/<name>". The page polls
// /metrics.json, which the server's metrics code registers separately.
#pragma once

#include <string_view>

namespace rrpc {

class Webserver;

// Thread-safe as Webserver::RegisterPage is.
void RegisterDashboard(Webserver* web);

// Registers the one embedded static file `name` (e.g. "pages.css") where RegisterDashboard
// would. False if no such file is embedded. Thread-safe as Webserver::RegisterPage is.
bool RegisterEmbeddedAsset(Webserver* web, std::string_view name);

// The Content-Type for a static file name, by extension ("a.js" -> "text/javascript; ...").
const char* ContentTypeForFileName(std::string_view name);

}  // namespace rrpc
