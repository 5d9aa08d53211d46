// EtcdRegistration: a server's entry in etcd, the other half of the etcd:// resolver. It puts
// key "<prefix><address>" = "<address>" under a lease of `ttl`, renews the lease every ttl/3 on
// its own thread (checking the key is still there, and putting it back if not), and registers
// afresh (new lease, put again) when the lease is lost (expired while the server was cut off
// longer than the TTL, revoked). Withdraw() deletes the key and
// revokes the lease, so resolvers drop the server at once rather than after the TTL.
//
// Thread safety: Start, Withdraw and the destructor from one controlling thread (ServerBase's).
//
//   EtcdRegistration reg(opts);                 // opts.target = "etcd://127.0.0.1:2379/kv"
//   RRPC_RETURN_NOT_OK(reg.Start());            // malformed target: InvalidArgument
//   ...
//   reg.Withdraw();                             // before draining
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "rpc/discovery/etcd_resolver.h"
#include "rpc/discovery/resolver_util.h"
#include "rrpc/util/monotime.h"
#include "rrpc/util/status.h"

namespace rrpc::rpc {

class EtcdClient;

struct EtcdRegistrationOptions {
  // "etcd://host:port[,host:port...]/prefix", as the clients' resolver target.
  std::string target;
  // What clients should connect to ("host:port"): the key's last part and its value.
  std::string address;
  // The lease's time to live: how long a server that died without withdrawing stays listed.
  MonoDelta ttl = MonoDelta::FromSeconds(10);
  // Bound on each call to etcd.
  MonoDelta call_timeout = MonoDelta::FromSeconds(5);
};

class EtcdRegistration {
 public:
  explicit EtcdRegistration(EtcdRegistrationOptions options);
  // Withdraws if still registered.
  ~EtcdRegistration();
  EtcdRegistration(const EtcdRegistration&) = delete;
  EtcdRegistration& operator=(const EtcdRegistration&) = delete;

  // Checks the options and starts the keepalive thread, which registers at once and keeps
  // trying (with backoff) while etcd cannot be reached: a server starts even when etcd is down.
  // InvalidArgument for a malformed target or address, or a TTL under 3 s.
  Status Start();
  // Stops renewing, deletes the key and revokes the lease (each bounded by call_timeout).
  // Idempotent. Returns the first failure (the lease then expires by itself within its TTL).
  Status Withdraw();

  // The key this server is registered under ("/prefix/host:port").
  const std::string& key() const { return key_; }
  // Whether the key is in etcd under a live lease, as of the last renewal. Thread-safe.
  bool registered() const { return registered_.load(); }

 private:
  void Run();
  // Grants a lease and puts the key under it.
  Status Register(EtcdClient* etcd);
  // Puts the key back (same lease) when someone deleted or overwrote it.
  Status RestoreKey(EtcdClient* etcd);

  const EtcdRegistrationOptions options_;
  EtcdTarget parsed_;
  std::string key_;
  std::vector<Sockaddr> endpoints_;
  WakeFd stop_;
  std::thread thread_;
  std::atomic<bool> registered_{false};
  std::atomic<int64_t> lease_{0};  // written by the thread, read by Withdraw once it joined it
  bool withdrawn_ = false;
};

}  // namespace rrpc::rpc
