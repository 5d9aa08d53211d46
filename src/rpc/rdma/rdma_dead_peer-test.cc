// Dead peers over RDMA on the software backend, private receive queues and SRQ: a path that
// starts dropping every packet (SoftDevice::DropAllPackets on both devices) with 64 calls
// outstanding. What notices it, with default messenger options:
//  - the client: its ping (a control frame sent after ping_after of silence with calls
//    outstanding) goes out as an RDMA send, is never acknowledged, and fails once the queue
//    pair's retries run out (4.096 us x 2^timeout x (retry_cnt + 1)); the connection closes and
//    every call fails with a retriable NetworkError;
//  - the server: its responses fail the same way, and it closes its side;
//  - a side whose messages wait for credits (so it can send nothing, the ping included): no grant
//    for credit_starved_timeout, and it declares the peer dead; not a side whose grants wait
//    unread in its own completion queue because its reactor ran late;
//  - either side: the other's close of the TCP socket each RDMA connection keeps (it carries
//    keepalive and TCP_USER_TIMEOUT from the messenger's options, for a host that vanished).
// The tests wait on events; their bounds leave a loaded machine room and still prove that no call
// waits for its own deadline.
#include <dirent.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "rpc/core/messenger_internals.h"
#include "rpc/core/reactor.h"
#include "rpc/rdma/rdma_factory.h"
#include "rpc/testing/rpc-test-util.h"
#include "util/countdown_latch.h"
#include "util/metrics/counter.h"

namespace rrpc::rpc {
namespace {

using rdma::RdmaOptions;
using rdma::RdmaTransportFactory;

constexpr int kCalls = 64;
const MonoDelta kCallDeadline = MonoDelta::FromSeconds(60);
// By design about 2.5 s (ping_after 1 s + scan period 1 s + retry timeout 0.54 s); the bound
// leaves a loaded 2-core machine room, far below the calls' deadline.
constexpr double kDeclaredWithinSeconds = 20;

class RdmaDeadPeerTest : public RpcTestBase, public ::testing::WithParamInterface<bool> {
 protected:
  struct Call {
    rtest::EchoRequestPB req;
    rtest::EchoResponsePB resp;
    RpcController ctl;
    MonoTime ended;
  };

  // Default RDMA and messenger options (dead-peer settings included) but the SRQ reclaim; SRQ as
  // the parameter says; enough workers that all 64 handlers are inside the gate at once.
  // `client_pings`: off, the client relies on the server's side alone.
  // `client_credit_starved_timeout`: the client's (RdmaTransportOptions; the server keeps the
  // default). `receive_buffers`: the private receive queues' depth, and so the credits each side
  // starts with (0: the default).
  void Start(
      bool client_pings = true,
      MonoDelta client_credit_starved_timeout = rdma::RdmaTransportOptions().credit_starved_timeout,
      uint32_t receive_buffers = 0) {
    RdmaOptions o = rdma::SoftRdmaOptions();
    o.use_srq = GetParam();
    if (receive_buffers > 0) o.endpoint.receive_buffers = receive_buffers;
    // The server's reclaim (a message to a peer silent for reclaim_after, 10 s) would also find
    // the dead path; out of the way, so that each test sees the side it is about.
    o.srq.reclaim_after = MonoDelta::FromSeconds(600);
    server_factory_ = std::make_shared<RdmaTransportFactory>(o);
    o.transport.credit_starved_timeout = client_credit_starved_timeout;
    client_factory_ = std::make_shared<RdmaTransportFactory>(o);
    MessengerOptions so, co;
    so.num_workers = kCalls;
    so.service_queue_length = 1024;
    so.transport_factory = server_factory_;
    co.transport_factory = client_factory_;
    if (!client_pings) co.ping_after = MonoDelta::Max();
    StartServer(so);
    StartClient(co);
    ASSERT_TRUE(EchoOnce(Proxy(), "warm").ok());
    ASSERT_EQ(Transport(client_), "rdma");
    ASSERT_EQ(Transport(server_), "rdma");
  }
  static std::string Transport(const std::shared_ptr<Messenger>& m) {
    auto conns = m->DumpConnections();
    return conns.size() == 1 ? conns[0].transport : "connections: " + std::to_string(conns.size());
  }
  // Issues kCalls echoes that wait in the server's handlers; returns once every handler is in.
  void IssueBlockedCalls(std::vector<Call>* calls, CountDownLatch* done) {
    BlockEchoes();
    auto proxy = Proxy();
    for (Call& c : *calls) {
      c.req.set_data("outstanding");
      c.ctl.set_timeout(kCallDeadline);
      proxy.EchoAsync(c.req, &c.resp, &c.ctl, [&c, done] {
        c.ended = MonoTime::Now();
        done->CountDown();
      });
    }
    ASSERT_TRUE(gate_.WaitForEntered(kCalls));
  }
  // Runs a task on every reactor of the client that waits for `release`; returns once all wait.
  void HoldClientReactors(CountDownLatch* release) {
    const int n = client_->options().num_reactors;
    CountDownLatch held(n);
    for (int i = 0; i < n; ++i) {
      MessengerInternals::reactor(*client_, i)->RunOnReactor([&held, release] {
        held.CountDown();
        release->Wait();
      });
    }
    held.Wait();
  }
  void DropAllPackets() {
    server_factory_->Device().value()->soft->DropAllPackets(true);
    client_factory_->Device().value()->soft->DropAllPackets(true);
  }
  // Every call failed with a retriable network error; returns the last end after `cut`.
  static MonoDelta ExpectAllFailedRetriable(const std::vector<Call>& calls, MonoTime cut) {
    MonoDelta slowest;
    for (const Call& c : calls) {
      EXPECT_TRUE(c.ctl.status().IsNetworkError()) << c.ctl.status().ToString();
      EXPECT_TRUE(c.ctl.IsRetriable()) << c.ctl.status().ToString();
      slowest = std::max(slowest, c.ended - cut);
    }
    EXPECT_LT(slowest.ToSeconds(), kDeclaredWithinSeconds);
    return slowest;
  }

  std::shared_ptr<RdmaTransportFactory> server_factory_, client_factory_;
};

// The path dies while the server's handlers still run: only the client's ping can find it. The
// ping's send is lost, the queue pair's retries run out, and the client fails all 64 calls; its
// close then frees the server's connection (the TCP socket's close reaches it).
TEST_P(RdmaDeadPeerTest, ClientPingFindsADeadPathAndFailsEveryCallRetriable) {
  Start();
  std::vector<Call> calls(kCalls);
  CountDownLatch done(kCalls);
  IssueBlockedCalls(&calls, &done);
  DropAllPackets();
  const MonoTime cut = MonoTime::Now();
  ASSERT_TRUE(done.WaitFor(kCallDeadline)) << "calls still hang on a dead RDMA connection";
  const MonoDelta slowest = ExpectAllFailedRetriable(calls, cut);
  // The client's own queue pair found it, not a close from the server.
  EXPECT_NE(calls[0].ctl.status().ToString().find("RDMA send failed"), std::string::npos)
      << calls[0].ctl.status().ToString();
  LOG(INFO) << (GetParam() ? "SRQ" : "private RQ") << ": dead path declared by the client "
            << slowest.ToString() << " after it went";
  EXPECT_TRUE(WaitForCondition([&] { return server_->DumpConnections().empty(); }))
      << "the server still holds the connection";
  gate_.Open();  // the handlers' answers go nowhere
}

// The client does not ping: the server finds the dead path when its responses cannot leave, closes
// its side, and that close (on the TCP socket every RDMA connection keeps) fails the client's
// calls at once.
TEST_P(RdmaDeadPeerTest, ServerWhoseResponsesCannotLeaveClosesAndTheClientsCallsFail) {
  Start(/*client_pings=*/false);
  std::vector<Call> calls(kCalls);
  CountDownLatch done(kCalls);
  IssueBlockedCalls(&calls, &done);
  DropAllPackets();
  const MonoTime cut = MonoTime::Now();
  gate_.Open();
  ASSERT_TRUE(done.WaitFor(kCallDeadline)) << "calls still hang on a dead RDMA connection";
  const MonoDelta slowest = ExpectAllFailedRetriable(calls, cut);
  LOG(INFO) << (GetParam() ? "SRQ" : "private RQ") << ": dead path declared by the server "
            << slowest.ToString() << " after it went: " << calls[0].ctl.status().ToString();
  EXPECT_TRUE(WaitForCondition([&] { return server_->DumpConnections().empty(); }));
  EXPECT_TRUE(WaitForCondition([&] { return client_->DumpConnections().empty(); }));
}

// Calls sent after the path died: their own sends are never acknowledged, the client's queue
// pair fails once its retries run out, and every call fails retriable.
TEST_P(RdmaDeadPeerTest, CallsSentOnADeadPathFailRetriableWhenTheirSendsRunOutOfRetries) {
  Start();
  DropAllPackets();
  const MonoTime cut = MonoTime::Now();
  std::vector<Call> calls(kCalls);
  CountDownLatch done(kCalls);
  auto proxy = Proxy();
  for (Call& c : calls) {
    c.req.set_data("into the void");
    c.ctl.set_timeout(kCallDeadline);
    proxy.EchoAsync(c.req, &c.resp, &c.ctl, [&c, &done] {
      c.ended = MonoTime::Now();
      done.CountDown();
    });
  }
  ASSERT_TRUE(done.WaitFor(kCallDeadline)) << "calls still hang on a dead RDMA connection";
  const MonoDelta slowest = ExpectAllFailedRetriable(calls, cut);
  EXPECT_NE(calls[0].ctl.status().ToString().find("RDMA send failed"), std::string::npos)
      << calls[0].ctl.status().ToString();
  LOG(INFO) << (GetParam() ? "SRQ" : "private RQ") << ": calls on a dead path failed "
            << slowest.ToString() << " after it went";
  EXPECT_TRUE(WaitForCondition([&] { return server_->DumpConnections().empty(); }));
}

// A client that has spent every credit it may when the path dies (its server took the requests
// and granted nothing back: here its completions are stalled) has nothing it may send, the ping
// included, so no send can fail. It declares the peer dead once it has waited
// credit_starved_timeout (4 s) for a grant: all 64 calls fail retriable, long before their
// deadlines, though the TCP socket stays up.
TEST_P(RdmaDeadPeerTest, ACreditStarvedClientDeclaresItsPeerDeadAndFailsEveryCallRetriable) {
  Start();
  server_factory_->Device().value()->soft->StallCompletions(true);
  std::vector<Call> calls(kCalls);
  CountDownLatch done(kCalls);
  auto proxy = Proxy();
  for (Call& c : calls) {
    c.req.set_data(Pattern(40000, 1));  // three messages each: more than the credits
    c.ctl.set_timeout(kCallDeadline);
    proxy.EchoAsync(c.req, &c.resp, &c.ctl, [&c, &done] {
      c.ended = MonoTime::Now();
      done.CountDown();
    });
  }
  ASSERT_TRUE(WaitForCondition([&] {
    return client_factory_->metrics().credit_waits->value() > 0 || done.count() < kCalls;
  }));
  DropAllPackets();
  const MonoTime cut = MonoTime::Now();
  ASSERT_TRUE(done.WaitFor(kCallDeadline)) << "calls still hang on a dead RDMA connection";
  const MonoDelta slowest = ExpectAllFailedRetriable(calls, cut);
  EXPECT_NE(calls[0].ctl.status().ToString().find("no credits granted"), std::string::npos)
      << calls[0].ctl.status().ToString();
  LOG(INFO) << (GetParam() ? "SRQ" : "private RQ") << ": credit-starved client declared its peer "
            << "dead " << slowest.ToString() << " after the cut";
  EXPECT_TRUE(WaitForCondition([&] { return server_->DumpConnections().empty(); }))
      << "the server still holds the connection";
  server_factory_->Device().value()->soft->StallCompletions(false);
}

// A live server grants credits for the buffers it consumed whether or not its handlers run (the
// reactor copies each message out and reposts its buffer), so a client that ran out of credits
// sending to a server whose every handler is blocked is not declared dead: 64 calls of 13
// messages each, every one more than the credits (8 receive buffers; SRQ: the initial grant, 8),
// all reach blocked handlers, which takes 64 x 13 - 8 grants while no handler has returned; the
// client's credit waits each end with a grant, and all 64 calls then succeed. (The verdict needs
// a wait with no grant for credit_starved_timeout; the next test shows a grant that came is seen.)
TEST_P(RdmaDeadPeerTest, AServerWhoseHandlersAllBlockStillGrantsCreditsToItsClient) {
  Start(/*client_pings=*/true, rdma::RdmaTransportOptions().credit_starved_timeout,
        /*receive_buffers=*/8);
  BlockEchoes();
  std::vector<Call> calls(kCalls);
  CountDownLatch done(kCalls);
  auto proxy = Proxy();
  for (Call& c : calls) {
    // One Write spends every credit: no grant comes meanwhile (it takes the send lock held).
    c.req.set_data(Pattern(200000, 2));
    c.ctl.set_timeout(kCallDeadline);
    proxy.EchoAsync(c.req, &c.resp, &c.ctl, [&c, &done] {
      c.ended = MonoTime::Now();
      done.CountDown();
    });
  }
  ASSERT_TRUE(gate_.WaitForEntered(kCalls));
  EXPECT_GT(client_factory_->metrics().credit_waits->value(), 0) << "never ran out of credits";
  EXPECT_EQ(done.count(), kCalls) << calls[0].ctl.status().ToString();
  EXPECT_EQ(Transport(client_), "rdma");
  gate_.Open();
  ASSERT_TRUE(done.WaitFor(kCallDeadline));
  for (const Call& c : calls) {
    EXPECT_TRUE(c.ctl.status().ok()) << c.ctl.status().ToString();
    EXPECT_EQ(c.resp.data(), c.req.data());
  }
  EXPECT_EQ(Transport(client_), "rdma");
}

// A client reactor that runs late (descheduled on a loaded host, or held up by other work) past
// its credit_starved_timeout while the grant it waited for sits in its completion queue reads
// that grant before it judges its peer: the starvation verdict runs after the iteration's I/O.
// The client sends a call of 9 messages on 8 credits to a server whose completions are stalled
// (no grant yet) and waits for credits; its reactors are then held, the server's completions
// released, and the grant arrives at the client's device; once the bound (1 s) has certainly
// passed, the reactors go on: the call succeeds and the connection stays.
TEST_P(RdmaDeadPeerTest, AGrantWaitingInALateReactorsQueueIsSeenBeforeTheVerdict) {
  const MonoDelta kBound = MonoDelta::FromSeconds(1);
  Start(/*client_pings=*/true, kBound, /*receive_buffers=*/8);
  rdma::SoftDevice* server_dev = server_factory_->Device().value()->soft;
  rdma::SoftDevice* client_dev = client_factory_->Device().value()->soft;
  server_dev->StallCompletions(true);
  Call call;
  CountDownLatch done(1);
  call.req.set_data(Pattern(140000, 3));  // 9 messages of at most 16 KiB
  call.ctl.set_timeout(kCallDeadline);
  Proxy().EchoAsync(call.req, &call.resp, &call.ctl, [&done] { done.CountDown(); });
  ASSERT_TRUE(
      WaitForCondition([&] { return client_factory_->metrics().credit_waits->value() > 0; }));
  // The wait began (its timer armed) before the reactors take the hold.
  CountDownLatch release(1);
  HoldClientReactors(&release);
  const MonoTime held_at = MonoTime::Now();
  const uint64_t received = client_dev->port_counters().data_received;
  server_dev->StallCompletions(false);
  // The server's grant is in the client's completion queue (the device counts a packet once its
  // completion is queued, under the same lock).
  const bool granted =
      WaitForCondition([&] { return client_dev->port_counters().data_received > received; });
  // The timer armed before `held_at` expires by held_at + kBound: waiting past that is a lower
  // bound on elapsed time, which no load can shorten.
  SleepFor(held_at + kBound + MonoDelta::FromMilliseconds(200) - MonoTime::Now());
  release.CountDown();
  ASSERT_TRUE(granted) << "the server granted nothing";
  ASSERT_TRUE(done.WaitFor(kCallDeadline));
  EXPECT_TRUE(call.ctl.status().ok()) << call.ctl.status().ToString();
  EXPECT_EQ(call.resp.data(), call.req.data());
  EXPECT_EQ(Transport(client_), "rdma");
}

// The TCP connection an RDMA connection starts on stays open for its life (its close is the
// peer's death): it carries the messenger's keepalive and TCP_USER_TIMEOUT, so that a vanished
// host is found there too. Checked on the client's socket, found by its local port.
TEST_P(RdmaDeadPeerTest, TheKeptTcpSocketCarriesKeepaliveAndUserTimeout) {
  Start();
  auto conns = server_->DumpConnections();
  ASSERT_EQ(conns.size(), 1u);
  const Sockaddr client_addr = Sockaddr::Parse(conns[0].remote).value();
  int found = 0;
  DIR* dir = opendir("/proc/self/fd");
  ASSERT_NE(dir, nullptr);
  while (dirent* e = readdir(dir)) {
    const int fd = atoi(e->d_name);
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    if (fd <= 2 || getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0 ||
        local.ss_family != AF_INET) {
      continue;
    }
    if (ntohs(reinterpret_cast<sockaddr_in*>(&local)->sin_port) != client_addr.port()) continue;
    found++;
    int keepalive = 0, idle = 0, user_timeout = 0;
    socklen_t n = sizeof(int);
    ASSERT_EQ(getsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &keepalive, &n), 0);
    ASSERT_EQ(getsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, &n), 0);
    ASSERT_EQ(getsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, &n), 0);
    EXPECT_EQ(keepalive, 1);
    EXPECT_EQ(idle, 10);            // MessengerOptions::tcp_keepalive_idle
    EXPECT_EQ(user_timeout, 2500);  // MessengerOptions::tcp_user_timeout
  }
  closedir(dir);
  EXPECT_EQ(found, 1);
}

INSTANTIATE_TEST_SUITE_P(PrivateRqAndSrq, RdmaDeadPeerTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "Srq" : "PrivateRq";
                         });

}  // namespace
}  // namespace rrpc::rpc
