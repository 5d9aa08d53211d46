// Backend: one server of a cluster channel: its address, its records of the methods called on
// it, and what the balancer and the health checks read: calls outstanding, EWMA latency, and
// whether it is in rotation (healthy), ejected until a time, or due a probe.
//
// Thread-safe: any calling thread reads it to pick; the reactors update it as calls finish
// (Record, through CallObserver). Its state is a few relaxed atomics: a pick may read a value a
// moment old, which only makes a balancing decision a moment stale. Reference counted: each
// channel snapshot holds its backends, and each call the backend it went to.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "rpc/core/attempt_engine.h"
#include "rpc/core/outbound_call.h"
#include "rpc/core/remote_method.h"
#include "rrpc/rpc/cluster/channel_options.h"
#include "rrpc/util/monotime.h"
#include "rrpc/util/mutex.h"
#include "rrpc/util/sockaddr.h"
#include "util/metrics/metric_registry.h"

namespace rrpc::rpc {

class Backend final : public CallObserver {
 public:
  enum class Health { kHealthy, kProbeDue, kEjected };

  // `registry`: where its metrics go (nullptr: none); `channel_name` names its metric entity.
  Backend(const Sockaddr& addr, const std::string& channel_name, MetricRegistry* registry,
          const BackendHealthOptions& options);
  ~Backend() override;

  const Sockaddr& addr() const { return addr_; }

  // The method records of `service` on this backend (the messenger's connection is found by
  // address). Services are few per channel: found by name without a lock; a new one is added
  // under mu_.
  RemoteMethodCache* Methods(const std::string& service) {
    const int n = services_size_.load(std::memory_order_acquire);
    for (int i = 0; i < n; i++) {
      const ServiceSlot& slot = services_[i];
      if (*slot.name == service) return slot.cache;
    }
    return MethodsSlow(service);
  }

  // Calling thread, as a call to it is queued.
  void CallStarted() {
    outstanding_.fetch_add(1, std::memory_order_relaxed);
    if (calls_ != nullptr) calls_->Increment();
  }
  int outstanding() const { return outstanding_.load(std::memory_order_relaxed); }
  // Attempts sent to it so far (0 without a metric registry).
  int64_t calls() const { return calls_ != nullptr ? calls_->value() : 0; }
  int64_t ewma_latency_ns() const { return ewma_ns_.load(std::memory_order_relaxed); }
  // When its last answer came (MonoTime nanoseconds; 0 before any).
  int64_t last_answer_ns() const { return last_answer_ns_.load(std::memory_order_relaxed); }

  // Health as of `now` (read only when the backend was ejected at all: `now` is read lazily).
  Health health(MonoTime now) const {
    const int64_t until = ejected_until_ns_.load(std::memory_order_relaxed);
    if (until == 0) return Health::kHealthy;
    return now.ToNanoseconds() >= until ? Health::kProbeDue : Health::kEjected;
  }
  bool ejected() const { return ejected_until_ns_.load(std::memory_order_relaxed) != 0; }
  // When an ejected backend may be probed next (MonoTime() when healthy).
  MonoTime ejected_until() const;
  // A call is about to go to this backend as its probe: the next probe waits another backoff,
  // so that one hanging probe does not let every call through.
  void ClaimProbe(MonoTime now);

  // Reactor (or caller) thread, when a call to this backend ends: outstanding, latency, errors
  // and health. Returns what the end means.
  AttemptOutcome Record(const OutboundCall& call, const Status& status, const ErrorStatusPB* error);
  // The thread that ended a stream's opening call through the channel, when it failed: a
  // server that refused the stream as unavailable, or whose connection failed, is ejected as for
  // a call (errors counted). A stream's other ends say nothing of its server: it is no latency
  // sample and holds no outstanding count.
  void RecordStreamEnd(const Status& status, const ErrorStatusPB* error);
  // CallObserver: calls sent by the channel's one-backend path report here directly.
  void OnCallFinished(const OutboundCall& call, const Status& status,
                      const ErrorStatusPB* error) override {
    Record(call, status, error);
  }

  void CountRetry() {
    if (retries_ != nullptr) retries_->Increment();
  }
  void CountHedge() {
    if (hedges_ != nullptr) hedges_->Increment();
  }
  int64_t ejections() const { return ejections_.load(std::memory_order_relaxed); }
  // "healthy", "ejected" or "probing" (for the web UI and logs).
  const char* HealthName() const;

 private:
  void Eject(MonoTime now);
  void Restore();
  RemoteMethodCache* MethodsSlow(const std::string& service);

  const Sockaddr addr_;
  const BackendHealthOptions options_;

  std::atomic<int> outstanding_{0};
  std::atomic<int64_t> ewma_ns_{0};
  std::atomic<int64_t> last_answer_ns_{0};
  // 0 while healthy; else when it may be probed (MonoTime nanoseconds).
  std::atomic<int64_t> ejected_until_ns_{0};
  // When it was last ejected: answers to calls sent before then do not bring it back (a draining
  // server still answers the calls it had).
  std::atomic<int64_t> ejected_at_ns_{0};
  std::atomic<int> ejection_level_{0};  // failed probes in a row: the backoff's exponent
  std::atomic<int64_t> ejections_{0};

  // Per-service method records: the first kServiceSlots published without a lock (as
  // RemoteMethodCache's slots), any further in `more_services_` under `mu_`.
  static constexpr int kServiceSlots = 8;
  struct ServiceSlot {
    const std::string* name = nullptr;  // the service's name (a key of caches_)
    RemoteMethodCache* cache = nullptr;
  };
  Mutex mu_;
  std::atomic<int> services_size_{0};
  ServiceSlot services_[kServiceSlots];
  std::map<std::string, std::unique_ptr<RemoteMethodCache>> caches_ RRPC_GUARDED_BY(mu_);

  MetricRegistry* const registry_;
  scoped_refptr<MetricEntity> entity_;
  Counter* calls_ = nullptr;
  Counter* errors_ = nullptr;
  Counter* ejections_total_ = nullptr;
  Counter* retries_ = nullptr;
  Counter* hedges_ = nullptr;
  CallbackGauge* outstanding_gauge_ = nullptr;
  CallbackGauge* latency_gauge_ = nullptr;
  CallbackGauge* ejected_gauge_ = nullptr;
};

}  // namespace rrpc::rpc
