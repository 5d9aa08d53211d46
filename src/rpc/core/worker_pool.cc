#include "rpc/core/worker_pool.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "rpc/observe/rpc_metrics.h"
#include "rrpc/rpc/service_if.h"
#include "util/metrics/counter.h"
#include "util/metrics/gauge.h"
#include "util/spin_wait.h"
#include "util/thread.h"

namespace rrpc::rpc {

namespace {

size_t BackgroundCap(const ServicePoolConfig& c) {
  const double share = std::clamp(c.background_share, 0.0, 1.0);
  return std::max<size_t>(1, static_cast<size_t>(std::ceil(share * c.num_workers)));
}

std::unique_ptr<AdaptiveLimit> MakeLimit(const ServicePoolConfig& c) {
  if (!c.adaptive_limit.enabled) return nullptr;
  const int min_limit = c.adaptive_limit.min_limit > 0 ? c.adaptive_limit.min_limit : c.num_workers;
  const int max_limit = c.adaptive_limit.max_limit > 0
                            ? c.adaptive_limit.max_limit
                            : c.num_workers + static_cast<int>(c.queue_length);
  return std::make_unique<AdaptiveLimit>(c.adaptive_limit, min_limit, max_limit);
}

}  // namespace

WorkerPool::WorkerPool(const std::string& messenger_name, ServicePoolConfig config,
                       MonoDelta idle_spin, MessengerMetrics* messenger_metrics, RunFn run)
    : config_(std::move(config)),
      messenger_name_(messenger_name),
      messenger_metrics_(messenger_metrics),
      run_(run),
      limit_(MakeLimit(config_)),
      // Workers inherit the creating thread's CPU affinity, so this thread's answer is theirs.
      queue_(config_.queue_length, PollingCanPayOnThisThread() ? idle_spin : MonoDelta(), {},
             BackgroundCap(config_)) {
  // The default pool shows up in metrics once something uses it beyond the plain queue.
  if (!config_.name.empty() || limit_ != nullptr) AttachPoolMetrics();
}

void WorkerPool::AttachPoolMetrics() {
  if (messenger_metrics_ == nullptr || entity_ != nullptr) return;
  const std::string pool_name = config_.name.empty() ? "default" : config_.name;
  entity_ = messenger_metrics_->registry()->FindOrCreateEntity(
      "service_pool", messenger_name_ + "." + pool_name,
      {{"messenger", messenger_name_}, {"pool", pool_name}});
  gauges_.push_back(entity_->FindOrCreateCallbackGauge(
      &METRIC_pool_concurrency_limit, [this] { return limit_ ? limit_->limit() : 0; }));
  gauges_.push_back(entity_->FindOrCreateCallbackGauge(
      &METRIC_pool_calls_in_flight, [this] { return in_flight_.load(std::memory_order_relaxed); }));
  gauges_.push_back(entity_->FindOrCreateCallbackGauge(&METRIC_pool_queued_foreground, [this] {
    return static_cast<int64_t>(queue_.size(Queue_::kForeground));
  }));
  gauges_.push_back(entity_->FindOrCreateCallbackGauge(&METRIC_pool_queued_background, [this] {
    return static_cast<int64_t>(queue_.size(Queue_::kBackground));
  }));
  gauges_.push_back(entity_->FindOrCreateCallbackGauge(&METRIC_pool_background_running, [this] {
    return static_cast<int64_t>(queue_.background_running());
  }));
  limit_refusals_metric_ = entity_->FindOrCreateCounter(&METRIC_pool_limit_refusals_total);
  method_refusals_metric_ = entity_->FindOrCreateCounter(&METRIC_concurrency_refusals_total);
}

WorkerPool::~WorkerPool() {
  Shutdown();
  for (CallbackGauge* g : gauges_) g->DetachToConstant(0);
  for (MethodAdmission* m : methods_) {
    if (m->in_flight_metric != nullptr) m->in_flight_metric->DetachToConstant(0);
  }
}

void WorkerPool::AddMethod(MethodAdmission* method) {
  methods_.push_back(method);
  AttachPoolMetrics();
  if (messenger_metrics_ == nullptr) return;
  const size_t dot = method->name.rfind('.');
  scoped_refptr<MetricEntity> entity = messenger_metrics_->registry()->FindOrCreateEntity(
      "method", method->name,
      {{"service", method->name.substr(0, dot)}, {"method", method->name.substr(dot + 1)}});
  entity->FindOrCreateGauge(&METRIC_method_max_concurrency)->Set(method->max_concurrency);
  method->refusals_metric = entity->FindOrCreateCounter(&METRIC_concurrency_refusals_total);
  method->in_flight_metric = entity->FindOrCreateCallbackGauge(
      &METRIC_pool_calls_in_flight,
      [method] { return method->in_flight.load(std::memory_order_relaxed); });
}

Status WorkerPool::Start() {
  if (started_.exchange(true)) return Status::OK();
  const std::string prefix =
      messenger_name_ + (config_.name.empty() ? "" : "-" + config_.name) + "-worker-";
  for (int i = 0; i < config_.num_workers; i++) {
    RRPC_ASSIGN_OR_RETURN(
        std::thread t, StartThread("worker", prefix + std::to_string(i), [this] { RunWorker(); }));
    workers_.push_back(std::move(t));
  }
  return Status::OK();
}

void WorkerPool::Shutdown() {
  if (shut_down_.exchange(true)) return;
  for (InboundCall* call : queue_.Shutdown()) {
    const RpcMethodInfo* method = call->method();
    call->RespondFailure(ErrorStatusPB::ERROR_UNAVAILABLE,
                         Status::ServiceUnavailable("server shutting down"));
    if (method->admission != nullptr) Release(method->admission);
  }
  for (auto& t : workers_) t.join();
  workers_.clear();
}

bool WorkerPool::TryAcquire(MethodAdmission* method, std::string* refusal) {
  if (method->max_concurrency > 0 &&
      method->in_flight.fetch_add(1, std::memory_order_relaxed) >= method->max_concurrency) {
    method->in_flight.fetch_sub(1, std::memory_order_relaxed);
    method->refusals.fetch_add(1, std::memory_order_relaxed);
    method_refusals_.fetch_add(1, std::memory_order_relaxed);
    if (method->refusals_metric != nullptr) method->refusals_metric->Increment();
    if (method_refusals_metric_ != nullptr) method_refusals_metric_->Increment();
    if (refusal != nullptr) {
      *refusal = "server too busy: " + method->name + " has its limit of " +
                 std::to_string(method->max_concurrency) + " calls in flight";
    }
    return false;
  }
  if (method->max_concurrency <= 0) method->in_flight.fetch_add(1, std::memory_order_relaxed);
  const int pool_in_flight = in_flight_.fetch_add(1, std::memory_order_relaxed);
  if (limit_ != nullptr && pool_in_flight >= limit_->limit()) {
    in_flight_.fetch_sub(1, std::memory_order_relaxed);
    method->in_flight.fetch_sub(1, std::memory_order_relaxed);
    limit_->OnRefused();
    limit_refusals_.fetch_add(1, std::memory_order_relaxed);
    if (limit_refusals_metric_ != nullptr) limit_refusals_metric_->Increment();
    if (refusal != nullptr) {
      *refusal = "server too busy: pool " + (config_.name.empty() ? "default" : config_.name) +
                 " is at its adaptive limit of " + std::to_string(limit_->limit()) + " calls";
    }
    return false;
  }
  return true;
}

void WorkerPool::Release(MethodAdmission* method) {
  method->in_flight.fetch_sub(1, std::memory_order_relaxed);
  in_flight_.fetch_sub(1, std::memory_order_relaxed);
}

void WorkerPool::OnStarted(MonoDelta queue_time, MonoTime now) {
  if (limit_ != nullptr) limit_->OnStarted(queue_time, now);
}

void WorkerPool::RefuseTooBusy(InboundCall* call, const std::string& why) {
  call->RespondFailure(ErrorStatusPB::ERROR_SERVER_TOO_BUSY, Status::ServiceUnavailable(why));
}

void WorkerPool::Queue(InboundCall* call, MethodAdmission* admission) {
  CallPriority priority = CallPriority::kForeground;
  if (admission != nullptr) {
    std::string refusal;
    if (!TryAcquire(admission, &refusal)) {
      RefuseTooBusy(call, refusal);
      return;
    }
    priority = admission->priority;
  }
  call->requested_priority(&priority);  // the caller's class, when it asked for one
  const Queue_::Lane lane =
      priority == CallPriority::kBackground ? Queue_::kBackground : Queue_::kForeground;
  call->set_queued_background(lane == Queue_::kBackground);
  InboundCall* evicted = nullptr;
  switch (queue_.Put(call, &evicted, lane)) {
    case Queue_::PutResult::kHandedOff:
    case Queue_::PutResult::kQueued:
      return;
    case Queue_::PutResult::kQueuedEvictedOther:
      call = evicted;  // refuse the one with the latest deadline instead
      [[fallthrough]];
    case Queue_::PutResult::kRejected: {
      overflows_.fetch_add(1, std::memory_order_relaxed);
      if (messenger_metrics_ != nullptr) messenger_metrics_->service_queue_overflows->Increment();
      MethodAdmission* refused = call->method()->admission;
      RefuseTooBusy(call, "server too busy: service queue of " +
                              std::to_string(config_.queue_length) + " calls is full");
      if (refused != nullptr) Release(refused);
      return;
    }
    case Queue_::PutResult::kShutdown:
      call->RespondFailure(ErrorStatusPB::ERROR_UNAVAILABLE,
                           Status::ServiceUnavailable("server shutting down"));
      if (admission != nullptr) Release(admission);
      return;
  }
}

void WorkerPool::Finished(const RpcMethodInfo* method, bool background, bool slot_kept) {
  if (background) queue_.BackgroundDone();
  MethodAdmission* admission = method->admission;
  if (admission != nullptr && !slot_kept) Release(admission);
}

void WorkerPool::RunWorker() {
  while (true) {
    Queue_::WaitReport wait;
    InboundCall* call = queue_.BlockingGet(&wait);
    if (messenger_metrics_ != nullptr && wait.polled) {
      messenger_metrics_->worker_idle_polls->Increment();
      if (wait.poll_hit) messenger_metrics_->worker_idle_poll_hits->Increment();
    }
    if (call == nullptr) return;
    const RpcMethodInfo* method = call->method();  // outlives the call, which run_ may delete
    const bool background = call->queued_background();
    const bool slot_kept = run_(call, this);
    Finished(method, background, slot_kept);
  }
}

ServicePoolInfo WorkerPool::Snapshot() const {
  ServicePoolInfo s;
  s.name = config_.name.empty() ? "default" : config_.name;
  s.num_workers = config_.num_workers;
  s.queue_length = config_.queue_length;
  s.queued_foreground = queue_.size(Queue_::kForeground);
  s.queued_background = queue_.size(Queue_::kBackground);
  s.background_running = queue_.background_running();
  s.background_cap = queue_.background_cap();
  s.in_flight = in_flight_.load(std::memory_order_relaxed);
  s.limit = limit_ != nullptr ? limit_->limit() : 0;
  s.limit_refusals = limit_refusals_.load(std::memory_order_relaxed);
  s.method_refusals = method_refusals_.load(std::memory_order_relaxed);
  s.overflows = overflows_.load(std::memory_order_relaxed);
  for (const MethodAdmission* m : methods_) {
    s.methods.push_back({m->name, m->priority, m->max_concurrency,
                         m->in_flight.load(std::memory_order_relaxed),
                         m->refusals.load(std::memory_order_relaxed)});
  }
  return s;
}

}  // namespace rrpc::rpc
