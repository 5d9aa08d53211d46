// Zero copy on send over RDMA, on the software backend (docs/rdma.md, "Zero copy on send"):
// sidecars in registered Blocks go from where they are (the SGE list points at them), counted by
// the transport's metrics and util/copy_counter.h; the blocks are held until their sends complete
// and released exactly once, also when the connection dies with sends in flight; a wrong lkey
// fails loudly. The soft devices verify a send's memory at its completion (unchanged, still
// registered), and rnr_retry is 0: a credit mistake fails loudly too.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "rpc/rdma/rdma_factory.h"
#include "rpc/testing/rpc-test-util.h"
#include "rrpc/util/copy_counter.h"
#include "util/metrics/counter.h"

namespace rrpc::rpc {
namespace {

using rdma::RdmaOptions;
using rdma::RdmaTransportFactory;

BlockRef PatternBlock(size_t n, int seed) {
  BlockRef b = Block::Allocate(n);
  for (size_t i = 0; i < n; i++)
    b->data()[i] = static_cast<uint8_t>((i * 7 + seed * 13 + (i >> 10)) & 0xff);
  return b;
}

RdmaOptions Rdma() {
  RdmaOptions o = rdma::SoftRdmaOptions();
  o.endpoint.buffer_size = 16 * 1024;
  o.endpoint.receive_buffers = 8;
  o.endpoint.send_buffers = 8;
  o.endpoint.spare_receive_buffers = 4;
  o.endpoint.rnr_retry = 0;
  o.soft.verify_send_memory = true;
  o.transport.send_zero_copy_min_bytes = 4096;  // from 64 KiB sidecars up, and echoed blocks
  return o;
}

uint64_t StreamCopies(CopySide side) { return ReadCopyTotals().get(side, CopyKind::kStream); }

class RdmaZeroCopySendTest : public RpcTestBase {
 protected:
  void Start(const RdmaOptions& server, const RdmaOptions& client) {
    MessengerOptions so, co;
    so.num_workers = 8;            // handlers wait at the gate while others run
    co.bulk_connection_bytes = 0;  // one connection: the checks below read its details
    server_factory_ = std::make_shared<RdmaTransportFactory>(server);
    client_factory_ = std::make_shared<RdmaTransportFactory>(client);
    so.transport_factory = server_factory_;
    co.transport_factory = client_factory_;
    StartServer(so);
    StartClient(co);
    service_->set_echo_sidecars_by_reference(true);
  }
  // One Echo call carrying `sidecar` (a Block), its echo checked byte for byte.
  Status Echo(const BlockSlice& sidecar) {
    rtest::EchoRequestPB req;
    req.set_data("x");
    rtest::EchoResponsePB resp;
    RpcController ctl;
    ctl.set_timeout(MonoDelta::FromSeconds(120));
    if (sidecar.block) {
      ctl.AddOutboundSidecar(sidecar);
    } else {
      ctl.AddOutboundSidecar(sidecar.slice);  // borrowed
    }
    RRPC_RETURN_NOT_OK(Proxy().Echo(req, &resp, &ctl));
    if (ctl.num_inbound_sidecars() != 1 || !(ctl.inbound_sidecar(0) == sidecar.slice)) {
      return Status::Corruption("sidecar echo differs");
    }
    return Status::OK();
  }
  static uint64_t Value(Counter* c) { return static_cast<uint64_t>(c->value()); }

  std::shared_ptr<RdmaTransportFactory> server_factory_, client_factory_;
};

// 64 KiB, 1 MiB and 8 MiB sidecars, each in a Block the client sends twice: no sidecar byte is
// copied on either send path (the client's Block is registered once, on its first send; the
// server echoes the Block the request was assembled in, registered for its lifetime). Each side
// copies only what it receives (fragments assembled into one block), and after the calls the
// client's Block is referenced by the test alone: the sends released it when they completed.
TEST_F(RdmaZeroCopySendTest, SidecarEchoCopiesNoSidecarByteOnSend) {
  Start(Rdma(), Rdma());
  ASSERT_TRUE(Echo(BlockSlice{PatternBlock(100, 1), Slice()}).ok());
  const rdma::RdmaMetrics cm = client_factory_->metrics();
  const rdma::RdmaMetrics sm = server_factory_->metrics();
  for (size_t size : {size_t{64} << 10, size_t{1} << 20, size_t{8} << 20}) {
    BlockRef block = PatternBlock(size, static_cast<int>(size >> 10));
    const uint64_t registrations0 = Value(cm.send_registrations);
    for (int round = 0; round < 2; round++) {
      const BlockSlice sidecar{block, Slice(block->data(), size)};
      const uint64_t client0 = StreamCopies(CopySide::kClient);
      const uint64_t server0 = StreamCopies(CopySide::kServer);
      const uint64_t client_zc0 = Value(cm.zero_copy_sent_bytes);
      const uint64_t client_copied0 = Value(cm.copied_sent_bytes);
      const uint64_t server_zc0 = Value(sm.zero_copy_sent_bytes);
      const uint64_t server_copied0 = Value(sm.copied_sent_bytes);
      ASSERT_TRUE(Echo(sidecar).ok()) << size;
      // Send side: the sidecar went by reference; only heads (a few hundred bytes) copied.
      EXPECT_EQ(Value(cm.zero_copy_sent_bytes) - client_zc0, size) << size;
      EXPECT_EQ(Value(sm.zero_copy_sent_bytes) - server_zc0, size) << size;
      EXPECT_LT(Value(cm.copied_sent_bytes) - client_copied0, 400u) << size;
      EXPECT_LT(Value(sm.copied_sent_bytes) - server_copied0, 400u) << size;
      // The copy counters: each side copied what it received (its assembly: the sidecar and at
      // most one receive block more), none of what it sent.
      const uint64_t client = StreamCopies(CopySide::kClient) - client0;
      const uint64_t server = StreamCopies(CopySide::kServer) - server0;
      EXPECT_GE(client, size) << size;
      EXPECT_LT(client, size + 16 * 1024 + 400) << size;
      EXPECT_GE(server, size) << size;
      EXPECT_LT(server, size + 16 * 1024 + 400) << size;
    }
    // Registered once for both calls: the registration lives with the Block.
    EXPECT_EQ(Value(cm.send_registrations) - registrations0, 1u) << size;
    // The sends released it when they completed (the call's last reference goes on the reactor).
    EXPECT_TRUE(WaitForCondition([&] { return block->HasOneRef(); })) << size;
  }
}

// A sidecar that fits one receive block arrives in a lent receive block and is echoed from it:
// the server copies neither way (only the response head), and the receive block goes back to
// the pool once the response's send completed.
TEST_F(RdmaZeroCopySendTest, AnEchoedReceiveBlockIsSentFromWhereItArrived) {
  Start(Rdma(), Rdma());
  ASSERT_TRUE(Echo(BlockSlice{PatternBlock(100, 1), Slice()}).ok());
  const rdma::RdmaMetrics sm = server_factory_->metrics();
  for (int i = 0; i < 5; i++) {
    BlockRef block = PatternBlock(12000, i);
    const uint64_t server0 = StreamCopies(CopySide::kServer);
    const uint64_t server_zc0 = Value(sm.zero_copy_sent_bytes);
    const uint64_t registrations0 = Value(sm.send_registrations);
    ASSERT_TRUE(Echo(BlockSlice{block, Slice(block->data(), 12000)}).ok());
    EXPECT_LT(StreamCopies(CopySide::kServer) - server0, 200u);
    EXPECT_EQ(Value(sm.zero_copy_sent_bytes) - server_zc0, 12000u);
    EXPECT_EQ(Value(sm.send_registrations), registrations0);  // the pool's own registration
  }
  EXPECT_TRUE(WaitForCondition(
      [&] { return ConnectionDetail(server_, "receive blocks lent now") == "0"; }));
  EXPECT_NE(ConnectionDetail(server_, "messages by reference"), "0");
}

// Small sidecars (below the thresholds) and borrowed ones are copied, as before: their owner may
// let borrowed bytes go once the call is reported written.
TEST_F(RdmaZeroCopySendTest, SmallAndBorrowedSidecarsAreCopied) {
  Start(Rdma(), Rdma());
  const rdma::RdmaMetrics cm = client_factory_->metrics();
  BlockRef small = PatternBlock(2000, 3);
  std::string borrowed(200000, 'b');
  const uint64_t zc0 = Value(cm.zero_copy_sent_bytes);
  ASSERT_TRUE(Echo(BlockSlice{small, Slice(small->data(), 2000)}).ok());
  ASSERT_TRUE(Echo(BlockSlice{nullptr, Slice(borrowed)}).ok());
  EXPECT_EQ(Value(cm.zero_copy_sent_bytes), zc0);
  EXPECT_GE(Value(cm.copied_sent_bytes), 202000u);
}

// With the default threshold (256 KiB) a 64 KiB Block is copied (a copy costs less than the
// completion that would release it) and a 512 KiB one goes by reference.
TEST_F(RdmaZeroCopySendTest, ByDefaultOnlyPiecesFrom256KiBGoByReference) {
  RdmaOptions o = Rdma();
  o.transport.send_zero_copy_min_bytes = rdma::RdmaTransportOptions().send_zero_copy_min_bytes;
  ASSERT_EQ(o.transport.send_zero_copy_min_bytes, 256u * 1024);
  Start(o, o);
  const rdma::RdmaMetrics cm = client_factory_->metrics();
  BlockRef small = PatternBlock(64 << 10, 5);
  BlockRef large = PatternBlock(512 << 10, 6);
  const uint64_t zc0 = Value(cm.zero_copy_sent_bytes);
  ASSERT_TRUE(Echo(BlockSlice{small, Slice(small->data(), 64 << 10)}).ok());
  EXPECT_EQ(Value(cm.zero_copy_sent_bytes), zc0);
  ASSERT_TRUE(Echo(BlockSlice{large, Slice(large->data(), 512 << 10)}).ok());
  EXPECT_EQ(Value(cm.zero_copy_sent_bytes) - zc0, 512u << 10);
}

// The client's device stops delivering completions, so its zero-copy sends stay in flight
// holding the sidecar Block; the client shuts down: every call fails once, and each held
// reference is released exactly once (the Block ends with the test's reference alone; ASAN
// reports a double release or a leak). With completions stalled the client sees no grant, so
// everything it posts fits the initial credits (32 receive buffers; 3 x 5 messages).
TEST_F(RdmaZeroCopySendTest, TeardownWithZeroCopySendsInFlightReleasesEveryBlockOnce) {
  RdmaOptions o = Rdma();
  o.endpoint.receive_buffers = 32;
  o.endpoint.send_buffers = 32;
  Start(o, o);
  ASSERT_TRUE(Echo(BlockSlice{PatternBlock(100, 1), Slice()}).ok());
  service_->set_echo_hook([this](const rtest::EchoRequestPB&, RpcContext*) { gate_.Pass(); });
  const rdma::RdmaMetrics cm = client_factory_->metrics();
  constexpr size_t kSize = 64 << 10;
  BlockRef block = PatternBlock(kSize, 9);
  const uint64_t zc0 = Value(cm.zero_copy_sent_bytes);
  client_factory_->Device().value()->soft->StallCompletions(true);
  constexpr int kCalls = 3;
  std::vector<rtest::EchoRequestPB> reqs(kCalls);
  std::vector<rtest::EchoResponsePB> resps(kCalls);
  std::vector<RpcController> ctls(kCalls);
  CountDownLatch done(kCalls);
  std::atomic<int> callbacks{0};
  auto proxy = Proxy();
  for (int i = 0; i < kCalls; i++) {
    reqs[i].set_data("x");
    ctls[i].set_timeout(MonoDelta::FromSeconds(120));
    ctls[i].AddOutboundSidecar(BlockSlice{block, Slice(block->data(), kSize)});
    proxy.EchoAsync(reqs[i], &resps[i], &ctls[i], [&] {
      callbacks.fetch_add(1);
      done.CountDown();
    });
  }
  // Every byte posted (the server's handlers hold the calls), no completion seen by the client.
  ASSERT_TRUE(
      WaitForCondition([&] { return Value(cm.zero_copy_sent_bytes) - zc0 == kCalls * kSize; }));
  ASSERT_TRUE(gate_.WaitForEntered(kCalls));
  EXPECT_FALSE(block->HasOneRef());
  client_->Shutdown();
  ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(60)));
  EXPECT_EQ(callbacks.load(), kCalls);
  for (const RpcController& ctl : ctls) EXPECT_FALSE(ctl.status().ok());
  client_factory_->Device().value()->soft->StallCompletions(false);
  gate_.Open();
  ctls.clear();  // the controllers' references
  EXPECT_TRUE(block->HasOneRef());
}

// A send whose SGE names a wrong lkey is refused by the (strict) soft device: the connection
// fails and the call with it, with a network error; nothing hangs.
TEST_F(RdmaZeroCopySendTest, AWrongLkeyFailsTheConnectionLoudly) {
  // Without the path probe: its own send would meet the wrong lkey first and keep the connection
  // on TCP (as it should), and this test is about the connection's sends.
  RdmaOptions o = Rdma();
  o.probe_path = false;
  Start(o, o);
  ASSERT_TRUE(client_factory_->Device().ok());
  client_factory_->Device().value()->soft->CorruptSendLkeys(true);
  BlockRef block = PatternBlock(128 << 10, 4);
  Status s = Echo(BlockSlice{block, Slice(block->data(), 128 << 10)});
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(s.IsNetworkError()) << s.ToString();
  EXPECT_NE(s.ToString().find("protection"), std::string::npos) << s.ToString();
  EXPECT_TRUE(WaitForCondition([&] { return block->HasOneRef(); }));
}

}  // namespace
}  // namespace rrpc::rpc
