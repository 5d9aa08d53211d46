#include "rpc/core/attempt_engine.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "rpc/core/request_tracker.h"
#include "rpc/core/rpc_controller_internal.h"

namespace rrpc::rpc {
namespace {

std::unique_ptr<ErrorStatusPB> ServerError(ErrorStatusPB::RpcErrorCodePB code) {
  auto error = std::make_unique<ErrorStatusPB>();
  error->set_code(code);
  error->set_message("refused");
  return error;
}

AttemptEnd End(AttemptOutcome outcome, bool request_left, bool server_tracks_results) {
  return AttemptEnd{outcome, request_left, server_tracks_results};
}

RetryRules ChannelRules(MethodKind kind, MonoDelta attempt_timeout = MonoDelta::Max()) {
  RetryRules rules;
  rules.kind = kind;
  rules.max_attempts = 3;
  rules.many_servers = true;
  rules.retries_lost_connections = true;
  rules.attempt_timeout = attempt_timeout;
  return rules;
}

RetryPolicy Policy(int max_attempts, MonoDelta attempt_timeout = MonoDelta::Max()) {
  RetryPolicy policy;
  policy.max_attempts = max_attempts;
  policy.attempt_timeout = attempt_timeout;
  return policy;
}

TEST(ClassifyAttemptTest, NamesServerRefusalsTimeoutsAndConnectionFailures) {
  EXPECT_EQ(ClassifyAttempt(Status::OK(), nullptr), AttemptOutcome::kSuccess);
  auto busy = ServerError(ErrorStatusPB::ERROR_SERVER_TOO_BUSY);
  EXPECT_EQ(ClassifyAttempt(Status::ServiceUnavailable("busy"), busy.get()),
            AttemptOutcome::kTooBusy);
  auto draining = ServerError(ErrorStatusPB::ERROR_UNAVAILABLE);
  EXPECT_EQ(ClassifyAttempt(Status::ServiceUnavailable("draining"), draining.get()),
            AttemptOutcome::kUnavailable);
  auto late = ServerError(ErrorStatusPB::ERROR_TIMED_OUT);
  EXPECT_EQ(ClassifyAttempt(Status::TimedOut("late"), late.get()), AttemptOutcome::kTimedOut);
  auto app = ServerError(ErrorStatusPB::ERROR_APPLICATION);
  EXPECT_EQ(ClassifyAttempt(Status::RemoteError("app"), app.get()), AttemptOutcome::kFinal);
  EXPECT_EQ(ClassifyAttempt(Status::TimedOut("timer"), nullptr), AttemptOutcome::kTimedOut);
  EXPECT_EQ(ClassifyAttempt(Status::NetworkError("reset"), nullptr),
            AttemptOutcome::kConnectionFailed);
  EXPECT_EQ(ClassifyAttempt(Status::InvalidArgument("too large"), nullptr), AttemptOutcome::kLocal);
}

TEST(AttemptRanTest, TellsRanMayHaveRunAndDidNotRunFromHowAnAttemptEnded) {
  // Answered: the handler ran (also when the answer did not parse).
  EXPECT_EQ(HandlerRan::kYes, AttemptRan(Status::OK(), nullptr, true, true));
  EXPECT_EQ(HandlerRan::kYes, AttemptRan(Status::Corruption("bad"), nullptr, true, true));
  auto app = ServerError(ErrorStatusPB::ERROR_APPLICATION);
  EXPECT_EQ(HandlerRan::kYes, AttemptRan(Status::RemoteError("x"), app.get(), true, true));
  // Refused or expired in the server's queue: the handler did not run.
  for (auto code : {ErrorStatusPB::ERROR_SERVER_TOO_BUSY, ErrorStatusPB::ERROR_UNAVAILABLE,
                    ErrorStatusPB::ERROR_TIMED_OUT, ErrorStatusPB::ERROR_NO_SUCH_METHOD,
                    ErrorStatusPB::ERROR_NOT_AUTHORIZED, ErrorStatusPB::ERROR_INVALID_REQUEST}) {
    auto error = ServerError(code);
    EXPECT_EQ(HandlerRan::kNo, AttemptRan(Status::RemoteError("x"), error.get(), true, true))
        << ErrorStatusPB::RpcErrorCodePB_Name(code);
  }
  auto stale = ServerError(ErrorStatusPB::ERROR_REQUEST_STALE);
  EXPECT_EQ(HandlerRan::kMaybe, AttemptRan(Status::RemoteError("x"), stale.get(), true, true));
  // No answer: it may have run once its request left, never before.
  EXPECT_EQ(HandlerRan::kMaybe, AttemptRan(Status::TimedOut("t"), nullptr, false, true));
  EXPECT_EQ(HandlerRan::kMaybe, AttemptRan(Status::NetworkError("reset"), nullptr, false, true));
  EXPECT_EQ(HandlerRan::kMaybe, AttemptRan(Status::Aborted("cancelled"), nullptr, false, true));
  EXPECT_EQ(HandlerRan::kNo, AttemptRan(Status::NetworkError("refused"), nullptr, false, false));
  EXPECT_EQ(HandlerRan::kNo, AttemptRan(Status::TimedOut("t"), nullptr, false, false));
}

TEST(AttemptRanTest, ACallsHandlerRanIsTheMostOfItsAttempts) {
  RpcController ctl;
  EXPECT_EQ(HandlerRan::kNo, ctl.handler_ran());
  RpcControllerInternal::Finish(&ctl, Status::TimedOut("lost"), nullptr, true, true,
                                HandlerRan::kMaybe);
  RpcControllerInternal::PrepareRetry(&ctl);
  RpcControllerInternal::Finish(&ctl, Status::NetworkError("connection refused"), nullptr, true,
                                false, HandlerRan::kNo);
  // The second attempt was never sent, but the first may have run.
  EXPECT_EQ(HandlerRan::kMaybe, ctl.handler_ran());
  EXPECT_TRUE(ctl.may_have_run());
  ctl.Reset();
  EXPECT_EQ(HandlerRan::kNo, ctl.handler_ran());
}

TEST(FinalStatusTest, ARetriedCallsStatusNamesItsAttemptsAndWhetherItRan) {
  const Status last = Status::NetworkError("connect to 127.0.0.1:1", "Connection refused");
  EXPECT_EQ(last.ToString(), FinalStatus(last, 1, HandlerRan::kNo).ToString());
  const Status s = FinalStatus(last, 3, HandlerRan::kMaybe);
  EXPECT_TRUE(s.IsNetworkError());
  EXPECT_NE(std::string::npos, s.ToString().find("after 3 attempts, may have run: connect"))
      << s.ToString();
  EXPECT_NE(std::string::npos,
            FinalStatus(last, 2, HandlerRan::kNo).ToString().find("after 2 attempts, did not run"));
  EXPECT_TRUE(FinalStatus(Status::OK(), 3, HandlerRan::kYes).ok());
}

TEST(DecideRetryTest, ProxyRetriesOnlyTooBusyForAPlainCall) {
  const RetryRules rules = RetryRules::ForProxy(Policy(3), MethodKind::kPlain);
  EXPECT_EQ(DecideRetry(rules, End(AttemptOutcome::kTooBusy, true, false)),
            RetryVerdict::kAnyServer);
  EXPECT_EQ(DecideRetry(rules, End(AttemptOutcome::kUnavailable, true, false)), RetryVerdict::kNo);
  EXPECT_EQ(DecideRetry(rules, End(AttemptOutcome::kConnectionFailed, false, false)),
            RetryVerdict::kNo);
  EXPECT_EQ(DecideRetry(rules, End(AttemptOutcome::kTimedOut, true, true)), RetryVerdict::kNo);
  EXPECT_EQ(DecideRetry(rules, End(AttemptOutcome::kFinal, true, true)), RetryVerdict::kNo);
}

TEST(DecideRetryTest, ProxyAsksATrackingServerAgainOnlyUnderAnAttemptTimeout) {
  const RetryRules bounded =
      RetryRules::ForProxy(Policy(3, MonoDelta::FromSeconds(1)), MethodKind::kTracked);
  EXPECT_EQ(DecideRetry(bounded, End(AttemptOutcome::kTimedOut, true, true)),
            RetryVerdict::kSameServer);
  EXPECT_EQ(DecideRetry(bounded, End(AttemptOutcome::kConnectionFailed, true, true)),
            RetryVerdict::kSameServer);
  // The request left for a server that keeps no results: it might run twice.
  EXPECT_EQ(DecideRetry(bounded, End(AttemptOutcome::kTimedOut, true, false)), RetryVerdict::kNo);
  // It never left: safe anywhere.
  EXPECT_EQ(DecideRetry(bounded, End(AttemptOutcome::kConnectionFailed, false, false)),
            RetryVerdict::kSameServer);
  const RetryRules unbounded = RetryRules::ForProxy(Policy(3), MethodKind::kTracked);
  EXPECT_EQ(DecideRetry(unbounded, End(AttemptOutcome::kTimedOut, true, true)), RetryVerdict::kNo);
  EXPECT_EQ(DecideRetry(unbounded, End(AttemptOutcome::kConnectionFailed, true, true)),
            RetryVerdict::kNo);
}

TEST(DecideRetryTest, ChannelMovesRefusalsAndUnsentRequestsToAnyServer) {
  const RetryRules rules = ChannelRules(MethodKind::kPlain);
  EXPECT_EQ(DecideRetry(rules, End(AttemptOutcome::kUnavailable, true, false)),
            RetryVerdict::kAnyServer);
  EXPECT_EQ(DecideRetry(rules, End(AttemptOutcome::kConnectionFailed, false, false)),
            RetryVerdict::kAnyServer);
  // Sent, and maybe run: a plain call is not moved.
  EXPECT_EQ(DecideRetry(rules, End(AttemptOutcome::kConnectionFailed, true, false)),
            RetryVerdict::kNo);
  EXPECT_EQ(DecideRetry(ChannelRules(MethodKind::kIdempotent),
                        End(AttemptOutcome::kConnectionFailed, true, false)),
            RetryVerdict::kAnyServer);
}

TEST(DecideRetryTest, ChannelPinsATrackedCallWhoseOutcomeWasLost) {
  const RetryRules rules = ChannelRules(MethodKind::kTracked, MonoDelta::FromSeconds(1));
  EXPECT_EQ(DecideRetry(rules, End(AttemptOutcome::kConnectionFailed, true, true)),
            RetryVerdict::kSameServer);
  EXPECT_EQ(DecideRetry(rules, End(AttemptOutcome::kTimedOut, true, true)),
            RetryVerdict::kSameServer);
  EXPECT_EQ(DecideRetry(rules, End(AttemptOutcome::kTimedOut, true, false)), RetryVerdict::kNo);
}

TEST(DecideRetryTest, TimeoutsAreRetriedOnlyUnderAnAttemptTimeout) {
  EXPECT_EQ(DecideRetry(ChannelRules(MethodKind::kIdempotent),
                        End(AttemptOutcome::kTimedOut, true, false)),
            RetryVerdict::kNo);
  EXPECT_EQ(DecideRetry(ChannelRules(MethodKind::kIdempotent, MonoDelta::FromSeconds(1)),
                        End(AttemptOutcome::kTimedOut, true, false)),
            RetryVerdict::kAnyServer);
}

TEST(BackoffTest, WaitsBetweenHalfAndAllOfAGrowingCappedBackoff) {
  Backoff backoff(MonoDelta::FromMilliseconds(10), MonoDelta::FromMilliseconds(25), 2);
  const int64_t expected_ms[] = {10, 20, 25, 25};
  for (int64_t ms : expected_ms) {
    EXPECT_EQ(backoff.next(), MonoDelta::FromMilliseconds(ms));
    const MonoDelta wait = backoff.NextWait();
    EXPECT_GE(wait, MonoDelta::FromMicroseconds(ms * 500));
    EXPECT_LE(wait, MonoDelta::FromMilliseconds(ms));
  }
}

TEST(AttemptSeriesTest, KeepsATrackedCallsRequestIdOverItsAttemptsUntilItEnds) {
  RequestTracker tracker;
  RpcController controller;
  controller.set_timeout(MonoDelta::FromSeconds(10));
  const uint64_t first_free = tracker.FirstIncomplete();
  {
    AttemptSeries series(RetryRules::ForProxy(Policy(3), MethodKind::kTracked),
                         Backoff(MonoDelta::FromMilliseconds(1), MonoDelta::FromMilliseconds(1), 2),
                         &controller, &tracker);
    const uint64_t seq = controller.request_seq_no();
    EXPECT_EQ(seq, first_free);
    series.BeginAttempt(&controller);
    EXPECT_EQ(controller.attempts(), 1);
    RpcControllerInternal::Finish(&controller, Status::ServiceUnavailable("busy"),
                                  ServerError(ErrorStatusPB::ERROR_SERVER_TOO_BUSY), true, true,
                                  HandlerRan::kNo);
    const RetryDecision next = series.DecideRetry(AttemptEnd::Of(controller), MonoTime::Now());
    EXPECT_EQ(next.verdict, RetryVerdict::kAnyServer);
    series.BeginAttempt(&controller);
    EXPECT_EQ(controller.attempts(), 2);
    EXPECT_FALSE(controller.finished());  // the retry forgot the first attempt's outcome
    EXPECT_EQ(controller.status().ToString(), Status::OK().ToString());
    EXPECT_EQ(controller.request_seq_no(), seq);
    EXPECT_EQ(tracker.FirstIncomplete(), seq);  // still in flight
    series.End();
    EXPECT_GT(tracker.FirstIncomplete(), seq);
  }
}

TEST(AttemptSeriesTest, StopsWhenAttemptsRunOutOrTheWaitPassesTheDeadline) {
  RpcController controller;
  controller.set_timeout(MonoDelta::FromSeconds(10));
  AttemptSeries series(RetryRules::ForProxy(Policy(2), MethodKind::kPlain),
                       Backoff(MonoDelta::FromMilliseconds(1), MonoDelta::FromMilliseconds(1), 2),
                       &controller, nullptr);
  EXPECT_EQ(controller.request_seq_no(), 0u);
  const AttemptEnd busy = End(AttemptOutcome::kTooBusy, true, false);
  series.BeginAttempt(&controller);
  EXPECT_FALSE(series.DecideRetry(busy, series.deadline() - MonoDelta::FromMicroseconds(1))
                   .retry());  // no time left for the wait
  EXPECT_TRUE(series.DecideRetry(busy, MonoTime::Now()).retry());
  series.BeginAttempt(&controller);
  EXPECT_FALSE(series.DecideRetry(busy, MonoTime::Now()).retry());  // two attempts made
}

TEST(AttemptSeriesTest, AnAttemptEndsByItsOwnTimeoutNotTheCallsDeadline) {
  RpcController controller;
  controller.set_timeout(MonoDelta::FromSeconds(100));
  RequestTracker tracker;
  AttemptSeries series(
      RetryRules::ForProxy(Policy(3, MonoDelta::FromSeconds(1)), MethodKind::kTracked),
      Backoff(MonoDelta::FromMilliseconds(1), MonoDelta::FromMilliseconds(1), 2), &controller,
      &tracker);
  const MonoTime call_deadline = controller.deadline();
  const MonoTime attempt_deadline = series.BeginAttempt(&controller);
  EXPECT_LT(attempt_deadline, call_deadline);
  EXPECT_LE(attempt_deadline, MonoTime::Now() + MonoDelta::FromSeconds(1));
  EXPECT_EQ(controller.deadline(), call_deadline);  // the caller's deadline is left alone
  EXPECT_EQ(series.deadline(), call_deadline);
}

}  // namespace
}  // namespace rrpc::rpc
