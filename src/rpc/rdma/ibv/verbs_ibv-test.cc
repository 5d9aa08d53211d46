// The libibverbs backend against a real device. Without one (no library, no device, no active
// port) ctest reports the test skipped, not passed (SKIP_REGULAR_EXPRESSION in CMakeLists.txt):
// keep only device tests in this file.
#include "rpc/rdma/ibv/verbs_ibv.h"

#include <gtest/gtest.h>

#include <vector>

#include "rrpc/util/monotime.h"

namespace rrpc::rdma {
namespace {

TEST(VerbsIbvTest, LoopbackSendReceiveOnARealDevice) {
  Result<std::unique_ptr<Context>> opened = OpenVerbsDevice();
  if (!opened.ok()) GTEST_SKIP() << "no RDMA device: " << opened.status().ToString();
  std::unique_ptr<Context> ctx = std::move(opened).value();
  auto pd = ctx->AllocPd().value();
  std::vector<uint8_t> buf(8192, 'v');
  auto mr = pd->RegisterMemory(buf.data(), buf.size()).value();
  auto cq = ctx->CreateCq(64, nullptr).value();
  QpInitAttr attr;
  attr.send_cq = attr.recv_cq = cq.get();
  attr.caps.max_send_wr = attr.caps.max_recv_wr = 16;
  attr.caps.max_inline_data = 236;
  auto a = pd->CreateQp(attr).value();
  auto b = pd->CreateQp(attr).value();
  EXPECT_LE(a->caps().max_inline_data, 236u * 4);  // read back from the device
  ASSERT_TRUE(a->ToInit(ctx->port().port, ctx->port().pkey_index).ok());
  ASSERT_TRUE(b->ToInit(ctx->port().port, ctx->port().pkey_index).ok());
  Sge rs{reinterpret_cast<uint64_t>(buf.data() + 4096), 4096, mr->lkey()};
  ASSERT_TRUE(b->PostRecv(RecvWr{2, &rs, 1}).ok());
  QpConnectParams pa, pb;
  pa.remote = {b->qp_num(), ctx->port().lid, ctx->port().gid, 20};
  pa.local_psn = 10;
  pa.gid_index = pb.gid_index = ctx->port().gid_index;
  pa.port = pb.port = ctx->port().port;
  pa.path_mtu = pb.path_mtu = ctx->port().active_mtu;
  pb.remote = {a->qp_num(), ctx->port().lid, ctx->port().gid, 10};
  pb.local_psn = 20;
  ASSERT_TRUE(a->Connect(pa).ok());
  ASSERT_TRUE(b->Connect(pb).ok());
  Sge ss{reinterpret_cast<uint64_t>(buf.data()), 100, mr->lkey()};
  SendWr wr;
  wr.wr_id = 1;
  wr.sg_list = &ss;
  wr.num_sge = 1;
  ASSERT_TRUE(a->PostSend(wr).ok());
  int got = 0;
  MonoTime deadline = MonoTime::Now() + MonoDelta::FromSeconds(10);
  while (got < 2 && MonoTime::Now() < deadline) {
    WorkCompletion wc[4];
    int n = cq->Poll(wc, 4).value();
    for (int i = 0; i < n; ++i) EXPECT_EQ(wc[i].status, WcStatus::kSuccess);
    got += n;
  }
  EXPECT_EQ(got, 2);
}

}  // namespace
}  // namespace rrpc::rdma
