#include "util/thread.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <vector>

#include "util/countdown_latch.h"

namespace rrpc {
namespace {

// The registry entries of `category` (other tests' threads may share the process).
std::vector<ThreadInfo> ListCategory(const std::string& category) {
  std::vector<ThreadInfo> out;
  for (ThreadInfo& t : ThreadRegistry::Get()->List()) {
    if (t.category == category) out.push_back(std::move(t));
  }
  return out;
}

std::string CurrentOsThreadName() {
  char buf[64] = {};
  CHECK_EQ(0, pthread_getname_np(pthread_self(), buf, sizeof(buf)));
  return buf;
}

TEST(ThreadTest, TidOfMainThreadIsPid) {
  EXPECT_EQ(getpid(), GetCurrentThreadTid());
  EXPECT_EQ(GetCurrentThreadTid(), GetCurrentThreadTid());  // Cached value is stable.
}

TEST(ThreadTest, StartedThreadIsNamedAndListedWhileItRuns) {
  CountDownLatch release(1);
  std::atomic<pid_t> tid{0};
  std::string os_name;
  Result<std::thread> t = StartThread("thread-test", "a-rather-long-thread-name", [&] {
    tid = GetCurrentThreadTid();
    os_name = CurrentOsThreadName();
    release.Wait();
  });
  ASSERT_TRUE(t.ok()) << t.status();

  // Listed as soon as StartThread returns, before the function has necessarily run.
  std::vector<ThreadInfo> listed = ListCategory("thread-test");
  ASSERT_EQ(1u, listed.size());
  EXPECT_EQ("a-rather-long-thread-name", listed[0].name);  // The registry keeps the full name.
  EXPECT_NE(getpid(), listed[0].tid);

  release.CountDown();
  t->join();
  EXPECT_EQ(listed[0].tid, tid.load());
  EXPECT_EQ("a-rather-long-t", os_name);  // The kernel keeps 15 bytes.
  // Unlisted once the function returned, hence before join() completed.
  EXPECT_TRUE(ListCategory("thread-test").empty());
}

TEST(ThreadTest, ListIsSortedByCategoryThenName) {
  constexpr int kThreads = 3;
  CountDownLatch release(1);
  std::vector<std::thread> threads;
  const char* names[kThreads] = {"zeta", "alpha", "mid"};
  for (int i = 0; i < kThreads; i++) {
    Result<std::thread> t =
        StartThread(i == 0 ? "sort-test-a" : "sort-test-b", names[i], [&] { release.Wait(); });
    ASSERT_TRUE(t.ok()) << t.status();
    threads.push_back(std::move(t).value());
  }
  std::vector<std::string> seen;
  for (const ThreadInfo& info : ThreadRegistry::Get()->List()) {
    if (info.category.rfind("sort-test-", 0) == 0) seen.push_back(info.category + "/" + info.name);
  }
  EXPECT_EQ((std::vector<std::string>{"sort-test-a/zeta", "sort-test-b/alpha", "sort-test-b/mid"}),
            seen);
  release.CountDown();
  for (auto& t : threads) t.join();
  EXPECT_TRUE(ListCategory("sort-test-a").empty());
  EXPECT_TRUE(ListCategory("sort-test-b").empty());
}

TEST(ThreadTest, ScopedRegistrationListsAnyThread) {
  std::thread t([] {
    {
      ScopedThreadRegistration reg("scoped-test", "plain");
      std::vector<ThreadInfo> listed = ListCategory("scoped-test");
      ASSERT_EQ(1u, listed.size());
      EXPECT_EQ(GetCurrentThreadTid(), listed[0].tid);
      EXPECT_EQ("plain", CurrentOsThreadName());
    }
    EXPECT_TRUE(ListCategory("scoped-test").empty());
  });
  t.join();
}

TEST(ThreadTest, EveryThreadHasItsOwnTid) {
  constexpr int kThreads = 8;
  std::vector<pid_t> tids(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; i++) {
    Result<std::thread> t = StartThread("tid-test", "t" + std::to_string(i),
                                        [&, i] { tids[i] = GetCurrentThreadTid(); });
    ASSERT_TRUE(t.ok()) << t.status();
    threads.push_back(std::move(t).value());
  }
  for (auto& t : threads) t.join();
  tids.push_back(GetCurrentThreadTid());
  std::sort(tids.begin(), tids.end());
  EXPECT_EQ(tids.end(), std::adjacent_find(tids.begin(), tids.end()));
}

}  // namespace
}  // namespace rrpc
