// The etcd:// resolver: etcd://host:port[,host:port...]/prefix lists every key under
// "/prefix/" (each value one "host:port") and then watches that range with a long-lived watch
// stream, pushing the whole set on every change. When etcd cannot be reached it keeps quiet
// about the set (the receiver keeps its last one), sends an error update and logs it, and tries
// again with backoff (100 ms doubling to 5 s), listing afresh on reconnect. A value that is not
// host:port is skipped and logged.
//
// Thread safety: as Resolver. Listing and watching run on the resolver's own thread, which also
// runs the listener.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "rrpc/rpc/discovery/resolver.h"
#include "rrpc/util/monotime.h"

namespace rrpc::rpc {

// An etcd target taken apart: the members' "host:port"s and the key prefix ("/prefix/", always
// ending in '/').
struct EtcdTarget {
  std::vector<std::string> endpoints;
  std::string prefix;
};

// `rest` is what follows "etcd://". InvalidArgument naming what is wrong: no endpoint, an
// endpoint not host:port, no prefix.
Result<EtcdTarget> ParseEtcdTarget(const std::string& target, const std::string& rest);

struct EtcdResolverOptions {
  // Bound on each listing call to etcd (connect, send, answer).
  MonoDelta call_timeout = MonoDelta::FromSeconds(5);
  MonoDelta min_backoff = MonoDelta::FromMilliseconds(100);
  MonoDelta max_backoff = MonoDelta::FromSeconds(5);
};

Result<std::unique_ptr<Resolver>> NewEtcdResolver(const std::string& target,
                                                  const std::string& rest,
                                                  EtcdResolverOptions options = {});

}  // namespace rrpc::rpc
