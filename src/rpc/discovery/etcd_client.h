// EtcdClient: the etcd v3 calls the etcd resolver and registry make, through etcd's JSON gateway
// (HTTP/1.1 POST /v3/..., one connection per call) on a small blocking socket client of our own.
// Several endpoints (a cluster's members) are tried in turn; a call that cannot reach one moves
// on to the next. Every socket wait is bounded by `timeout`, except reading a watch stream,
// which waits for events until the stream breaks; every wait also ends when `stop` (if given)
// is notified, with Status::Aborted.
//
// Thread safety: one thread at a time per client (the resolver's or the registry's thread).
//
//   EtcdClient etcd({Sockaddr::Parse("127.0.0.1:2379").value()}, MonoDelta::FromSeconds(5));
//   RRPC_ASSIGN_OR_RETURN(int64_t lease, etcd.LeaseGrant(10));
//   RRPC_RETURN_NOT_OK(etcd.Put("/svc/10.0.0.1:7050", "10.0.0.1:7050", lease));
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "rpc/discovery/resolver_util.h"
#include "rrpc/util/monotime.h"
#include "rrpc/util/sockaddr.h"
#include "rrpc/util/status.h"

namespace rrpc::rpc {

class EtcdClient {
 public:
  struct KeyValue {
    std::string key;
    std::string value;
    int64_t lease = 0;  // 0: none
  };
  // One watch event: a put (value set) or a delete of `key`.
  struct Event {
    bool deleted = false;
    std::string key;
    std::string value;
  };

  // `endpoints` not empty; `stop` (not owned, may be null) outlives the client.
  EtcdClient(std::vector<Sockaddr> endpoints, MonoDelta timeout, const WakeFd* stop = nullptr);

  // Every key under `prefix` and the store's revision at that moment.
  Status RangePrefix(const std::string& prefix, std::vector<KeyValue>* kvs, int64_t* revision);
  // The value of `key`, or NotFound.
  Result<KeyValue> Get(const std::string& key);
  // Sets `key`, attached to `lease` (0: none).
  Status Put(const std::string& key, const std::string& value, int64_t lease);
  Status Delete(const std::string& key);
  // A new lease of `ttl_seconds`; its id.
  Result<int64_t> LeaseGrant(int64_t ttl_seconds);
  // Renews `lease`; its remaining TTL in seconds, 0 when the lease is gone (expired, revoked).
  Result<int64_t> LeaseKeepAlive(int64_t lease);
  Status LeaseRevoke(int64_t lease);

  // Watches every key under `prefix` from `start_revision`; `on_events` gets each batch of
  // events in order (and `on_created` once the watch is in place). Returns when the stream ends:
  // NetworkError (etcd gone), Aborted (stop notified), IllegalState (etcd cancelled the watch,
  // e.g. the revision was compacted: list again). Never returns OK.
  Status Watch(const std::string& prefix, int64_t start_revision,
               const std::function<void()>& on_created,
               const std::function<void(const std::vector<Event>&)>& on_events);

  // The end of the key range of `prefix` (its last byte incremented), as etcd wants it.
  static std::string PrefixRangeEnd(const std::string& prefix);

 private:
  // POSTs `body` to `path` on the current endpoint, trying the others when it cannot be
  // reached; the response body of a 200 answer in `*response`; the gateway's error otherwise.
  Status Call(const std::string& path, const std::string& body, std::string* response);

  const std::vector<Sockaddr> endpoints_;
  const MonoDelta timeout_;
  const WakeFd* const stop_;
  size_t current_ = 0;  // the endpoint tried first
};

}  // namespace rrpc::rpc
