// A minimal blocking HTTP/1.x client over plain TCP for what reads the web UI: rrpc-cli
// (`rrpc-cli metrics --webserver=...` reads /metrics) and the web server's tests. One request per
// connection, read until the server closes it, the whole response in memory; every socket wait is
// bounded by a timeout. Thread-safe (no shared state).
//
//   RRPC_ASSIGN_OR_RETURN(HttpReply reply, HttpGet(server, "/metrics", MonoDelta::FromSeconds(5)));
//   if (reply.status != 200) ...
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "rrpc/util/monotime.h"
#include "rrpc/util/sockaddr.h"
#include "rrpc/util/status.h"

namespace rrpc {

struct HttpReply {
  int status = 0;                              // e.g. 200
  std::string status_line;                     // e.g. "HTTP/1.1 200 OK"
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;
};

// Sends `request` as it is (request line, headers and any body: the caller writes them) to
// `server`, closes the sending side, and returns every byte the server sent until it closed the
// connection. Connecting,
// each send and each receive wait at most `timeout`. A send that fails is no error when the
// server answered anyway (a server may answer and close before reading all of a request it
// refuses, e.g. an oversized one).
Result<std::string> HttpExchange(const Sockaddr& server, std::string_view request,
                                 MonoDelta timeout);

// Splits a whole response (as HttpExchange returns it) into status, headers and body.
// Corruption when it is not an HTTP/1.x response.
Result<HttpReply> ParseHttpReply(std::string_view raw);

// GET `path` from `server` (HTTP/1.0, so the server closes after the response), whatever the
// status it answers. NetworkError or TimedOut when it cannot be reached or does not answer in
// time; Corruption when the answer is not HTTP or is shorter than its Content-Length.
Result<HttpReply> HttpGet(const Sockaddr& server, const std::string& path, MonoDelta timeout);

}  // namespace rrpc
