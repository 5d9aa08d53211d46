#include "rpc/discovery/resolver_util.h"

#include <glog/logging.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

namespace rrpc::rpc {

Status SplitHostPort(const std::string& host_port, std::string* host, uint16_t* port) {
  std::string port_str;
  if (!host_port.empty() && host_port[0] == '[') {
    const size_t close = host_port.find(']');
    if (close == std::string::npos || close + 1 >= host_port.size() ||
        host_port[close + 1] != ':') {
      return Status::InvalidArgument("'" + host_port + "' is not [v6]:port");
    }
    *host = host_port.substr(1, close - 1);
    port_str = host_port.substr(close + 2);
  } else {
    const size_t colon = host_port.rfind(':');
    if (colon == std::string::npos) {
      return Status::InvalidArgument("'" + host_port + "' has no :port");
    }
    *host = host_port.substr(0, colon);
    port_str = host_port.substr(colon + 1);
  }
  if (host->empty()) return Status::InvalidArgument("'" + host_port + "' has no host");
  if (host->find_first_of(" \t,") != std::string::npos) {
    return Status::InvalidArgument("'" + host_port + "' is not one host:port");
  }
  char* end = nullptr;
  const long value = strtol(port_str.c_str(), &end, 10);
  if (port_str.empty() || *end != '\0' || value < 0 || value > 65535) {
    return Status::InvalidArgument("'" + host_port + "' has no port in 0..65535");
  }
  *port = static_cast<uint16_t>(value);
  return Status::OK();
}

Result<std::vector<Sockaddr>> ResolveHostPorts(const std::vector<std::string>& entries) {
  std::vector<Sockaddr> addrs;
  addrs.reserve(entries.size());
  for (const std::string& entry : entries) {
    RRPC_ASSIGN_OR_RETURN(Sockaddr addr, Sockaddr::Parse(entry));
    addrs.push_back(addr);
  }
  return addrs;
}

Result<std::vector<std::string>> ParseHostPortLines(const std::string& text,
                                                    const std::string& source) {
  std::vector<std::string> entries;
  size_t pos = 0;
  int line_no = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    std::string line = text.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    const size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos) continue;
    const size_t last = line.find_last_not_of(" \t\r");
    line = line.substr(first, last - first + 1);
    std::string host;
    uint16_t port = 0;
    Status s = SplitHostPort(line, &host, &port);
    if (!s.ok()) {
      return Status::InvalidArgument(source + " line " + std::to_string(line_no) + ": " +
                                     std::string(s.message()));
    }
    entries.push_back(line);
  }
  return entries;
}

std::vector<Sockaddr> Normalized(std::vector<Sockaddr> addrs) {
  std::sort(addrs.begin(), addrs.end(),
            [](const Sockaddr& a, const Sockaddr& b) { return a.ToString() < b.ToString(); });
  addrs.erase(std::unique(addrs.begin(), addrs.end()), addrs.end());
  return addrs;
}

WakeFd::WakeFd() : fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) { PCHECK(fd_ >= 0) << "eventfd"; }

WakeFd::~WakeFd() { close(fd_); }

void WakeFd::Notify() {
  const uint64_t one = 1;
  ssize_t ignored = write(fd_, &one, sizeof(one));
  (void)ignored;
}

void WakeFd::Clear() {
  uint64_t value = 0;
  ssize_t ignored = read(fd_, &value, sizeof(value));
  (void)ignored;
}

bool WakeFd::WaitFor(MonoDelta timeout) const {
  pollfd p{fd_, POLLIN, 0};
  const MonoTime deadline = MonoTime::Now() + timeout;
  for (;;) {
    const int64_t ms = std::max<int64_t>(0, (deadline - MonoTime::Now()).ToMilliseconds());
    const int rc = poll(&p, 1, static_cast<int>(std::min<int64_t>(ms, 1 << 30)));
    if (rc > 0) return true;
    if (rc == 0) return false;
    if (errno != EINTR) return false;
  }
}

}  // namespace rrpc::rpc
