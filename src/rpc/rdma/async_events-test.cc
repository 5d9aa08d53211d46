// AsyncEventRouter: a private-RQ QP's fatal event reaches the connection whose endpoint made the
// QP (its context pointer) and only it; a device fatal reaches every connection of that device
// and none of another (finding 5 of issue 27).
#include "rpc/rdma/async_events.h"

#include <ev.h>
#include <gtest/gtest.h>

#include <memory>

#include "rpc/rdma/rdma_endpoint.h"
#include "rpc/rdma/soft/soft_device.h"
#include "rrpc/util/monotime.h"

namespace rrpc::rdma {
namespace {

EndpointOptions Small() {
  EndpointOptions o;
  o.buffer_size = 256;
  o.receive_buffers = 4;
  o.send_buffers = 4;
  o.spare_receive_buffers = 0;
  return o;
}

class AsyncEventRouterTest : public testing::Test {
 protected:
  struct Registered {
    std::unique_ptr<RdmaEndpoint> ep;
    AsyncEventRouter::Target target;
    ev_async wake;
  };
  void SetUp() override {
    loop_ = ev_loop_new(EVFLAG_AUTO);
    dev_ = OpenSoftDevice().value();
    pd_ = dev_->AllocPd().value();
    other_dev_ = OpenSoftDevice().value();
    other_pd_ = other_dev_->AllocPd().value();
  }
  void TearDown() override {
    for (auto* r : {&a_, &b_, &c_}) {
      if (r->ep == nullptr) continue;  // not made by this test (its watcher never initialized)
      AsyncEventRouter::Unregister(r->ep.get());
      ev_async_stop(loop_, &r->wake);
      r->ep.reset();
    }
    ev_loop_destroy(loop_);
  }
  void Make(Registered* r, SoftDevice* dev, ProtectionDomain* pd) {
    r->ep = RdmaEndpoint::Create(dev, pd, Small()).value();
    r->target.ctx = dev;
    r->target.loop = loop_;
    r->target.wake = &r->wake;
    ev_async_init(&r->wake, [](struct ev_loop*, ev_async*, int) {});
    ev_async_start(loop_, &r->wake);
    AsyncEventRouter::Register(r->ep.get(), &r->target);
  }
  // Drains `dev` until `done` (which reads a_'s flags, under its lock) or 30 s: the soft device
  // posts a QP's event once the QP's completions are out.
  template <typename F>
  bool DrainUntil(SoftDevice* dev, F done) {
    const MonoTime deadline = MonoTime::Now() + MonoDelta::FromSeconds(30);
    while (MonoTime::Now() < deadline) {
      AsyncEventRouter::Drain(dev);
      std::lock_guard<std::mutex> la(a_.target.mu);
      if (done()) return true;
      SleepFor(MonoDelta::FromMicroseconds(200));
    }
    return false;
  }

  struct ev_loop* loop_ = nullptr;
  std::unique_ptr<SoftDevice> dev_, other_dev_;
  std::unique_ptr<ProtectionDomain> pd_, other_pd_;
  Registered a_, b_, c_;
};

TEST_F(AsyncEventRouterTest, AQpFatalEventReachesOnlyItsConnection) {
  Make(&a_, dev_.get(), pd_.get());
  Make(&b_, dev_.get(), pd_.get());
  dev_->InjectAsyncEvent(AsyncEventType::kQpFatal, a_.ep->qp());
  ASSERT_TRUE(DrainUntil(dev_.get(), [&] { return a_.target.qp_failed; }));
  std::lock_guard<std::mutex> lb(b_.target.mu);
  EXPECT_FALSE(b_.target.qp_failed);
  EXPECT_FALSE(b_.target.device_failed);
}

TEST_F(AsyncEventRouterTest, ADeviceFatalEventReachesEveryConnectionOfThatDeviceOnly) {
  Make(&a_, dev_.get(), pd_.get());
  Make(&b_, dev_.get(), pd_.get());
  Make(&c_, other_dev_.get(), other_pd_.get());
  dev_->InjectAsyncEvent(AsyncEventType::kDeviceFatal);
  ASSERT_TRUE(DrainUntil(dev_.get(), [&] { return a_.target.device_failed; }));
  {
    std::lock_guard<std::mutex> lb(b_.target.mu);
    EXPECT_TRUE(b_.target.device_failed);
  }
  std::lock_guard<std::mutex> lc(c_.target.mu);
  EXPECT_FALSE(c_.target.device_failed);
}

}  // namespace
}  // namespace rrpc::rdma
