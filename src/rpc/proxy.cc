#include "rrpc/rpc/proxy.h"

#include <algorithm>
#include <atomic>
#include <random>

#include "rpc/core/connection.h"
#include "rpc/core/messenger_internals.h"
#include "rpc/core/outbound_call.h"
#include "rpc/core/reactor.h"
#include "rpc/core/remote_method.h"
#include "rpc/core/request_tracker.h"
#include "rrpc/rpc/channel_if.h"
#include "rrpc/rpc/messenger.h"
#include "rrpc/rpc/rpc_controller.h"
#include "util/one_shot_event.h"
#include "util/spin_wait.h"

namespace rrpc::rpc {

namespace {
// Uniform in [0, 1), per calling thread (retry jitter needs no shared state).
double RetryJitter() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return std::uniform_real_distribution<double>(0, 1)(rng);
}

// A wait between half and all of `backoff`, so refused clients spread out.
MonoDelta JitteredWait(MonoDelta backoff) {
  return MonoDelta::FromNanoseconds(
      backoff.ToNanoseconds() / 2 +
      static_cast<int64_t>(RetryJitter() * static_cast<double>(backoff.ToNanoseconds()) / 2));
}

MonoDelta NextBackoff(const RetryPolicy& policy, MonoDelta backoff) {
  return std::min(policy.max_backoff,
                  MonoDelta::FromNanoseconds(static_cast<int64_t>(
                      static_cast<double>(backoff.ToNanoseconds()) * policy.multiplier)));
}

bool RefusedAsTooBusy(const RpcController& controller) {
  return !controller.status().ok() && controller.error_response() != nullptr &&
         controller.error_response()->code() == ErrorStatusPB::ERROR_SERVER_TOO_BUSY;
}

// A tracked call's attempt whose outcome the client lost (it timed out, its connection failed,
// or the server went away), made over a connection whose server keeps results, or that never
// left this process: a retry with the same request id gets the first answer or runs the call
// once. Only when the policy bounds attempts.
bool LostOutcomeSafeToRetry(const RpcController& c) {
  const bool safe = c.server_tracks_results() || !c.request_left();
  if (c.status().ok() || !safe || c.retry_policy().attempt_timeout == MonoDelta::Max()) {
    return false;
  }
  if (c.error_response() != nullptr) {
    return c.error_response()->code() == ErrorStatusPB::ERROR_UNAVAILABLE;
  }
  return c.status().IsTimedOut() || c.status().IsNetworkError();
}

bool ShouldRetry(const RpcController& c, bool tracked) {
  return RefusedAsTooBusy(c) || (tracked && LostOutcomeSafeToRetry(c));
}

// The deadline of one attempt of a tracked call: the call's, or sooner by the policy.
MonoTime AttemptDeadline(const RetryPolicy& policy, MonoTime overall) {
  if (policy.attempt_timeout == MonoDelta::Max()) return overall;
  return std::min(overall, MonoTime::Now() + policy.attempt_timeout);
}

// Per calling thread: the connection its last synchronous call went out on through a reactor.
// The reference keeps the object (not the connection) alive; a closed one refuses direct writes.
struct SyncCallConnection {
  const Messenger* messenger = nullptr;
  Sockaddr remote;
  scoped_refptr<Connection> connection;
};

// Asked once per calling thread, and only once it polls at all.
bool PollingCanPayOnThisThreadCached() {
  thread_local const bool can_pay = PollingCanPayOnThisThread();
  return can_pay;
}
}  // namespace

Proxy::Proxy(std::shared_ptr<Messenger> messenger, const Sockaddr& remote, std::string service_name)
    : messenger_(std::move(messenger)),
      remote_(remote),
      service_name_(std::move(service_name)),
      methods_(std::make_unique<RemoteMethodCache>()) {}

Proxy::Proxy(std::shared_ptr<ChannelIf> channel, std::string service_name)
    : channel_(std::move(channel)),
      service_name_(std::move(service_name)),
      methods_(std::make_unique<RemoteMethodCache>()) {}

Proxy::Proxy(const Proxy& other)
    : messenger_(other.messenger_),
      channel_(other.channel_),
      remote_(other.remote_),
      service_name_(other.service_name_),
      methods_(std::make_unique<RemoteMethodCache>()) {}

Proxy& Proxy::operator=(const Proxy& other) {
  if (this != &other) {
    messenger_ = other.messenger_;
    channel_ = other.channel_;
    remote_ = other.remote_;
    service_name_ = other.service_name_;
    methods_ = std::make_unique<RemoteMethodCache>();
  }
  return *this;
}

Proxy::~Proxy() = default;

scoped_refptr<OutboundCall> Proxy::NewCall(const std::string& method,
                                           const google::protobuf::Message& request,
                                           google::protobuf::Message* response,
                                           RpcController* controller,
                                           ResponseCallback&& callback) const {
  CHECK(!controller->finished()) << "RpcController reused without Reset()";
  scoped_refptr<OutboundCall> call(new OutboundCall(
      methods_->Get(MessengerInternals::metrics(*messenger_), remote_, service_name_, method),
      response, controller, std::move(callback)));
  const RequestTracker* tracker = nullptr;
  if (controller->request_seq_no_ != 0) {
    tracker = MessengerInternals::request_tracker(*messenger_);
    call->set_report_connection();  // its server's EXACTLY_ONCE decides whether to retry
  }
  Status s = call->Serialize(request, MessengerInternals::NextCallId(messenger_.get()),
                             messenger_->options().max_message_size, tracker);
  if (!s.ok()) {
    call->FailBeforeSend(s);
    return nullptr;
  }
  if (!controller->AttachCall(call.get())) {  // cancelled before it started
    call->FailBeforeSend(Status::Aborted("call " + method + " cancelled before it was sent"));
    return nullptr;
  }
  return call;
}

// An asynchronous call that may be retried: what every attempt needs once the caller's request
// (and perhaps its proxy) is gone. Shared by each attempt's callback and the timer between two.
struct Proxy::AsyncRetry {
  explicit AsyncRetry(const Proxy& p) : proxy(p) {}
  Proxy proxy;  // a copy: the caller's may be destroyed while a retry waits
  std::string method;
  std::unique_ptr<google::protobuf::Message> request;  // a copy of the caller's
  google::protobuf::Message* response = nullptr;
  RpcController* controller = nullptr;
  ResponseCallback callback;
  MonoDelta backoff;
  bool tracked = false;
  MonoTime overall_deadline;  // tracked calls: the caller's deadline (attempts may end sooner)
};

void Proxy::AsyncRequest(const std::string& method, const google::protobuf::Message& request,
                         google::protobuf::Message* response, RpcController* controller,
                         ResponseCallback&& callback, MethodKind kind) const {
  if (channel_ != nullptr) {
    channel_->AsyncRequest(service_name_, method, request, response, controller,
                           std::move(callback), kind);
    return;
  }
  controller->attempts_ = 1;
  const bool tracked = kind == MethodKind::kTracked;
  if (!tracked && controller->retry_policy().max_attempts <= 1) {
    scoped_refptr<OutboundCall> call =
        NewCall(method, request, response, controller, std::move(callback));
    if (call) MessengerInternals::QueueOutboundCall(messenger_.get(), std::move(call));
    return;
  }
  auto retry = std::make_shared<AsyncRetry>(*this);
  retry->method = method;
  retry->request.reset(request.New());
  retry->request->CopyFrom(request);
  retry->response = response;
  retry->controller = controller;
  retry->callback = std::move(callback);
  retry->backoff = controller->retry_policy().initial_backoff;
  retry->tracked = tracked;
  if (tracked) {
    retry->overall_deadline = controller->deadline();
    controller->request_seq_no_ = MessengerInternals::request_tracker(*messenger_)->NewSequence();
    controller->set_deadline(AttemptDeadline(controller->retry_policy(), retry->overall_deadline));
  }
  AsyncAttempt(std::move(retry));
}

void Proxy::AsyncAttempt(std::shared_ptr<AsyncRetry> retry) {
  // The call's callback holds the shared state (not the other way round: no cycle); `retry`
  // itself keeps it, and so the proxy whose method runs, alive until this returns even when the
  // call finishes on the spot.
  AsyncRetry* r = retry.get();
  scoped_refptr<OutboundCall> call = r->proxy.NewCall(
      r->method, *r->request, r->response, r->controller, [retry] { OnAsyncAttemptDone(retry); });
  if (call) MessengerInternals::QueueOutboundCall(r->proxy.messenger_.get(), std::move(call));
}

void Proxy::OnAsyncAttemptDone(const std::shared_ptr<AsyncRetry>& retry) {
  RpcController* controller = retry->controller;
  const RetryPolicy& policy = controller->retry_policy();
  const MonoTime deadline = retry->tracked ? retry->overall_deadline : controller->deadline();
  if (ShouldRetry(*controller, retry->tracked) && controller->attempts_ < policy.max_attempts) {
    const MonoDelta wait = JitteredWait(retry->backoff);
    if (MonoTime::Now() + wait < deadline) {  // else no time for another try
      retry->backoff = NextBackoff(policy, retry->backoff);
      // On a reactor, after this callback has returned: the finished attempt is done with the
      // controller by then.
      retry->proxy.messenger_->RunAfter(wait, [retry] {
        RpcController* c = retry->controller;
        c->PrepareRetry();
        c->attempts_++;
        if (retry->tracked) {
          c->set_deadline(AttemptDeadline(c->retry_policy(), retry->overall_deadline));
        }
        AsyncAttempt(retry);
      });
      return;
    }
  }
  if (retry->tracked) {
    MessengerInternals::request_tracker(*retry->proxy.messenger_)
        ->Complete(controller->request_seq_no_);
    controller->set_deadline(retry->overall_deadline);
  }
  // The request copy goes before the callback: the caller may free its message types (a
  // DynamicMessageFactory) in it, and the last reference to `retry` may drop later, elsewhere.
  retry->request.reset();
  ResponseCallback done = std::move(retry->callback);
  done();
}

Status Proxy::SyncRequest(const std::string& method, const google::protobuf::Message& request,
                          google::protobuf::Message* response, RpcController* controller,
                          MethodKind kind) const {
  if (Reactor::Current() != nullptr) {
    // The reactor would wait for a response that only a reactor can deliver: with one reactor,
    // or the connection on this one, it never comes.
    return Status::IllegalState(
        "synchronous call from a reactor thread (a callback or an inline handler): use the "
        "asynchronous call");
  }
  if (channel_ != nullptr) {
    return SyncRequestThroughChannel(method, request, response, controller, kind);
  }
  const bool tracked = kind == MethodKind::kTracked;
  const RetryPolicy& policy = controller->retry_policy();
  const MonoTime overall = tracked ? controller->deadline() : MonoTime();
  if (tracked)
    controller->request_seq_no_ = MessengerInternals::request_tracker(*messenger_)->NewSequence();
  MonoDelta backoff = policy.initial_backoff;
  Status s;
  for (int attempt = 1;; attempt++) {
    controller->attempts_ = attempt;
    if (tracked) controller->set_deadline(AttemptDeadline(policy, overall));
    s = SyncAttempt(method, request, response, controller);
    if (attempt >= policy.max_attempts || !ShouldRetry(*controller, tracked)) break;
    const MonoDelta wait = JitteredWait(backoff);
    const MonoTime deadline = tracked ? overall : controller->deadline();
    if (MonoTime::Now() + wait >= deadline) break;  // no time for another try
    SleepFor(wait);
    backoff = NextBackoff(policy, backoff);
    controller->PrepareRetry();
  }
  if (tracked) {
    MessengerInternals::request_tracker(*messenger_)->Complete(controller->request_seq_no_);
    controller->set_deadline(overall);
  }
  return s;
}

Status Proxy::SyncRequestThroughChannel(const std::string& method,
                                        const google::protobuf::Message& request,
                                        google::protobuf::Message* response,
                                        RpcController* controller, MethodKind kind) const {
  OneShotEvent done;
  channel_->AsyncRequest(
      service_name_, method, request, response, controller, [&done] { done.Notify(); }, kind);
  done.Wait();
  return controller->status();
}

Status Proxy::SyncAttempt(const std::string& method, const google::protobuf::Message& request,
                          google::protobuf::Message* response, RpcController* controller) const {
  // The callback sets `done`; this thread may poll it for a quick response before it sleeps on
  // it (util/one_shot_event.h: one futex wake, no lock for the woken caller to wait for).
  OneShotEvent done;
  scoped_refptr<OutboundCall> call =
      NewCall(method, request, response, controller, [&done] { done.Notify(); });
  if (!call) return controller->status();
  // This thread writes the call itself on the connection its last synchronous call to this
  // remote went out on, when that connection has nothing else to write: no hand-off to the
  // reactor, whose wakeup would sit in the round trip (core/connection.h). Otherwise (first call,
  // a busy or closed connection) the reactor sends it and reports the connection for next time.
  // One per size class: bulk calls have connections of their own (bulk_connection_bytes).
  thread_local SyncCallConnection last_by_class[2];
  SyncCallConnection& last =
      last_by_class[messenger_->options().IsBulk(call->total_bytes()) ? 1 : 0];
  // The caller may also read the response itself: when its call is the connection's only one,
  // the reactor leaves it the socket (Connection::ReadResponseAsCaller), and the kernel wakes
  // this thread, not the reactor.
  const bool may_write = last.messenger == messenger_.get() && last.remote == remote_;
  // A tracked call learns its connection before it leaves (the reactor sets it otherwise).
  if (may_write && controller->request_seq_no_ != 0) call->set_connection(last.connection.get());
  const Connection::CallerSend sent =
      may_write ? last.connection->TrySendCallFromCaller(call) : Connection::CallerSend::kNotSent;
  const bool direct = sent != Connection::CallerSend::kNotSent;
  // A cancel that came before the call had a reactor found none to tell: tell it now.
  if (direct && call->cancel_requested()) call->Cancel();
  if (!direct) {
    call->set_report_connection();
    MessengerInternals::QueueOutboundCall(messenger_.get(), scoped_refptr<OutboundCall>(call));
  }
  if (sent == Connection::CallerSend::kSentCallerReads) {
    last.connection->ReadResponseAsCaller(call);
  } else {
    // Per calling thread: a thread whose responses come slowly soon stops polling.
    thread_local PollPolicy poll_policy;
    const MonoDelta poll = messenger_->options().sync_call_poll;
    if (poll > MonoDelta() && PollingCanPayOnThisThreadCached() && poll_policy.BeginPoll()) {
      poll_policy.EndPoll(done.Poll(poll));
    }
  }
  if (direct && !done.WaitUntil(controller->deadline())) {
    // No reactor timer watches a call this thread wrote: time it out there now.
    last.connection->TimeOutCallerCall(call);
  }
  done.Wait();
  if (!direct && call->connection()) {
    last.messenger = messenger_.get();
    last.remote = remote_;
    last.connection = call->connection();
  }
  return controller->status();
}

}  // namespace rrpc::rpc
