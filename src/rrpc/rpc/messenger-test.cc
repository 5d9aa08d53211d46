// End-to-end tests of the TCP RPC core: real sockets on loopback, real reactors and workers.
#include "rrpc/rpc/messenger.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "rrpc/rpc/testing/rpc-test-util.h"

namespace rrpc::rpc {

class MessengerTest : public RpcTestBase {};

TEST_F(MessengerTest, SyncEchoRoundTrip) {
  StartServer();
  StartClient();
  auto proxy = Proxy();
  rtest::EchoRequestPB req;
  req.set_data("hello");
  rtest::EchoResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(30));
  Status s = proxy.Echo(req, &resp, &ctl);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ("hello", resp.data());
}

// The last reference to a messenger may go away in a callback on one of its own reactors (a
// channel call's attempt can hold it): the messenger is shut down and deleted on a thread of its
// own, since a reactor cannot join itself.
TEST_F(MessengerTest, LastReferenceReleasedOnItsOwnReactorShutsItDown) {
  StartServer();
  CountDownLatch deleted(1);
  class SignalsDeletion : public TestEchoService {
   public:
    explicit SignalsDeletion(CountDownLatch* deleted) : deleted_(deleted) {}
    ~SignalsDeletion() override { deleted_->CountDown(); }

   private:
    CountDownLatch* deleted_;
  };
  auto client = MessengerBuilder("owned-by-its-callback").Build().value();
  ASSERT_TRUE(client->RegisterService(std::make_unique<SignalsDeletion>(&deleted)).ok());
  auto req = std::make_shared<rtest::EchoRequestPB>();
  req->set_data("last");
  auto resp = std::make_shared<rtest::EchoResponsePB>();
  auto ctl = std::make_shared<RpcController>();
  ctl->set_timeout(MonoDelta::FromSeconds(60));
  auto proxy = std::make_shared<rtest::EchoServiceProxy>(client, server_addr_);
  client.reset();  // from here the proxy, captured by the callback, holds the only reference
  std::weak_ptr<rtest::EchoServiceProxy> weak_proxy = proxy;
  auto* raw = proxy.get();
  raw->EchoAsync(*req, resp.get(), ctl.get(),
                 [req, resp, ctl, owned = std::move(proxy)]() mutable { owned.reset(); });
  ASSERT_TRUE(deleted.WaitFor(MonoDelta::FromSeconds(60)));
  EXPECT_TRUE(weak_proxy.expired());
}

TEST_F(MessengerTest, ManyConcurrentAsyncCallsAllAnswered) {
  MessengerOptions server_options;
  server_options.num_reactors = 3;
  server_options.num_workers = 4;
  server_options.service_queue_length = 10000;
  StartServer(server_options);
  MessengerOptions client_options;
  client_options.num_reactors = 3;
  StartClient(client_options);
  constexpr int kThreads = 4;
  constexpr int kCallsPerThread = 500;
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&, t] {
      auto proxy = Proxy();
      std::vector<rtest::AddRequestPB> reqs(kCallsPerThread);
      std::vector<rtest::AddResponsePB> resps(kCallsPerThread);
      std::vector<RpcController> ctls(kCallsPerThread);
      CountDownLatch done(kCallsPerThread);
      for (int i = 0; i < kCallsPerThread; i++) {
        reqs[i].set_a(t * 100000 + i);
        reqs[i].set_b(i);
        proxy.AddAsync(reqs[i], &resps[i], &ctls[i], [&done] { done.CountDown(); });
      }
      done.Wait();
      for (int i = 0; i < kCallsPerThread; i++) {
        if (ctls[i].status().ok() && resps[i].sum() == t * 100000 + 2 * i) ok.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(kThreads * kCallsPerThread, ok.load());
}

}  // namespace rrpc::rpc
