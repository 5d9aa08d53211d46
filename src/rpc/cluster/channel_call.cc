#include "rpc/cluster/channel_call.h"

#include <glog/logging.h>
#include <google/protobuf/empty.pb.h>

#include <atomic>
#include <utility>

#include "rpc/core/messenger_internals.h"
#include "rpc/core/rpc_controller_internal.h"
#include "rrpc/rpc/cluster/channel.h"
#include "rrpc/rpc/messenger.h"
#include "rrpc/rpc/rpc_controller.h"

namespace rrpc::rpc {

namespace {
// The attempt engine's rules for a call through a channel of many servers.
RetryRules ChannelRules(const ChannelOptions& options, MethodKind kind) {
  RetryRules rules;
  rules.kind = kind;
  rules.max_attempts = options.max_attempts;
  rules.many_servers = true;
  rules.retries_lost_connections = true;  // pinned to the server that may have run it
  if ((kind == MethodKind::kIdempotent || kind == MethodKind::kTracked) &&
      options.attempt_timeout > MonoDelta()) {
    rules.attempt_timeout = options.attempt_timeout;
  }
  return rules;
}
}  // namespace

Backoff ChannelCall::RetryBackoff(const ChannelOptions& options) {
  constexpr double kMultiplier = 2;
  return Backoff(options.initial_backoff, options.max_backoff, kMultiplier);
}

bool ChannelCall::UntriedServerLeft(const Channel& channel, const TriedBackends& tried) {
  const BackendSet* set = channel.current_.load(std::memory_order_acquire);
  if (set == nullptr) return false;
  for (const auto& b : set->backends) {
    if (!tried.Contains(b.get())) return true;
  }
  return false;
}

// One attempt: the server it went to and how it ended (set by OnCallFinished, on the thread
// that finishes it, before the attempt's callback reads it on the same thread).
struct ChannelCall::Attempt final : public CallObserver {
  scoped_refptr<ChannelCall> call;
  scoped_refptr<Backend> backend;
  bool hedge = false;
  // A hedged call's attempt owns these; otherwise they point at the caller's.
  std::unique_ptr<RpcController> own_controller;
  std::unique_ptr<google::protobuf::Message> own_response;
  RpcController* controller = nullptr;
  google::protobuf::Message* response = nullptr;

  MonoTime deadline;  // the attempt's own (AttemptSeries::AttemptDeadline)
  AttemptOutcome outcome = AttemptOutcome::kLocal;
  MonoDelta latency;  // when answered
  MonoTime answered_at;
  bool answered = false;
  bool waited_for_connection = false;  // its latency includes the connection's set-up
  std::atomic<bool> abandoned{false};  // lost a hedge: its answer is ignored

  void OnCallFinished(const OutboundCall& c, const Status& status,
                      const ErrorStatusPB* error) override {
    outcome = backend->Record(c, status, error);
    if (c.received_at() != MonoTime()) {
      answered = true;
      latency = c.received_at() - c.sent_at();
      answered_at = c.received_at();
      waited_for_connection = c.waited_for_connection();
    }
  }
};

void ChannelCall::FailAtOnce(RpcController* controller, Status status,
                             ResponseCallback&& callback) {
  RpcControllerInternal::FailCall(controller, std::move(status));
  ResponseCallback done = std::move(callback);
  done();
}

ChannelCall::ChannelCall(std::shared_ptr<Channel> channel, const std::string& service,
                         const std::string& method, const google::protobuf::Message& request,
                         google::protobuf::Message* response, RpcController* controller,
                         ResponseCallback&& callback, const RetryRules& rules)
    : channel_(std::move(channel)),
      service_(service),
      method_(method),
      request_(request.New()),
      response_(response),
      controller_(controller),
      callback_(std::move(callback)),
      retries_timeouts_(rules.attempt_timeout != MonoDelta::Max()),
      series_(rules, RetryBackoff(channel_->options()), controller,
              MessengerInternals::request_tracker(*channel_->messenger())) {
  request_->CopyFrom(request);
}

ChannelCall::~ChannelCall() = default;

void ChannelCall::Start(std::shared_ptr<Channel> channel, const BackendSet& set,
                        const std::string& service, const std::string& method,
                        const google::protobuf::Message& request,
                        google::protobuf::Message* response, RpcController* controller,
                        ResponseCallback&& callback, MethodKind kind) {
  channel->retry_budget_.Deposit();
  MonoDelta hedge_delay;
  if (kind == MethodKind::kIdempotent && set.backends.size() >= 2 &&
      RpcControllerInternal::outbound_sidecars(*controller).empty()) {
    hedge_delay = channel->HedgeDelay(*controller);
  }
  Channel* ch = channel.get();
  scoped_refptr<ChannelCall> call(new ChannelCall(std::move(channel), service, method, request,
                                                  response, controller, std::move(callback),
                                                  ChannelRules(ch->options(), kind)));
  if (hedge_delay > MonoDelta()) {
    // Two attempts may be in flight: each gets its own controller and response, and the
    // winner's outcome moves to the caller's. Borrowed sidecars would be read by both, and by
    // the loser after the caller got its answer, so sidecar calls are not hedged (above).
    ch->hedge_budget_.Deposit();
    call->hedged_ = true;
    call->hedge_delay_ = hedge_delay;
  }
  RpcControllerInternal::set_attempts(controller, 1);
  scoped_refptr<Attempt> first;
  {
    MutexLock l(call->mu_);
    first = call->NewAttemptLocked(false);
    if (first == nullptr) {
      call->delivered_ = true;
      call->series_.End();
    }
  }
  if (first == nullptr) {
    ResponseCallback done = std::move(call->callback_);
    FailAtOnce(controller, ch->NoServerStatus(), std::move(done));
    return;
  }
  call->Send(first.get());
  if (call->hedged_) {
    ch->messenger()->RunAfter(call->hedge_delay_, [call] { call->MaybeHedge(); });
  }
}

scoped_refptr<ChannelCall::Attempt> ChannelCall::NewAttemptLocked(bool hedge) {
  Backend* backend = pinned_;
  if (backend == nullptr) {
    const BackendSet* set = channel_->current_.load(std::memory_order_acquire);
    backend = set != nullptr ? channel_->balancer_->Pick(*set, *controller_, tried_) : nullptr;
    if (backend == nullptr) return nullptr;
    tried_.Add(backend);
    tried_refs_.emplace_back(backend);
  }
  scoped_refptr<Attempt> a(new Attempt);
  a->call = this;
  a->backend = backend;
  a->hedge = hedge;
  if (hedged_) {
    a->own_controller = std::make_unique<RpcController>();
    a->own_controller->set_deadline(series_.deadline());
    a->own_controller->set_trace_context(controller_->trace_context());
    // Not of the caller's type: the loser may still be filling it after the caller's callback,
    // when the caller may have freed its types. Its fields land in the unknown-field set, and the
    // winner's bytes are parsed into the caller's response (Deliver).
    a->own_response = std::make_unique<google::protobuf::Empty>();
    a->controller = a->own_controller.get();
    a->response = a->own_response.get();
  } else {
    a->controller = controller_;
    a->response = response_;
  }
  a->deadline = series_.AttemptDeadline();
  const int number = series_.CountAttempt();
  if (hedge) {
    backend->CountHedge();
  } else if (number > 1) {
    backend->CountRetry();
  }
  // A hedged call's attempt has a controller of its own: it says whether the attempt is a retry
  // (the client's retry count; a hedge is none).
  if (a->own_controller != nullptr) {
    RpcControllerInternal::set_attempts(a->own_controller.get(), hedge ? 1 : number);
  }
  in_flight_.push_back(a);
  return a;
}

void ChannelCall::Send(Attempt* attempt) {
  attempt->AddRef();  // the callback's: the attempt outlives its call's end
  channel_->SendAttempt(attempt->backend.get(), attempt, service_, method_, *request_,
                        attempt->response, attempt->controller, attempt->deadline, [attempt] {
                          attempt->call->OnAttemptDone(attempt);
                          attempt->Release();
                        });
}

RetryDecision ChannelCall::DecideRetryLocked(const Attempt& attempt) {
  const MonoTime now = MonoTime::Now();
  const RetryDecision next =
      series_.DecideRetry(AttemptEnd::Of(*attempt.controller, attempt.outcome), now);
  if (!next.retry()) return next;
  if (next.verdict == RetryVerdict::kSameServer) pinned_ = attempt.backend.get();
  // An untried server must be left (the pick after the backoff makes sure).
  if (pinned_ == nullptr && !UntriedServerLeftLocked()) return RetryDecision();
  if (!channel_->retry_budget_.TryWithdraw(now)) return RetryDecision();
  return next;
}

bool ChannelCall::UntriedServerLeftLocked() const { return UntriedServerLeft(*channel_, tried_); }

void ChannelCall::OnAttemptDone(Attempt* attempt) {
  std::vector<scoped_refptr<Attempt>> losers;
  MonoDelta wait;
  bool retry = false;
  bool deferred = false;
  {
    MutexLock l(mu_);
    for (auto it = in_flight_.begin(); it != in_flight_.end(); ++it) {
      if (it->get() == attempt) {
        in_flight_.erase(it);
        break;
      }
    }
    if (delivered_) return;  // a hedge's loser
    const bool failed_retriably =
        attempt->outcome == AttemptOutcome::kTooBusy ||
        attempt->outcome == AttemptOutcome::kUnavailable ||
        attempt->outcome == AttemptOutcome::kConnectionFailed ||
        (attempt->outcome == AttemptOutcome::kTimedOut && retries_timeouts_);
    if (failed_retriably && !in_flight_.empty()) {
      last_failed_ = attempt;  // the other attempt may still answer
      return;
    }
    const RetryDecision next = failed_retriably ? DecideRetryLocked(*attempt) : RetryDecision();
    if (next.retry()) {
      last_failed_ = attempt;
      retry_pending_ = true;
      retry = true;
      wait = next.wait;
    } else {
      delivered_ = true;
      last_failed_ = nullptr;
      losers = std::move(in_flight_);
      in_flight_.clear();
      if (hedges_sending_ > 0) {
        deliver_after_send_ = attempt;  // MaybeHedge delivers once its Send returns
        deferred = true;
      }
    }
  }
  if (retry) {
    // On a reactor, after this callback has returned: the finished attempt is done with the
    // caller's controller by then. At messenger shutdown the retry runs early and fails at once.
    scoped_refptr<ChannelCall> self(this);
    channel_->messenger()->RunAfter(wait, [self] { self->Retry(); });
    return;
  }
  for (auto& loser : losers) CancelAttempt(loser.get());
  if (!deferred) Deliver(attempt);
}

void ChannelCall::Retry() {
  scoped_refptr<Attempt> next;
  scoped_refptr<Attempt> failed;
  {
    MutexLock l(mu_);
    retry_pending_ = false;
    if (delivered_) return;
    next = NewAttemptLocked(false);
    if (next == nullptr) {  // the set changed under us: nothing untried is left
      delivered_ = true;
      failed = std::move(last_failed_);
      if (hedges_sending_ > 0) {
        deliver_after_send_ = std::move(failed);  // MaybeHedge delivers once its Send returns
        return;
      }
    }
  }
  if (next == nullptr) {
    Deliver(failed.get());
    return;
  }
  if (!hedged_) RpcControllerInternal::PrepareRetry(controller_);
  {
    MutexLock l(mu_);
    RpcControllerInternal::set_attempts(controller_, series_.attempts());
  }
  Send(next.get());
}

void ChannelCall::MaybeHedge() {
  scoped_refptr<Attempt> hedge;
  {
    MutexLock l(mu_);
    if (delivered_ || retry_pending_ || in_flight_.size() != 1) return;
    if (!channel_->hedge_budget_.TryWithdraw(MonoTime::Now())) return;
    hedge = NewAttemptLocked(true);
    if (hedge == nullptr) return;
    ++hedges_sending_;
  }
  Send(hedge.get());
  scoped_refptr<Attempt> winner;
  {
    MutexLock l(mu_);
    if (--hedges_sending_ == 0) winner = std::move(deliver_after_send_);
  }
  if (winner != nullptr) Deliver(winner.get());
}

void ChannelCall::CancelAttempt(Attempt* attempt) {
  // OnAttemptDone ignores the attempt from here on. Its own controller (a hedge's attempts each
  // have one; never the caller's) cancels it: the call ends at once on the client, and a server
  // that negotiated cancellation drops it from its queue or tells its running handler.
  attempt->abandoned.store(true, std::memory_order_relaxed);
  if (attempt->own_controller != nullptr) attempt->own_controller->Cancel();
}

void ChannelCall::Deliver(Attempt* attempt) {
  if (hedged_) {
    RpcControllerInternal::MoveOutcome(attempt->own_controller.get(), controller_);
    if (controller_->status().ok()) {
      // The answer's bytes, kept as unknown fields, into the caller's type.
      const std::string bytes = attempt->own_response->SerializeAsString();
      response_->Clear();
      if (!response_->ParsePartialFromString(bytes) || !response_->IsInitialized()) {
        RpcControllerInternal::set_status(
            controller_,
            Status::Corruption("response does not parse", response_->InitializationErrorString()));
      }
    }
  }
  {
    MutexLock l(mu_);
    RpcControllerInternal::set_attempts(controller_, series_.attempts());
    series_.End();  // a tracked call's request id: no retry of it will be sent
  }
  // A hedged call's other attempts had controllers of their own: one cancelled in flight, or
  // one that failed before the winner, may have run.
  if (hedged_ && controller_->attempts() > 1) {
    RpcControllerInternal::NoteHandlerRan(controller_, HandlerRan::kMaybe);
  }
  SetFinalStatus(controller_);
  if (attempt->answered && !attempt->waited_for_connection) {
    channel_->RecordLatency(attempt->latency, attempt->answered_at);
  }
  // No attempt can start and every one sent has serialized the request: the copy goes now, as
  // the caller may free its message types (a DynamicMessageFactory, a descriptor pool) in the
  // callback or right after, while this call lives on until its last attempt's reference goes
  // (a cancelled loser's may come later; it holds nothing of the caller's types).
  request_.reset();
  ResponseCallback done = std::move(callback_);
  done();
}

}  // namespace rrpc::rpc
