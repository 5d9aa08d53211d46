// Tracked (exactly-once) calls through a channel: one request id over all attempts; a lost
// outcome is retried only on the server the request may have run on, whose result tracker
// answers it, never on another server.
#include <glog/logging.h>
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "rpc/core/fault_injection.h"
#include "rpc/core/messenger_internals.h"
#include "rpc/core/result_tracker.h"
#include "rpc/testing/rtest_tracked.rrpc.h"
#include "rrpc/rpc/cluster/channel.h"
#include "rrpc/rpc/messenger.h"
#include "rrpc/rpc/rpc_context.h"
#include "rrpc/rpc/rpc_controller.h"

namespace rrpc::rpc {
namespace {

using rtest::CounterAddRequestPB;
using rtest::CounterAddResponsePB;

// Counts the runs of each method; answers the delta.
class CountingService : public rtest::CounterServiceIf {
 public:
  void Add(const CounterAddRequestPB* req, CounterAddResponsePB* resp, RpcContext* ctx) override {
    runs_.fetch_add(1);
    resp->set_value(req->delta());
    ctx->RespondSuccess();
  }
  void AddUntracked(const CounterAddRequestPB* req, CounterAddResponsePB* resp,
                    RpcContext* ctx) override {
    Add(req, resp, ctx);
  }
  int runs() const { return runs_.load(); }

 private:
  std::atomic<int> runs_{0};
};

struct Server {
  std::shared_ptr<Messenger> messenger;
  CountingService* service = nullptr;
  Sockaddr addr;
  uint64_t answered_from_tracker() const {
    const ResultTrackerStats s = MessengerInternals::result_tracker(*messenger)->stats();
    return s.replays + s.waits;
  }
};

class ChannelTrackedTest : public ::testing::Test {
 protected:
  void StartServers(int n) {
    for (int i = 0; i < n; i++) {
      auto built = MessengerBuilder("server" + std::to_string(i)).Build();
      ASSERT_TRUE(built.ok()) << built.status().ToString();
      Server s;
      s.messenger = *built;
      auto service = std::make_unique<CountingService>();
      s.service = service.get();
      ASSERT_TRUE(s.messenger->RegisterService(std::move(service)).ok());
      ASSERT_TRUE(s.messenger->Listen(Sockaddr::Loopback(0), &s.addr).ok());
      servers_.push_back(std::move(s));
    }
  }
  // `drop_responses`: the client drops every response it reads (after the negotiation reply).
  std::shared_ptr<Channel> NewChannel(bool drop_responses, ChannelOptions options) {
    MessengerBuilder builder("client");
    if (drop_responses) {
      FaultSpec spec;
      spec.drop_read = 1.0;
      MessengerInternals::SetFaultInjector(&builder, std::make_shared<FaultInjector>(spec));
    }
    auto built = builder.Build();
    CHECK(built.ok()) << built.status().ToString();
    client_ = *built;
    std::string target = "list://";
    for (size_t i = 0; i < servers_.size(); i++) {
      target += (i > 0 ? "," : "") + servers_[i].addr.ToString();
    }
    auto channel = Channel::Create(client_, target, options);
    CHECK(channel.ok()) << channel.status().ToString();
    return *channel;
  }
  int total_runs() const {
    int runs = 0;
    for (const auto& s : servers_) runs += s.service->runs();
    return runs;
  }
  void TearDown() override {
    if (client_) client_->Shutdown();
    for (auto& s : servers_) s.messenger->Shutdown();
  }

  std::vector<Server> servers_;
  std::shared_ptr<Messenger> client_;
};

TEST_F(ChannelTrackedTest, TrackedCallsCarryARequestIdThroughOneAndManyServers) {
  for (int n : {1, 2}) {
    servers_.clear();
    StartServers(n);
    auto channel = NewChannel(false, ChannelOptions());
    rtest::CounterServiceProxy proxy(channel);
    for (int i = 1; i <= 3; i++) {
      CounterAddRequestPB req;
      req.set_key("k");
      req.set_delta(i);
      CounterAddResponsePB resp;
      RpcController ctl;
      ctl.set_timeout(MonoDelta::FromSeconds(30));
      ASSERT_TRUE(proxy.Add(req, &resp, &ctl).ok()) << ctl.status().ToString();
      EXPECT_EQ(i, resp.value());
      EXPECT_NE(0u, ctl.request_seq_no());
      EXPECT_TRUE(ctl.server_tracks_results());
      EXPECT_EQ(HandlerRan::kYes, ctl.handler_ran());
    }
    EXPECT_EQ(3, total_runs());
    client_->Shutdown();
    for (auto& s : servers_) s.messenger->Shutdown();
  }
}

// Every response is lost: each attempt passes its own timeout after its request may have run.
// The retries carry the same request id to the same server (its tracker answers them: two
// replays or waits), never to the other one, and the call runs once in all.
TEST_F(ChannelTrackedTest, LostOutcomeIsRetriedOnlyOnTheServerItMayHaveRunOn) {
  StartServers(2);
  ChannelOptions options;
  options.attempt_timeout = MonoDelta::FromMilliseconds(300);
  options.max_attempts = 3;
  auto channel = NewChannel(true, options);
  rtest::CounterServiceProxy proxy(channel);
  CounterAddRequestPB req;
  req.set_key("k");
  req.set_delta(1);
  CounterAddResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(60));
  EXPECT_TRUE(proxy.Add(req, &resp, &ctl).IsTimedOut()) << ctl.status().ToString();
  EXPECT_EQ(3, ctl.attempts());
  EXPECT_TRUE(ctl.server_tracks_results());
  // The caller is told the write may have run, and that the 60 s call ended by its attempts'
  // timeouts, not its deadline.
  EXPECT_EQ(HandlerRan::kMaybe, ctl.handler_ran());
  const std::string text = ctl.status().ToString();
  EXPECT_NE(std::string::npos, text.find("after 3 attempts, may have run")) << text;
  EXPECT_NE(std::string::npos, text.find("attempt 3 timed out after")) << text;
  EXPECT_NE(std::string::npos, text.find("its attempt timeout")) << text;
  // The attempts reached one server; each retry there was answered from its tracker (after the
  // first attempt ran or while it ran). Wait for the last retry to be handled there.
  const MonoTime deadline = MonoTime::Now() + MonoDelta::FromSeconds(60);
  while (servers_[0].answered_from_tracker() + servers_[1].answered_from_tracker() < 2 &&
         MonoTime::Now() < deadline) {
    SleepFor(MonoDelta::FromMilliseconds(1));
  }
  EXPECT_EQ(1, total_runs());
  const int ran_on = servers_[0].service->runs() == 1 ? 0 : 1;
  EXPECT_EQ(2u, servers_[ran_on].answered_from_tracker());
  EXPECT_EQ(0u, servers_[1 - ran_on].answered_from_tracker());
  EXPECT_EQ(0, servers_[1 - ran_on].service->runs());
}

// A write to servers that are gone: every attempt was refused at connect, so the caller is told
// it did not run (and may be sent again safely).
TEST_F(ChannelTrackedTest, WriteToServersThatAreGoneDidNotRun) {
  StartServers(2);
  for (auto& s : servers_) s.messenger->Shutdown();
  ChannelOptions options;
  options.attempt_timeout = MonoDelta::FromMilliseconds(300);
  auto channel = NewChannel(false, options);
  rtest::CounterServiceProxy proxy(channel);
  CounterAddRequestPB req;
  req.set_key("k");
  req.set_delta(1);
  CounterAddResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(30));
  EXPECT_FALSE(proxy.Add(req, &resp, &ctl).ok());
  EXPECT_EQ(HandlerRan::kNo, ctl.handler_ran()) << ctl.status().ToString();
  EXPECT_FALSE(ctl.may_have_run());
  EXPECT_EQ(0, total_runs());
}

// RetryPolicy belongs to a Proxy to one address: through a channel it is refused, not ignored.
TEST_F(ChannelTrackedTest, RetryPolicyThroughAChannelFailsTheCallWithInvalidArgument) {
  StartServers(2);
  auto channel = NewChannel(false, ChannelOptions());
  rtest::CounterServiceProxy proxy(channel);
  CounterAddRequestPB req;
  req.set_key("k");
  req.set_delta(1);
  CounterAddResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(30));
  RetryPolicy policy;
  policy.max_attempts = 3;
  ctl.set_retry_policy(policy);
  const Status s = proxy.Add(req, &resp, &ctl);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(std::string::npos, s.ToString().find("ChannelOptions")) << s.ToString();
  EXPECT_EQ(HandlerRan::kNo, ctl.handler_ran());
  EXPECT_EQ(0, total_runs());
}

// Records which keys each Add applied, to check a caller's account of a failed call against.
// Once told to Hold(), each Add applies its write and then waits for Release() before answering:
// the server dies with writes applied and unanswered.
class RecordingService : public rtest::CounterServiceIf {
 public:
  void Add(const CounterAddRequestPB* req, CounterAddResponsePB* resp, RpcContext* ctx) override {
    {
      std::unique_lock<std::mutex> l(mu_);
      applied_[req->key()]++;
      if (hold_) {
        held_++;
        released_cv_.wait(l, [this] { return released_; });
      }
    }
    handled_.fetch_add(1);
    resp->set_value(req->delta());
    ctx->RespondSuccess();
  }
  void AddUntracked(const CounterAddRequestPB* req, CounterAddResponsePB* resp,
                    RpcContext* ctx) override {
    Add(req, resp, ctx);
  }
  int applied(const std::string& key) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = applied_.find(key);
    return it == applied_.end() ? 0 : it->second;
  }
  int handled() const { return handled_.load(); }
  void Hold() {
    std::lock_guard<std::mutex> l(mu_);
    hold_ = true;
  }
  int held() {
    std::lock_guard<std::mutex> l(mu_);
    return held_;
  }
  void Release() {
    std::lock_guard<std::mutex> l(mu_);
    released_ = true;
    released_cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable released_cv_;
  bool hold_ = false;  // guarded by mu_
  bool released_ = false;
  int held_ = 0;
  std::map<std::string, int> applied_;
  std::atomic<int> handled_{0};
};

// Writes through three servers, one of which dies (its connections closed under calls in flight)
// once it has applied 100 writes and holds one more applied but unanswered: no write applies
// twice, every success applied once, every failure said "did not run" was applied nowhere, and
// the held writes fail as "may have run" (their server is gone; they are never sent elsewhere).
TEST_F(ChannelTrackedTest, FailedWritesSayRightlyWhetherTheyMayHaveRunWhenAServerDies) {
  constexpr int kServers = 3;
  constexpr int kThreads = 4;
  constexpr int kCallsPerThread = 300;
  std::vector<std::shared_ptr<Messenger>> servers;
  std::vector<RecordingService*> services;
  std::string target = "list://";
  for (int i = 0; i < kServers; i++) {
    auto built = MessengerBuilder("server" + std::to_string(i)).Build();
    ASSERT_TRUE(built.ok()) << built.status().ToString();
    auto service = std::make_unique<RecordingService>();
    services.push_back(service.get());
    ASSERT_TRUE((*built)->RegisterService(std::move(service)).ok());
    Sockaddr addr;
    ASSERT_TRUE((*built)->Listen(Sockaddr::Loopback(0), &addr).ok());
    target += (i > 0 ? "," : "") + addr.ToString();
    servers.push_back(*built);
  }
  auto client = MessengerBuilder("client").Build();
  ASSERT_TRUE(client.ok());
  ChannelOptions options;
  options.attempt_timeout = MonoDelta::FromMilliseconds(500);
  options.max_attempts = 3;
  options.retry_budget.floor_per_second = 1000;
  options.balancer = BalancerPolicy::kRoundRobin;  // the victim keeps getting its share
  auto channel = Channel::Create(*client, target, options);
  ASSERT_TRUE(channel.ok());

  struct Outcome {
    std::string key;
    bool ok = false;
    HandlerRan ran = HandlerRan::kNo;
  };
  std::vector<std::vector<Outcome>> outcomes(kThreads);
  std::atomic<int> failed{0};
  std::atomic<bool> victim_dead{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&, t] {
      rtest::CounterServiceProxy proxy(*channel);
      // At least kCallsPerThread, and on until the victim is dead (at most 100 times more).
      for (int i = 0; i < kCallsPerThread || (!victim_dead.load() && i < 100 * kCallsPerThread);
           i++) {
        Outcome o;
        o.key = std::to_string(t) + "/" + std::to_string(i);
        CounterAddRequestPB req;
        req.set_key(o.key);
        req.set_delta(1);
        CounterAddResponsePB resp;
        RpcController ctl;
        ctl.set_timeout(MonoDelta::FromSeconds(5));
        o.ok = proxy.Add(req, &resp, &ctl).ok();
        o.ran = ctl.handler_ran();
        if (!o.ok) failed.fetch_add(1);
        outcomes[t].push_back(o);
      }
    });
  }
  // The victim dies once it has applied 100 writes and holds one (bounded waits: the writers end
  // on their own). Its workers are let go once the held writes' callers have failed, so that
  // Shutdown(), which joins them, returns.
  const MonoTime give_up = MonoTime::Now() + MonoDelta::FromSeconds(60);
  while (services[0]->handled() < 100 && MonoTime::Now() < give_up) {
    SleepFor(MonoDelta::FromMilliseconds(1));
  }
  services[0]->Hold();
  while (services[0]->held() < 1 && MonoTime::Now() < give_up) {
    SleepFor(MonoDelta::FromMilliseconds(1));
  }
  const int held = services[0]->held();
  std::thread releaser([&] {
    while (failed.load() < held && MonoTime::Now() < give_up) {
      SleepFor(MonoDelta::FromMilliseconds(1));
    }
    services[0]->Release();
  });
  servers[0]->Shutdown();
  victim_dead.store(true);
  releaser.join();
  for (auto& th : threads) th.join();

  int ok = 0, not_run = 0, maybe = 0, maybe_applied = 0;
  for (const auto& per_thread : outcomes) {
    for (const Outcome& o : per_thread) {
      int applied = 0;
      for (RecordingService* s : services) applied += s->applied(o.key);
      ASSERT_LE(applied, 1) << o.key << " applied twice";
      if (o.ok) {
        ok++;
        EXPECT_EQ(1, applied) << o.key;
        EXPECT_EQ(HandlerRan::kYes, o.ran) << o.key;
      } else if (o.ran == HandlerRan::kNo) {
        not_run++;
        EXPECT_EQ(0, applied) << o.key << " failed as \"did not run\" but was applied";
      } else {
        maybe++;
        maybe_applied += applied;
      }
    }
  }
  LOG(INFO) << "writes: " << ok << " ok, " << not_run << " failed and did not run, " << maybe
            << " failed and may have run (" << maybe_applied << " of them applied)";
  EXPECT_LE(kThreads * kCallsPerThread, ok + not_run + maybe);
  ASSERT_GE(held, 1);
  EXPECT_GE(maybe_applied, held) << "the held writes";
  (*client)->Shutdown();
  for (auto& s : servers) s->Shutdown();
}

}  // namespace
}  // namespace rrpc::rpc
