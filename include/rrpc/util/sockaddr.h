// Sockaddr: an IPv4 or IPv6 socket address (value type). Parses "host:port", "[v6]:port".
// Holds only what those two families need (32 bytes, not a 128-byte sockaddr_storage): every
// connection keeps its peer's address, and so do outbound calls and the reactors' maps.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstddef>
#include <functional>
#include <string>

#include "rrpc/util/status.h"

namespace rrpc {

class Sockaddr {
 public:
  Sockaddr() = default;
  // "127.0.0.1:8080", "[::1]:8080", "localhost:8080" (resolved, first address). Port 0 allowed.
  static Result<Sockaddr> Parse(const std::string& host_port);
  static Sockaddr Loopback(uint16_t port);  // 127.0.0.1:port
  // An address longer than an IPv6 one (another family) gives an unset Sockaddr (family 0).
  static Sockaddr FromRaw(const sockaddr* addr, socklen_t len);

  const sockaddr* addr() const { return reinterpret_cast<const sockaddr*>(&storage_); }
  socklen_t addrlen() const { return len_; }
  int family() const { return storage_.sa.sa_family; }
  uint16_t port() const;
  std::string host() const;
  std::string ToString() const;  // "127.0.0.1:8080" / "[::1]:8080"
  // 127.0.0.0/8, ::1 or an IPv4-mapped 127.x address: a peer on this machine.
  bool IsLoopback() const;

  bool operator==(const Sockaddr& o) const;
  bool operator!=(const Sockaddr& o) const { return !(*this == o); }
  size_t Hash() const;

 private:
  // The IPv6 member first, so that `{}` zeroes all of it.
  union Storage {
    sockaddr_in6 in6;
    sockaddr_in in;
    sockaddr sa;
  };
  Storage storage_{};
  socklen_t len_ = 0;
};

}  // namespace rrpc

template <>
struct std::hash<rrpc::Sockaddr> {
  size_t operator()(const rrpc::Sockaddr& a) const { return a.Hash(); }
};
