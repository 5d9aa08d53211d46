// ServicePool: the services a messenger serves and the workers that run their handlers. A reactor
// resolves each InboundCall's method at arrival (unknown ones are answered at once) and puts it in
// the bounded service queue, ordered earliest-deadline-first; an idle worker takes it directly.
// A full queue refuses the call with the latest deadline (retriable ERROR_SERVER_TOO_BUSY); a
// call whose deadline passed while queued is answered ERROR_TIMED_OUT without running. Methods
// marked run_inline skip the queue: the reactor runs them on the spot.
// Thread-safe.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "rpc/core/inbound_call.h"
#include "rpc/observe/rpcz_store.h"
#include "rrpc/util/status.h"
#include "util/deadline_queue.h"

namespace rrpc::rpc {

class Authorizer;
class MessengerMetrics;
class ResultTracker;
class ServiceIf;

struct ServicePoolOptions {
  std::string name = "rrpc";
  int num_workers = 2;
  size_t queue_length = 64;
  // How long an idle worker polls for the next call before it sleeps (DeadlineQueue).
  MonoDelta worker_idle_spin;
  // The messenger's metrics (it owns them and outlives the pool); nullptr: none.
  MessengerMetrics* metrics = nullptr;
  // Checks the calls of services without an authorizer of their own; nullptr: allow all.
  std::shared_ptr<const Authorizer> authorizer;
  // Runs calls of tracked methods at most once (result_tracker.h; the messenger owns it);
  // nullptr: tracked methods run every call, as untracked ones do.
  ResultTracker* result_tracker = nullptr;
};

class ServicePool {
 public:
  explicit ServicePool(ServicePoolOptions options);
  ~ServicePool();

  // Before Start().
  Status RegisterService(std::unique_ptr<ServiceIf> service);
  Status Start();
  // Stops the workers after they finish the handler they run; calls still queued are answered
  // ERROR_UNAVAILABLE. Idempotent.
  void Shutdown();
  // From now on calls that arrive are answered at once with retriable ERROR_UNAVAILABLE ("server
  // shutting down"); calls already queued or running go on. For a graceful drain. Any thread.
  void RefuseNewCalls() { refusing_calls_.store(true, std::memory_order_release); }

  // Reactor thread: routes one parsed call. Errors are answered here, inline methods run here;
  // the rest is queued.
  void QueueInboundCall(std::unique_ptr<InboundCall> call);

  const ServiceIf* FindService(std::string_view name) const;
  std::vector<const ServiceIf*> services() const;
  size_t queue_size() const { return queue_.size(); }
  // The calls in flight and the recent slow and failed ones, for /rpcz.
  RpczStore* rpcz_store() { return &rpcz_store_; }

 private:
  struct CallDeadline {
    MonoTime operator()(const InboundCall* call) const { return call->deadline(); }
  };
  // Reactor thread: links a routed call into the /rpcz store's in-flight list.
  void TrackInRpcz(InboundCall* call);
  void RunWorker();
  void RunCall(InboundCall* call);

  const uint64_t serial_;  // Unique per pool in this process (the route cache's key).
  const ServicePoolOptions options_;
  RpczStore rpcz_store_;  // Declared before the queue and workers: outlives the calls they hold.
  // Keyed by each service's own name (service_name() of the value, which lives as long as it).
  std::unordered_map<std::string_view, std::unique_ptr<ServiceIf>> services_;
  DeadlineQueue<InboundCall, CallDeadline> queue_;
  std::vector<std::thread> workers_;
  std::atomic<bool> started_{false};
  std::atomic<bool> shut_down_{false};
  std::atomic<bool> refusing_calls_{false};
};

}  // namespace rrpc::rpc
