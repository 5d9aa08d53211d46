// What a client call carries, against a real server: sidecars on requests and responses, and
// the message size limits on both sides (refused before sending, connection closed, clear error).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "rpc/testing/rpc-test-util.h"
#include "rrpc/util/copy_counter.h"

namespace rrpc::rpc {
namespace {

class ClientPayloadTest : public RpcTestBase {
 protected:
  // An echo of `data` with a 60 s deadline.
  Status Echo(const std::string& data) {
    rtest::EchoRequestPB req;
    req.set_data(data);
    rtest::EchoResponsePB resp;
    RpcController ctl;
    ctl.set_timeout(MonoDelta::FromSeconds(60));
    return Proxy().Echo(req, &resp, &ctl);
  }
};

// ---- Sidecars.

TEST_F(ClientPayloadTest, SidecarsOfManySizesRoundTripOnRequestAndResponse) {
  StartServer();
  StartClient();
  const std::vector<size_t> sizes = {0, 1, 2, 100, 4096, 65536 + 3, 1 << 20, 0};
  std::vector<std::string> payloads;
  for (size_t i = 0; i < sizes.size(); i++) payloads.push_back(Pattern(sizes[i], i));
  for (int round = 0; round < 3; round++) {
    rtest::EchoRequestPB req;
    req.set_data("with sidecars");
    rtest::EchoResponsePB resp;
    RpcController ctl;
    ctl.set_timeout(MonoDelta::FromSeconds(60));
    for (size_t i = 0; i < payloads.size(); i++) {
      if (i % 2 == 0) {
        ctl.AddOutboundSidecar(Slice(payloads[i]));  // borrowed
      } else {
        BlockRef block = Block::Allocate(payloads[i].size());
        memcpy(block->data(), payloads[i].data(), payloads[i].size());
        ctl.AddOutboundSidecar(BlockSlice{block, Slice(block->data(), payloads[i].size())});
      }
    }
    Status s = Proxy().Echo(req, &resp, &ctl);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ("with sidecars", resp.data());
    // The server echoed each sidecar back as a response sidecar.
    ASSERT_EQ(payloads.size(), ctl.num_inbound_sidecars());
    for (size_t i = 0; i < payloads.size(); i++) {
      EXPECT_EQ(payloads[i].size(), ctl.inbound_sidecar(i).size()) << i;
      EXPECT_TRUE(ctl.inbound_sidecar(i) == Slice(payloads[i])) << "sidecar " << i;
    }
  }
}

TEST_F(ClientPayloadTest, SidecarsOfConcurrentCallsDoNotMix) {
  StartServer();
  StartClient();
  constexpr int kCalls = 50;
  std::vector<std::string> payloads;
  std::vector<rtest::EchoRequestPB> reqs(kCalls);
  std::vector<rtest::EchoResponsePB> resps(kCalls);
  std::vector<RpcController> ctls(kCalls);
  for (int i = 0; i < kCalls; i++) payloads.push_back(Pattern(1000 + i * 997, i));
  CountDownLatch done(kCalls);
  auto proxy = Proxy();
  for (int i = 0; i < kCalls; i++) {
    reqs[i].set_data(std::to_string(i));
    ctls[i].set_timeout(MonoDelta::FromSeconds(60));
    ctls[i].AddOutboundSidecar(Slice(payloads[i]));
    proxy.EchoAsync(reqs[i], &resps[i], &ctls[i], [&done] { done.CountDown(); });
  }
  ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(120)));
  for (int i = 0; i < kCalls; i++) {
    ASSERT_TRUE(ctls[i].status().ok()) << ctls[i].status().ToString();
    ASSERT_EQ(1u, ctls[i].num_inbound_sidecars());
    EXPECT_TRUE(ctls[i].inbound_sidecar(0) == Slice(payloads[i])) << i;
  }
}

// Large sidecars go from the caller's buffer to the socket (writev) and from the socket into a
// block sized from the length prefix, which the handler reads: no byte of them is copied by rrpc
// on either side (the copy counter, util/copy_counter.h). A protobuf body is copied once per side
// and direction: serialized by its sender, parsed by its receiver.
TEST_F(ClientPayloadTest, LargeSidecarsCrossWithoutCopiesAndBodiesOncePerSide) {
  StartServer();
  StartClient();
  const std::string sidecar = Pattern(1 << 20, 3);
  rtest::EchoRequestPB req;
  req.set_data(std::string(100, 'b'));
  auto call = [&]() {
    rtest::EchoResponsePB resp;
    RpcController ctl;
    ctl.set_timeout(MonoDelta::FromSeconds(60));
    ctl.AddOutboundSidecar(Slice(sidecar));  // borrowed: sent from this buffer
    ASSERT_TRUE(Proxy().Echo(req, &resp, &ctl).ok()) << ctl.status().ToString();
    ASSERT_EQ(1u, ctl.num_inbound_sidecars());
    EXPECT_TRUE(ctl.inbound_sidecar(0) == Slice(sidecar));
  };
  // The first large frame of each connection arrives in a plain read block and is moved once;
  // from then on each connection reads a length prefix first.
  call();
  const CopyTotals before = ReadCopyTotals();
  constexpr int kCalls = 5;
  for (int i = 0; i < kCalls; i++) call();
  const CopyTotals after = ReadCopyTotals();
  auto delta = [&](CopySide side, CopyKind kind) {
    return after.get(side, kind) - before.get(side, kind);
  };
  EXPECT_EQ(0u, delta(CopySide::kClient, CopyKind::kStream));
  EXPECT_EQ(0u, delta(CopySide::kServer, CopyKind::kStream));
  // The echo's response body is the request's: each side copies both once per call.
  const uint64_t body = req.ByteSizeLong();
  EXPECT_EQ(kCalls * 2 * body, delta(CopySide::kClient, CopyKind::kBody));
  EXPECT_EQ(kCalls * 2 * body, delta(CopySide::kServer, CopyKind::kBody));
}

// Bulk calls (at least MessengerOptions::bulk_connection_bytes) go to a remote over a connection
// of their own, on a reactor of their own, so small calls never queue behind them; with the
// threshold at 0 every call shares one connection. Calls from one thread use one reactor per size
// class, so the count is exact.
TEST_F(ClientPayloadTest, BulkCallsTravelOnAConnectionOfTheirOwn) {
  StartServer();
  for (size_t threshold : {size_t{256 * 1024}, size_t{0}}) {
    MessengerOptions o;
    o.bulk_connection_bytes = threshold;
    StartClient(o);
    const std::string big = Pattern(300 * 1024, 1);
    for (int i = 0; i < 3; i++) {
      ASSERT_TRUE(Echo("small").ok());
      rtest::EchoRequestPB req;
      req.set_data("bulk");
      rtest::EchoResponsePB resp;
      RpcController ctl;
      ctl.set_timeout(MonoDelta::FromSeconds(60));
      ctl.AddOutboundSidecar(Slice(big));
      ASSERT_TRUE(Proxy().Echo(req, &resp, &ctl).ok()) << ctl.status().ToString();
      ASSERT_EQ(1u, ctl.num_inbound_sidecars());
      EXPECT_TRUE(ctl.inbound_sidecar(0) == Slice(big));
    }
    const std::vector<ConnectionInfo> conns = client_->DumpConnections();
    EXPECT_EQ(threshold > 0 ? 2u : 1u, conns.size()) << threshold;
    // Two reactors (the default): the bulk connection has one of its own, so a small call never
    // waits for a reactor busy with a bulk frame.
    ASSERT_EQ(2, o.num_reactors);
    if (conns.size() == 2) {
      EXPECT_NE(conns[0].reactor, conns[1].reactor);
    }
    client_->Shutdown();
    client_.reset();
  }
}

// ---- Message size limits.

constexpr size_t k16MiB = 16u << 20;

TEST_F(ClientPayloadTest, RequestAboveTheClientsLimitIsRefusedBeforeSending) {
  StartServer();
  MessengerOptions o;
  o.max_message_size = 8u << 20;
  StartClient(o);
  const std::string big(k16MiB, 'b');
  {
    // In the body.
    Status s = Echo(big);
    EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString().substr(0, 200);
    EXPECT_NE(std::string::npos, s.ToString().find("exceeds the maximum")) << s.ToString();
  }
  {
    // In a sidecar.
    rtest::EchoRequestPB req;
    req.set_data("small");
    rtest::EchoResponsePB resp;
    RpcController ctl;
    ctl.set_timeout(MonoDelta::FromSeconds(60));
    ctl.AddOutboundSidecar(Slice(big));
    Status s = Proxy().Echo(req, &resp, &ctl);
    EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
    EXPECT_NE(std::string::npos, s.ToString().find("exceeds the maximum")) << s.ToString();
  }
  // Nothing reached the server, and the client still works.
  EXPECT_EQ(0, service_->calls());
  ASSERT_TRUE(Echo("small").ok());
}

TEST_F(ClientPayloadTest, RequestAboveTheServersLimitClosesTheConnection) {
  MessengerOptions server_options;
  server_options.max_message_size = 8u << 20;
  StartServer(server_options);
  StartClient();  // default limit, 64 MiB: it sends the 16 MiB request
  ASSERT_TRUE(Echo("before").ok());
  Status s = Echo(std::string(k16MiB, 'b'));
  // The server refuses the frame from its length prefix and closes the connection: the client
  // sees the connection closed or reset under it.
  EXPECT_TRUE(s.IsNetworkError()) << s.ToString();
  EXPECT_EQ(1, service_->calls());
  // A new connection serves the next call.
  Status after;
  for (int attempt = 0; attempt < 50; attempt++) {
    after = Echo("after");
    if (after.ok()) break;
    ASSERT_TRUE(after.IsNetworkError()) << after.ToString();
    SleepFor(MonoDelta::FromMilliseconds(20));
  }
  EXPECT_TRUE(after.ok()) << after.ToString();
}

TEST_F(ClientPayloadTest, ResponseAboveTheClientsLimitFailsTheCallWithAClearError) {
  StartServer();  // default limit: it sends the 16 MiB response
  MessengerOptions client_options;
  client_options.max_message_size = 8u << 20;
  StartClient(client_options);
  service_->set_echo_hook([](const rtest::EchoRequestPB& req, RpcContext* context) {
    if (req.data() != "big response") return;
    BlockRef block = Block::Allocate(k16MiB);
    memset(block->data(), 'r', k16MiB);
    context->AddOutboundSidecar(BlockSlice{block, Slice(block->data(), k16MiB)});
  });
  ASSERT_TRUE(Echo("before").ok());
  Status s = Echo("big response");
  EXPECT_TRUE(s.IsInvalidArgument() || s.IsNetworkError()) << s.ToString();
  EXPECT_NE(std::string::npos, s.ToString().find("exceeds the maximum")) << s.ToString();
  ASSERT_TRUE(Echo("after").ok());
}

}  // namespace
}  // namespace rrpc::rpc
