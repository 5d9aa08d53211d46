// RdmaEndpoint on the software backend, which grants queue depths as mlx5 does (rounded up to
// powers of two): the CQ holds a completion for every request the granted depths let the
// transport post, flushed ones included.
#include "rpc/rdma/rdma_endpoint.h"

#include <gtest/gtest.h>

#include <vector>

#include "rpc/rdma/soft/soft_device.h"
#include "rrpc/util/monotime.h"

namespace rrpc::rdma {
namespace {

TEST(RdmaEndpointTest, TheCqHoldsEveryRequestTheGrantedDepthsAllow) {
  auto dev = OpenSoftDevice().value();
  auto pd = dev->AllocPd().value();
  EndpointOptions o;
  o.buffer_size = 256;
  o.receive_buffers = 5;
  o.send_buffers = 6;  // granted: 8
  o.spare_receive_buffers = 0;
  auto ep = RdmaEndpoint::Create(dev.get(), pd.get(), o).value();
  ASSERT_EQ(ep->send_queue_depth(), 8u);
  // A peer that goes away: every send fails or flushes, each with a completion.
  auto peer = RdmaEndpoint::Create(dev.get(), pd.get(), o).value();
  ASSERT_TRUE(ep->Connect(peer->address(), 4096).ok());
  peer.reset();
  // The transport fills the send queue it was granted (inline sends hold no send block).
  uint8_t byte = 1;
  for (uint32_t i = 0; i < ep->send_queue_depth(); ++i) {
    Sge sge{reinterpret_cast<uint64_t>(&byte), 1, 0};
    SendWr wr;
    wr.wr_id = i;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.inline_data = true;
    ASSERT_TRUE(ep->qp()->PostSend(wr).ok()) << i;
  }
  ASSERT_TRUE(ep->qp()->ToError().ok());  // the posted receives flush too
  const size_t expected = o.receive_buffers + ep->send_queue_depth();
  std::vector<WorkCompletion> all;
  const MonoTime deadline = MonoTime::Now() + MonoDelta::FromSeconds(30);
  while (all.size() < expected && MonoTime::Now() < deadline) {
    WorkCompletion wc[16];
    Result<int> n = ep->cq()->Poll(wc, 16);
    ASSERT_TRUE(n.ok()) << "the CQ overflowed: " << n.status().ToString();
    all.insert(all.end(), wc, wc + *n);
    if (*n == 0) SleepFor(MonoDelta::FromMicroseconds(100));
  }
  EXPECT_EQ(all.size(), expected);
}

TEST(RdmaEndpointTest, CqsGoRoundRobinOverTheCompletionVectors) {
  SoftDeviceOptions so;
  so.num_comp_vectors = 3;
  auto dev = OpenSoftDevice(so).value();
  auto pd = dev->AllocPd().value();
  EndpointOptions o;
  o.buffer_size = 256;
  o.spare_receive_buffers = 0;
  std::vector<int> vectors;
  std::vector<std::unique_ptr<RdmaEndpoint>> eps;
  for (int i = 0; i < 4; ++i) {
    eps.push_back(RdmaEndpoint::Create(dev.get(), pd.get(), o).value());
    vectors.push_back(eps.back()->cq()->comp_vector());
  }
  EXPECT_EQ(vectors, (std::vector<int>{0, 1, 2, 0}));
}

TEST(RdmaEndpointTest, AGlobalRouteOnRoceAlwaysOnInfinibandAcrossSubnetsOnly) {
  PortInfo ib;
  ib.gid = Gid{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8};
  Gid same_subnet = ib.gid;
  same_subnet[15] = 9;
  Gid other_subnet = same_subnet;
  other_subnet[7] = 1;
  EXPECT_FALSE(NeedsGlobalRoute(ib, same_subnet));  // a non-zero GID alone is no reason
  EXPECT_TRUE(NeedsGlobalRoute(ib, other_subnet));
  EXPECT_FALSE(NeedsGlobalRoute(ib, Gid{}));
  PortInfo roce = ib;
  roce.ethernet = true;
  EXPECT_TRUE(NeedsGlobalRoute(roce, same_subnet));
}

// Finding 6 of issue 27: the traffic class and service level asked for are what the QP is
// connected with (the device records its RTR attributes); a service level beyond 4 bits is
// refused, as ibv_modify_qp refuses it.
TEST(RdmaEndpointTest, TheQpCarriesTheTrafficClassAndServiceLevelAskedFor) {
  auto dev = OpenSoftDevice().value();
  auto pd = dev->AllocPd().value();
  EndpointOptions o;
  o.buffer_size = 256;
  o.spare_receive_buffers = 0;
  o.traffic_class = 104;  // DSCP 26
  o.service_level = 3;
  auto ep = RdmaEndpoint::Create(dev.get(), pd.get(), o).value();
  auto peer = RdmaEndpoint::Create(dev.get(), pd.get(), EndpointOptions()).value();
  ASSERT_TRUE(ep->Connect(peer->address(), 4096).ok());
  ASSERT_TRUE(peer->Connect(ep->address(), 4096).ok());
  QpConnectParams p;
  ASSERT_TRUE(dev->ConnectParamsOf(ep->qp()->qp_num(), &p));
  EXPECT_EQ(p.traffic_class, 104);
  EXPECT_EQ(p.service_level, 3);
  ASSERT_TRUE(dev->ConnectParamsOf(peer->qp()->qp_num(), &p));
  EXPECT_EQ(p.traffic_class, 0);  // each side sets its own
  EXPECT_EQ(p.service_level, 0);

  o.service_level = 16;
  auto bad = RdmaEndpoint::Create(dev.get(), pd.get(), o).value();
  Status s = bad->Connect(peer->address(), 4096);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
}

// Finding 5 of issue 37: on a RoCE port (the software device's is one) the service level is the
// frames' 3-bit priority and mlx5 sends SL & 7: SL 8 would silently become priority 0. Refused.
TEST(RdmaEndpointTest, AServiceLevelAboveSevenIsRefusedOnARocePort) {
  auto dev = OpenSoftDevice().value();
  ASSERT_TRUE(dev->port().ethernet);
  auto pd = dev->AllocPd().value();
  auto peer = RdmaEndpoint::Create(dev.get(), pd.get(), EndpointOptions()).value();
  EndpointOptions o;
  o.service_level = 7;
  auto seven = RdmaEndpoint::Create(dev.get(), pd.get(), o).value();
  EXPECT_TRUE(seven->Connect(peer->address(), 4096).ok());
  o.service_level = 8;
  auto eight = RdmaEndpoint::Create(dev.get(), pd.get(), o).value();
  Status s = eight->Connect(peer->address(), 4096);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  QpConnectParams p;
  EXPECT_FALSE(dev->ConnectParamsOf(eight->qp()->qp_num(), &p));  // never connected
}

// Finding 8 of issue 37: the local ACK timeout is the endpoint's option (a fabric's packet
// lifetime sets it), not a constant; the software device retries on it. 0 (a NIC's "forever")
// is refused at connect, and a P_Key index beyond a RoCE port's one entry at INIT.
TEST(RdmaEndpointTest, TheAckTimeoutOptionSetsTheRetryTime) {
  auto dev = OpenSoftDevice().value();
  auto pd = dev->AllocPd().value();
  EndpointOptions o;
  o.ack_timeout = 10;
  auto ep = RdmaEndpoint::Create(dev.get(), pd.get(), o).value();
  auto peer = RdmaEndpoint::Create(dev.get(), pd.get(), EndpointOptions()).value();
  ASSERT_TRUE(ep->Connect(peer->address(), 4096).ok());
  ASSERT_TRUE(peer->Connect(ep->address(), 4096).ok());
  QpConnectParams p;
  ASSERT_TRUE(dev->ConnectParamsOf(ep->qp()->qp_num(), &p));
  EXPECT_EQ(p.timeout, 10);
  ASSERT_TRUE(dev->ConnectParamsOf(peer->qp()->qp_num(), &p));
  EXPECT_EQ(p.timeout, 14);  // the default

  o.ack_timeout = 0;
  auto never = RdmaEndpoint::Create(dev.get(), pd.get(), o).value();
  Status s = never->Connect(peer->address(), 4096);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_FALSE(dev->ConnectParamsOf(never->qp()->qp_num(), &p));

  QpInitAttr attr;
  auto cq = dev->CreateCq(8, nullptr).value();
  attr.send_cq = attr.recv_cq = cq.get();
  attr.caps.max_send_wr = attr.caps.max_recv_wr = 1;
  auto qp = pd->CreateQp(attr).value();
  s = qp->ToInit(dev->port().port, 1);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_TRUE(qp->ToInit(dev->port().port, dev->port().pkey_index).ok());
}

}  // namespace
}  // namespace rrpc::rdma
