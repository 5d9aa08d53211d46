#include "rpc/discovery/etcd_resolver.h"

#include <glog/logging.h>

#include <map>
#include <optional>
#include <thread>
#include <utility>

#include "rpc/discovery/etcd_client.h"
#include "rpc/discovery/resolver_util.h"
#include "util/thread.h"

namespace rrpc::rpc {

Result<EtcdTarget> ParseEtcdTarget(const std::string& target, const std::string& rest) {
  const size_t slash = rest.find('/');
  if (slash == std::string::npos || slash + 1 >= rest.size()) {
    return Status::InvalidArgument("etcd target needs a key prefix: etcd://host:port/prefix",
                                   target);
  }
  EtcdTarget out;
  const std::string hosts = rest.substr(0, slash);
  size_t pos = 0;
  while (pos <= hosts.size()) {
    size_t comma = hosts.find(',', pos);
    if (comma == std::string::npos) comma = hosts.size();
    const std::string entry = hosts.substr(pos, comma - pos);
    if (!entry.empty()) {
      std::string host;
      uint16_t port = 0;
      Status s = SplitHostPort(entry, &host, &port);
      if (!s.ok()) return Status::InvalidArgument("etcd endpoint: " + s.message(), target);
      out.endpoints.push_back(entry);
    }
    pos = comma + 1;
  }
  if (out.endpoints.empty()) {
    return Status::InvalidArgument("etcd target names no endpoint: etcd://host:port/prefix",
                                   target);
  }
  out.prefix = rest.substr(slash);
  if (out.prefix.back() != '/') out.prefix += '/';
  return out;
}

namespace {

class EtcdResolver : public Resolver {
 public:
  EtcdResolver(std::string target, EtcdTarget parsed, EtcdResolverOptions options)
      : target_(std::move(target)), parsed_(std::move(parsed)), options_(options) {}
  ~EtcdResolver() override { Stop(); }

  Status Start(ResolverListener listener) override {
    if (thread_.joinable()) return Status::IllegalState("resolver already started", target_);
    listener_ = std::move(listener);
    RRPC_ASSIGN_OR_RETURN(thread_, StartThread("resolver", "etcd-resolver", [this] { Run(); }));
    return Status::OK();
  }

  void Stop() override {
    if (thread_.joinable()) {
      stop_.Notify();
      thread_.join();
    }
  }

  const std::string& target() const override { return target_; }

 private:
  void Run() {
    Result<std::vector<Sockaddr>> endpoints = ResolveHostPorts(parsed_.endpoints);
    while (!endpoints.ok()) {
      ReportError(endpoints.status());
      if (stop_.WaitFor(options_.max_backoff)) return;
      endpoints = ResolveHostPorts(parsed_.endpoints);
    }
    EtcdClient etcd(*endpoints, options_.call_timeout, &stop_);
    MonoDelta backoff = options_.min_backoff;
    for (;;) {
      std::vector<EtcdClient::KeyValue> kvs;
      int64_t revision = 0;
      Status s = etcd.RangePrefix(parsed_.prefix, &kvs, &revision);
      if (s.ok()) {
        entries_.clear();
        for (EtcdClient::KeyValue& kv : kvs) entries_[kv.key] = std::move(kv.value);
        Push();
        s = etcd.Watch(
            parsed_.prefix, revision + 1, [&] { backoff = options_.min_backoff; },
            [&](const std::vector<EtcdClient::Event>& events) {
              for (const EtcdClient::Event& ev : events) {
                if (ev.deleted) {
                  entries_.erase(ev.key);
                } else {
                  entries_[ev.key] = ev.value;
                }
              }
              Push();
            });
      }
      if (s.IsAborted()) return;  // Stop()
      ReportError(s);
      if (stop_.WaitFor(backoff)) return;
      backoff = std::min(backoff + backoff, options_.max_backoff);
    }
  }

  // Pushes the set the entries name, when it differs from the last one pushed.
  void Push() {
    std::vector<Sockaddr> addrs;
    for (const auto& [key, value] : entries_) {
      Result<Sockaddr> addr = Sockaddr::Parse(value);
      if (!addr.ok()) {
        LOG(WARNING) << target_ << ": skipping key " << key << ": value '" << value.substr(0, 100)
                     << "' is not host:port";
        continue;
      }
      addrs.push_back(*addr);
    }
    addrs = Normalized(std::move(addrs));
    if (last_ && *last_ == addrs) return;
    last_ = addrs;
    listener_(Result<std::vector<Sockaddr>>(std::move(addrs)));
  }

  void ReportError(const Status& s) {
    LOG(WARNING) << target_ << ": etcd unreachable, keeping the last servers: " << s.ToString();
    last_.reset();
    listener_(Result<std::vector<Sockaddr>>(s.CloneAndPrepend(target_)));
  }

  const std::string target_;
  const EtcdTarget parsed_;
  const EtcdResolverOptions options_;
  ResolverListener listener_;
  WakeFd stop_;
  std::map<std::string, std::string> entries_;  // key -> value, as etcd holds them
  // The last set pushed; empty after an error, so the next good set is pushed even if equal.
  std::optional<std::vector<Sockaddr>> last_;
  std::thread thread_;
};

}  // namespace

Result<std::unique_ptr<Resolver>> NewEtcdResolver(const std::string& target,
                                                  const std::string& rest,
                                                  EtcdResolverOptions options) {
  RRPC_ASSIGN_OR_RETURN(EtcdTarget parsed, ParseEtcdTarget(target, rest));
  return std::unique_ptr<Resolver>(new EtcdResolver(target, std::move(parsed), options));
}

}  // namespace rrpc::rpc
