// Connection setup's control-path verbs (CQ and QP create, memory registration, modify-QP) run
// off the reactor threads (RdmaOptions::setup_off_reactor, setup_thread.h): while one
// connection's upgrade is stuck inside a verb (SoftDevice::HoldControlVerbs), calls on another
// connection of the same reactor complete, the stuck connection upgrades once the verb returns,
// and a connection that closes meanwhile leaves nothing behind; while the server's RTR toward one
// client is stuck (SoftDevice::HoldRtrToward), another client's setup goes on, and while the
// client's RTR toward one server is stuck, its reactor serves its other connections. Server side
// and client side; the server's and the client's messengers each have one reactor. A hang is the
// failure: each wait is bounded (generous for a loaded machine), and the verbs are released before
// any assertion.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "rpc/core/connection.h"
#include "rpc/core/messenger_internals.h"
#include "rpc/core/reactor.h"
#include "rpc/rdma/rdma_factory.h"
#include "rpc/testing/rpc-test-util.h"
#include "util/countdown_latch.h"

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
  virtual RdmaOptions Options() const {
    RdmaOptions o = rdma::SoftRdmaOptions();
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
    co.bulk_connection_bytes = 0;  // one connection to the server, large calls too
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
  // A second echo server on a factory (and software device) of its own, listening on `addr`;
  // nullptr when it cannot listen.
  std::shared_ptr<Messenger> StartSecondServer(std::shared_ptr<RdmaTransportFactory>* factory,
                                               Sockaddr* addr) {
    std::shared_ptr<Messenger> m = NewMessenger("server2", factory);
    if (!m->RegisterService(std::make_unique<TestEchoService>()).ok() ||
        !m->Listen(Sockaddr::Loopback(0), addr).ok()) {
      return nullptr;
    }
    return m;
  }
  rdma::SoftDevice* SoftOf(RdmaTransportFactory* f) { return f->Device().value()->soft; }
  // The client (one reactor) connects to a second server whose GIDs its RTRs are held toward,
  // serves a call to the first server meanwhile, and upgrades once they are released.
  void ExpectClientServesOthersWhileItsRtrTowardAServerIsHeld();

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
  Sockaddr server2_addr;
  std::shared_ptr<Messenger> server2 = StartSecondServer(&server2_factory, &server2_addr);
  ASSERT_NE(server2, nullptr);
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

// Waits (bounded) until `n` RTRs of `dev` are held (SoftDevice::HoldRtrToward).
bool WaitRtrsHeld(rdma::SoftDevice* dev, int n) {
  const MonoTime until = MonoTime::Now() + kBound;
  while (dev->rtrs_held() < n) {
    if (MonoTime::Now() > until) return false;
    SleepFor(MonoDelta::FromMilliseconds(1));
  }
  return true;
}

// Issue 37, finding 2: the server's RTR toward one client blocks (a RoCE RTR whose peer's MAC
// does not resolve). A second client connecting after it upgrades and is served meanwhile: the
// held RTR holds one setup thread, not every setup behind it.
TEST_P(RdmaControlPathTest, ServerSetsUpAClientWhileItsRtrTowardAnotherIsHeld) {
  rdma::SoftDevice* dev = SoftOf(server_factory_.get());
  std::shared_ptr<RdmaTransportFactory> held_factory, next_factory;
  std::shared_ptr<Messenger> held_client = NewMessenger("held", &held_factory);
  std::shared_ptr<Messenger> next = NewMessenger("next", &next_factory);
  // Every GID the held client's device may offer; the next client's device has others.
  const std::vector<rdma::GidEntry> held_gids = SoftOf(held_factory.get())->port().gid_table;
  for (const rdma::GidEntry& e : held_gids) dev->HoldRtrToward(e.gid, true);
  PendingEcho stuck;
  stuck.Start(rtest::EchoServiceProxy(held_client, server_addr_));
  const bool held = WaitRtrsHeld(dev, 1);
  PendingEcho second;
  second.Start(rtest::EchoServiceProxy(next, server_addr_));
  const bool served = second.done.WaitFor(kBound);
  const std::string second_transport = TransportOf(next, server_addr_);
  const int still_held = dev->rtrs_held();  // the first client's RTR, held all along
  for (const rdma::GidEntry& e : held_gids) dev->HoldRtrToward(e.gid, false);
  EXPECT_TRUE(held) << "the server's RTR toward the first client was never held";
  EXPECT_TRUE(served) << "the second client's setup waited behind the held RTR";
  EXPECT_EQ(second_transport, "rdma");
  EXPECT_EQ(still_held, 1);
  ASSERT_TRUE(second.done.WaitFor(kBound));
  EXPECT_TRUE(second.ctl.status().ok()) << second.ctl.status().ToString();
  ASSERT_TRUE(stuck.done.WaitFor(kBound));
  EXPECT_TRUE(stuck.ctl.status().ok()) << stuck.ctl.status().ToString();
  EXPECT_EQ(TransportOf(held_client, server_addr_), "rdma");
  held_client->Shutdown();
  next->Shutdown();
}

// Issue 37, finding 2, client half: the client's RTR toward one server blocks (a RoCE RTR whose
// peer's MAC does not resolve). The client's one reactor serves a call to another server
// meanwhile: the RTR, and the path probe's connect and round trip after it, run on a setup
// thread while the held connection's call waits. Once released, that connection upgrades and its
// call goes over RDMA. On the reactor (as before), the first call waits behind the RTR.
TEST_P(RdmaControlPathTest, ClientServesOthersWhileItsRtrTowardAServerIsHeld) {
  ExpectClientServesOthersWhileItsRtrTowardAServerIsHeld();
}

void RdmaControlPathTest::ExpectClientServesOthersWhileItsRtrTowardAServerIsHeld() {
  rdma::SoftDevice* dev = SoftOf(client_factory_.get());
  std::shared_ptr<RdmaTransportFactory> server2_factory;
  Sockaddr server2_addr;
  std::shared_ptr<Messenger> server2 = StartSecondServer(&server2_factory, &server2_addr);
  ASSERT_NE(server2, nullptr);
  // Every GID server2's device may answer with; the first server's device has others.
  const std::vector<rdma::GidEntry> held_gids = SoftOf(server2_factory.get())->port().gid_table;
  for (const rdma::GidEntry& e : held_gids) dev->HoldRtrToward(e.gid, true);
  PendingEcho stuck;
  stuck.Start(rtest::EchoServiceProxy(client_, server2_addr));
  const bool held = WaitRtrsHeld(dev, 1);
  PendingEcho first;
  first.Start(Proxy());
  const bool served = first.done.WaitFor(kBound);
  // The held connection's call went nowhere meanwhile (not over TCP, not over RDMA).
  const bool stuck_waited = stuck.done.count() == 1;
  const int still_held = dev->rtrs_held();
  for (const rdma::GidEntry& e : held_gids) dev->HoldRtrToward(e.gid, false);
  EXPECT_TRUE(held) << "the client's RTR toward server2 was never held";
  EXPECT_TRUE(served) << "a call to the first server waited for the client's RTR toward server2";
  EXPECT_TRUE(stuck_waited) << "the held connection's call completed before its RTR";
  EXPECT_EQ(still_held, 1);
  ASSERT_TRUE(first.done.WaitFor(kBound));
  EXPECT_TRUE(first.ctl.status().ok()) << first.ctl.status().ToString();
  ASSERT_TRUE(stuck.done.WaitFor(kBound));
  EXPECT_TRUE(stuck.ctl.status().ok()) << stuck.ctl.status().ToString();
  EXPECT_EQ(TransportOf(client_, server2_addr), "rdma");
  EXPECT_EQ(client_factory_->fallbacks(rdma::FallbackReason::kPath), 0u);
  client_->Shutdown();
  server2->Shutdown();
}

// A client that goes while its RTR toward the server is held: its connection closes at once (its
// reactor is free), the job ends on the setup thread when released and drops the endpoint and
// probe it was lent, and the server goes on.
TEST_P(RdmaControlPathTest, ClientClosedWhileItsRtrIsHeldLeavesNothingBehind) {
  std::shared_ptr<RdmaTransportFactory> held_factory;
  std::shared_ptr<Messenger> held_client = NewMessenger("held", &held_factory);
  rdma::SoftDevice* dev = SoftOf(held_factory.get());
  const std::vector<rdma::GidEntry> server_gids = SoftOf(server_factory_.get())->port().gid_table;
  for (const rdma::GidEntry& e : server_gids) dev->HoldRtrToward(e.gid, true);
  PendingEcho stuck;
  stuck.Start(rtest::EchoServiceProxy(held_client, server_addr_));
  const bool held = WaitRtrsHeld(dev, 1);
  held_client->Shutdown();  // the connection closes with its RTR still held
  const bool failed = stuck.done.WaitFor(kBound);
  const int still_held = dev->rtrs_held();
  for (const rdma::GidEntry& e : server_gids) dev->HoldRtrToward(e.gid, false);
  held_client.reset();
  held_factory.reset();  // the last holder of the setup thread: joins it once the job ends
  EXPECT_TRUE(held);
  EXPECT_TRUE(failed) << "the client's shutdown waited for its RTR";
  EXPECT_FALSE(stuck.ctl.status().ok());
  EXPECT_EQ(still_held, 1);
  EXPECT_TRUE(EchoOnce(Proxy(), "after").ok());
  std::shared_ptr<RdmaTransportFactory> next_factory;
  std::shared_ptr<Messenger> next = NewMessenger("next", &next_factory);
  EXPECT_TRUE(EchoOnce(rtest::EchoServiceProxy(next, server_addr_), "next").ok());
  EXPECT_EQ(TransportOf(next, server_addr_), "rdma");
  next->Shutdown();
}

// Without a path probe (probe_path off: the server awaits no confirmation and moves to RDMA as it
// answers), in both receive-queue modes.
class RdmaControlPathNoProbeTest : public RdmaControlPathTest {
 protected:
  RdmaOptions Options() const override {
    RdmaOptions o = RdmaControlPathTest::Options();
    o.probe_path = false;
    return o;
  }
  // Runs `task` on `m`'s only reactor once that reactor is in it; it waits for `release`.
  // False when the reactor never took it (bounded).
  static bool HoldReactor(const std::shared_ptr<Messenger>& m, CountDownLatch* release) {
    auto held = std::make_shared<CountDownLatch>(1);
    MessengerInternals::reactor(*m, 0)->RunOnReactor([held, release] {
      held->CountDown();
      release->Wait();
    });
    return held->WaitFor(kBound);
  }
  // The client's SRQ context (one reactor).
  RdmaTransportFactory::SrqSnapshot ClientSrq() const {
    const auto v = client_factory_->SrqStatsSnapshot();
    return v.empty() ? RdmaTransportFactory::SrqSnapshot{} : v[0];
  }
};

// The client's RTR/RTS toward a server that awaits no confirmation run on a setup thread too (in
// SRQ mode they ran on the reactor): while its RTR toward one server is held, its one reactor
// serves a call to another.
TEST_P(RdmaControlPathNoProbeTest, ClientServesOthersWhileItsRtrTowardAServerIsHeld) {
  ExpectClientServesOthersWhileItsRtrTowardAServerIsHeld();
}

class RdmaControlPathSrqNoProbeTest : public RdmaControlPathNoProbeTest {};

// SRQ mode: the client's connection closes while its endpoint, lent to the setup job, has its RTR
// held, and the server (on RDMA since it answered) sends to that QP meanwhile: the job does not
// destroy the connected QP; it hands it back to the client's reactor, which moves it to ERR and
// retires it. The server's message lands in the reactor's SRQ after the RTR, before the reactor
// takes the QP back (both reactors are held meanwhile); once retired and drained, the SRQ's
// grants and posted receives are as before and no QP is left retiring.
TEST_P(RdmaControlPathSrqNoProbeTest, ClientClosedWhileItsRtrIsHeldHandsItsQpBackToItsReactor) {
  rdma::SoftDevice* dev = SoftOf(client_factory_.get());
  // server2 asks a peer silent for 20 ms for its credits back: a message it sends on its own, to
  // the client's QP while that is in INIT. Its resends (one per ack timeout, 1 s) go on until the
  // QP connects.
  RdmaOptions o2 = Options();
  o2.srq.reclaim_after = MonoDelta::FromMilliseconds(20);
  o2.endpoint.ack_timeout = 18;
  auto server2_factory = std::make_shared<RdmaTransportFactory>(o2);
  MessengerOptions mo;
  mo.name = "server2";
  mo.num_reactors = 1;
  mo.transport_factory = server2_factory;
  std::shared_ptr<Messenger> server2 = MessengerBuilder(mo).Build().value();
  Sockaddr server2_addr;
  ASSERT_TRUE(server2->RegisterService(std::make_unique<TestEchoService>()).ok());
  ASSERT_TRUE(server2->Listen(Sockaddr::Loopback(0), &server2_addr).ok());
  rdma::SoftDevice* dev2 = SoftOf(server2_factory.get());
  const RdmaTransportFactory::SrqSnapshot before = ClientSrq();
  const uint64_t not_ready_before = dev2->port_counters().not_ready_received;

  const std::vector<rdma::GidEntry> held_gids = dev2->port().gid_table;
  for (const rdma::GidEntry& e : held_gids) dev->HoldRtrToward(e.gid, true);
  PendingEcho stuck;
  stuck.Start(rtest::EchoServiceProxy(client_, server2_addr));
  const bool held = WaitRtrsHeld(dev, 1);
  // server2 sent to the client's QP, still in INIT.
  MonoTime until = MonoTime::Now() + kBound;
  while (dev2->port_counters().not_ready_received == not_ready_before && MonoTime::Now() < until) {
    SleepFor(MonoDelta::FromMilliseconds(1));
  }
  const bool server_sent = dev2->port_counters().not_ready_received > not_ready_before;
  // server2 does not see the client go (its QP stays connected, its NIC resending).
  CountDownLatch release_server2(1);
  const bool server2_held = HoldReactor(server2, &release_server2);
  // The client closes the connection on its reactor, free while the RTR is held.
  Reactor* reactor = MessengerInternals::reactor(*client_, 0);
  auto closed = std::make_shared<CountDownLatch>(1);
  reactor->RunOnReactor([reactor, server2_addr, closed] {
    std::vector<scoped_refptr<Connection>> to_server2;
    reactor->ForEachConnection([&](Connection* c) {
      if (c->remote() == server2_addr) to_server2.emplace_back(c);
    });
    for (auto& c : to_server2) c->Shutdown(Status::NetworkError("closed by the test"));
    closed->CountDown();
  });
  const bool reactor_free = closed->WaitFor(kBound);
  const bool failed = stuck.done.WaitFor(kBound);
  // The grant reserved for server2 stays while the QP is lent (server2 may send into it).
  const uint64_t grants_while_lent = ClientSrq().grants_outstanding;
  // The client's reactor takes the QP back only once server2's message has landed in its SRQ.
  CountDownLatch release_client(1);
  const bool client_held = HoldReactor(client_, &release_client);
  // Acknowledged: taken by the client's QP, connected (in INIT it answers "not ready").
  const uint64_t acks_before = dev2->port_counters().acks_received;
  for (const rdma::GidEntry& e : held_gids) dev->HoldRtrToward(e.gid, false);
  until = MonoTime::Now() + kBound;
  while (dev2->port_counters().acks_received == acks_before && MonoTime::Now() < until) {
    SleepFor(MonoDelta::FromMilliseconds(1));
  }
  const bool landed = dev2->port_counters().acks_received > acks_before;
  release_client.CountDown();
  release_server2.CountDown();
  EXPECT_TRUE(held) << "the client's RTR toward server2 was never held";
  EXPECT_TRUE(server_sent) << "server2 sent nothing to the client's QP";
  EXPECT_TRUE(server2_held);
  EXPECT_TRUE(reactor_free) << "the client's reactor waited for its RTR toward server2";
  EXPECT_TRUE(failed);
  EXPECT_FALSE(stuck.ctl.status().ok());
  EXPECT_EQ(grants_while_lent, before.grants_outstanding + Options().srq.initial_credits);
  EXPECT_TRUE(client_held);
  EXPECT_TRUE(landed) << "server2's message never reached the client's QP";
  // Retired by the client's reactor and drained: the pool is as before.
  until = MonoTime::Now() + kBound;
  RdmaTransportFactory::SrqSnapshot after = ClientSrq();
  while ((after.grants_outstanding != before.grants_outstanding || after.retiring != 0 ||
          after.posted_receives != before.posted_receives) &&
         MonoTime::Now() < until) {
    SleepFor(MonoDelta::FromMilliseconds(1));
    after = ClientSrq();
  }
  EXPECT_EQ(after.grants_outstanding, before.grants_outstanding);
  EXPECT_EQ(after.posted_receives, before.posted_receives);
  EXPECT_EQ(after.retiring, 0u);
  EXPECT_EQ(after.connections, 1u);
  // The client goes on: its first connection works, and a new one to server2 upgrades.
  EXPECT_TRUE(EchoOnce(Proxy(), "after").ok());
  EXPECT_TRUE(EchoOnce(rtest::EchoServiceProxy(client_, server2_addr), "next").ok());
  EXPECT_EQ(TransportOf(client_, server2_addr), "rdma");
  client_->Shutdown();
  server2->Shutdown();
}

// The same on a reactor with no SRQ connection attached (the closed one was its first): the QP
// handed back is taken, retired and drained at once, with no connection attaching meanwhile; its
// peer's grant returns and every receive is posted again.
TEST_P(RdmaControlPathSrqNoProbeTest, AQpHandedBackToAReactorWithoutConnectionsIsRetiredAtOnce) {
  std::shared_ptr<RdmaTransportFactory> lone_factory;
  std::shared_ptr<Messenger> lone = NewMessenger("lone", &lone_factory);
  rdma::SoftDevice* dev = SoftOf(lone_factory.get());
  const std::vector<rdma::GidEntry> held_gids = SoftOf(server_factory_.get())->port().gid_table;
  for (const rdma::GidEntry& e : held_gids) dev->HoldRtrToward(e.gid, true);
  PendingEcho stuck;
  stuck.Start(rtest::EchoServiceProxy(lone, server_addr_));
  const bool held = WaitRtrsHeld(dev, 1);
  Reactor* reactor = MessengerInternals::reactor(*lone, 0);
  reactor->RunOnReactor([reactor] {
    std::vector<scoped_refptr<Connection>> all;
    reactor->ForEachConnection([&](Connection* c) { all.emplace_back(c); });
    for (auto& c : all) c->Shutdown(Status::NetworkError("closed by the test"));
  });
  const bool failed = stuck.done.WaitFor(kBound);
  // The job connects the QP, then hands it back to the reactor.
  for (const rdma::GidEntry& e : held_gids) dev->HoldRtrToward(e.gid, false);
  auto drained = [&] {
    std::vector<RdmaTransportFactory::SrqSnapshot> srq = lone_factory->SrqStatsSnapshot();
    return srq.size() == 1 && srq[0].grants_outstanding == 0 && srq[0].retiring == 0 &&
           srq[0].posted_receives * Options().endpoint.buffer_size == srq[0].pool_bytes;
  };
  const MonoTime until = MonoTime::Now() + kBound;
  while (!drained() && MonoTime::Now() < until) SleepFor(MonoDelta::FromMilliseconds(1));
  EXPECT_TRUE(held) << "the client's RTR was never held";
  EXPECT_TRUE(failed);
  EXPECT_FALSE(stuck.ctl.status().ok());
  const std::vector<RdmaTransportFactory::SrqSnapshot> srq = lone_factory->SrqStatsSnapshot();
  ASSERT_EQ(srq.size(), 1u);
  EXPECT_EQ(srq[0].grants_outstanding, 0u);
  EXPECT_EQ(srq[0].retiring, 0u);
  EXPECT_EQ(srq[0].connections, 0u);
  EXPECT_EQ(srq[0].posted_receives * Options().endpoint.buffer_size, srq[0].pool_bytes);
  lone->Shutdown();
}

// Zero copy on send is for private receive queues: tests of it run with use_srq false only.
class RdmaControlPathPrivateRqTest : public RdmaControlPathTest {};

// A synchronous caller writes its call itself (Connection::TrySendCallFromCaller) under the
// connection's write lock; a sidecar in a heap Block is registered on its first send (zero copy on
// send, private receive queues). While that registration is stuck in the verb, the reactor still
// handles the same connection (a response arriving on it, and its flush) and its others: the
// registration runs on the setup thread, and the call's write waits for it without a lock.
TEST_P(RdmaControlPathPrivateRqTest, CallerRegisteringASidecarStallsNoReactorPath) {
  rdma::SoftDevice* dev = SoftOf(client_factory_.get());
  std::shared_ptr<RdmaTransportFactory> server2_factory;
  Sockaddr server2_addr;
  std::shared_ptr<Messenger> server2 = StartSecondServer(&server2_factory, &server2_addr);
  ASSERT_NE(server2, nullptr);
  ASSERT_TRUE(EchoOnce(rtest::EchoServiceProxy(client_, server2_addr), "warm").ok());
  constexpr size_t kSidecar = 1 << 20;
  BlockRef block = Block::Allocate(kSidecar);
  memset(block->data(), 0x5a, kSidecar);
  Status caller_status;
  CountDownLatch warmed(1), go(1);
  std::thread caller([&] {
    // A thread's first synchronous call to a remote goes through the reactor; its next ones it
    // writes itself.
    caller_status = EchoOnce(Proxy(), "warm");
    warmed.CountDown();
    go.Wait();
    if (!caller_status.ok()) return;
    rtest::EchoRequestPB req;
    req.set_data("sidecar");
    rtest::EchoResponsePB resp;
    RpcController ctl;
    ctl.set_timeout(MonoDelta::FromSeconds(120));
    ctl.AddOutboundSidecar(BlockSlice{block, Slice(block->data(), kSidecar)});
    caller_status = Proxy().Echo(req, &resp, &ctl);
    if (caller_status.ok() && (ctl.num_inbound_sidecars() != 1 ||
                               !(ctl.inbound_sidecar(0) == Slice(block->data(), kSidecar)))) {
      caller_status = Status::Corruption("sidecar echo differs");
    }
  });
  // A call on the same connection, on the wire before the caller writes (so not queued behind
  // its call), whose response comes while the caller is stuck.
  warmed.Wait();
  BlockEchoes();
  PendingEcho slow;
  slow.Start(Proxy());
  const bool entered = gate_.WaitForEntered(1);
  dev->HoldControlVerbs(true);
  go.CountDown();
  const bool held = WaitHeld(dev, 1);
  gate_.Open();
  PendingEcho other;
  other.Start(rtest::EchoServiceProxy(client_, server2_addr));
  const bool other_served = other.done.WaitFor(kBound);
  const bool slow_served = slow.done.WaitFor(kBound);
  dev->HoldControlVerbs(false);
  caller.join();
  EXPECT_TRUE(entered);
  EXPECT_TRUE(held) << "the caller's send never registered its sidecar";
  EXPECT_TRUE(other_served) << "another connection waited for the caller's registration";
  EXPECT_TRUE(slow_served) << "the connection's receive path waited for the caller's registration";
  EXPECT_TRUE(caller_status.ok()) << caller_status.ToString();
  EXPECT_TRUE(slow.ctl.status().ok()) << slow.ctl.status().ToString();
  client_->Shutdown();
  server2->Shutdown();
}

// The figures in docs/rdma.md ("Control-path verbs"): every control verb costs
// RRPC_CONTROL_VERB_DELAY_US (default 100) on both sides; kStorm client messengers (one factory,
// so one client device) connect at once to the server's one reactor while the first connection
// echoes in a loop. Prints, with the setup on and off the reactor: the mean time to a new
// connection's first echo (connect, negotiation, upgrade) and the first connection's echo
// latencies meanwhile. Not a test (timing): run with --gtest_also_run_disabled_tests.
TEST_P(RdmaControlPathTest, DISABLED_SetupStormFigures) {
  constexpr int kStorm = 32;
  const char* env = getenv("RRPC_CONTROL_VERB_DELAY_US");
  const MonoDelta delay = MonoDelta::FromMicroseconds(env != nullptr ? atoi(env) : 100);
  for (bool off_reactor : {false, true}) {
    RdmaOptions o = Options();
    o.soft.control_verb_delay = delay;
    o.setup_off_reactor = off_reactor;
    auto sf = std::make_shared<RdmaTransportFactory>(o);
    auto cf = std::make_shared<RdmaTransportFactory>(o);
    MessengerOptions so;
    so.name = "storm-server";
    so.num_reactors = 1;
    so.transport_factory = sf;
    std::shared_ptr<Messenger> server = MessengerBuilder(so).Build().value();
    ASSERT_TRUE(server->RegisterService(std::make_unique<TestEchoService>()).ok());
    Sockaddr addr;
    ASSERT_TRUE(server->Listen(Sockaddr::Loopback(0), &addr).ok());
    std::vector<std::shared_ptr<Messenger>> clients;
    for (int i = 0; i <= kStorm; ++i) {
      MessengerOptions co;
      co.name = "storm-client-" + std::to_string(i);
      co.num_reactors = 1;
      co.transport_factory = cf;
      clients.push_back(MessengerBuilder(co).Build().value());
    }
    rtest::EchoServiceProxy first(clients[0], addr);
    ASSERT_TRUE(EchoOnce(first, "warm").ok());  // both devices open (and SRQ contexts made)
    MessengerOptions lo;
    lo.name = "storm-lone";
    lo.transport_factory = cf;
    std::shared_ptr<Messenger> lone = MessengerBuilder(lo).Build().value();
    const MonoTime t0 = MonoTime::Now();
    ASSERT_TRUE(EchoOnce(rtest::EchoServiceProxy(lone, addr), "lone").ok());
    const MonoDelta lone_setup = MonoTime::Now() - t0;
    lone->Shutdown();
    for (int i = 0; i < 100; ++i) ASSERT_TRUE(EchoOnce(first, "x").ok());
    std::vector<std::unique_ptr<PendingEcho>> storm;
    std::vector<MonoTime> ends(kStorm + 1);
    const MonoTime start = MonoTime::Now();
    for (int i = 1; i <= kStorm; ++i) {
      storm.push_back(std::make_unique<PendingEcho>());
      storm.back()->Start(rtest::EchoServiceProxy(clients[i], addr));
    }
    std::vector<double> lat_us;
    auto all_done = [&] {
      for (auto& p : storm) {
        if (p->done.count() > 0) return false;
      }
      return true;
    };
    while (!all_done() && MonoTime::Now() - start < MonoDelta::FromSeconds(60)) {
      const MonoTime a = MonoTime::Now();
      ASSERT_TRUE(EchoOnce(first, "x").ok());
      lat_us.push_back((MonoTime::Now() - a).ToMicroseconds());
    }
    const MonoDelta storm_time = MonoTime::Now() - start;
    for (auto& p : storm) {
      ASSERT_TRUE(p->done.WaitFor(kBound));
      EXPECT_TRUE(p->ctl.status().ok());
    }
    std::sort(lat_us.begin(), lat_us.end());
    auto pct = [&](double q) {
      return lat_us.empty() ? 0.0 : lat_us[std::min(lat_us.size() - 1, size_t(q * lat_us.size()))];
    };
    printf(
        "setup %s reactor, %lld us per verb: a new connection's first echo %.0f us; %d at once "
        "done in %.1f ms; other connection's echoes meanwhile: %zu, p50 %.0f us, p99 %.0f us, "
        "max %.0f us\n",
        off_reactor ? "off the" : "on the", (long long)delay.ToMicroseconds(),
        lone_setup.ToMicroseconds() * 1.0, kStorm, storm_time.ToMilliseconds() * 1.0, lat_us.size(),
        pct(0.5), pct(0.99), lat_us.empty() ? 0.0 : lat_us.back());
    for (auto& c : clients) c->Shutdown();
    server->Shutdown();
  }
}

INSTANTIATE_TEST_SUITE_P(Rq, RdmaControlPathTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Srq" : "Private"; });
INSTANTIATE_TEST_SUITE_P(Rq, RdmaControlPathPrivateRqTest, ::testing::Values(false),
                         [](const auto&) { return "Private"; });
INSTANTIATE_TEST_SUITE_P(Rq, RdmaControlPathNoProbeTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Srq" : "Private"; });
INSTANTIATE_TEST_SUITE_P(Rq, RdmaControlPathSrqNoProbeTest, ::testing::Values(true),
                         [](const auto&) { return "Srq"; });

}  // namespace
}  // namespace rrpc::rpc
