// Methods marked run_inline (ServiceIf::SetRunInline): their handlers run on the server reactor
// that read the call, skip the service queue, and answer like any other handler. Each test
// observes where a handler ran, not how fast: nothing here depends on timing.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <vector>

#include "rpc/core/messenger_internals.h"
#include "rpc/core/reactor.h"
#include "rpc/core/service_pool.h"
#include "rpc/testing/rpc-test-util.h"

namespace rrpc::rpc {
namespace {

class InlineHandlerTest : public RpcTestBase {};

TEST_F(InlineHandlerTest, InlineMethodRunsOnTheReactorOthersOnWorkers) {
  StartServer({}, 0, {"Echo"});
  StartClient();
  std::atomic<int> on_reactor{0}, elsewhere{0};
  service_->set_echo_hook([&](const rtest::EchoRequestPB&, RpcContext*) {
    (Reactor::Current() != nullptr ? on_reactor : elsewhere).fetch_add(1);
  });
  rtest::EchoServiceProxy proxy = Proxy();
  for (int i = 0; i < 20; i++) {
    rtest::EchoRequestPB req;
    req.set_data("inline " + std::to_string(i));
    rtest::EchoResponsePB resp;
    RpcController ctl;
    ASSERT_TRUE(proxy.Echo(req, &resp, &ctl).ok()) << ctl.status().ToString();
    EXPECT_EQ(req.data(), resp.data());
  }
  EXPECT_EQ(20, on_reactor.load());
  EXPECT_EQ(0, elsewhere.load());
  // Add is not inline: it still goes through the queue to a worker, and still works.
  rtest::AddRequestPB add;
  add.set_a(2);
  add.set_b(40);
  rtest::AddResponsePB sum;
  RpcController ctl;
  ASSERT_TRUE(proxy.Add(add, &sum, &ctl).ok()) << ctl.status().ToString();
  EXPECT_EQ(42, sum.sum());
}

TEST_F(InlineHandlerTest, InlineMethodIsAnsweredWhileEveryWorkerIsBusyAndTheQueueFull) {
  MessengerOptions o;
  o.num_workers = 1;
  o.service_queue_length = 1;
  StartServer(o, 0, {"Add"});
  StartClient();
  BlockEchoes();  // Echo runs on the one worker and waits at gate_
  rtest::EchoServiceProxy proxy = Proxy();
  // One Echo holds the worker, one fills the queue.
  struct Pending {
    rtest::EchoRequestPB req;
    rtest::EchoResponsePB resp;
    RpcController ctl;
    CountDownLatch done{1};
  };
  std::vector<std::unique_ptr<Pending>> echoes;
  for (int i = 0; i < 2; i++) {
    auto p = std::make_unique<Pending>();
    p->req.set_data("held " + std::to_string(i));
    Pending* raw = p.get();
    proxy.EchoAsync(raw->req, &raw->resp, &raw->ctl, [raw] { raw->done.CountDown(); });
    echoes.push_back(std::move(p));
    if (i == 0) {
      ASSERT_TRUE(gate_.WaitForEntered(1));
    }
  }
  ASSERT_TRUE(WaitForCondition(
      [&] { return MessengerInternals::service_pool(*server_)->queue_size() == 1; }));
  // The inline method needs neither: it is answered at once.
  rtest::AddRequestPB add;
  add.set_a(1);
  add.set_b(2);
  rtest::AddResponsePB sum;
  RpcController ctl;
  ASSERT_TRUE(proxy.Add(add, &sum, &ctl).ok()) << ctl.status().ToString();
  EXPECT_EQ(3, sum.sum());
  gate_.Open();
  for (auto& p : echoes) {
    p->done.Wait();
    EXPECT_TRUE(p->ctl.status().ok()) << p->ctl.status().ToString();
    EXPECT_EQ(p->req.data(), p->resp.data());
  }
}

TEST_F(InlineHandlerTest, InlineHandlerErrorsReachTheCaller) {
  StartServer({}, 0, {"Echo"});
  StartClient();
  rtest::EchoRequestPB req;
  req.set_data("x");
  req.set_fail_with("refused inline");
  rtest::EchoResponsePB resp;
  RpcController ctl;
  Status s = Proxy().Echo(req, &resp, &ctl);
  ASSERT_TRUE(s.IsRemoteError()) << s.ToString();
  EXPECT_NE(std::string::npos, s.ToString().find("refused inline")) << s.ToString();
  ASSERT_NE(nullptr, ctl.error_response());
  EXPECT_EQ(ErrorStatusPB::ERROR_APPLICATION, ctl.error_response()->code());
}

TEST_F(InlineHandlerTest, SynchronousCallFromAReactorFailsInsteadOfDeadlocking) {
  MessengerOptions one_reactor;
  one_reactor.num_reactors = 1;
  StartServer(one_reactor, 0, {"Echo"});
  StartClient();
  // The inline Echo calls Add on its own server with the synchronous proxy: on the only reactor,
  // that reactor would wait for a response only it can read.
  Status nested;
  service_->set_echo_hook([&](const rtest::EchoRequestPB&, RpcContext*) {
    rtest::EchoServiceProxy self(server_, server_addr_);
    rtest::AddRequestPB add;
    add.set_a(1);
    add.set_b(1);
    rtest::AddResponsePB sum;
    RpcController ctl;
    nested = self.Add(add, &sum, &ctl);
  });
  rtest::EchoRequestPB req;
  req.set_data("x");
  rtest::EchoResponsePB resp;
  RpcController ctl;
  ASSERT_TRUE(Proxy().Echo(req, &resp, &ctl).ok()) << ctl.status().ToString();
  EXPECT_TRUE(nested.IsIllegalState()) << nested.ToString();
}

TEST_F(InlineHandlerTest, UnknownMethodCannotBeMadeInline) {
  TestEchoService service;
  Status s = service.SetRunInline("NoSuchMethod");
  EXPECT_TRUE(s.IsNotFound()) << s.ToString();
  EXPECT_TRUE(service.SetRunInline("Echo").ok());
  EXPECT_TRUE(service.FindMethod("Echo")->run_inline);
  EXPECT_TRUE(service.SetRunInline("Echo", false).ok());
  EXPECT_FALSE(service.FindMethod("Echo")->run_inline);
}

}  // namespace
}  // namespace rrpc::rpc
