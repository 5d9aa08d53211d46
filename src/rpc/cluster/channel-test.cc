#include "rrpc/rpc/cluster/channel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "rpc/cluster/cluster-test-util.h"
#include "rpc/testing/rpc-test-util.h"
#include "rpc/testing/rtest.rrpc.h"
#include "rrpc/rpc/rpc_controller.h"
#include "util/countdown_latch.h"
#include "util/metrics/metric_registry.h"

namespace rrpc::rpc {
namespace {

class ChannelTest : public ::testing::Test {
 protected:
  void StartServers(int n, MessengerOptions options = {}) {
    for (int i = 1; i <= n; i++) {
      auto server = TestServer::Start(i, options);
      ASSERT_TRUE(server.ok()) << server.status().ToString();
      servers_.push_back(std::move(*server));
    }
  }
  std::shared_ptr<Messenger> NewClient(const std::string& name = "client") {
    auto built = MessengerBuilder(name).Build();
    CHECK(built.ok()) << built.status().ToString();
    clients_.push_back(*built);
    return *built;
  }
  std::vector<Sockaddr> Addrs() const {
    std::vector<Sockaddr> out;
    for (const auto& s : servers_) out.push_back(s.addr);
    return out;
  }
  std::shared_ptr<Channel> NewChannel(const std::shared_ptr<Messenger>& client,
                                      ChannelOptions options, TestResolver** resolver = nullptr) {
    auto r = std::make_unique<TestResolver>(Addrs());
    if (resolver != nullptr) *resolver = r.get();
    auto channel = Channel::Create(client, std::move(r), std::move(options));
    CHECK(channel.ok()) << channel.status().ToString();
    return *channel;
  }
  // Two calls straight to server 1 (made with one worker and a queue of one) that hold it full:
  // the first runs, blocked on gate_, the second waits in the queue. Returns once the first runs;
  // Wait() on the result after gate_.Open().
  struct Blockers {
    rtest::EchoRequestPB req;
    rtest::EchoResponsePB resp[2];
    RpcController ctl[2];
    CountDownLatch done{2};
    void Wait() { done.Wait(); }
  };
  std::unique_ptr<Blockers> FillFirstServer(MonoDelta timeout) {
    servers_[0].service->set_echo_hook(
        [this](const rtest::EchoRequestPB&, RpcContext*) { gate_.Pass(); });
    auto blockers = std::make_unique<Blockers>();
    rtest::EchoServiceProxy direct(NewClient("direct"), servers_[0].addr);
    blockers->req.set_data("blocker");
    for (int i = 0; i < 2; i++) {
      blockers->ctl[i].set_timeout(timeout);
      CountDownLatch* done = &blockers->done;
      direct.EchoAsync(blockers->req, &blockers->resp[i], &blockers->ctl[i],
                       [done] { done->CountDown(); });
    }
    CHECK(WaitForCondition([&] { return servers_[0].service->calls() == 1; }));
    return blockers;
  }
  void TearDown() override {
    gate_.Open();
    for (auto& c : clients_) c->Shutdown();
    for (auto& s : servers_) s.messenger->Shutdown();
  }

  HandlerGate gate_;
  std::vector<TestServer> servers_;
  std::vector<std::shared_ptr<Messenger>> clients_;
};

TEST_F(ChannelTest, MalformedTargetIsAClearError) {
  auto client = NewClient();
  for (const std::string target : {"nope://a:1", "list://", "list://host-without-port", "x"}) {
    auto channel = Channel::Create(client, target);
    ASSERT_FALSE(channel.ok()) << target;
    EXPECT_TRUE(channel.status().IsInvalidArgument()) << channel.status().ToString();
    EXPECT_NE(channel.status().ToString().find(target), std::string::npos)
        << channel.status().ToString();
  }
}

TEST_F(ChannelTest, EmptyServerSetFailsCallsAtOnceWithAClearError) {
  auto client = NewClient();
  auto channel = Channel::Create(client, std::make_unique<TestResolver>(std::vector<Sockaddr>{}));
  ASSERT_TRUE(channel.ok());
  rtest::EchoServiceProxy proxy(*channel);
  const MonoTime start = MonoTime::Now();
  Status s = EchoOnce(proxy, "x", MonoDelta::FromSeconds(30));
  EXPECT_TRUE(s.IsServiceUnavailable()) << s.ToString();
  EXPECT_NE(s.ToString().find("no servers"), std::string::npos) << s.ToString();
  EXPECT_LT(MonoTime::Now() - start, MonoDelta::FromSeconds(10));  // not the call's deadline
}

TEST_F(ChannelTest, ListTargetCallsThroughTheGeneratedProxy) {
  StartServers(2);
  auto client = NewClient();
  auto channel = Channel::Create(
      client, "list://" + servers_[0].addr.ToString() + "," + servers_[1].addr.ToString());
  ASSERT_TRUE(channel.ok()) << channel.status().ToString();
  rtest::EchoServiceProxy proxy(*channel);
  for (int i = 0; i < 20; i++) ASSERT_TRUE(EchoOnce(proxy, Pattern(100, i)).ok());
  EXPECT_EQ(servers_[0].service->calls() + servers_[1].service->calls(), 20);
  EXPECT_EQ((*channel)->Backends().size(), 2u);
}

TEST_F(ChannelTest, OneServerChannelCallsIt) {
  StartServers(1);
  auto client = NewClient();
  auto channel = Channel::Create(client, "list://" + servers_[0].addr.ToString());
  ASSERT_TRUE(channel.ok());
  rtest::EchoServiceProxy proxy(*channel);
  for (int i = 0; i < 10; i++) ASSERT_TRUE(EchoOnce(proxy, "abc").ok());
  EXPECT_EQ(servers_[0].service->calls(), 10);
  EXPECT_EQ((*channel)->Backends()[0].outstanding, 0);
  rtest::EchoRequestPB req;
  req.set_data("x");
  rtest::EchoResponsePB resp;
  RpcController ctl;
  ASSERT_TRUE(proxy.Echo(req, &resp, &ctl).ok());
  EXPECT_EQ(ctl.attempts(), 1);
}

TEST_F(ChannelTest, RoundRobinSpreadsEvenly) {
  StartServers(3);
  ChannelOptions options;
  options.balancer = BalancerPolicy::kRoundRobin;
  auto channel = NewChannel(NewClient(), options);
  rtest::EchoServiceProxy proxy(channel);
  for (int i = 0; i < 300; i++) ASSERT_TRUE(EchoOnce(proxy, "x").ok());
  for (const auto& s : servers_) EXPECT_EQ(s.service->calls(), 100);
  // The channel counts the attempts it sent to each (the web UI's /channels shows them).
  for (const BackendInfo& b : channel->Backends()) EXPECT_EQ(b.calls, 100) << b.addr.ToString();
}

// Server 0's handler makes 1,000 calls of its own to server 1 before it answers: its latency is
// that of 1,000 of the others' calls by construction, however fast or loaded the machine (both
// averages weigh a new answer 1/8, so only a stall longer than those 1,000 calls could make a fast
// server look slower). The channel's calls go one at a time (none outstanding when the next is
// placed), so only the latencies tell the servers apart: once its first slow answer is in,
// server 0 loses every comparison.
TEST_F(ChannelTest, PowerOfTwoChoicesAvoidsASlowServer) {
  StartServers(3);
  constexpr int kSlowness = 1000;
  auto side = std::make_shared<rtest::EchoServiceProxy>(NewClient("side"), servers_[1].addr);
  servers_[0].service->set_echo_hook([side](const rtest::EchoRequestPB&, RpcContext*) {
    for (int i = 0; i < kSlowness; i++) RRPC_CHECK_OK(EchoOnce(*side, "side"));
  });
  auto channel = NewChannel(NewClient(), ChannelOptions());
  rtest::EchoServiceProxy proxy(channel);
  constexpr int kCalls = 300;
  for (int i = 0; i < kCalls; i++) ASSERT_TRUE(EchoOnce(proxy, "x").ok());
  const int slow_calls = servers_[0].service->calls();
  LOG(INFO) << "the slow server took " << slow_calls << " of " << kCalls << " calls";
  EXPECT_LT(slow_calls, 30);
  EXPECT_EQ(slow_calls + servers_[1].service->calls() - kSlowness * slow_calls +
                servers_[2].service->calls(),
            kCalls);
}

// Server 0 answers one call slowly (1,000 calls of its own to server 1 first, as above, and at
// least 16 times server 1's average as the channel sees it, so that the slow answer alone doubles
// server 0's average past it): the next calls all go to server 1, until server 0's latency,
// halved for each second it was not asked, is below server 1's and it gets a call again. A stall
// of server 1 on a loaded machine makes it look the slower one for a while, and then the balancer
// rightly prefers server 0: such a round proves nothing and is run again. A round proves the
// behaviour when server 1 looked faster after the slow answer, took the next 20 calls, and
// server 0 came back while server 1's average was still below server 0's unaged one (only aging
// makes server 0 the cheaper then).
TEST_F(ChannelTest, PowerOfTwoChoicesTriesASlowServerAgainOnceItsLatencyAges) {
  StartServers(2);
  auto channel = NewChannel(NewClient(), ChannelOptions());
  rtest::EchoServiceProxy proxy(channel);
  // The channel's averages (us): {server 0's, server 1's}.
  const Sockaddr slow_addr = servers_[0].addr;
  auto averages = [channel, slow_addr] {
    std::pair<int64_t, int64_t> out;
    for (const BackendInfo& b : channel->Backends()) {
      (b.addr == slow_addr ? out.first : out.second) = b.ewma_latency_us;
    }
    return out;
  };
  auto side = std::make_shared<rtest::EchoServiceProxy>(NewClient("side"), servers_[1].addr);
  auto slow = std::make_shared<std::atomic<bool>>(false);
  servers_[0].service->set_echo_hook([side, slow, averages](const rtest::EchoRequestPB&,
                                                            RpcContext*) {
    if (!slow->load()) return;
    const MonoTime until = MonoTime::Now() + MonoDelta::FromMicroseconds(16 * averages().second);
    for (int i = 0; i < 1000 || MonoTime::Now() < until; i++) {
      RRPC_CHECK_OK(EchoOnce(*side, "side"));
    }
  });
  // Both answer twice first (a call that waited for its connection is no sample).
  ASSERT_TRUE(WaitForCondition([&] {
    return EchoOnce(proxy, "x").ok() && servers_[0].service->calls() >= 2 &&
           servers_[1].service->calls() >= 2;
  }));
  bool proved = false;
  for (int round = 0; round < 5 && !proved; round++) {
    slow->store(true);
    const int fast_calls = servers_[0].service->calls();
    ASSERT_TRUE(WaitForCondition(
        [&] { return EchoOnce(proxy, "x").ok() && servers_[0].service->calls() > fast_calls; }));
    slow->store(false);
    const auto after_slow = averages();
    const int before = servers_[0].service->calls();
    for (int i = 0; i < 20; i++) ASSERT_TRUE(EchoOnce(proxy, "x").ok());
    const bool avoided = servers_[0].service->calls() == before;
    // Calls go one at a time: server 1's average is the one the pick compared against; server
    // 0's has taken one fast answer since (7/8 of what it was, unaged).
    ASSERT_TRUE(WaitForCondition(
        [&] { return EchoOnce(proxy, "x").ok() && servers_[0].service->calls() > before; }));
    const auto at_return = averages();
    proved = after_slow.second < after_slow.first && avoided && at_return.second < at_return.first;
    LOG(INFO) << "round " << round << ": averages after the slow answer " << after_slow.first
              << " and " << after_slow.second << " us, " << (avoided ? "" : "not ")
              << "avoided for 20 calls, picked again at " << at_return.first << " and "
              << at_return.second << " us";
  }
  EXPECT_TRUE(proved) << "no round showed server 0 avoided, then back by aging";
}

// A server that holds a call without answering (dropped packets, a hung process) is at least as
// slow as its silence: it draws no further calls, although its latency, had it had no call
// outstanding, would age towards zero within these seconds.
TEST_F(ChannelTest, PowerOfTwoChoicesAvoidsAServerHoldingACallWithoutAnswering) {
  StartServers(2);
  std::atomic<bool> hold{false};
  servers_[0].service->set_echo_hook([this, &hold](const rtest::EchoRequestPB&, RpcContext*) {
    if (hold.load()) gate_.Pass();
  });
  auto channel = NewChannel(NewClient(), ChannelOptions());
  rtest::EchoServiceProxy proxy(channel);
  for (int i = 0; i < 1000 && servers_[0].service->calls() == 0; i++) {
    ASSERT_TRUE(EchoOnce(proxy, "x").ok());
  }
  ASSERT_GT(servers_[0].service->calls(), 0);  // both have a latency
  hold.store(true);
  struct Call {
    rtest::EchoRequestPB req;
    rtest::EchoResponsePB resp;
    RpcController ctl;
    CountDownLatch done{1};
  };
  std::vector<std::unique_ptr<Call>> calls;
  // One call at a time; returns once it was answered or server 0 holds it.
  auto call_once = [&] {
    const int held = gate_.entered();
    calls.push_back(std::make_unique<Call>());
    Call* c = calls.back().get();
    c->req.set_data("x");
    c->ctl.set_timeout(MonoDelta::FromSeconds(120));
    proxy.EchoAsync(c->req, &c->resp, &c->ctl, [c] { c->done.CountDown(); });
    return WaitForCondition([&] { return c->done.count() == 0 || gate_.entered() > held; });
  };
  while (gate_.entered() == 0) ASSERT_TRUE(call_once());
  // 5 s of calls: server 0's latency would have aged to 1/32.
  const MonoTime until = MonoTime::Now() + MonoDelta::FromSeconds(5);
  while (MonoTime::Now() < until) ASSERT_TRUE(call_once());
  EXPECT_LE(gate_.entered(), 2) << "of " << calls.size() << " calls";
  gate_.Open();
  for (auto& c : calls) ASSERT_TRUE(c->done.WaitFor(MonoDelta::FromSeconds(60)));
}

TEST_F(ChannelTest, HashKeySticksToOneServer) {
  StartServers(3);
  ChannelOptions options;
  options.balancer = BalancerPolicy::kHash;
  auto channel = NewChannel(NewClient(), options);
  rtest::EchoServiceProxy proxy(channel);
  for (int key = 0; key < 3; key++) {
    std::vector<int> before;
    for (const auto& s : servers_) before.push_back(s.service->calls());
    for (int i = 0; i < 20; i++) {
      rtest::EchoRequestPB req;
      req.set_data("x");
      rtest::EchoResponsePB resp;
      RpcController ctl;
      ctl.set_timeout(MonoDelta::FromSeconds(30));
      ctl.set_hash_key("shard-" + std::to_string(key));
      ASSERT_TRUE(proxy.Echo(req, &resp, &ctl).ok());
    }
    int servers_called = 0;
    for (size_t i = 0; i < servers_.size(); i++) {
      const int got = servers_[i].service->calls() - before[i];
      if (got > 0) {
        servers_called++;
        EXPECT_EQ(got, 20);
      }
    }
    EXPECT_EQ(servers_called, 1);
  }
}

TEST_F(ChannelTest, KilledServerUnderLoadFailsNoIdempotentCall) {
  // Each server can queue every call of both clients (2 x 64): when one goes, its calls move to
  // the other two at once, and "too busy" (a retry that finds both full tries the dead server
  // third) is not what is tested here.
  MessengerOptions options;
  options.service_queue_length = 256;
  StartServers(3, options);
  auto channel_a = NewChannel(NewClient("client-a"), ChannelOptions());
  auto channel_b = NewChannel(NewClient("client-b"), ChannelOptions());
  EchoLoad a(rtest::EchoServiceProxy(channel_a), 64, 3000);
  EchoLoad b(rtest::EchoServiceProxy(channel_b), 64, 3000);
  a.Start();
  b.Start();
  ASSERT_TRUE(WaitForCondition([&] { return a.finished() + b.finished() >= 1000; }));
  servers_[1].messenger->Shutdown();
  a.Wait();
  b.Wait();
  EXPECT_EQ(a.failed(), 0) << a.first_error();
  EXPECT_EQ(b.failed(), 0) << b.first_error();
  EXPECT_EQ(a.finished() + b.finished(), 6000);
}

TEST_F(ChannelTest, CallRefusedAsTooBusyGoesToAnotherServer) {
  MessengerOptions options;
  options.num_workers = 1;
  options.service_queue_length = 1;
  StartServers(2, options);
  auto blockers = FillFirstServer(MonoDelta::FromSeconds(40));
  ChannelOptions channel_options;
  channel_options.balancer = BalancerPolicy::kRoundRobin;  // the first pick is server 1
  auto channel = NewChannel(NewClient(), channel_options);
  rtest::EchoServiceProxy proxy(channel);
  rtest::EchoRequestPB creq;
  creq.set_data("through the channel");
  rtest::EchoResponsePB cresp;
  RpcController cctl;
  cctl.set_timeout(MonoDelta::FromSeconds(50));  // the latest deadline: the one refused
  Status s = proxy.Echo(creq, &cresp, &cctl);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(cresp.data(), "through the channel");
  EXPECT_EQ(cctl.attempts(), 2);
  EXPECT_EQ(servers_[1].service->calls(), 1);
  gate_.Open();
  blockers->Wait();
}

// A full server refuses at once: its refusals must not pass for fast answers, or the balancer
// would send it ever more calls to refuse (each a retry, until the budget runs dry).
TEST_F(ChannelTest, ServerRefusingAsTooBusyLosesThePowerOfTwoComparisons) {
  MessengerOptions options;
  options.num_workers = 1;
  options.service_queue_length = 1;
  StartServers(3, options);
  auto blockers = FillFirstServer(MonoDelta::FromSeconds(60));
  auto channel = NewChannel(NewClient(), ChannelOptions());
  rtest::EchoServiceProxy proxy(channel);
  int refused = 0;
  Status failure;
  for (int i = 0; i < 300; i++) {
    rtest::EchoRequestPB creq;
    creq.set_data("x");
    rtest::EchoResponsePB cresp;
    RpcController cctl;
    // Later than the blockers' deadline: the queue keeps them (it refuses the latest deadline).
    cctl.set_timeout(MonoDelta::FromSeconds(120));
    Status s = proxy.Echo(creq, &cresp, &cctl);
    if (!s.ok() && failure.ok()) failure = s;
    refused += cctl.attempts() - 1;
  }
  EXPECT_TRUE(failure.ok()) << failure.ToString();
  // Each refusal doubles its latency in the balancer's eyes: a handful, not a share of 300.
  EXPECT_LT(refused, 20);
  gate_.Open();
  blockers->Wait();
}

TEST_F(ChannelTest, NonIdempotentCallFailsOverWhenItsConnectionNeverOpened) {
  StartServers(2);
  servers_[0].messenger->Shutdown();  // its port now refuses connections
  ChannelOptions options;
  options.balancer = BalancerPolicy::kRoundRobin;  // the first pick is the dead server
  auto channel = NewChannel(NewClient(), options);
  rtest::EchoServiceProxy proxy(channel);
  rtest::AddRequestPB req;
  req.set_a(2);
  req.set_b(3);
  rtest::AddResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(30));
  Status s = proxy.Add(req, &resp, &ctl);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(resp.sum(), 5);
  EXPECT_EQ(ctl.attempts(), 2);
}

TEST_F(ChannelTest, RetryBudgetCapsRetries) {
  StartServers(3);
  std::vector<Sockaddr> dead = Addrs();
  for (auto& s : servers_) s.messenger->Shutdown();
  ChannelOptions options;
  options.retry_budget = RetryBudgetOptions{0, 0, 2};  // two retries in all, no floor
  auto client = NewClient();
  auto channel = Channel::Create(client, std::make_unique<TestResolver>(dead), options);
  ASSERT_TRUE(channel.ok());
  rtest::EchoServiceProxy proxy(*channel);
  int retries = 0;
  for (int i = 0; i < 10; i++) {
    rtest::EchoRequestPB req;
    req.set_data("x");
    rtest::EchoResponsePB resp;
    RpcController ctl;
    ctl.set_timeout(MonoDelta::FromSeconds(30));
    EXPECT_FALSE(proxy.Echo(req, &resp, &ctl).ok());
    retries += ctl.attempts() - 1;
  }
  EXPECT_EQ(retries, 2);
  EXPECT_EQ((*channel)->retries_refused(), 9);  // every later call asked once
}

TEST_F(ChannelTest, HedgeGoesToASecondServerAndTheFirstAnswerWins) {
  StartServers(2);
  servers_[0].service->set_echo_hook(
      [this](const rtest::EchoRequestPB&, RpcContext*) { gate_.Pass(); });
  ChannelOptions options;
  options.balancer = BalancerPolicy::kRoundRobin;  // the first attempt goes to server 1
  options.hedge_after = MonoDelta::FromMilliseconds(20);
  auto channel = NewChannel(NewClient(), options);
  rtest::EchoServiceProxy proxy(channel);
  rtest::EchoRequestPB req;
  req.set_data("hedged");
  rtest::EchoResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(60));
  Status s = proxy.Echo(req, &resp, &ctl);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(resp.data(), "hedged");
  EXPECT_EQ(ctl.attempts(), 2);
  EXPECT_EQ(servers_[1].service->calls(), 1);
  // The loser reaches its handler (and blocks there) in its own time.
  ASSERT_TRUE(WaitForCondition([&] { return servers_[0].service->calls() == 1; }));
  // The loser answers after the caller moved on: nothing of the caller's is touched.
  gate_.Open();
  ASSERT_TRUE(WaitForCondition([&] { return channel->Backends()[0].outstanding == 0; }));
  EXPECT_EQ(resp.data(), "hedged");
}

// The hedge's loser is cancelled at its server: its running handler is told.
TEST_F(ChannelTest, HedgeLosersCancelReachesItsServer) {
  StartServers(2);
  CountDownLatch loser_cancelled(1);
  servers_[0].service->set_echo_hook([&](const rtest::EchoRequestPB&, RpcContext* context) {
    context->OnCancel([&loser_cancelled] { loser_cancelled.CountDown(); });
    gate_.Pass();
  });
  ChannelOptions options;
  options.balancer = BalancerPolicy::kRoundRobin;  // the first attempt goes to server 1
  options.hedge_after = MonoDelta::FromMilliseconds(20);
  auto channel = NewChannel(NewClient(), options);
  rtest::EchoServiceProxy proxy(channel);
  rtest::EchoRequestPB req;
  req.set_data("hedged");
  rtest::EchoResponsePB resp;
  RpcController ctl;
  // A deadline far beyond the waits below: a cancel seen within them is not the deadline's.
  ctl.set_timeout(MonoDelta::FromSeconds(600));
  ASSERT_TRUE(proxy.Echo(req, &resp, &ctl).ok()) << ctl.status().ToString();
  EXPECT_EQ(ctl.attempts(), 2);
  ASSERT_TRUE(gate_.WaitForEntered(1));  // the loser runs, held
  EXPECT_TRUE(loser_cancelled.WaitFor(MonoDelta::FromSeconds(60)))
      << "the loser's server never heard of the cancel";
  gate_.Open();
  ASSERT_TRUE(WaitForCondition([&] { return channel->Backends()[0].outstanding == 0; }));
}

// RpcController::Cancel() on a call made through a channel ends it at once and reaches the
// server running it.
TEST_F(ChannelTest, CancelOfAChannelCallReachesTheServer) {
  StartServers(1);
  CountDownLatch server_cancelled(1);
  servers_[0].service->set_echo_hook([&](const rtest::EchoRequestPB&, RpcContext* context) {
    context->OnCancel([&server_cancelled] { server_cancelled.CountDown(); });
    gate_.Pass();
  });
  auto channel = NewChannel(NewClient(), ChannelOptions());
  rtest::EchoServiceProxy proxy(channel);
  rtest::EchoRequestPB req;
  req.set_data("cancelled");
  rtest::EchoResponsePB resp;
  RpcController ctl;
  // A deadline far beyond the waits below: a cancel seen within them is not the deadline's.
  ctl.set_timeout(MonoDelta::FromSeconds(600));
  CountDownLatch done(1);
  proxy.EchoAsync(req, &resp, &ctl, [&done] { done.CountDown(); });
  ASSERT_TRUE(gate_.WaitForEntered(1));
  ctl.Cancel();
  // Ends while its handler is still held: the cancel ended it, not an answer.
  ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(60)));
  EXPECT_TRUE(ctl.status().IsAborted()) << ctl.status().ToString();
  EXPECT_TRUE(server_cancelled.WaitFor(MonoDelta::FromSeconds(60)))
      << "the server never heard of the cancel";
  gate_.Open();
  ASSERT_TRUE(WaitForCondition([&] { return channel->Backends()[0].outstanding == 0; }));
  EXPECT_TRUE(EchoOnce(proxy, "after").ok());
}

// Both attempts of a hedged call carry the caller's trace context (docs/tracing.md).
TEST_F(ChannelTest, HedgedAttemptsCarryTheCallersTraceContext) {
  StartServers(2);
  std::atomic<uint64_t> seen[2] = {0, 0};  // the trace id's low half each server saw
  servers_[0].service->set_echo_hook([this, &seen](const rtest::EchoRequestPB&, RpcContext* c) {
    seen[0] = c->trace_context().trace_id_low;
    gate_.Pass();
  });
  servers_[1].service->set_echo_hook([&seen](const rtest::EchoRequestPB&, RpcContext* c) {
    seen[1] = c->trace_context().trace_id_low;
  });
  ChannelOptions options;
  options.balancer = BalancerPolicy::kRoundRobin;  // the first attempt goes to server 1
  options.hedge_after = MonoDelta::FromMilliseconds(20);
  auto channel = NewChannel(NewClient(), options);
  rtest::EchoServiceProxy proxy(channel);
  rtest::EchoRequestPB req;
  req.set_data("hedged");
  rtest::EchoResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(60));
  const TraceContext root = TraceContext::NewRoot(/*sampled=*/false);
  ctl.set_trace_context(root);
  ASSERT_TRUE(proxy.Echo(req, &resp, &ctl).ok());
  EXPECT_EQ(ctl.attempts(), 2);
  ASSERT_TRUE(WaitForCondition([&] { return seen[0].load() != 0; }));
  EXPECT_EQ(root.trace_id_low, seen[0].load());
  EXPECT_EQ(root.trace_id_low, seen[1].load());
  gate_.Open();
  ASSERT_TRUE(WaitForCondition([&] { return channel->Backends()[0].outstanding == 0; }));
}

// A server that holds calls without answering (as one whose packets are dropped would): with a
// per-attempt timeout an idempotent call moves to another server long before its deadline; the
// attempts stop at the call's deadline; a non-idempotent call has no attempt timeout (it may
// have run).
TEST_F(ChannelTest, AttemptTimeoutMovesAnIdempotentCallOnWithinItsDeadline) {
  StartServers(2);
  servers_[0].service->set_echo_hook(
      [this](const rtest::EchoRequestPB&, RpcContext*) { gate_.Pass(); });
  ChannelOptions options;
  options.balancer = BalancerPolicy::kRoundRobin;  // the first attempt goes to server 1
  options.attempt_timeout = MonoDelta::FromMilliseconds(200);
  auto channel = NewChannel(NewClient(), options);
  rtest::EchoServiceProxy proxy(channel);
  rtest::EchoRequestPB req;
  req.set_data("moved on");
  rtest::EchoResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(60));
  const MonoTime start = MonoTime::Now();
  Status s = proxy.Echo(req, &resp, &ctl);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(resp.data(), "moved on");
  EXPECT_EQ(ctl.attempts(), 2);
  EXPECT_EQ(servers_[1].service->calls(), 1);
  EXPECT_LT(MonoTime::Now() - start, MonoDelta::FromSeconds(30));  // not the call's 60 s

  // Add is not idempotent: it gets no attempt timeout (a free worker of either server runs it).
  rtest::AddRequestPB add;
  add.set_a(1);
  add.set_b(2);
  rtest::AddResponsePB sum;
  RpcController add_ctl;
  add_ctl.set_timeout(MonoDelta::FromSeconds(60));
  ASSERT_TRUE(proxy.Add(add, &sum, &add_ctl).ok());
  EXPECT_EQ(add_ctl.attempts(), 1);
  // Both servers hold their calls: the attempts end with the call's deadline, not after.
  servers_[1].service->set_echo_hook(
      [this](const rtest::EchoRequestPB&, RpcContext*) { gate_.Pass(); });
  RpcController late;
  late.set_timeout(MonoDelta::FromMilliseconds(300));
  rtest::EchoResponsePB late_resp;
  s = proxy.Echo(req, &late_resp, &late);
  EXPECT_TRUE(s.IsTimedOut()) << s.ToString();
  EXPECT_LE(late.attempts(), 2);

  gate_.Open();
}

TEST_F(ChannelTest, NonIdempotentCallIsNotHedged) {
  StartServers(2);
  ChannelOptions options;
  options.balancer = BalancerPolicy::kRoundRobin;
  options.hedge_after = MonoDelta::FromMilliseconds(1);
  auto channel = NewChannel(NewClient(), options);
  rtest::EchoServiceProxy proxy(channel);
  rtest::AddRequestPB req;
  req.set_a(1);
  req.set_b(2);
  rtest::AddResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(60));
  ASSERT_TRUE(proxy.Add(req, &resp, &ctl).ok());
  EXPECT_EQ(resp.sum(), 3);
  EXPECT_EQ(ctl.attempts(), 1);
}

TEST_F(ChannelTest, ServerRemovedFromTheSetGetsNoNewCalls) {
  StartServers(3);
  TestResolver* resolver = nullptr;
  auto channel = NewChannel(NewClient(), ChannelOptions(), &resolver);
  rtest::EchoServiceProxy proxy(channel);
  for (int i = 0; i < 30; i++) ASSERT_TRUE(EchoOnce(proxy, "x").ok());
  resolver->Update(std::vector<Sockaddr>{servers_[0].addr, servers_[1].addr});
  const int before = servers_[2].service->calls();
  for (int i = 0; i < 30; i++) ASSERT_TRUE(EchoOnce(proxy, "x").ok());
  EXPECT_EQ(servers_[2].service->calls(), before);
  // A resolver error keeps the last set.
  resolver->Update(Status::NetworkError("registry unreachable"));
  EXPECT_TRUE(channel->resolver_status().IsNetworkError());
  EntitySnapshot metrics;
  channel->messenger()
      ->metric_registry()
      ->FindOrCreateEntity("channel", "test://")
      ->ReadInto(&metrics);
  bool saw_failing = false;
  for (const auto& m : metrics.metrics) {
    if (std::string(m.prototype->name) == "channel_resolver_failing") {
      saw_failing = true;
      EXPECT_EQ(m.value, 1);
    }
  }
  EXPECT_TRUE(saw_failing);
  for (int i = 0; i < 10; i++) ASSERT_TRUE(EchoOnce(proxy, "x").ok());
  EXPECT_EQ(channel->Backends().size(), 2u);
}

TEST_F(ChannelTest, ShutDownServerLeavesTheRotationAtItsFirstFailure) {
  StartServers(3);
  ChannelOptions options;
  options.balancer = BalancerPolicy::kRoundRobin;
  options.health.ejection_base = MonoDelta::FromSeconds(60);  // no probe during the test
  auto channel = NewChannel(NewClient(), options);
  rtest::EchoServiceProxy proxy(channel);
  for (int i = 0; i < 6; i++) ASSERT_TRUE(EchoOnce(proxy, "x").ok());
  servers_[2].messenger->Shutdown();
  for (int i = 0; i < 30; i++) ASSERT_TRUE(EchoOnce(proxy, "x").ok());
  const auto backends = channel->Backends();
  EXPECT_STREQ(backends[2].health, "ejected");
  EXPECT_EQ(backends[2].ejections, 1);
}

TEST_F(ChannelTest, DrainingServerLeavesTheRotationAtItsFirstRefusal) {
  StartServers(3);
  ChannelOptions options;
  options.balancer = BalancerPolicy::kRoundRobin;
  options.health.ejection_base = MonoDelta::FromSeconds(60);  // no probe during the test
  auto channel = NewChannel(NewClient(), options);
  rtest::EchoServiceProxy proxy(channel);
  for (int i = 0; i < 6; i++) ASSERT_TRUE(EchoOnce(proxy, "x").ok());
  servers_[0].messenger->RefuseNewCalls();  // draining: its connections stay open
  const int before = servers_[0].service->calls();
  for (int i = 0; i < 30; i++) ASSERT_TRUE(EchoOnce(proxy, "x").ok());
  EXPECT_EQ(servers_[0].service->calls(), before);
  const auto backends = channel->Backends();
  EXPECT_STREQ(backends[0].health, "ejected");
  EXPECT_EQ(backends[0].ejections, 1);
}

TEST_F(ChannelTest, ChannelP95HedgeDelayComesFromObservedAnswers) {
  StartServers(2);
  ChannelOptions options;
  options.balancer = BalancerPolicy::kRoundRobin;  // half the calls go to server 1
  options.hedge_after_p95 = true;
  options.hedge_after = MonoDelta::FromSeconds(30);  // until 100 answers are in
  auto channel = NewChannel(NewClient(), options);
  rtest::EchoServiceProxy proxy(channel);
  for (int i = 0; i < 120; i++) ASSERT_TRUE(EchoOnce(proxy, "x").ok());
  // Server 1 now stalls: a call to it is hedged after the (short) observed p95, not 30 s; each
  // call's deadline (20 s) is shorter than the fixed delay, so only a p95 hedge answers it.
  servers_[0].service->set_echo_hook(
      [this](const rtest::EchoRequestPB&, RpcContext*) { gate_.Pass(); });
  const int server2_before = servers_[1].service->calls();  // round robin's split need not be even
  int hedged = 0;
  for (int i = 0; i < 4; i++) {
    rtest::EchoRequestPB req;
    req.set_data("p95");
    rtest::EchoResponsePB resp;
    RpcController ctl;
    ctl.set_timeout(MonoDelta::FromSeconds(20));
    ASSERT_TRUE(proxy.Echo(req, &resp, &ctl).ok()) << ctl.status().ToString();
    EXPECT_EQ(resp.data(), "p95");
    hedged += ctl.attempts() - 1;
  }
  // Round robin sent at least one of the four to the stalled server first: hedged, each once.
  EXPECT_GT(hedged, 0);
  EXPECT_LE(hedged, 4);
  EXPECT_EQ(servers_[1].service->calls(), server2_before + 4);  // every call answered by server 2
  gate_.Open();
}

}  // namespace
}  // namespace rrpc::rpc
