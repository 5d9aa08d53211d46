// Pieces the resolvers share: checking a "host:port" without resolving it, resolving a list of
// them, and a wake-up descriptor a resolver thread polls beside its sources so Stop() never waits
// for a timeout. Thread-safe (WakeFd: Notify from any thread, one thread polls).
#pragma once

#include <string>
#include <vector>

#include "rrpc/util/monotime.h"
#include "rrpc/util/sockaddr.h"
#include "rrpc/util/status.h"

namespace rrpc::rpc {

// Splits "host:port" / "[v6]:port" into its parts; InvalidArgument naming the problem (no port,
// port not a number in 0..65535, empty host, unclosed bracket). Does no I/O.
Status SplitHostPort(const std::string& host_port, std::string* host, uint16_t* port);

// Resolves each "host:port" (getaddrinfo, first address of each). The first failure fails all.
Result<std::vector<Sockaddr>> ResolveHostPorts(const std::vector<std::string>& entries);

// The addresses of `text`: one host:port a line, '#' starts a comment, blank lines skipped. A
// line that is not host:port fails the whole text (InvalidArgument naming `source` and the line).
// Returns the entries unresolved.
Result<std::vector<std::string>> ParseHostPortLines(const std::string& text,
                                                    const std::string& source);

// Sorted, without duplicates: the form the resolvers push, so equal sets compare equal.
std::vector<Sockaddr> Normalized(std::vector<Sockaddr> addrs);

// An eventfd: Notify() makes it readable until Clear().
class WakeFd {
 public:
  WakeFd();
  ~WakeFd();
  WakeFd(const WakeFd&) = delete;
  WakeFd& operator=(const WakeFd&) = delete;

  int fd() const { return fd_; }
  void Notify();
  void Clear();
  // Waits up to `timeout` for Notify(); true when notified.
  bool WaitFor(MonoDelta timeout) const;

 private:
  int fd_ = -1;
};

}  // namespace rrpc::rpc
