// Connection setup's control-path verbs (CQ and QP create, memory registration, modify-QP) run
// off the reactor threads (RdmaOptions::setup_off_reactor, setup_thread.h): while one
// connection's upgrade is stuck inside a verb (SoftDevice::HoldControlVerbs), calls on another
// connection of the same reactor complete, the stuck connection upgrades once the verb returns,
// and a connection that closes meanwhile leaves nothing behind. Server side and client side; the
// server's and the client's messengers each have one reactor. A hang is the failure: each wait
// is bounded (generous for a loaded machine), and the verbs are released before any assertion.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>

#include "rrpc/rpc/rdma/rdma_factory.h"
#include "rrpc/rpc/testing/rpc-test-util.h"
#include "rrpc/util/countdown_latch.h"

namespace rrpc::rpc {
namespace {

using rdma::RdmaOptions;
using rdma::RdmaTransportFactory;

const MonoDelta kBound = MonoDelta::FromSeconds(30);

// Waits (bounded) until `n` control verbs of `dev` are held.
bool WaitHeld(rdma::SoftDevice* dev, int n) {
  const MonoTime until = MonoTime::Now() + kBound;
  while (dev->control_verbs_held() < n) {
    if (MonoTime::Now() > until) return false;
    SleepFor(MonoDelta::FromMilliseconds(1));
  }
  return true;
}

std::string TransportOf(const std::shared_ptr<Messenger>& m, const Sockaddr& remote) {
  for (const auto& c : m->DumpConnections()) {
    if (c.remote == remote.ToString()) return c.transport;
  }
  return "none";
}

// An echo issued now whose end the test waits on.
struct PendingEcho {
  rtest::EchoRequestPB req;
  rtest::EchoResponsePB resp;
  RpcController ctl;
  CountDownLatch done{1};
  void Start(rtest::EchoServiceProxy proxy) {
    req.set_data("echo");
    ctl.set_timeout(MonoDelta::FromSeconds(120));
    proxy.EchoAsync(req, &resp, &ctl, [this] { done.CountDown(); });
  }
};

class RdmaControlPathTest : public RpcTestBase, public ::testing::WithParamInterface<bool> {
 protected:
  RdmaOptions Options() const {
    RdmaOptions o;
    o.use_srq = GetParam();
    return o;
  }
  // server_ (one reactor) and client_ (one reactor), connected over RDMA.
  void SetUp() override {
    server_factory_ = std::make_shared<RdmaTransportFactory>(Options());
    client_factory_ = std::make_shared<RdmaTransportFactory>(Options());
    MessengerOptions so, co;
    so.num_reactors = 1;
    so.transport_factory = server_factory_;
    co.num_reactors = 1;
    co.transport_factory = client_factory_;
    StartServer(so);
    StartClient(co);
    ASSERT_TRUE(EchoOnce(Proxy(), "warm").ok());
    ASSERT_EQ(TransportOf(client_, server_addr_), "rdma");
  }
  // Another messenger (its own RDMA factory and device).
  std::shared_ptr<Messenger> NewMessenger(const std::string& name,
                                          std::shared_ptr<RdmaTransportFactory>* factory) {
    *factory = std::make_shared<RdmaTransportFactory>(Options());
    MessengerOptions o;
    o.name = name;
    o.num_reactors = 1;
    o.transport_factory = *factory;
    return MessengerBuilder(o).Build().value();
  }
  rdma::SoftDevice* SoftOf(RdmaTransportFactory* f) { return f->Device().value()->soft; }

  std::shared_ptr<RdmaTransportFactory> server_factory_;
  std::shared_ptr<RdmaTransportFactory> client_factory_;
};

TEST_P(RdmaControlPathTest, ServerReactorServesOthersWhileAnUpgradeIsInAVerb) {
  rdma::SoftDevice* dev = SoftOf(server_factory_.get());
  std::shared_ptr<RdmaTransportFactory> other_factory;
  std::shared_ptr<Messenger> other = NewMessenger("other", &other_factory);
  dev->HoldControlVerbs(true);
  PendingEcho stuck;
  stuck.Start(rtest::EchoServiceProxy(other, server_addr_));
  const bool held = WaitHeld(dev, 1);
  // The server's only reactor serves the first connection meanwhile.
  PendingEcho first;
  first.Start(Proxy());
  const bool served = first.done.WaitFor(kBound);
  dev->HoldControlVerbs(false);
  EXPECT_TRUE(held) << "the server's upgrade never reached a control verb";
  EXPECT_TRUE(served) << "a call on another connection waited for the server's setup verbs";
  ASSERT_TRUE(first.done.WaitFor(kBound));
  EXPECT_TRUE(first.ctl.status().ok()) << first.ctl.status().ToString();
  ASSERT_TRUE(stuck.done.WaitFor(kBound));
  EXPECT_TRUE(stuck.ctl.status().ok()) << stuck.ctl.status().ToString();
  EXPECT_EQ(TransportOf(other, server_addr_), "rdma");
  other->Shutdown();
}

TEST_P(RdmaControlPathTest, ClientReactorServesOthersWhileAnUpgradeIsInAVerb) {
  rdma::SoftDevice* dev = SoftOf(client_factory_.get());
  std::shared_ptr<RdmaTransportFactory> server2_factory;
  std::shared_ptr<Messenger> server2 = NewMessenger("server2", &server2_factory);
  ASSERT_TRUE(server2->RegisterService(std::make_unique<TestEchoService>()).ok());
  Sockaddr server2_addr;
  ASSERT_TRUE(server2->Listen(Sockaddr::Loopback(0), &server2_addr).ok());
  dev->HoldControlVerbs(true);
  PendingEcho stuck;
  stuck.Start(rtest::EchoServiceProxy(client_, server2_addr));
  const bool held = WaitHeld(dev, 1);
  PendingEcho first;
  first.Start(Proxy());
  const bool served = first.done.WaitFor(kBound);
  dev->HoldControlVerbs(false);
  EXPECT_TRUE(held) << "the client's upgrade never reached a control verb";
  EXPECT_TRUE(served) << "a call on another connection waited for the client's setup verbs";
  ASSERT_TRUE(first.done.WaitFor(kBound));
  EXPECT_TRUE(first.ctl.status().ok()) << first.ctl.status().ToString();
  ASSERT_TRUE(stuck.done.WaitFor(kBound));
  EXPECT_TRUE(stuck.ctl.status().ok()) << stuck.ctl.status().ToString();
  EXPECT_EQ(TransportOf(client_, server2_addr), "rdma");
  client_->Shutdown();
  server2->Shutdown();
}

TEST_P(RdmaControlPathTest, ConnectionClosedWhileItsSetupIsInAVerbLeavesNothingBehind) {
  rdma::SoftDevice* dev = SoftOf(server_factory_.get());
  std::shared_ptr<RdmaTransportFactory> other_factory;
  std::shared_ptr<Messenger> other = NewMessenger("other", &other_factory);
  dev->HoldControlVerbs(true);
  PendingEcho stuck;
  stuck.Start(rtest::EchoServiceProxy(other, server_addr_));
  const bool held = WaitHeld(dev, 1);
  other->Shutdown();  // the client goes: the server's connection closes with its setup running
  const bool failed = stuck.done.WaitFor(kBound);
  // The server notices the close (its reactor is free) while the verb is still held.
  const MonoTime until = MonoTime::Now() + kBound;
  while (server_->DumpConnections().size() > 1 && MonoTime::Now() < until) {
    SleepFor(MonoDelta::FromMilliseconds(1));
  }
  const size_t server_connections = server_->DumpConnections().size();
  dev->HoldControlVerbs(false);  // the job ends and drops what it made, on the setup thread
  EXPECT_TRUE(held);
  EXPECT_TRUE(failed);
  EXPECT_EQ(server_connections, 1u);
  // The server goes on: the first connection still works, a new one upgrades.
  EXPECT_TRUE(EchoOnce(Proxy(), "after").ok());
  std::shared_ptr<RdmaTransportFactory> next_factory;
  std::shared_ptr<Messenger> next = NewMessenger("next", &next_factory);
  EXPECT_TRUE(EchoOnce(rtest::EchoServiceProxy(next, server_addr_), "next").ok());
  EXPECT_EQ(TransportOf(next, server_addr_), "rdma");
  next->Shutdown();
}

INSTANTIATE_TEST_SUITE_P(Rq, RdmaControlPathTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Srq" : "Private"; });

}  // namespace
}  // namespace rrpc::rpc
