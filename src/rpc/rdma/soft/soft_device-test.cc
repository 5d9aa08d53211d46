// The software backend's RC rules, one test per rule hardware enforces, between two devices.
#include "rpc/rdma/soft/soft_device.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <vector>

#include "rrpc/util/monotime.h"

namespace rrpc::rdma {
namespace {

// One side: a device, a PD, a registered buffer, a CQ for sends and one for receives, a QP.
struct Side {
  SoftDeviceOptions options;  // set before Open
  std::unique_ptr<SoftDevice> dev;
  std::unique_ptr<ProtectionDomain> pd;
  std::vector<uint8_t> buf = std::vector<uint8_t>(1 << 16);
  std::unique_ptr<MemoryRegion> mr;
  std::unique_ptr<CompletionChannel> channel;
  std::unique_ptr<CompletionQueue> send_cq, recv_cq;
  std::unique_ptr<SharedReceiveQueue> srq;
  std::unique_ptr<QueuePair> qp;
  int srq_context = 0, qp_context = 0;  // their addresses are the creators' context pointers

  void Open(const QpCaps& caps, int cq_size = 64, bool use_srq = false) {
    dev = OpenSoftDevice(options).value();
    pd = dev->AllocPd().value();
    mr = pd->RegisterMemory(buf.data(), buf.size()).value();
    channel = dev->CreateChannel().value();
    send_cq = dev->CreateCq(cq_size, channel.get()).value();
    recv_cq = dev->CreateCq(cq_size, channel.get()).value();
    QpInitAttr attr;
    attr.send_cq = send_cq.get();
    attr.recv_cq = recv_cq.get();
    if (use_srq) {
      srq = pd->CreateSrq(64, &srq_context).value();
      attr.srq = srq.get();
    }
    attr.caps = caps;
    attr.context = &qp_context;
    qp = pd->CreateQp(attr).value();
    ASSERT_TRUE(qp->ToInit(1, 0).ok());
  }
  QpAddress address(uint32_t psn) const {
    return QpAddress{qp->qp_num(), dev->port().lid, dev->port().gid, psn};
  }
  Sge sge(size_t offset, uint32_t len) const {
    return Sge{reinterpret_cast<uint64_t>(buf.data() + offset), len, mr->lkey()};
  }
  Status PostRecv(uint64_t id, size_t offset, uint32_t len) {
    Sge s = sge(offset, len);
    return qp->PostRecv(RecvWr{id, &s, 1});
  }
  Status Send(uint64_t id, size_t offset, uint32_t len, bool signaled = true) {
    Sge s = sge(offset, len);
    SendWr wr;
    wr.wr_id = id;
    wr.sg_list = &s;
    wr.num_sge = 1;
    wr.signaled = signaled;
    return qp->PostSend(wr);
  }
};

// Waits (bounded: the failure case only) for `n` completions on `cq`.
std::vector<WorkCompletion> WaitFor(CompletionQueue* cq, size_t n) {
  std::vector<WorkCompletion> out;
  MonoTime deadline = MonoTime::Now() + MonoDelta::FromSeconds(10);
  while (out.size() < n && MonoTime::Now() < deadline) {
    WorkCompletion wc[16];
    Result<int> got = cq->Poll(wc, 16);
    if (!got.ok()) break;
    out.insert(out.end(), wc, wc + *got);
    if (*got == 0) SleepFor(MonoDelta::FromMicroseconds(50));
  }
  return out;
}

// Waits until `dev`'s port counters satisfy `pred` (false after 10 s).
bool WaitForCounters(SoftDevice* dev,
                     const std::function<bool(const SoftDevice::PortCounters&)>& pred) {
  const MonoTime deadline = MonoTime::Now() + MonoDelta::FromSeconds(10);
  while (!pred(dev->port_counters())) {
    if (MonoTime::Now() > deadline) return false;
    SleepFor(MonoDelta::FromMicroseconds(100));
  }
  return true;
}
// `dev` has been refused `n` times for want of a posted receive (RNR NAKs).
bool WaitForRnrNaks(SoftDevice* dev, uint64_t n) {
  return WaitForCounters(dev, [n](const auto& c) { return c.rnr_naks_received >= n; });
}

class SoftDeviceTest : public testing::Test {
 protected:
  void Connect(const QpCaps& caps, uint8_t rnr_retry = 0, int cq_size = 64, bool srq = false) {
    a_.Open(caps, cq_size);
    b_.Open(caps, cq_size, srq);
    QpConnectParams pa, pb;
    pa.remote = b_.address(200);
    pa.local_psn = 100;
    pa.rnr_retry = rnr_retry;
    pb.remote = a_.address(100);
    pb.local_psn = 200;
    pb.rnr_retry = rnr_retry;
    ASSERT_TRUE(a_.qp->Connect(pa).ok());
    ASSERT_TRUE(b_.qp->Connect(pb).ok());
  }
  // a_ and b_ connected, a_ giving up on a lost packet after one quick retry (the lossy-path
  // tests); `flow_label` picks a_'s UDP source port.
  void ConnectWithOneQuickRetry(uint32_t flow_label = 0) {
    a_.Open(Caps());
    b_.Open(Caps());
    QpConnectParams pa, pb;
    pa.remote = b_.address(200);
    pa.local_psn = 100;
    pa.timeout = 1;
    pa.retry_cnt = 1;
    pa.flow_label = flow_label;
    pb.remote = a_.address(100);
    pb.local_psn = 200;
    ASSERT_TRUE(a_.qp->Connect(pa).ok());
    ASSERT_TRUE(b_.qp->Connect(pb).ok());
  }
  static QpCaps Caps(uint32_t send = 16, uint32_t recv = 16, uint32_t inl = 236) {
    QpCaps c;
    c.max_send_wr = send;
    c.max_recv_wr = recv;
    c.max_inline_data = inl;
    return c;
  }
  Side a_, b_;
};

// A NIC drops a packet for a QP not yet in RTR and the sender retransmits after its timeout: a
// peer that connects within the retries gets the message (a server may send first, before the
// client has read its bootstrap answer). Not an instant failure, as it was here before.
TEST_F(SoftDeviceTest, ASendToAPeerNotYetConnectedIsRetriedUntilItConnects) {
  a_.Open(Caps());
  b_.Open(Caps());
  QpConnectParams pa, pb;
  pa.remote = b_.address(200);
  pa.local_psn = 100;
  pb.remote = a_.address(100);
  pb.local_psn = 200;
  ASSERT_TRUE(a_.qp->Connect(pa).ok());
  ASSERT_TRUE(b_.PostRecv(1, 0, 64).ok());
  ASSERT_TRUE(a_.Send(7, 0, 32).ok());
  // The first try meets b in INIT.
  ASSERT_TRUE(
      WaitForCounters(a_.dev.get(), [](const auto& c) { return c.not_ready_received > 0; }));
  ASSERT_TRUE(b_.qp->Connect(pb).ok());
  auto sends = WaitFor(a_.send_cq.get(), 1);
  ASSERT_EQ(sends.size(), 1u);
  EXPECT_EQ(sends[0].status, WcStatus::kSuccess);
  EXPECT_EQ(WaitFor(b_.recv_cq.get(), 1).size(), 1u);
}

TEST_F(SoftDeviceTest, SendConsumesTheNextPostedReceiveInOrder) {
  Connect(Caps());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(b_.PostRecv(10 + i, 1024 * i, 1024).ok());
  for (int i = 0; i < 3; ++i) {
    memset(a_.buf.data() + 100 * i, 'a' + i, 100);
    ASSERT_TRUE(a_.Send(i, 100 * i, 50 + i).ok());
  }
  auto sends = WaitFor(a_.send_cq.get(), 3);
  auto recvs = WaitFor(b_.recv_cq.get(), 3);
  ASSERT_EQ(sends.size(), 3u);
  ASSERT_EQ(recvs.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(sends[i].wr_id, static_cast<uint64_t>(i));
    EXPECT_EQ(sends[i].status, WcStatus::kSuccess);
    EXPECT_EQ(recvs[i].wr_id, static_cast<uint64_t>(10 + i));
    EXPECT_EQ(recvs[i].status, WcStatus::kSuccess);
    EXPECT_EQ(recvs[i].byte_len, static_cast<uint32_t>(50 + i));
    EXPECT_EQ(b_.buf[1024 * i], 'a' + i);
    EXPECT_EQ(recvs[i].qp_num, b_.qp->qp_num());
  }
}

TEST_F(SoftDeviceTest, ImmediateDataTravelsWithTheMessage) {
  Connect(Caps());
  ASSERT_TRUE(b_.PostRecv(1, 0, 64).ok());
  Sge s = a_.sge(0, 8);
  SendWr wr;
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.has_imm = true;
  wr.imm = 0xC0FFEE;
  ASSERT_TRUE(a_.qp->PostSend(wr).ok());
  auto recvs = WaitFor(b_.recv_cq.get(), 1);
  ASSERT_EQ(recvs.size(), 1u);
  EXPECT_TRUE(recvs[0].has_imm);
  EXPECT_EQ(recvs[0].imm, 0xC0FFEEu);
}

TEST_F(SoftDeviceTest, NoPostedReceiveIsRnrThenErrorAndEverythingFlushes) {
  Connect(Caps(), /*rnr_retry=*/0);
  ASSERT_TRUE(a_.Send(1, 0, 10).ok());
  ASSERT_TRUE(a_.Send(2, 0, 10).ok());
  auto sends = WaitFor(a_.send_cq.get(), 2);
  ASSERT_EQ(sends.size(), 2u);
  EXPECT_EQ(sends[0].status, WcStatus::kRnrRetryExceeded);
  EXPECT_EQ(sends[1].status, WcStatus::kFlushed);
  EXPECT_EQ(a_.qp->state(), QpState::kError);
  // Later requests complete flushed, receives too.
  ASSERT_TRUE(a_.Send(3, 0, 10).ok());
  ASSERT_TRUE(a_.PostRecv(4, 0, 10).ok());
  EXPECT_EQ(WaitFor(a_.send_cq.get(), 1).at(0).status, WcStatus::kFlushed);
  EXPECT_EQ(WaitFor(a_.recv_cq.get(), 1).at(0).status, WcStatus::kFlushed);
  // The receiver never saw a message, once it has taken every packet a sent.
  const uint64_t sent = a_.dev->port_counters().data_sent;
  ASSERT_TRUE(
      WaitForCounters(b_.dev.get(), [sent](const auto& c) { return c.data_received >= sent; }));
  EXPECT_TRUE(WaitFor(b_.recv_cq.get(), 0).empty());
}

TEST_F(SoftDeviceTest, RnrRetriesUntilAReceiveIsPosted) {
  Connect(Caps(), /*rnr_retry=*/7);  // 7: forever
  ASSERT_TRUE(a_.Send(1, 0, 10).ok());
  ASSERT_TRUE(a_.Send(2, 0, 10).ok());
  ASSERT_TRUE(WaitForRnrNaks(a_.dev.get(), 3));  // refused, retried and refused again
  EXPECT_TRUE(WaitFor(a_.send_cq.get(), 0).empty());
  ASSERT_TRUE(b_.PostRecv(7, 0, 64).ok());
  ASSERT_TRUE(b_.PostRecv(8, 64, 64).ok());
  auto sends = WaitFor(a_.send_cq.get(), 2);
  ASSERT_EQ(sends.size(), 2u);
  EXPECT_EQ(sends[0].status, WcStatus::kSuccess);
  EXPECT_EQ(sends[1].status, WcStatus::kSuccess);
  auto recvs = WaitFor(b_.recv_cq.get(), 2);
  ASSERT_EQ(recvs.size(), 2u);
  EXPECT_EQ(recvs[0].wr_id, 7u);  // in order, each exactly once
  EXPECT_EQ(recvs[1].wr_id, 8u);
}

// Unsignaled sends ask for no ACK (AckReq clear); a later RNR NAK acknowledges them implicitly, so
// the sender's error is the refused send's, not theirs, and they were delivered exactly once.
TEST_F(SoftDeviceTest, AnRnrNakAcknowledgesTheUnsignaledSendsBeforeIt) {
  Connect(Caps());  // rnr_retry 0
  ASSERT_TRUE(b_.PostRecv(7, 0, 64).ok());
  ASSERT_TRUE(b_.PostRecv(8, 64, 64).ok());
  ASSERT_TRUE(a_.Send(1, 0, 10, /*signaled=*/false).ok());
  ASSERT_TRUE(a_.Send(2, 0, 10, /*signaled=*/false).ok());
  ASSERT_TRUE(a_.Send(3, 0, 10).ok());  // no receive left: RNR, then the QP errs
  auto recvs = WaitFor(b_.recv_cq.get(), 2);
  ASSERT_EQ(recvs.size(), 2u);
  EXPECT_EQ(recvs[0].wr_id, 7u);
  EXPECT_EQ(recvs[1].wr_id, 8u);
  auto sends = WaitFor(a_.send_cq.get(), 1);
  ASSERT_EQ(sends.size(), 1u);
  EXPECT_EQ(sends[0].wr_id, 3u);
  EXPECT_EQ(sends[0].status, WcStatus::kRnrRetryExceeded);
  EXPECT_EQ(a_.qp->state(), QpState::kError);
}

TEST_F(SoftDeviceTest, ReceiveBufferTooSmallIsALocalLengthError) {
  Connect(Caps());
  ASSERT_TRUE(b_.PostRecv(1, 0, 16).ok());
  ASSERT_TRUE(b_.PostRecv(2, 16, 16).ok());
  ASSERT_TRUE(a_.Send(9, 0, 17).ok());
  auto recvs = WaitFor(b_.recv_cq.get(), 2);
  ASSERT_EQ(recvs.size(), 2u);
  EXPECT_EQ(recvs[0].status, WcStatus::kLocalLengthError);
  EXPECT_EQ(recvs[1].status, WcStatus::kFlushed);
  EXPECT_EQ(b_.qp->state(), QpState::kError);
  auto sends = WaitFor(a_.send_cq.get(), 1);
  ASSERT_EQ(sends.size(), 1u);
  EXPECT_EQ(sends[0].status, WcStatus::kRemoteInvalidRequest);
  EXPECT_EQ(a_.qp->state(), QpState::kError);
}

TEST_F(SoftDeviceTest, InlineIsCappedAtWhatTheDeviceGranted) {
  Connect(Caps(16, 16, /*inline asked=*/4096));
  EXPECT_EQ(a_.qp->caps().max_inline_data, 236u);  // read back: what the device granted
  ASSERT_TRUE(b_.PostRecv(1, 0, 4096).ok());
  std::vector<uint8_t> unregistered(300, 'x');
  Sge s{reinterpret_cast<uint64_t>(unregistered.data()), 237, 0};
  SendWr wr;
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.inline_data = true;
  EXPECT_TRUE(a_.qp->PostSend(wr).IsInvalidArgument());
  s.length = 236;  // inline needs no registration
  ASSERT_TRUE(a_.qp->PostSend(wr).ok());
  unregistered[0] = 'y';  // copied at post time
  auto recvs = WaitFor(b_.recv_cq.get(), 1);
  ASSERT_EQ(recvs.size(), 1u);
  EXPECT_EQ(recvs[0].byte_len, 236u);
  EXPECT_EQ(b_.buf[0], 'x');
}

TEST_F(SoftDeviceTest, SendQueueOverflowIsRefused) {
  Connect(Caps(/*send=*/2), /*rnr_retry=*/7);
  ASSERT_TRUE(a_.Send(1, 0, 8).ok());
  ASSERT_TRUE(a_.Send(2, 0, 8).ok());
  EXPECT_TRUE(a_.Send(3, 0, 8).IsIOError());
}

TEST_F(SoftDeviceTest, UnsignaledSendsCompleteSilentlyAndHoldTheirSlots) {
  Connect(Caps(/*send=*/4));
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(b_.PostRecv(i, 0, 64).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(a_.Send(i, 0, 8, /*signaled=*/false).ok());
  ASSERT_EQ(WaitFor(b_.recv_cq.get(), 3).size(), 3u);  // delivered
  // Their slots are still held: one more fits, then the queue is full.
  ASSERT_TRUE(a_.Send(3, 0, 8, /*signaled=*/true).ok());
  // No completion for them: one would come before the signaled send's (one queue, in order).
  auto done = WaitFor(a_.send_cq.get(), 1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].wr_id, 3u);
  // The signaled completion freed the slots of the unsignaled ones before it.
  for (int i = 4; i < 8; ++i) ASSERT_TRUE(a_.Send(i, 0, 8, i == 7).ok());
  EXPECT_EQ(WaitFor(a_.send_cq.get(), 1).size(), 1u);
}

TEST_F(SoftDeviceTest, CompletionQueueOverflowIsAnErrorAndAnAsyncEvent) {
  Connect(Caps(), 0, /*cq_size=*/2);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(b_.PostRecv(i, 0, 64).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(a_.Send(i, 0, 8, /*signaled=*/false).ok());
  MonoTime deadline = MonoTime::Now() + MonoDelta::FromSeconds(10);
  WorkCompletion wc[4];
  while (b_.recv_cq->Poll(wc, 0).ok() && MonoTime::Now() < deadline) {
    SleepFor(MonoDelta::FromMicroseconds(100));
  }
  EXPECT_TRUE(b_.recv_cq->Poll(wc, 4).status().IsIOError());
  pollfd p{b_.dev->async_fd(), POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 0), 1);
  AsyncEvent ev;
  ASSERT_TRUE(b_.dev->NextAsyncEvent(&ev));
  EXPECT_EQ(ev.type, AsyncEventType::kCqError);
  EXPECT_EQ(ev.context, b_.recv_cq.get());
}

TEST_F(SoftDeviceTest, AWrongLkeyOrMemoryOutsideTheRegionIsAProtectionError) {
  Connect(Caps());
  Sge s = a_.sge(0, 8);
  s.lkey += 1000;
  SendWr wr;
  wr.wr_id = 5;
  wr.sg_list = &s;
  wr.num_sge = 1;
  ASSERT_TRUE(a_.qp->PostSend(wr).ok());
  auto done = WaitFor(a_.send_cq.get(), 1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, WcStatus::kLocalProtectionError);
  EXPECT_EQ(a_.qp->state(), QpState::kError);

  // On the other side: a receive reaching past its region.
  Sge past = b_.sge(b_.buf.size() - 4, 8);
  ASSERT_TRUE(b_.qp->PostRecv(RecvWr{6, &past, 1}).ok());
  auto bad = WaitFor(b_.recv_cq.get(), 1);
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_EQ(bad[0].status, WcStatus::kLocalProtectionError);
}

// A send's memory belongs to the NIC until its completion: deregistered (its Block freed) or
// overwritten before then, the send completes with a protection error and the QP goes to ERR.
// The peer has no receive posted, so the send waits in RNR retries (deterministically unacked)
// while the test breaks the rule.
TEST_F(SoftDeviceTest, MemoryDeregisteredBeforeTheCompletionIsAProtectionError) {
  Connect(Caps(), /*rnr_retry=*/7);
  std::vector<uint8_t> extra(4096, 'x');
  std::unique_ptr<MemoryRegion> mr = a_.pd->RegisterMemory(extra.data(), extra.size()).value();
  Sge s{reinterpret_cast<uint64_t>(extra.data()), 4096, mr->lkey()};
  SendWr wr;
  wr.wr_id = 9;
  wr.sg_list = &s;
  wr.num_sge = 1;
  ASSERT_TRUE(a_.qp->PostSend(wr).ok());
  ASSERT_TRUE(WaitForRnrNaks(a_.dev.get(), 1));
  mr.reset();  // deregistered while the send is outstanding
  ASSERT_TRUE(b_.PostRecv(1, 0, 8192).ok());
  auto done = WaitFor(a_.send_cq.get(), 1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, WcStatus::kLocalProtectionError);
  EXPECT_EQ(a_.qp->state(), QpState::kError);
}

TEST_F(SoftDeviceTest, MemoryChangedBeforeTheCompletionIsAProtectionErrorWhenVerified) {
  a_.options.verify_send_memory = true;
  Connect(Caps(), /*rnr_retry=*/7);
  memset(a_.buf.data(), 'a', 4096);
  ASSERT_TRUE(a_.Send(3, 0, 4096).ok());
  ASSERT_TRUE(WaitForRnrNaks(a_.dev.get(), 1));
  a_.buf[100] = 'b';  // reused before the completion
  ASSERT_TRUE(b_.PostRecv(1, 0, 8192).ok());
  auto done = WaitFor(a_.send_cq.get(), 1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, WcStatus::kLocalProtectionError);
  EXPECT_EQ(a_.qp->state(), QpState::kError);
}

TEST_F(SoftDeviceTest, SrqLimitEventFiresOnceWhenReceivesDropBelowTheLimit) {
  Connect(Caps(), 0, 64, /*srq=*/true);
  EXPECT_TRUE(b_.qp->PostRecv(RecvWr{}).IsInvalidArgument());  // receives go to the SRQ
  for (int i = 0; i < 4; ++i) {
    Sge s = b_.sge(64 * i, 64);
    ASSERT_TRUE(b_.srq->PostRecv(RecvWr{static_cast<uint64_t>(i), &s, 1}).ok());
  }
  ASSERT_TRUE(b_.srq->ArmLimit(3).ok());
  ASSERT_TRUE(a_.Send(0, 0, 8).ok());  // 3 left: not below 3
  ASSERT_EQ(WaitFor(b_.recv_cq.get(), 1).size(), 1u);
  AsyncEvent ev;
  EXPECT_FALSE(b_.dev->NextAsyncEvent(&ev));
  ASSERT_TRUE(a_.Send(1, 0, 8).ok());  // 2 left
  ASSERT_TRUE(a_.Send(2, 0, 8).ok());  // 1 left: the limit is disarmed, no second event
  ASSERT_EQ(WaitFor(b_.recv_cq.get(), 2).size(), 2u);
  ASSERT_TRUE(b_.dev->NextAsyncEvent(&ev));
  EXPECT_EQ(ev.type, AsyncEventType::kSrqLimitReached);
  // As verbs: the SRQ is named by the context its creator set, nothing else.
  EXPECT_EQ(ev.context, &b_.srq_context);
  EXPECT_FALSE(b_.dev->NextAsyncEvent(&ev));
}

TEST_F(SoftDeviceTest, AnSrqEventWithoutAContextNamesNothing) {
  b_.Open(Caps());
  auto srq = b_.pd->CreateSrq(8).value();  // no context
  QpInitAttr attr;
  attr.send_cq = b_.send_cq.get();
  attr.recv_cq = b_.recv_cq.get();
  attr.srq = srq.get();
  attr.caps = Caps();
  auto qp = b_.pd->CreateQp(attr).value();
  ASSERT_TRUE(qp->ToInit(1, 0).ok());
  ASSERT_TRUE(qp->ToError().ok());
  AsyncEvent ev;
  ASSERT_TRUE(b_.dev->NextAsyncEvent(&ev));
  EXPECT_EQ(ev.type, AsyncEventType::kQpLastWqeReached);
  EXPECT_EQ(ev.qp_num, qp->qp_num());
  EXPECT_EQ(ev.context, nullptr);
}

// mlx5: after ERR, a QP on an SRQ reports its last WQE once every receive it took has
// completed; destroying the QP removes its completions from both CQs, so a receive not polled
// by then is lost to the SRQ's owner. Only event, then poll, then destroy keeps them all.
TEST_F(SoftDeviceTest, LastWqeReachedFollowsTheReceivesOfAnSrqQueuePair) {
  Connect(Caps(), 0, 64, /*srq=*/true);
  for (int i = 0; i < 4; ++i) {
    Sge s = b_.sge(64 * i, 64);
    ASSERT_TRUE(b_.srq->PostRecv(RecvWr{static_cast<uint64_t>(i), &s, 1}).ok());
  }
  ASSERT_TRUE(a_.Send(0, 0, 8).ok());
  ASSERT_TRUE(a_.Send(1, 0, 8).ok());
  ASSERT_EQ(WaitFor(a_.send_cq.get(), 2).size(), 2u);  // acknowledged: placed in b's CQ
  AsyncEvent ev;
  EXPECT_FALSE(b_.dev->NextAsyncEvent(&ev));
  ASSERT_TRUE(b_.qp->ToError().ok());
  ASSERT_TRUE(b_.dev->NextAsyncEvent(&ev));
  EXPECT_EQ(ev.type, AsyncEventType::kQpLastWqeReached);
  EXPECT_EQ(ev.qp_num, b_.qp->qp_num());
  EXPECT_EQ(ev.context, &b_.qp_context);
  auto recvs = WaitFor(b_.recv_cq.get(), 2);
  ASSERT_EQ(recvs.size(), 2u);
  EXPECT_EQ(recvs[1].wr_id, 1u);
}

TEST_F(SoftDeviceTest, DestroyingAQueuePairRemovesItsCompletionsFromBothQueues) {
  Connect(Caps(), 0, 64, /*srq=*/true);
  for (int i = 0; i < 4; ++i) {
    Sge s = b_.sge(64 * i, 64);
    ASSERT_TRUE(b_.srq->PostRecv(RecvWr{static_cast<uint64_t>(i), &s, 1}).ok());
  }
  ASSERT_TRUE(a_.Send(0, 0, 8).ok());
  ASSERT_TRUE(a_.Send(1, 0, 8).ok());
  ASSERT_EQ(WaitFor(a_.send_cq.get(), 2).size(), 2u);
  ASSERT_TRUE(b_.Send(7, 0, 8).ok());  // to a with no receive posted: fails at once (rnr 0)
  ASSERT_TRUE(b_.qp->ToError().ok());
  ASSERT_TRUE(WaitForRnrNaks(b_.dev.get(), 1));  // the refusal is in (its completion queued)
  b_.qp.reset();
  WorkCompletion wc[8];
  EXPECT_EQ(b_.recv_cq->Poll(wc, 8).value(), 0);
  EXPECT_EQ(b_.send_cq->Poll(wc, 8).value(), 0);
  AsyncEvent ev;
  EXPECT_FALSE(b_.dev->NextAsyncEvent(&ev));  // its queued events went with it
}

TEST_F(SoftDeviceTest, AnInjectedQpFatalEventPutsTheQpInErrorAndNamesItsContext) {
  Connect(Caps());
  ASSERT_TRUE(b_.PostRecv(1, 0, 64).ok());
  b_.dev->InjectAsyncEvent(AsyncEventType::kQpFatal, b_.qp.get());
  EXPECT_EQ(b_.qp->state(), QpState::kError);
  auto flushed = WaitFor(b_.recv_cq.get(), 1);
  ASSERT_EQ(flushed.size(), 1u);
  EXPECT_EQ(flushed[0].status, WcStatus::kFlushed);
  AsyncEvent ev;
  ASSERT_TRUE(b_.dev->NextAsyncEvent(&ev));
  EXPECT_EQ(ev.type, AsyncEventType::kQpFatal);
  EXPECT_EQ(ev.qp_num, b_.qp->qp_num());
  EXPECT_EQ(ev.context, &b_.qp_context);
  b_.dev->InjectAsyncEvent(AsyncEventType::kPortError);
  ASSERT_TRUE(b_.dev->NextAsyncEvent(&ev));
  EXPECT_EQ(ev.type, AsyncEventType::kPortError);
  EXPECT_EQ(ev.context, nullptr);
}

TEST_F(SoftDeviceTest, GrantedDepthsAreRoundedUpToPowersOfTwo) {
  a_.Open(Caps(/*send=*/6, /*recv=*/5));
  EXPECT_EQ(a_.qp->caps().max_send_wr, 8u);
  EXPECT_EQ(a_.qp->caps().max_recv_wr, 8u);
  // Every granted slot may be used.
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(a_.PostRecv(i, 0, 64).ok()) << i;
  EXPECT_FALSE(a_.PostRecv(8, 0, 64).ok());
}

TEST_F(SoftDeviceTest, AnArmedQueueSignalsItsChannelOnce) {
  Connect(Caps());
  ASSERT_TRUE(b_.PostRecv(1, 0, 64).ok());
  ASSERT_TRUE(b_.PostRecv(2, 0, 64).ok());
  ASSERT_TRUE(b_.recv_cq->RequestNotify().ok());
  ASSERT_TRUE(a_.Send(1, 0, 8, false).ok());
  pollfd p{b_.channel->fd(), POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 10000), 1);
  EXPECT_EQ(b_.channel->GetEvent().value(), b_.recv_cq.get());
  ASSERT_TRUE(a_.Send(2, 0, 8, false).ok());  // not re-armed: no event
  ASSERT_EQ(WaitFor(b_.recv_cq.get(), 2).size(), 2u);
  EXPECT_EQ(b_.channel->GetEvent().value(), nullptr);
}

// The UDP source port of a RoCE v2 QP, as the kernel derives it for mlx5: from the flow label,
// or, unlabelled, from the QP numbers as if labelled with CalcFlowLabel (either order).
TEST_F(SoftDeviceTest, TheUdpSourcePortComesFromTheFlowLabelOrTheQpNumbers) {
  EXPECT_EQ(0xE341, RoceUdpSourcePort(0x12345, 0x100, 0x101));  // 0x2345 ^ (0x10000 >> 14)
  EXPECT_EQ(RoceUdpSourcePort(CalcFlowLabel(0x1234, 0x5678), 7, 8),
            RoceUdpSourcePort(0, 0x1234, 0x5678));
  EXPECT_EQ(RoceUdpSourcePort(0, 0x5678, 0x1234), RoceUdpSourcePort(0, 0x1234, 0x5678));
  EXPECT_EQ(1u, ConnectionFlowLabel(0, 0x1234));  // never "no label"
}

// BreakEcmpPath: a packet takes the path its UDP source port hashes to; the broken one loses it
// (the send fails once its retries run out) and the other carries it.
TEST_F(SoftDeviceTest, ABrokenEcmpPathLosesOnlyTheFlowsHashedOntoIt) {
  ConnectWithOneQuickRetry(/*flow_label=*/2);  // UDP source port 0xC002
  ASSERT_TRUE(b_.PostRecv(1, 0, 64).ok());
  // Its path: one of two; the other one breaks first, then its own.
  const int path = EcmpPathOf(0xC002, 2);
  a_.dev->BreakEcmpPath(2, 1 - path);
  ASSERT_TRUE(a_.Send(7, 0, 32).ok());
  auto done = WaitFor(a_.send_cq.get(), 1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, WcStatus::kSuccess);
  a_.dev->BreakEcmpPath(2, path);
  ASSERT_TRUE(a_.Send(8, 0, 32).ok());
  done = WaitFor(a_.send_cq.get(), 1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, WcStatus::kRetryExceeded);
}

// DropLargePacketsToward: toward that device a packet above the limit is lost (the send fails
// once its retries run out); smaller ones cross, and so does everything the other way.
TEST_F(SoftDeviceTest, LargePacketsTowardOneDeviceAreLostAndSmallOnesCross) {
  ConnectWithOneQuickRetry();
  a_.dev->DropLargePacketsToward(b_.address(200).gid, 512);
  ASSERT_TRUE(a_.PostRecv(1, 0, 1024).ok());
  ASSERT_TRUE(b_.PostRecv(1, 0, 1024).ok());
  ASSERT_TRUE(b_.Send(5, 0, 1024).ok());  // the other way: crosses
  auto done = WaitFor(b_.send_cq.get(), 1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, WcStatus::kSuccess);
  ASSERT_TRUE(a_.Send(6, 0, 512).ok());  // at the limit: crosses
  done = WaitFor(a_.send_cq.get(), 1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, WcStatus::kSuccess);
  ASSERT_TRUE(a_.Send(7, 0, 513).ok());  // above it: lost
  done = WaitFor(a_.send_cq.get(), 1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, WcStatus::kRetryExceeded);
}

TEST_F(SoftDeviceTest, ADroppedPeerFailsOutstandingSends) {
  Connect(Caps(), /*rnr_retry=*/7);
  ASSERT_TRUE(a_.Send(1, 0, 8).ok());  // waits for a receive forever
  ASSERT_TRUE(WaitForRnrNaks(a_.dev.get(), 1));
  a_.dev->DropPeers();
  auto done = WaitFor(a_.send_cq.get(), 1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, WcStatus::kRetryExceeded);
}

// The port as its hardware changes at run time (finding 4 of issue 37): each change queues its
// event, and port() shows it once that event is read, as a context re-reads its port.
TEST_F(SoftDeviceTest, PortChangesShowOnceTheirEventIsRead) {
  a_.Open(Caps());
  a_.dev->SetLid(5);
  ASSERT_TRUE(a_.dev->SetPortAddresses({"10.1.1.1"}).ok());
  a_.dev->SetPortActive(false);
  EXPECT_EQ(0, a_.dev->port().lid);  // not read yet
  EXPECT_EQ(4u, a_.dev->port().gid_table.size());
  EXPECT_TRUE(a_.dev->port().active);
  AsyncEvent e;
  ASSERT_TRUE(a_.dev->NextAsyncEvent(&e));
  EXPECT_EQ(AsyncEventType::kLidChange, e.type);
  EXPECT_EQ(5, a_.dev->port().lid);
  ASSERT_TRUE(a_.dev->NextAsyncEvent(&e));
  EXPECT_EQ(AsyncEventType::kGidChange, e.type);
  EXPECT_EQ(6u, a_.dev->port().gid_table.size());  // a v1/v2 pair for the address
  ASSERT_TRUE(a_.dev->NextAsyncEvent(&e));
  EXPECT_EQ(AsyncEventType::kPortError, e.type);
  EXPECT_FALSE(a_.dev->port().active);
  a_.dev->SetPortActive(true);
  ASSERT_TRUE(a_.dev->NextAsyncEvent(&e));
  EXPECT_EQ(AsyncEventType::kPortActive, e.type);
  EXPECT_TRUE(a_.dev->port().active);
  EXPECT_FALSE(a_.dev->NextAsyncEvent(&e));
}

// A port that is down sends nothing: a send is lost and fails once the QP's retries run out.
TEST_F(SoftDeviceTest, APortDownLosesSendsUntilTheQpGivesUp) {
  Connect(Caps());
  ASSERT_TRUE(b_.PostRecv(1, 0, 64).ok());
  a_.dev->SetPortActive(false);
  ASSERT_TRUE(a_.Send(1, 0, 8).ok());
  auto done = WaitFor(a_.send_cq.get(), 1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, WcStatus::kRetryExceeded);
  EXPECT_EQ(a_.qp->state(), QpState::kError);
}

TEST_F(SoftDeviceTest, ASendToADestroyedQueuePairFails) {
  Connect(Caps());
  b_.qp.reset();
  ASSERT_TRUE(a_.Send(1, 0, 8).ok());
  ASSERT_TRUE(a_.Send(2, 0, 8).ok());
  auto done = WaitFor(a_.send_cq.get(), 2);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].status, WcStatus::kRetryExceeded);
  EXPECT_EQ(done[1].status, WcStatus::kFlushed);
  EXPECT_EQ(a_.qp->state(), QpState::kError);
}

TEST_F(SoftDeviceTest, StalledCompletionsAreReleasedInOrder) {
  Connect(Caps());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(b_.PostRecv(i, 0, 64).ok());
  b_.dev->StallCompletions(true);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(a_.Send(i, 0, 8).ok());
  ASSERT_EQ(WaitFor(a_.send_cq.get(), 3).size(), 3u);  // delivered and acknowledged
  EXPECT_TRUE(WaitFor(b_.recv_cq.get(), 0).empty());
  b_.dev->StallCompletions(false);
  auto recvs = WaitFor(b_.recv_cq.get(), 3);
  ASSERT_EQ(recvs.size(), 3u);
  EXPECT_EQ(recvs[2].wr_id, 2u);
}

TEST_F(SoftDeviceTest, RegistrationFailsWhenTold) {
  a_.Open(Caps());
  a_.dev->FailRegistrations(1);
  std::vector<uint8_t> mem(64);
  EXPECT_FALSE(a_.pd->RegisterMemory(mem.data(), mem.size()).ok());
  EXPECT_TRUE(a_.pd->RegisterMemory(mem.data(), mem.size()).ok());
}

TEST_F(SoftDeviceTest, PostSendBeforeConnectIsRefused) {
  a_.Open(Caps());
  EXPECT_TRUE(a_.Send(1, 0, 8).IsIllegalState());
}

// Two processes, two devices: the child echoes what the parent sends (the software backend is a
// real same-host transport, so client and server can run as two processes).
TEST(SoftDeviceProcessTest, QueuePairsConnectAcrossProcesses) {
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  // Each side opens its device after the fork (a device's NIC thread does not survive a fork).
  auto run_side = [](int fd, bool parent) -> bool {
    Side side;
    QpCaps caps;
    caps.max_send_wr = caps.max_recv_wr = 8;
    side.Open(caps);
    QpAddress mine = side.address(parent ? 1 : 2), theirs;
    if (write(fd, &mine, sizeof(mine)) != sizeof(mine)) return false;
    if (read(fd, &theirs, sizeof(theirs)) != sizeof(theirs)) return false;
    if (!side.PostRecv(1, 4096, 4096).ok()) return false;
    QpConnectParams params;
    params.remote = theirs;
    params.local_psn = mine.psn;
    if (!side.qp->Connect(params).ok()) return false;
    char ready = 1;  // both have a receive posted before anyone sends (rnr_retry is 0)
    if (write(fd, &ready, 1) != 1 || read(fd, &ready, 1) != 1) return false;
    if (parent) {
      memcpy(side.buf.data(), "ping from the parent", 20);
      if (!side.Send(1, 0, 20).ok()) return false;
    }
    auto got = WaitFor(side.recv_cq.get(), 1);
    if (got.size() != 1 || got[0].status != WcStatus::kSuccess) return false;
    if (!parent) {
      memcpy(side.buf.data(), side.buf.data() + 4096, got[0].byte_len);
      if (!side.Send(2, 0, got[0].byte_len).ok()) return false;
    } else if (memcmp(side.buf.data() + 4096, "ping from the parent", 20) != 0) {
      return false;
    }
    auto sent = WaitFor(side.send_cq.get(), 1);
    return sent.size() == 1 && sent[0].status == WcStatus::kSuccess;
  };
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(fds[0]);
    _exit(run_side(fds[1], false) ? 0 : 1);
  }
  close(fds[1]);
  EXPECT_TRUE(run_side(fds[0], true));
  close(fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

}  // namespace
}  // namespace rrpc::rdma
