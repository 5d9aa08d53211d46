#include "rrpc/util/sockaddr.h"

#include <arpa/inet.h>
#include <netdb.h>

#include <cstring>

namespace rrpc {

Result<Sockaddr> Sockaddr::Parse(const std::string& host_port) {
  std::string host;
  std::string port_str;
  if (!host_port.empty() && host_port[0] == '[') {
    size_t close = host_port.find(']');
    if (close == std::string::npos || close + 1 >= host_port.size() ||
        host_port[close + 1] != ':') {
      return Status::InvalidArgument("bad address, want [v6]:port", host_port);
    }
    host = host_port.substr(1, close - 1);
    port_str = host_port.substr(close + 2);
  } else {
    size_t colon = host_port.rfind(':');
    if (colon == std::string::npos)
      return Status::InvalidArgument("address lacks a port", host_port);
    host = host_port.substr(0, colon);
    port_str = host_port.substr(colon + 1);
  }
  char* end = nullptr;
  long port = strtol(port_str.c_str(), &end, 10);
  if (port_str.empty() || *end != '\0' || port < 0 || port > 65535) {
    return Status::InvalidArgument("bad port", host_port);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.empty() ? "0.0.0.0" : host.c_str(), port_str.c_str(), &hints, &res);
  if (rc != 0) {
    return Status::NetworkError(std::string("cannot resolve: ") + gai_strerror(rc), host_port);
  }
  Sockaddr out = FromRaw(res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  return out;
}

Sockaddr Sockaddr::Loopback(uint16_t port) {
  sockaddr_in in{};
  in.sin_family = AF_INET;
  in.sin_port = htons(port);
  in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return FromRaw(reinterpret_cast<sockaddr*>(&in), sizeof(in));
}

Sockaddr Sockaddr::FromRaw(const sockaddr* addr, socklen_t len) {
  Sockaddr out;
  if (len > sizeof(out.storage_)) return out;
  memcpy(&out.storage_, addr, len);
  out.len_ = len;
  return out;
}

uint16_t Sockaddr::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage_)->sin_port);
  if (family() == AF_INET6)
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_port);
  return 0;
}

bool Sockaddr::IsLoopback() const {
  if (family() == AF_INET) {
    const uint32_t ip = ntohl(reinterpret_cast<const sockaddr_in*>(&storage_)->sin_addr.s_addr);
    return (ip >> 24) == 127;
  }
  if (family() == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(&a)) return true;
    return IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127;
  }
  return false;
}

std::string Sockaddr::host() const {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (family() == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&storage_)->sin_addr, buf,
              sizeof(buf));
  } else if (family() == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_addr, buf,
              sizeof(buf));
  } else {
    return "<unset>";
  }
  return buf;
}

std::string Sockaddr::ToString() const {
  if (family() == AF_INET6) return "[" + host() + "]:" + std::to_string(port());
  return host() + ":" + std::to_string(port());
}

bool Sockaddr::operator==(const Sockaddr& o) const {
  if (len_ != o.len_) return false;
  if (len_ == sizeof(sockaddr_in)) {
    // The common case (a client's reactor compares each call's remote with its last connection's)
    // as two word compares: the same bytes memcmp would compare, without a call into libc.
    static_assert(sizeof(sockaddr_in) == 2 * sizeof(uint64_t), "sockaddr_in is 16 bytes");
    uint64_t a[2], b[2];
    memcpy(a, &storage_, sizeof(a));
    memcpy(b, &o.storage_, sizeof(b));
    return a[0] == b[0] && a[1] == b[1];
  }
  return memcmp(&storage_, &o.storage_, len_) == 0;
}

size_t Sockaddr::Hash() const {
  // FNV-1a over the address bytes: addresses are short and this runs once per connection lookup.
  size_t h = 1469598103934665603ull;
  const auto* p = reinterpret_cast<const uint8_t*>(&storage_);
  for (socklen_t i = 0; i < len_; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

}  // namespace rrpc
