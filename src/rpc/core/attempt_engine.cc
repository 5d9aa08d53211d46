#include "rpc/core/attempt_engine.h"

#include <algorithm>
#include <random>
#include <string>

#include "rpc/core/request_tracker.h"
#include "rpc/core/rpc_controller_internal.h"

namespace rrpc::rpc {

AttemptOutcome ClassifyAttempt(const Status& status, const ErrorStatusPB* error) {
  if (status.ok()) return AttemptOutcome::kSuccess;
  if (error != nullptr) {
    switch (error->code()) {
      case ErrorStatusPB::ERROR_SERVER_TOO_BUSY:
        return AttemptOutcome::kTooBusy;
      case ErrorStatusPB::ERROR_UNAVAILABLE:
        return AttemptOutcome::kUnavailable;
      case ErrorStatusPB::ERROR_TIMED_OUT:
        return AttemptOutcome::kTimedOut;
      default:
        return AttemptOutcome::kFinal;
    }
  }
  if (status.IsTimedOut()) return AttemptOutcome::kTimedOut;
  if (status.IsNetworkError() || status.IsIOError() || status.IsEndOfFile() ||
      status.IsServiceUnavailable()) {
    return AttemptOutcome::kConnectionFailed;
  }
  return AttemptOutcome::kLocal;
}

const char* AttemptOutcomeName(AttemptOutcome outcome) {
  switch (outcome) {
    case AttemptOutcome::kSuccess:
      return "success";
    case AttemptOutcome::kFinal:
      return "final";
    case AttemptOutcome::kTooBusy:
      return "too busy";
    case AttemptOutcome::kUnavailable:
      return "unavailable";
    case AttemptOutcome::kConnectionFailed:
      return "connection failed";
    case AttemptOutcome::kTimedOut:
      return "timed out";
    case AttemptOutcome::kLocal:
      return "local failure";
  }
  return "?";
}

HandlerRan ErrorResponseRan(const ErrorStatusPB& error) {
  switch (error.code()) {
    case ErrorStatusPB::ERROR_APPLICATION:
      return HandlerRan::kYes;
    case ErrorStatusPB::ERROR_REQUEST_STALE:  // the server no longer knows: it may have run
    case ErrorStatusPB::FATAL_UNKNOWN:
      return HandlerRan::kMaybe;
    default:  // refused, or expired in the queue: the server did not run the handler
      return HandlerRan::kNo;
  }
}

Status FinalStatus(const Status& last, int attempts, HandlerRan ran) {
  if (last.ok() || attempts <= 1) return last;
  return last.CloneAndPrepend("after " + std::to_string(attempts) + " attempts, " +
                              HandlerRanName(ran));
}

void SetFinalStatus(RpcController* controller) {
  if (controller->status().ok()) return;
  RpcControllerInternal::set_status(
      controller,
      FinalStatus(controller->status(), controller->attempts(), controller->handler_ran()));
}

RetryRules RetryRules::ForProxy(const RetryPolicy& policy, MethodKind kind) {
  RetryRules rules;
  rules.kind = kind;
  rules.max_attempts = policy.max_attempts;
  if (kind == MethodKind::kTracked && policy.attempt_timeout != MonoDelta::Max()) {
    rules.attempt_timeout = policy.attempt_timeout;
    rules.retries_lost_connections = true;
  }
  return rules;
}

namespace {
// A tracked call's attempt whose outcome the client lost (`allowed` by the rules): its server
// may be asked again with the same request id when it keeps results, or never got the request.
RetryVerdict AskServerAgain(const RetryRules& rules, const AttemptEnd& end, bool allowed) {
  if (!allowed || rules.kind != MethodKind::kTracked) return RetryVerdict::kNo;
  if (!end.server_tracks_results && end.request_left) return RetryVerdict::kNo;  // might run twice
  return RetryVerdict::kSameServer;
}
}  // namespace

RetryVerdict DecideRetry(const RetryRules& rules, const AttemptEnd& end) {
  const bool idempotent = rules.kind == MethodKind::kIdempotent;
  switch (end.outcome) {
    case AttemptOutcome::kTooBusy:
      return RetryVerdict::kAnyServer;  // refused: the server did not run it
    case AttemptOutcome::kUnavailable:
      // Refused too; but one address that is going away is asked again only for a tracked call.
      if (rules.many_servers) return RetryVerdict::kAnyServer;
      return AskServerAgain(rules, end, rules.retries_lost_connections);
    case AttemptOutcome::kConnectionFailed:
      if (rules.many_servers && (!end.request_left || idempotent)) return RetryVerdict::kAnyServer;
      return AskServerAgain(rules, end, rules.retries_lost_connections);
    case AttemptOutcome::kTimedOut:
      // Only under an attempt timeout: the call's own deadline has passed otherwise.
      if (rules.attempt_timeout == MonoDelta::Max()) return RetryVerdict::kNo;
      if (rules.many_servers && idempotent) return RetryVerdict::kAnyServer;
      return AskServerAgain(rules, end, true);
    case AttemptOutcome::kSuccess:
    case AttemptOutcome::kFinal:
    case AttemptOutcome::kLocal:
      break;
  }
  return RetryVerdict::kNo;
}

MonoDelta Backoff::NextWait() {
  // Per thread: jitter needs no shared state.
  thread_local std::mt19937_64 rng(std::random_device{}());
  const int64_t ns = next_.ToNanoseconds();
  const MonoDelta wait = MonoDelta::FromNanoseconds(
      ns / 2 + static_cast<int64_t>(std::uniform_real_distribution<double>(0, 1)(rng) *
                                    static_cast<double>(ns) / 2));
  next_ = std::min(max_, MonoDelta::FromNanoseconds(
                             static_cast<int64_t>(static_cast<double>(ns) * multiplier_)));
  return wait;
}

AttemptSeries::AttemptSeries(const RetryRules& rules, Backoff backoff, RpcController* controller,
                             RequestTracker* tracker)
    : rules_(rules),
      backoff_(backoff),
      deadline_(RpcControllerInternal::FixDeadline(controller, MonoTime::Now())) {
  if (rules_.kind == MethodKind::kTracked && tracker != nullptr) {
    tracker_ = tracker;
    request_seq_no_ = tracker->NewSequence();
    RpcControllerInternal::set_request_seq_no(controller, request_seq_no_);
  }
}

AttemptSeries::~AttemptSeries() { End(); }

MonoTime AttemptSeries::BeginAttempt(RpcController* controller) {
  if (CountAttempt() > 1) RpcControllerInternal::PrepareRetry(controller);
  RpcControllerInternal::set_attempts(controller, attempts_);
  return AttemptDeadline();
}

MonoTime AttemptSeries::AttemptDeadline() const {
  if (rules_.attempt_timeout == MonoDelta::Max()) return deadline_;
  return std::min(deadline_, MonoTime::Now() + rules_.attempt_timeout);
}

RetryDecision AttemptSeries::DecideRetry(const AttemptEnd& end, MonoTime now) {
  RetryDecision decision;
  if (attempts_ >= rules_.max_attempts) return decision;
  const RetryVerdict verdict = rpc::DecideRetry(rules_, end);
  if (verdict == RetryVerdict::kNo) return decision;
  const MonoDelta wait = backoff_.NextWait();
  if (now + wait >= deadline_) return decision;  // no time for another try
  decision.verdict = verdict;
  decision.wait = wait;
  return decision;
}

void AttemptSeries::End() {
  if (tracker_ == nullptr) return;
  tracker_->Complete(request_seq_no_);
  tracker_ = nullptr;
}

}  // namespace rrpc::rpc
