#include "rpc/cluster/channel_stream_mover.h"

#include <utility>

#include "rpc/cluster/channel_call.h"
#include "rpc/core/messenger_internals.h"
#include "rpc/core/rpc_controller_internal.h"
#include "rpc/core/stream_state.h"
#include "rrpc/rpc/cluster/channel.h"
#include "rrpc/rpc/messenger.h"

namespace rrpc::rpc {

namespace {
// The attempt engine's rules for moving a stream. No attempt timeout: the opening call's
// deadline is the whole stream's.
RetryRules StreamRules(const ChannelOptions& options) {
  RetryRules rules;
  rules.kind = MethodKind::kIdempotent;
  rules.max_attempts = options.max_attempts;
  rules.many_servers = true;
  return rules;
}
}  // namespace

ChannelStreamMover::ChannelStreamMover(const std::shared_ptr<Channel>& channel,
                                       const std::string& service, const std::string& method,
                                       bool may_move, const google::protobuf::Message* request,
                                       Backend* first)
    : channel_(channel),
      service_(service),
      method_(method),
      may_move_(may_move),
      request_(may_move && request != nullptr ? request->New() : nullptr),
      rules_(StreamRules(channel->options())),
      current_(first) {
  if (request_ != nullptr) request_->CopyFrom(*request);
  tried_.Add(first);
  tried_refs_.emplace_back(first);
}

ChannelStreamMover::~ChannelStreamMover() = default;

void ChannelStreamMover::OnOpeningCallEnded(const RpcController& controller) {
  if (!controller.status().ok()) {
    current_->RecordStreamEnd(controller.status(), controller.error_response());
  }
}

bool ChannelStreamMover::OnOpenFailed(const std::shared_ptr<StreamState>& stream) {
  if (!may_move_) return false;
  RpcController* controller = stream->controller();
  std::shared_ptr<Channel> channel = channel_.lock();
  if (channel == nullptr) return false;
  const ChannelOptions& options = channel->options();
  if (series_ == nullptr) {
    series_ = std::make_unique<AttemptSeries>(rules_, ChannelCall::RetryBackoff(options),
                                              controller, nullptr);
    series_->CountAttempt();  // the first opening call
  }
  const MonoTime now = MonoTime::Now();
  const RetryDecision next = series_->DecideRetry(AttemptEnd::Of(*controller), now);
  if (!next.retry() || !ChannelCall::UntriedServerLeft(*channel, tried_) ||
      !channel->retry_budget_.TryWithdraw(now)) {
    RpcControllerInternal::set_attempts(controller, series_->attempts());
    SetFinalStatus(controller);
    return false;
  }
  // The stream owns this mover and the task holds the stream.
  channel->messenger()->RunAfter(next.wait, [this, stream] { Reopen(stream); });
  return true;
}

void ChannelStreamMover::Reopen(const std::shared_ptr<StreamState>& stream) {
  RpcController* controller = stream->controller();
  std::shared_ptr<Channel> channel = channel_.lock();
  Backend* backend = nullptr;
  if (channel != nullptr) {
    const BackendSet* set = channel->current_.load(std::memory_order_acquire);
    if (set != nullptr) backend = channel->balancer_->Pick(*set, *controller, tried_);
  }
  if (backend == nullptr) {  // the set changed meanwhile, or the channel went
    RpcControllerInternal::set_attempts(controller, series_->attempts());
    SetFinalStatus(controller);
    stream->EndMove(controller->status());
    return;
  }
  tried_.Add(backend);
  tried_refs_.emplace_back(backend);
  current_ = backend;
  backend->CountRetry();
  RpcControllerInternal::PrepareRetry(controller);
  RpcControllerInternal::set_attempts(controller, series_->CountAttempt());
  Messenger* messenger = channel->messenger().get();
  ReopenClientStream(messenger,
                     backend->Methods(service_)->Get(MessengerInternals::metrics(*messenger),
                                                     backend->addr(), service_, method_),
                     stream, request_.get());
}

}  // namespace rrpc::rpc
