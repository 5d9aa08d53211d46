// ChannelCall: one call through a channel of several servers, from its first attempt to the
// callback: picks a server per attempt (never one already tried), fails over when an attempt is
// refused (too busy, unavailable, draining) or its connection fails before the request left (or
// after, for an idempotent method), within the call's deadline and the channel's retry budget,
// waiting a jittered backoff between attempts; and, for an idempotent call with a hedge delay,
// sends a second attempt when the first has not answered in time (first answer wins; the other
// is cancelled). A tracked call (exactly-once) carries one request id over all its attempts; once
// an attempt's outcome is lost after its request may have left, the call is pinned to that
// server, whose result tracker answers the retry (never hedged, never moved).
//
// The steps every retrying call shares (sending an attempt, classifying its end, the retry rules,
// the backoff, the request id) are the attempt engine's (rpc/core/attempt_engine.h); this class
// adds what takes many servers: picking, failover, hedging and pinning.
//
// Internal to the channel. Reference counted: held by each attempt in flight and each timer
// waiting (a timer still waiting at messenger shutdown runs early and the call ends Aborted). The
// caller's request, response, controller and callback, and anything of their message types, are
// used until the callback runs, never after.
// Attempts finish on reactor threads, concurrently when hedged: shared state is under mu_.
#pragma once

#include <google/protobuf/message.h>

#include <memory>
#include <string>
#include <vector>

#include "rpc/cluster/backend.h"
#include "rpc/cluster/balancer.h"
#include "rpc/core/attempt_engine.h"
#include "rrpc/rpc/method_kind.h"
#include "rrpc/rpc/response_callback.h"
#include "rrpc/rpc/rpc_controller.h"
#include "rrpc/util/monotime.h"
#include "rrpc/util/mutex.h"
#include "rrpc/util/ref_counted.h"

namespace rrpc::rpc {

class Channel;

class ChannelCall : public RefCounted<ChannelCall> {
 public:
  // Starts a call on `set` (two or more backends; one or more for a tracked call).
  static void Start(std::shared_ptr<Channel> channel, const BackendSet& set,
                    const std::string& service, const std::string& method,
                    const google::protobuf::Message& request, google::protobuf::Message* response,
                    RpcController* controller, ResponseCallback&& callback, MethodKind kind);
  // Finishes a call that could not be sent (no server): `status` in the controller, then
  // `callback`, on this thread.
  static void FailAtOnce(RpcController* controller, Status status, ResponseCallback&& callback);
  // What a call's retries and a stream's moves (ChannelStreamMover) share. Any thread.
  // The backoff they wait: doubling from options.initial_backoff up to options.max_backoff.
  static Backoff RetryBackoff(const ChannelOptions& options);
  // Whether `channel`'s current set has a server not in `tried`.
  static bool UntriedServerLeft(const Channel& channel, const TriedBackends& tried);

 private:
  friend class RefCounted<ChannelCall>;
  struct Attempt;

  ChannelCall(std::shared_ptr<Channel> channel, const std::string& service,
              const std::string& method, const google::protobuf::Message& request,
              google::protobuf::Message* response, RpcController* controller,
              ResponseCallback&& callback, const RetryRules& rules);
  ~ChannelCall();

  // A new attempt on a server picked now (or the pinned one; counted, marked tried, in flight);
  // nullptr when no untried server is left.
  scoped_refptr<Attempt> NewAttemptLocked(bool hedge) RRPC_REQUIRES(mu_);
  // Sends `attempt` (made by NewAttemptLocked, outside the lock: it may finish at once).
  void Send(Attempt* attempt);
  void OnAttemptDone(Attempt* attempt);
  // After a retry's backoff: the next attempt, or the last failure when no server is left.
  void Retry();
  // When the hedge delay has passed: a second attempt, if the first is still alone and waiting.
  void MaybeHedge();
  // Whether a failed `attempt` may be retried: the attempt engine's decision (rules, attempts,
  // deadline), then an untried server (unless pinned) and the retry budget. A tracked call's
  // lost outcome pins the call to `attempt`'s server, the one that may have run it.
  RetryDecision DecideRetryLocked(const Attempt& attempt) RRPC_REQUIRES(mu_);
  // Whether the current set has a server no attempt of this call went to.
  bool UntriedServerLeftLocked() const RRPC_REQUIRES(mu_);
  // Gives the caller `attempt`'s outcome and runs the callback. REQUIRES: delivered_ set, so no
  // new attempt starts.
  void Deliver(Attempt* attempt);
  // The loser of a hedge: its answer will be ignored. Only on the client for now (its callback
  // touches only the attempt's own controller and response); see docs/cluster.md.
  static void CancelAttempt(Attempt* attempt);

  const std::shared_ptr<Channel> channel_;
  const std::string service_;
  const std::string method_;
  // A copy: retries resend it. Freed before the callback runs (see Deliver): it is of the caller's
  // message type, which the caller may free then. (Hedged attempts' own responses are not.)
  std::unique_ptr<google::protobuf::Message> request_;
  google::protobuf::Message* const response_;
  RpcController* const controller_;
  ResponseCallback callback_;
  // An attempt that passed its own timeout (ChannelOptions::attempt_timeout; idempotent and
  // tracked calls) may be followed by another.
  const bool retries_timeouts_;
  // Hedged calls give each attempt a controller and response of its own (two may be in flight);
  // others use the caller's, one attempt after another.
  bool hedged_ = false;
  MonoDelta hedge_delay_;

  Mutex mu_;
  // The attempt engine's record: attempts (hedges count), backoff, the call's deadline, a tracked
  // call's request id.
  AttemptSeries series_ RRPC_GUARDED_BY(mu_);
  TriedBackends tried_ RRPC_GUARDED_BY(mu_);
  std::vector<scoped_refptr<Backend>> tried_refs_ RRPC_GUARDED_BY(mu_);
  std::vector<scoped_refptr<Attempt>> in_flight_ RRPC_GUARDED_BY(mu_);
  // A tracked call's server once an outcome there was lost: every later attempt goes to it.
  Backend* pinned_ RRPC_GUARDED_BY(mu_) = nullptr;
  scoped_refptr<Attempt> last_failed_ RRPC_GUARDED_BY(mu_);
  bool delivered_ RRPC_GUARDED_BY(mu_) = false;
  bool retry_pending_ RRPC_GUARDED_BY(mu_) = false;
  // A hedge made under mu_ and not yet sent (MaybeHedge): its Send still reads request_. An
  // attempt that ends the call meanwhile leaves its delivery to that Send's thread
  // (deliver_after_send_), so request_ is freed, and the callback runs, after the hedge has
  // serialized it.
  int hedges_sending_ RRPC_GUARDED_BY(mu_) = 0;
  scoped_refptr<Attempt> deliver_after_send_ RRPC_GUARDED_BY(mu_);
};

}  // namespace rrpc::rpc
