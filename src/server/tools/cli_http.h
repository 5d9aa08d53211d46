// A minimal blocking HTTP/1.0 GET for rrpc-cli (`rrpc-cli metrics --webserver=...` reads the web
// UI's /metrics): plain HTTP only, whole body in memory. Thread-safe (no shared state).
#pragma once

#include <string>

#include "util/monotime.h"
#include "util/sockaddr.h"
#include "util/status.h"

namespace rrpc::server {

// The body of `path` at `server` when it answers 200; NetworkError when it cannot be reached or
// times out (connect, send and each receive wait at most `timeout`), RemoteError with the status
// line otherwise.
Result<std::string> HttpGet(const Sockaddr& server, const std::string& path, MonoDelta timeout);

}  // namespace rrpc::server
