#include "rpc/cluster/channel_call.h"

#include <glog/logging.h>
#include <google/protobuf/empty.pb.h>

#include <algorithm>
#include <atomic>
#include <random>
#include <utility>

#include "rpc/core/messenger_internals.h"
#include "rpc/core/request_tracker.h"
#include "rrpc/rpc/cluster/channel.h"
#include "rrpc/rpc/messenger.h"
#include "rrpc/rpc/rpc_controller.h"

namespace rrpc::rpc {

namespace {
// A wait between half and all of `backoff`, so callers refused together come back apart.
MonoDelta Jittered(MonoDelta backoff) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  const int64_t ns = backoff.ToNanoseconds();
  return MonoDelta::FromNanoseconds(
      ns / 2 + static_cast<int64_t>(std::uniform_real_distribution<double>(0, 1)(rng) *
                                    static_cast<double>(ns) / 2));
}
}  // namespace

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

  AttemptOutcome outcome = AttemptOutcome::kLocal;
  bool request_sent = false;
  MonoDelta latency;  // when answered
  MonoTime answered_at;
  bool answered = false;
  bool waited_for_connection = false;  // its latency includes the connection's set-up
  std::atomic<bool> abandoned{false};  // lost a hedge: its answer is ignored

  void OnCallFinished(const OutboundCall& c, const Status& status,
                      const ErrorStatusPB* error) override {
    outcome = backend->Record(c, status, error);
    request_sent = c.request_started();
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
  controller->status_ = std::move(status);
  controller->error_.reset();
  controller->finished_ = true;
  ResponseCallback done = std::move(callback);
  done();
}

ChannelCall::ChannelCall(std::shared_ptr<Channel> channel, const std::string& service,
                         const std::string& method, const google::protobuf::Message& request,
                         google::protobuf::Message* response, RpcController* controller,
                         ResponseCallback&& callback, MethodKind kind)
    : channel_(std::move(channel)),
      service_(service),
      method_(method),
      request_(request.New()),
      response_(response),
      controller_(controller),
      callback_(std::move(callback)),
      idempotent_(kind == MethodKind::kIdempotent),
      tracked_(kind == MethodKind::kTracked) {
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
      controller->outbound_sidecars_.empty()) {
    hedge_delay = channel->HedgeDelay(*controller);
  }
  Channel* ch = channel.get();
  scoped_refptr<ChannelCall> call(new ChannelCall(std::move(channel), service, method, request,
                                                  response, controller, std::move(callback), kind));
  if (hedge_delay > MonoDelta()) {
    // Two attempts may be in flight: each gets its own controller and response, and the
    // winner's outcome moves to the caller's. Borrowed sidecars would be read by both, and by
    // the loser after the caller got its answer, so sidecar calls are not hedged (above).
    ch->hedge_budget_.Deposit();
    call->hedged_ = true;
    call->hedge_delay_ = hedge_delay;
  }
  call->deadline_ = controller->deadline();
  call->attempt_timeout_ = ch->options().attempt_timeout;
  controller->attempts_ = 1;
  if (call->tracked_) {
    controller->request_seq_no_ =
        MessengerInternals::request_tracker(*ch->messenger())->NewSequence();
  }
  scoped_refptr<Attempt> first;
  {
    MutexLock l(call->mu_);
    call->backoff_ = ch->options().initial_backoff;
    first = call->NewAttemptLocked(false);
    if (first == nullptr) call->delivered_ = true;
  }
  if (first == nullptr) {
    if (call->tracked_) {
      MessengerInternals::request_tracker(*ch->messenger())->Complete(controller->request_seq_no_);
    }
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
    a->own_controller->set_deadline(deadline_);
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
  if (RetriesTimeouts()) {
    a->controller->set_deadline(std::min(deadline_, MonoTime::Now() + attempt_timeout_));
  }
  attempts_++;
  if (hedge) {
    backend->CountHedge();
  } else if (attempts_ > 1) {
    backend->CountRetry();
  }
  in_flight_.push_back(a);
  return a;
}

void ChannelCall::Send(Attempt* attempt) {
  attempt->AddRef();  // the callback's: the attempt outlives its call's end
  channel_->SendAttempt(attempt->backend.get(), scoped_refptr<CallObserver>(attempt), service_,
                        method_, *request_, attempt->response, attempt->controller, [attempt] {
                          attempt->call->OnAttemptDone(attempt);
                          attempt->Release();
                        });
}

bool ChannelCall::MayRetry(const Attempt& attempt) {
  switch (attempt.outcome) {
    case AttemptOutcome::kTooBusy:
    case AttemptOutcome::kUnavailable:
      break;  // refused: the server did not run it
    case AttemptOutcome::kConnectionFailed:
      if (attempt.request_sent && !idempotent_) {  // it may have run
        if (!tracked_ || !PinForLostOutcome(attempt)) return false;
      }
      break;
    case AttemptOutcome::kTimedOut:
      // Only an attempt's own timeout, of an idempotent call or a tracked one that can ask its
      // server again: the server may have run it.
      if (!RetriesTimeouts()) return false;
      if (tracked_ && !PinForLostOutcome(attempt)) return false;
      break;
    default:
      return false;
  }
  if (attempts_ >= channel_->options().max_attempts) return false;
  if (pinned_ == nullptr) {
    // An untried server must be left (the pick after the backoff makes sure).
    const BackendSet* set = channel_->current_.load(std::memory_order_acquire);
    bool untried = false;
    if (set != nullptr) {
      for (const auto& b : set->backends) untried |= !tried_.Contains(b.get());
    }
    if (!untried) return false;
  }
  const MonoTime now = MonoTime::Now();
  if (now + backoff_ >= deadline_) return false;
  return channel_->retry_budget_.TryWithdraw(now);
}

bool ChannelCall::PinForLostOutcome(const Attempt& attempt) {
  const RpcController& c = *attempt.controller;
  if (!c.server_tracks_results() && c.request_left()) return false;  // it might run twice
  pinned_ = attempt.backend.get();
  return true;
}

void ChannelCall::OnAttemptDone(Attempt* attempt) {
  std::vector<scoped_refptr<Attempt>> losers;
  MonoDelta wait;
  bool retry = false;
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
        (attempt->outcome == AttemptOutcome::kTimedOut && RetriesTimeouts());
    if (failed_retriably && !in_flight_.empty()) {
      last_failed_ = attempt;  // the other attempt may still answer
      return;
    }
    if (failed_retriably && MayRetry(*attempt)) {
      last_failed_ = attempt;
      retry_pending_ = true;
      retry = true;
      wait = Jittered(backoff_);
      backoff_ = std::min(channel_->options().max_backoff,
                          MonoDelta::FromNanoseconds(backoff_.ToNanoseconds() * 2));
    } else {
      delivered_ = true;
      last_failed_ = nullptr;
      losers = std::move(in_flight_);
      in_flight_.clear();
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
  Deliver(attempt);
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
    }
  }
  if (next == nullptr) {
    Deliver(failed.get());
    return;
  }
  if (!hedged_) controller_->PrepareRetry();
  {
    MutexLock l(mu_);
    controller_->attempts_ = attempts_;
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
  }
  Send(hedge.get());
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
    RpcController* from = attempt->own_controller.get();
    controller_->status_ = std::move(from->status_);
    controller_->error_ = std::move(from->error_);
    controller_->response_block_ = std::move(from->response_block_);
    controller_->inbound_sidecars_ = std::move(from->inbound_sidecars_);
    controller_->finished_ = true;
    if (controller_->status_.ok()) {
      // The answer's bytes, kept as unknown fields, into the caller's type.
      const std::string bytes = attempt->own_response->SerializeAsString();
      response_->Clear();
      if (!response_->ParsePartialFromString(bytes) || !response_->IsInitialized()) {
        controller_->status_ =
            Status::Corruption("response does not parse", response_->InitializationErrorString());
      }
    }
  }
  {
    MutexLock l(mu_);
    controller_->attempts_ = attempts_;
  }
  // The caller's controller carried the last attempt's deadline; it reads the call's again.
  if (RetriesTimeouts() && !hedged_) controller_->set_deadline(deadline_);
  if (attempt->answered && !attempt->waited_for_connection) {
    channel_->RecordLatency(attempt->latency, attempt->answered_at);
  }
  if (tracked_) {
    MessengerInternals::request_tracker(*channel_->messenger())
        ->Complete(controller_->request_seq_no_);
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
