#include "server/web/web_dashboard.h"

#include <string>

#include "server/web/web_assets.h"
#include "server/web/webserver.h"

namespace rrpc {

namespace {

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

const char* ContentTypeForFileName(std::string_view name) {
  if (EndsWith(name, ".html")) return "text/html; charset=utf-8";
  if (EndsWith(name, ".css")) return "text/css; charset=utf-8";
  if (EndsWith(name, ".js")) return "text/javascript; charset=utf-8";
  if (EndsWith(name, ".svg")) return "image/svg+xml";
  if (EndsWith(name, ".png")) return "image/png";
  if (EndsWith(name, ".ico")) return "image/x-icon";
  if (EndsWith(name, ".json")) return "application/json";
  return "application/octet-stream";
}

namespace {

void Register(Webserver* web, const EmbeddedFile& file) {
  const std::string_view name(file.name);
  std::string path = name == "index.html" ? "/" : "/static/" + std::string(name);
  web->RegisterStaticAsset(std::move(path), ContentTypeForFileName(name), file.contents());
}

}  // namespace

void RegisterDashboard(Webserver* web) {
  for (size_t i = 0; i < kNumEmbeddedWebAssets; ++i) Register(web, kEmbeddedWebAssets[i]);
}

bool RegisterEmbeddedAsset(Webserver* web, std::string_view name) {
  const EmbeddedFile* file = FindEmbeddedFile(kEmbeddedWebAssets, kNumEmbeddedWebAssets, name);
  if (file == nullptr) return false;
  Register(web, *file);
  return true;
}

}  // namespace rrpc
