// End-to-end tests of the TCP RPC core: real sockets on loopback, real reactors and workers.
#include "rrpc/rpc/messenger.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "rpc/core/reactor.h"
#include "rpc/testing/rpc-test-util.h"
#include "util/countdown_latch.h"

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

// A RunAfter task still waiting at Shutdown() is neither dropped nor run on the thread shutting
// down: it runs once, early, on its reactor's thread, and finds the messenger closing.
TEST_F(MessengerTest, DelayedTaskWaitingAtShutdownRunsEarlyOnItsReactorOnce) {
  auto messenger = MessengerBuilder("delayed").set_num_reactors(2).Build().value();
  struct Seen {
    std::atomic<int> runs{0};
    std::atomic<bool> on_reactor{false};
    std::atomic<bool> closing{false};
  };
  auto seen = std::make_shared<Seen>();
  CountDownLatch armed(1);
  Messenger* raw = messenger.get();
  // From a reactor thread (as a channel's retry is), through a task that the reactor runs first.
  raw->RunAfter(MonoDelta(), [raw, seen, &armed] {
    raw->RunAfter(MonoDelta::FromSeconds(3600), [raw, seen] {
      seen->on_reactor.store(Reactor::Current() != nullptr &&
                             Reactor::Current()->messenger() == raw);
      seen->closing.store(raw->closing());
      seen->runs.fetch_add(1);
    });
    armed.CountDown();
  });
  ASSERT_TRUE(armed.WaitFor(MonoDelta::FromSeconds(60)));
  EXPECT_EQ(seen->runs.load(), 0);
  const MonoTime start = MonoTime::Now();
  messenger->Shutdown();
  EXPECT_EQ(seen->runs.load(), 1);
  EXPECT_TRUE(seen->on_reactor.load());
  EXPECT_TRUE(seen->closing.load());
  EXPECT_LT((MonoTime::Now() - start).ToSeconds(), 600);  // not at its hour
  messenger.reset();
  EXPECT_EQ(seen->runs.load(), 1);
}

// After Shutdown() a delayed task runs at once on the caller's thread, still exactly once.
TEST_F(MessengerTest, DelayedTaskGivenAfterShutdownRunsAtOnceOnTheCaller) {
  auto messenger = MessengerBuilder("stopped").Build().value();
  messenger->Shutdown();
  int runs = 0;
  const std::thread::id caller = std::this_thread::get_id();
  bool on_caller = false;
  messenger->RunAfter(MonoDelta::FromSeconds(3600), [&] {
    runs++;
    on_caller = std::this_thread::get_id() == caller;
  });
  EXPECT_EQ(runs, 1);
  EXPECT_TRUE(on_caller);
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

// A second server given the port the first listens on (two servers on one host with the same
// flags) is refused, not let in to share the port through SO_REUSEPORT.
TEST_F(MessengerTest, ListenRefusesAPortAnotherServerListensOn) {
  auto first = MessengerBuilder("first").Build();
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  Sockaddr taken;
  ASSERT_TRUE((*first)->Listen(Sockaddr::Loopback(0), &taken).ok());
  auto second = MessengerBuilder("second").Build();
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  const Status s = (*second)->Listen(taken, nullptr);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(std::string::npos, s.ToString().find("the RPC port is taken")) << s.ToString();
  EXPECT_NE(std::string::npos, s.ToString().find(taken.ToString())) << s.ToString();
  Sockaddr other;
  EXPECT_TRUE((*second)->Listen(Sockaddr::Loopback(0), &other).ok());
  EXPECT_NE(taken.port(), other.port());
  (*second)->Shutdown();
  (*first)->Shutdown();
}

}  // namespace rrpc::rpc
