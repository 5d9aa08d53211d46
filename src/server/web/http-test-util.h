// HTTP over loopback for the web server's tests, on top of the HTTP client (http_client.h):
// every socket wait is bounded (20 s), so a test fails instead of hanging, and a failure reads
// as status 0 so that tests can compare statuses directly.
#pragma once

#include <arpa/inet.h>
#include <glog/logging.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "rrpc/util/monotime.h"
#include "rrpc/util/sockaddr.h"
#include "server/web/http_client.h"

namespace rrpc {

inline constexpr MonoDelta kHttpTestTimeout = MonoDelta::FromSeconds(20);

// A whole response as read until the server closed the connection; status 0 if it is not one.
inline HttpReply ParseReply(const std::string& raw) {
  Result<HttpReply> reply = ParseHttpReply(raw);
  return reply.ok() ? std::move(reply).value() : HttpReply{};
}

// Sends `request` as is to 127.0.0.1:port and returns everything the server sent back before
// closing ("" if it could not be reached or did not answer).
inline std::string SendRaw(uint16_t port, const std::string& request) {
  Result<std::string> raw = HttpExchange(Sockaddr::Loopback(port), request, kHttpTestTimeout);
  return raw.ok() ? std::move(raw).value() : std::string();
}

inline HttpReply Http(uint16_t port, const std::string& request) {
  return ParseReply(SendRaw(port, request));
}

inline HttpReply Get(uint16_t port, const std::string& target) {
  return Http(port, "GET " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
}

// A blocking socket connected to 127.0.0.1:port with 20 s send and receive timeouts, for tests
// that hold a connection open themselves. The caller closes it.
inline int ConnectLoopback(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  CHECK_GE(fd, 0);
  timeval tv{kHttpTestTimeout.ToMilliseconds() / 1000, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  const Sockaddr addr = Sockaddr::Loopback(port);
  CHECK_EQ(connect(fd, addr.addr(), addr.addrlen()), 0) << strerror(errno);
  return fd;
}

// The local "ip:port" of a connected socket.
inline std::string LocalAddress(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  char ip[INET_ADDRSTRLEN] = "";
  inet_ntop(AF_INET, &addr.sin_addr, ip, sizeof(ip));
  return std::string(ip) + ":" + std::to_string(ntohs(addr.sin_port));
}

}  // namespace rrpc
