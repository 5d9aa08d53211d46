// ServicePool: the services a messenger serves and the workers that run their handlers. A reactor
// resolves each InboundCall's method at arrival (unknown ones are answered at once) and puts it in
// the bounded service queue, ordered earliest-deadline-first; an idle worker takes it directly.
// A full queue refuses the call with the latest deadline (retriable ERROR_SERVER_TOO_BUSY); a
// call whose deadline passed while queued is answered ERROR_TIMED_OUT without running. Methods
// marked run_inline skip the queue: the reactor runs them on the spot.
//
// Pools (docs/isolation.md): each call runs in its method's WorkerPool: the default one, or a
// named one (MessengerOptions::service_pools) chosen by ServiceIf::SetPool / SetMethodPool. A
// method with a named pool, a background priority or a concurrency limit, or in a pool with an
// adaptive limit, gets a MethodAdmission at registration and is admitted (or refused too busy)
// before it is queued; the others take the plain queue path of the default pool.
//
// Long-lived calls (streams) hold an admission slot of their method's pool while open:
//
//   ServicePool::Admission slot = pool->TryAdmit(method, &why);
//   if (!slot.admitted()) { refuse with ERROR_SERVER_TOO_BUSY and `why` (retriable); }
//   ... keep `slot` in the stream; its destruction (the stream's close) frees the slot.
//
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
#include "rpc/core/worker_pool.h"
#include "rpc/observe/rpcz_store.h"
#include "rrpc/util/status.h"

namespace rrpc::rpc {

class Authorizer;
class MessengerMetrics;
class ResultTracker;
class ServiceIf;

struct ServicePoolOptions {
  std::string name = "rrpc";
  // The default pool (its name is ignored) and the named ones.
  ServicePoolConfig default_pool;
  std::vector<ServicePoolConfig> named_pools;
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

  // Before Start(). Fails if the service or one of its methods names a pool that does not exist.
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
  // Calls queued in all pools.
  size_t queue_size() const;
  // Every pool, the default first; for the web page and tests.
  std::vector<ServicePoolInfo> PoolSnapshots() const;
  // The named pool; nullptr when there is none. "" is the default pool.
  WorkerPool* FindPool(std::string_view name);

  // An admission slot of a method's pool, held by a long-lived call (a stream) while it is open;
  // moving it moves the slot, destroying it frees it. Any thread.
  class Admission {
   public:
    Admission() = default;
    Admission(Admission&& o) noexcept
        : admitted_(std::exchange(o.admitted_, false)), held_(std::exchange(o.held_, nullptr)) {}
    Admission& operator=(Admission&& o) noexcept;
    ~Admission() { Reset(); }
    // Whether the call may go on; false: refuse it as too busy.
    bool admitted() const { return admitted_; }
    // Frees the slot now.
    void Reset();

   private:
    friend class ServicePool;
    bool admitted_ = false;
    MethodAdmission* held_ = nullptr;  // nullptr: the method takes no slots
  };
  // Takes a slot of `method`'s pool and of `method`'s concurrency limit, as a queued call would;
  // refused (with why in *refusal, if given) when a limit is reached. `method` is one of this
  // pool's registered methods (FindService(...)->FindMethod(...)). Any thread, after Start().
  Admission TryAdmit(const RpcMethodInfo* method, std::string* refusal);
  // The calls in flight and the recent slow and failed ones, for /rpcz.
  RpczStore* rpcz_store() { return &rpcz_store_; }

 private:
  // Reactor thread: links a routed call into the /rpcz store's in-flight list.
  void TrackInRpcz(InboundCall* call);
  // Runs one call's handler (a worker, or the reactor for inline methods); `pool`: the pool it
  // ran in, told when it starts (nullptr: none). The call may be gone on return.
  // Returns true when the call opened a stream that took its admission slot (WorkerPool::RunFn).
  static bool RunCall(InboundCall* call, WorkerPool* pool);
  // RunCall() for a stream's call or a compressed request, from where the two part: checks that
  // the call and its method are of one kind, decompresses, and starts the stream around the
  // handler. `metrics` and `started` as RunCall() read them.
  static bool RunStreamOrCompressedCall(InboundCall* call, WorkerPool* pool, MethodMetrics* metrics,
                                        MonoTime started);
  // Registration: the pool and admission of `method` of `service`.
  Status SetUpAdmission(const ServiceIf& service, RpcMethodInfo* method);

  const uint64_t serial_;  // Unique per pool in this process (the route cache's key).
  const ServicePoolOptions options_;
  RpczStore rpcz_store_;  // Declared before the queue and workers: outlives the calls they hold.
  // Keyed by each service's own name (service_name() of the value, which lives as long as it).
  std::unordered_map<std::string_view, std::unique_ptr<ServiceIf>> services_;
  // Declared after the services: the pools' workers stop before the services go.
  std::vector<std::unique_ptr<MethodAdmission>> admissions_;
  WorkerPool default_pool_;
  std::vector<std::unique_ptr<WorkerPool>> named_pools_;
  std::atomic<bool> started_{false};
  std::atomic<bool> shut_down_{false};
  std::atomic<bool> refusing_calls_{false};
};

}  // namespace rrpc::rpc
