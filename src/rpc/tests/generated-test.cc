// The code protoc-gen-rrpc generates for rtest.proto, end to end: both services' bases and
// proxies, sync and async, routed by service name on one server.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <vector>

#include "rpc/core/reactor.h"
#include "rpc/testing/rpc-test-util.h"
#include "rpc/testing/rtest_inline.rrpc.h"
#include "rrpc/rpc/service_if.h"

namespace rrpc::rpc {
namespace {

// Records whether each handler ran on a reactor thread; Sub subtracts.
class TestInlineEchoService : public rtest::InlineEchoServiceIf {
 public:
  void Echo(const rtest::EchoRequestPB* req, rtest::EchoResponsePB* resp,
            RpcContext* context) override {
    echo_on_reactor_ = Reactor::Current() != nullptr;
    resp->set_data(req->data());
    context->RespondSuccess();
  }
  void Add(const rtest::AddRequestPB* req, rtest::AddResponsePB* resp,
           RpcContext* context) override {
    add_on_reactor_ = Reactor::Current() != nullptr;
    resp->set_sum(req->a() + req->b());
    context->RespondSuccess();
  }
  void Sub(const rtest::AddRequestPB* req, rtest::AddResponsePB* resp,
           RpcContext* context) override {
    resp->set_sum(req->a() - req->b());
    context->RespondSuccess();
  }
  std::atomic<bool> echo_on_reactor_{false};
  std::atomic<bool> add_on_reactor_{true};
};

// Adds with an offset, so a response shows which service answered.
class TestCalculatorService : public rtest::CalculatorServiceIf {
 public:
  static constexpr int64_t kOffset = 1000000;
  void Add(const rtest::AddRequestPB* req, rtest::AddResponsePB* resp,
           RpcContext* context) override {
    calls_.fetch_add(1);
    resp->set_sum(req->a() + req->b() + kOffset);
    context->RespondSuccess();
  }
  int calls() const { return calls_.load(); }

 private:
  std::atomic<int> calls_{0};
};

class GeneratedCodeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Room in the queue for every call the async test has in flight at once.
    auto server = MessengerBuilder("server").set_service_queue_length(1000).Build();
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server).value();
    auto echo = std::make_unique<TestEchoService>();
    echo_ = echo.get();
    auto calc = std::make_unique<TestCalculatorService>();
    calc_ = calc.get();
    ASSERT_TRUE(server_->RegisterService(std::move(echo)).ok());
    ASSERT_TRUE(server_->RegisterService(std::move(calc)).ok());
    ASSERT_TRUE(server_->Listen(Sockaddr::Loopback(0), &addr_).ok());
    auto client = MessengerBuilder("client").Build();
    ASSERT_TRUE(client.ok());
    client_ = std::move(client).value();
  }
  void TearDown() override {
    if (client_) client_->Shutdown();
    if (server_) server_->Shutdown();
  }

  std::shared_ptr<Messenger> server_;
  std::shared_ptr<Messenger> client_;
  TestEchoService* echo_ = nullptr;
  TestCalculatorService* calc_ = nullptr;
  Sockaddr addr_;
};

TEST_F(GeneratedCodeTest, ServicesAreNamedByTheirFullProtobufName) {
  EXPECT_EQ("rrpc.rtest.EchoService", rtest::EchoServiceIf::static_service_name());
  EXPECT_EQ("rrpc.rtest.CalculatorService", rtest::CalculatorServiceIf::static_service_name());
  EXPECT_EQ("rrpc.rtest.EchoService", echo_->service_name());
  EXPECT_EQ("rrpc.rtest.CalculatorService", calc_->service_name());
  rtest::EchoServiceProxy echo_proxy(client_, addr_);
  rtest::CalculatorServiceProxy calc_proxy(client_, addr_);
  EXPECT_EQ("rrpc.rtest.EchoService", echo_proxy.service_name());
  EXPECT_EQ("rrpc.rtest.CalculatorService", calc_proxy.service_name());
  EXPECT_EQ(addr_, echo_proxy.remote());
}

TEST_F(GeneratedCodeTest, MethodTableListsEveryMethodWithItsMessageTypes) {
  const RpcMethodInfo* echo = echo_->FindMethod("Echo");
  ASSERT_NE(nullptr, echo);
  EXPECT_EQ("Echo", echo->method_name);
  EXPECT_EQ("rrpc.rtest.EchoRequestPB", echo->request_prototype->GetTypeName());
  EXPECT_EQ("rrpc.rtest.EchoResponsePB", echo->response_prototype->GetTypeName());
  EXPECT_TRUE(static_cast<bool>(echo->handler));
  const RpcMethodInfo* add = echo_->FindMethod("Add");
  ASSERT_NE(nullptr, add);
  EXPECT_EQ("rrpc.rtest.AddRequestPB", add->request_prototype->GetTypeName());
  EXPECT_EQ("rrpc.rtest.AddResponsePB", add->response_prototype->GetTypeName());
  // option (rrpc.idempotent) is on Echo only.
  EXPECT_TRUE(echo->idempotent);
  EXPECT_FALSE(add->idempotent);
  EXPECT_EQ(nullptr, echo_->FindMethod("Nope"));
  EXPECT_EQ(nullptr, echo_->FindMethod("echo"));  // names are case-sensitive
  ASSERT_NE(nullptr, calc_->FindMethod("Add"));
  EXPECT_EQ(nullptr, calc_->FindMethod("Echo"));
}

TEST_F(GeneratedCodeTest, EchoServiceSyncMethodsWork) {
  rtest::EchoServiceProxy proxy(client_, addr_);
  rtest::EchoRequestPB req;
  req.set_data("sync echo");
  rtest::EchoResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(60));
  ASSERT_TRUE(proxy.Echo(req, &resp, &ctl).ok()) << ctl.status().ToString();
  EXPECT_EQ("sync echo", resp.data());

  rtest::AddRequestPB add;
  add.set_a(40);
  add.set_b(2);
  rtest::AddResponsePB sum;
  RpcController ctl2;
  ctl2.set_timeout(MonoDelta::FromSeconds(60));
  ASSERT_TRUE(proxy.Add(add, &sum, &ctl2).ok()) << ctl2.status().ToString();
  EXPECT_EQ(42, sum.sum());
  EXPECT_EQ(2, echo_->calls());
  EXPECT_EQ(0, calc_->calls());
}

TEST_F(GeneratedCodeTest, CalculatorServiceSyncMethodWorks) {
  rtest::CalculatorServiceProxy proxy(client_, addr_);
  rtest::AddRequestPB add;
  add.set_a(-5);
  add.set_b(3);
  rtest::AddResponsePB sum;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(60));
  ASSERT_TRUE(proxy.Add(add, &sum, &ctl).ok()) << ctl.status().ToString();
  // Routed to the calculator, not to EchoService's Add of the same name.
  EXPECT_EQ(-2 + TestCalculatorService::kOffset, sum.sum());
  EXPECT_EQ(1, calc_->calls());
  EXPECT_EQ(0, echo_->calls());
}

TEST_F(GeneratedCodeTest, AsyncMethodsOfBothServicesWork) {
  rtest::EchoServiceProxy echo(client_, addr_);
  rtest::CalculatorServiceProxy calc(client_, addr_);
  constexpr int kEach = 100;
  std::vector<rtest::EchoRequestPB> echo_reqs(kEach);
  std::vector<rtest::EchoResponsePB> echo_resps(kEach);
  std::vector<rtest::AddRequestPB> add_reqs(2 * kEach);
  std::vector<rtest::AddResponsePB> add_resps(2 * kEach);
  std::vector<RpcController> ctls(3 * kEach);
  std::atomic<int> callbacks{0};
  CountDownLatch done(3 * kEach);
  auto cb = [&] {
    callbacks++;
    done.CountDown();
  };
  for (int i = 0; i < kEach; i++) {
    echo_reqs[i].set_data("async " + std::to_string(i));
    ctls[i].set_timeout(MonoDelta::FromSeconds(60));
    echo.EchoAsync(echo_reqs[i], &echo_resps[i], &ctls[i], cb);
    add_reqs[i].set_a(i);
    add_reqs[i].set_b(i);
    ctls[kEach + i].set_timeout(MonoDelta::FromSeconds(60));
    echo.AddAsync(add_reqs[i], &add_resps[i], &ctls[kEach + i], cb);
    add_reqs[kEach + i].set_a(i);
    add_reqs[kEach + i].set_b(1);
    ctls[2 * kEach + i].set_timeout(MonoDelta::FromSeconds(60));
    calc.AddAsync(add_reqs[kEach + i], &add_resps[kEach + i], &ctls[2 * kEach + i], cb);
  }
  ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(120)));
  EXPECT_EQ(3 * kEach, callbacks.load());
  for (int i = 0; i < kEach; i++) {
    ASSERT_TRUE(ctls[i].status().ok()) << ctls[i].status().ToString();
    EXPECT_EQ("async " + std::to_string(i), echo_resps[i].data());
    ASSERT_TRUE(ctls[kEach + i].status().ok()) << ctls[kEach + i].status().ToString();
    EXPECT_EQ(2 * i, add_resps[i].sum());
    ASSERT_TRUE(ctls[2 * kEach + i].status().ok()) << ctls[2 * kEach + i].status().ToString();
    EXPECT_EQ(i + 1 + TestCalculatorService::kOffset, add_resps[kEach + i].sum());
  }
  EXPECT_EQ(2 * kEach, echo_->calls());
  EXPECT_EQ(kEach, calc_->calls());
}

TEST_F(GeneratedCodeTest, ProxyToAServerWithoutTheServiceGetsNoSuchService) {
  // A server that only has EchoService.
  auto other = MessengerBuilder("echo-only").Build();
  ASSERT_TRUE(other.ok());
  std::shared_ptr<Messenger> echo_only = std::move(other).value();
  ASSERT_TRUE(echo_only->RegisterService(std::make_unique<TestEchoService>()).ok());
  Sockaddr addr;
  ASSERT_TRUE(echo_only->Listen(Sockaddr::Loopback(0), &addr).ok());
  rtest::CalculatorServiceProxy proxy(client_, addr);
  rtest::AddRequestPB add;
  add.set_a(1);
  add.set_b(1);
  rtest::AddResponsePB sum;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(60));
  Status s = proxy.Add(add, &sum, &ctl);
  EXPECT_TRUE(s.IsNotFound()) << s.ToString();
  ASSERT_NE(nullptr, ctl.error_response());
  EXPECT_EQ(ErrorStatusPB::ERROR_NO_SUCH_SERVICE, ctl.error_response()->code());
  echo_only->Shutdown();
}

TEST_F(GeneratedCodeTest, ControllerResetAllowsReuseForTheNextCall) {
  rtest::EchoServiceProxy proxy(client_, addr_);
  RpcController ctl;
  for (int i = 0; i < 5; i++) {
    rtest::EchoRequestPB req;
    req.set_data(std::to_string(i));
    rtest::EchoResponsePB resp;
    ctl.Reset();
    ctl.set_timeout(MonoDelta::FromSeconds(60));
    ASSERT_TRUE(proxy.Echo(req, &resp, &ctl).ok()) << ctl.status().ToString();
    EXPECT_EQ(std::to_string(i), resp.data());
  }
}

TEST(GeneratedInlineOptionTest, InlineHandlerOptionMarksExactlyThoseMethods) {
  TestInlineEchoService service;
  EXPECT_TRUE(service.FindMethod("Echo")->run_inline);
  EXPECT_FALSE(service.FindMethod("Add")->run_inline);
  EXPECT_FALSE(service.FindMethod("Sub")->run_inline);
}

TEST(GeneratedInlineOptionTest, InlineMethodRunsOnTheReactorOthersOnWorkers) {
  auto server = MessengerBuilder(MessengerOptions{}).Build();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto owned = std::make_unique<TestInlineEchoService>();
  TestInlineEchoService* service = owned.get();
  ASSERT_TRUE((*server)->RegisterService(std::move(owned)).ok());
  Sockaddr addr;
  ASSERT_TRUE((*server)->Listen(Sockaddr::Loopback(0), &addr).ok());
  auto client = MessengerBuilder(MessengerOptions{}).Build();
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  rtest::InlineEchoServiceProxy proxy(*client, addr);
  rtest::EchoRequestPB req;
  req.set_data("inline");
  rtest::EchoResponsePB resp;
  RpcController ctl;
  ASSERT_TRUE(proxy.Echo(req, &resp, &ctl).ok()) << ctl.status().ToString();
  EXPECT_EQ("inline", resp.data());
  rtest::AddRequestPB add;
  add.set_a(5);
  add.set_b(3);
  rtest::AddResponsePB sum;
  ctl.Reset();
  ASSERT_TRUE(proxy.Add(add, &sum, &ctl).ok()) << ctl.status().ToString();
  EXPECT_EQ(8, sum.sum());
  EXPECT_TRUE(service->echo_on_reactor_.load());
  EXPECT_FALSE(service->add_on_reactor_.load());
  (*client)->Shutdown();
  (*server)->Shutdown();
}

}  // namespace
}  // namespace rrpc::rpc
