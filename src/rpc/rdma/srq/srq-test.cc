// SRQ mode on the software backend, end to end through messengers: one shared receive queue per
// reactor serving many connections, the pool growing to its cap and no further while calls wait,
// bursts from many peers at once, private-RQ and SRQ peers mixed, teardown returning every
// buffer. Every test runs with rnr_retry = 0: a grant beyond the posted receives fails loudly.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "rpc/rdma/rdma_factory.h"
#include "rpc/testing/rpc-test-util.h"
#include "util/countdown_latch.h"
#include "util/metrics/metric_entity.h"
#include "util/metrics/metric_registry.h"
#include "util/metrics/snapshot.h"

namespace rrpc::rpc {
namespace {

using rdma::RdmaOptions;
using rdma::RdmaTransportFactory;

RdmaOptions Srq(bool on) {
  RdmaOptions o = rdma::SoftRdmaOptions();
  o.endpoint.buffer_size = 1024;
  o.endpoint.receive_buffers = 8;
  o.endpoint.send_buffers = 8;
  o.endpoint.rnr_retry = 0;
  o.use_srq = on;
  o.srq.chunk_blocks = 64;
  o.srq.reserve = 4;
  o.srq.initial_credits = 4;
  o.srq.max_credits = 16;
  o.srq.send_buffers = 64;
  o.srq.max_memory = 8 << 20;
  return o;
}

class SrqTest : public RpcTestBase {
 protected:
  // A server on 0.0.0.0 (so that 127.0.x.y are distinct remotes, one connection each).
  void StartSrvr(const RdmaOptions& o) {
    server_factory_ = std::make_shared<RdmaTransportFactory>(o);
    MessengerOptions so;
    so.num_reactors = 1;
    so.service_queue_length = 4096;
    so.transport_factory = server_factory_;
    so.name = "server";
    // A thousand connections negotiate at once: on a loaded machine (sanitizers, CI) that takes
    // longer than the default allows, and a connection that timed out and reconnected would
    // hold a second grant of credits.
    so.negotiation_timeout = MonoDelta::FromSeconds(120);
    auto built = MessengerBuilder(so).Build();
    ASSERT_TRUE(built.ok()) << built.status().ToString();
    server_ = std::move(built).value();
    ASSERT_TRUE(server_->RegisterService(std::make_unique<TestEchoService>()).ok());
    Sockaddr any = Sockaddr::Parse("0.0.0.0:0").value();
    ASSERT_TRUE(server_->Listen(any, &server_addr_).ok());
  }
  std::shared_ptr<Messenger> NewClient(const RdmaOptions& o,
                                       std::shared_ptr<RdmaTransportFactory>* factory) {
    *factory = std::make_shared<RdmaTransportFactory>(o);
    MessengerOptions co;
    co.num_reactors = 1;
    co.transport_factory = *factory;
    co.name = "client";
    co.negotiation_timeout = MonoDelta::FromSeconds(120);
    return MessengerBuilder(co).Build().value();
  }
  // The i-th distinct loopback address of the server.
  Sockaddr Remote(int i) const {
    return Sockaddr::Parse("127.0." + std::to_string(i / 250) + "." + std::to_string(i % 250 + 1) +
                           ":" + std::to_string(server_addr_.port()))
        .value();
  }
  // `calls` async echoes per connection to remotes [0, conns), all at once; every response
  // checked.
  void Burst(const std::shared_ptr<Messenger>& client, int conns, int calls, size_t size) {
    const int n = conns * calls;
    std::vector<rtest::EchoRequestPB> reqs(n);
    std::vector<rtest::EchoResponsePB> resps(n);
    std::vector<RpcController> ctls(n);
    CountDownLatch done(n);
    std::vector<rtest::EchoServiceProxy> proxies;
    for (int c = 0; c < conns; c++) proxies.emplace_back(client, Remote(c));
    for (int i = 0; i < n; i++) {
      reqs[i].set_data(Pattern(size + i % 7, i));
      ctls[i].set_timeout(MonoDelta::FromSeconds(120));
      proxies[i % conns].EchoAsync(reqs[i], &resps[i], &ctls[i], [&done] { done.CountDown(); });
    }
    if (!done.WaitFor(MonoDelta::FromSeconds(120))) {
      // What each side holds, to tell a credit stall from a slow machine.
      for (auto* m : {client.get(), server_.get()}) {
        for (const auto& c : m->DumpConnections()) {
          if (c.calls_in_flight == 0 && m == client.get()) continue;
          std::string d =
              c.direction + " " + c.remote + " calls=" + std::to_string(c.calls_in_flight);
          for (auto& [k, v] : c.transport_details) d += " " + k + "=" + v;
          fprintf(stderr, "STUCK %s\n", d.c_str());
        }
      }
      for (auto* f : {server_factory_.get()}) {
        for (auto& x : f->SrqStatsSnapshot()) {
          fprintf(stderr, "SRQ posted=%lu pool=%lu granted=%lu waits=%lu conns=%lu\n",
                  x.posted_receives, x.pool_bytes, x.grants_outstanding, x.credit_waits,
                  x.connections);
        }
      }
      FAIL();
    }
    for (int i = 0; i < n; i++) {
      ASSERT_TRUE(ctls[i].status().ok()) << i << ": " << ctls[i].status().ToString();
      ASSERT_EQ(resps[i].data(), reqs[i].data()) << i;
    }
  }
  static RdmaTransportFactory::SrqSnapshot One(const RdmaTransportFactory& f) {
    auto v = f.SrqStatsSnapshot();
    EXPECT_EQ(v.size(), 1u);
    return v.empty() ? RdmaTransportFactory::SrqSnapshot{} : v[0];
  }
  // Waits until the server's SRQ has no connection and every block is posted again.
  void ExpectAllReturned() {
    RdmaTransportFactory::SrqSnapshot s{};
    for (int i = 0; i < 2000; i++) {
      s = One(*server_factory_);
      if (s.connections == 0 && s.grants_outstanding == 0 &&
          s.posted_receives * 1024 == s.pool_bytes) {
        break;
      }
      SleepFor(MonoDelta::FromMilliseconds(5));
    }
    EXPECT_EQ(s.connections, 0u);
    EXPECT_EQ(s.grants_outstanding, 0u);
    EXPECT_EQ(s.posted_receives * 1024, s.pool_bytes);
  }
  std::string TransportOf(const std::shared_ptr<Messenger>& m) {
    auto conns = m->DumpConnections();
    return conns.empty() ? "none" : conns[0].transport;
  }
  std::shared_ptr<RdmaTransportFactory> server_factory_;
};

TEST_F(SrqTest, EchoesEverySizeClassOverSrqOnBothSides) {
  StartSrvr(Srq(true));
  std::shared_ptr<RdmaTransportFactory> cf;
  auto client = NewClient(Srq(true), &cf);
  rtest::EchoServiceProxy proxy(client, Remote(0));
  for (size_t size : {0, 1, 100, 1000, 1016, 5000, 200000}) {
    rtest::EchoRequestPB req;
    req.set_data(Pattern(size, static_cast<int>(size)));
    rtest::EchoResponsePB resp;
    RpcController ctl;
    ctl.set_timeout(MonoDelta::FromSeconds(60));
    ASSERT_TRUE(proxy.Echo(req, &resp, &ctl).ok()) << size << ": " << ctl.status().ToString();
    ASSERT_EQ(resp.data(), req.data()) << size;
  }
  EXPECT_EQ(TransportOf(client), "rdma");
  EXPECT_EQ(One(*cf).connections, 1u);
  EXPECT_EQ(One(*server_factory_).connections, 1u);
  // The reactor's gauges, as /metrics shows them.
  EntitySnapshot snap;
  server_factory_->metric_registry()->FindOrCreateEntity("rdma_srq", "reactor-0")->ReadInto(&snap);
  std::map<std::string, int64_t> gauges;
  for (const auto& m : snap.metrics) gauges[m.prototype->name] = m.value;
  EXPECT_EQ(gauges["rdma_srq_connections"], 1);
  EXPECT_EQ(gauges["rdma_srq_pool_bytes"], 64 * 1024);
  EXPECT_GE(gauges["rdma_srq_posted_receives"], 60);
  EXPECT_GE(gauges["rdma_srq_grants_outstanding"], 4);
  EXPECT_EQ(gauges.count("rdma_srq_credit_waits"), 1u);
  client->Shutdown();
  ExpectAllReturned();
}

// 1,000 connections on one reactor on each side, one call each at once (a burst from 1,000
// peers with rnr_retry = 0), then a second round; the server's pool stays far below 1,000
// private receive queues' worth.
TEST_F(SrqTest, AThousandConnectionsOnOneReactor) {
  StartSrvr(Srq(true));
  std::shared_ptr<RdmaTransportFactory> cf;
  auto client = NewClient(Srq(true), &cf);
  constexpr int kConns = 1000;
  Burst(client, kConns, 1, 64);
  Burst(client, kConns, 2, 300);
  EXPECT_EQ(client->DumpConnections().size(), static_cast<size_t>(kConns));
  for (const auto& c : client->DumpConnections()) ASSERT_EQ(c.transport, "rdma");
  auto s = One(*server_factory_);
  EXPECT_EQ(s.connections, static_cast<uint64_t>(kConns));
  // Initial grants (4 each) plus the reserve, rounded up to chunks (4,032 + 64 blocks), and a
  // few chunks of growth: on a loaded machine a peer whose calls waited asks for credits, and
  // the pool grows a chunk at a time to grant them.
  constexpr uint64_t kGrowthChunks = 4;
  EXPECT_LE(s.pool_bytes, ((kConns * 4 + 4) / 64 + 1 + kGrowthChunks) * 64 * 1024);
  EXPECT_LE(s.grants_outstanding + 4, s.posted_receives);  // the reserve (4) never granted
  client->Shutdown();
  ExpectAllReturned();
}

// Reclaim: busy peers raise their targets; once idle, each is asked to keep only the floor (3)
// and gives the rest back, so the server's ledger holds exactly 3 per peer; the next burst asks
// for credits again and completes (rnr_retry = 0: no grant ever outran the posted receives);
// then they are reclaimed again. Both sides are SRQ, so each reclaims the other's credits.
TEST_F(SrqTest, IdlePeersGiveCreditsBackAndGetThemAgain) {
  RdmaOptions o = Srq(true);
  o.srq.initial_credits = 8;
  o.srq.floor_credits = 3;
  o.srq.max_credits = 16;
  o.srq.reclaim_after = MonoDelta::FromMilliseconds(50);
  StartSrvr(o);
  std::shared_ptr<RdmaTransportFactory> cf;
  auto client = NewClient(o, &cf);
  constexpr int kConns = 20;
  auto wait_for_floor = [&](const char* round) {
    RdmaTransportFactory::SrqSnapshot s{}, c{};
    for (int i = 0; i < 4000; i++) {
      s = One(*server_factory_);
      c = One(*cf);
      if (s.grants_outstanding == kConns * 3 && c.grants_outstanding == kConns * 3) break;
      SleepFor(MonoDelta::FromMilliseconds(5));
    }
    EXPECT_EQ(s.grants_outstanding, uint64_t{kConns * 3}) << round;
    EXPECT_EQ(c.grants_outstanding, uint64_t{kConns * 3}) << round;
    if (s.grants_outstanding != kConns * 3) {
      for (const auto& x : server_->DumpConnections()) {
        std::string d = x.remote;
        for (auto& [k, v] : x.transport_details) d += " " + k + "=" + v;
        fprintf(stderr, "SERVER %s\n", d.c_str());
      }
    }
    EXPECT_GE(s.reclaims, uint64_t{kConns}) << round;
    EXPECT_GT(s.credits_reclaimed, 0u) << round;
  };
  // Multi-fragment calls (1 KiB buffers), several per peer at once: targets rise above 8. (Not
  // asserted on the ledger right after the burst: a peer whose calls finished early may already
  // have been reclaimed by then on a slow machine.)
  Burst(client, kConns, 6, 3000);
  wait_for_floor("first idle period");
  const uint64_t reclaimed = One(*server_factory_).credits_reclaimed;
  Burst(client, kConns, 6, 3000);
  wait_for_floor("second idle period");
  EXPECT_GT(One(*server_factory_).credits_reclaimed, reclaimed);
  for (const auto& c : client->DumpConnections()) ASSERT_EQ(c.transport, "rdma");
  client->Shutdown();
  ExpectAllReturned();
}

// The SRQ limit event: peers spend the credits they hold while the server's completions are
// stalled (the software backend's fault hook), so posted receives fall below a quarter of the
// pool; the limit event (read from the device's async fd, not a completion) grows the pool by a
// chunk at once; once completions flow again every call completes (rnr_retry = 0).
TEST_F(SrqTest, LimitEventGrowsThePoolWhileCompletionsLag) {
  RdmaOptions o = Srq(true);
  o.srq.chunk_blocks = 16;
  o.srq.reserve = 4;
  o.srq.initial_credits = 8;
  o.srq.max_credits = 8;
  o.srq.reclaim_after = MonoDelta();  // never
  StartSrvr(o);
  std::shared_ptr<RdmaTransportFactory> cf;
  RdmaOptions co = Srq(false);  // private RQ: 8 receive buffers
  // The clients wait for credits while the stall lasts, as long as the pool's growth takes on a
  // loaded machine: not a dead peer.
  co.transport.credit_starved_timeout = MonoDelta::Max();
  auto client = NewClient(co, &cf);
  constexpr int kConns = 14;
  Burst(client, kConns, 1, 64);
  // 14 x 8 grants + the reserve fit in 8 chunks: 128 posted, 112 granted, limit armed at 32.
  auto s = One(*server_factory_);
  ASSERT_EQ(s.pool_bytes, 128u * 1024);
  ASSERT_EQ(s.grants_outstanding, 112u);
  ASSERT_EQ(s.limit_events, 0u);
  const uint64_t growths = s.pool_growths;
  rdma::SoftDevice* dev = server_factory_->Device().value()->soft;
  dev->StallCompletions(true);
  // 10 calls of 2 KB per peer: each peer sends 7 messages (its credits but the last), 98 in all.
  constexpr int kCalls = 10;
  const int n = kConns * kCalls;
  std::vector<rtest::EchoRequestPB> reqs(n);
  std::vector<rtest::EchoResponsePB> resps(n);
  std::vector<RpcController> ctls(n);
  CountDownLatch done(n);
  std::vector<rtest::EchoServiceProxy> proxies;
  for (int c = 0; c < kConns; c++) proxies.emplace_back(client, Remote(c));
  for (int i = 0; i < n; i++) {
    reqs[i].set_data(Pattern(2000, i));  // two messages each (1 KiB buffers): no batching below 7
    ctls[i].set_timeout(MonoDelta::FromSeconds(120));
    proxies[i % kConns].EchoAsync(reqs[i], &resps[i], &ctls[i], [&done] { done.CountDown(); });
  }
  // The chunk is made off the reactor thread and posted when it is ready.
  for (int i = 0; i < 4000; i++) {
    s = One(*server_factory_);
    if (s.limit_events > 0 && s.pool_bytes > 128u * 1024) break;
    SleepFor(MonoDelta::FromMilliseconds(5));
  }
  s = One(*server_factory_);
  if (s.limit_events != 1) {
    for (const auto& x : client->DumpConnections()) {
      std::string d = x.remote + " calls=" + std::to_string(x.calls_in_flight);
      for (auto& [k, v] : x.transport_details) d += " " + k + "=" + v;
      fprintf(stderr, "CLIENT %s\n", d.c_str());
    }
  }
  EXPECT_EQ(s.limit_events, 1u);
  EXPECT_EQ(s.pool_bytes, 144u * 1024);  // one chunk more
  EXPECT_EQ(s.pool_growths, growths + 1);
  EXPECT_EQ(s.background_growths, 1u);
  dev->StallCompletions(false);
  ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(120)));
  for (int i = 0; i < n; i++) {
    ASSERT_TRUE(ctls[i].status().ok()) << i << ": " << ctls[i].status().ToString();
    ASSERT_EQ(resps[i].data(), reqs[i].data()) << i;
  }
  EXPECT_LE(One(*server_factory_).grants_outstanding + 4, One(*server_factory_).posted_receives);
  client->Shutdown();
  ExpectAllReturned();
}

// A small cap: the busy peers ask for more credits than the pool can hold; the pool grows to
// the cap and no further, top-ups wait, every call completes.
TEST_F(SrqTest, PoolGrowsToItsCapAndCallsWaitThenComplete) {
  RdmaOptions so = Srq(true);
  so.srq.chunk_blocks = 16;
  so.srq.max_memory = 64 * 1024;  // 64 blocks of 1 KiB: 4 chunks
  so.srq.initial_credits = 4;
  so.srq.max_credits = 64;
  StartSrvr(so);
  std::shared_ptr<RdmaTransportFactory> cf;
  auto client = NewClient(Srq(true), &cf);
  // The 8 connections first (one small call each): their initial grants grow the pool to 3
  // chunks on the reactor, at set-up. Only then the burst, so the growth its waiting top-ups
  // want is the background kind whatever the timing.
  Burst(client, 8, 1, 64);
  // 3 messages a call: credits run short at once, as a rule on the first burst. Whether top-ups
  // must wait depends on how the peers' sends interleave with the server's completions, which a
  // loaded machine can spread out: a few more bursts (bounded) give the shortage its chance.
  for (int burst = 0; burst < 8; burst++) {
    Burst(client, 8, 100, 2500);
    if (One(*server_factory_).background_growths > 0) break;
  }
  auto s = One(*server_factory_);
  EXPECT_EQ(s.pool_bytes, 64u * 1024);  // at the cap
  EXPECT_EQ(s.pool_growths, 3u);        // and no further
  // Chunks wanted by waiting top-ups were made off the reactor thread.
  EXPECT_GT(s.background_growths, 0u);
  EXPECT_GT(s.credit_waits, 0u);
  EXPECT_LE(s.grants_outstanding, 64u - 4u);
  client->Shutdown();
  ExpectAllReturned();
}

// A pool at its cap can't reserve a new peer's initial credits: that connection stays on TCP
// (counted as `resources`) and its calls work; the ones that fit use the SRQ.
TEST_F(SrqTest, ConnectionsBeyondTheCapStayOnTcp) {
  RdmaOptions so = Srq(true);
  so.srq.chunk_blocks = 16;
  so.srq.max_memory = 32 * 1024;  // 32 blocks: reserve 4 + 7 peers x 4 initial credits
  StartSrvr(so);
  std::shared_ptr<RdmaTransportFactory> cf;
  auto client = NewClient(Srq(true), &cf);
  Burst(client, 10, 1, 64);  // one small call each: no credit requests, so exactly 7 fit
  int rdma = 0;
  for (const auto& c : client->DumpConnections()) rdma += c.transport == "rdma";
  EXPECT_EQ(rdma, 7);
  EXPECT_EQ(server_factory_->fallbacks(rdma::FallbackReason::kResources), 3u);
  EXPECT_EQ(One(*server_factory_).pool_bytes, 32u * 1024);
  client->Shutdown();
  ExpectAllReturned();
}

// One SRQ server, a private-RQ client and an SRQ client at once; and an SRQ client against a
// private-RQ server.
TEST_F(SrqTest, PrivateAndSrqPeersInteroperate) {
  StartSrvr(Srq(true));
  std::shared_ptr<RdmaTransportFactory> f1, f2;
  auto priv = NewClient(Srq(false), &f1);
  auto shared = NewClient(Srq(true), &f2);
  Burst(priv, 20, 10, 1500);
  Burst(shared, 20, 10, 1500);
  EXPECT_EQ(TransportOf(priv), "rdma");
  EXPECT_EQ(TransportOf(shared), "rdma");
  EXPECT_TRUE(f1->SrqStatsSnapshot().empty());
  EXPECT_EQ(One(*server_factory_).connections, 40u);
  priv->Shutdown();
  shared->Shutdown();
  ExpectAllReturned();

  server_->Shutdown();
  StartSrvr(Srq(false));
  std::shared_ptr<RdmaTransportFactory> f3;
  auto shared2 = NewClient(Srq(true), &f3);
  Burst(shared2, 5, 20, 3000);
  EXPECT_EQ(TransportOf(shared2), "rdma");
  EXPECT_TRUE(server_factory_->SrqStatsSnapshot().empty());
  shared2->Shutdown();
}

// Clients torn down with calls in flight: every callback fires once, and the server's SRQ gets
// every block back with no grant left outstanding.
TEST_F(SrqTest, TeardownInFlightReturnsEveryBuffer) {
  StartSrvr(Srq(true));
  std::shared_ptr<RdmaTransportFactory> cf;
  auto client = NewClient(Srq(true), &cf);
  Burst(client, 30, 1, 10);  // connections up
  constexpr int kCalls = 300;
  std::vector<rtest::EchoRequestPB> reqs(kCalls);
  std::vector<rtest::EchoResponsePB> resps(kCalls);
  std::vector<RpcController> ctls(kCalls);
  CountDownLatch done(kCalls);
  std::vector<rtest::EchoServiceProxy> proxies;
  for (int c = 0; c < 30; c++) proxies.emplace_back(client, Remote(c));
  for (int i = 0; i < kCalls; i++) {
    reqs[i].set_data(Pattern(2000, i));
    ctls[i].set_timeout(MonoDelta::FromSeconds(60));
    proxies[i % 30].EchoAsync(reqs[i], &resps[i], &ctls[i], [&done] { done.CountDown(); });
  }
  client->Shutdown();
  ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(60)));
  ExpectAllReturned();
  auto c = One(*cf);
  EXPECT_EQ(c.connections, 0u);
}

// Finding 5 of issue 27: in SRQ mode a device fatal event failed the connections, but the
// factory kept the dead device and each reactor its SRQ context bound to it, so every later
// connection tried the dead device (on hardware: nothing can be created on it) and stayed on
// TCP for good. Now the calls outstanding fail at once with a retriable error, the factory drops
// the device, the reactor drops its context, and a later connection upgrades on a device opened
// afresh (after the open backoff; meanwhile connections stay on TCP, no_device).
TEST_F(SrqTest, ADeviceFatalEventFailsCallsAndLaterConnectionsReopenTheDevice) {
  StartSrvr(Srq(true));
  std::shared_ptr<RdmaTransportFactory> cf;
  auto client = NewClient(Srq(true), &cf);
  Burst(client, 1, 4, 1500);
  ASSERT_EQ(TransportOf(client), "rdma");
  std::shared_ptr<rdma::RdmaDevice> dead = cf->Device().value();
  rdma::SoftDevice* server_dev = server_factory_->Device().value()->soft;
  // Calls outstanding: the server's NIC holds its completions back, so none is answered.
  server_dev->StallCompletions(true);
  constexpr int kCalls = 8;
  std::vector<rtest::EchoRequestPB> reqs(kCalls);
  std::vector<rtest::EchoResponsePB> resps(kCalls);
  std::vector<RpcController> ctls(kCalls);
  CountDownLatch done(kCalls);
  rtest::EchoServiceProxy proxy(client, Remote(0));
  for (int i = 0; i < kCalls; i++) {
    reqs[i].set_data(Pattern(100, i));
    ctls[i].set_timeout(MonoDelta::FromSeconds(120));
    proxy.EchoAsync(reqs[i], &resps[i], &ctls[i], [&done] { done.CountDown(); });
  }
  // Every call on the connection before the device dies: the device's watcher reads the event
  // at once, and a call not yet on the connection would go on a fresh one (TCP) and succeed.
  ASSERT_TRUE(WaitForCondition([&] {
    size_t in_flight = 0;
    for (const auto& c : client->DumpConnections()) in_flight += c.calls_in_flight;
    return in_flight == kCalls;
  }));
  dead->soft->InjectAsyncEvent(rdma::AsyncEventType::kDeviceFatal);
  ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(60)));
  for (int i = 0; i < kCalls; i++) {
    EXPECT_TRUE(ctls[i].status().IsNetworkError()) << i << ": " << ctls[i].status().ToString();
    EXPECT_TRUE(ctls[i].IsRetriable()) << i;
  }
  server_dev->StallCompletions(false);
  // New connections (other server addresses, the same client reactor) until one upgrades.
  int next = 1;
  std::string last;
  ASSERT_TRUE(WaitForCondition([&] {
    const Sockaddr remote = Remote(next++);
    rtest::EchoServiceProxy p(client, remote);
    rtest::EchoRequestPB req;
    req.set_data("reopened");
    rtest::EchoResponsePB resp;
    RpcController ctl;
    ctl.set_timeout(MonoDelta::FromSeconds(60));
    Status s = p.Echo(req, &resp, &ctl);
    if (!s.ok()) {
      last = s.ToString();
      return false;
    }
    for (const auto& c : client->DumpConnections()) {
      if (c.remote == remote.ToString() && c.transport == "rdma") return true;
    }
    SleepFor(MonoDelta::FromMilliseconds(100));  // pacing only
    return false;
  })) << last;
  EXPECT_GE(cf->fallbacks(rdma::FallbackReason::kNoDevice), 1u);
  EXPECT_EQ(cf->fallbacks(rdma::FallbackReason::kResources), 0u);
  std::shared_ptr<rdma::RdmaDevice> fresh = cf->Device().value();
  EXPECT_NE(fresh.get(), dead.get());
  auto srqs = cf->SrqStatsSnapshot();  // the reactor's context now: on the fresh device
  ASSERT_EQ(srqs.size(), 1u);
  EXPECT_EQ(srqs[0].connections, 1u);
  rtest::EchoServiceProxy again(client, Remote(next - 1));  // the upgraded connection
  for (int i = 0; i < 20; i++) {
    rtest::EchoRequestPB req;
    req.set_data(Pattern(3000, i));
    rtest::EchoResponsePB resp;
    RpcController ctl;
    ctl.set_timeout(MonoDelta::FromSeconds(60));
    ASSERT_TRUE(again.Echo(req, &resp, &ctl).ok());
    ASSERT_EQ(resp.data(), req.data());
  }
  client->Shutdown();
}

// Findings 3 and 4 of issue 27, per connection: a server whose host has several RDMA ports (one
// DOWN) and two addresses on the ACTIVE one. Each connection's queue pair is addressed by the
// RoCE v2 GID of the address its TCP bootstrap arrived on, in private-RQ and in SRQ mode (before,
// the GID was chosen once at open: every connection used the same one).
TEST_F(SrqTest, EachConnectionUsesTheV2GidOfItsBootstrapAddress) {
  for (bool srq : {false, true}) {
    RdmaOptions so = Srq(srq);
    so.soft.devices = {{"nic_a", {{false, {"127.0.0.2"}}}},
                       {"nic_b", {{false, {}}, {true, {"127.0.0.2", "127.0.0.3"}}}}};
    StartSrvr(so);
    std::shared_ptr<RdmaTransportFactory> cf;
    auto client = NewClient(Srq(srq), &cf);
    Burst(client, 3, 2, 100);  // to 127.0.0.1, .2 and .3
    std::shared_ptr<rdma::RdmaDevice> dev = server_factory_->Device().value();
    EXPECT_EQ(dev->context->device_name(), "nic_b");
    EXPECT_EQ(dev->context->port().port, 2);
    std::multiset<std::string> gids;
    for (const auto& c : server_->DumpConnections()) {
      EXPECT_EQ(c.transport, "rdma");
      for (const auto& [k, v] : c.transport_details) {
        if (k == "gid") gids.insert(v);
      }
    }
    // 127.0.0.1 is no address of the port: the port's default (its first IPv4-mapped v2 entry).
    const std::multiset<std::string> want = {"::ffff:127.0.0.2 (index 5, RoCE v2)",
                                             "::ffff:127.0.0.2 (index 5, RoCE v2)",
                                             "::ffff:127.0.0.3 (index 7, RoCE v2)"};
    EXPECT_EQ(gids, want) << (srq ? "srq" : "private");
    client->Shutdown();
    server_->Shutdown();
  }
}

}  // namespace
}  // namespace rrpc::rpc
