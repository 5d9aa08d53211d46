// ProbeResponder: the server's half of the path probe's second direction (docs/rdma.md, "The
// path probe"). A client that asked for it (RDMA_PROBE_REPLY) awaits, after its probe's message
// of a path MTU, one of the same size back from the server's probe, so that MTU-sized packets
// have crossed both ways before either side leaves TCP. The server's probe can send only once
// the client's has connected, which it learns from its receive's completion: each answering
// probe's CQ signals this one completion channel, which a thread of its own reads, posting each
// probe's answer as its receive completes. So neither a setup thread nor a reactor waits for a
// client that may never send. One per device (RdmaDevice::ProbeResponder, made by the first probe
// that answers), owned by the device; it outlives the probes it watches (they hold the device).
// Thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <thread>
#include <unordered_map>

#include "rpc/rdma/verbs.h"
#include "rrpc/util/mutex.h"

namespace rrpc::rdma {

class PathProbe;

class ProbeResponder {
 public:
  static Result<std::unique_ptr<ProbeResponder>> Start(Context* ctx);
  // Stops and joins the thread. REQUIRES: every probe watched has been unwatched.
  ~ProbeResponder();

  // The channel an answering probe's CQ signals.
  CompletionChannel* channel() const { return channel_.get(); }
  // From now on, an event of `cq` (the probe's, armed by the caller after this) runs
  // `probe`->Answer() on the responder's thread.
  void Watch(CompletionQueue* cq, PathProbe* probe);
  // No more: on return the responder's thread no longer touches `probe`, and `destroy` (which
  // destroys the probe's QP and `cq`) has run under the lock the channel's events are read
  // under, so that no event of `cq` is read while it goes.
  void Unwatch(CompletionQueue* cq, const std::function<void()>& destroy);

 private:
  ProbeResponder(std::unique_ptr<CompletionChannel> channel, int stop_fd)
      : channel_(std::move(channel)), stop_fd_(stop_fd) {}
  void Run();

  Mutex mu_;
  std::unordered_map<CompletionQueue*, PathProbe*> probes_ RRPC_GUARDED_BY(mu_);
  const std::unique_ptr<CompletionChannel> channel_;
  const int stop_fd_;  // an eventfd: readable once the thread is to stop
  std::thread thread_;
};

}  // namespace rrpc::rdma
