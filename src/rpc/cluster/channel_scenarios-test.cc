// Cluster scenarios of issue 25 that one process can show: servers added to and removed from a
// real registry (a private etcd, a watched file) take and stop taking calls, and a replica slowed
// by fault injection loses its share while hedges stay inside their budget. The process-level
// ones (SIGKILL, rolling restart through etcd) are in examples/kv/kv_cluster-test.cc.
#include <gtest/gtest.h>
#include <stdio.h>
#include <stdlib.h>

#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rpc/cluster/cluster-test-util.h"
#include "rpc/core/fault_injection.h"
#include "rpc/discovery/etcd-test-util.h"
#include "rpc/testing/rpc-test-util.h"
#include "rrpc/rpc/cluster/channel.h"

namespace rrpc::rpc {
namespace {

class ChannelScenariosTest : public ::testing::Test {
 protected:
  void StartServers(int n, MessengerOptions options = {}) {
    for (int i = 1; i <= n; i++) {
      auto server = TestServer::Start(i, options);
      ASSERT_TRUE(server.ok()) << server.status().ToString();
      servers_.push_back(std::move(*server));
    }
  }
  std::shared_ptr<Messenger> NewClient() {
    auto built = MessengerBuilder("client").Build();
    CHECK(built.ok()) << built.status().ToString();
    client_ = *built;
    return client_;
  }
  void TearDown() override {
    if (client_) client_->Shutdown();
    for (auto& s : servers_) s.messenger->Shutdown();
  }
  static bool HasBackend(const Channel& channel, const Sockaddr& addr) {
    for (const auto& b : channel.Backends()) {
      if (b.addr == addr) return true;
    }
    return false;
  }

  // Through a channel on `target` whose registry first names servers 1 and 2: `add()` names
  // server 3 too, which then takes calls; `remove()` drops server 1, which then gets none.
  void AddedServerTakesCallsAndRemovedOneGetsNone(const std::string& target,
                                                  const std::function<void()>& add,
                                                  const std::function<void()>& remove) {
    auto channel = Channel::Create(NewClient(), target);
    ASSERT_TRUE(channel.ok()) << channel.status().ToString();
    rtest::EchoServiceProxy proxy(*channel);
    ASSERT_TRUE(WaitForCondition([&] { return (*channel)->Backends().size() == 2; }));
    for (int i = 0; i < 20; i++) ASSERT_TRUE(EchoOnce(proxy, "x").ok());
    EXPECT_EQ(servers_[2].service->calls(), 0);

    add();
    // Calls until the new server has answered some: it joins the rotation without a restart.
    ASSERT_TRUE(WaitForCondition(
        [&] { return EchoOnce(proxy, "x").ok() && servers_[2].service->calls() >= 5; }));

    remove();
    ASSERT_TRUE(WaitForCondition([&] { return !HasBackend(**channel, servers_[0].addr); }));
    const int before = servers_[0].service->calls();
    for (int i = 0; i < 60; i++) ASSERT_TRUE(EchoOnce(proxy, "x").ok());
    EXPECT_EQ(servers_[0].service->calls(), before);
    EXPECT_EQ((*channel)->Backends().size(), 2u);
  }

  std::vector<TestServer> servers_;
  std::shared_ptr<Messenger> client_;
};

TEST_F(ChannelScenariosTest, ServerAddedToEtcdTakesCallsAndOneRemovedGetsNone) {
  EtcdTestServer etcd;
  ASSERT_TRUE(etcd.Start().ok());
  StartServers(3);
  EtcdClient registry = etcd.Client();
  auto put = [&](const Sockaddr& addr) {
    ASSERT_TRUE(registry.Put("/kv/" + addr.ToString(), addr.ToString(), 0).ok());
  };
  put(servers_[0].addr);
  put(servers_[1].addr);
  AddedServerTakesCallsAndRemovedOneGetsNone(
      "etcd://" + etcd.endpoint() + "/kv", [&] { put(servers_[2].addr); },
      [&] { ASSERT_TRUE(registry.Delete("/kv/" + servers_[0].addr.ToString()).ok()); });
}

// etcd goes down: the channel keeps calling the servers it knew, and says the registry failed
// (resolver_status); when etcd is back the set follows it again.
TEST_F(ChannelScenariosTest, EtcdDownKeepsTheLastServersAndSaysSo) {
  EtcdTestServer etcd;
  ASSERT_TRUE(etcd.Start().ok());
  StartServers(3);
  {
    EtcdClient registry = etcd.Client();
    for (int i = 0; i < 2; i++) {
      ASSERT_TRUE(
          registry.Put("/kv/" + servers_[i].addr.ToString(), servers_[i].addr.ToString(), 0).ok());
    }
  }
  auto channel = Channel::Create(NewClient(), "etcd://" + etcd.endpoint() + "/kv");
  ASSERT_TRUE(channel.ok()) << channel.status().ToString();
  ASSERT_TRUE((*channel)->WaitForServers(MonoTime::Now() + MonoDelta::FromSeconds(60)).ok());
  rtest::EchoServiceProxy proxy(*channel);
  etcd.Kill();
  ASSERT_TRUE(WaitForCondition([&] { return !(*channel)->resolver_status().ok(); }));
  for (int i = 0; i < 20; i++) ASSERT_TRUE(EchoOnce(proxy, "x").ok());
  EXPECT_EQ((*channel)->Backends().size(), 2u);
  EXPECT_EQ(servers_[0].service->calls() + servers_[1].service->calls(), 20);

  ASSERT_TRUE(etcd.Restart().ok());
  {
    EtcdClient registry = etcd.Client();
    ASSERT_TRUE(
        registry.Put("/kv/" + servers_[2].addr.ToString(), servers_[2].addr.ToString(), 0).ok());
  }
  ASSERT_TRUE(WaitForCondition([&] {
    return (*channel)->resolver_status().ok() && HasBackend(**channel, servers_[2].addr);
  }));
}

TEST_F(ChannelScenariosTest, ServerAddedToTheFileTakesCallsAndOneRemovedGetsNone) {
  char dir_template[] = "/tmp/rrpc-channel-file-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  const std::string path = dir + "/servers";
  StartServers(3);
  // Written as editors and deploy tools do: to a temporary file, then renamed over the list.
  auto write = [&](const std::vector<int>& which) {
    std::string text = "# the kv cluster\n";
    for (int i : which) text += servers_[i].addr.ToString() + "\n";
    std::ofstream(path + ".tmp", std::ios::trunc) << text;
    ASSERT_EQ(0, rename((path + ".tmp").c_str(), path.c_str()));
  };
  write({0, 1});
  AddedServerTakesCallsAndRemovedOneGetsNone(
      "file://" + path,
      [&] {
        write({0, 1, 2});
      },
      [&] {
        write({1, 2});
      });
  ASSERT_EQ(0, system(("rm -rf '" + dir + "'").c_str()));
}

// Issue 25, scenario 4: one replica of three delays 5% of its calls by 50 ms. With hedging (a
// second attempt after 10 ms without an answer) no call fails and the hedges stay inside the
// hedge budget. (That the balancer then gives a slow replica fewer calls is shown, with a
// slowness that holds on any machine, by ChannelTest.PowerOfTwoChoicesAvoidsASlowServer.)
TEST_F(ChannelScenariosTest, SlowedReplicaIsHedgedWithinTheBudget) {
  // The injector's rolls are a seeded sequence over the replica's calls in order. Seed 10 slows
  // its 1st, 2nd, 14th and 16th calls (7 of its first 100): the first call it gets is slowed
  // however few the balancer gives it. (With seed 1 the first slowed one was its 27th, and a run
  // that gave it fewer found nothing to hedge.)
  auto faults = std::make_shared<FaultInjector>(FaultSpec(), /*seed=*/10);
  FaultSpec spec;
  spec.slow_handler = 0.05;
  spec.handler_delay = MonoDelta::FromMilliseconds(50);
  faults->set_spec(spec);
  auto slow = TestServer::Start(1, MessengerOptions(), faults);
  ASSERT_TRUE(slow.ok()) << slow.status().ToString();
  servers_.push_back(std::move(*slow));
  for (int i = 2; i <= 3; i++) {
    auto server = TestServer::Start(i);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    servers_.push_back(std::move(*server));
  }

  ChannelOptions options;
  options.hedge_after = MonoDelta::FromMilliseconds(10);
  options.hedge_budget = RetryBudgetOptions{0.1, 2, 10};
  std::vector<Sockaddr> addrs;
  for (const auto& s : servers_) addrs.push_back(s.addr);
  auto channel =
      Channel::Create(NewClient(), std::make_unique<TestResolver>(addrs), std::move(options));
  ASSERT_TRUE(channel.ok()) << channel.status().ToString();

  constexpr int kCalls = 3000;
  const MonoTime start = MonoTime::Now();
  EchoLoad load(rtest::EchoServiceProxy(*channel), 8, kCalls);
  load.Start();
  load.Wait();
  const double seconds = (MonoTime::Now() - start).ToSeconds();

  EXPECT_EQ(load.failed(), 0) << load.first_error();
  ASSERT_EQ(load.finished(), kCalls);
  // Every hedge took a token: the 10 the bucket starts with, 0.1 per call, 2 per second.
  EXPECT_LE(load.extra_attempts(), 10 + kCalls / 10 + 2 * (static_cast<int>(seconds) + 1))
      << "over " << seconds << " s";
  // The slowed calls were slow enough to be hedged (the budget was full when the first came).
  ASSERT_GT(servers_[0].service->calls(), 0) << "the balancer never tried the slowed replica";
  ASSERT_GT(faults->counts().slowed_handlers, 0u);
  EXPECT_GT(load.extra_attempts(), 0);
  const int slow_calls = servers_[0].service->calls();
  const int all_calls = slow_calls + servers_[1].service->calls() + servers_[2].service->calls();
  LOG(INFO) << "slowed replica: " << slow_calls << " of " << all_calls << " calls, "
            << faults->counts().slowed_handlers << " slowed; " << load.extra_attempts()
            << " hedges in " << seconds << " s";
}

}  // namespace
}  // namespace rrpc::rpc
