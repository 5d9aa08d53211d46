// WorkerPool: one service pool's bounded earliest-deadline-first queue (a foreground and a
// background lane), the workers that run its calls, and its admission: the static concurrency
// limits of its methods and its adaptive limit (docs/isolation.md). The ServicePool routes each
// call to its method's pool; a messenger has a default pool and any named ones
// (MessengerOptions::service_pools).
//
// Admission: a call of a method with a MethodAdmission holds a slot of its method and of its pool
// from Queue() until its handler returns (or it is answered without running); a call beyond a
// limit is refused at once with retriable ERROR_SERVER_TOO_BUSY. Methods without one (the default
// pool with no priority, limit or adaptive limit: nothing configured) take the plain queue path
// and are not counted.
//
// Thread-safe: Queue and TryAcquire from reactors, Release from any thread, Start and Shutdown
// from the owner.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "rpc/core/adaptive_limit.h"
#include "rpc/core/inbound_call.h"
#include "rrpc/rpc/service_pool_options.h"
#include "rrpc/util/status.h"
#include "util/deadline_queue.h"
#include "util/metrics/metric_registry.h"

namespace rrpc {
class CallbackGauge;
class Counter;
}  // namespace rrpc

namespace rrpc::rpc {

class MessengerMetrics;
class WorkerPool;

// A method's admission state, owned by its service pool, made at registration for every method
// that needs more than the plain queue. RpcMethodInfo::admission points here.
struct MethodAdmission {
  WorkerPool* pool = nullptr;
  std::string name;  // "<service>.<method>"
  CallPriority priority = CallPriority::kForeground;
  int max_concurrency = 0;  // 0: no static limit
  std::atomic<int> in_flight{0};
  std::atomic<int64_t> refusals{0};  // by the static limit
  Counter* refusals_metric = nullptr;
  CallbackGauge* in_flight_metric = nullptr;
};

class WorkerPool {
 public:
  // Runs one call on a worker (ServicePool's handler path); the call may be gone on return.
  // Returns true when the call's admission slot went to the stream the call opened, which holds
  // it while open (docs/streams.md: streams count against their pool).
  using RunFn = bool (*)(InboundCall* call, WorkerPool* pool);

  // `messenger_metrics` (nullptr: none) gets the pool's entity ("service_pool",
  // "<messenger>.<pool>") and its overflow and idle-poll counts; it outlives the pool.
  WorkerPool(const std::string& messenger_name, ServicePoolConfig config, MonoDelta idle_spin,
             MessengerMetrics* messenger_metrics, RunFn run);
  ~WorkerPool();

  const std::string& name() const { return config_.name; }
  const ServicePoolConfig& config() const { return config_; }
  // Whether every call must take the admission path (the pool has an adaptive limit).
  bool needs_admission() const { return limit_ != nullptr; }
  AdaptiveLimit* adaptive_limit() { return limit_.get(); }

  Status Start();
  // Stops the workers after they finish the handler they run; calls still queued are answered
  // ERROR_UNAVAILABLE. Idempotent.
  void Shutdown();

  // Reactor thread: queues `call` (routed, `admission` its method's or nullptr), or answers it
  // (too busy, shutting down). Takes the call's slots first when `admission` is set.
  void Queue(InboundCall* call, MethodAdmission* admission);

  // Takes a slot of `method` and of this pool; false (and why in *refusal, if given) when a
  // limit is reached. Any thread. Each true is matched by one Release().
  bool TryAcquire(MethodAdmission* method, std::string* refusal);
  void Release(MethodAdmission* method);

  // Worker thread, as a call of `method` starts at `now` after `queue_time` in the queue: feeds
  // the adaptive limit.
  void OnStarted(MonoDelta queue_time, MonoTime now);

  // Registration (before Start()): `method` (owned by the ServicePool, outliving this) runs here;
  // makes its per-method metrics (entity "method", "<service>.<method>").
  void AddMethod(MethodAdmission* method);

  // The pool now, with its methods that take admission. Any thread.
  ServicePoolInfo Snapshot() const;
  size_t queue_size() const { return queue_.size(); }

 private:
  struct CallDeadline {
    MonoTime operator()(const InboundCall* call) const { return call->deadline(); }
  };
  using Queue_ = DeadlineQueue<InboundCall, CallDeadline>;

  // Registers the pool's entity and metrics, once (constructor or registration).
  void AttachPoolMetrics();
  void RunWorker();
  void RefuseTooBusy(InboundCall* call, const std::string& why);
  // Ends a call's admission: its slots and, when it ran in the background lane (`background`),
  // its share of that lane. `slot_kept`: a stream holds the call's slot (RunFn).
  void Finished(const RpcMethodInfo* method, bool background, bool slot_kept);

  const ServicePoolConfig config_;
  const std::string messenger_name_;
  MessengerMetrics* const messenger_metrics_;
  const RunFn run_;
  const std::unique_ptr<AdaptiveLimit> limit_;  // nullptr: none
  Queue_ queue_;
  std::vector<std::thread> workers_;
  std::atomic<bool> started_{false};
  std::atomic<bool> shut_down_{false};
  std::atomic<int> in_flight_{0};  // admission-path calls holding a slot
  std::atomic<int64_t> limit_refusals_{0};
  std::atomic<int64_t> method_refusals_{0};
  std::atomic<int64_t> overflows_{0};
  // Metrics (all null without messenger metrics). The callback gauges read this pool: detached
  // in the destructor.
  scoped_refptr<MetricEntity> entity_;
  std::vector<CallbackGauge*> gauges_;
  std::vector<MethodAdmission*> methods_;  // registered before Start(); read-only after
  Counter* limit_refusals_metric_ = nullptr;
  Counter* method_refusals_metric_ = nullptr;
};

}  // namespace rrpc::rpc
