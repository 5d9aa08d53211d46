// SrqContext against the software backend's hardware rules, one connection at a time, without a
// messenger: a retired QP is drained (last WQE reached, both CQs polled) before it is destroyed,
// so a message it received just before it closed returns its block to the SRQ.
#include "rpc/rdma/srq/srq_context.h"

#include <ev.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "rpc/rdma/async_events.h"
#include "rpc/rdma/rdma_endpoint.h"
#include "rpc/rdma/soft/soft_device.h"
#include "rrpc/util/monotime.h"

namespace rrpc::rdma {
namespace {

// Counts what the context hands a connection.
class CountingClient final : public SrqClient {
 public:
  void OnSrqSendDone(uint32_t, WcStatus) override { ++sends; }
  void OnSrqReceive(uint32_t block, uint32_t, WcStatus) override {
    ++receives;
    blocks.push_back(block);
  }
  void OnSrqBatchDone() override {}
  void OnSrqCreditsAvailable() override {}
  void OnSrqIdleCheck(MonoTime) override {}
  void OnSrqQpFailed(const Status& why) override { failures.push_back(why.ToString()); }
  int sends = 0, receives = 0;
  std::vector<std::string> failures;
  std::vector<uint32_t> blocks;  // received, in order
};

EndpointOptions PeerOptions() {
  EndpointOptions o;
  o.buffer_size = 256;
  o.receive_buffers = 4;
  o.send_buffers = 32;
  o.spare_receive_buffers = 0;
  o.rnr_retry = 0;  // a send that finds no posted receive fails at once
  return o;
}

class SrqContextTest : public testing::Test {
 protected:
  void SetUp() override {
    loop_ = ev_loop_new(EVFLAG_AUTO);
    dev_ = OpenSoftDevice().value();
    pd_ = dev_->AllocPd().value();
    peer_dev_ = OpenSoftDevice().value();
    peer_pd_ = peer_dev_->AllocPd().value();
    // The device's async events reach the contexts as in a process (the factory's watcher).
    watcher_ = DeviceEventWatcher::Start(dev_.get(), [ctx = dev_.get()](const AsyncEvent& e) {
                 SrqContext::DeliverAsyncEvent(ctx, e);
               }).value();
    SrqOptions o;
    o.buffer_size = 256;
    o.chunk_blocks = kBlocks;
    o.max_memory = kBlocks * 256;  // one chunk: the pool never grows
    o.reserve = 2;
    o.send_buffers = 4;
    o.reclaim_after = MonoDelta();
    o.grow_off_reactor = false;
    srq_ = SrqContext::Create(dev_.get(), pd_.get(), o, loop_).value();
  }
  void TearDown() override {
    watcher_.reset();
    endpoints_.clear();
    srq_.reset();
    ev_loop_destroy(loop_);
  }
  // An SRQ endpoint attached to `client`, connected to a private-RQ endpoint on the peer device.
  std::pair<RdmaEndpoint*, RdmaEndpoint*> Connected(SrqClient* client) {
    EndpointOptions o = PeerOptions();
    auto ours = RdmaEndpoint::CreateShared(dev_.get(), pd_.get(), o, srq_.get()).value();
    auto peer = RdmaEndpoint::Create(peer_dev_.get(), peer_pd_.get(), o).value();
    EXPECT_TRUE(ours->Connect(peer->address(), 4096).ok());
    EXPECT_TRUE(peer->Connect(ours->address(), 4096).ok());
    srq_->Expect(ours->qp()->qp_num());
    srq_->Attach(ours->qp()->qp_num(), client);
    RunLoop();
    std::pair<RdmaEndpoint*, RdmaEndpoint*> both{ours.get(), peer.get()};
    endpoints_.push_back(std::move(peer));
    endpoints_.push_back(std::move(ours));
    return both;
  }
  // `n` signaled sends from `peer`; their completions (an RC send completes once the receiver
  // placed it) polled and returned.
  std::vector<WorkCompletion> SendFrom(RdmaEndpoint* peer, int n) {
    for (int i = 0; i < n; ++i) {
      uint32_t index;
      EXPECT_TRUE(peer->send_pool()->Take(&index));
      Sge sge = peer->send_pool()->sge(index, 8);
      SendWr wr;
      wr.wr_id = index;
      wr.sg_list = &sge;
      wr.num_sge = 1;
      EXPECT_TRUE(peer->qp()->PostSend(wr).ok());
    }
    std::vector<WorkCompletion> out;
    const MonoTime deadline = MonoTime::Now() + MonoDelta::FromSeconds(30);
    while (out.size() < static_cast<size_t>(n) && MonoTime::Now() < deadline) {
      WorkCompletion wc[16];
      Result<int> got = peer->cq()->Poll(wc, 16);
      if (!got.ok()) break;
      for (int i = 0; i < *got; ++i) {
        if (wc[i].opcode == WcOpcode::kSend) out.push_back(wc[i]);
      }
      if (*got == 0) SleepFor(MonoDelta::FromMicroseconds(100));
    }
    return out;
  }
  void RunLoop() {
    for (int i = 0; i < 8; ++i) ev_run(loop_, EVRUN_NOWAIT);
  }

  static constexpr uint32_t kBlocks = 16;
  struct ev_loop* loop_ = nullptr;
  std::unique_ptr<SoftDevice> dev_, peer_dev_;
  std::unique_ptr<ProtectionDomain> pd_, peer_pd_;
  std::unique_ptr<DeviceEventWatcher> watcher_;
  std::unique_ptr<SrqContext> srq_;
  std::vector<std::unique_ptr<RdmaEndpoint>> endpoints_;  // destroyed before the context
};

TEST_F(SrqContextTest, AReceiveLeftInTheCqWhenItsQpRetiresReturnsToTheSrq) {
  CountingClient keeper, victim, checker;
  Connected(&keeper);  // keeps the reactor watching
  auto [ours, peer] = Connected(&victim);
  // The peer's message lands in the receive CQ; the reactor has not polled it when the
  // connection closes (as the transport closes it: QP to ERR, then retired).
  ASSERT_EQ(SendFrom(peer, 1).size(), 1u);
  const uint32_t qp_num = ours->qp()->qp_num();
  std::unique_ptr<RdmaEndpoint> closing;
  for (auto& e : endpoints_) {
    if (e.get() == ours) closing = std::move(e);
  }
  ASSERT_TRUE(closing->qp()->ToError().ok());
  srq_->Retire(qp_num, std::move(closing), /*in_flight=*/0, /*share=*/0);
  // Drained: the last-WQE event, a poll of both CQs, then the QP is destroyed.
  const MonoTime deadline = MonoTime::Now() + MonoDelta::FromSeconds(30);
  while (srq_->retiring() > 0 && MonoTime::Now() < deadline) {
    RunLoop();
    SleepFor(MonoDelta::FromMicroseconds(200));
  }
  EXPECT_EQ(srq_->retiring(), 0u);
  EXPECT_EQ(victim.receives, 0);  // retired: the block went back, not to the connection
  ASSERT_EQ(srq_->stats().posted_receives.load(), kBlocks);
  // Every receive the ledger counts is really posted: a new peer can use them all without the
  // reactor reposting any (it is not run meanwhile); one lost block would fail the last send.
  auto [ours2, peer2] = Connected(&checker);
  (void)ours2;
  std::vector<WorkCompletion> done = SendFrom(peer2, kBlocks);
  ASSERT_EQ(done.size(), kBlocks);
  for (const WorkCompletion& wc : done) EXPECT_EQ(wc.status, WcStatus::kSuccess);
}

TEST_F(SrqContextTest, AQpIsKeptUntilItsLastWqeIsReached) {
  CountingClient keeper, victim;
  Connected(&keeper);
  auto [ours, peer] = Connected(&victim);
  (void)peer;
  dev_->StallCompletions(true);  // the last-WQE event waits behind the held completions
  std::unique_ptr<RdmaEndpoint> closing;
  for (auto& e : endpoints_) {
    if (e.get() == ours) closing = std::move(e);
  }
  const uint32_t qp_num = closing->qp()->qp_num();
  ASSERT_TRUE(closing->qp()->ToError().ok());
  srq_->Retire(qp_num, std::move(closing), 0, 0);
  RunLoop();
  EXPECT_EQ(srq_->retiring(), 1u);
  dev_->StallCompletions(false);
  const MonoTime deadline = MonoTime::Now() + MonoDelta::FromSeconds(30);
  while (srq_->retiring() > 0 && MonoTime::Now() < deadline) {
    RunLoop();
    SleepFor(MonoDelta::FromMicroseconds(200));
  }
  EXPECT_EQ(srq_->retiring(), 0u);
}

// An endpoint whose connection went while a setup thread held it (RdmaUpgrade's hand-back) comes
// back from that thread; the reactor, not the thread, moves a connected QP to ERR and retires it
// with its peer's grant (a message it received returns to the SRQ), and forgets one never
// connected. The reactor takes and drains them at once, with no connection attached to it.
TEST_F(SrqContextTest, AnEndpointHandedBackToAReactorWithoutConnectionsIsRetiredAtOnce) {
  const EndpointOptions o = PeerOptions();
  auto ours = RdmaEndpoint::CreateShared(dev_.get(), pd_.get(), o, srq_.get()).value();
  auto never_connected = RdmaEndpoint::CreateShared(dev_.get(), pd_.get(), o, srq_.get()).value();
  auto peer = RdmaEndpoint::Create(peer_dev_.get(), peer_pd_.get(), o).value();
  srq_->Expect(ours->qp()->qp_num());
  srq_->Expect(never_connected->qp()->qp_num());
  ASSERT_EQ(srq_->Reserve(3), 3u);  // each peer's initial grant
  ASSERT_EQ(srq_->Reserve(3), 3u);
  ASSERT_TRUE(ours->Connect(peer->address(), 4096).ok());
  ASSERT_TRUE(peer->Connect(ours->address(), 4096).ok());
  ASSERT_EQ(SendFrom(peer.get(), 1).size(), 1u);  // in the receive CQ, not polled
  std::thread([&] {
    srq_->DiscardSoon(std::move(ours), 3);
    srq_->DiscardSoon(std::move(never_connected), 3);
  }).join();
  const MonoTime deadline = MonoTime::Now() + MonoDelta::FromSeconds(30);
  while ((srq_->retiring() > 0 || srq_->stats().grants_outstanding.load() > 0 ||
          srq_->stats().posted_receives.load() < kBlocks) &&
         MonoTime::Now() < deadline) {
    RunLoop();
    SleepFor(MonoDelta::FromMicroseconds(200));
  }
  EXPECT_EQ(srq_->retiring(), 0u);
  EXPECT_EQ(srq_->stats().retiring.load(), 0u);
  EXPECT_EQ(srq_->stats().grants_outstanding.load(), 0u);
  EXPECT_EQ(srq_->stats().posted_receives.load(), kBlocks);
  EXPECT_EQ(srq_->stats().connections.load(), 0u);
}

// Finding 5 of issue 27: a QP the device reports broken fails its connection at once (its calls
// may be retried), instead of waiting until TCP notices; a lost device fails them all.
TEST_F(SrqContextTest, AQpFatalEventFailsOnlyItsConnectionAtOnce) {
  CountingClient keeper, victim;
  Connected(&keeper);
  auto [ours, peer] = Connected(&victim);
  (void)peer;
  dev_->InjectAsyncEvent(AsyncEventType::kQpFatal, ours->qp());
  const MonoTime deadline = MonoTime::Now() + MonoDelta::FromSeconds(30);
  while (victim.failures.empty() && MonoTime::Now() < deadline) {
    RunLoop();
    SleepFor(MonoDelta::FromMicroseconds(200));
  }
  ASSERT_EQ(victim.failures.size(), 1u);
  EXPECT_NE(victim.failures[0].find("queue pair failed"), std::string::npos);
  EXPECT_TRUE(keeper.failures.empty());
}

TEST_F(SrqContextTest, ADeviceFatalEventFailsEveryConnection) {
  CountingClient a, b;
  Connected(&a);
  Connected(&b);
  dev_->InjectAsyncEvent(AsyncEventType::kDeviceFatal);
  const MonoTime deadline = MonoTime::Now() + MonoDelta::FromSeconds(30);
  while ((a.failures.empty() || b.failures.empty()) && MonoTime::Now() < deadline) {
    RunLoop();
    SleepFor(MonoDelta::FromMicroseconds(200));
  }
  ASSERT_EQ(a.failures.size(), 1u);
  ASSERT_EQ(b.failures.size(), 1u);
  EXPECT_NE(a.failures[0].find("device failed"), std::string::npos);
}

// Finding 7 (issue 37): a limit event asks for a chunk off the reactor; its registration is
// refused. The limit, disarmed by the event, is armed again: the next drop below it fires a
// second event (before the fix, none fired: the pool never grew on a limit event again).
TEST_F(SrqContextTest, AFailedBackgroundGrowthReArmsTheLimit) {
  srq_.reset();
  SrqOptions o;
  o.buffer_size = 256;
  o.chunk_blocks = kBlocks;
  o.max_memory = 2 * kBlocks * 256;  // room for a second chunk
  o.reserve = 2;
  o.send_buffers = 4;
  o.reclaim_after = MonoDelta();
  o.grow_off_reactor = true;
  srq_ = SrqContext::Create(dev_.get(), pd_.get(), o, loop_, std::make_shared<int>(0)).value();
  CountingClient client;
  auto [ours, peer] = Connected(&client);
  (void)ours;
  dev_->FailRegistrations(1);  // the growth's chunk
  // The limit is a quarter of 16 posted: 4. Thirteen messages leave 3 posted (the client keeps
  // their blocks): the limit event fires and a growth thread starts.
  ASSERT_EQ(13u, SendFrom(peer, 13).size());
  const MonoTime deadline = MonoTime::Now() + MonoDelta::FromSeconds(10);  // bounds a failure
  while (srq_->stats().failed_growths.load() == 0 && MonoTime::Now() < deadline) {
    ev_run(loop_, EVRUN_NOWAIT);
  }
  ASSERT_EQ(1u, srq_->stats().failed_growths.load());
  ASSERT_EQ(1u, srq_->stats().limit_events.load());
  EXPECT_EQ(13, client.receives);
  // The connection gives its blocks back; then drains the pool below the limit again.
  for (uint32_t block : client.blocks) ASSERT_TRUE(srq_->Repost(block).ok());
  dev_->FailRegistrations(1);  // the second growth fails too: only the event counts
  ASSERT_EQ(15u, SendFrom(peer, 15).size());
  // Until the second growth's thread is done too: it uses the device this test then destroys.
  while ((srq_->stats().limit_events.load() < 2 || srq_->stats().failed_growths.load() < 2) &&
         MonoTime::Now() < deadline) {
    ev_run(loop_, EVRUN_NOWAIT);
  }
  EXPECT_EQ(2u, srq_->stats().limit_events.load());
  EXPECT_EQ(2u, srq_->stats().failed_growths.load());
}

}  // namespace
}  // namespace rrpc::rdma
