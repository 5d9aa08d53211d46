// Mutex (a futex word) and CondVar over it: mutual exclusion under contention, TryLock, and the
// condition variable's waits.
#include "rrpc/util/mutex.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace rrpc {
namespace {

TEST(MutexTest, ContendedIncrementsAreNeverLost) {
  // Several threads hammer one lock: every increment under it survives, and threads that found
  // it taken slept and were woken (each round hands the lock around many times).
  Mutex mu;
  int64_t counter = 0;
  constexpr int kThreads = 4;
  constexpr int kIncrements = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&] {
      for (int i = 0; i < kIncrements; i++) {
        MutexLock l(mu);
        counter++;
      }
    });
  }
  for (auto& t : threads) t.join();
  MutexLock l(mu);
  EXPECT_EQ(counter, int64_t{kThreads} * kIncrements);
}

TEST(MutexTest, TryLockFailsWhileHeldAndSucceedsAfter) {
  Mutex mu;
  auto try_on_another_thread = [&mu] {
    bool got = false;
    std::thread([&] {
      if (mu.TryLock()) {
        got = true;
        mu.Unlock();
      }
    }).join();
    return got;
  };
  {
    MutexLock l(mu);
    EXPECT_FALSE(try_on_another_thread());
  }
  EXPECT_TRUE(try_on_another_thread());
}

TEST(MutexTest, SleeperIsWokenByUnlock) {
  // The main thread holds the lock while another blocks on it; the unlock must wake it.
  Mutex mu;
  mu.Lock();
  std::atomic<bool> got{false};
  std::thread waiter([&] {
    MutexLock l(mu);
    got = true;
  });
  // Give the waiter a chance to sleep on the word (not needed for correctness either way).
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(got.load());
  mu.Unlock();
  waiter.join();
  EXPECT_TRUE(got.load());
}

TEST(CondVarTest, WaitReturnsWithTheMutexHeldOnceNotified) {
  Mutex mu;
  CondVar cv;
  bool ready = false;
  std::thread notifier([&] {
    MutexLock l(mu);
    ready = true;
    cv.NotifyAll();
  });
  {
    MutexLock l(mu);
    while (!ready) cv.Wait(mu);
    EXPECT_TRUE(ready);
    EXPECT_FALSE(mu.TryLock());  // still ours
  }
  notifier.join();
}

TEST(CondVarTest, WaitUntilTimesOutWithTheMutexHeld) {
  Mutex mu;
  CondVar cv;
  MutexLock l(mu);
  EXPECT_FALSE(cv.WaitUntil(mu, MonoTime::Now() + MonoDelta::FromMilliseconds(5)));
  EXPECT_FALSE(mu.TryLock());
}

}  // namespace
}  // namespace rrpc
