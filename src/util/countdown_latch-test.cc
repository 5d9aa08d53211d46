#include "util/countdown_latch.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

namespace rrpc {
namespace {

TEST(CountDownLatchTest, ZeroCountNeverBlocks) {
  CountDownLatch latch(0);
  latch.Wait();
  EXPECT_TRUE(latch.WaitFor(MonoDelta::FromNanoseconds(0)));
  EXPECT_EQ(0, latch.count());
}

TEST(CountDownLatchTest, WaitForTimesOutWhileCountIsPositive) {
  CountDownLatch latch(2);
  latch.CountDown();
  EXPECT_EQ(1, latch.count());
  EXPECT_FALSE(latch.WaitFor(MonoDelta::FromMilliseconds(1)));
  EXPECT_FALSE(latch.WaitFor(MonoDelta::FromMilliseconds(-5)));
  EXPECT_FALSE(latch.WaitUntil(MonoTime::Now()));
  latch.CountDown();
  EXPECT_TRUE(latch.WaitFor(MonoDelta::FromMilliseconds(1)));
}

TEST(CountDownLatchTest, CountStopsAtZero) {
  CountDownLatch latch(3);
  latch.CountDown(10);
  EXPECT_EQ(0, latch.count());
  latch.CountDown();
  EXPECT_EQ(0, latch.count());
  latch.Wait();
}

TEST(CountDownLatchTest, ReleasesEveryWaiterWhenCountReachesZero) {
  constexpr int kWaiters = 4;
  constexpr int kCount = 3;
  CountDownLatch latch(kCount);
  std::atomic<int> released{0};
  std::vector<std::thread> waiters;
  for (int i = 0; i < kWaiters; i++) {
    waiters.emplace_back([&, i] {
      // MonoDelta::Max() must mean "forever", not overflow into "already expired".
      if (i % 2 == 0) {
        latch.Wait();
      } else {
        CHECK(latch.WaitFor(MonoDelta::Max()));
      }
      released++;
    });
  }
  for (int i = 0; i < kCount; i++) {
    // Nobody may pass before the last CountDown.
    EXPECT_EQ(0, released.load());
    latch.CountDown();
  }
  for (auto& t : waiters) t.join();
  EXPECT_EQ(kWaiters, released.load());
}

TEST(CountDownLatchTest, SafeToDestroyAsSoonAsWaitReturns) {
  // The waiter destroys the latch right after Wait(); the counting thread must not touch it
  // afterwards (TSAN/ASAN builds catch a violation).
  for (int round = 0; round < 200; round++) {
    auto latch = std::make_unique<CountDownLatch>(1);
    std::thread counter([l = latch.get()] { l->CountDown(); });
    latch->Wait();
    latch.reset();
    counter.join();
  }
}

}  // namespace
}  // namespace rrpc
