#include "rpc/discovery/etcd_registration.h"

#include <glog/logging.h>

#include <algorithm>
#include <utility>

#include "rpc/discovery/etcd_client.h"
#include "util/thread.h"

namespace rrpc::rpc {

EtcdRegistration::EtcdRegistration(EtcdRegistrationOptions options)
    : options_(std::move(options)) {}

EtcdRegistration::~EtcdRegistration() { (void)Withdraw(); }

Status EtcdRegistration::Start() {
  const std::string scheme = "etcd://";
  if (options_.target.compare(0, scheme.size(), scheme) != 0) {
    return Status::InvalidArgument("registry must be etcd://host:port/prefix", options_.target);
  }
  RRPC_ASSIGN_OR_RETURN(parsed_,
                        ParseEtcdTarget(options_.target, options_.target.substr(scheme.size())));
  std::string host;
  uint16_t port = 0;
  Status s = SplitHostPort(options_.address, &host, &port);
  if (!s.ok()) return Status::InvalidArgument("registered address: " + s.message());
  if (options_.ttl < MonoDelta::FromSeconds(3)) {
    return Status::InvalidArgument("registry lease TTL must be at least 3 s");
  }
  RRPC_ASSIGN_OR_RETURN(endpoints_, ResolveHostPorts(parsed_.endpoints));
  key_ = parsed_.prefix + options_.address;
  RRPC_ASSIGN_OR_RETURN(thread_, StartThread("registry", "etcd-registry", [this] { Run(); }));
  return Status::OK();
}

Status EtcdRegistration::Register(EtcdClient* etcd) {
  RRPC_ASSIGN_OR_RETURN(int64_t lease, etcd->LeaseGrant(options_.ttl.ToMilliseconds() / 1000));
  lease_.store(lease);
  RRPC_RETURN_NOT_OK(etcd->Put(key_, options_.address, lease));
  registered_.store(true);
  LOG(INFO) << "registered " << key_ << " in " << options_.target << " (lease " << lease << ", TTL "
            << options_.ttl.ToString() << ")";
  return Status::OK();
}

Status EtcdRegistration::RestoreKey(EtcdClient* etcd) {
  Result<EtcdClient::KeyValue> kv = etcd->Get(key_);
  if (kv.ok() && kv->value == options_.address && kv->lease == lease_.load()) return Status::OK();
  if (!kv.ok() && !kv.status().IsNotFound()) return kv.status();
  LOG(WARNING) << key_ << ": the key was deleted or changed in etcd; putting it back";
  return etcd->Put(key_, options_.address, lease_.load());
}

void EtcdRegistration::Run() {
  EtcdClient etcd(endpoints_, options_.call_timeout, &stop_);
  const MonoDelta renew_every = MonoDelta::FromMilliseconds(options_.ttl.ToMilliseconds() / 3);
  const MonoDelta min_backoff = MonoDelta::FromMilliseconds(100);
  MonoDelta backoff = min_backoff;
  for (;;) {
    Status s;
    if (!registered_.load()) {
      s = Register(&etcd);
    } else {
      Result<int64_t> ttl = etcd.LeaseKeepAlive(lease_.load());
      if (ttl.ok() && *ttl <= 0) {
        LOG(WARNING) << key_ << ": lease " << lease_.load() << " lost; registering again";
        registered_.store(false);
        continue;
      }
      s = ttl.status();
      if (s.ok()) s = RestoreKey(&etcd);
    }
    if (s.IsAborted()) return;  // Withdraw()
    MonoDelta wait = renew_every;
    if (!s.ok()) {
      LOG(WARNING) << key_ << ": etcd registry " << options_.target << ": " << s.ToString();
      wait = std::min(backoff, renew_every);
      backoff = std::min(backoff + backoff, renew_every);
    } else {
      backoff = min_backoff;
    }
    if (stop_.WaitFor(wait)) return;
  }
}

Status EtcdRegistration::Withdraw() {
  if (withdrawn_ || !thread_.joinable()) return Status::OK();
  withdrawn_ = true;
  stop_.Notify();
  thread_.join();
  registered_.store(false);
  EtcdClient etcd(endpoints_, options_.call_timeout);
  Status deleted = etcd.Delete(key_);
  Status revoked = lease_.load() != 0 ? etcd.LeaseRevoke(lease_.load()) : Status::OK();
  if (revoked.IsNotFound()) revoked = Status::OK();  // expired already
  if (deleted.ok() && revoked.ok()) {
    LOG(INFO) << "withdrew " << key_ << " from " << options_.target;
    return Status::OK();
  }
  Status s = deleted.ok() ? revoked : deleted;
  LOG(WARNING) << "withdrawing " << key_ << " from " << options_.target << ": " << s.ToString()
               << " (the entry goes when its lease expires)";
  return s;
}

}  // namespace rrpc::rpc
