#include "rpc/cluster/backend.h"

#include <algorithm>

namespace rrpc::rpc {

namespace {

inline constexpr MetricPrototype METRIC_backend_calls_total = MetricPrototype::Counter(
    "backend_calls_total", "Calls sent", MetricUnit::kRequests,
    "Attempts the channel sent to this backend (first attempts, retries and hedges).");
inline constexpr MetricPrototype METRIC_backend_errors_total = MetricPrototype::Counter(
    "backend_errors_total", "Failed attempts", MetricUnit::kRequests,
    "Attempts to this backend that did not end OK (refusals, connection failures, timeouts, "
    "application errors).");
inline constexpr MetricPrototype METRIC_backend_ejections_total = MetricPrototype::Counter(
    "backend_ejections_total", "Ejections", MetricUnit::kUnits,
    "Times the backend left the rotation (a failed connection, an unavailable or draining "
    "answer, or a failed probe).");
inline constexpr MetricPrototype METRIC_backend_retries_total = MetricPrototype::Counter(
    "backend_retries_total", "Retries sent", MetricUnit::kRequests,
    "Attempts sent to this backend as retries of a call that failed on another.");
inline constexpr MetricPrototype METRIC_backend_hedges_total = MetricPrototype::Counter(
    "backend_hedges_total", "Hedges sent", MetricUnit::kRequests,
    "Second attempts sent to this backend because the first had not answered in time.");
inline constexpr MetricPrototype METRIC_backend_outstanding_calls =
    MetricPrototype::Gauge("backend_outstanding_calls", "Outstanding calls", MetricUnit::kRequests,
                           "Attempts to this backend sent and not yet finished.");
inline constexpr MetricPrototype METRIC_backend_ewma_latency_us = MetricPrototype::Gauge(
    "backend_ewma_latency_us", "EWMA latency", MetricUnit::kMicroseconds,
    "Moving average of the backend's response times (weight 1/8 to each new answer).");
inline constexpr MetricPrototype METRIC_backend_ejected = MetricPrototype::Gauge(
    "backend_ejected", "Ejected", MetricUnit::kUnits,
    "1 while the backend is out of the rotation (waiting for a probe to succeed), else 0.");

}  // namespace

Backend::Backend(const Sockaddr& addr, const std::string& channel_name, MetricRegistry* registry,
                 const BackendHealthOptions& options)
    : addr_(addr), options_(options), registry_(registry) {
  if (registry_ == nullptr) return;
  const std::string address = addr_.ToString();
  entity_ = registry_->FindOrCreateEntity("backend", channel_name + "/" + address,
                                          {{"channel", channel_name}, {"address", address}});
  calls_ = entity_->FindOrCreateCounter(&METRIC_backend_calls_total);
  errors_ = entity_->FindOrCreateCounter(&METRIC_backend_errors_total);
  ejections_total_ = entity_->FindOrCreateCounter(&METRIC_backend_ejections_total);
  retries_ = entity_->FindOrCreateCounter(&METRIC_backend_retries_total);
  hedges_ = entity_->FindOrCreateCounter(&METRIC_backend_hedges_total);
  outstanding_gauge_ = entity_->FindOrCreateCallbackGauge(&METRIC_backend_outstanding_calls,
                                                          [this] { return outstanding(); });
  latency_gauge_ = entity_->FindOrCreateCallbackGauge(&METRIC_backend_ewma_latency_us,
                                                      [this] { return ewma_latency_ns() / 1000; });
  ejected_gauge_ = entity_->FindOrCreateCallbackGauge(&METRIC_backend_ejected,
                                                      [this] { return ejected() ? 1 : 0; });
}

Backend::~Backend() {
  if (entity_ != nullptr) {
    // The gauges read this object: they keep their last values, and the entity leaves /metrics
    // (a backend that comes back gets a fresh one).
    outstanding_gauge_->DetachToConstant(0);
    latency_gauge_->DetachToConstant(0);
    ejected_gauge_->DetachToConstant(0);
    registry_->Unregister(entity_.get());
  }
  for (int i = 0; i < services_size_.load(std::memory_order_acquire); i++) {
    services_[i] = ServiceSlot();
  }
}

RemoteMethodCache* Backend::MethodsSlow(const std::string& service) {
  MutexLock l(mu_);
  auto it = caches_.find(service);
  if (it == caches_.end()) {
    it = caches_.emplace(service, std::make_unique<RemoteMethodCache>()).first;
  }
  const int n = services_size_.load(std::memory_order_relaxed);
  bool listed = false;
  for (int i = 0; i < n; i++) listed |= services_[i].name == &it->first;
  if (!listed && n < kServiceSlots) {
    services_[n] = ServiceSlot{&it->first, it->second.get()};
    services_size_.store(n + 1, std::memory_order_release);
  }
  return it->second.get();
}

MonoTime Backend::ejected_until() const {
  const int64_t until = ejected_until_ns_.load(std::memory_order_relaxed);
  return until == 0 ? MonoTime() : MonoTime::FromNanoseconds(until);
}

namespace {
MonoDelta EjectionWait(const BackendHealthOptions& options, int level) {
  int64_t wait = options.ejection_base.ToNanoseconds();
  for (int i = 0; i < level && wait < options.ejection_max.ToNanoseconds(); i++) wait *= 2;
  return MonoDelta::FromNanoseconds(std::min(wait, options.ejection_max.ToNanoseconds()));
}
}  // namespace

void Backend::ClaimProbe(MonoTime now) {
  const int level = ejection_level_.load(std::memory_order_relaxed);
  int64_t until = ejected_until_ns_.load(std::memory_order_relaxed);
  if (until == 0 || until > now.ToNanoseconds()) return;
  ejected_until_ns_.compare_exchange_strong(
      until, (now + EjectionWait(options_, level)).ToNanoseconds(), std::memory_order_relaxed);
}

void Backend::Eject(MonoTime now) {
  const int level = ejection_level_.load(std::memory_order_relaxed);
  const bool was_ejected = ejected();
  ejected_at_ns_.store(now.ToNanoseconds(), std::memory_order_relaxed);
  ejected_until_ns_.store((now + EjectionWait(options_, level)).ToNanoseconds(),
                          std::memory_order_relaxed);
  ejection_level_.store(std::min(level + 1, 30), std::memory_order_relaxed);
  if (!was_ejected) {
    ejections_.fetch_add(1, std::memory_order_relaxed);
    if (ejections_total_ != nullptr) ejections_total_->Increment();
  }
}

void Backend::Restore() {
  ejection_level_.store(0, std::memory_order_relaxed);
  ejected_until_ns_.store(0, std::memory_order_relaxed);
}

AttemptOutcome Backend::Record(const OutboundCall& call, const Status& status,
                               const ErrorStatusPB* error) {
  outstanding_.fetch_sub(1, std::memory_order_relaxed);
  AttemptOutcome outcome = ClassifyAttempt(status, error);
  // A connection that could not connect or negotiate in time (a server whose packets vanish)
  // fails its calls TimedOut before their own deadline and before their request left: the server
  // never saw them, and it is as unreachable as one that refuses connections.
  if (outcome == AttemptOutcome::kTimedOut && error == nullptr && !call.request_started() &&
      MonoTime::Now() < call.deadline()) {
    outcome = AttemptOutcome::kConnectionFailed;
  }
  const MonoTime received_at = call.received_at();
  if (received_at != MonoTime()) {
    // An answer came: fold its time into the average (racing updates may lose one sample). A
    // "too busy" refusal comes back fast without serving anything: folded as itself it would
    // make a full server look the fastest and draw more calls to refuse. It counts as twice the
    // average instead (at least 1 ms, at most 1 s), so a refusing server loses the comparisons
    // and is tried again once its latency ages. A call that waited for its connection to open
    // is no sample: its time is mostly the connection's set-up (a new channel's first calls to
    // every server), which would rank servers by how fast they were reached, not served.
    const int64_t old = ewma_ns_.load(std::memory_order_relaxed);
    if (!call.waited_for_connection()) {
      int64_t sample = (received_at - call.sent_at()).ToNanoseconds();
      if (outcome == AttemptOutcome::kTooBusy) {
        sample = std::min<int64_t>(std::max<int64_t>({sample, 2 * old, 1'000'000}), 1'000'000'000);
      }
      ewma_ns_.store(old == 0 ? sample : old + (sample - old) / 8, std::memory_order_relaxed);
    }
    last_answer_ns_.store(received_at.ToNanoseconds(), std::memory_order_relaxed);
  }
  if (outcome != AttemptOutcome::kSuccess && errors_ != nullptr) errors_->Increment();
  switch (outcome) {
    case AttemptOutcome::kUnavailable:
    case AttemptOutcome::kConnectionFailed:
      Eject(received_at != MonoTime() ? received_at : MonoTime::Now());
      break;
    case AttemptOutcome::kSuccess:
    case AttemptOutcome::kFinal:
    case AttemptOutcome::kTooBusy:
      // The server answered: an ejected backend comes back, unless the call predates the
      // ejection (a draining server still answers the calls it already had).
      if (ejected() &&
          call.sent_at().ToNanoseconds() > ejected_at_ns_.load(std::memory_order_relaxed)) {
        Restore();
      }
      break;
    case AttemptOutcome::kTimedOut:
    case AttemptOutcome::kLocal:
      break;
  }
  return outcome;
}

void Backend::RecordStreamEnd(const Status& status, const ErrorStatusPB* error) {
  const AttemptOutcome outcome = ClassifyAttempt(status, error);
  if (outcome != AttemptOutcome::kUnavailable && outcome != AttemptOutcome::kConnectionFailed) {
    return;
  }
  if (errors_ != nullptr) errors_->Increment();
  Eject(MonoTime::Now());
}

const char* Backend::HealthName() const {
  switch (health(MonoTime::Now())) {
    case Health::kHealthy:
      return "healthy";
    case Health::kProbeDue:
      return "probe due";
    case Health::kEjected:
      return "ejected";
  }
  return "?";
}

}  // namespace rrpc::rpc
