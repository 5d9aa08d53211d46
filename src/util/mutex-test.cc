// Mutex (a futex word) and CondVar over it: mutual exclusion under contention, TryLock, and the
// condition variable's waits.
#include "rrpc/util/mutex.h"

#include <gtest/gtest.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "util/testing/syscall-test-util.h"

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

// Polls `done` for up to 30 s.
bool WaitUntil(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

TEST(MutexTest, SleeperIsWokenByUnlock) {
  // The main thread holds the lock while another blocks on it; once that one sleeps in the
  // kernel on the lock's word (the Mutex is that word), the unlock must wake it.
  Mutex mu;
  mu.Lock();
  std::atomic<bool> got{false};
  std::atomic<pid_t> tid{0};
  std::thread waiter([&] {
    tid = CurrentTid();
    MutexLock l(mu);
    got = true;
  });
  EXPECT_TRUE(WaitUntilInSyscall(tid, SYS_futex, reinterpret_cast<uintptr_t>(&mu)))
      << "the waiter never slept on the lock";
  EXPECT_FALSE(got.load());
  mu.Unlock();
  if (!WaitUntil([&] { return got.load(); })) {
    ADD_FAILURE() << "Unlock did not wake the sleeper";
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&mu), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr,
            0);  // by hand, so that the thread can be joined
  }
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
