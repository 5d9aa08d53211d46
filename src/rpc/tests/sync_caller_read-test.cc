// Reads by the synchronous caller (Connection::ReadResponseAsCaller, docs/architecture.md "The
// synchronous call path"): once a thread's calls are its connection's only ones, the reactor
// parks its reads and the thread reads each response itself. Whatever else comes (another call's
// response, a connection error, a close) goes back to the reactor, and every call still finishes
// exactly once: by its response, its deadline, a connection failure or a messenger shutdown.
// The metric sync_responses_read_by_caller_total counts the responses a caller read, so the tests
// assert which path a call took without any timing.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "rpc/core/messenger_internals.h"
#include "rpc/observe/rpc_metrics.h"
#include "rpc/testing/raw-socket-test-util.h"
#include "rpc/testing/rpc-test-util.h"

namespace rrpc::rpc {
namespace {

constexpr MonoDelta kLong = MonoDelta::FromSeconds(60);

class SyncCallerReadTest : public RpcTestBase {
 protected:
  // One client reactor: every call of the test, sync or async, shares one connection.
  void StartOneConnectionClient(bool caller_reads = true) {
    MessengerOptions options;
    options.num_reactors = 1;
    options.sync_call_caller_reads = caller_reads;
    options.sync_peer_check_after = peer_check_after_;
    StartClient(options);
  }
  Status Echo(const std::string& data, MonoDelta timeout = kLong, uint32_t sleep_ms = 0) {
    return EchoOnce(Proxy(), data, timeout, sleep_ms);
  }
  int64_t ReadByCaller() const {
    return MessengerInternals::metrics(*client_)->sync_responses_read_by_caller->value();
  }
  // Echoes whose data is "hold" wait at gate_ until the test opens it; others pass.
  void HoldEchoesOfHold() {
    service_->set_echo_hook([this](const rtest::EchoRequestPB& req, RpcContext*) {
      if (req.data() == "hold") gate_.Pass();
    });
  }
  // The first call of a thread goes through the reactor, the second is written by the thread
  // and read by the reactor, which then parks its reads: from the third on, the thread reads.
  void WarmUp() {
    ASSERT_TRUE(Echo("warm 1").ok());
    ASSERT_TRUE(Echo("warm 2").ok());
  }
  // A server and a one-connection client whose reads are parked after a call read by its caller;
  // then the server restarts on the same port, closing that connection while nobody reads it.
  void RestartServerWhileReadsAreParked() {
    StartServer();
    StartOneConnectionClient();
    WarmUp();
    ASSERT_TRUE(Echo("parked").ok());
    ASSERT_EQ(1, ReadByCaller());  // so the reads are parked now
    const uint16_t port = server_addr_.port();
    server_->Shutdown();
    StartServer({}, port);
  }

  // MessengerOptions::sync_peer_check_after for StartOneConnectionClient (the default: a
  // parked connection is checked before a call only when its last response is older).
  MonoDelta peer_check_after_ = MessengerOptions().sync_peer_check_after;
};

TEST_F(SyncCallerReadTest, ManyCallsOnOneConnectionAreEachReadByTheCaller) {
  StartServer();
  StartOneConnectionClient();
  WarmUp();
  ASSERT_EQ(0, ReadByCaller());
  constexpr int kCalls = 200;
  for (int i = 0; i < kCalls; i++) {
    // Small and large responses (above the 64 KiB read block: a block of the frame's size).
    const std::string data = i % 50 == 7 ? Pattern(200 * 1024, i) : "call " + std::to_string(i);
    ASSERT_TRUE(Echo(data).ok()) << i;
  }
  EXPECT_EQ(kCalls, ReadByCaller());
  EXPECT_EQ(1u, client_->DumpConnections().size());
}

TEST_F(SyncCallerReadTest, TurnedOffEveryResponseComesThroughTheReactor) {
  StartServer();
  StartOneConnectionClient(/*caller_reads=*/false);
  for (int i = 0; i < 20; i++) ASSERT_TRUE(Echo("call").ok()) << i;
  EXPECT_EQ(0, ReadByCaller());
}

TEST_F(SyncCallerReadTest, AnAsyncCallOutstandingKeepsTheReadsOnTheReactor) {
  StartServer();
  HoldEchoesOfHold();
  StartOneConnectionClient();
  WarmUp();
  ASSERT_TRUE(Echo("parked").ok());
  ASSERT_EQ(1, ReadByCaller());
  // An asynchronous call while the reads are parked: the reactor takes them back.
  rtest::EchoRequestPB req;
  req.set_data("hold");
  rtest::EchoResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(kLong);
  CountDownLatch async_done(1);
  Proxy().EchoAsync(req, &resp, &ctl, [&] { async_done.CountDown(); });
  ASSERT_TRUE(gate_.WaitForEntered(1));
  // While it is outstanding the reactor reads every response (the caller must not park them).
  for (int i = 0; i < 10; i++) ASSERT_TRUE(Echo("beside async " + std::to_string(i)).ok()) << i;
  EXPECT_EQ(1, ReadByCaller());
  gate_.Open();
  ASSERT_TRUE(async_done.WaitFor(kLong));
  ASSERT_TRUE(ctl.status().ok()) << ctl.status().ToString();
  EXPECT_EQ("hold", resp.data());
  // Alone again: the next call is read by the reactor, which parks; then the caller reads.
  for (int i = 0; i < 5; i++) ASSERT_TRUE(Echo("after async").ok()) << i;
  EXPECT_EQ(1 + 4, ReadByCaller());
  EXPECT_EQ(1u, client_->DumpConnections().size());
}

TEST_F(SyncCallerReadTest, AnAsyncResponseTheCallerReadsGoesToTheReactorAtOnce) {
  StartServer();
  HoldEchoesOfHold();
  StartOneConnectionClient();
  Status held;
  std::thread caller([&] {
    WarmUp();
    held = Echo("hold");  // read by this thread: the reads are parked after the warm-up
  });
  ASSERT_TRUE(gate_.WaitForEntered(1));
  // The caller owns the reads while its call is held. An asynchronous call's response reaches
  // the socket first; the caller reads it and must hand it to the reactor now, not after its
  // own response (which comes only once the gate opens).
  rtest::EchoRequestPB req;
  req.set_data("async");
  rtest::EchoResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(kLong);
  CountDownLatch async_done(1);
  Proxy().EchoAsync(req, &resp, &ctl, [&] { async_done.CountDown(); });
  EXPECT_TRUE(async_done.WaitFor(kLong));
  EXPECT_TRUE(ctl.status().ok()) << ctl.status().ToString();
  EXPECT_EQ("async", resp.data());
  gate_.Open();
  caller.join();
  EXPECT_TRUE(held.ok()) << held.ToString();
  EXPECT_EQ(0, ReadByCaller());  // the held call's response came through the reactor
}

TEST_F(SyncCallerReadTest, TwoCallerThreadsShareOneConnection) {
  StartServer();
  StartOneConnectionClient();
  constexpr int kCalls = 300;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; t++) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCalls; i++) {
        if (!Echo("thread " + std::to_string(t) + " call " + std::to_string(i)).ok()) failures++;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(0, failures.load());
  EXPECT_EQ(1u, client_->DumpConnections().size());
  // Alone again, the thread's calls are read by it.
  WarmUp();
  const int64_t before = ReadByCaller();
  for (int i = 0; i < 5; i++) ASSERT_TRUE(Echo("alone").ok());
  EXPECT_EQ(before + 5, ReadByCaller());
}

TEST_F(SyncCallerReadTest, ACallTheCallerReadsTimesOutAtItsDeadline) {
  StartServer();
  StartOneConnectionClient();
  WarmUp();
  const MonoTime start = MonoTime::Now();
  Status s = Echo("slow", MonoDelta::FromMilliseconds(200), /*sleep_ms=*/1500);
  const MonoDelta took = MonoTime::Now() - start;
  EXPECT_TRUE(s.IsTimedOut()) << s.ToString();
  EXPECT_GE(took.ToMilliseconds(), 190);
  EXPECT_LT(took.ToMilliseconds(), 1400);  // not held until the late response
  EXPECT_EQ(0, ReadByCaller());
  // The late response comes while the reads are parked or while the next caller reads: either
  // way it goes to the reactor, which drops it, and the calls go on.
  for (int i = 0; i < 5; i++) ASSERT_TRUE(Echo("after " + std::to_string(i)).ok()) << i;
  EXPECT_EQ(1u, client_->DumpConnections().size());
}

TEST_F(SyncCallerReadTest, MessengerShutdownEndsACallTheCallerReads) {
  StartServer();
  HoldEchoesOfHold();
  StartOneConnectionClient();
  Status held;
  std::thread caller([&] {
    WarmUp();
    held = Echo("hold");
  });
  ASSERT_TRUE(gate_.WaitForEntered(1));
  const MonoTime start = MonoTime::Now();
  client_->Shutdown();
  caller.join();
  EXPECT_FALSE(held.ok());
  EXPECT_LT((MonoTime::Now() - start).ToSeconds(), 30);
  gate_.Open();
}

TEST_F(SyncCallerReadTest, AServerClosingWhileTheCallerReadsFailsTheCall) {
  StartServer();
  HoldEchoesOfHold();
  StartOneConnectionClient();
  Status held;
  std::thread caller([&] {
    WarmUp();
    held = Echo("hold");
  });
  ASSERT_TRUE(gate_.WaitForEntered(1));
  // The server closes its connections before it waits for its workers (one is held).
  std::thread stopper([&] { server_->Shutdown(); });
  caller.join();
  EXPECT_FALSE(held.ok());
  EXPECT_FALSE(held.IsTimedOut()) << held.ToString();
  gate_.Open();
  stopper.join();
}

TEST_F(SyncCallerReadTest, AServerRestartedWhileReadsAreParkedGetsAFreshConnection) {
  peer_check_after_ = MonoDelta();  // always checked (a restart may take less than the default)
  ASSERT_NO_FATAL_FAILURE(RestartServerWhileReadsAreParked());
  // The close came while nobody read: the caller notices before it writes, and its call goes
  // out on a new connection instead of failing on the old one.
  ASSERT_TRUE(Echo("after restart").ok());
  ASSERT_TRUE(Echo("again").ok());
}

// The check skipped (docs/architecture.md, "The synchronous call path"): a server that closes
// right after its last response (well within the threshold here) fails the next call as a
// network error, which the check would have turned into a call on a fresh connection; the call
// after it gets one.
TEST_F(SyncCallerReadTest, ACloseRightAfterTheLastResponseFailsTheNextCallWhenTheCheckIsSkipped) {
  peer_check_after_ = kLong;
  ASSERT_NO_FATAL_FAILURE(RestartServerWhileReadsAreParked());
  Status s = Echo("on the closed connection");
  EXPECT_TRUE(s.IsNetworkError()) << s.ToString();
  ASSERT_TRUE(Echo("on a fresh one").ok());
}

// Past the threshold the check runs: the same restart, a little later than the threshold, gives
// the call a fresh connection.
TEST_F(SyncCallerReadTest, ACloseLaterThanTheThresholdIsNoticedBeforeTheCall) {
  peer_check_after_ = MonoDelta::FromMilliseconds(1);
  ASSERT_NO_FATAL_FAILURE(RestartServerWhileReadsAreParked());
  SleepFor(MonoDelta::FromMilliseconds(5));  // the reads were parked at least this long ago
  ASSERT_TRUE(Echo("after restart").ok());
  // In a loop the calls come within the threshold and skip the check; each is read by its caller
  // (from the fresh connection's third on).
  const int64_t before = ReadByCaller();
  for (int i = 0; i < 20; i++) ASSERT_TRUE(Echo("loop").ok()) << i;
  EXPECT_GE(ReadByCaller(), before + 18);
}

// A hand-made server: answers echo calls; after `answer` of them, sends a connection error
// frame (call id -2) and closes, either once `go` counts down (`before_next_call`) or after
// reading the next call; `closed` counts down once it has. Then it accepts a second connection
// and answers one call.
void ServeThenFail(RawListener* listener, int answer, bool before_next_call, CountDownLatch* go,
                   CountDownLatch* closed, Status* status) {
  auto serve = [](RawConnection* conn, int calls) -> Status {
    for (int i = 0; i < calls; i++) {
      RequestHeader header;
      std::string body;
      RRPC_RETURN_NOT_OK(conn->ReadParsedFrame(&header, &body));
      rtest::EchoRequestPB req;
      if (!req.ParseFromString(body)) return Status::Corruption("raw server: bad request");
      ResponseHeader rh;
      rh.set_call_id(header.call_id());
      rtest::EchoResponsePB resp;
      resp.set_data(req.data());
      RRPC_RETURN_NOT_OK(conn->Write(FrameBytes(rh, resp)));
    }
    return Status::OK();
  };
  Result<Socket> first = listener->Accept();
  if (!first.ok()) {
    *status = first.status();
    return;
  }
  {
    RawConnection conn(std::move(first).value());
    *status = conn.AcceptNegotiation();
    if (status->ok()) *status = serve(&conn, answer);
    std::string next;
    if (status->ok() && !before_next_call) *status = conn.ReadFrame(&next);
    if (status->ok() && before_next_call && !go->WaitFor(kLong)) {
      *status = Status::TimedOut("raw server: no go");
    }
    if (!status->ok()) return;
    *status = conn.Write(BuildServerReply(NegotiatePB(), Status::IllegalState("scripted failure"),
                                          ErrorStatusPB::FATAL_UNKNOWN)
                             .slice.ToString());
    if (!status->ok()) return;
  }
  closed->CountDown();
  Result<Socket> second = listener->Accept();
  if (!second.ok()) {
    *status = second.status();
    return;
  }
  RawConnection conn(std::move(second).value());
  *status = conn.AcceptNegotiation();
  if (status->ok()) *status = serve(&conn, 1);
}

class SyncCallerReadScriptedTest : public SyncCallerReadTest {
 protected:
  Status EchoTo(const std::string& data) {
    return EchoOnce(rtest::EchoServiceProxy(client_, listener_.addr()), data, kLong);
  }
  // Starts the scripted server (ServeThenFail: three calls answered, then on `go_` an error frame
  // and a close, `before_next_call` or in answer to it) and a client whose three calls leave the
  // reads parked.
  void StartScriptedServerAndThreeCalls(bool before_next_call) {
    ASSERT_TRUE(listener_.status().ok());
    server_ = std::thread([this, before_next_call] {
      ServeThenFail(&listener_, 3, before_next_call, &go_, &closed_, &server_status_);
    });
    StartOneConnectionClient();
    for (int i = 0; i < 3; i++) ASSERT_TRUE(EchoTo("call").ok()) << i;
    // The third, alone on the stream, was read by its caller: the reads are parked again.
    ASSERT_EQ(1, ReadByCaller());
  }
  void TearDown() override {
    // A test that stopped early: its client's connections close and `go_` opens, so the server
    // thread ends (its accept and reads are bounded too).
    SyncCallerReadTest::TearDown();
    go_.CountDown();
    if (server_.joinable()) server_.join();
  }

  RawListener listener_;
  CountDownLatch go_{1}, closed_{1};
  Status server_status_;
  std::thread server_;
};

TEST_F(SyncCallerReadScriptedTest, AConnectionErrorWhileReadsAreParkedGivesTheNextCallAFreshOne) {
  peer_check_after_ = MonoDelta();  // always checked
  ASSERT_NO_FATAL_FAILURE(StartScriptedServerAndThreeCalls(/*before_next_call=*/true));
  go_.CountDown();
  ASSERT_TRUE(closed_.WaitFor(kLong));  // on loopback the bytes and the close have arrived
  // The error frame and the close arrive while nobody reads; the next call notices them first.
  Status s = EchoTo("on a fresh connection");
  server_.join();
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(server_status_.ok()) << server_status_.ToString();
}

TEST_F(SyncCallerReadScriptedTest, AConnectionErrorWhileTheCallerReadsFailsItsCall) {
  ASSERT_NO_FATAL_FAILURE(StartScriptedServerAndThreeCalls(/*before_next_call=*/false));
  // The caller reads the error frame instead of its response: the reactor gets it (and the
  // close), and the call fails as it would have without the caller reading.
  Status s = EchoTo("refused");
  EXPECT_FALSE(s.ok());
  EXPECT_FALSE(s.IsTimedOut()) << s.ToString();
  EXPECT_EQ(1, ReadByCaller());
  // The scripted server's second connection: the next call opens it.
  EXPECT_TRUE(EchoTo("next").ok());
  server_.join();
  EXPECT_TRUE(server_status_.ok()) << server_status_.ToString();
}

}  // namespace
}  // namespace rrpc::rpc
