// Overload, counted rather than timed: offered three times what a server can admit at once, it
// admits exactly its workers plus its queue, refuses the rest at once as too busy (retriable),
// answers every admitted call within its deadline, and serves the next calls normally as soon as
// the load is gone. A client that opts into retries (RetryPolicy) gets through once there is room,
// and never waits past its deadline. The measured figures (goodput at 3x load) come from
// overload-bench (src/bench), see docs/reliability.md.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "rpc/core/messenger_internals.h"
#include "rpc/core/service_pool.h"
#include "rpc/observe/rpc_metrics.h"
#include "rpc/testing/rpc-test-util.h"

namespace rrpc::rpc {
namespace {

constexpr int kWorkers = 2;
constexpr int kQueue = 8;
constexpr int kAdmissible = kWorkers + kQueue;

class OverloadTest : public RpcTestBase {
 protected:
  void SetUp() override {
    MessengerOptions options;
    options.num_workers = kWorkers;
    options.service_queue_length = kQueue;
    StartServer(options);
    StartClient();
  }
};

TEST_F(OverloadTest, ThreeTimesCapacityAdmitsWhatFitsRefusesTheRestAndRecovers) {
  BlockEchoes();
  constexpr int kOffered = 3 * kAdmissible;
  rtest::EchoServiceProxy proxy = Proxy();
  std::vector<rtest::EchoRequestPB> reqs(kOffered);
  std::vector<rtest::EchoResponsePB> resps(kOffered);
  std::vector<RpcController> ctls(kOffered);
  std::atomic<int> finished{0};
  CountDownLatch all_done(kOffered);
  auto send = [&](int i) {
    reqs[i].set_data("call-" + std::to_string(i));
    ctls[i].set_timeout(MonoDelta::FromSeconds(60));
    proxy.EchoAsync(reqs[i], &resps[i], &ctls[i], [&] {
      finished++;
      all_done.CountDown();
    });
  };
  // Both workers busy first, so what follows meets a full pool, whatever the thread timing.
  for (int i = 0; i < kWorkers; i++) send(i);
  ASSERT_TRUE(gate_.WaitForEntered(kWorkers));
  for (int i = kWorkers; i < kOffered; i++) send(i);
  // The refusals come back while the admitted calls are still held.
  ASSERT_TRUE(WaitForCondition([&] { return finished.load() == kOffered - kAdmissible; }));
  EXPECT_EQ(static_cast<size_t>(kQueue), MessengerInternals::service_pool(*server_)->queue_size());
  int refused = 0;
  for (int i = 0; i < kOffered; i++) {
    if (!ctls[i].finished()) continue;
    ASSERT_NE(nullptr, ctls[i].error_response()) << ctls[i].status().ToString();
    EXPECT_EQ(ErrorStatusPB::ERROR_SERVER_TOO_BUSY, ctls[i].error_response()->code());
    EXPECT_TRUE(ctls[i].IsRetriable());
    refused++;
  }
  EXPECT_EQ(kOffered - kAdmissible, refused);

  gate_.Open();
  all_done.Wait();
  int answered = 0;
  for (int i = 0; i < kOffered; i++) {
    if (!ctls[i].status().ok()) continue;
    EXPECT_EQ(reqs[i].data(), resps[i].data());
    answered++;
  }
  EXPECT_EQ(kAdmissible, answered);  // every admitted call answered, none timed out

  // Load gone: the very next calls are served, none refused.
  for (int i = 0; i < 2 * kAdmissible; i++) {
    rtest::EchoRequestPB req;
    req.set_data("after");
    rtest::EchoResponsePB resp;
    RpcController ctl;
    ctl.set_timeout(MonoDelta::FromSeconds(60));
    ASSERT_TRUE(proxy.Echo(req, &resp, &ctl).ok()) << ctl.status().ToString();
  }
}

// Fills both workers and the queue, so the next call is refused until the gate opens. The queue
// refuses the call with the latest deadline, so a call is refused only if its deadline is later
// than those of the calls filling the queue: `fill_timeout` sets theirs. The default is half the
// 60 s the tests' own calls take, so those are the latest whatever the order of arrival (with
// equal budgets, a call that arrived within a millisecond of the last fill call, its budget
// rounded down to whole milliseconds, could be the earlier one and be let in).
class RetryTest : public OverloadTest {
 protected:
  void FillServer(MonoDelta fill_timeout = MonoDelta::FromSeconds(30)) {
    BlockEchoes();
    rtest::EchoServiceProxy proxy = Proxy();
    for (int i = 0; i < kAdmissible; i++) {
      fill_reqs_[i].set_data("fill");
      fill_ctls_[i].set_timeout(fill_timeout);
      proxy.EchoAsync(fill_reqs_[i], &fill_resps_[i], &fill_ctls_[i],
                      [this] { fill_done_.CountDown(); });
      if (i + 1 == kWorkers) {
        ASSERT_TRUE(gate_.WaitForEntered(kWorkers));
      }
    }
    ASSERT_TRUE(WaitForCondition([&] {
      return MessengerInternals::service_pool(*server_)->queue_size() ==
             static_cast<size_t>(kQueue);
    }));
  }
  void TearDown() override {
    gate_.Open();
    fill_done_.Wait();
    OverloadTest::TearDown();
  }
  uint64_t Refusals() {
    return MessengerInternals::metrics(*server_)->service_queue_overflows->value();
  }

  rtest::EchoRequestPB fill_reqs_[kAdmissible];
  rtest::EchoResponsePB fill_resps_[kAdmissible];
  RpcController fill_ctls_[kAdmissible];
  CountDownLatch fill_done_{kAdmissible};
};

TEST_F(RetryTest, WithoutAPolicyATooBusyCallFailsAtOnce) {
  FillServer();
  rtest::EchoRequestPB req;
  req.set_data("x");
  rtest::EchoResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(60));
  Status s = Proxy().Echo(req, &resp, &ctl);
  EXPECT_TRUE(ctl.IsRetriable()) << s.ToString();
  EXPECT_EQ(1, ctl.attempts());
}

TEST_F(RetryTest, EachRetryCountsInTheClientsRetryMetric) {
  FillServer();
  MessengerMetrics* metrics = MessengerInternals::metrics(*client_);
  ASSERT_NE(metrics, nullptr);
  rtest::EchoServiceProxy proxy = Proxy();
  const Counter* retries = metrics->ClientMethod(proxy.service_name(), "Echo")->retries;
  const int64_t before = retries->value();
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(60));
  ctl.set_retry_policy(RetryPolicy{/*max_attempts=*/3, MonoDelta::FromMilliseconds(1),
                                   MonoDelta::FromMilliseconds(1)});
  rtest::EchoResponsePB resp;
  Status s = proxy.Echo(rtest::EchoRequestPB(), &resp, &ctl);
  EXPECT_TRUE(ctl.IsRetriable()) << s.ToString();  // refused every time: the server stays full
  EXPECT_EQ(3, ctl.attempts());
  EXPECT_EQ(2, retries->value() - before);
}

TEST_F(RetryTest, RetriesWithBackoffUntilAdmitted) {
  FillServer();
  const uint64_t refusals_before = Refusals();
  rtest::EchoRequestPB req;
  req.set_data("patient");
  rtest::EchoResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(60));
  RetryPolicy policy;
  policy.max_attempts = 1000;
  policy.initial_backoff = MonoDelta::FromMilliseconds(1);
  policy.max_backoff = MonoDelta::FromMilliseconds(20);
  ctl.set_retry_policy(policy);
  Status result;
  std::thread caller([&] { result = Proxy().Echo(req, &resp, &ctl); });
  // Refused at least three times while the server is full, then let in.
  ASSERT_TRUE(WaitForCondition([&] { return Refusals() >= refusals_before + 3; }));
  gate_.Open();
  caller.join();
  ASSERT_TRUE(result.ok()) << result.ToString();
  EXPECT_EQ("patient", resp.data());
  EXPECT_GE(ctl.attempts(), 4);
}

TEST_F(RetryTest, RetriesStopAtTheCallersDeadline) {
  // Queued calls with a 1 s budget stay queued behind the held workers (their clients give up;
  // the server keeps them until a worker answers them TIMED_OUT), so the retried call, due later,
  // is refused every time. The budgets are generous so a loaded machine still gets several
  // refusals back before the deadline.
  FillServer(MonoDelta::FromSeconds(1));
  rtest::EchoRequestPB req;
  req.set_data("impatient");
  rtest::EchoResponsePB resp;
  RpcController ctl;
  const MonoDelta budget = MonoDelta::FromMilliseconds(1500);
  ctl.set_timeout(budget);
  const MonoTime deadline = ctl.deadline();
  RetryPolicy policy;
  policy.max_attempts = 1000000;
  policy.initial_backoff = MonoDelta::FromMilliseconds(2);
  policy.max_backoff = MonoDelta::FromMilliseconds(50);
  ctl.set_retry_policy(policy);
  Status s = Proxy().Echo(req, &resp, &ctl);
  // Refused every time (the server stays full) and given up without sleeping past the deadline:
  // the caller sees the last refusal, or a timeout when the deadline passed while the last
  // attempt was on its way (a loaded machine can take that long to answer).
  EXPECT_TRUE(ctl.IsRetriable() || s.IsTimedOut()) << s.ToString();
  EXPECT_GT(ctl.attempts(), 1);
  EXPECT_LT(ctl.attempts(), 300);  // backed off, not a busy loop
  EXPECT_TRUE(MonoTime::Now() < deadline + MonoDelta::FromSeconds(5));  // no wait past it
}

// The same through AsyncRequest: each retry waits its backoff on a reactor timer, the callback runs
// once at the end. The caller's request and proxy are gone long before that.
TEST_F(RetryTest, AsyncRetriesWithBackoffUntilAdmittedAndCallBackOnce) {
  FillServer();
  const uint64_t refusals_before = Refusals();
  rtest::EchoResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(60));
  RetryPolicy policy;
  policy.max_attempts = 1000;
  policy.initial_backoff = MonoDelta::FromMilliseconds(1);
  policy.max_backoff = MonoDelta::FromMilliseconds(20);
  ctl.set_retry_policy(policy);
  std::atomic<int> callbacks{0};
  CountDownLatch done(1);
  {
    rtest::EchoRequestPB req;
    req.set_data("patient async");
    Proxy().EchoAsync(req, &resp, &ctl, [&] {
      callbacks++;
      done.CountDown();
    });
  }  // request and proxy destroyed here
  ASSERT_TRUE(WaitForCondition([&] { return Refusals() >= refusals_before + 3; }));
  EXPECT_EQ(0, callbacks.load()) << "called back before the last attempt";
  gate_.Open();
  done.Wait();
  ASSERT_TRUE(ctl.status().ok()) << ctl.status().ToString();
  EXPECT_EQ("patient async", resp.data());
  EXPECT_GE(ctl.attempts(), 4);
  EXPECT_EQ(1, callbacks.load());
}

TEST_F(RetryTest, AsyncRetriesStopAtTheCallersDeadline) {
  FillServer(MonoDelta::FromSeconds(1));  // as in RetriesStopAtTheCallersDeadline
  rtest::EchoRequestPB req;
  req.set_data("impatient async");
  rtest::EchoResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromMilliseconds(1500));
  RetryPolicy policy;
  policy.max_attempts = 1000000;
  policy.initial_backoff = MonoDelta::FromMilliseconds(2);
  policy.max_backoff = MonoDelta::FromMilliseconds(50);
  ctl.set_retry_policy(policy);
  std::atomic<int> callbacks{0};
  CountDownLatch done(1);
  Proxy().EchoAsync(req, &resp, &ctl, [&] {
    callbacks++;
    done.CountDown();
  });
  done.Wait();
  EXPECT_TRUE(ctl.IsRetriable() || ctl.status().IsTimedOut()) << ctl.status().ToString();
  EXPECT_GT(ctl.attempts(), 1);
  EXPECT_LT(ctl.attempts(), 300);  // backed off, not a busy loop
  EXPECT_EQ(1, callbacks.load());
}

// A retry waiting on a reactor timer when the client messenger shuts down is not lost: its
// callback runs (with an error) by the time Shutdown() returns.
TEST_F(RetryTest, AsyncRetryWaitingAtShutdownCallsBack) {
  FillServer();
  const uint64_t refusals_before = Refusals();
  rtest::EchoRequestPB req;
  req.set_data("at shutdown");
  rtest::EchoResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(120));
  RetryPolicy policy;
  policy.max_attempts = 10;
  policy.initial_backoff = MonoDelta::FromSeconds(60);  // the retry would wait 30-60 s
  policy.max_backoff = MonoDelta::FromSeconds(60);
  ctl.set_retry_policy(policy);
  std::atomic<int> callbacks{0};
  rtest::EchoServiceProxy proxy = Proxy();
  const Counter* errors =
      MessengerInternals::metrics(*client_)->ClientMethod(proxy.service_name(), "Echo")->errors;
  const int64_t errors_before = errors->value();
  proxy.EchoAsync(req, &resp, &ctl, [&] { callbacks++; });
  ASSERT_TRUE(WaitForCondition([&] { return Refusals() >= refusals_before + 1; }));
  // The refusal reached the client once its first attempt counts as an error; that attempt's
  // callback (which hands the retry to a reactor timer) runs on the reactor before the next task
  // there, so once DumpConnections() has run a task on every reactor the retry waits.
  ASSERT_TRUE(WaitForCondition([&] { return errors->value() > errors_before; }));
  client_->DumpConnections();
  ASSERT_EQ(1, ctl.attempts());
  ASSERT_EQ(0, callbacks.load());
  client_->Shutdown();
  EXPECT_EQ(1, callbacks.load());
  EXPECT_FALSE(ctl.status().ok());
}

}  // namespace
}  // namespace rrpc::rpc
