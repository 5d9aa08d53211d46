// AsyncEventRouter: a private-RQ QP's fatal event reaches the connection whose endpoint made the
// QP (its context pointer) and only it; a device fatal reaches every connection of that device
// and none of another (finding 5 of issue 27).
#include "rpc/rdma/async_events.h"

#include <ev.h>
#include <glog/logging.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

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

// A device whose async event fd only fails: a pipe whose writer is gone polls "hung up" for ever.
class FailedFdContext final : public Context {
 public:
  FailedFdContext() {
    int fds[2];
    CHECK_EQ(0, pipe(fds));
    read_fd_ = fds[0];
    close(fds[1]);
  }
  ~FailedFdContext() override { close(read_fd_); }
  const std::string& device_name() const override { return name_; }
  PortInfo port() const override { return PortInfo(); }
  Result<std::unique_ptr<ProtectionDomain>> AllocPd() override {
    return Status::NotSupported("no device");
  }
  Result<std::unique_ptr<CompletionChannel>> CreateChannel() override {
    return Status::NotSupported("no device");
  }
  Result<std::unique_ptr<CompletionQueue>> CreateCq(int, CompletionChannel*) override {
    return Status::NotSupported("no device");
  }
  int async_fd() const override { return read_fd_; }
  bool NextAsyncEvent(AsyncEvent*) override {
    reads_.fetch_add(1);
    return false;
  }
  int reads() const { return reads_.load(); }

 private:
  const std::string name_ = "failed-fd";
  int read_fd_ = -1;
  std::atomic<int> reads_{0};
};

TEST(DeviceEventWatcherTest, AFailedEventFdIsReportedOnceAsTheDevicesDeathAndNotPolledAgain) {
  FailedFdContext ctx;
  std::mutex mu;
  std::vector<AsyncEventType> seen;
  auto watcher = DeviceEventWatcher::Start(&ctx, [&](const AsyncEvent& e) {
    std::lock_guard<std::mutex> l(mu);
    seen.push_back(e.type);
  });
  ASSERT_TRUE(watcher.ok()) << watcher.status().ToString();
  const MonoTime deadline = MonoTime::Now() + MonoDelta::FromSeconds(30);
  for (;;) {
    {
      std::lock_guard<std::mutex> l(mu);
      if (!seen.empty()) break;
    }
    ASSERT_LT(MonoTime::Now(), deadline)
        << "the failed fd was never reported; reads: " << ctx.reads();
    SleepFor(MonoDelta::FromMilliseconds(1));
  }
  watcher->reset();  // joins: the thread was waiting for its stop, not spinning on the fd
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], AsyncEventType::kDeviceFatal);
  // Once before the first wait; none after the fd failed.
  EXPECT_EQ(ctx.reads(), 1);
}

}  // namespace
}  // namespace rrpc::rdma
