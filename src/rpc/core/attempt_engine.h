// The attempt engine: the steps of a client call that may take several attempts, shared by a
// Proxy to one address (rrpc/rpc/proxy.h) and a cluster channel's calls (cluster/channel_call.h):
// sending one attempt (NewAttemptCall, core/attempt_call.h), classifying how it ended
// (ClassifyAttempt, AttemptEnd), deciding whether another may follow (DecideRetry), drawing the
// backoff before it (Backoff), and keeping a tracked call's request id and attempt count over all
// of them (AttemptSeries). What differs stays with the caller: where an attempt goes (a channel
// picks a server, fails over, hedges and pins a tracked call) and how it waits (a synchronous proxy
// call sleeps; the others wait on a reactor timer).
//
// An attempt's deadline is its own: the call's deadline (the controller's, never rewritten), or
// sooner by the rules' attempt timeout; it travels on the OutboundCall.
#pragma once

#include <cstdint>

#include "rrpc/rpc/method_kind.h"
#include "rrpc/rpc/rpc_controller.h"
#include "rrpc/util/monotime.h"

namespace rrpc::rpc {

class RequestTracker;

// What an attempt's end means for retries, failover and a server's health.
enum class AttemptOutcome {
  kSuccess,           // answered OK
  kFinal,             // answered with an error a retry would not change (application, no method)
  kTooBusy,           // refused: the server's queue was full (ERROR_SERVER_TOO_BUSY)
  kUnavailable,       // refused: the server is draining or shutting down (ERROR_UNAVAILABLE)
  kConnectionFailed,  // no answer: the connection failed (maybe after the request was sent)
  kTimedOut,          // the deadline passed (the attempt's, or the server's ERROR_TIMED_OUT)
  kLocal,             // failed here (our messenger shut down, request too large): not retried
};
AttemptOutcome ClassifyAttempt(const Status& status, const ErrorStatusPB* error);
const char* AttemptOutcomeName(AttemptOutcome outcome);

// Whether a finished attempt's handler ran: `error` is the server's error response (if any),
// `answered` whether any response arrived, `request_left` whether any of its bytes were written.
// OutboundCall tells the controller each attempt's (RpcController::handler_ran()).
// Inline: every call's end asks, and most are answered without an error response.
HandlerRan ErrorResponseRan(const ErrorStatusPB& error);  // an error response's code decides
inline HandlerRan AttemptRan(const Status& status, const ErrorStatusPB* error, bool answered,
                             bool request_left) {
  if (error != nullptr) return ErrorResponseRan(*error);
  if (status.ok() || answered) return HandlerRan::kYes;  // answered (maybe unparseable)
  return request_left ? HandlerRan::kMaybe : HandlerRan::kNo;
}

// A failed call's status once its last attempt is over: the last attempt's, and after more than
// one attempt prefixed with their count and what the call's handler did ("after 3 attempts, may
// have run: ..."), so a retried call's text tells what happened to all of them.
Status FinalStatus(const Status& last, int attempts, HandlerRan ran);
// Applies FinalStatus to a finished, failed call on `controller`.
void SetFinalStatus(RpcController* controller);

// How one finished attempt ended, as its controller tells it.
struct AttemptEnd {
  AttemptOutcome outcome = AttemptOutcome::kLocal;
  bool request_left = false;           // some of its bytes were written: the server may run it
  bool server_tracks_results = false;  // its connection's server negotiated EXACTLY_ONCE

  // From a controller whose attempt finished; `outcome` when the caller classified it further
  // (a backend tells a connection that never opened from a timeout).
  static AttemptEnd Of(const RpcController& c, AttemptOutcome outcome) {
    return AttemptEnd{outcome, c.request_left(), c.server_tracks_results()};
  }
  static AttemptEnd Of(const RpcController& c) {
    return Of(c, ClassifyAttempt(c.status(), c.error_response()));
  }
};

// What a call's failed attempts may be retried for: fixed as the call starts.
struct RetryRules {
  MethodKind kind = MethodKind::kPlain;
  int max_attempts = 1;  // in all, the first included
  // A cluster channel: a retry may go to another server. A proxy has one address.
  bool many_servers = false;
  // Each attempt ends by this (within the call's deadline), and an attempt that ran out of it
  // may be followed by another. Max(): an attempt may take the whole deadline.
  MonoDelta attempt_timeout = MonoDelta::Max();
  // A tracked call whose connection failed after its request left (or, to one address, that
  // was refused as unavailable) may ask its server again with the same request id.
  bool retries_lost_connections = false;

  // A Proxy to one address, by the controller's RetryPolicy.
  static RetryRules ForProxy(const RetryPolicy& policy, MethodKind kind);
};

enum class RetryVerdict {
  kNo,
  kAnyServer,   // the server did not run it, or may run it again: any server may take it
  kSameServer,  // a tracked call's lost outcome: only its server, asked with the same request id
};
// Whether a failed attempt that ended as `end` may be retried under `rules` (attempts and time
// aside). Pure: no clock, no state.
RetryVerdict DecideRetry(const RetryRules& rules, const AttemptEnd& end);

// The wait before each retry: between half and all of a backoff that starts at `initial` and
// grows by `multiplier` up to `max`, so callers refused together come back apart.
class Backoff {
 public:
  Backoff(MonoDelta initial, MonoDelta max, double multiplier)
      : next_(initial), max_(max), multiplier_(multiplier) {}
  // The next wait, drawn now; the backoff grows for the one after.
  MonoDelta NextWait();
  // The backoff the next wait is drawn from (before jitter).
  MonoDelta next() const { return next_; }

 private:
  MonoDelta next_;
  MonoDelta max_;
  double multiplier_;
};

// A retry's go-ahead: its verdict and the wait before it (kNo: the call ends with this attempt).
struct RetryDecision {
  RetryVerdict verdict = RetryVerdict::kNo;
  MonoDelta wait;
  bool retry() const { return verdict != RetryVerdict::kNo; }
};

// The attempts of one call: their count, the backoff, the call's deadline, and a tracked call's
// request id, taken as the series starts and completed by End(). Not thread-safe: its owner calls
// it one attempt at a time (a proxy), or under its own mutex (a channel call).
class AttemptSeries {
 public:
  // The call on `controller` starts: its deadline is fixed now, and a tracked call
  // (rules.kind == kTracked) takes a request id from `tracker`, which every attempt carries.
  AttemptSeries(const RetryRules& rules, Backoff backoff, RpcController* controller,
                RequestTracker* tracker);
  AttemptSeries(const AttemptSeries&) = delete;
  AttemptSeries& operator=(const AttemptSeries&) = delete;
  ~AttemptSeries();

  const RetryRules& rules() const { return rules_; }
  // The call's deadline (the controller's).
  MonoTime deadline() const { return deadline_; }
  int attempts() const { return attempts_; }
  // An attempt is about to be sent (the first, a retry or a hedge): returns its number.
  int CountAttempt() { return ++attempts_; }
  // Counts the attempt about to be sent on the caller's `controller`, which forgets the last
  // attempt's outcome first if there was one; returns the attempt's deadline.
  MonoTime BeginAttempt(RpcController* controller);
  // The deadline of an attempt sent now: the call's, or sooner by the attempt timeout.
  MonoTime AttemptDeadline() const;
  // After a failed attempt that ended as `end`, at `now`: whether another may follow (rules,
  // attempts left) and the wait before it, which must end before the call's deadline. Grows the
  // backoff.
  RetryDecision DecideRetry(const AttemptEnd& end, MonoTime now);
  // The call is over (no attempt will follow): a tracked call's request id is completed.
  // Idempotent.
  void End();

 private:
  const RetryRules rules_;
  Backoff backoff_;
  MonoTime deadline_;
  RequestTracker* tracker_ = nullptr;  // the messenger's, for a tracked call
  uint64_t request_seq_no_ = 0;
  int attempts_ = 0;
};

}  // namespace rrpc::rpc
