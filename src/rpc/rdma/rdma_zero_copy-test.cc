// Zero copy over RDMA on the software backend (docs/rdma.md, "Zero copy"): large messages go up
// to the calls as references to their receive blocks, counted by util/copy_counter.h; calls that
// hold receive blocks don't stop the others (spares are posted in their place, or messages are
// copied out when none is left) and give them back when they end; a connection torn down under
// such calls leaves their bytes readable. rnr_retry = 0 throughout: a credit mistake fails loudly.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "rpc/rdma/rdma_factory.h"
#include "rpc/testing/rpc-test-util.h"
#include "rrpc/util/copy_counter.h"

namespace rrpc::rpc {
namespace {

using rdma::RdmaOptions;
using rdma::RdmaTransportFactory;

RdmaOptions Rdma(uint32_t spares) {
  RdmaOptions o = rdma::SoftRdmaOptions();
  o.endpoint.buffer_size = 16 * 1024;
  o.endpoint.receive_buffers = 8;
  o.endpoint.send_buffers = 8;
  o.endpoint.spare_receive_buffers = spares;
  o.endpoint.rnr_retry = 0;
  return o;
}

uint64_t StreamCopies(CopySide side) { return ReadCopyTotals().get(side, CopyKind::kStream); }

class RdmaZeroCopyTest : public RpcTestBase {
 protected:
  void Start(const RdmaOptions& o) {
    MessengerOptions so, co;
    so.service_queue_length = 1024;
    so.num_workers = 8;            // handlers wait at the gate while others run
    co.bulk_connection_bytes = 0;  // one connection: the checks below read its details
    so.transport_factory = std::make_shared<RdmaTransportFactory>(o);
    co.transport_factory = std::make_shared<RdmaTransportFactory>(o);
    StartServer(so);
    StartClient(co);
  }
  // One Echo call carrying `sidecar`, its echo checked byte for byte.
  Status EchoSidecar(const std::string& sidecar, const std::string& data = "x") {
    rtest::EchoRequestPB req;
    req.set_data(data);
    rtest::EchoResponsePB resp;
    RpcController ctl;
    ctl.set_timeout(MonoDelta::FromSeconds(120));
    ctl.AddOutboundSidecar(Slice(sidecar));
    RRPC_RETURN_NOT_OK(Proxy().Echo(req, &resp, &ctl));
    if (ctl.num_inbound_sidecars() != 1 || !(ctl.inbound_sidecar(0) == Slice(sidecar))) {
      return Status::Corruption("sidecar echo differs");
    }
    return Status::OK();
  }
};

// A sidecar that fits one receive block crosses with one copy per direction at most: into the
// sender's registered send block. The receiver reads it in its receive block (zero copies).
TEST_F(RdmaZeroCopyTest, SingleBlockSidecarsAreReadWhereTheyArrived) {
  Start(Rdma(4));
  ASSERT_TRUE(EchoSidecar("warm up").ok());
  for (size_t size : {4096, 9000, 16000}) {
    const std::string sidecar = Pattern(size, static_cast<int>(size));
    const uint64_t client0 = StreamCopies(CopySide::kClient);
    const uint64_t server0 = StreamCopies(CopySide::kServer);
    ASSERT_TRUE(EchoSidecar(sidecar).ok()) << size;
    const uint64_t client = StreamCopies(CopySide::kClient) - client0;
    const uint64_t server = StreamCopies(CopySide::kServer) - server0;
    // Each side copied what it sent (the sidecar plus headers under 200 bytes), nothing it
    // received: a copy out would add `size` more.
    EXPECT_GE(client, size) << size;
    EXPECT_LT(client, size + 200) << size;
    EXPECT_GE(server, size) << size;
    EXPECT_LT(server, size + 200) << size;
  }
  EXPECT_NE(ConnectionDetail(client_, "messages by reference"), "0");
  EXPECT_NE(ConnectionDetail(server_, "messages by reference"), "0");
}

// Calls sent back to back: the sender starts each large frame in a message of its own rather than
// across two, so every one is read in place, however the writes batch them.
TEST_F(RdmaZeroCopyTest, BackToBackLargeFramesEachStartAMessage) {
  Start(Rdma(8));
  ASSERT_TRUE(EchoSidecar("warm up").ok());
  constexpr int kCalls = 6;
  const std::string sidecar = Pattern(9000, 3);
  std::vector<rtest::EchoRequestPB> reqs(kCalls);
  std::vector<rtest::EchoResponsePB> resps(kCalls);
  std::vector<RpcController> ctls(kCalls);
  CountDownLatch done(kCalls);
  const uint64_t server0 = StreamCopies(CopySide::kServer);
  const uint64_t client0 = StreamCopies(CopySide::kClient);
  auto proxy = Proxy();
  for (int i = 0; i < kCalls; i++) {
    reqs[i].set_data("x");
    ctls[i].set_timeout(MonoDelta::FromSeconds(120));
    ctls[i].AddOutboundSidecar(Slice(sidecar));
    proxy.EchoAsync(reqs[i], &resps[i], &ctls[i], [&done] { done.CountDown(); });
  }
  ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(120)));
  for (int i = 0; i < kCalls; i++) {
    ASSERT_TRUE(ctls[i].status().ok()) << ctls[i].status().ToString();
    ASSERT_EQ(ctls[i].num_inbound_sidecars(), 1u);
    EXPECT_TRUE(ctls[i].inbound_sidecar(0) == Slice(sidecar));
  }
  // Each side copied what it sent and nothing it received (the responses, several in flight,
  // go out batched by the server's reactor).
  EXPECT_LT(StreamCopies(CopySide::kServer) - server0, kCalls * (sidecar.size() + 200));
  EXPECT_LT(StreamCopies(CopySide::kClient) - client0, kCalls * (sidecar.size() + 200));
  EXPECT_GE(std::stoi(ConnectionDetail(server_, "messages by reference")), kCalls);
}

// Sidecars larger than a receive block (64 KiB .. 8 MiB) arrive in fragments and are assembled
// once into a block of their size: one copy per direction on each side, never more. The client's
// sidecar is borrowed (copied when sent); the server's echo is a Block of its own, registered
// and sent by reference: the server copies only what it receives.
TEST_F(RdmaZeroCopyTest, LargeSidecarsCopyOncePerSide) {
  RdmaOptions o = Rdma(4);
  o.transport.send_zero_copy_min_bytes = 4096;  // the server's 64 KiB echo too
  Start(o);
  ASSERT_TRUE(EchoSidecar("warm up").ok());
  for (size_t size : {size_t{64} << 10, size_t{1} << 20, size_t{4} << 20, size_t{8} << 20}) {
    const std::string sidecar = Pattern(size, static_cast<int>(size >> 10));
    const uint64_t client0 = StreamCopies(CopySide::kClient);
    const uint64_t server0 = StreamCopies(CopySide::kServer);
    ASSERT_TRUE(EchoSidecar(sidecar).ok()) << size;
    const uint64_t client = StreamCopies(CopySide::kClient) - client0;
    const uint64_t server = StreamCopies(CopySide::kServer) - server0;
    // Send once, receive once; the first fragment may be moved once more into the frame's block.
    EXPECT_GE(client, 2 * size) << size;
    EXPECT_LT(client, 2 * size + 16 * 1024 + 400) << size;
    EXPECT_GE(server, size) << size;
    EXPECT_LT(server, size + 16 * 1024 + 400) << size;
  }
}

// Calls that hold their receive blocks (their handlers wait) while many others flow: the others
// finish (spares are posted in the held blocks' place, then messages are copied out once the
// spares are all held), nothing meets an empty receive queue (rnr_retry = 0), and the held blocks
// come back when the calls end.
TEST_F(RdmaZeroCopyTest, CallsHoldingReceiveBlocksDontStopOthers) {
  Start(Rdma(2));
  service_->set_echo_hook([this](const rtest::EchoRequestPB& req, RpcContext*) {
    if (req.data() == "hold") gate_.Pass();
  });
  constexpr int kHeld = 3;  // one more than the spares
  const std::string held_sidecar = Pattern(12000, 1);
  std::vector<rtest::EchoRequestPB> reqs(kHeld);
  std::vector<rtest::EchoResponsePB> resps(kHeld);
  std::vector<RpcController> ctls(kHeld);
  CountDownLatch done(kHeld);
  auto proxy = Proxy();
  for (int i = 0; i < kHeld; i++) {
    reqs[i].set_data("hold");
    ctls[i].set_timeout(MonoDelta::FromSeconds(120));
    ctls[i].AddOutboundSidecar(Slice(held_sidecar));
    proxy.EchoAsync(reqs[i], &resps[i], &ctls[i], [&done] { done.CountDown(); });
    // One at a time, so each goes in a message of its own (the sender packs queued frames
    // back to back, and only whole frames at a message's front are lent).
    ASSERT_TRUE(gate_.WaitForEntered(i + 1));
  }
  EXPECT_EQ(ConnectionDetail(server_, "receive blocks lent now"), "2");
  EXPECT_EQ(ConnectionDetail(server_, "copied out, no spare"), "1");
  // Far more messages than the 8 receive buffers, each large enough to be lent.
  for (int i = 0; i < 100; i++) {
    ASSERT_TRUE(EchoSidecar(Pattern(5000 + i * 97, i)).ok()) << i;
  }
  EXPECT_EQ(ConnectionDetail(server_, "receive blocks lent now"), "2");
  gate_.Open();
  ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(120)));
  for (int i = 0; i < kHeld; i++) {
    ASSERT_TRUE(ctls[i].status().ok()) << ctls[i].status().ToString();
    ASSERT_EQ(ctls[i].num_inbound_sidecars(), 1u);
    EXPECT_TRUE(ctls[i].inbound_sidecar(0) == Slice(held_sidecar));
  }
  // The calls are gone (their responses sent), so are their references.
  EXPECT_TRUE(WaitForCondition(
      [&] { return ConnectionDetail(server_, "receive blocks lent now") == "0"; }));
  ASSERT_TRUE(EchoSidecar(Pattern(9000, 5)).ok());
}

// The connection dies while handlers hold its receive blocks: the handlers still read their
// sidecars (the memory outlives the connection; ASAN checks), and the blocks are freed after.
TEST_F(RdmaZeroCopyTest, TeardownWhileCallsHoldReceiveBlocks) {
  Start(Rdma(4));
  const std::string sidecar = Pattern(10000, 7);
  std::atomic<int> intact{0};
  service_->set_echo_hook([&](const rtest::EchoRequestPB&, RpcContext* context) {
    gate_.Pass();
    if (context->num_inbound_sidecars() == 1 && context->inbound_sidecar(0) == Slice(sidecar)) {
      intact.fetch_add(1);
    }
  });
  constexpr int kCalls = 3;
  std::vector<rtest::EchoRequestPB> reqs(kCalls);
  std::vector<rtest::EchoResponsePB> resps(kCalls);
  std::vector<RpcController> ctls(kCalls);
  CountDownLatch done(kCalls);
  auto proxy = Proxy();
  for (int i = 0; i < kCalls; i++) {
    reqs[i].set_data("held");
    ctls[i].set_timeout(MonoDelta::FromSeconds(120));
    ctls[i].AddOutboundSidecar(Slice(sidecar));
    proxy.EchoAsync(reqs[i], &resps[i], &ctls[i], [&done] { done.CountDown(); });
  }
  ASSERT_TRUE(gate_.WaitForEntered(kCalls));
  client_->Shutdown();  // the calls fail; the server's connection closes under its handlers
  ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(60)));
  ASSERT_TRUE(WaitForCondition([&] { return server_->DumpConnections().empty(); }));
  gate_.Open();
  ASSERT_TRUE(WaitForCondition([&] { return intact.load() == kCalls; }));
}

}  // namespace
}  // namespace rrpc::rpc
