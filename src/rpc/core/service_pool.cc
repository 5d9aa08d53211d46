#include "rpc/core/service_pool.h"

#include <cstring>
#include <utility>

#include "rpc/core/connection.h"
#include "rpc/core/message_cache.h"
#include "rpc/core/reactor.h"
#include "rpc/core/result_tracker.h"
#include "rpc/core/stream_state.h"
#include "rpc/core/wire_codec.h"
#include "rpc/observe/rpc_metrics.h"
#include "rrpc/rpc/authorization.h"
#include "rrpc/rpc/rpc_context.h"
#include "rrpc/rpc/service_if.h"
#include "rrpc/util/copy_counter.h"

namespace rrpc::rpc {

namespace {

// The calling reactor thread's last routed method. Calls of one method come in runs, and two
// short name comparisons cost less than the two hash lookups they save. Keyed by the pool's serial
// number, so that a pool made where a freed one was never matches; only found methods are kept, and
// services are registered before the pool starts and never removed, so a kept one stays valid.
struct LastRoute {
  uint64_t pool_serial = 0;  // 0: nothing kept
  std::string service_name;
  std::string method_name;
  const ServiceIf* service = nullptr;
  const std::string* service_own_name = nullptr;  // service->service_name(): no virtual call
  const RpcMethodInfo* method = nullptr;
};
thread_local LastRoute tls_last_route;

// Whether `a` and `b` hold the same bytes. Names are short: compared here in 8-byte words (the
// last one overlapping) instead of a call to memcmp, which costs more for names this short.
inline bool SameName(std::string_view a, const std::string& b) {
  const size_t n = a.size();
  if (n != b.size()) return false;
  const char* x = a.data();
  const char* y = b.data();
  if (n < 8) {
    if (n < 4) {
      for (size_t i = 0; i < n; i++) {
        if (x[i] != y[i]) return false;
      }
      return true;
    }
    uint32_t u0, v0, u1, v1;  // two 4-byte words, overlapping when n < 8
    memcpy(&u0, x, 4);
    memcpy(&v0, y, 4);
    memcpy(&u1, x + n - 4, 4);
    memcpy(&v1, y + n - 4, 4);
    return u0 == v0 && u1 == v1;
  }
  for (size_t i = 0; i + 8 < n; i += 8) {
    uint64_t u, v;
    memcpy(&u, x + i, 8);
    memcpy(&v, y + i, 8);
    if (u != v) return false;
  }
  uint64_t u, v;
  memcpy(&u, x + n - 8, 8);
  memcpy(&v, y + n - 8, 8);
  return u == v;
}

std::atomic<uint64_t> next_pool_serial{1};

// Calls `method`'s handler on `context`; the call may be gone on return. Marks this thread's
// last response time unset first, for RecordHandlerTime().
inline void CallHandler(const RpcMethodInfo& method, RpcContext* context) {
  InboundCall::LastRespondTimeOnThisThread() = MonoTime();
  method.handler(context->request(), context->response(), context);
}

// After CallHandler(): the handler's time since `started` into `metrics` (nullptr: none). A
// handler that answered inline ends at its response (already timed); others at return.
inline void RecordHandlerTime(MethodMetrics* metrics, MonoTime started) {
  if (metrics == nullptr) return;
  const MonoTime responded_at = InboundCall::LastRespondTimeOnThisThread();
  const MonoTime end = responded_at != MonoTime() ? responded_at : MonoTime::Now();
  metrics->handler_time_us->Record(MethodMetrics::ElapsedMicros(started, end));
}

// Answers a call whose request does not parse as `request`'s type.
[[gnu::cold]] void RespondUnparsable(InboundCall* call, const google::protobuf::Message& request) {
  call->RespondFailure(ErrorStatusPB::ERROR_INVALID_REQUEST,
                       Status::InvalidArgument("request does not parse as " + request.GetTypeName(),
                                               request.InitializationErrorString()));
}

}  // namespace

ServicePool::ServicePool(ServicePoolOptions options)
    : serial_(next_pool_serial.fetch_add(1, std::memory_order_relaxed)),
      options_(std::move(options)),
      default_pool_(
          options_.name,
          [this] {
            ServicePoolConfig c = options_.default_pool;
            c.name.clear();
            return c;
          }(),
          options_.worker_idle_spin, options_.metrics, &ServicePool::RunCall) {
  for (const ServicePoolConfig& c : options_.named_pools) {
    named_pools_.push_back(std::make_unique<WorkerPool>(options_.name, c, options_.worker_idle_spin,
                                                        options_.metrics, &ServicePool::RunCall));
  }
}

ServicePool::~ServicePool() { Shutdown(); }

WorkerPool* ServicePool::FindPool(std::string_view name) {
  if (name.empty()) return &default_pool_;
  for (auto& p : named_pools_) {
    if (p->name() == name) return p.get();
  }
  return nullptr;
}

Status ServicePool::SetUpAdmission(const ServiceIf& service, RpcMethodInfo* method) {
  const std::string& pool_name = !method->pool.empty() ? method->pool : service.pool();
  WorkerPool* pool = FindPool(pool_name);
  if (pool == nullptr) {
    return Status::InvalidArgument("no service pool named " + pool_name,
                                   service.service_name() + "." + method->method_name);
  }
  if (pool == &default_pool_ && !pool->needs_admission() &&
      method->priority == CallPriority::kForeground && method->max_concurrency == 0) {
    method->admission = nullptr;  // the plain queue path
    return Status::OK();
  }
  auto admission = std::make_unique<MethodAdmission>();
  admission->pool = pool;
  admission->name = service.service_name() + "." + method->method_name;
  admission->priority = method->priority;
  admission->max_concurrency = method->max_concurrency;
  pool->AddMethod(admission.get());
  method->admission = admission.get();
  admissions_.push_back(std::move(admission));
  return Status::OK();
}

size_t ServicePool::queue_size() const {
  size_t n = default_pool_.queue_size();
  for (const auto& p : named_pools_) n += p->queue_size();
  return n;
}

std::vector<ServicePoolInfo> ServicePool::PoolSnapshots() const {
  std::vector<ServicePoolInfo> out;
  out.push_back(default_pool_.Snapshot());
  for (const auto& p : named_pools_) out.push_back(p->Snapshot());
  return out;
}

ServicePool::Admission& ServicePool::Admission::operator=(Admission&& o) noexcept {
  if (this != &o) {
    Reset();
    admitted_ = std::exchange(o.admitted_, false);
    held_ = std::exchange(o.held_, nullptr);
  }
  return *this;
}

void ServicePool::Admission::Reset() {
  if (held_ != nullptr) held_->pool->Release(held_);
  held_ = nullptr;
  admitted_ = false;
}

ServicePool::Admission ServicePool::TryAdmit(const RpcMethodInfo* method, std::string* refusal) {
  Admission a;
  if (refusing_calls_.load(std::memory_order_acquire) || shut_down_.load()) {
    if (refusal != nullptr) *refusal = "server shutting down";
    return a;
  }
  MethodAdmission* m = method->admission;
  if (m != nullptr && !m->pool->TryAcquire(m, refusal)) return a;
  a.admitted_ = true;
  a.held_ = m;
  return a;
}

Status ServicePool::RegisterService(std::unique_ptr<ServiceIf> service) {
  if (started_.load()) return Status::IllegalState("services must be registered before start");
  const std::string& name = service->service_name();
  if (services_.count(std::string_view(name)) != 0) {
    return Status::AlreadyPresent("service already registered", name);
  }
  for (auto& [method_name, info] : service->methods_) {
    RRPC_RETURN_NOT_OK(SetUpAdmission(*service, info.get()));
  }
  auto it = services_.emplace(std::string_view(name), std::move(service)).first;
  if (options_.metrics != nullptr) {
    for (auto& [method_name, info] : it->second->methods_) {
      info->metrics = options_.metrics->ServerMethod(name, info->method_name);
    }
  }
  return Status::OK();
}

Status ServicePool::Start() {
  if (started_.exchange(true)) return Status::OK();
  RRPC_RETURN_NOT_OK(default_pool_.Start());
  for (auto& p : named_pools_) RRPC_RETURN_NOT_OK(p->Start());
  return Status::OK();
}

void ServicePool::Shutdown() {
  if (shut_down_.exchange(true)) return;
  default_pool_.Shutdown();
  for (auto& p : named_pools_) p->Shutdown();
}

const ServiceIf* ServicePool::FindService(std::string_view name) const {
  auto it = services_.find(name);
  return it == services_.end() ? nullptr : it->second.get();
}

std::vector<const ServiceIf*> ServicePool::services() const {
  std::vector<const ServiceIf*> out;
  for (const auto& [name, service] : services_) out.push_back(service.get());
  return out;
}

void ServicePool::QueueInboundCall(std::unique_ptr<InboundCall> call) {
  // Responding hands the call to its reactor: from here on it is managed by hand.
  InboundCall* raw = call.release();
  LastRoute& last = tls_last_route;
  const ServiceIf* service;
  const std::string* service_own_name = nullptr;
  const RpcMethodInfo* method;
  if (last.pool_serial == serial_ && SameName(raw->requested_service_name(), last.service_name) &&
      SameName(raw->requested_method_name(), last.method_name)) {
    service = last.service;
    service_own_name = last.service_own_name;
    method = last.method;
  } else {
    service = FindService(raw->requested_service_name());
    method = service != nullptr ? service->FindMethod(raw->requested_method_name()) : nullptr;
    if (method != nullptr) {
      service_own_name = &service->service_name();
      last.pool_serial = serial_;
      last.service_name.assign(raw->requested_service_name());
      last.method_name.assign(raw->requested_method_name());
      last.service = service;
      last.service_own_name = service_own_name;
      last.method = method;
    }
  }
  if (service == nullptr) {
    if (options_.metrics != nullptr) options_.metrics->no_such_method->Increment();
    raw->RespondFailure(
        ErrorStatusPB::ERROR_NO_SUCH_SERVICE,
        Status::NotFound("no such service: " + std::string(raw->requested_service_name())));
    return;
  }
  if (method == nullptr) {
    if (options_.metrics != nullptr) options_.metrics->no_such_method->Increment();
    raw->RespondFailure(
        ErrorStatusPB::ERROR_NO_SUCH_METHOD,
        Status::NotFound("no such method: " + std::string(raw->requested_service_name()) + "." +
                         std::string(raw->requested_method_name())));
    return;
  }
  raw->set_method(*service_own_name, method);
  if (method->metrics != nullptr) {
    raw->set_metrics(method->metrics);
    method->metrics->CallRouted(raw->frame_bytes());
  }
  if (!raw->unsupported_features().empty()) {
    raw->RespondUnsupportedFeatures();
    return;
  }
  TrackInRpcz(raw);
  if (refusing_calls_.load(std::memory_order_acquire)) {
    // Tracked first, so a drain waiting for the calls in flight also waits for this answer.
    raw->RespondFailure(ErrorStatusPB::ERROR_UNAVAILABLE,
                        Status::ServiceUnavailable("server shutting down"));
    return;
  }
  const Authorizer* authorizer =
      service->authorizer() != nullptr ? service->authorizer() : options_.authorizer.get();
  if (authorizer != nullptr) {
    Status allowed = authorizer->Authorize(raw->connection()->identity(), raw->service_name(),
                                           raw->method_name());
    if (!allowed.ok()) {
      raw->RespondFailure(ErrorStatusPB::ERROR_NOT_AUTHORIZED, allowed);
      return;
    }
  }
  if (method->tracked && options_.result_tracker != nullptr && raw->request_id().present &&
      options_.result_tracker->Admit(raw) != ResultTracker::Verdict::kRun) {
    return;  // answered from the tracker, or waiting for the first call with its id
  }
  if (method->run_inline) {
    // On this reactor thread, now: a response it gives at once is flushed with this read's batch.
    // Inline calls take no admission slot: the reactor's own reading is their limit.
    RunCall(raw, nullptr);
    return;
  }
  MethodAdmission* const admission = method->admission;
  if (admission == nullptr) {
    default_pool_.Queue(raw, nullptr);
  } else {
    admission->pool->Queue(raw, admission);
  }
}

void ServicePool::TrackInRpcz(InboundCall* call) {
  RpczCallEntry* entry = call->rpcz_entry();
  RpczCallInfo& info = *entry->mutable_info();
  info.method_key = call->method();
  info.service = call->service_name();
  info.method = call->method_name();
  info.peer = &call->remote_address();
  info.call_id = call->call_id();
  info.arrival = call->arrival_time();
  info.stream = call->stream().get();
  // The reactor's own stripe: reactors never share a stripe's mutex.
  rpcz_store_.Track(entry, static_cast<size_t>(call->connection()->reactor()->index()));
}

bool ServicePool::RunCall(InboundCall* call, WorkerPool* pool) {
  call->RecordHandlingStarted();
  MethodMetrics* const metrics = call->metrics();  // read now: the handler may delete the call
  const MonoTime started = call->handling_started();
  if (metrics != nullptr) {
    metrics->queue_time_us->Record(MethodMetrics::ElapsedMicros(call->arrival_time(), started));
  }
  if (pool != nullptr && pool->needs_admission()) {
    pool->OnStarted(started - call->arrival_time(), started);
  }
  if (call->handling_started() > call->deadline()) {
    if (metrics != nullptr) metrics->messenger->calls_expired_in_queue->Increment();
    call->RespondFailure(
        ErrorStatusPB::ERROR_TIMED_OUT,
        Status::TimedOut("call expired in the service queue after " +
                         (call->handling_started() - call->arrival_time()).ToString()));
    return false;
  }
  if (call->cancel_tracked() && !call->MarkRunning()) {
    if (metrics != nullptr) metrics->messenger->calls_cancelled_in_queue->Increment();
    call->RespondFailure(ErrorStatusPB::ERROR_CANCELLED,
                         Status::Aborted("cancelled by the client before it ran"));
    return false;
  }
  const RpcMethodInfo* method = call->method();
  // A unary call with a plain request takes the short way below; a stream's call or a
  // compressed request (or a mismatch of the two kinds) the long one.
  if (method->stream != StreamKind::kNone || call->opens_stream() || call->request_compressed())
      [[unlikely]] {
    return RunStreamOrCompressedCall(call, pool, metrics, started);
  }
  MessageCache::CallMessages messages =
      MessageCache::Take(*method->request_prototype, *method->response_prototype);
  const Slice body = call->serialized_request();
  CountCopy(CopySide::kServer, CopyKind::kBody, body.size());
  if (!ParseMessageQuietly(body, messages.request.get())) {
    RespondUnparsable(call, *messages.request);
    return false;
  }
  RpcContext* context =
      call->MakeContext(std::move(messages.request), std::move(messages.response));
  CallHandler(*method, context);
  RecordHandlerTime(metrics, started);
  return false;
}

bool ServicePool::RunStreamOrCompressedCall(InboundCall* call, WorkerPool* pool,
                                            MethodMetrics* metrics, MonoTime started) {
  const RpcMethodInfo* method = call->method();
  const bool stream_method = method->stream != StreamKind::kNone;
  if (call->opens_stream() != stream_method) {
    call->RespondFailure(
        ErrorStatusPB::ERROR_INVALID_REQUEST,
        Status::InvalidArgument(stream_method ? "a stream method called as a unary call"
                                              : "a unary method called as a stream"));
    return false;
  }
  MessageCache::CallMessages messages =
      MessageCache::Take(*method->request_prototype, *method->response_prototype);
  if (call->request_compressed()) {
    Status s = call->DecompressRequest();
    if (!s.ok()) {
      call->RespondFailure(ErrorStatusPB::ERROR_INVALID_REQUEST, s);
      return false;
    }
  }
  const Slice body = call->serialized_request();
  CountCopy(CopySide::kServer, CopyKind::kBody, body.size());
  // Client and bidirectional streams' opening calls carry no request.
  const bool has_request = !stream_method || method->stream == StreamKind::kServer;
  if (has_request && !ParseMessageQuietly(body, messages.request.get())) {
    RespondUnparsable(call, *messages.request);
    return false;
  }
  RpcContext* context =
      call->MakeContext(std::move(messages.request), std::move(messages.response));
  // A stream's call is answered only once its handler returned (StreamState): it stays, and its
  // stream is held here until then.
  std::shared_ptr<StreamState> stream;
  bool slot_kept = false;
  if (stream_method) {
    stream = call->stream();  // attached by the connection, as the call opens a stream
    DCHECK(stream != nullptr);
    StartServerStream(call, context);
    // A stream counts against its pool while open: it keeps the call's admission slot.
    if (pool != nullptr && method->admission != nullptr) {
      auto slot = std::make_shared<Admission>();
      slot->admitted_ = true;
      slot->held_ = method->admission;
      stream->HoldUntilEnd(std::move(slot));
      slot_kept = true;
    }
  }
  CallHandler(*method, context);
  if (stream_method) stream->OnHandlerReturned();
  RecordHandlerTime(metrics, started);
  return slot_kept;
}

}  // namespace rrpc::rpc
