#include "rrpc/rpc/proxy.h"

#include <memory>
#include <string>
#include <utility>

#include "rpc/core/attempt_call.h"
#include "rpc/core/attempt_engine.h"
#include "rpc/core/connection.h"
#include "rpc/core/messenger_internals.h"
#include "rpc/core/outbound_call.h"
#include "rpc/core/reactor.h"
#include "rpc/core/remote_method.h"
#include "rpc/core/rpc_controller_internal.h"
#include "rpc/core/stream_open.h"
#include "rrpc/rpc/channel_if.h"
#include "rrpc/rpc/messenger.h"
#include "rrpc/rpc/rpc_controller.h"
#include "util/one_shot_event.h"
#include "util/spin_wait.h"

namespace rrpc::rpc {

namespace {
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

inline scoped_refptr<RemoteMethod> Proxy::Method(const std::string& method) const {
  return methods_->Get(MessengerInternals::metrics(*messenger_), remote_, service_name_, method);
}

namespace {
// The attempts of a call to one address that may be retried: the engine's rules for a proxy, by
// the controller's RetryPolicy and the method's kind.
AttemptSeries ProxySeries(const Messenger& messenger, RpcController* controller, MethodKind kind) {
  const RetryPolicy& policy = controller->retry_policy();
  return AttemptSeries(RetryRules::ForProxy(policy, kind),
                       Backoff(policy.initial_backoff, policy.max_backoff, policy.multiplier),
                       controller, MessengerInternals::request_tracker(messenger));
}

// Whether a call may take more than one attempt; the others take the single-attempt path.
bool MayRetry(const RpcController& controller, MethodKind kind) {
  return kind == MethodKind::kTracked || controller.retry_policy().max_attempts > 1;
}
}  // namespace

// An asynchronous call that may be retried: what every attempt needs once the caller's request
// (and perhaps its proxy) is gone. Shared by each attempt's callback and the timer between two.
struct Proxy::AsyncRetry {
  AsyncRetry(const Proxy& p, RpcController* c, MethodKind kind)
      : proxy(p), controller(c), series(ProxySeries(*p.messenger_, c, kind)) {}
  Proxy proxy;  // a copy: the caller's may be destroyed while a retry waits
  std::string method;
  std::unique_ptr<google::protobuf::Message> request;  // a copy of the caller's
  google::protobuf::Message* response = nullptr;
  RpcController* const controller;
  ResponseCallback callback;
  AttemptSeries series;  // one attempt at a time: its callback, or the timer before the next
};

void Proxy::AsyncRequest(const std::string& method, const google::protobuf::Message& request,
                         google::protobuf::Message* response, RpcController* controller,
                         ResponseCallback&& callback, MethodKind kind) const {
  if (channel_ != nullptr) {
    channel_->AsyncRequest(service_name_, method, request, response, controller,
                           std::move(callback), kind);
    return;
  }
  if (!MayRetry(*controller, kind)) {
    RpcControllerInternal::set_attempts(controller, 1);
    scoped_refptr<OutboundCall> call = NewAttemptCall(messenger_.get(), Method(method), request,
                                                      response, controller, std::move(callback));
    if (call) MessengerInternals::QueueOutboundCall(messenger_.get(), std::move(call));
    return;
  }
  auto retry = std::make_shared<AsyncRetry>(*this, controller, kind);
  retry->method = method;
  retry->request.reset(request.New());
  retry->request->CopyFrom(request);
  retry->response = response;
  retry->callback = std::move(callback);
  AsyncAttempt(std::move(retry));
}

void Proxy::AsyncAttempt(std::shared_ptr<AsyncRetry> retry) {
  // The call's callback holds the shared state (not the other way round: no cycle); `retry`
  // itself keeps it, and so the proxy whose method runs, alive until this returns even when the
  // call finishes on the spot.
  AsyncRetry* r = retry.get();
  const MonoTime attempt_deadline = r->series.BeginAttempt(r->controller);
  scoped_refptr<OutboundCall> call = NewAttemptCall(
      r->proxy.messenger_.get(), r->proxy.Method(r->method), *r->request, r->response,
      r->controller, [retry] { OnAsyncAttemptDone(retry); }, attempt_deadline);
  if (call) MessengerInternals::QueueOutboundCall(r->proxy.messenger_.get(), std::move(call));
}

void Proxy::OnAsyncAttemptDone(const std::shared_ptr<AsyncRetry>& retry) {
  const RetryDecision next =
      retry->series.DecideRetry(AttemptEnd::Of(*retry->controller), MonoTime::Now());
  if (next.retry()) {
    // On a reactor, after this callback has returned: the finished attempt is done with the
    // controller by then.
    retry->proxy.messenger_->RunAfter(next.wait, [retry] { AsyncAttempt(retry); });
    return;
  }
  retry->series.End();
  SetFinalStatus(retry->controller);
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
  if (!MayRetry(*controller, kind)) {
    RpcControllerInternal::set_attempts(controller, 1);
    return SyncAttempt(method, request, response, controller, MonoTime::Max());
  }
  AttemptSeries series = ProxySeries(*messenger_, controller, kind);
  while (true) {
    Status s = SyncAttempt(method, request, response, controller, series.BeginAttempt(controller));
    const RetryDecision next = series.DecideRetry(AttemptEnd::Of(*controller), MonoTime::Now());
    if (!next.retry()) {  // `series` ends on the way out
      if (s.ok()) return s;
      SetFinalStatus(controller);
      return controller->status();
    }
    SleepFor(next.wait);
  }
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
                          google::protobuf::Message* response, RpcController* controller,
                          MonoTime attempt_deadline) const {
  // The callback sets `done`; this thread may poll it for a quick response before it sleeps on
  // it (util/one_shot_event.h: one futex wake, no lock for the woken caller to wait for).
  OneShotEvent done;
  scoped_refptr<OutboundCall> call = NewAttemptCall(
      messenger_.get(), Method(method), request, response, controller, [&done] { done.Notify(); },
      attempt_deadline);
  if (!call) return controller->status();
  // This thread writes the call itself on the connection its last synchronous call to this
  // remote went out on, when that connection has nothing else to write: no hand-off to the
  // reactor, whose wakeup would sit in the round trip (core/connection.h). Otherwise (first call,
  // a busy or closed connection) the reactor sends it and reports the connection for next time.
  // One per size class: bulk calls have connections of their own (bulk_connection_bytes).
  thread_local SyncCallConnection last_by_class[2];
  SyncCallConnection& last = last_by_class[call->IsBulk(messenger_->options()) ? 1 : 0];
  // The caller may also read the response itself: when its call is the connection's only one,
  // the reactor leaves it the socket (Connection::ReadResponseAsCaller), and the kernel wakes
  // this thread, not the reactor.
  const bool may_write = last.messenger == messenger_.get() && last.remote == remote_;
  // A tracked call learns its connection before it leaves (the reactor sets it otherwise).
  if (may_write && controller->request_seq_no() != 0) call->set_connection(last.connection.get());
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
  if (direct && !done.WaitUntil(call->deadline())) {
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

Stream Proxy::OpenStream(const std::string& method, const google::protobuf::Message* request,
                         const google::protobuf::Message* response_prototype,
                         const StreamOptions& options, MethodKind kind) const {
  if (channel_ != nullptr) {
    return channel_->OpenStream(service_name_, method, request, response_prototype, options, kind);
  }
  return OpenClientStream(messenger_.get(), Method(method), request, response_prototype, options);
}

Stream ChannelIf::OpenStream(const std::string& service, const std::string& method,
                             const google::protobuf::Message*, const google::protobuf::Message*,
                             const StreamOptions&, MethodKind) {
  return FailedStream(Status::NotSupported("this channel does not carry streams",
                                           target() + " " + service + "." + method));
}

}  // namespace rrpc::rpc
