// Client-side behaviour against a real server: timeouts, refused connections, negotiation,
// server restarts, shutdown with calls in flight (every callback exactly once). Sidecars and
// message size limits: client-payload-test.cc.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "rpc/core/messenger_internals.h"
#include "rpc/core/service_pool.h"
#include "rpc/testing/raw-socket-test-util.h"
#include "rpc/testing/rpc-test-util.h"

namespace rrpc::rpc {
namespace {

class ClientTest : public RpcTestBase {
 protected:
  Status Echo(const std::string& data, MonoDelta timeout = MonoDelta::FromSeconds(60)) {
    return EchoOnce(Proxy(), data, timeout);
  }
};

// A call whose callback counts how often it ran.
struct CountedCall {
  rtest::EchoRequestPB req;
  rtest::EchoResponsePB resp;
  RpcController ctl;
  std::atomic<int> callbacks{0};
};

TEST_F(ClientTest, TimesOutWhileTheServerIsSlowThenIgnoresTheLateResponse) {
  StartServer();
  StartClient();
  ASSERT_TRUE(Echo("warm up").ok());  // the connection exists
  BlockEchoes();
  // Long enough that the request surely reaches the server before the client gives up.
  Status s = Echo("slow", MonoDelta::FromMilliseconds(500));
  EXPECT_TRUE(s.IsTimedOut()) << s.ToString();
  ASSERT_TRUE(gate_.WaitForEntered(1));
  auto conns = client_->DumpConnections();
  ASSERT_EQ(1u, conns.size());
  const uint64_t received_before = conns[0].bytes_received;

  // The handler answers after all: the response reaches the client, which drops it.
  gate_.Open();
  ASSERT_TRUE(WaitForCondition([&] {
    auto now = client_->DumpConnections();
    return now.size() == 1 && now[0].bytes_received > received_before;
  })) << "late response never arrived";
  EXPECT_EQ(0u, client_->DumpConnections()[0].calls_in_flight);
  // The same connection keeps working.
  ASSERT_TRUE(Echo("after").ok());
  EXPECT_EQ(1u, client_->DumpConnections().size());
  EXPECT_EQ(1u, server_->DumpConnections().size());
}

TEST_F(ClientTest, TimedOutCallsAmongFastOnesDoNotDisturbTheOthers) {
  StartServer();
  StartClient();
  service_->set_echo_hook([this](const rtest::EchoRequestPB& req, RpcContext*) {
    if (req.data() == "slow") gate_.Pass();
  });
  CountedCall slow;
  slow.req.set_data("slow");
  slow.ctl.set_timeout(MonoDelta::FromMilliseconds(500));
  CountDownLatch slow_done(1);
  Proxy().EchoAsync(slow.req, &slow.resp, &slow.ctl, [&] {
    slow.callbacks++;
    slow_done.CountDown();
  });
  ASSERT_TRUE(gate_.WaitForEntered(1));
  ASSERT_TRUE(slow_done.WaitFor(MonoDelta::FromSeconds(60)));
  EXPECT_TRUE(slow.ctl.status().IsTimedOut());
  for (int i = 0; i < 20; i++) ASSERT_TRUE(Echo("fast " + std::to_string(i)).ok());
  gate_.Open();
  ASSERT_TRUE(Echo("after").ok());
  EXPECT_EQ(1, slow.callbacks.load());
}

TEST_F(ClientTest, CallWhoseDeadlineAlreadyPassedTimesOut) {
  StartServer();
  StartClient();
  rtest::EchoRequestPB req;
  req.set_data("too late");
  rtest::EchoResponsePB resp;
  RpcController ctl;
  ctl.set_deadline(MonoTime::Now() - MonoDelta::FromSeconds(1));
  Status s = Proxy().Echo(req, &resp, &ctl);
  EXPECT_TRUE(s.IsTimedOut()) << s.ToString();
  ASSERT_TRUE(Echo("next").ok());
}

// A timeout counts from when the call is sent: until then the deadline moves with the clock; the
// call fixes it, from its send time, and it stays put afterwards.
TEST_F(ClientTest, TimeoutCountsFromTheSendAndFixesTheDeadlineThen) {
  StartServer();
  StartClient();
  rtest::EchoRequestPB req;
  req.set_data("timed");
  rtest::EchoResponsePB resp;
  RpcController ctl;
  const MonoDelta timeout = MonoDelta::FromSeconds(60);
  ctl.set_timeout(timeout);
  const MonoTime before_wait = MonoTime::Now();
  EXPECT_GE(ctl.deadline(), before_wait + timeout);
  SleepFor(MonoDelta::FromMilliseconds(20));
  const MonoTime before_send = MonoTime::Now();
  EXPECT_GE(ctl.deadline(), before_send + timeout);  // not yet fixed: later than it was
  ASSERT_TRUE(Proxy().Echo(req, &resp, &ctl).ok());
  const MonoTime fixed = ctl.deadline();
  EXPECT_GE(fixed, before_send + timeout);
  EXPECT_LE(fixed, MonoTime::Now() + timeout);
  SleepFor(MonoDelta::FromMilliseconds(20));
  EXPECT_EQ(fixed, ctl.deadline());
}

// Deadlines on one connection share one timer while they come in nondecreasing order
// (core/call_deadlines.h): the calls stuck in the server time out, each once and not
// before its deadline, and the calls answered meanwhile never do.
TEST_F(ClientTest, CallsOfOneConnectionTimeOutAtTheirDeadlinesWhileOthersAreAnswered) {
  MessengerOptions server_options;
  server_options.num_workers = 4;  // three stuck calls leave a worker for the fast ones
  StartServer(server_options);
  StartClient();
  // Its 60 s deadline leaves the connection's timer armed for then: the calls below, with earlier
  // deadlines, must arm it again.
  ASSERT_TRUE(Echo("warm up").ok());
  service_->set_echo_hook([this](const rtest::EchoRequestPB& req, RpcContext*) {
    if (req.data() == "slow") gate_.Pass();
  });
  constexpr int kSlow = 3;
  CountedCall slow[kSlow];
  CountedCall fast[kSlow];
  CountDownLatch done(2 * kSlow);
  std::atomic<int64_t> early_ns{0};
  MonoTime deadline[kSlow];
  for (int i = 0; i < kSlow; i++) {
    slow[i].req.set_data("slow");
    // Nondecreasing deadlines: all on the connection's one timer.
    slow[i].ctl.set_timeout(MonoDelta::FromMilliseconds(300 + 100 * i));
    deadline[i] = slow[i].ctl.deadline();
    Proxy().EchoAsync(slow[i].req, &slow[i].resp, &slow[i].ctl, [&, i] {
      const int64_t early = (deadline[i] - MonoTime::Now()).ToNanoseconds();
      if (early > 0) early_ns = early;
      slow[i].callbacks++;
      done.CountDown();
    });
    fast[i].req.set_data("fast");
    fast[i].ctl.set_timeout(MonoDelta::FromSeconds(60));
    Proxy().EchoAsync(fast[i].req, &fast[i].resp, &fast[i].ctl, [&, i] {
      fast[i].callbacks++;
      done.CountDown();
    });
  }
  // Well before the warm-up call's 60 s deadline, however loaded the machine.
  ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(30)));
  EXPECT_EQ(0, early_ns.load()) << "a call timed out before its deadline";
  for (int i = 0; i < kSlow; i++) {
    EXPECT_TRUE(slow[i].ctl.status().IsTimedOut()) << slow[i].ctl.status().ToString();
    EXPECT_TRUE(fast[i].ctl.status().ok()) << fast[i].ctl.status().ToString();
  }
  gate_.Open();
  ASSERT_TRUE(Echo("after").ok());
  for (int i = 0; i < kSlow; i++) {
    EXPECT_EQ(1, slow[i].callbacks.load());
    EXPECT_EQ(1, fast[i].callbacks.load());
  }
}

// A call with a shorter timeout than the calls before it on its connection gets a timer of its
// own: it times out at its deadline, not after theirs.
TEST_F(ClientTest, AShorterTimeoutAfterLongerOnesFiresAtItsOwnDeadline) {
  StartServer();
  StartClient();
  ASSERT_TRUE(Echo("warm up").ok());
  BlockEchoes();
  CountedCall longer;
  longer.req.set_data("long");
  longer.ctl.set_timeout(MonoDelta::FromSeconds(120));
  CountDownLatch longer_done(1);
  Proxy().EchoAsync(longer.req, &longer.resp, &longer.ctl, [&] {
    longer.callbacks++;
    longer_done.CountDown();
  });
  CountedCall shorter;
  shorter.req.set_data("short");
  shorter.ctl.set_timeout(MonoDelta::FromMilliseconds(300));
  CountDownLatch shorter_done(1);
  Proxy().EchoAsync(shorter.req, &shorter.resp, &shorter.ctl, [&] {
    shorter.callbacks++;
    shorter_done.CountDown();
  });
  // Well before the longer call's deadline (120 s), however loaded the machine.
  ASSERT_TRUE(shorter_done.WaitFor(MonoDelta::FromSeconds(30)));
  EXPECT_TRUE(shorter.ctl.status().IsTimedOut()) << shorter.ctl.status().ToString();
  EXPECT_EQ(0, longer.callbacks.load());
  gate_.Open();
  ASSERT_TRUE(longer_done.WaitFor(MonoDelta::FromSeconds(60)));
  EXPECT_TRUE(longer.ctl.status().ok()) << longer.ctl.status().ToString();
  EXPECT_EQ(1, shorter.callbacks.load());
}

TEST_F(ClientTest, ConnectionRefusedIsNetworkError) {
  // A bound socket that does not listen: connecting to it is refused, and nobody else can take
  // the port while we hold it.
  Result<Socket> sock = Socket::CreateTcp(AF_INET);
  ASSERT_TRUE(sock.ok());
  ASSERT_TRUE(sock->Bind(Sockaddr::Loopback(0)).ok());
  Result<Sockaddr> addr = sock->GetSocketAddress();
  ASSERT_TRUE(addr.ok());
  StartClient();
  rtest::EchoServiceProxy proxy(client_, *addr);
  for (int i = 0; i < 3; i++) {  // every attempt, not just the first
    rtest::EchoRequestPB req;
    req.set_data("x");
    rtest::EchoResponsePB resp;
    RpcController ctl;
    ctl.set_timeout(MonoDelta::FromSeconds(60));
    Status s = proxy.Echo(req, &resp, &ctl);
    EXPECT_TRUE(s.IsNetworkError()) << s.ToString();
    EXPECT_EQ(ECONNREFUSED, s.posix_code()) << s.ToString();
    EXPECT_EQ(nullptr, ctl.error_response());
  }
  EXPECT_TRUE(WaitForCondition([&] { return client_->DumpConnections().empty(); }));
}

TEST_F(ClientTest, NegotiationTimeoutFailsTheWaitingCall) {
  // A listener that never accepts: the kernel completes the TCP handshake, nobody answers the
  // preamble.
  RawListener silent;
  ASSERT_TRUE(silent.status().ok());
  MessengerOptions o;
  o.negotiation_timeout = MonoDelta::FromMilliseconds(200);
  StartClient(o);
  rtest::EchoServiceProxy proxy(client_, silent.addr());
  rtest::EchoRequestPB req;
  req.set_data("x");
  rtest::EchoResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(600));
  Status s = proxy.Echo(req, &resp, &ctl);
  EXPECT_TRUE(s.IsTimedOut()) << s.ToString();
  EXPECT_NE(std::string::npos, s.ToString().find("negotiation")) << s.ToString();
}

// A hand-made server that reads the preamble, the negotiation request and then the first call
// frame *before* it answers anything: it only gets that frame if the client sent the call right
// behind its negotiation request. `refuse`: the negotiation reply is an error.
void ServeOneCallReadBeforeTheNegotiationReply(RawListener* listener, bool refuse, Status* status) {
  Result<Socket> sock = listener->Accept();
  if (!sock.ok()) {
    *status = sock.status();
    return;
  }
  RawConnection conn(std::move(sock).value());
  std::string hello, call;
  NegotiatePB request;
  *status = conn.ReadBytes(kPreambleSize, &hello);
  if (status->ok()) *status = conn.ReadFrame(&hello);
  if (status->ok()) *status = ParseClientNegotiation(Slice(hello), &request);
  if (status->ok()) *status = conn.ReadFrame(&call);  // blocks (bounded) if the call waited
  if (!status->ok()) return;
  if (refuse) {
    *status = conn.Write(BuildServerReply(request, Status::NotSupported("no calls today"),
                                          ErrorStatusPB::FATAL_VERSION_MISMATCH)
                             .slice.ToString());
    return;
  }
  RequestHeader header;
  Slice body, tail;
  *status = ParseFrame(Slice(call), &header, &body, &tail);
  if (!status->ok()) return;
  ResponseHeader rh;
  rh.set_call_id(header.call_id());
  rtest::EchoResponsePB resp;
  resp.set_data("pipelined");
  *status = conn.Write(BuildServerReply(request, Status::OK(), {}).slice.ToString() +
                       FrameBytes(rh, resp));
}

class PipelinedNegotiationTest : public ClientTest {
 protected:
  // One Echo call to ServeOneCallReadBeforeTheNegotiationReply; returns the call's status.
  Status EchoToAServerThatReadsTheCallFirst(bool refuse, rtest::EchoResponsePB* resp) {
    RawListener listener;
    if (!listener.status().ok()) return listener.status();
    Status server_status;
    std::thread server(
        [&] { ServeOneCallReadBeforeTheNegotiationReply(&listener, refuse, &server_status); });
    StartClient();
    rtest::EchoServiceProxy proxy(client_, listener.addr());
    rtest::EchoRequestPB req;
    req.set_data("x");
    RpcController ctl;
    ctl.set_timeout(MonoDelta::FromSeconds(60));
    Status s = proxy.Echo(req, resp, &ctl);
    server.join();
    EXPECT_TRUE(server_status.ok()) << server_status.ToString();
    return s;
  }
};

TEST_F(PipelinedNegotiationTest, FirstCallFollowsTheNegotiationRequestWithoutWaitingForTheReply) {
  rtest::EchoResponsePB resp;
  Status s = EchoToAServerThatReadsTheCallFirst(/*refuse=*/false, &resp);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ("pipelined", resp.data());
}

TEST_F(PipelinedNegotiationTest, CallsSentAheadOfARefusedNegotiationFailWithTheServersReason) {
  rtest::EchoResponsePB resp;
  Status s = EchoToAServerThatReadsTheCallFirst(/*refuse=*/true, &resp);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(std::string::npos, s.ToString().find("no calls today")) << s.ToString();
}

TEST_F(ClientTest, ReconnectsToAServerRestartedOnTheSamePort) {
  StartServer();
  StartClient();
  ASSERT_TRUE(Echo("before restart").ok());
  const uint16_t port = server_addr_.port();
  server_->Shutdown();
  server_.reset();
  // While the server is down: a call fails with a network error (refused or reset), never hangs.
  Status down = Echo("while down");
  EXPECT_TRUE(down.IsNetworkError()) << down.ToString();

  StartServer({}, port);
  ASSERT_EQ(port, server_addr_.port());
  // The client may still hold the old connection until it reads its close; a bounded number of
  // attempts gets through, each failing fast with a network error if it fails.
  Status s;
  for (int attempt = 0; attempt < 50; attempt++) {
    s = Echo("after restart");
    if (s.ok()) break;
    ASSERT_TRUE(s.IsNetworkError()) << s.ToString();
    SleepFor(MonoDelta::FromMilliseconds(20));
  }
  ASSERT_TRUE(s.ok()) << s.ToString();
  for (int i = 0; i < 10; i++) ASSERT_TRUE(Echo("again " + std::to_string(i)).ok());
}

TEST_F(ClientTest, ShutdownWithCallsInFlightRunsEveryCallbackExactlyOnce) {
  MessengerOptions server_options;
  server_options.num_workers = 2;
  server_options.service_queue_length = 1000;
  StartServer(server_options);
  MessengerOptions client_options;
  client_options.num_reactors = 3;
  StartClient(client_options);
  BlockEchoes();

  constexpr int kThreads = 3;
  constexpr int kCallsPerThread = 50;
  std::vector<std::unique_ptr<CountedCall>> calls;
  for (int i = 0; i < kThreads * kCallsPerThread; i++) {
    calls.push_back(std::make_unique<CountedCall>());
    calls.back()->req.set_data("in flight " + std::to_string(i));
    calls.back()->ctl.set_timeout(MonoDelta::FromSeconds(600));
  }
  // Several threads, so the calls spread over the client's reactors and connections.
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&, t] {
      auto proxy = Proxy();
      for (int i = t * kCallsPerThread; i < (t + 1) * kCallsPerThread; i++) {
        CountedCall* c = calls[i].get();
        proxy.EchoAsync(c->req, &c->resp, &c->ctl, [c] { c->callbacks++; });
      }
    });
  }
  for (auto& th : threads) th.join();
  // Two calls are in handlers, the rest wait in the server's queue: all in flight.
  ASSERT_TRUE(gate_.WaitForEntered(2));
  ASSERT_TRUE(WaitForCondition([&] {
    return MessengerInternals::service_pool(*server_)->queue_size() == calls.size() - 2;
  }));

  client_->Shutdown();
  // Shutdown returns after every callback ran, each exactly once, with a failure.
  for (size_t i = 0; i < calls.size(); i++) {
    EXPECT_EQ(1, calls[i]->callbacks.load()) << "call " << i;
    EXPECT_TRUE(calls[i]->ctl.finished());
    const Status& s = calls[i]->ctl.status();
    EXPECT_TRUE(s.IsAborted() || s.IsNetworkError()) << s.ToString();
  }

  // After shutdown: calls fail at once with Aborted, callbacks exactly once.
  for (int i = 0; i < 10; i++) {
    CountedCall late;
    late.req.set_data("late");
    late.ctl.set_timeout(MonoDelta::FromSeconds(600));
    Proxy().EchoAsync(late.req, &late.resp, &late.ctl, [&late] { late.callbacks++; });
    EXPECT_EQ(1, late.callbacks.load());  // ran before EchoAsync returned
    EXPECT_TRUE(late.ctl.status().IsAborted()) << late.ctl.status().ToString();
  }
  Status sync = Echo("late sync");
  EXPECT_TRUE(sync.IsAborted()) << sync.ToString();

  gate_.Open();
  // Nothing fires twice later, when the server answers into the closed connections.
  server_->Shutdown();
  for (size_t i = 0; i < calls.size(); i++) EXPECT_EQ(1, calls[i]->callbacks.load()) << i;
}

TEST_F(ClientTest, ShutdownRacingWithCallersRunsEveryCallbackExactlyOnce) {
  MessengerOptions server_options;
  server_options.service_queue_length = 100000;
  StartServer(server_options);
  MessengerOptions client_options;
  client_options.num_reactors = 2;
  StartClient(client_options);
  constexpr int kThreads = 3;
  constexpr int kMaxCallsPerThread = 2000;
  std::vector<std::vector<std::unique_ptr<CountedCall>>> calls(kThreads);
  std::atomic<int> started{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++) {
    calls[t].reserve(kMaxCallsPerThread);
    threads.emplace_back([&, t] {
      auto proxy = Proxy();
      for (int i = 0; i < kMaxCallsPerThread; i++) {
        calls[t].push_back(std::make_unique<CountedCall>());
        CountedCall* c = calls[t].back().get();
        c->req.set_data(std::to_string(i));
        c->ctl.set_timeout(MonoDelta::FromSeconds(600));
        // Seen closing before the call: the call must fail at once, on this thread (so its
        // controller may be read here).
        const bool closing = client_->closing();
        proxy.EchoAsync(c->req, &c->resp, &c->ctl, [c] { c->callbacks++; });
        started++;
        if (closing) {
          EXPECT_EQ(1, c->callbacks.load());
          EXPECT_TRUE(c->ctl.status().IsAborted()) << c->ctl.status().ToString();
          break;
        }
      }
    });
  }
  // Shut down while the callers are (very likely) still calling; correctness does not depend
  // on the timing, only the coverage does.
  WaitForCondition([&] { return started.load() >= 300; });
  client_->Shutdown();
  for (auto& th : threads) th.join();
  int total = 0;
  for (auto& per_thread : calls) {
    for (auto& c : per_thread) {
      total++;
      EXPECT_EQ(1, c->callbacks.load());
      EXPECT_TRUE(c->ctl.finished());
    }
  }
  EXPECT_GT(total, 0);
}

TEST_F(ClientTest, ServerShutdownWithCallsQueuedAndRunningFailsThemAll) {
  MessengerOptions server_options;
  server_options.num_workers = 1;
  server_options.service_queue_length = 100;
  StartServer(server_options);
  StartClient();
  BlockEchoes();
  constexpr int kCalls = 10;
  std::vector<std::unique_ptr<CountedCall>> calls;
  CountDownLatch done(kCalls);
  auto proxy = Proxy();
  for (int i = 0; i < kCalls; i++) {
    calls.push_back(std::make_unique<CountedCall>());
    CountedCall* c = calls.back().get();
    c->req.set_data(std::to_string(i));
    c->ctl.set_timeout(MonoDelta::FromSeconds(600));
    proxy.EchoAsync(c->req, &c->resp, &c->ctl, [c, &done] {
      c->callbacks++;
      done.CountDown();
    });
  }
  ASSERT_TRUE(gate_.WaitForEntered(1));
  ASSERT_TRUE(WaitForCondition([&] {
    return MessengerInternals::service_pool(*server_)->queue_size() ==
           static_cast<size_t>(kCalls - 1);
  }));

  // The server closes its connections first, so clients learn at once, while its worker is
  // still inside the handler (Shutdown then waits for that handler to return).
  std::thread shutdown([this] { server_->Shutdown(); });
  const bool all_failed = done.WaitFor(MonoDelta::FromSeconds(60));
  gate_.Open();
  shutdown.join();
  ASSERT_TRUE(all_failed) << "clients still waiting after the server shut down";
  for (auto& c : calls) {
    EXPECT_EQ(1, c->callbacks.load());
    EXPECT_TRUE(c->ctl.status().IsNetworkError()) << c->ctl.status().ToString();
  }
  // The client itself is fine: a call to a dead server fails fast.
  Status s = Echo("after");
  EXPECT_TRUE(s.IsNetworkError()) << s.ToString();
}

TEST_F(ClientTest, TimeoutFiresEvenWhenThePeerStopsReadingMidRequest) {
  // A server that negotiates, then reads nothing until released: a large request stalls half
  // written. Released, it reads that request whole and answers the next one.
  const std::string sidecar_bytes(4u << 20, 's');
  RawListener listener;
  ASSERT_TRUE(listener.status().ok());
  CountDownLatch release(1);
  Status server_status;
  std::string received_sidecar;
  std::thread server([&] {
    Result<Socket> sock = listener.Accept();
    if (!sock.ok()) {
      server_status = sock.status();
      return;
    }
    RawConnection conn(std::move(sock).value());
    server_status = conn.AcceptNegotiation();
    if (!server_status.ok()) return;
    auto answer = [&conn](int32_t call_id, const std::string& data) {
      ResponseHeader rh;
      rh.set_call_id(call_id);
      rtest::EchoResponsePB resp;
      resp.set_data(data);
      return conn.Write(FrameBytes(rh, resp));
    };
    RequestHeader header;
    std::string body;
    server_status = conn.ReadParsedFrame(&header, &body);
    if (server_status.ok()) server_status = answer(header.call_id(), "warm up");
    if (!server_status.ok()) return;
    release.WaitFor(MonoDelta::FromSeconds(120));
    server_status = conn.ReadParsedFrame(&header, &body, &received_sidecar);
    if (!server_status.ok()) return;
    server_status = conn.ReadParsedFrame(&header, &body);
    if (server_status.ok()) server_status = answer(header.call_id(), "second");
    conn.WaitForClose();
  });
  // One connection carries both calls (the raw server accepts one): bulk calls would otherwise
  // get a connection of their own (MessengerOptions::bulk_connection_bytes).
  MessengerOptions options;
  options.bulk_connection_bytes = 0;
  // The peer stops reading for as long as the test takes: dead-peer detection (the user timeout
  // counts zero-window probing; the ping goes unanswered) would close the connection under it.
  options.tcp_user_timeout = MonoDelta();
  options.ping_after = MonoDelta::Max();
  StartClient(options);
  rtest::EchoServiceProxy proxy(client_, listener.addr());
  {
    // The connection is open before the big call: its bytes start out in the same reactor
    // iteration it is queued in, before its timer can fire.
    rtest::EchoRequestPB req;
    req.set_data("warm up");
    rtest::EchoResponsePB resp;
    RpcController ctl;
    ctl.set_timeout(MonoDelta::FromSeconds(60));
    ASSERT_TRUE(proxy.Echo(req, &resp, &ctl).ok()) << ctl.status().ToString();
  }

  // Far more than the socket buffers hold; the sidecar is borrowed from memory the test frees as
  // soon as the call has finished.
  auto borrowed = std::make_unique<std::string>(sidecar_bytes);
  CountedCall first;
  first.req.set_data(std::string(32u << 20, 'x'));
  first.ctl.set_timeout(MonoDelta::FromMilliseconds(500));
  first.ctl.AddOutboundSidecar(Slice(*borrowed));
  CountDownLatch first_done(1);
  proxy.EchoAsync(first.req, &first.resp, &first.ctl, [&] {
    first.callbacks++;
    first_done.CountDown();
  });
  // The deadline is honoured although the peer reads nothing.
  const bool finished = first_done.WaitFor(MonoDelta::FromSeconds(60));
  if (!finished) release.CountDown();  // let the frame drain so the test can end
  ASSERT_TRUE(finished) << "callback still pending long after the deadline";
  EXPECT_TRUE(first.ctl.status().IsTimedOut()) << first.ctl.status().ToString();
  borrowed.reset();  // the caller may free its sidecar once the call finished

  // The half-sent frame still completes intact, and the connection carries the next call.
  CountedCall second;
  second.req.set_data("second");
  second.ctl.set_timeout(MonoDelta::FromSeconds(60));
  CountDownLatch second_done(1);
  proxy.EchoAsync(second.req, &second.resp, &second.ctl, [&] { second_done.CountDown(); });
  release.CountDown();
  ASSERT_TRUE(second_done.WaitFor(MonoDelta::FromSeconds(60)));
  EXPECT_TRUE(second.ctl.status().ok()) << second.ctl.status().ToString();
  EXPECT_EQ("second", second.resp.data());
  client_->Shutdown();
  server.join();
  EXPECT_TRUE(server_status.ok()) << server_status.ToString();
  EXPECT_TRUE(received_sidecar == sidecar_bytes) << "sidecar corrupted after the timeout";
  EXPECT_EQ(1, first.callbacks.load());
}

}  // namespace
}  // namespace rrpc::rpc
