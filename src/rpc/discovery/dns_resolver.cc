#include "rpc/discovery/dns_resolver.h"

#include <ares.h>
#include <arpa/nameser.h>
#include <glog/logging.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "rpc/discovery/resolver_util.h"
#include "util/thread.h"

namespace rrpc::rpc {
namespace {

Status AresStatus(int code, const std::string& what) {
  if (code == ARES_ENOTFOUND || code == ARES_ENODATA) {
    return Status::NotFound(what + ": " + ares_strerror(code));
  }
  if (code == ARES_ETIMEOUT) return Status::TimedOut(what + ": " + ares_strerror(code));
  return Status::NetworkError(what + ": " + ares_strerror(code));
}

// One round of lookups: what the c-ares callbacks fill in. Touched only on the resolver thread.
struct Lookup {
  ares_channel channel = nullptr;
  int outstanding = 0;
  std::vector<Sockaddr> addrs;
  int min_ttl = -1;  // seconds; -1: no record carried one
  Status error;      // the first failure

  void NoteTtl(int ttl) { min_ttl = min_ttl < 0 ? ttl : std::min(min_ttl, ttl); }
  void Fail(Status s) {
    if (error.ok()) error = std::move(s);
  }
};

struct AddrQuery {
  Lookup* lookup;
  std::string name;
};

void OnAddrInfo(void* arg, int status, int /*timeouts*/, ares_addrinfo* result) {
  std::unique_ptr<AddrQuery> q(static_cast<AddrQuery*>(arg));
  Lookup* lookup = q->lookup;
  --lookup->outstanding;
  if (status != ARES_SUCCESS) {
    lookup->Fail(AresStatus(status, "A/AAAA " + q->name));
    return;
  }
  for (ares_addrinfo_node* n = result->nodes; n != nullptr; n = n->ai_next) {
    if (n->ai_family != AF_INET && n->ai_family != AF_INET6) continue;
    lookup->addrs.push_back(Sockaddr::FromRaw(n->ai_addr, n->ai_addrlen));
    lookup->NoteTtl(n->ai_ttl);
  }
  ares_freeaddrinfo(result);
}

void StartAddrLookup(Lookup* lookup, const std::string& name, uint16_t port) {
  ares_addrinfo_hints hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = ARES_AI_NUMERICSERV;
  ++lookup->outstanding;
  const std::string service = std::to_string(port);
  ares_getaddrinfo(lookup->channel, name.c_str(), service.c_str(), &hints, OnAddrInfo,
                   new AddrQuery{lookup, name});
}

struct SrvQuery {
  Lookup* lookup;
  std::string name;
};

void OnSrv(void* arg, int status, int /*timeouts*/, unsigned char* abuf, int alen) {
  std::unique_ptr<SrvQuery> q(static_cast<SrvQuery*>(arg));
  Lookup* lookup = q->lookup;
  --lookup->outstanding;
  if (status != ARES_SUCCESS) {
    lookup->Fail(AresStatus(status, "SRV " + q->name));
    return;
  }
  ares_srv_reply* reply = nullptr;
  const int rc = ares_parse_srv_reply(abuf, alen, &reply);
  if (rc != ARES_SUCCESS) {
    lookup->Fail(AresStatus(rc, "SRV " + q->name));
    return;
  }
  if (reply == nullptr) lookup->Fail(Status::NotFound("SRV " + q->name + ": no records"));
  for (ares_srv_reply* r = reply; r != nullptr; r = r->next) {
    StartAddrLookup(lookup, r->host, r->port);
  }
  ares_free_data(reply);
}

class DnsResolver : public Resolver {
 public:
  DnsResolver(std::string target, std::string server, std::string name, uint16_t port, bool srv,
              DnsResolverOptions options)
      : target_(std::move(target)),
        server_(std::move(server)),
        name_(std::move(name)),
        port_(port),
        srv_(srv),
        options_(options) {}
  ~DnsResolver() override { Stop(); }

  Status Start(ResolverListener listener) override {
    if (thread_.joinable()) return Status::IllegalState("resolver already started", target_);
    static std::once_flag init_once;
    std::call_once(init_once, [] { CHECK_EQ(ARES_SUCCESS, ares_library_init(ARES_LIB_INIT_ALL)); });
    ares_options opts{};
    int mask = ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES;
    opts.timeout = static_cast<int>(options_.query_timeout.ToMilliseconds());
    opts.tries = 2;
    char lookups[] = "b";  // an explicit server: DNS only, no hosts file
    if (!server_.empty()) {
      mask |= ARES_OPT_LOOKUPS;
      opts.lookups = lookups;
    }
    int rc = ares_init_options(&channel_, &opts, mask);
    if (rc != ARES_SUCCESS) return AresStatus(rc, "ares_init_options").CloneAndPrepend(target_);
    if (!server_.empty()) {
      rc = ares_set_servers_ports_csv(channel_, server_.c_str());
      if (rc != ARES_SUCCESS) {
        ares_destroy(channel_);
        channel_ = nullptr;
        return AresStatus(rc, "DNS server " + server_).CloneAndPrepend(target_);
      }
    }
    listener_ = std::move(listener);
    RRPC_ASSIGN_OR_RETURN(thread_, StartThread("resolver", "dns-resolver", [this] { Run(); }));
    return Status::OK();
  }

  void Stop() override {
    if (thread_.joinable()) {
      wake_.Notify();
      thread_.join();
    }
    if (channel_ != nullptr) ares_destroy(channel_);
    channel_ = nullptr;
  }

  const std::string& target() const override { return target_; }

 private:
  void Run() {
    MonoDelta backoff = options_.min_refresh;
    bool have_set = false;
    std::vector<Sockaddr> last;
    for (;;) {
      Lookup lookup;
      lookup.channel = channel_;
      if (srv_) {
        ++lookup.outstanding;
        ares_query(channel_, name_.c_str(), ns_c_in, ns_t_srv, OnSrv, new SrvQuery{&lookup, name_});
      } else {
        StartAddrLookup(&lookup, name_, port_);
      }
      if (!Process(&lookup)) return;  // stopped
      MonoDelta wait;
      if (lookup.error.ok() && lookup.addrs.empty()) {
        lookup.error = Status::NotFound("no address for " + name_);
      }
      if (!lookup.error.ok()) {
        LOG(WARNING) << target_ << ": keeping the last servers: " << lookup.error.ToString();
        listener_(Result<std::vector<Sockaddr>>(lookup.error.CloneAndPrepend(target_)));
        have_set = false;
        wait = backoff;
        backoff = std::min(backoff + backoff, options_.refresh_interval);
      } else {
        std::vector<Sockaddr> addrs = Normalized(std::move(lookup.addrs));
        if (!have_set || addrs != last) {
          last = addrs;
          have_set = true;
          listener_(Result<std::vector<Sockaddr>>(std::move(addrs)));
        }
        backoff = options_.min_refresh;
        wait = options_.refresh_interval;
        if (lookup.min_ttl >= 0) {
          wait = std::min(wait,
                          std::max(options_.min_refresh, MonoDelta::FromSeconds(lookup.min_ttl)));
        }
      }
      if (wake_.WaitFor(wait)) return;
    }
  }

  // Drives c-ares until every query of `lookup` finished; false (queries cancelled) on Stop.
  bool Process(Lookup* lookup) {
    while (lookup->outstanding > 0) {
      ares_socket_t socks[ARES_GETSOCK_MAXNUM];
      const int bits = ares_getsock(channel_, socks, ARES_GETSOCK_MAXNUM);
      pollfd fds[ARES_GETSOCK_MAXNUM + 1];
      int n = 0;
      fds[n++] = {wake_.fd(), POLLIN, 0};
      for (int i = 0; i < ARES_GETSOCK_MAXNUM; ++i) {
        short events = 0;
        if (ARES_GETSOCK_READABLE(bits, i)) events |= POLLIN;
        if (ARES_GETSOCK_WRITABLE(bits, i)) events |= POLLOUT;
        if (events != 0) fds[n++] = {socks[i], events, 0};
      }
      timeval max{1, 0};
      timeval tv{};
      ares_timeout(channel_, &max, &tv);
      const int rc = poll(fds, n, static_cast<int>(tv.tv_sec * 1000 + tv.tv_usec / 1000));
      if (rc < 0 && errno == EINTR) continue;
      if (fds[0].revents != 0) {
        ares_cancel(channel_);  // runs the callbacks with ARES_ECANCELLED
        return false;
      }
      if (rc == 0) {
        ares_process_fd(channel_, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
        continue;
      }
      for (int i = 1; i < n; ++i) {
        if (fds[i].revents == 0) continue;
        const bool readable = fds[i].revents & (POLLIN | POLLERR | POLLHUP);
        const bool writable = fds[i].revents & (POLLOUT | POLLERR | POLLHUP);
        ares_process_fd(channel_, readable ? fds[i].fd : ARES_SOCKET_BAD,
                        writable ? fds[i].fd : ARES_SOCKET_BAD);
      }
    }
    return true;
  }

  const std::string target_;
  const std::string server_;  // "host:port" of the DNS server to ask; empty: the system's
  const std::string name_;
  const uint16_t port_;
  const bool srv_;
  const DnsResolverOptions options_;
  ResolverListener listener_;
  ares_channel channel_ = nullptr;
  WakeFd wake_;
  std::thread thread_;
};

}  // namespace

Result<std::unique_ptr<Resolver>> NewDnsResolver(const std::string& target, const std::string& rest,
                                                 bool srv, DnsResolverOptions options) {
  const size_t slash = rest.find('/');
  if (slash == std::string::npos) {
    return Status::InvalidArgument(
        srv ? "dns+srv target is dns+srv:///_service._proto.name (or dns+srv://server/...)"
            : "dns target is dns:///name:port (or dns://server:port/name:port)",
        target);
  }
  const std::string server = rest.substr(0, slash);
  const std::string name_part = rest.substr(slash + 1);
  if (!server.empty()) {
    std::string host;
    uint16_t port = 0;
    Status s = SplitHostPort(server, &host, &port);
    if (!s.ok()) return Status::InvalidArgument("DNS server: " + s.message(), target);
  }
  std::string name = name_part;
  uint16_t port = 0;
  if (!srv) {
    Status s = SplitHostPort(name_part, &name, &port);
    if (!s.ok()) return Status::InvalidArgument("dns target name: " + s.message(), target);
  } else if (name.empty() || name.find(':') != std::string::npos) {
    return Status::InvalidArgument("dns+srv target wants a name without a port", target);
  }
  return std::unique_ptr<Resolver>(new DnsResolver(target, server, name, port, srv, options));
}

}  // namespace rrpc::rpc
