// Resolver: turns a target string into the set of server addresses behind it, and keeps that set
// current. The cluster channel (rpc/cluster/) owns one per target; ServerBase's registry writes
// what an etcd resolver reads.
//
// Targets:
//   list://h1:p1,h2:p2          a fixed list (host names resolved once, at Start)
//   file:///path/to/servers     one host:port a line, '#' comments; reloaded when it changes
//   dns:///name:port            A/AAAA (and SRV for dns+srv:///_svc._tcp.name), re-resolved
//   etcd://host:port/prefix     every key under the prefix (value host:port), watched
//
// Thread safety: Start and Stop from any one thread; the listener runs on the resolver's own
// thread (or inside Start, for the first set), never two at once, and never after Stop returns.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rrpc/util/sockaddr.h"
#include "rrpc/util/status.h"

namespace rrpc::rpc {

// One update: the whole current set (never a delta). An error update (e.g. etcd unreachable)
// means "could not refresh": the receiver keeps its last good set and reports the error.
using ResolverListener = std::function<void(const Result<std::vector<Sockaddr>>& update)>;

class Resolver {
 public:
  virtual ~Resolver() = default;

  // Starts watching; `listener` receives the first set (or error) as soon as it is known.
  virtual Status Start(ResolverListener listener) = 0;
  // Stops watching; when it returns, the listener is not running and will not run again.
  virtual void Stop() = 0;
  // The target this resolver watches, as given (for logs, metrics and the web UI).
  virtual const std::string& target() const = 0;
};

// A resolver for `target`, or InvalidArgument naming what is malformed (unknown scheme, bad
// host:port, empty list). Does no I/O: errors reaching the source come through the listener.
Result<std::unique_ptr<Resolver>> NewResolver(const std::string& target);

}  // namespace rrpc::rpc
