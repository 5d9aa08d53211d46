#include "server/web/http_client.h"

#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <utility>

#include "util/socket.h"

namespace rrpc {

Result<std::string> HttpExchange(const Sockaddr& server, std::string_view request,
                                 MonoDelta timeout) {
  const std::string peer = server.ToString();
  RRPC_ASSIGN_OR_RETURN(Socket sock, Socket::CreateTcp(server.family()));
  RRPC_RETURN_NOT_OK(sock.SetNonBlocking(false));
  RRPC_RETURN_NOT_OK(sock.SetIoTimeout(timeout));
  RRPC_RETURN_NOT_OK(sock.BlockingConnect(server));
  const Status sent =
      sock.BlockingWrite(reinterpret_cast<const uint8_t*>(request.data()), request.size());
  // Nothing more is coming: a server waiting for the rest of a malformed request answers now.
  ::shutdown(sock.fd(), SHUT_WR);
  std::string reply;
  uint8_t buf[16384];
  for (;;) {
    Result<size_t> n = sock.Recv(buf, sizeof(buf));
    if (!n.ok() && n.status().IsEndOfFile()) break;
    // A reset after the answer: the server closed with part of the request unread.
    if (!n.ok() && !reply.empty()) break;
    if (!n.ok()) return (sent.ok() ? n.status() : sent).CloneAndPrepend("HTTP request to " + peer);
    // A blocking socket returns nothing only when SO_RCVTIMEO expired.
    if (*n == 0) return Status::TimedOut("no HTTP response in time", peer);
    reply.append(reinterpret_cast<const char*>(buf), *n);
  }
  if (reply.empty() && !sent.ok()) return sent.CloneAndPrepend("HTTP request to " + peer);
  return reply;
}

Result<HttpReply> ParseHttpReply(std::string_view raw) {
  if (raw.substr(0, 9) != "HTTP/1.1 " && raw.substr(0, 9) != "HTTP/1.0 ") {
    return Status::Corruption("not an HTTP/1.x response");
  }
  HttpReply reply;
  const size_t line_end = std::min(raw.find("\r\n"), raw.size());
  reply.status_line = std::string(raw.substr(0, line_end));
  reply.status = std::atoi(reply.status_line.c_str() + 9);
  const size_t head_end = raw.find("\r\n\r\n");
  if (head_end == std::string_view::npos) return reply;  // cut short in the headers
  for (size_t pos = line_end + 2; pos < head_end;) {
    const size_t eol = raw.find("\r\n", pos);
    const std::string_view line = raw.substr(pos, eol - pos);
    pos = eol + 2;
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    std::string name(line.substr(0, colon));
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const size_t value = line.find_first_not_of(' ', colon + 1);
    reply.headers[name] =
        value == std::string_view::npos ? std::string() : std::string(line.substr(value));
  }
  reply.body = std::string(raw.substr(head_end + 4));
  return reply;
}

Result<HttpReply> HttpGet(const Sockaddr& server, const std::string& path, MonoDelta timeout) {
  const std::string request =
      "GET " + path + " HTTP/1.0\r\nHost: " + server.ToString() + "\r\nConnection: close\r\n\r\n";
  RRPC_ASSIGN_OR_RETURN(std::string raw, HttpExchange(server, request, timeout));
  Result<HttpReply> reply = ParseHttpReply(raw);
  if (!reply.ok()) {
    return reply.status().CloneAndPrepend("GET " + path + " from " + server.ToString());
  }
  auto length = reply->headers.find("content-length");
  if (raw.find("\r\n\r\n") == std::string::npos ||
      (length != reply->headers.end() &&
       std::strtoull(length->second.c_str(), nullptr, 10) > reply->body.size())) {
    return Status::Corruption("HTTP response cut short", server.ToString());
  }
  return reply;
}

}  // namespace rrpc
