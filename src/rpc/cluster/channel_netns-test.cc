// Issue 25's scenario 5: a channel over three servers, each on a "host" of its own (a network
// namespace joined to the client's by a veth pair, testing/netns-test-util.h), 64 calls in flight,
// and one server's link cut so that its packets vanish (no FIN, no RST). Every call must still
// succeed on the other two within its deadline: moved by the per-attempt timeout, or, without
// one, by dead-peer detection (ping, TCP_USER_TIMEOUT) and the connect's negotiation timeout.
// Skipped, saying why, where namespaces cannot be made (no root, no `ip`, no CAP_SYS_ADMIN).
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "rpc/cluster/cluster-test-util.h"
#include "rpc/testing/netns-test-util.h"
#include "rpc/testing/rpc-test-util.h"
#include "rrpc/rpc/cluster/channel.h"

namespace rrpc::rpc {
namespace {

constexpr int kServers = 3;

class ChannelNetnsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string unavailable = NetNamespaces::Unavailable();
    if (!unavailable.empty()) GTEST_SKIP() << unavailable;
    client_ns_ = namespaces_.Add("c");
    if (client_ns_.empty()) {
      GTEST_SKIP() << "cannot create network namespaces here (ip netns add failed)";
    }
    const std::string id = std::to_string(getpid() % 100000);
    for (int i = 0; i < kServers; i++) {
      // A /24 per link and per test process: 10.(80+i).(pid % 250 + 1).0.
      const std::string net =
          "10." + std::to_string(80 + i) + "." + std::to_string(getpid() % 250 + 1) + ".";
      const std::string ns = namespaces_.Add("s" + std::to_string(i));
      ASSERT_FALSE(ns.empty());
      const std::string veth = "rch" + id + std::to_string(i);
      ASSERT_TRUE(NetNamespaces::Link(veth, ns, net + "1", client_ns_, net + "2"));
      Server server;
      server.ns = ns;
      server.dev = veth + "a";
      Status started;
      ASSERT_TRUE(NetNamespaces::RunIn(ns, [&] { started = StartServer(net + "1", &server); }));
      ASSERT_TRUE(started.ok()) << started.ToString();
      servers_.push_back(std::move(server));
    }
    Result<std::shared_ptr<Messenger>> client = Status::IllegalState("not built");
    ASSERT_TRUE(
        NetNamespaces::RunIn(client_ns_, [&] { client = MessengerBuilder("client").Build(); }));
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    client_ = std::move(client).value();
  }

  void TearDown() override {
    gate_.Open();
    if (client_) client_->Shutdown();
    for (auto& s : servers_) s.messenger->Shutdown();
  }

  struct Server {
    std::string ns;
    std::string dev;  // its end of the veth pair
    std::shared_ptr<Messenger> messenger;
    TestEchoService* service = nullptr;
    Sockaddr addr;
  };
  static Status StartServer(const std::string& ip, Server* server) {
    RRPC_ASSIGN_OR_RETURN(server->messenger, MessengerBuilder("server-" + ip).Build());
    auto service = std::make_unique<TestEchoService>();
    server->service = service.get();
    RRPC_RETURN_NOT_OK(server->messenger->RegisterService(std::move(service)));
    RRPC_ASSIGN_OR_RETURN(Sockaddr want, Sockaddr::Parse(ip + ":0"));
    return server->messenger->Listen(want, &server->addr);
  }

  // 64 echo calls in flight (deadline 30 s each), 4,000 in all; once 1,000 have finished, server
  // 0 holds the next call that reaches it and its link goes down with that call in flight. Every
  // call must succeed, at least one on a second attempt, and the load must end well within the
  // calls' deadline (nothing hangs).
  void CutOneServerUnderLoad(ChannelOptions options) {
    std::vector<Sockaddr> addrs;
    for (const auto& s : servers_) addrs.push_back(s.addr);
    auto channel = Channel::Create(client_, std::make_unique<TestResolver>(addrs), options);
    ASSERT_TRUE(channel.ok()) << channel.status().ToString();
    servers_[0].service->set_echo_hook([this](const rtest::EchoRequestPB&, RpcContext*) {
      if (hold_.load()) gate_.Pass();
    });
    constexpr int kTotal = 4000;
    EchoLoad load(rtest::EchoServiceProxy(*channel), 64, kTotal, MonoDelta::FromSeconds(30));
    load.Start();
    ASSERT_TRUE(WaitForCondition([&] { return load.finished() >= 1000; }));
    hold_.store(true);
    ASSERT_TRUE(gate_.WaitForEntered(1)) << "no call reached server 0 after 1,000 calls";
    ASSERT_TRUE(NetNamespaces::SetLink(servers_[0].ns, servers_[0].dev, /*up=*/false));
    const MonoTime cut = MonoTime::Now();
    // Bounded: each call's deadline is 30 s, so a call that waits past it fails (and is counted).
    ASSERT_TRUE(
        WaitForCondition([&] { return load.finished() == kTotal; }, MonoDelta::FromSeconds(120)))
        << load.finished() << " of " << kTotal << " finished";
    load.Wait();
    LOG(INFO) << "all calls done " << (MonoTime::Now() - cut).ToString() << " after the cut; "
              << load.extra_attempts() << " extra attempts";
    EXPECT_EQ(load.failed(), 0) << load.first_error();
    EXPECT_GE(load.extra_attempts(), 1);  // the held call moved
  }

  NetNamespaces namespaces_{"ch"};  // deletes the namespaces last, after TearDown
  std::string client_ns_;
  std::vector<Server> servers_;
  std::shared_ptr<Messenger> client_;
  HandlerGate gate_;
  std::atomic<bool> hold_{false};  // server 0's handlers wait at gate_
};

// With a per-attempt timeout (1 s) the calls stuck on the silent server move on after it.
TEST_F(ChannelNetnsTest, CallsMoveOffADroppedServerByTheirAttemptTimeout) {
  ChannelOptions options;
  options.attempt_timeout = MonoDelta::FromSeconds(1);
  CutOneServerUnderLoad(options);
}

// Without one, dead-peer detection closes the silent connection within seconds (its calls fail
// retriable and, idempotent, go to the others) and new connections to it fail their negotiation
// timeout: still no call fails.
TEST_F(ChannelNetnsTest, CallsMoveOffADroppedServerByDeadPeerDetection) {
  CutOneServerUnderLoad(ChannelOptions());
}

// A server whose packets vanish before the client ever connected: the connection times out
// connecting (the messenger's negotiation timeout, 3 s), before the call's deadline and before its
// request left, so even a non-idempotent call goes to another server and succeeds.
TEST_F(ChannelNetnsTest, ConnectTimeoutToADroppedServerMovesEvenANonIdempotentCall) {
  ASSERT_TRUE(NetNamespaces::SetLink(servers_[0].ns, servers_[0].dev, /*up=*/false));
  ChannelOptions options;
  options.balancer = BalancerPolicy::kRoundRobin;  // the first pick is the dropped server
  auto channel = Channel::Create(
      client_,
      std::make_unique<TestResolver>(std::vector<Sockaddr>{servers_[0].addr, servers_[1].addr}),
      options);
  ASSERT_TRUE(channel.ok()) << channel.status().ToString();
  rtest::EchoServiceProxy proxy(*channel);
  rtest::AddRequestPB req;
  req.set_a(40);
  req.set_b(2);
  rtest::AddResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(60));
  Status s = proxy.Add(req, &resp, &ctl);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(resp.sum(), 42);
  EXPECT_EQ(ctl.attempts(), 2);
  EXPECT_EQ((*channel)->Backends()[0].ejections, 1);
}

}  // namespace
}  // namespace rrpc::rpc
