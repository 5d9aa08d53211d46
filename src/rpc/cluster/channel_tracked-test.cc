// Tracked (exactly-once) calls through a channel: one request id over all attempts; a lost
// outcome is retried only on the server the request may have run on, whose result tracker
// answers it, never on another server.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
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

}  // namespace
}  // namespace rrpc::rpc
