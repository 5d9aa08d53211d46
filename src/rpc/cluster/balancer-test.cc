#include "rpc/cluster/balancer.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "rrpc/rpc/rpc_controller.h"

namespace rrpc::rpc {
namespace {

scoped_refptr<Backend> NewBackend(int i) {
  auto addr = Sockaddr::Parse("10.0.0." + std::to_string(i) + ":7000");
  CHECK(addr.ok());
  return scoped_refptr<Backend>(new Backend(*addr, "test", nullptr, BackendHealthOptions()));
}

// Which backend each of `keys` keys goes to.
std::map<int, const Backend*> Placement(Balancer* balancer, const BackendSet& set, int keys) {
  std::map<int, const Backend*> out;
  for (int k = 0; k < keys; k++) {
    RpcController ctl;
    ctl.set_hash_key("key-" + std::to_string(k));
    out[k] = balancer->Pick(set, ctl, TriedBackends());
  }
  return out;
}

TEST(BalancerTest, HashRingMovesFewKeysWhenAServerIsAdded) {
  Balancer balancer(BalancerPolicy::kHash);
  BackendSet three;
  for (int i = 1; i <= 3; i++) three.backends.push_back(NewBackend(i));
  BuildHashRing(&three, 160);
  BackendSet four = three;
  four.backends.push_back(NewBackend(4));
  BuildHashRing(&four, 160);

  const int kKeys = 10000;
  auto before = Placement(&balancer, three, kKeys);
  auto after = Placement(&balancer, four, kKeys);
  int moved = 0;
  std::map<const Backend*, int> load;
  for (int k = 0; k < kKeys; k++) {
    load[before[k]]++;
    if (before[k] == after[k]) continue;
    moved++;
    EXPECT_EQ(after[k], four.backends[3].get()) << "a key moved between old servers";
  }
  EXPECT_LE(moved, kKeys * 30 / 100);
  EXPECT_GE(moved, kKeys * 15 / 100);  // the new server does take its share
  for (const auto& [backend, n] : load) EXPECT_GT(n, kKeys / 5) << backend->addr().ToString();
}

TEST(BalancerTest, HashSkipsTriedServerForTheNextOnTheRing) {
  Balancer balancer(BalancerPolicy::kHash);
  BackendSet set;
  for (int i = 1; i <= 3; i++) set.backends.push_back(NewBackend(i));
  BuildHashRing(&set, 160);
  RpcController ctl;
  ctl.set_hash_key("shard-7");
  TriedBackends tried;
  Backend* first = balancer.Pick(set, ctl, tried);
  tried.Add(first);
  Backend* second = balancer.Pick(set, ctl, tried);
  ASSERT_NE(second, nullptr);
  EXPECT_NE(second, first);
  EXPECT_EQ(balancer.Pick(set, ctl, tried), second);  // the same fallback every time
}

TEST(BalancerTest, RoundRobinTakesTurns) {
  Balancer balancer(BalancerPolicy::kRoundRobin);
  BackendSet set;
  for (int i = 1; i <= 3; i++) set.backends.push_back(NewBackend(i));
  std::map<const Backend*, int> n;
  RpcController ctl;
  for (int i = 0; i < 300; i++) n[balancer.Pick(set, ctl, TriedBackends())]++;
  for (const auto& b : set.backends) EXPECT_EQ(n[b.get()], 100);
}

TEST(BalancerTest, EveryPolicyReturnsNullWhenAllWereTried) {
  BackendSet set;
  for (int i = 1; i <= 2; i++) set.backends.push_back(NewBackend(i));
  BuildHashRing(&set, 10);
  TriedBackends tried;
  tried.Add(set.backends[0].get());
  tried.Add(set.backends[1].get());
  RpcController ctl;
  ctl.set_hash_key("k");
  for (auto policy :
       {BalancerPolicy::kPowerOfTwo, BalancerPolicy::kRoundRobin, BalancerPolicy::kHash}) {
    Balancer balancer(policy);
    EXPECT_EQ(balancer.Pick(set, ctl, tried), nullptr) << BalancerPolicyName(policy);
    EXPECT_EQ(balancer.Pick(BackendSet(), ctl, TriedBackends()), nullptr);
  }
}

// Power of two choices compares BackendCost, a function of what the channel knows of each
// backend and of the time: its verdicts are checked here with the time given, not measured.
// (channel-test checks the same behaviour end to end, with real servers.)
constexpr int64_t kMs = 1000 * 1000;

TEST(BackendCostTest, TheFasterOfTwoIdleBackendsCostsLess) {
  const MonoTime now = MonoTime::Now();
  const int64_t answered = now.ToNanoseconds();
  EXPECT_LT(BackendCost(kMs / 10, answered, 0, now), BackendCost(50 * kMs, answered, 0, now));
}

TEST(BackendCostTest, EachOutstandingCallAddsOneLatency) {
  const MonoTime now = MonoTime::Now();
  const int64_t answered = now.ToNanoseconds();
  EXPECT_EQ(4 * BackendCost(kMs, answered, 0, now), BackendCost(kMs, answered, 3, now));
  // Without answers yet: outstanding calls at 1 us each.
  EXPECT_EQ(1000.0, BackendCost(0, 0, 0, now));
  EXPECT_EQ(3000.0, BackendCost(0, 0, 2, now));
}

// A fast server that holds a call without answering is at least as slow as its silence: after
// 2 s it costs more than a 50 ms server, so it draws no further calls.
TEST(BackendCostTest, SilenceWithACallOutstandingIsAFloorOnTheLatency) {
  const MonoTime answered = MonoTime::Now();
  const MonoTime later = answered + MonoDelta::FromSeconds(2);
  const double holding = BackendCost(kMs / 10, answered.ToNanoseconds(), 1, later);
  EXPECT_GE(holding, 2 * 2e9);
  EXPECT_GT(holding, BackendCost(50 * kMs, later.ToNanoseconds(), 1, later));
}

// A slow server that stopped being picked ages: its latency counts half for each second without
// an answer, so within seconds it costs less than a steady 10 ms server and gets a call again.
TEST(BackendCostTest, AnIdleSlowBackendsLatencyHalvesEachSilentSecond) {
  const MonoTime answered = MonoTime::Now();
  const int64_t at = answered.ToNanoseconds();
  auto after = [&](double s) { return answered + MonoDelta::FromSeconds(s); };
  EXPECT_EQ(BackendCost(64 * kMs, at, 0, answered), BackendCost(64 * kMs, at, 0, after(0.5)));
  EXPECT_EQ(BackendCost(32 * kMs, at, 0, answered), BackendCost(64 * kMs, at, 0, after(1.5)));
  EXPECT_EQ(BackendCost(8 * kMs, at, 0, answered), BackendCost(64 * kMs, at, 0, after(3)));
  const int64_t steady = after(3).ToNanoseconds();  // the other server answers all the time
  EXPECT_GT(BackendCost(64 * kMs, at, 0, after(2)), BackendCost(10 * kMs, steady, 0, after(2)));
  EXPECT_LT(BackendCost(64 * kMs, at, 0, after(3)), BackendCost(10 * kMs, steady, 0, after(3)));
  EXPECT_EQ(1000.0, BackendCost(64 * kMs, at, 0, after(62)));
}

}  // namespace
}  // namespace rrpc::rpc
