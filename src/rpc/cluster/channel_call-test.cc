// A channel call's lifetime against its caller's and its messenger's: calls whose retry or hedge
// timer is still waiting when the messenger shuts down end at once with Aborted, and nothing of
// the caller's (its message types included) is used after the callback.
#include "rpc/cluster/channel_call.h"

#include <google/protobuf/dynamic_message.h>
#include <gtest/gtest.h>
#include <malloc.h>
#include <sys/socket.h>

#include <memory>
#include <string>
#include <vector>

#include "rpc/cluster/cluster-test-util.h"
#include "rpc/testing/rpc-test-util.h"
#include "rrpc/rpc/cluster/channel.h"
#include "util/countdown_latch.h"
#include "util/socket.h"

namespace rrpc::rpc {
namespace {

class ChannelCallTest : public ::testing::Test {
 protected:
  void StartServers(int n) {
    for (int i = 1; i <= n; i++) {
      auto server = TestServer::Start(i);
      ASSERT_TRUE(server.ok()) << server.status().ToString();
      servers_.push_back(std::move(*server));
    }
  }
  // An address that refuses connections: a socket bound and not listening, kept by the test.
  Sockaddr DeadAddress() {
    auto sock = Socket::CreateTcp(AF_INET);
    CHECK(sock.ok());
    CHECK(sock->Bind(Sockaddr::Loopback(0)).ok());
    Sockaddr addr = *sock->GetSocketAddress();
    dead_.push_back(std::move(*sock));
    return addr;
  }
  // A client with one reactor: a callback it runs and a Shutdown() task it takes run in order.
  std::shared_ptr<Messenger> NewClient() {
    auto built = MessengerBuilder("client").set_num_reactors(1).Build();
    CHECK(built.ok()) << built.status().ToString();
    clients_.push_back(*built);
    return *built;
  }
  std::shared_ptr<Channel> NewChannel(const std::shared_ptr<Messenger>& client,
                                      std::vector<Sockaddr> addrs, ChannelOptions options) {
    auto channel =
        Channel::Create(client, std::make_unique<TestResolver>(std::move(addrs)), options);
    CHECK(channel.ok()) << channel.status().ToString();
    return *channel;
  }
  void TearDown() override {
    gate_.Open();
    for (auto& c : clients_) c->Shutdown();
    for (auto& s : servers_) s.messenger->Shutdown();
  }

  HandlerGate gate_;
  std::vector<TestServer> servers_;
  std::vector<std::shared_ptr<Messenger>> clients_;
  std::vector<Socket> dead_;
};

// A call waiting out a retry's backoff (an hour here) when its messenger shuts down ends then,
// with Aborted, instead of holding its caller until the backoff or its deadline.
TEST_F(ChannelCallTest, CallWaitingForItsRetryEndsAbortedAtMessengerShutdown) {
  auto client = NewClient();
  ChannelOptions options;
  options.initial_backoff = MonoDelta::FromSeconds(3600);
  options.max_backoff = MonoDelta::FromSeconds(3600);
  auto channel = NewChannel(client, {DeadAddress(), DeadAddress()}, options);
  rtest::EchoServiceProxy proxy(channel);
  rtest::EchoRequestPB req;
  req.set_data("x");
  rtest::EchoResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(3 * 3600));
  CountDownLatch done(1);
  proxy.EchoAsync(req, &resp, &ctl, [&done] { done.CountDown(); });
  // The first attempt was refused (its server ejected); its callback armed the retry's timer.
  ASSERT_TRUE(WaitForCondition([&] {
    int64_t ejections = 0;
    for (const BackendInfo& b : channel->Backends()) ejections += b.ejections;
    return ejections == 1;
  }));
  EXPECT_FALSE(done.WaitFor(MonoDelta::FromMilliseconds(50)));
  client->Shutdown();
  ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(60)));
  EXPECT_TRUE(ctl.status().IsAborted()) << ctl.status().ToString();
  EXPECT_EQ(ctl.attempts(), 2);  // the retry ran early and failed at once
}

// A hedged call whose hedge timer is still waiting and whose attempt a server holds ends with
// Aborted when the messenger shuts down; the timer then runs early and sends nothing.
TEST_F(ChannelCallTest, HedgedCallInFlightEndsAbortedAtMessengerShutdown) {
  StartServers(2);
  for (auto& s : servers_) {
    s.service->set_echo_hook([this](const rtest::EchoRequestPB&, RpcContext*) { gate_.Pass(); });
  }
  auto client = NewClient();
  ChannelOptions options;
  options.hedge_after = MonoDelta::FromSeconds(3600);
  auto channel = NewChannel(client, {servers_[0].addr, servers_[1].addr}, options);
  rtest::EchoServiceProxy proxy(channel);
  rtest::EchoRequestPB req;
  req.set_data("x");
  rtest::EchoResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(3 * 3600));
  CountDownLatch done(1);
  proxy.EchoAsync(req, &resp, &ctl, [&done] { done.CountDown(); });
  ASSERT_TRUE(gate_.WaitForEntered(1));
  client->Shutdown();
  ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(60)));
  EXPECT_TRUE(ctl.status().IsAborted()) << ctl.status().ToString();
  EXPECT_EQ(ctl.attempts(), 1);
  EXPECT_EQ(servers_[0].service->calls() + servers_[1].service->calls(), 1);
}

// What a tool like rrpc-cli does: its request and response are DynamicMessages, and it frees
// them and their factory as soon as the callback has run. The call (retried, or hedged) must be
// done with every copy of those types by then. Freed memory is overwritten here, so a copy
// destroyed later would read garbage pointers and crash.
void CallWithTypesFreedInTheCallback(Channel* channel, MonoDelta hedge_after) {
  auto factory = std::make_unique<google::protobuf::DynamicMessageFactory>();
  const google::protobuf::Message* prototype =
      factory->GetPrototype(rtest::EchoRequestPB::descriptor());
  std::unique_ptr<google::protobuf::Message> req(prototype->New());
  req->GetReflection()->SetString(req.get(), req->GetDescriptor()->FindFieldByName("data"),
                                  "dynamic");
  std::unique_ptr<google::protobuf::Message> resp(
      factory->GetPrototype(rtest::EchoResponsePB::descriptor())->New());
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(60));
  if (hedge_after > MonoDelta()) ctl.set_hedge_after(hedge_after);
  CountDownLatch done(1);
  Status status;
  std::string echoed;
  channel->AsyncRequest(
      "rrpc.rtest.EchoService", "Echo", *req, resp.get(), &ctl,
      [&] {
        status = ctl.status();
        if (status.ok()) echoed = resp->DebugString();
        req.reset();
        resp.reset();
        factory.reset();
        done.CountDown();
      },
      MethodKind::kIdempotent);
  ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(60)));
  EXPECT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(echoed, "data: \"dynamic\"\n");
}

TEST_F(ChannelCallTest, CallerMayFreeItsMessageTypesInTheCallback) {
  // glibc overwrites what is freed from here on; under ASAN (whose allocator ignores mallopt)
  // a use after free is reported by ASAN itself.
  mallopt(M_PERTURB, 0xa5);
  StartServers(2);
  auto client = NewClient();
  ChannelOptions options;
  options.balancer = BalancerPolicy::kRoundRobin;
  // Retried: the first attempt goes to the dead server, the second to server 1.
  {
    auto channel = NewChannel(client, {DeadAddress(), servers_[0].addr}, options);
    for (int i = 0; i < 4; i++) CallWithTypesFreedInTheCallback(channel.get(), MonoDelta());
  }
  // Hedged: server 1 holds the first attempt, server 2 answers the hedge, and the loser is
  // cancelled; the callback runs once it has ended.
  servers_[0].service->set_echo_hook(
      [this](const rtest::EchoRequestPB&, RpcContext*) { gate_.Pass(); });
  auto channel = NewChannel(client, {servers_[0].addr, servers_[1].addr}, options);
  for (int i = 0; i < 4; i++) {
    CallWithTypesFreedInTheCallback(channel.get(), MonoDelta::FromMilliseconds(1));
  }
  client->Shutdown();  // every attempt's last reference has gone
  mallopt(M_PERTURB, 0);
}

// A new channel's first calls to a server wait for its connection (connect, negotiation): their
// time is mostly the set-up, not the server's, so it sets no latency. Otherwise a server reached
// slowly once (a loaded client, a far network) would lose every comparison to a slower one.
TEST_F(ChannelCallTest, AnswersThatWaitedForTheirConnectionSetNoLatency) {
  StartServers(2);
  auto channel = NewChannel(NewClient(), {servers_[0].addr, servers_[1].addr}, ChannelOptions());
  rtest::EchoServiceProxy proxy(channel);
  ASSERT_TRUE(EchoOnce(proxy, "first").ok());
  for (const BackendInfo& b : channel->Backends()) {
    EXPECT_EQ(b.ewma_latency_us, 0) << b.addr.ToString() << " took its first call's set-up";
  }
  // Calls over open connections are samples: both servers get one.
  auto sampled = [&] {
    for (const BackendInfo& b : channel->Backends()) {
      if (b.ewma_latency_us == 0) return false;
    }
    return true;
  };
  for (int i = 0; i < 1000 && !sampled(); i++) ASSERT_TRUE(EchoOnce(proxy, "x").ok());
  EXPECT_TRUE(sampled());
}

}  // namespace
}  // namespace rrpc::rpc
