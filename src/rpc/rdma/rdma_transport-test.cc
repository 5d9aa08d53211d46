// RPC over RDMA on the software backend, end to end through messengers: every size class,
// credits exhausted and recovered, inline sends by size, RNR and QP errors, fallbacks to TCP,
// teardown in flight. Every test runs with rnr_retry = 0: one accounting mistake fails loudly.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "rpc/rdma/bootstrap/gid_choice.h"
#include "rpc/rdma/rdma_factory.h"
#include "rpc/testing/rpc-test-util.h"
#include "util/metrics/histogram_metric.h"
#include "util/metrics/metric_entity.h"
#include "util/metrics/metric_registry.h"

namespace rrpc::rpc {
namespace {

using rdma::FallbackReason;
using rdma::RdmaOptions;
using rdma::RdmaTransportFactory;

RdmaOptions SmallRdma() {
  RdmaOptions o = rdma::SoftRdmaOptions();
  o.endpoint.buffer_size = 4096;
  o.endpoint.receive_buffers = 8;
  o.endpoint.send_buffers = 8;
  o.endpoint.rnr_retry = 0;
  return o;
}

// A peer of the release before RDMA_PROBE_REPLY: its upgrades list no negotiation feature of
// their own and ignore the peer's, so a server's probe never answers and a client's never awaits
// an answer. Everything else is the wrapped factory's.
class OlderReleaseUpgrade final : public TransportUpgrade {
 public:
  explicit OlderReleaseUpgrade(std::unique_ptr<TransportUpgrade> u) : u_(std::move(u)) {}
  bool Prepare(Slice offer, std::function<void()> ready) override {
    return u_->Prepare(offer, std::move(ready));
  }
  bool PrepareAccept(Slice answer, std::function<void()> ready) override {
    return u_->PrepareAccept(answer, std::move(ready));
  }
  std::string Offer() override { return u_->Offer(); }
  std::string Answer(Slice offer) override { return u_->Answer(offer); }
  Status Accept(Slice answer) override { return u_->Accept(answer); }
  std::string Confirmation() override { return u_->Confirmation(); }
  bool AwaitsConfirmation() const override { return u_->AwaitsConfirmation(); }
  Status Confirm(Slice confirmation) override { return u_->Confirm(confirmation); }
  void PeerDeclined() override { u_->PeerDeclined(); }
  bool agreed() const override { return u_->agreed(); }
  Result<std::unique_ptr<Transport>> Upgrade(DetachedStream stream) override {
    return u_->Upgrade(std::move(stream));
  }

 private:
  const std::unique_ptr<TransportUpgrade> u_;
};

class OlderReleaseFactory final : public TransportFactory {
 public:
  explicit OlderReleaseFactory(std::shared_ptr<RdmaTransportFactory> f) : f_(std::move(f)) {}
  std::unique_ptr<Transport> NewServerTransport(Socket accepted) override {
    return f_->NewServerTransport(std::move(accepted));
  }
  Result<std::unique_ptr<Transport>> NewClientTransport(const Sockaddr& remote) override {
    return f_->NewClientTransport(remote);
  }
  std::unique_ptr<TransportUpgrade> NewUpgrade(bool server_side) override {
    return std::make_unique<OlderReleaseUpgrade>(f_->NewUpgrade(server_side));
  }
  std::unique_ptr<TransportUpgrade> NewUpgrade(bool server_side, const Sockaddr& remote) override {
    return std::make_unique<OlderReleaseUpgrade>(f_->NewUpgrade(server_side, remote));
  }
  std::unique_ptr<TransportUpgrade> NewUpgrade(bool server_side, const Sockaddr& remote,
                                               const Sockaddr& local) override {
    return std::make_unique<OlderReleaseUpgrade>(f_->NewUpgrade(server_side, remote, local));
  }
  void UseMetricRegistry(MetricRegistry* registry) override { f_->UseMetricRegistry(registry); }
  void UseDeadPeerSettings(const StreamTransportOptions& stream) override {
    f_->UseDeadPeerSettings(stream);
  }

 private:
  const std::shared_ptr<RdmaTransportFactory> f_;
};

class RdmaTransportTest : public RpcTestBase {
 protected:
  void Start(RdmaOptions server, RdmaOptions client, bool server_rdma = true,
             bool client_rdma = true) {
    MessengerOptions so, co;
    so.service_queue_length = 1024;  // bursts here test credits, not the service queue
    // One connection per test (the checks below count them): large calls share it.
    co.bulk_connection_bytes = 0;
    if (server_rdma) {
      server_factory_ = std::make_shared<RdmaTransportFactory>(server, server_device_opener_);
      so.transport_factory = server_factory_;
    }
    if (client_rdma) {
      client_factory_ = std::make_shared<RdmaTransportFactory>(client);
      co.transport_factory = client_factory_;
    }
    StartServer(so);
    StartClient(co);
  }
  Status Echo(const std::string& data, std::string* out = nullptr) {
    rtest::EchoRequestPB req;
    req.set_data(data);
    rtest::EchoResponsePB resp;
    RpcController ctl;
    ctl.set_timeout(MonoDelta::FromSeconds(60));
    Status s = Proxy().Echo(req, &resp, &ctl);
    if (s.ok() && resp.data() != data) return Status::Corruption("echo differs");
    if (out) *out = resp.data();
    return s;
  }
  std::string ClientTransport() {
    auto conns = client_->DumpConnections();
    return conns.size() == 1 ? conns[0].transport : "none";
  }
  std::shared_ptr<RdmaTransportFactory> server_factory_, client_factory_;
  // How the server's factory opens its device (tests that make it fail wrap the default).
  RdmaTransportFactory::DeviceOpener server_device_opener_ = RdmaTransportFactory::OpenDevice;
};

TEST_F(RdmaTransportTest, EchoesEverySizeClass) {
  Start(SmallRdma(), SmallRdma());
  // Inline (tiny), one buffer, a few fragments, many fragments.
  for (size_t size : {0, 1, 100, 3000, 4096, 20000, 1 << 20}) {
    Status s = Echo(Pattern(size, static_cast<int>(size)));
    ASSERT_TRUE(s.ok()) << size << ": " << s.ToString();
  }
  EXPECT_EQ(ClientTransport(), "rdma");
  auto conns = server_->DumpConnections();
  ASSERT_EQ(conns.size(), 1u);
  EXPECT_EQ(conns[0].transport, "rdma");
  bool has_credits = false;
  for (const auto& [k, v] : conns[0].transport_details) has_credits |= (k == "credits");
  EXPECT_TRUE(has_credits);
  EXPECT_EQ(client_factory_->fallbacks(FallbackReason::kDisabled), 0u);
}

TEST_F(RdmaTransportTest, EchoesWithBusyPolling) {
  RdmaOptions o = SmallRdma();
  o.transport.busy_poll = true;
  Start(o, o);
  for (size_t size : {1, 5000, 100000}) {
    ASSERT_TRUE(Echo(Pattern(size, 3)).ok()) << size;
  }
  EXPECT_EQ(ClientTransport(), "rdma");
}

TEST_F(RdmaTransportTest, SidecarsUpTo8MiBRoundTrip) {
  Start(SmallRdma(), SmallRdma());
  const std::vector<size_t> sizes = {0, 1, 236, 4096, 65536 + 3, 1 << 20, 8 << 20};
  std::vector<std::string> payloads;
  for (size_t i = 0; i < sizes.size(); i++) payloads.push_back(Pattern(sizes[i], i));
  rtest::EchoRequestPB req;
  req.set_data("with sidecars");
  rtest::EchoResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(120));
  for (const std::string& p : payloads) ctl.AddOutboundSidecar(Slice(p));
  Status s = Proxy().Echo(req, &resp, &ctl);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(payloads.size(), ctl.num_inbound_sidecars());
  for (size_t i = 0; i < payloads.size(); i++) {
    EXPECT_TRUE(ctl.inbound_sidecar(i) == Slice(payloads[i])) << "sidecar " << i;
  }
  EXPECT_EQ(ClientTransport(), "rdma");
}

// Far more calls in flight than either side has receive buffers: senders wait for grants
// (never RNR: rnr_retry is 0), and every response comes back right.
TEST_F(RdmaTransportTest, ABurstExhaustsCreditsAndRecovers) {
  RdmaOptions o = SmallRdma();
  o.endpoint.receive_buffers = 4;
  o.endpoint.send_buffers = 3;
  Start(o, o);
  constexpr int kCalls = 300;
  std::vector<rtest::EchoRequestPB> reqs(kCalls);
  std::vector<rtest::EchoResponsePB> resps(kCalls);
  std::vector<RpcController> ctls(kCalls);
  CountDownLatch done(kCalls);
  auto proxy = Proxy();
  for (int i = 0; i < kCalls; i++) {
    reqs[i].set_data(Pattern(1 + (i * 977) % 9000, i));
    ctls[i].set_timeout(MonoDelta::FromSeconds(120));
    proxy.EchoAsync(reqs[i], &resps[i], &ctls[i], [&done] { done.CountDown(); });
  }
  ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(120)));
  for (int i = 0; i < kCalls; i++) {
    ASSERT_TRUE(ctls[i].status().ok()) << i << ": " << ctls[i].status().ToString();
    EXPECT_EQ(resps[i].data(), reqs[i].data()) << i;
  }
  EXPECT_EQ(ClientTransport(), "rdma");
}

// brpc's inline measurement (PR 3569): with a cap of 236 bytes, echo pairs around the cap; the
// counters show every send of 236 bytes or less went inline and none above.
TEST_F(RdmaTransportTest, EverySendUpToTheInlineCapGoesInlineAndNoneAbove) {
  RdmaOptions o = SmallRdma();
  o.endpoint.max_inline = 236;
  Start(o, o);
  const std::pair<int, int> pairs[] = {{64, 38},   {128, 102}, {200, 174}, {232, 206},
                                       {241, 215}, {267, 241}, {512, 486}};
  for (auto [req_size, resp_size] : pairs) {
    rtest::EchoRequestPB req;
    req.set_data(Pattern(req_size, 1));
    rtest::EchoResponsePB resp;
    RpcController ctl;
    ctl.set_timeout(MonoDelta::FromSeconds(60));
    // The response is a sidecar of resp_size bytes (the echo of the request's own).
    std::string back = Pattern(resp_size, 2);
    service_->set_echo_hook([back](const rtest::EchoRequestPB&, RpcContext* c) {
      BlockRef b = Block::Allocate(back.size());
      memcpy(b->data(), back.data(), back.size());
      c->AddOutboundSidecar(BlockSlice{b, Slice(b->data(), back.size())});
    });
    ASSERT_TRUE(Proxy().Echo(req, &resp, &ctl).ok());
  }
  for (auto* f : {client_factory_.get(), server_factory_.get()}) {
    auto sends = f->metrics();
    Histogram in = sends.inline_send_bytes->Snapshot();
    Histogram posted = sends.posted_send_bytes->Snapshot();
    EXPECT_GT(in.count(), 0u);
    EXPECT_GT(posted.count(), 0u);
    EXPECT_LE(in.max(), 236u);
    EXPECT_GT(posted.min(), 236u);
  }
}

TEST_F(RdmaTransportTest, InlineOffSendsNothingInline) {
  RdmaOptions o = SmallRdma();
  o.transport.use_inline = false;
  Start(o, o);
  ASSERT_TRUE(Echo("small").ok());
  EXPECT_EQ(client_factory_->metrics().inline_send_bytes->Snapshot().count(), 0u);
  EXPECT_GT(client_factory_->metrics().posted_send_bytes->Snapshot().count(), 0u);
}

TEST_F(RdmaTransportTest, FallsBackToTcpWhenTheServerHasRdmaOff) {
  Start(SmallRdma(), SmallRdma(), /*server_rdma=*/false);
  ASSERT_TRUE(Echo("over tcp").ok());
  EXPECT_EQ(ClientTransport(), "tcp");
  EXPECT_EQ(client_factory_->fallbacks(FallbackReason::kDisabled), 1u);
}

TEST_F(RdmaTransportTest, StaysOnTcpWhenTheClientHasRdmaOff) {
  RdmaOptions off = SmallRdma();
  off.enabled = false;
  Start(SmallRdma(), off);
  ASSERT_TRUE(Echo("over tcp").ok());
  EXPECT_EQ(ClientTransport(), "tcp");
  auto conns = server_->DumpConnections();
  ASSERT_EQ(conns.size(), 1u);
  EXPECT_EQ(conns[0].transport, "tcp");
}

TEST_F(RdmaTransportTest, FallsBackToTcpWhenTheServerHasNoDevice) {
  RdmaOptions verbs = SmallRdma();
  verbs.backend = rdma::RdmaBackend::kVerbs;
  verbs.verbs.device = "no-such-device";
  Start(verbs, SmallRdma());
  ASSERT_TRUE(Echo("over tcp").ok());
  EXPECT_EQ(ClientTransport(), "tcp");
  EXPECT_EQ(server_factory_->fallbacks(FallbackReason::kNoDevice), 1u);
  EXPECT_EQ(client_factory_->fallbacks(FallbackReason::kNoDevice), 1u);
}

TEST_F(RdmaTransportTest, FallsBackToTcpWhenRegistrationFails) {
  Start(SmallRdma(), SmallRdma());
  // Open the client's device, then make its next registration fail.
  ASSERT_TRUE(client_factory_->Device().ok());
  client_factory_->Device().value()->soft->FailRegistrations(1);
  ASSERT_TRUE(Echo("over tcp").ok());
  EXPECT_EQ(ClientTransport(), "tcp");
  EXPECT_EQ(client_factory_->fallbacks(FallbackReason::kResources), 1u);
}

// A peer whose accounting is wrong (it announces credits it never posted: its device loses 3 of
// the 4 receives it posts, and its completions stall so it reposts nothing): the sender meets
// RNR, its QP goes to ERR at once (rnr_retry = 0), and its calls fail with a network error
// instead of hanging.
TEST_F(RdmaTransportTest, RnrFromABrokenPeerFailsCallsWithANetworkError) {
  RdmaOptions server = SmallRdma();
  server.endpoint.receive_buffers = 4;
  Start(server, SmallRdma());
  ASSERT_TRUE(server_factory_->Device().ok());
  server_factory_->Device().value()->soft->DiscardReceives(3);
  ASSERT_TRUE(Echo("first").ok());  // connected over RDMA
  ASSERT_EQ(ClientTransport(), "rdma");
  server_factory_->Device().value()->soft->StallCompletions(true);
  constexpr int kCalls = 10;
  std::vector<rtest::EchoRequestPB> reqs(kCalls);
  std::vector<rtest::EchoResponsePB> resps(kCalls);
  std::vector<RpcController> ctls(kCalls);
  CountDownLatch done(kCalls);
  auto proxy = Proxy();
  for (int i = 0; i < kCalls; i++) {
    reqs[i].set_data(Pattern(6000, i));  // two messages each: more than the 4 posted
    ctls[i].set_timeout(MonoDelta::FromSeconds(60));
    proxy.EchoAsync(reqs[i], &resps[i], &ctls[i], [&done] { done.CountDown(); });
  }
  // The first failure ends the broken connection. Calls the proxy issued after it go out on a
  // new connection to the same (still stalled) server, so the stall is lifted once the first call
  // has failed: those are then answered, or fail the same way, and none waits for its timeout.
  // (A slow machine can still be issuing calls when the first connection fails.)
  ASSERT_TRUE(WaitForCondition([&] { return done.count() < kCalls; }));
  server_factory_->Device().value()->soft->StallCompletions(false);
  ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(60)));
  int network_errors = 0;
  for (int i = 0; i < kCalls; i++) {
    if (ctls[i].status().IsNetworkError()) ++network_errors;
    EXPECT_TRUE(ctls[i].status().ok() || ctls[i].status().IsNetworkError())
        << ctls[i].status().ToString();
  }
  EXPECT_GT(network_errors, 0);
}

// Calls in flight when the client shuts down: every callback fires exactly once, no buffer is
// lost (ASAN would see it).
TEST_F(RdmaTransportTest, TeardownWithCallsInFlightFiresEveryCallbackOnce) {
  Start(SmallRdma(), SmallRdma());
  ASSERT_TRUE(Echo("warm").ok());
  BlockEchoes();
  constexpr int kCalls = 40;
  std::vector<rtest::EchoRequestPB> reqs(kCalls);
  std::vector<rtest::EchoResponsePB> resps(kCalls);
  std::vector<RpcController> ctls(kCalls);
  std::atomic<int> fired{0};
  CountDownLatch done(kCalls);
  auto proxy = Proxy();
  for (int i = 0; i < kCalls; i++) {
    reqs[i].set_data(Pattern(100 + i * 300, i));
    ctls[i].set_timeout(MonoDelta::FromSeconds(60));
    proxy.EchoAsync(reqs[i], &resps[i], &ctls[i], [&] {
      fired.fetch_add(1);
      done.CountDown();
    });
  }
  ASSERT_TRUE(gate_.WaitForEntered(1));
  client_->Shutdown();
  // Shutdown() returned: the client's reactors are joined and its calls finished, so no callback
  // runs any more. The count is final: a second run of any callback would be in it.
  EXPECT_EQ(fired.load(), kCalls);
  ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(60)));
  gate_.Open();
  for (int i = 0; i < kCalls; i++) EXPECT_FALSE(ctls[i].status().ok());
}

// The server goes away mid-call: the client's calls fail with a network error, promptly.
TEST_F(RdmaTransportTest, PeerDeathMidCallFailsTheCall) {
  Start(SmallRdma(), SmallRdma());
  ASSERT_TRUE(Echo("warm").ok());
  BlockEchoes();
  rtest::EchoRequestPB req;
  req.set_data("doomed");
  rtest::EchoResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(60));
  CountDownLatch done(1);
  Proxy().EchoAsync(req, &resp, &ctl, [&done] { done.CountDown(); });
  ASSERT_TRUE(gate_.WaitForEntered(1));
  server_factory_->Device().value()->soft->DropPeers();  // the server's NIC vanishes...
  gate_.Open();                                          // (its response can't leave any more)
  server_->Shutdown();                                   // ...and so does the server
  ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(30)));
  EXPECT_TRUE(ctl.status().IsNetworkError()) << ctl.status().ToString();
}

// Finding 7 of issue 27: a path that lets the queue pairs connect but carries no packet (UDP
// 4791 filtered, a RoCE v1/v2 mismatch). Without the path probe every connection upgraded and
// then failed as its QP's retries ran out, and so did every reconnect. With it the client finds
// the dead path before following the server and tells the server (its confirmation) that it
// stays on TCP: that very connection carries its calls over TCP, counted as "path" on both
// sides, and the client remembers the server, so its next connections offer a fallback.
TEST_F(RdmaTransportTest, ADeadPathKeepsTheConnectionOnTcpAndLaterOnesOfferFallback) {
  RdmaOptions o = SmallRdma();
  o.probe_path = true;
  Start(o, o);
  ASSERT_TRUE(client_factory_->Device().ok());
  client_factory_->Device().value()->soft->DropAllPackets(true);
  for (int i = 0; i < 3; i++) {
    Status s = Echo("call " + std::to_string(i));
    ASSERT_TRUE(s.ok()) << i << ": " << s.ToString();
  }
  std::vector<ConnectionInfo> conns = client_->DumpConnections();
  ASSERT_EQ(conns.size(), 1u);
  EXPECT_EQ(conns[0].transport, "tcp");
  EXPECT_EQ(client_factory_->fallbacks(FallbackReason::kPath), 1u);
  EXPECT_EQ(server_factory_->fallbacks(FallbackReason::kPath), 1u);
  conns = server_->DumpConnections();
  ASSERT_EQ(conns.size(), 1u);
  EXPECT_EQ(conns[0].transport, "tcp");

  // A new client messenger on the same factory: the dead path is remembered, no probe again.
  client_->Shutdown();
  MessengerOptions co;
  co.transport_factory = client_factory_;
  StartClient(co);
  ASSERT_TRUE(Echo("again").ok());
  EXPECT_EQ(ClientTransport(), "tcp");
  // Counted in the new messenger's registry (the factory's metrics follow it).
  EXPECT_EQ(client_factory_->fallbacks(FallbackReason::kPath), 1u);
  EXPECT_TRUE(
      WaitForCondition([&] { return server_factory_->fallbacks(FallbackReason::kPath) == 2; }));
}

// Finding 3 of issue 37: on RoCE v2 the UDP source port, which ECMP and LAG hash, comes from the
// GRH's flow label or, with none, from the two QP numbers (mlx5). The probes had their own QP
// numbers and no label, so on a fabric with one broken path of two a connection's probe could
// cross while its data was lost: the connection moved to RDMA and its calls failed. Now a
// connection's data QPs and probes carry one flow label, so each connection either moves to
// RDMA and its calls succeed, or stays on TCP.
TEST_F(RdmaTransportTest, TheProbeTakesTheDataQueuePairsEcmpPath) {
  RdmaOptions o = SmallRdma();
  o.probe_path = true;
  o.probe_timeout = MonoDelta::FromMilliseconds(300);
  o.dead_path_memory = MonoDelta::FromNanoseconds(0);  // every connection probes
  Start(o, o);
  ASSERT_TRUE(client_factory_->Device().ok());
  ASSERT_TRUE(server_factory_->Device().ok());
  client_factory_->Device().value()->soft->BreakEcmpPath(2, 0);
  server_factory_->Device().value()->soft->BreakEcmpPath(2, 0);
  MessengerOptions co;
  co.transport_factory = client_factory_;
  co.bulk_connection_bytes = 0;
  int rdma = 0, tcp = 0;
  for (int i = 0; i < 16; i++) {
    client_->Shutdown();
    StartClient(co);
    for (int j = 0; j < 3; j++) {
      Status s = Echo(Pattern(3000, j));
      ASSERT_TRUE(s.ok()) << "connection " << i << " call " << j << ": " << s.ToString();
    }
    (ClientTransport() == "rdma" ? rdma : tcp)++;
  }
  // Both paths were taken: some connections crossed, the others stayed on TCP.
  EXPECT_GT(rdma, 0);
  EXPECT_GT(tcp, 0);
}

// Finding 3 of issue 37, its second half: a path that loses large packets from the server to
// the client (an MTU black hole in one direction) while small ones and everything the other way
// cross. The probe's message of a path MTU went client to server only and the server's side sent
// acknowledgements, so the probe passed, the connection moved to RDMA and its first response
// larger than the hole failed it (`RDMA send failed (transport retry exceeded)` on the server).
// Now the server's probe answers the client's message with one of the same size, which the
// client awaits: the connection stays on TCP (`path`), its calls succeed, and the server's
// address is remembered as a dead path. Both receive-queue modes.
TEST_F(RdmaTransportTest, APathLosingLargePacketsTowardTheClientStaysOnTcp) {
  for (bool srq : {false, true}) {
    SCOPED_TRACE(srq ? "srq" : "private");
    RdmaOptions o = SmallRdma();
    o.probe_path = true;
    o.use_srq = srq;
    o.endpoint.ack_timeout = 10;  // a lost send fails after 8 x 4 ms
    Start(o, o);
    ASSERT_TRUE(client_factory_->Device().ok());
    ASSERT_TRUE(server_factory_->Device().ok());
    // Whichever entry the connection chooses: every one of the client's port.
    for (const rdma::GidEntry& e : client_factory_->Device().value()->context->port().gid_table) {
      server_factory_->Device().value()->soft->DropLargePacketsToward(e.gid, 1024);
    }
    for (int i = 0; i < 3; i++) {
      Status s = Echo(Pattern(3000, i));
      ASSERT_TRUE(s.ok()) << i << ": " << s.ToString();
    }
    EXPECT_EQ(ClientTransport(), "tcp");
    EXPECT_EQ(client_factory_->fallbacks(FallbackReason::kPath), 1u);
    EXPECT_TRUE(
        WaitForCondition([&] { return server_factory_->fallbacks(FallbackReason::kPath) == 1; }));

    // A new client messenger on the same factory: the dead path is remembered, no probe again.
    client_->Shutdown();
    MessengerOptions co;
    co.transport_factory = client_factory_;
    StartClient(co);
    ASSERT_TRUE(Echo(Pattern(3000, 3)).ok());
    EXPECT_EQ(ClientTransport(), "tcp");
    EXPECT_EQ(client_factory_->fallbacks(FallbackReason::kPath), 1u);
    client_->Shutdown();
    server_->Shutdown();
  }
}

// Compatibility of the probe's answer (RDMA_PROBE_REPLY, agreed in the negotiation): a client
// with it and a server of the release before, and the other way round, still upgrade, the probe
// checking the client-to-server direction only, as before. Both receive-queue modes.
TEST_F(RdmaTransportTest, APeerOfTheReleaseBeforeProbeAnswersStillUpgrades) {
  for (bool srq : {false, true}) {
    for (bool older_server : {true, false}) {
      SCOPED_TRACE(std::string(srq ? "srq" : "private") +
                   (older_server ? ", older server" : ", older client"));
      RdmaOptions o = SmallRdma();
      o.probe_path = true;
      o.use_srq = srq;
      server_factory_ = std::make_shared<RdmaTransportFactory>(o);
      client_factory_ = std::make_shared<RdmaTransportFactory>(o);
      MessengerOptions so, co;
      co.bulk_connection_bytes = 0;
      so.transport_factory = server_factory_;
      co.transport_factory = client_factory_;
      if (older_server) {
        so.transport_factory = std::make_shared<OlderReleaseFactory>(server_factory_);
      } else {
        co.transport_factory = std::make_shared<OlderReleaseFactory>(client_factory_);
      }
      StartServer(so);
      StartClient(co);
      for (int i = 0; i < 3; i++) {
        Status s = Echo(Pattern(3000, i));
        ASSERT_TRUE(s.ok()) << i << ": " << s.ToString();
      }
      EXPECT_EQ(ClientTransport(), "rdma");
      EXPECT_EQ(client_factory_->fallbacks(FallbackReason::kPath), 0u);
      EXPECT_EQ(server_factory_->fallbacks(FallbackReason::kPath), 0u);
      client_->Shutdown();
      server_->Shutdown();
    }
  }
}

// The probe on a working path: the client confirms, both sides move to RDMA together, and calls
// follow at once (the server reads the confirmation before any RDMA message).
TEST_F(RdmaTransportTest, AProbedPathUpgradesInPrivateAndSrqMode) {
  for (bool srq : {false, true}) {
    SCOPED_TRACE(srq ? "srq" : "private");
    RdmaOptions o = SmallRdma();
    o.probe_path = true;
    o.use_srq = srq;
    Start(o, o);
    for (int i = 0; i < 20; i++) ASSERT_TRUE(Echo(Pattern(100 * i, i)).ok()) << i;
    EXPECT_EQ(ClientTransport(), "rdma");
    EXPECT_EQ(client_factory_->fallbacks(FallbackReason::kPath), 0u);
    EXPECT_EQ(server_factory_->fallbacks(FallbackReason::kPath), 0u);
    client_->Shutdown();
    server_->Shutdown();
  }
}

// Finding 5 of issue 27, private receive queues: a dead device completes nothing, so only its
// async event tells. Before, a private-RQ connection read no async events and stayed open
// (here, where the soft device still works, forever), and the factory kept using the device.
// Now the event fails the connection at once on both sides; the server's factory drops the
// device, so the next connection stays on TCP (no_device), and reopens it after its backoff.
TEST_F(RdmaTransportTest, ADeviceFatalEventClosesPrivateRqConnectionsAtOnce) {
  Start(SmallRdma(), SmallRdma());
  ASSERT_TRUE(Echo("before").ok());
  ASSERT_EQ(ClientTransport(), "rdma");
  server_factory_->Device().value()->soft->InjectAsyncEvent(rdma::AsyncEventType::kDeviceFatal);
  EXPECT_TRUE(WaitForCondition([&] { return server_->DumpConnections().empty(); }));
  EXPECT_TRUE(WaitForCondition([&] { return client_->DumpConnections().empty(); }));
  ASSERT_TRUE(Echo("after").ok());
  EXPECT_EQ(ClientTransport(), "tcp");
  EXPECT_EQ(server_factory_->fallbacks(FallbackReason::kNoDevice), 1u);
  MessengerOptions co;
  co.transport_factory = client_factory_;
  EXPECT_TRUE(WaitForCondition([&] {  // a fresh connection now and then, until one upgrades
    client_->Shutdown();
    StartClient(co);
    if (!Echo("reopened").ok()) return false;
    if (ClientTransport() == "rdma") return true;
    SleepFor(MonoDelta::FromMilliseconds(100));  // pacing only
    return false;
  }));
}

// Finding 1 of issue 37: a device fatal event while no connection watched the async fd (an idle
// process) was never read; every later connection then failed to create its QP (`resources`;
// since 656c019, whose EIO marks the device failed, the first one). Now one watcher per device
// reads its events from open on, connections or none: the factory lets the dead device go
// without a connection asking, reopens it after its backoff, and no connection meets it.
TEST_F(RdmaTransportTest, ADeviceFatalWhileIdleIsReadAndTheDeviceReopened) {
  Start(SmallRdma(), SmallRdma());
  ASSERT_TRUE(Echo("before").ok());
  ASSERT_EQ(ClientTransport(), "rdma");
  client_->Shutdown();
  ASSERT_TRUE(WaitForCondition([&] { return server_->DumpConnections().empty(); }));
  // Idle: no connection uses the server's device.
  std::shared_ptr<rdma::RdmaDevice> dead = server_factory_->Device().value();
  dead->soft->InjectAsyncEvent(rdma::AsyncEventType::kDeviceFatal);
  ASSERT_TRUE(WaitForCondition(
      [&] {
        Result<std::shared_ptr<rdma::RdmaDevice>> now = server_factory_->Device();
        return !now.ok() || now->get() != dead.get();
      },
      MonoDelta::FromSeconds(20)))
      << "the factory still serves the device that reported a fatal error while idle";
  MessengerOptions co;
  co.transport_factory = client_factory_;
  EXPECT_TRUE(WaitForCondition([&] {  // a fresh connection now and then, until one upgrades
    client_->Shutdown();
    StartClient(co);
    if (!Echo("reopened").ok()) return false;
    if (ClientTransport() == "rdma") return true;
    SleepFor(MonoDelta::FromMilliseconds(100));  // pacing only
    return false;
  }));
  EXPECT_EQ(server_factory_->fallbacks(FallbackReason::kResources), 0u);  // none met it
}

// Finding 4 of issue 37 (addresses): the port's LID and GID table were read once, at open; their
// change events were dropped, so a connection made after a new LID or address carried the old
// LID and could not use the new address's GID. Now the device's watcher reads the events, the
// context reads its port again, and what is made after uses the port as it is.
TEST_F(RdmaTransportTest, ANewLidAndAddressReachWhatIsMadeAfterTheirEvents) {
  Start(SmallRdma(), SmallRdma());
  std::shared_ptr<rdma::RdmaDevice> dev = client_factory_->Device().value();
  const Sockaddr added = Sockaddr::Parse("10.11.12.13:0").value();
  dev->soft->SetLid(7);
  ASSERT_TRUE(dev->soft->SetPortAddresses({"10.11.12.13"}).ok());
  ASSERT_TRUE(WaitForCondition(
      [&] {
        const rdma::PortInfo port = dev->context->port();
        return port.lid == 7 && rdma::TableHoldsAddress(port.gid_table, added);
      },
      MonoDelta::FromSeconds(20)))
      << "the port is still as at open: LID " << dev->context->port().lid << ", "
      << dev->context->port().gid_table.size() << " GID entries";
  // A connection bootstrapped from the new address uses its RoCE v2 GID; every QP the new LID.
  const rdma::GidEntry gid = rdma::ConnectionGid(dev->context->port(), added, 0);
  rdma::Gid want{};
  ASSERT_TRUE(rdma::GidOfAddress(added, &want));
  EXPECT_EQ(gid.gid, want);
  EXPECT_EQ(gid.type, rdma::GidType::kRoceV2);
  rdma::EndpointOptions eo = SmallRdma().endpoint;
  auto ep = rdma::RdmaEndpoint::Create(dev->context.get(), dev->pd.get(), eo).value();
  EXPECT_EQ(ep->address().lid, 7);
  ep.reset();
  ASSERT_TRUE(Echo("after").ok());
  EXPECT_EQ(ClientTransport(), "rdma");
}

// Finding 4 of issue 37 (link flap): a peer contacted during a link flap stayed on TCP for
// dead_path_memory (10 min): its path probe failed, and PORT_ACTIVE did not clear the dead path
// it left. Now no dead path is remembered while our port is down (connections stay on TCP,
// no_device), those remembered are forgotten when it comes up, and the next connection upgrades.
TEST_F(RdmaTransportTest, APeerContactedDuringALinkFlapUpgradesOnceThePortIsUp) {
  RdmaOptions o = SmallRdma();
  o.probe_path = true;
  Start(o, o);
  std::shared_ptr<rdma::RdmaDevice> dev = client_factory_->Device().value();
  // The link dies: packets are lost before the port reports itself down, and a probe fails.
  dev->soft->DropAllPackets(true);
  ASSERT_TRUE(Echo("link dying").ok());
  EXPECT_EQ(ClientTransport(), "tcp");
  EXPECT_EQ(client_factory_->fallbacks(FallbackReason::kPath), 1u);
  dev->soft->SetPortActive(false);
  dev->soft->DropAllPackets(false);  // the port's state says it from now on
  MessengerOptions co;
  co.transport_factory = client_factory_;
  client_->Shutdown();
  StartClient(co);
  ASSERT_TRUE(Echo("port down").ok());
  EXPECT_EQ(ClientTransport(), "tcp");
  dev->soft->SetPortActive(true);
  EXPECT_TRUE(WaitForCondition(
      [&] {  // a fresh connection now and then, until one upgrades
        client_->Shutdown();
        StartClient(co);
        if (!Echo("up again").ok()) return false;
        if (ClientTransport() == "rdma") return true;
        SleepFor(MonoDelta::FromMilliseconds(100));  // pacing only
        return false;
      },
      MonoDelta::FromSeconds(20)))
      << "the peer stays on TCP after the port came up (its dead path is remembered)";
}

// Finding 3 of issue 27: both ends of a RoCE connection must use GIDs of one type (a v2 QP
// ignores v1 frames). Before, the bootstrap did not say which type a side used, so a v1/v2 pair
// upgraded and then carried nothing. Now the server sees the client's type and refuses the
// mismatch: the connection stays on TCP, counted as "gid_type" on both sides.
TEST_F(RdmaTransportTest, AGidTypeMismatchKeepsTheConnectionOnTcp) {
  Start(SmallRdma(), SmallRdma());
  ASSERT_TRUE(server_factory_->Device().ok());
  // The server's port on its RoCE v1 entry of the same address; the client's on v2.
  ASSERT_TRUE(server_factory_->Device().value()->soft->UseGidIndex(2).ok());
  ASSERT_TRUE(Echo("over tcp").ok());
  EXPECT_EQ(ClientTransport(), "tcp");
  EXPECT_EQ(server_factory_->fallbacks(FallbackReason::kGidType), 1u);
  EXPECT_EQ(client_factory_->fallbacks(FallbackReason::kGidType), 1u);
}

// Finding 4 of issue 27: a device that failed to open (a driver loading late, a port coming up)
// was never tried again: every later connection stayed on TCP for the life of the process. Now
// the factory tries again after a backoff (1 s, doubling), and a later connection upgrades.
TEST_F(RdmaTransportTest, AFailedDeviceOpenIsTriedAgainAfterABackoff) {
  // The server's first device open fails (as if no device were there); later ones succeed.
  auto failing_opens = std::make_shared<std::atomic<int>>(1);
  server_device_opener_ = [failing_opens](
                              const RdmaOptions& options,
                              const Sockaddr& local) -> Result<std::unique_ptr<rdma::RdmaDevice>> {
    if (failing_opens->fetch_sub(1) > 0) return Status::NotFound("no RDMA device (test)");
    return RdmaTransportFactory::OpenDevice(options, local);
  };
  Start(SmallRdma(), SmallRdma());
  ASSERT_TRUE(Echo("over tcp").ok());
  EXPECT_EQ(ClientTransport(), "tcp");
  EXPECT_EQ(server_factory_->fallbacks(FallbackReason::kNoDevice), 1u);
  MessengerOptions co;
  co.transport_factory = client_factory_;
  // A fresh connection now and then until one upgrades (after the server's backoff).
  EXPECT_TRUE(WaitForCondition([&] {
    client_->Shutdown();
    StartClient(co);
    if (!Echo("again").ok()) return false;
    if (ClientTransport() == "rdma") return true;
    SleepFor(MonoDelta::FromMilliseconds(100));  // pacing only
    return false;
  }));
}

// Not a check: the connect cost of the path probe (docs/rdma.md, "The path probe"), by
// alternating rounds of 200 fresh client messengers each: the time of each one's first call
// (TCP connect, negotiation, bootstrap, the probe when on, the call).
TEST_F(RdmaTransportTest, DISABLED_MeasureFirstCallWithAndWithoutPathProbe) {
  for (int round = 0; round < 6; round++) {
    for (bool probe : {false, true}) {
      RdmaOptions o = SmallRdma();
      o.probe_path = probe;
      Start(o, o);
      const int kConns = 200;
      std::vector<double> us;
      for (int i = 0; i < kConns; i++) {
        MessengerOptions co;
        co.transport_factory = client_factory_;
        client_->Shutdown();
        StartClient(co);
        MonoTime start = MonoTime::Now();
        ASSERT_TRUE(Echo("x").ok());
        us.push_back((MonoTime::Now() - start).ToSeconds() * 1e6);
        ASSERT_EQ(ClientTransport(), "rdma");
      }
      std::sort(us.begin(), us.end());
      double sum = 0;
      for (double u : us) sum += u;
      printf("RESULT probe=%d first_call_us mean=%.1f p50=%.1f p90=%.1f\n", probe, sum / us.size(),
             us[us.size() / 2], us[us.size() * 9 / 10]);
      client_->Shutdown();
      server_->Shutdown();
    }
  }
}

}  // namespace
}  // namespace rrpc::rpc
