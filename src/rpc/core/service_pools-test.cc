// Named pools, method concurrency limits, the adaptive limit and the admission slots of
// long-lived calls, end to end over real sockets. Handlers are held at a gate so pools fill
// deterministically; limits are fixed (adaptive min = max) where a test needs an exact refusal.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rpc/core/messenger_internals.h"
#include "rpc/core/service_pool.h"
#include "rpc/testing/rpc-test-util.h"
#include "rpc/testing/rtest_background.rrpc.h"

namespace rrpc::rpc {
namespace {

class ServicePoolsTest : public RpcTestBase {
 protected:
  // An async Echo held by the fixture.
  struct PendingEcho {
    rtest::EchoRequestPB req;
    rtest::EchoResponsePB resp;
    RpcController ctl;
    CountDownLatch done{1};
  };
  PendingEcho* SendEcho() {
    auto call = std::make_unique<PendingEcho>();
    call->req.set_data("x");
    call->ctl.set_timeout(MonoDelta::FromSeconds(60));
    PendingEcho* raw = call.get();
    Proxy().EchoAsync(raw->req, &raw->resp, &raw->ctl, [raw] { raw->done.CountDown(); });
    echoes_.push_back(std::move(call));
    return raw;
  }
  static bool Finished(PendingEcho* c) { return c->done.WaitFor(MonoDelta::FromSeconds(60)); }
  static void ExpectTooBusy(PendingEcho* c, const std::string& why) {
    ASSERT_TRUE(Finished(c));
    ASSERT_NE(nullptr, c->ctl.error_response()) << c->ctl.status().ToString();
    EXPECT_EQ(ErrorStatusPB::ERROR_SERVER_TOO_BUSY, c->ctl.error_response()->code());
    EXPECT_TRUE(c->ctl.IsRetriable());
    EXPECT_NE(std::string::npos, c->ctl.status().ToString().find(why))
        << c->ctl.status().ToString();
  }
  Status CallAdd() {
    rtest::AddRequestPB req;
    req.set_a(1);
    req.set_b(2);
    rtest::AddResponsePB resp;
    RpcController ctl;
    ctl.set_timeout(MonoDelta::FromSeconds(60));
    return Proxy().Add(req, &resp, &ctl);
  }
  ServicePool* pool() { return MessengerInternals::service_pool(*server_); }

  std::vector<std::unique_ptr<PendingEcho>> echoes_;
};

TEST_F(ServicePoolsTest, NamedPoolServesItsMethodWhileTheDefaultPoolIsFull) {
  MessengerOptions o;
  o.num_workers = 1;
  o.service_queue_length = 1;
  ServicePoolConfig ops;
  ops.name = "ops";
  ops.num_workers = 1;
  o.service_pools.push_back(ops);
  StartServer(o, 0, {},
              [](TestEchoService* s) { ASSERT_TRUE(s->SetMethodPool("Add", "ops").ok()); });
  StartClient();
  BlockEchoes();
  SendEcho();
  ASSERT_TRUE(gate_.WaitForEntered(1));
  SendEcho();  // queued: the default pool's one worker and one queue slot are taken
  ASSERT_TRUE(WaitForCondition([&] { return pool()->queue_size() == 1; }));
  ExpectTooBusy(SendEcho(), "service queue");
  // Add runs on the "ops" pool's worker meanwhile.
  EXPECT_TRUE(CallAdd().ok());
  gate_.Open();
  for (auto& e : echoes_) ASSERT_TRUE(Finished(e.get()));
  std::vector<ServicePoolInfo> pools = pool()->PoolSnapshots();
  ASSERT_EQ(2u, pools.size());
  EXPECT_EQ("default", pools[0].name);
  EXPECT_EQ(1, pools[0].overflows);
  EXPECT_EQ("ops", pools[1].name);
  // The worker releases the slot after its handler returns, which may be just after the client
  // has the answer.
  EXPECT_TRUE(WaitForCondition([&] { return pool()->PoolSnapshots()[1].in_flight == 0; }))
      << "Add's slot is released once it ran";
}

TEST_F(ServicePoolsTest, RegistrationFailsForAPoolThatDoesNotExist) {
  MessengerOptions o;
  auto built = MessengerBuilder(o).Build();
  ASSERT_TRUE(built.ok());
  std::shared_ptr<Messenger> m = std::move(built).value();
  auto service = std::make_unique<TestEchoService>();
  service->SetPool("nowhere");
  Status s = m->RegisterService(std::move(service));
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(std::string::npos, s.ToString().find("nowhere"));
  m->Shutdown();
}

TEST_F(ServicePoolsTest, MethodLimitRefusesCallsBeyondItAndFreesSlotsAsCallsEnd) {
  MessengerOptions o;
  o.num_workers = 4;
  StartServer(o, 0, {},
              [](TestEchoService* s) { ASSERT_TRUE(s->SetMaxConcurrency("Echo", 2).ok()); });
  StartClient();
  BlockEchoes();
  PendingEcho* a = SendEcho();
  PendingEcho* b = SendEcho();
  ASSERT_TRUE(gate_.WaitForEntered(2));
  ExpectTooBusy(SendEcho(), "limit of 2 calls");
  EXPECT_TRUE(CallAdd().ok()) << "other methods are not limited";
  gate_.Open();
  ASSERT_TRUE(Finished(a));
  ASSERT_TRUE(Finished(b));
  EXPECT_TRUE(a->ctl.status().ok());
  // The slots go back as the workers finish, which may be just after the answers arrived.
  ASSERT_TRUE(WaitForCondition([&] { return pool()->PoolSnapshots()[0].in_flight == 0; }));
  PendingEcho* c = SendEcho();
  ASSERT_TRUE(Finished(c));
  EXPECT_TRUE(c->ctl.status().ok()) << c->ctl.status().ToString();
  EXPECT_EQ(1, pool()->PoolSnapshots()[0].method_refusals);
}

TEST_F(ServicePoolsTest, AdaptiveLimitRefusesCallsBeyondThePoolsLimit) {
  MessengerOptions o;
  o.num_workers = 1;
  o.adaptive_limit.enabled = true;
  o.adaptive_limit.min_limit = 2;  // one running, one queued
  o.adaptive_limit.max_limit = 2;
  StartServer(o);
  StartClient();
  BlockEchoes();
  SendEcho();
  ASSERT_TRUE(gate_.WaitForEntered(1));
  SendEcho();
  ASSERT_TRUE(WaitForCondition([&] { return pool()->queue_size() == 1; }));
  ExpectTooBusy(SendEcho(), "adaptive limit of 2");
  gate_.Open();
  for (auto& e : echoes_) ASSERT_TRUE(Finished(e.get()));
  EXPECT_TRUE(WaitForCondition([&] { return pool()->PoolSnapshots()[0].in_flight == 0; }));
  ServicePoolInfo s = pool()->PoolSnapshots()[0];
  EXPECT_EQ(2, s.limit);
  EXPECT_EQ(1, s.limit_refusals);
  EXPECT_EQ(0, s.in_flight);
}

TEST_F(ServicePoolsTest, LongLivedCallHoldsItsSlotUntilReleased) {
  MessengerOptions o;
  StartServer(o, 0, {},
              [](TestEchoService* s) { ASSERT_TRUE(s->SetMaxConcurrency("Echo", 1).ok()); });
  StartClient();
  const RpcMethodInfo* echo = pool()->FindService("rrpc.rtest.EchoService")->FindMethod("Echo");
  ASSERT_NE(nullptr, echo);
  std::string why;
  ServicePool::Admission slot = pool()->TryAdmit(echo, &why);
  ASSERT_TRUE(slot.admitted());
  ServicePool::Admission second = pool()->TryAdmit(echo, &why);
  EXPECT_FALSE(second.admitted());
  EXPECT_NE(std::string::npos, why.find("limit of 1")) << why;
  ExpectTooBusy(SendEcho(), "limit of 1");
  ServicePool::Admission moved = std::move(slot);
  // A moved-from admission holds nothing: that is what is checked here.
  EXPECT_FALSE(slot.admitted());  // NOLINT(bugprone-use-after-move)
  moved.Reset();                  // the stream closed
  PendingEcho* e = SendEcho();
  ASSERT_TRUE(Finished(e));
  EXPECT_TRUE(e->ctl.status().ok()) << e->ctl.status().ToString();
  // A method without limits in the plain default pool is always admitted, holding nothing.
  const RpcMethodInfo* add = pool()->FindService("rrpc.rtest.EchoService")->FindMethod("Add");
  EXPECT_TRUE(pool()->TryAdmit(add, nullptr).admitted());
}

// Get (foreground) and Scan (background, by the .proto option): each records its start, then
// waits at its own gate.
class MixedWorkService final : public rtest::MixedWorkServiceIf {
 public:
  void Get(const rtest::EchoRequestPB* req, rtest::EchoResponsePB* resp,
           RpcContext* context) override {
    Record(req->data());
    (req->data() == "queued-get" ? queued_get_gate : get_gate).Pass();
    resp->set_data(req->data());
    context->RespondSuccess();
  }
  void Scan(const rtest::EchoRequestPB* req, rtest::EchoResponsePB* resp,
            RpcContext* context) override {
    Record(req->data());
    (req->data() == "late-scan" ? late_scan_gate : scan_gate).Pass();
    resp->set_data(req->data());
    context->RespondSuccess();
  }
  std::vector<std::string> started() {
    MutexLock l(mu_);
    return started_;
  }

  HandlerGate get_gate;
  HandlerGate queued_get_gate;
  HandlerGate scan_gate;
  HandlerGate late_scan_gate;

 private:
  void Record(const std::string& what) {
    MutexLock l(mu_);
    started_.push_back(what);
  }
  Mutex mu_;
  std::vector<std::string> started_ RRPC_GUARDED_BY(mu_);
};

// Two workers; background may hold one of them (share 0.25, rounded up) while foreground waits.
class PrioritiesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MessengerOptions o;
    o.name = "server";
    o.num_workers = 2;
    o.background_share = 0.25;
    server_ = MessengerBuilder(o).Build().value();
    auto service = std::make_unique<MixedWorkService>();
    service_ = service.get();
    ASSERT_TRUE(server_->RegisterService(std::move(service)).ok());
    ASSERT_TRUE(server_->Listen(Sockaddr::Loopback(0), &addr_).ok());
    client_ = MessengerBuilder("client").Build().value();
  }
  void TearDown() override {
    service_->get_gate.Open();
    service_->queued_get_gate.Open();
    service_->scan_gate.Open();
    service_->late_scan_gate.Open();
    client_->Shutdown();
    server_->Shutdown();
  }
  struct Pending {
    rtest::EchoRequestPB req;
    rtest::EchoResponsePB resp;
    RpcController ctl;
    CountDownLatch done{1};
    bool Finished() { return done.WaitFor(MonoDelta::FromSeconds(60)); }
  };
  // `timeout` sets the deadline, and so the EDF order within a class; `priority`, when set, the
  // class the caller asks for.
  Pending* Send(bool scan, const std::string& data, int timeout_s,
                std::optional<CallPriority> priority = std::nullopt) {
    auto p = std::make_unique<Pending>();
    p->req.set_data(data);
    p->ctl.set_timeout(MonoDelta::FromSeconds(timeout_s));
    if (priority.has_value()) p->ctl.set_priority(*priority);
    Pending* raw = p.get();
    rtest::MixedWorkServiceProxy proxy(client_, addr_);
    auto done = [raw] { raw->done.CountDown(); };
    if (scan) {
      proxy.ScanAsync(raw->req, &raw->resp, &raw->ctl, done);
    } else {
      proxy.GetAsync(raw->req, &raw->resp, &raw->ctl, done);
    }
    pending_.push_back(std::move(p));
    return raw;
  }
  ServicePoolInfo DefaultPool() { return server_->service_pools()[0]; }

  std::shared_ptr<Messenger> server_;
  std::shared_ptr<Messenger> client_;
  Sockaddr addr_;
  MixedWorkService* service_ = nullptr;
  std::vector<std::unique_ptr<Pending>> pending_;
};

TEST_F(PrioritiesTest, BackgroundOptionInTheProtoMakesTheMethodBackground) {
  const ServiceIf* s = server_->FindService("rrpc.rtest.MixedWorkService");
  ASSERT_NE(nullptr, s);
  EXPECT_EQ(CallPriority::kBackground, s->FindMethod("Scan")->priority);
  EXPECT_EQ(CallPriority::kForeground, s->FindMethod("Get")->priority);
  EXPECT_EQ(1u, DefaultPool().background_cap);
}

// A background flood takes every idle worker, but once foreground waits, background holds no
// more than its share: the next free worker runs the Get, though queued Scans are due earlier.
TEST_F(PrioritiesTest, BackgroundFloodLeavesForegroundTheRestOfThePool) {
  Send(true, "scan", 30);
  Send(true, "scan", 30);
  ASSERT_TRUE(service_->scan_gate.WaitForEntered(2)) << "no foreground waits: scans take all";
  Send(true, "late-scan", 30);
  Send(true, "late-scan", 30);
  Send(true, "late-scan", 30);
  ASSERT_TRUE(WaitForCondition([&] { return DefaultPool().queued_background == 3; }));
  service_->get_gate.Open();
  Pending* get = Send(false, "get", 60);  // due after every scan
  ASSERT_TRUE(WaitForCondition([&] { return DefaultPool().queued_foreground == 1; }));
  service_->scan_gate.Open();  // the two first scans end; the late ones block when they start
  ASSERT_TRUE(get->Finished());
  EXPECT_TRUE(get->ctl.status().ok()) << get->ctl.status().ToString();
  // Before the Get started, at most one late scan did (background's share); once the Get is
  // done no foreground waits, and the late scans may take every worker.
  const std::vector<std::string> started = service_->started();
  const auto get_at = std::find(started.begin(), started.end(), "get");
  ASSERT_NE(started.end(), get_at);
  EXPECT_LE(std::count(started.begin(), get_at, "late-scan"), 1);
  service_->late_scan_gate.Open();
  for (auto& p : pending_) ASSERT_TRUE(p->Finished());
}

// A foreground flood never shuts background out: while Gets wait, the first free worker takes
// the Scan (background's share is free), though every queued Get is due before it.
TEST_F(PrioritiesTest, ForegroundFloodLeavesBackgroundItsShare) {
  Send(false, "get", 30);
  Send(false, "get", 30);
  ASSERT_TRUE(service_->get_gate.WaitForEntered(2));
  for (int i = 0; i < 3; i++) Send(false, "queued-get", 30);
  ASSERT_TRUE(WaitForCondition([&] { return DefaultPool().queued_foreground == 3; }));
  service_->scan_gate.Open();
  Pending* scan = Send(true, "scan", 60);  // due after every Get
  ASSERT_TRUE(WaitForCondition([&] { return DefaultPool().queued_background == 1; }));
  service_->get_gate.Open();  // the first Gets end; queued Gets block when they start
  ASSERT_TRUE(scan->Finished());
  EXPECT_TRUE(scan->ctl.status().ok()) << scan->ctl.status().ToString();
  // The scan ran while Gets due before it still waited: both workers are now held by queued
  // Gets, at most two of the three.
  EXPECT_GE(DefaultPool().queued_foreground, 1u);
  service_->queued_get_gate.Open();
  for (auto& p : pending_) ASSERT_TRUE(p->Finished());
}

// The caller's class overrides the method's (RpcController::set_priority, header field 50): a
// Get sent as background waits in the background lane, a Scan sent as foreground in the
// foreground one; and the background lane's share comes back however a call got into it.
TEST_F(PrioritiesTest, CallersPriorityOverridesTheMethods) {
  Send(false, "get", 30);
  Send(false, "get", 30);
  ASSERT_TRUE(service_->get_gate.WaitForEntered(2));  // both workers held
  Send(false, "queued-get", 30, CallPriority::kBackground);
  ASSERT_TRUE(WaitForCondition([&] { return DefaultPool().queued_background == 1; }));
  EXPECT_EQ(0u, DefaultPool().queued_foreground);
  service_->scan_gate.Open();
  Send(true, "scan", 30, CallPriority::kForeground);
  ASSERT_TRUE(WaitForCondition([&] { return DefaultPool().queued_foreground == 1; }));
  EXPECT_EQ(1u, DefaultPool().queued_background);
  service_->get_gate.Open();
  service_->queued_get_gate.Open();
  for (auto& p : pending_) {
    ASSERT_TRUE(p->Finished());
    EXPECT_TRUE(p->ctl.status().ok()) << p->ctl.status().ToString();
  }
  EXPECT_TRUE(WaitForCondition([&] { return DefaultPool().background_running == 0; }));
  EXPECT_EQ(0u, DefaultPool().queued_background + DefaultPool().queued_foreground);
}

}  // namespace
}  // namespace rrpc::rpc
