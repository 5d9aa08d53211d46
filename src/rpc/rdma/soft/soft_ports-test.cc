// The software backend as a host with several RDMA devices and ports (SoftDeviceOptions::
// devices, findings 3 and 4 of issue 27): the scan opens an ACTIVE port, the one holding the
// opening connection's address first; a port's addresses add RoCE v1/v2 entries to its GID
// table, and a queue pair addressed by one of them is reached; a device after a fatal error
// creates nothing more.
#include "rpc/rdma/soft/soft_ports.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "rpc/rdma/bootstrap/gid_choice.h"
#include "rpc/rdma/soft/soft_device.h"
#include "rrpc/util/monotime.h"

namespace rrpc::rdma {
namespace {

Gid Of(const std::string& host) {
  Gid g{};
  EXPECT_TRUE(GidOfAddress(Sockaddr::Parse(host + ":1").value(), &g)) << host;
  return g;
}

bool PollOne(CompletionQueue* cq, WorkCompletion* wc) {
  const MonoTime deadline = MonoTime::Now() + MonoDelta::FromSeconds(30);
  while (MonoTime::Now() < deadline) {
    if (cq->Poll(wc, 1).value() == 1) return true;
    SleepFor(MonoDelta::FromMicroseconds(100));
  }
  return false;
}

// nic_a: one port, DOWN; nic_b: port 1 DOWN, port 2 ACTIVE with two addresses; nic_c: ACTIVE.
SoftDeviceOptions Host() {
  SoftDeviceOptions o;
  o.devices = {{"nic_a", {{false, {"127.0.0.2"}}}},
               {"nic_b", {{false, {}}, {true, {"127.0.0.3", "127.0.0.4"}}}},
               {"nic_c", {{true, {"127.0.0.5"}}}}};
  return o;
}

TEST(SoftPortsTest, TheScanSkipsDownPortsAndPrefersThePortOfTheAddress) {
  std::unique_ptr<SoftDevice> dev = OpenSoftDevice(Host()).value();
  EXPECT_EQ(dev->device_name(), "nic_b");
  EXPECT_EQ(dev->port().port, 2);
  dev.reset();
  dev = OpenSoftDevice(Host(), Sockaddr::Parse("127.0.0.5:80").value()).value();
  EXPECT_EQ(dev->device_name(), "nic_c");
  EXPECT_EQ(dev->port().port, 1);
  dev.reset();
  // nic_a holds 127.0.0.2, but its port is DOWN.
  dev = OpenSoftDevice(Host(), Sockaddr::Parse("127.0.0.2:80").value()).value();
  EXPECT_EQ(dev->device_name(), "nic_b");
  dev.reset();
  SoftDeviceOptions down = Host();
  down.devices[1].ports[1].active = false;
  down.devices[2].ports[0].active = false;
  Status s = OpenSoftDevice(down).status();
  EXPECT_TRUE(s.IsNotFound()) << s.ToString();
  EXPECT_NE(s.ToString().find("nic_b port 2: not active"), std::string::npos) << s.ToString();
  SoftDeviceOptions bad = Host();
  bad.devices[0].ports[0].addresses = {"not-an-address"};
  EXPECT_TRUE(OpenSoftDevice(bad).status().IsInvalidArgument());
}

TEST(SoftPortsTest, APortsAddressesAddV1AndV2EntriesAndEachAddressChoosesItsOwn) {
  std::unique_ptr<SoftDevice> dev = OpenSoftDevice(Host()).value();
  const PortInfo& port = dev->port();
  ASSERT_EQ(port.gid_table.size(), 8u);  // link-local v1/v2, own v1/v2, two addresses x v1/v2
  EXPECT_TRUE(GidIsLinkLocal(port.gid_table[0].gid));
  EXPECT_EQ(port.gid_table[4].gid, Of("127.0.0.3"));
  EXPECT_EQ(port.gid_table[4].type, GidType::kRoceV1);
  EXPECT_EQ(port.gid_table[5].type, GidType::kRoceV2);
  EXPECT_EQ(port.gid_table[7].gid, Of("127.0.0.4"));
  EXPECT_EQ(ConnectionGid(port, Sockaddr::Parse("127.0.0.3:9").value()).index, 5);
  EXPECT_EQ(ConnectionGid(port, Sockaddr::Parse("127.0.0.4:9").value()).index, 7);
  EXPECT_FALSE(port.gid_pinned);
  ASSERT_TRUE(dev->UseGidIndex(4).ok());  // pinned: every connection takes it
  EXPECT_EQ(ConnectionGid(dev->port(), Sockaddr::Parse("127.0.0.4:9").value()).index, 4);
}

TEST(SoftPortsTest, AnAddressBelongsToOneLiveDeviceAndRoutesToIt) {
  std::unique_ptr<SoftDevice> dev = OpenSoftDevice(Host()).value();
  Gid own{};
  ASSERT_TRUE(soft::RouteOfAddressGid(Of("127.0.0.3"), &own));
  EXPECT_EQ(own, dev->port().gid_table[3].gid);
  EXPECT_TRUE(OpenSoftDevice(Host()).status().IsAlreadyPresent());
  dev.reset();
  EXPECT_FALSE(soft::RouteOfAddressGid(Of("127.0.0.3"), &own));
  EXPECT_TRUE(OpenSoftDevice(Host()).ok());
}

// A message to a queue pair addressed by an address GID (the entry a connection chose) arrives.
TEST(SoftPortsTest, AQueuePairAddressedByAnAddressGidIsReached) {
  std::unique_ptr<SoftDevice> a = OpenSoftDevice().value();
  std::unique_ptr<SoftDevice> b = OpenSoftDevice(Host()).value();
  auto pa = a->AllocPd().value();
  auto pb = b->AllocPd().value();
  auto ca = a->CreateCq(16, nullptr).value();
  auto cb = b->CreateCq(16, nullptr).value();
  QpInitAttr attr;
  attr.caps.max_send_wr = 4;
  attr.caps.max_recv_wr = 4;
  attr.send_cq = attr.recv_cq = ca.get();
  auto qa = pa->CreateQp(attr).value();
  attr.send_cq = attr.recv_cq = cb.get();
  auto qb = pb->CreateQp(attr).value();
  ASSERT_TRUE(qa->ToInit(1, 0).ok());
  ASSERT_TRUE(qb->ToInit(b->port().port, 0).ok());
  std::string buf(64, 'y'), out(64, '\0');
  auto ma = pa->RegisterMemory(buf.data(), buf.size()).value();
  auto mb = pb->RegisterMemory(out.data(), out.size()).value();
  Sge rs{reinterpret_cast<uint64_t>(out.data()), 64, mb->lkey()};
  ASSERT_TRUE(qb->PostRecv(RecvWr{1, &rs, 1}).ok());
  const GidEntry b_gid = ConnectionGid(b->port(), Sockaddr::Parse("127.0.0.4:1").value());
  QpConnectParams to_b;
  to_b.remote = {qb->qp_num(), 0, b_gid.gid, 0};
  to_b.gid_index = a->port().gid_index;  // v2, as b's
  QpConnectParams to_a;
  to_a.remote = {qa->qp_num(), 0, a->port().gid, 0};
  to_a.gid_index = b_gid.index;
  ASSERT_TRUE(qa->Connect(to_b).ok());
  ASSERT_TRUE(qb->Connect(to_a).ok());
  Sge ss{reinterpret_cast<uint64_t>(buf.data()), 64, ma->lkey()};
  SendWr wr;
  wr.wr_id = 2;
  wr.sg_list = &ss;
  wr.num_sge = 1;
  ASSERT_TRUE(qa->PostSend(wr).ok());
  WorkCompletion wc;
  ASSERT_TRUE(PollOne(cb.get(), &wc));
  EXPECT_EQ(wc.opcode, WcOpcode::kRecv);
  EXPECT_EQ(wc.status, WcStatus::kSuccess);
  EXPECT_EQ(out, buf);
  ASSERT_TRUE(PollOne(ca.get(), &wc));  // the send's, acknowledged
  EXPECT_EQ(wc.status, WcStatus::kSuccess);
  qa.reset();
  qb.reset();
}

// Finding 3 (c): a RoCE v2 QP never sees a v1 frame, and the reverse. Both QPs connect (RTR/RTS
// take any GID entry) and the path carries nothing: the sender's retries run out, its request
// fails with kRetryExceeded and the receiver gets nothing, as on a fabric.
TEST(SoftPortsTest, FramesBetweenQueuePairsOfDifferentGidTypesAreDropped) {
  std::unique_ptr<SoftDevice> a = OpenSoftDevice().value();
  std::unique_ptr<SoftDevice> b = OpenSoftDevice().value();
  auto pa = a->AllocPd().value();
  auto pb = b->AllocPd().value();
  auto ca = a->CreateCq(16, nullptr).value();
  auto cb = b->CreateCq(16, nullptr).value();
  QpInitAttr attr;
  attr.caps.max_send_wr = 4;
  attr.caps.max_recv_wr = 4;
  attr.caps.max_inline_data = 64;
  attr.send_cq = attr.recv_cq = ca.get();
  auto qa = pa->CreateQp(attr).value();
  attr.send_cq = attr.recv_cq = cb.get();
  auto qb = pb->CreateQp(attr).value();
  ASSERT_TRUE(qa->ToInit(1, 0).ok());
  ASSERT_TRUE(qb->ToInit(1, 0).ok());
  std::string out(64, '\0');
  auto mb = pb->RegisterMemory(out.data(), out.size()).value();
  Sge rs{reinterpret_cast<uint64_t>(out.data()), 64, mb->lkey()};
  ASSERT_TRUE(qb->PostRecv(RecvWr{1, &rs, 1}).ok());
  QpConnectParams to_b;  // a sends from its v2 entry (index 3)
  to_b.remote = {qb->qp_num(), 0, b->port().gid_table[2].gid, 0};
  to_b.gid_index = 3;
  to_b.timeout = 1;      // 8 us per retry: the test waits out 8 of them
  QpConnectParams to_a;  // b listens on its v1 entry (index 2)
  to_a.remote = {qa->qp_num(), 0, a->port().gid, 0};
  to_a.gid_index = 2;
  ASSERT_TRUE(qa->Connect(to_b).ok());
  ASSERT_TRUE(qb->Connect(to_a).ok());
  std::string buf(64, 'z');
  Sge ss{reinterpret_cast<uint64_t>(buf.data()), 64, 0};
  SendWr wr;
  wr.wr_id = 2;
  wr.sg_list = &ss;
  wr.num_sge = 1;
  wr.inline_data = true;
  ASSERT_TRUE(qa->PostSend(wr).ok());
  WorkCompletion wc;
  ASSERT_TRUE(PollOne(ca.get(), &wc));
  EXPECT_EQ(wc.status, WcStatus::kRetryExceeded);
  EXPECT_EQ(cb->Poll(&wc, 1).value(), 0);
  EXPECT_EQ(out, std::string(64, '\0'));
}

TEST(SoftPortsTest, ADeviceAfterAFatalErrorCreatesNothing) {
  std::unique_ptr<SoftDevice> dev = OpenSoftDevice().value();
  auto pd = dev->AllocPd().value();
  dev->InjectAsyncEvent(AsyncEventType::kDeviceFatal);
  AsyncEvent e;
  ASSERT_TRUE(dev->NextAsyncEvent(&e));
  EXPECT_EQ(e.type, AsyncEventType::kDeviceFatal);
  EXPECT_FALSE(dev->AllocPd().ok());
  EXPECT_FALSE(dev->CreateChannel().ok());
  EXPECT_FALSE(dev->CreateCq(8, nullptr).ok());
  EXPECT_FALSE(pd->CreateSrq(8).ok());
  std::string mem(64, 'x');
  EXPECT_FALSE(pd->RegisterMemory(mem.data(), mem.size()).ok());
}

}  // namespace
}  // namespace rrpc::rdma
