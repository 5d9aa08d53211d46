// Connection-level tests over real sockets: malformed input from one raw client closes that
// connection only, while a healthy messenger client's calls keep working; negotiation and idle
// timeouts close the connections they should.
#include "rpc/core/connection.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "rpc/core/constants.h"
#include "rpc/testing/raw-socket-test-util.h"
#include "rpc/testing/rpc-test-util.h"

namespace rrpc::rpc {
namespace {

const char kEchoService[] = "rrpc.rtest.EchoService";

class ConnectionTest : public RpcTestBase {
 protected:
  void SetUp() override {
    StartServer(ServerOptions());
    StartClient();
    // The healthy client's connection exists before any bad one.
    if (HealthyCallInSetUp()) ExpectHealthyCall();
  }
  virtual MessengerOptions ServerOptions() { return {}; }
  virtual bool HealthyCallInSetUp() { return true; }

  // The healthy client's call on its (long-lived) connection succeeds.
  void ExpectHealthyCall() {
    rtest::EchoRequestPB req;
    req.set_data("still healthy " + std::to_string(healthy_calls_++));
    rtest::EchoResponsePB resp;
    RpcController ctl;
    ctl.set_timeout(MonoDelta::FromSeconds(60));
    Status s = Proxy().Echo(req, &resp, &ctl);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(req.data(), resp.data());
  }

  // The server closes `raw` (the raw socket sees EOF or a reset), forgets it, and keeps serving
  // the healthy client on the same connection as before.
  void ExpectClosedAndServerHealthy(RawConnection* raw) {
    EXPECT_TRUE(raw->WaitForClose()) << "server did not close the bad connection";
    // Only the healthy client's connection is left on the server.
    EXPECT_TRUE(WaitForCondition([&] { return server_->DumpConnections().size() == 1; }));
    ASSERT_NO_FATAL_FAILURE(ExpectHealthyCall());
    EXPECT_EQ(1u, client_->DumpConnections().size());
  }

  // A raw connection that has negotiated like a real client.
  std::unique_ptr<RawConnection> NegotiatedRaw() {
    auto raw = std::make_unique<RawConnection>(server_addr_);
    Status s = raw->status();
    if (s.ok()) s = raw->Negotiate();
    EXPECT_TRUE(s.ok()) << s.ToString();
    return raw;
  }

  // Reads the error frame the server sends before closing a connection it refuses.
  void ExpectConnectionError(RawConnection* raw, ErrorStatusPB::RpcErrorCodePB code) {
    ResponseHeader header;
    std::string body;
    Status s = raw->ReadParsedFrame(&header, &body);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(kNegotiateCallId, header.call_id());
    EXPECT_TRUE(header.is_error());
    ErrorStatusPB error;
    ASSERT_TRUE(error.ParseFromString(body));
    EXPECT_EQ(code, error.code()) << error.ShortDebugString();
    EXPECT_FALSE(error.message().empty());
  }

  int healthy_calls_ = 0;
};

TEST_F(ConnectionTest, RawClientSpeakingTheProtocolIsAnswered) {
  auto raw = NegotiatedRaw();
  rtest::EchoRequestPB req;
  req.set_data("raw");
  ASSERT_TRUE(raw->Write(CallFrame(42, kEchoService, "Echo", req, 60000)).ok());
  ResponseHeader header;
  std::string body;
  ASSERT_TRUE(raw->ReadParsedFrame(&header, &body).ok());
  EXPECT_EQ(42, header.call_id());
  EXPECT_FALSE(header.is_error());
  rtest::EchoResponsePB resp;
  ASSERT_TRUE(resp.ParseFromString(body));
  EXPECT_EQ("raw", resp.data());
}

TEST_F(ConnectionTest, LoneResponsesTooLargeForTheSocketAreWrittenWhole) {
  // One call at a time, so each response is a lone one that its worker writes itself. 24 MiB does
  // not fit in loopback's socket buffers, so the worker's write is partial and the reactor must
  // finish it; small ones in between go out whole from the worker. Every byte arrives, in order.
  auto raw = NegotiatedRaw();
  const std::vector<size_t> sizes = {24u << 20, 10, 24u << 20, 0, 1 << 20};
  int32_t id = 0;
  for (size_t size : sizes) {
    rtest::EchoRequestPB req;
    std::string data(size, '\0');
    for (size_t i = 0; i < size; i++) data[i] = static_cast<char>('a' + (i * 7 + id) % 26);
    req.set_data(data);
    ASSERT_TRUE(raw->Write(CallFrame(++id, kEchoService, "Echo", req, 120000)).ok());
    ResponseHeader header;
    std::string body;
    ASSERT_TRUE(raw->ReadParsedFrame(&header, &body).ok()) << "call " << id;
    EXPECT_EQ(id, header.call_id());
    ASSERT_FALSE(header.is_error()) << body;
    rtest::EchoResponsePB resp;
    ASSERT_TRUE(resp.ParseFromString(body));
    EXPECT_TRUE(resp.data() == data) << "call " << id << ": " << resp.data().size() << " bytes";
  }
  ASSERT_NO_FATAL_FAILURE(ExpectHealthyCall());
}

TEST_F(ConnectionTest, BadPreambleGetsAnErrorFrameAndClosesOnlyThatConnection) {
  RawConnection raw(server_addr_);
  ASSERT_TRUE(raw.ok()) << raw.status().ToString();
  ASSERT_TRUE(raw.Write("GET / ").ok());  // exactly a preamble's length
  ExpectConnectionError(&raw, ErrorStatusPB::FATAL_INVALID_FRAME);
  ExpectClosedAndServerHealthy(&raw);
}

TEST_F(ConnectionTest, HttpRequestInsteadOfPreambleClosesOnlyThatConnection) {
  RawConnection raw(server_addr_);
  ASSERT_TRUE(raw.ok());
  ASSERT_TRUE(raw.Write("GET / HTTP/1.1\r\nHost: x\r\n\r\n").ok());
  ExpectClosedAndServerHealthy(&raw);
}

TEST_F(ConnectionTest, WrongWireVersionGetsVersionMismatchAndClosesOnlyThatConnection) {
  RawConnection raw(server_addr_);
  ASSERT_TRUE(raw.ok());
  ASSERT_TRUE(raw.SendPreamble(kWireVersion + 1).ok());
  ExpectConnectionError(&raw, ErrorStatusPB::FATAL_VERSION_MISMATCH);
  ExpectClosedAndServerHealthy(&raw);
}

TEST_F(ConnectionTest, PreambleCutShortThenCloseClosesOnlyThatConnection) {
  RawConnection raw(server_addr_);
  ASSERT_TRUE(raw.ok());
  ASSERT_TRUE(raw.Write("RRP").ok());
  raw.ShutdownWrite();
  ExpectClosedAndServerHealthy(&raw);
}

TEST_F(ConnectionTest, LengthPrefixCutShortThenCloseClosesOnlyThatConnection) {
  auto raw = NegotiatedRaw();
  ASSERT_TRUE(raw->Write(std::string("\x00\x00", 2)).ok());
  raw->ShutdownWrite();
  ExpectClosedAndServerHealthy(raw.get());
}

TEST_F(ConnectionTest, FrameCutShortThenCloseClosesOnlyThatConnection) {
  auto raw = NegotiatedRaw();
  rtest::EchoRequestPB req;
  req.set_data("cut");
  const std::string frame = CallFrame(1, kEchoService, "Echo", req);
  ASSERT_TRUE(raw->Write(frame.substr(0, frame.size() - 3)).ok());
  raw->ShutdownWrite();
  ExpectClosedAndServerHealthy(raw.get());
  EXPECT_EQ(0, service_->calls() - healthy_calls_);
}

TEST_F(ConnectionTest, OversizedLengthPrefixClosesOnlyThatConnection) {
  auto raw = NegotiatedRaw();
  ASSERT_TRUE(raw->Write(std::string("\xff\xff\xff\xff", 4)).ok());
  ExpectClosedAndServerHealthy(raw.get());
}

TEST_F(ConnectionTest, LengthPrefixJustOverTheMaximumClosesOnlyThatConnection) {
  auto raw = NegotiatedRaw();
  uint8_t prefix[4];
  EncodeBigEndian32(prefix, static_cast<uint32_t>(server_->options().max_message_size + 1));
  ASSERT_TRUE(raw->Write(std::string(reinterpret_cast<char*>(prefix), 4)).ok());
  ExpectClosedAndServerHealthy(raw.get());
}

TEST_F(ConnectionTest, ZeroLengthFrameClosesOnlyThatConnection) {
  auto raw = NegotiatedRaw();
  ASSERT_TRUE(raw->Write(std::string(4, '\0')).ok());
  ExpectClosedAndServerHealthy(raw.get());
}

TEST_F(ConnectionTest, BadVarintClosesOnlyThatConnection) {
  auto raw = NegotiatedRaw();
  ASSERT_TRUE(raw->Write(RawFrame(std::string(12, '\xff'))).ok());
  ExpectClosedAndServerHealthy(raw.get());
}

TEST_F(ConnectionTest, HeaderLengthPastTheFrameClosesOnlyThatConnection) {
  auto raw = NegotiatedRaw();
  ASSERT_TRUE(raw->Write(RawFrame(std::string("\x7f") + "abc")).ok());
  ExpectClosedAndServerHealthy(raw.get());
}

TEST_F(ConnectionTest, HeaderThatDoesNotParseClosesOnlyThatConnection) {
  auto raw = NegotiatedRaw();
  ASSERT_TRUE(raw->Write(RawFrame(std::string("\x03\x07\xff\xff\x00", 5))).ok());
  ExpectClosedAndServerHealthy(raw.get());
}

TEST_F(ConnectionTest, HeaderMissingItsCallIdClosesOnlyThatConnection) {
  auto raw = NegotiatedRaw();
  RequestHeader header;
  header.mutable_remote_method()->set_service_name(kEchoService);
  header.mutable_remote_method()->set_method_name("Echo");
  const std::string h = header.SerializePartialAsString();
  ASSERT_TRUE(
      raw->Write(RawFrame(std::string(1, static_cast<char>(h.size())) + h + std::string(1, '\0')))
          .ok());
  ExpectClosedAndServerHealthy(raw.get());
}

TEST_F(ConnectionTest, CallWithoutRemoteMethodClosesOnlyThatConnection) {
  auto raw = NegotiatedRaw();
  RequestHeader header;
  header.set_call_id(5);
  rtest::EchoRequestPB req;
  req.set_data("x");
  ASSERT_TRUE(raw->Write(FrameBytes(header, req)).ok());
  ExpectClosedAndServerHealthy(raw.get());
}

TEST_F(ConnectionTest, BadSidecarOffsetsCloseOnlyThatConnection) {
  auto raw = NegotiatedRaw();
  RequestHeader header;
  header.set_call_id(5);
  header.mutable_remote_method()->set_service_name(kEchoService);
  header.mutable_remote_method()->set_method_name("Echo");
  header.add_sidecar_offsets(0);
  header.add_sidecar_offsets(100);  // past the 4 sidecar bytes sent
  rtest::EchoRequestPB req;
  req.set_data("x");
  ASSERT_TRUE(raw->Write(FrameBytes(header, req, "abcd")).ok());
  ExpectClosedAndServerHealthy(raw.get());
  EXPECT_EQ(0, service_->calls() - healthy_calls_);
}

TEST_F(ConnectionTest, CallFrameBeforeNegotiationClosesOnlyThatConnection) {
  RawConnection raw(server_addr_);
  ASSERT_TRUE(raw.ok());
  ASSERT_TRUE(raw.SendPreamble().ok());
  rtest::EchoRequestPB req;
  req.set_data("too early");
  ASSERT_TRUE(raw.Write(CallFrame(1, kEchoService, "Echo", req)).ok());
  ExpectConnectionError(&raw, ErrorStatusPB::FATAL_INVALID_FRAME);
  ExpectClosedAndServerHealthy(&raw);
  EXPECT_EQ(0, service_->calls() - healthy_calls_);
}

TEST_F(ConnectionTest, NegativeCallIdClosesOnlyThatConnection) {
  for (int32_t id : {-1, kNegotiateCallId, kControlCallId, -1000}) {
    SCOPED_TRACE(id);
    auto raw = NegotiatedRaw();
    rtest::EchoRequestPB req;
    req.set_data("negative");
    ASSERT_TRUE(raw->Write(CallFrame(id, kEchoService, "Echo", req)).ok());
    ExpectClosedAndServerHealthy(raw.get());
  }
  EXPECT_EQ(0, service_->calls() - healthy_calls_);
}

TEST_F(ConnectionTest, GoodCallsBeforeABadFrameOnTheSameConnectionAreAnswered) {
  auto raw = NegotiatedRaw();
  rtest::EchoRequestPB req;
  req.set_data("before");
  ASSERT_TRUE(raw->Write(CallFrame(3, kEchoService, "Echo", req)).ok());
  ResponseHeader header;
  std::string body;
  ASSERT_TRUE(raw->ReadParsedFrame(&header, &body).ok());
  EXPECT_EQ(3, header.call_id());
  ASSERT_TRUE(raw->Write(RawFrame(std::string(12, '\xff'))).ok());
  ExpectClosedAndServerHealthy(raw.get());
}

TEST_F(ConnectionTest, PeerClosingWithCallsInFlightLeavesTheServerHealthy) {
  // The handler is still running (and more calls are queued) when the raw client disappears;
  // their responses then go nowhere.
  service_->set_echo_hook([this](const rtest::EchoRequestPB& req, RpcContext*) {
    if (req.data() == "hold") gate_.Pass();
  });
  {
    auto raw = NegotiatedRaw();
    rtest::EchoRequestPB req;
    req.set_data("hold");
    std::string frames;
    for (int id = 1; id <= 5; id++) frames += CallFrame(id, kEchoService, "Echo", req);
    ASSERT_TRUE(raw->Write(frames).ok());
    ASSERT_TRUE(gate_.WaitForEntered(1));
  }  // closed
  EXPECT_TRUE(WaitForCondition([&] { return server_->DumpConnections().size() == 1; }));
  gate_.Open();
  EXPECT_TRUE(WaitForCondition([&] { return gate_.entered() == 5; }));
  ASSERT_NO_FATAL_FAILURE(ExpectHealthyCall());
}

// Read blocks far smaller than the frames: length prefixes and frames straddle block ends all the
// time, on both the server's and the client's connection.
class SmallReadBlockConnectionTest : public ConnectionTest {
 protected:
  MessengerOptions ServerOptions() override {
    MessengerOptions o;
    o.read_block_size = 64;
    o.service_queue_length = 10000;
    return o;
  }
};

TEST_F(SmallReadBlockConnectionTest, PipelinedCallsStraddlingReadBlocksAreAllAnswered) {
  client_->Shutdown();
  MessengerOptions client_options;
  client_options.read_block_size = 64;
  client_options.num_reactors = 1;
  StartClient(client_options);
  constexpr int kCalls = 2000;
  auto proxy = Proxy();
  std::vector<rtest::EchoRequestPB> reqs(kCalls);
  std::vector<rtest::EchoResponsePB> resps(kCalls);
  std::vector<RpcController> ctls(kCalls);
  CountDownLatch done(kCalls);
  for (int i = 0; i < kCalls; i++) {
    // Sizes from 0 to 150 bytes, so frames end at every offset of a 64-byte block.
    reqs[i].set_data(std::string(i % 151, static_cast<char>('a' + i % 26)));
    ctls[i].set_timeout(MonoDelta::FromSeconds(120));
    proxy.EchoAsync(reqs[i], &resps[i], &ctls[i], [&done] { done.CountDown(); });
  }
  ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(180)));
  int failed = 0;
  for (int i = 0; i < kCalls; i++) {
    if (ctls[i].status().ok() && resps[i].data() == reqs[i].data()) continue;
    if (failed++ < 5) ADD_FAILURE() << "call " << i << ": " << ctls[i].status().ToString();
  }
  EXPECT_EQ(0, failed);
}

// A client that sends calls but does not read their responses: the server stops reading from it
// once megabytes of responses wait (so its memory stays bounded), and resumes when the client
// reads again. Every call is still answered.
class BackpressureConnectionTest : public ConnectionTest {
 protected:
  MessengerOptions ServerOptions() override {
    MessengerOptions o;
    o.service_queue_length = 10000;
    // The client keeps its receive window closed as long as the test likes; Linux counts
    // zero-window probing against TCP_USER_TIMEOUT, which would declare it dead.
    o.tcp_user_timeout = MonoDelta();
    return o;
  }
};

TEST_F(BackpressureConnectionTest, ServerStopsReadingFromAClientThatDoesNotReadResponses) {
  constexpr int kCalls = 400;
  constexpr size_t kBytes = 256 * 1024;  // 100 MiB of responses in all: more than any buffer
  auto raw = NegotiatedRaw();
  rtest::EchoRequestPB req;
  req.set_data(std::string(kBytes, 'b'));
  const std::string frame = CallFrame(1, kEchoService, "Echo", req);
  std::thread sender([&] {
    for (int i = 0; i < kCalls; i++) {
      if (!raw->Write(frame).ok()) return;  // blocks while the server does not read
    }
  });
  auto raw_paused = [&] {
    for (const ConnectionInfo& c : server_->DumpConnections()) {
      if (c.reads_paused) return true;
    }
    return false;
  };
  ASSERT_TRUE(WaitForCondition(raw_paused)) << "the server kept reading";
  EXPECT_LT(service_->calls(), kCalls);
  ASSERT_NO_FATAL_FAILURE(ExpectHealthyCall());  // other connections are unaffected

  int answered = 0;
  for (; answered < kCalls; answered++) {
    ResponseHeader header;
    std::string body;
    if (!raw->ReadParsedFrame(&header, &body).ok()) break;
    if (header.is_error()) break;
  }
  sender.join();
  EXPECT_EQ(kCalls, answered);
  EXPECT_FALSE(raw_paused());
}

// ---- Timeouts that close connections.

class NegotiationTimeoutConnectionTest : public ConnectionTest {
 protected:
  MessengerOptions ServerOptions() override {
    MessengerOptions o;
    o.negotiation_timeout = MonoDelta::FromMilliseconds(200);
    o.num_reactors = 1;  // one loop: its timers fire in the order of their deadlines
    return o;
  }
};

TEST_F(NegotiationTimeoutConnectionTest, ClosesAConnectionThatSendsNothing) {
  RawConnection raw(server_addr_);
  ASSERT_TRUE(raw.ok());
  ExpectClosedAndServerHealthy(&raw);
}

TEST_F(NegotiationTimeoutConnectionTest, ClosesAConnectionStuckAfterThePreamble) {
  RawConnection raw(server_addr_);
  ASSERT_TRUE(raw.ok());
  ASSERT_TRUE(raw.SendPreamble().ok());
  ExpectClosedAndServerHealthy(&raw);
}

TEST_F(NegotiationTimeoutConnectionTest, SparesConnectionsThatNegotiated) {
  auto raw = NegotiatedRaw();
  // A connection opened after it that never negotiates: once the server has closed that one at
  // its negotiation timeout, the negotiated connection's own timer (armed earlier, on the same
  // loop) has had its turn. Then the negotiated raw connection still gets answers.
  RawConnection silent(server_addr_);
  ASSERT_TRUE(silent.ok());
  ASSERT_TRUE(silent.WaitForClose());
  rtest::EchoRequestPB req;
  req.set_data("late");
  ASSERT_TRUE(raw->Write(CallFrame(9, kEchoService, "Echo", req)).ok());
  ResponseHeader header;
  std::string body;
  ASSERT_TRUE(raw->ReadParsedFrame(&header, &body).ok());
  EXPECT_EQ(9, header.call_id());
  EXPECT_FALSE(header.is_error());
}

// A short idle timeout, scanned often. The fixture makes no call of its own: a connection's first
// call goes out as soon as it has negotiated, so it cannot look idle before then.
class IdleTimeoutConnectionTest : public ConnectionTest {
 protected:
  MessengerOptions ServerOptions() override {
    MessengerOptions o;
    o.idle_timeout = MonoDelta::FromMilliseconds(1000);
    o.idle_scan_period = MonoDelta::FromMilliseconds(50);
    o.num_reactors = 1;  // one scan sees every connection
    return o;
  }
  bool HealthyCallInSetUp() override { return false; }
};

TEST_F(IdleTimeoutConnectionTest, ClosesAnIdleRawConnection) {
  auto raw = NegotiatedRaw();
  EXPECT_TRUE(raw->WaitForClose()) << "idle connection never closed";
  EXPECT_TRUE(WaitForCondition([&] { return server_->DumpConnections().empty(); }));
}

TEST_F(IdleTimeoutConnectionTest, ClosesIdleClientConnectionsAndTheNextCallReconnects) {
  ASSERT_NO_FATAL_FAILURE(ExpectHealthyCall());
  // The connection goes idle: the server closes it and the client notices (its reactor forgets
  // the connection).
  EXPECT_TRUE(WaitForCondition([&] { return server_->DumpConnections().empty(); }));
  EXPECT_TRUE(WaitForCondition([&] { return client_->DumpConnections().empty(); }));
  // The next call opens a new connection.
  ASSERT_NO_FATAL_FAILURE(ExpectHealthyCall());
  EXPECT_EQ(1u, client_->DumpConnections().size());
}

TEST_F(IdleTimeoutConnectionTest, ClosesAConnectionWhosePeerStoppedReading) {
  // The raw client sends calls with large responses and never reads: the responses fill the
  // socket buffers, the server pauses reading, and after the idle timeout without write progress
  // it gives up on the connection (it is not idle: bytes wait, so the idle rule alone would keep
  // it forever).
  constexpr int kCalls = 64;
  constexpr size_t kBytes = 256 * 1024;  // 16 MiB of responses: above the 8 MiB read pause
  auto raw = NegotiatedRaw();
  rtest::EchoRequestPB req;
  req.set_data(std::string(kBytes, 's'));
  const std::string frame = CallFrame(1, kEchoService, "Echo", req);
  std::thread sender([&] {
    for (int i = 0; i < kCalls; i++) {
      if (!raw->Write(frame).ok()) return;  // fails once the server closes the connection
    }
  });
  EXPECT_TRUE(WaitForCondition([&] { return server_->DumpConnections().empty(); }))
      << "a connection whose peer stopped reading was never closed";
  raw->ShutdownBoth();  // unblocks the sender if the server still had room for its frames
  sender.join();
  ASSERT_NO_FATAL_FAILURE(ExpectHealthyCall());  // the server is fine
}

TEST_F(IdleTimeoutConnectionTest, ConnectionWithACallInFlightIsNotIdle) {
  BlockEchoes();
  auto busy = NegotiatedRaw();  // a raw peer: after its call it sends nothing, not even a ping
  rtest::EchoRequestPB req;
  req.set_data("slow");
  ASSERT_TRUE(busy->Write(CallFrame(7, kEchoService, "Echo", req, 120000)).ok());
  ASSERT_TRUE(gate_.WaitForEntered(1));
  // Idle connections opened after the call arrived, one after the other: once the server has
  // closed one as idle, a scan has passed the busy connection's idle cutoff too (its last byte
  // came earlier). Twice, so that several idle timeouts pass while the handler runs.
  for (int i = 0; i < 2; i++) {
    auto idle = NegotiatedRaw();
    ASSERT_TRUE(idle->WaitForClose()) << "the idle connection was never closed";
  }
  ASSERT_TRUE(WaitForCondition([&] { return server_->DumpConnections().size() <= 1; }));
  EXPECT_EQ(1u, server_->DumpConnections().size());
  gate_.Open();
  ResponseHeader header;
  std::string body;
  ASSERT_TRUE(busy->ReadParsedFrame(&header, &body).ok()) << "the busy connection was closed";
  EXPECT_EQ(7, header.call_id());
  EXPECT_FALSE(header.is_error());
}

}  // namespace
}  // namespace rrpc::rpc
