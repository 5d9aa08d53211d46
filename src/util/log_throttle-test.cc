#include "util/log_throttle.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace rrpc {
namespace {

TEST(LogThrottleTest, AllowsABurstPerPeriodAndCountsTheRest) {
  LogThrottle throttle(3, MonoDelta::FromSeconds(10));
  const MonoTime t0 = MonoTime::Now();
  int64_t dropped = -1;
  for (int i = 0; i < 3; i++) {
    EXPECT_TRUE(throttle.AllowAt(t0, &dropped));
    EXPECT_EQ(0, dropped);
  }
  for (int i = 0; i < 1000; i++)
    EXPECT_FALSE(throttle.AllowAt(t0 + MonoDelta::FromSeconds(9), &dropped));
  EXPECT_EQ(1000, throttle.total_dropped());
  // A new period: the first line says how many were dropped.
  EXPECT_TRUE(throttle.AllowAt(t0 + MonoDelta::FromSeconds(10), &dropped));
  EXPECT_EQ(1000, dropped);
  EXPECT_TRUE(throttle.AllowAt(t0 + MonoDelta::FromSeconds(10), &dropped));
  EXPECT_EQ(0, dropped);
}

TEST(LogThrottleTest, SuffixNamesTheDroppedLines) {
  EXPECT_EQ("", LogThrottle::Suffix(0));
  EXPECT_EQ(" (7 similar messages suppressed)", LogThrottle::Suffix(7));
}

TEST(LogThrottleTest, ThreadsShareOneBudget) {
  LogThrottle throttle(5, MonoDelta::FromSeconds(3600));
  std::atomic<int> allowed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; t++) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; i++) {
        if (throttle.Allow()) allowed++;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(5, allowed.load());
  EXPECT_EQ(3995, throttle.total_dropped());
}

}  // namespace
}  // namespace rrpc
