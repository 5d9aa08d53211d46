// The adaptive limit moved by queueing time, on a clock the test drives.
#include "rpc/core/adaptive_limit.h"

#include <gtest/gtest.h>

namespace rrpc::rpc {
namespace {

AdaptiveLimitOptions Options() {
  AdaptiveLimitOptions o;
  o.enabled = true;
  o.target_queue_time = MonoDelta::FromMilliseconds(2);
  o.window = MonoDelta::FromMilliseconds(50);
  o.decrease = 0.5;
  o.increase = 1;
  return o;
}

MonoTime At(int64_t ms) { return MonoTime::FromNanoseconds(ms * 1000000); }
MonoDelta Ms(int64_t ms) { return MonoDelta::FromMilliseconds(ms); }

TEST(AdaptiveLimitTest, StartsAtTheMaximum) {
  AdaptiveLimit limit(Options(), 2, 40);
  EXPECT_EQ(40, limit.limit());
}

TEST(AdaptiveLimitTest, CutsTheLimitEachWindowCallsQueuePastTheTarget) {
  AdaptiveLimit limit(Options(), 2, 40);
  limit.OnStarted(Ms(10), At(1000));  // opens the window
  limit.OnStarted(Ms(10), At(1049));
  EXPECT_EQ(40, limit.limit()) << "the window is not over yet";
  limit.OnStarted(Ms(10), At(1050));
  EXPECT_EQ(20, limit.limit());
  limit.OnStarted(Ms(10), At(1100));
  EXPECT_EQ(10, limit.limit());
}

TEST(AdaptiveLimitTest, NeverGoesBelowTheMinimum) {
  AdaptiveLimit limit(Options(), 2, 40);
  int64_t t = 0;
  for (int i = 0; i < 20; i++, t += 50) limit.OnStarted(Ms(100), At(t));
  EXPECT_EQ(2, limit.limit());
}

TEST(AdaptiveLimitTest, GrowsOnlyWhenTheLimitRefusedCallsAndQueuesAreShort) {
  AdaptiveLimit limit(Options(), 2, 40);
  int64_t t = 0;
  for (int i = 0; i < 20; i++, t += 50) limit.OnStarted(Ms(100), At(t));
  ASSERT_EQ(2, limit.limit());
  // Short queues but nobody refused: the limit was not the constraint, so it stays.
  limit.OnStarted(Ms(0), At(t += 50));
  EXPECT_EQ(2, limit.limit());
  // Refused and short queues: +1 per window.
  for (int i = 0; i < 5; i++) {
    limit.OnRefused();
    limit.OnStarted(Ms(0), At(t += 50));
  }
  EXPECT_EQ(7, limit.limit());
}

TEST(AdaptiveLimitTest, JudgesAWindowByItsMeanQueueTime) {
  AdaptiveLimit limit(Options(), 2, 40);
  limit.OnStarted(Ms(0), At(0));
  limit.OnStarted(Ms(0), At(10));
  limit.OnStarted(Ms(0), At(20));
  limit.OnRefused();
  limit.OnStarted(Ms(7), At(50));  // mean 7/4 ms < 2 ms
  EXPECT_EQ(40, limit.limit()) << "raised, but capped at the maximum";
  limit.OnStarted(Ms(9), At(60));
  limit.OnStarted(Ms(0), At(100));  // mean 4.5 ms >= 2 ms
  EXPECT_EQ(20, limit.limit());
}

}  // namespace
}  // namespace rrpc::rpc
