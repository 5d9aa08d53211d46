// Service queue behaviour seen end to end: a full queue refuses the call with the latest
// deadline, expired calls are answered without running, and queued calls run
// earliest-deadline-first. One worker is held in a handler (HandlerGate) so the queue fills
// deterministically; deadlines are tens of seconds apart, far beyond any scheduling delay.
#include "rpc/core/service_pool.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "rpc/core/messenger_internals.h"
#include "rpc/observe/rpc_metrics.h"
#include "rpc/testing/rpc-test-util.h"
#include "rrpc/util/mutex.h"

namespace rrpc::rpc {
namespace {

class ServicePoolTest : public RpcTestBase {
 protected:
  static constexpr size_t kQueueLength = 3;

  void SetUp() override {
    MessengerOptions o;
    o.num_workers = 1;
    o.service_queue_length = kQueueLength;
    StartServer(o);
    StartClient();
    // Every Echo records its data in run order, then waits at the gate.
    service_->set_echo_hook([this](const rtest::EchoRequestPB& req, RpcContext*) {
      {
        MutexLock l(mu_);
        ran_.push_back(req.data());
      }
      gate_.Pass();
    });
  }

  // An async Echo whose data is `name`, with a deadline `timeout` from now.
  struct PendingCall {
    rtest::EchoRequestPB req;
    rtest::EchoResponsePB resp;
    RpcController ctl;
    CountDownLatch done{1};
  };
  PendingCall* Send(const std::string& name, MonoDelta timeout) {
    auto call = std::make_unique<PendingCall>();
    call->req.set_data(name);
    if (timeout != MonoDelta::Max()) call->ctl.set_timeout(timeout);
    PendingCall* raw = call.get();
    Proxy().EchoAsync(raw->req, &raw->resp, &raw->ctl, [raw] { raw->done.CountDown(); });
    calls_.push_back(std::move(call));
    return raw;
  }
  static bool Finished(PendingCall* c) { return c->done.WaitFor(MonoDelta::FromSeconds(60)); }

  // Holds the only worker in a handler with a call that has all the time in the world.
  PendingCall* OccupyWorker() {
    PendingCall* c = Send("occupier", MonoDelta::FromSeconds(3600));
    EXPECT_TRUE(gate_.WaitForEntered(1));
    return c;
  }
  bool QueueHolds(size_t n) {
    return WaitForCondition(
        [&] { return MessengerInternals::service_pool(*server_)->queue_size() == n; });
  }
  std::vector<std::string> ran() {
    MutexLock l(mu_);
    return ran_;
  }
  MessengerMetrics* metrics() { return MessengerInternals::metrics(*server_); }

  Mutex mu_;
  std::vector<std::string> ran_ RRPC_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<PendingCall>> calls_;
};

TEST_F(ServicePoolTest, FullQueueRefusesTheCallWithTheLatestDeadline) {
  PendingCall* occupier = OccupyWorker();
  PendingCall* a = Send("a", MonoDelta::FromSeconds(1000));
  PendingCall* b = Send("b", MonoDelta::FromSeconds(1100));
  PendingCall* c = Send("c", MonoDelta::FromSeconds(1200));
  ASSERT_TRUE(QueueHolds(kQueueLength));

  // Due after everything queued: refused at once, while the worker is still held.
  PendingCall* late = Send("late", MonoDelta::FromSeconds(2000));
  ASSERT_TRUE(Finished(late));
  EXPECT_TRUE(late->ctl.status().IsServiceUnavailable()) << late->ctl.status().ToString();
  ASSERT_NE(nullptr, late->ctl.error_response());
  EXPECT_EQ(ErrorStatusPB::ERROR_SERVER_TOO_BUSY, late->ctl.error_response()->code());
  EXPECT_TRUE(late->ctl.IsRetriable());
  // A call with no deadline at all is the latest of all: refused too.
  PendingCall* forever = Send("forever", MonoDelta::Max());
  ASSERT_TRUE(Finished(forever));
  EXPECT_TRUE(forever->ctl.status().IsServiceUnavailable()) << forever->ctl.status().ToString();
  EXPECT_EQ(kQueueLength, MessengerInternals::service_pool(*server_)->queue_size());
  EXPECT_EQ(2u, metrics()->service_queue_overflows->value());

  gate_.Open();
  for (PendingCall* p : {occupier, a, b, c}) {
    ASSERT_TRUE(Finished(p));
    EXPECT_TRUE(p->ctl.status().ok()) << p->req.data() << ": " << p->ctl.status().ToString();
    EXPECT_EQ(p->req.data(), p->resp.data());
  }
  EXPECT_EQ((std::vector<std::string>{"occupier", "a", "b", "c"}), ran());
}

TEST_F(ServicePoolTest, EarlierDeadlineEvictsTheLatestQueuedCall) {
  PendingCall* occupier = OccupyWorker();
  PendingCall* a = Send("a", MonoDelta::FromSeconds(1000));
  PendingCall* c = Send("c", MonoDelta::FromSeconds(1200));  // the latest
  PendingCall* b = Send("b", MonoDelta::FromSeconds(1100));
  ASSERT_TRUE(QueueHolds(kQueueLength));

  PendingCall* urgent = Send("urgent", MonoDelta::FromSeconds(500));
  // `c` is out, refused as too busy, while the worker is still held; `urgent` took its place.
  ASSERT_TRUE(Finished(c));
  EXPECT_TRUE(c->ctl.status().IsServiceUnavailable()) << c->ctl.status().ToString();
  ASSERT_NE(nullptr, c->ctl.error_response());
  EXPECT_EQ(ErrorStatusPB::ERROR_SERVER_TOO_BUSY, c->ctl.error_response()->code());
  EXPECT_TRUE(c->ctl.IsRetriable());
  EXPECT_EQ(kQueueLength, MessengerInternals::service_pool(*server_)->queue_size());
  EXPECT_EQ(1u, metrics()->service_queue_overflows->value());

  gate_.Open();
  for (PendingCall* p : {occupier, a, b, urgent}) {
    ASSERT_TRUE(Finished(p));
    EXPECT_TRUE(p->ctl.status().ok()) << p->req.data() << ": " << p->ctl.status().ToString();
  }
  EXPECT_EQ((std::vector<std::string>{"occupier", "urgent", "a", "b"}), ran());
}

TEST_F(ServicePoolTest, QueuedCallsRunEarliestDeadlineFirst) {
  PendingCall* occupier = OccupyWorker();
  // Sent latest-first, so arrival order is the reverse of deadline order.
  PendingCall* none = Send("no-deadline", MonoDelta::Max());
  PendingCall* late = Send("late", MonoDelta::FromSeconds(3000));
  PendingCall* early = Send("early", MonoDelta::FromSeconds(1000));
  ASSERT_TRUE(QueueHolds(3));
  gate_.Open();
  for (PendingCall* p : {occupier, none, late, early}) {
    ASSERT_TRUE(Finished(p));
    EXPECT_TRUE(p->ctl.status().ok()) << p->req.data() << ": " << p->ctl.status().ToString();
  }
  EXPECT_EQ((std::vector<std::string>{"occupier", "early", "late", "no-deadline"}), ran());
}

TEST_F(ServicePoolTest, CallsExpiringInTheQueueAreAnsweredWithoutRunningTheHandler) {
  PendingCall* occupier = OccupyWorker();
  constexpr int kShort = kQueueLength - 1;  // leaves room for one more
  std::vector<PendingCall*> shorts;
  for (int i = 0; i < kShort; i++) {
    shorts.push_back(Send("short-" + std::to_string(i), MonoDelta::FromMilliseconds(100)));
  }
  ASSERT_TRUE(QueueHolds(kShort));
  // Every short call arrived before now, so its 100 ms budget is spent by now + 100 ms.
  const MonoTime all_expired = MonoTime::Now() + MonoDelta::FromMilliseconds(101);
  for (PendingCall* p : shorts) {
    ASSERT_TRUE(Finished(p));  // the client's own timer gives up first
    EXPECT_TRUE(p->ctl.status().IsTimedOut()) << p->ctl.status().ToString();
  }
  while (MonoTime::Now() <= all_expired) SleepFor(MonoDelta::FromMilliseconds(5));
  // A call with time to spare, queued behind the expired ones.
  PendingCall* patient = Send("patient", MonoDelta::FromSeconds(600));
  ASSERT_TRUE(QueueHolds(kShort + 1));

  gate_.Open();
  ASSERT_TRUE(Finished(occupier));
  ASSERT_TRUE(Finished(patient));
  EXPECT_TRUE(patient->ctl.status().ok()) << patient->ctl.status().ToString();
  // The worker went through the expired calls before `patient`, without running them.
  EXPECT_EQ((std::vector<std::string>{"occupier", "patient"}), ran());
  EXPECT_EQ(2, service_->calls());
  EXPECT_EQ(static_cast<uint64_t>(kShort), metrics()->calls_expired_in_queue->value());
}

}  // namespace
}  // namespace rrpc::rpc
