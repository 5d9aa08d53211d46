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
