// Gauge: a value that goes up and down (open connections, queue length), and CallbackGauge,
// whose value a function computes when someone reads it (memory in use, uptime).
//
// A Gauge is one atomic on its own cache line: Set() needs a single home, so unlike Counter it
// is not striped; writers from many threads share that line. For a per-call quantity, prefer a
// Counter (or two: "started" and "finished"). Thread-safe.
//
// CallbackGauge: the callback runs on the reading thread (a web server or metrics writer thread),
// never under a registry or entity lock. Detach it before what it reads is destroyed:
//
//   gauge = entity->FindOrCreateCallbackGauge(&METRIC_queue_length, [this] { return Length(); });
//   ...
//   ~Queue() { gauge->DetachToLastValue(); }  // no call of the lambda runs after this returns
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>

#include "rrpc/util/mutex.h"
#include "util/metrics/metric.h"
#include "util/metrics/striping.h"

namespace rrpc {

class Gauge final : public Metric {
 public:
  // Use MetricEntity::FindOrCreateGauge; public for tests and stand-alone use.
  explicit Gauge(const MetricPrototype* prototype);

  void Set(int64_t v) { value_.store(v, std::memory_order_relaxed); }
  void IncrementBy(int64_t n) { value_.fetch_add(n, std::memory_order_relaxed); }
  void Increment() { IncrementBy(1); }
  void DecrementBy(int64_t n) { IncrementBy(-n); }
  void Decrement() { IncrementBy(-1); }
  int64_t value() const { return value_.load(std::memory_order_relaxed); }

  void ReadInto(MetricSnapshot* out) const override;

 private:
  // Alone on its line, so writes do not slow readers of the prototype pointer and vice versa.
  alignas(metrics_internal::kCacheLineSize) std::atomic<int64_t> value_{0};
};

class CallbackGauge final : public Metric {
 public:
  using Callback = std::function<int64_t()>;

  // Use MetricEntity::FindOrCreateCallbackGauge; public for tests and stand-alone use.
  CallbackGauge(const MetricPrototype* prototype, Callback callback);

  // Replaces the callback (a new owner of the state took over); it may be null (reads then give
  // the last value). Waits for a running call of the old callback to finish.
  void SetCallback(Callback callback);

  // Calls the callback (without it: returns the value it was detached to).
  int64_t value() const;

  // Stops calling the callback, from now on reporting `v`. Returns after any running call of
  // the callback has finished, so its state may be destroyed right after.
  void DetachToConstant(int64_t v);
  // As DetachToConstant, keeping what the callback returns now (one last call).
  void DetachToLastValue();

  void ReadInto(MetricSnapshot* out) const override;

 private:
  // Held while the callback runs, so detaching waits for a running call. A callback must not
  // read its own gauge.
  mutable Mutex mu_;
  Callback callback_ RRPC_GUARDED_BY(mu_);
  mutable int64_t last_ RRPC_GUARDED_BY(mu_) = 0;  // the value after detaching
};

}  // namespace rrpc
