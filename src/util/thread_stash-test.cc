// ThreadStash: bounded per thread, separate between threads, Pop by match, and what a thread still
// holds when it exits goes to the release function (and nothing is kept after that).
#include "util/thread_stash.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace rrpc {
namespace {

std::atomic<int> released{0};
void CountRelease(int) { released.fetch_add(1); }
using IntStash = ThreadStash<int, 3, CountRelease>;

TEST(ThreadStashTest, KeepsAtMostItsCapacityAndPopsNewestFirst) {
  std::thread t([] {
    EXPECT_TRUE(IntStash::Push(1));
    EXPECT_TRUE(IntStash::Push(2));
    EXPECT_TRUE(IntStash::Push(3));
    EXPECT_FALSE(IntStash::Push(4));  // full: the caller keeps it
    int v = 0;
    EXPECT_TRUE(IntStash::Pop(&v));
    EXPECT_EQ(3, v);
    EXPECT_TRUE(IntStash::Pop([](int x) { return x == 1; }, &v));
    EXPECT_EQ(1, v);
    EXPECT_FALSE(IntStash::Pop([](int x) { return x == 7; }, &v));
    EXPECT_TRUE(IntStash::Pop(&v));
    EXPECT_EQ(2, v);
    EXPECT_FALSE(IntStash::Pop(&v));
  });
  t.join();
}

TEST(ThreadStashTest, EachThreadHasItsOwnAndReleasesItAtExit) {
  released = 0;
  std::thread a([] {
    EXPECT_TRUE(IntStash::Push(10));
    EXPECT_TRUE(IntStash::Push(11));
  });
  a.join();
  EXPECT_EQ(2, released.load());  // thread a's two, at its exit
  std::thread b([] {
    int v;
    EXPECT_FALSE(IntStash::Pop(&v));  // nothing of thread a's
  });
  b.join();
  EXPECT_EQ(2, released.load());
}

}  // namespace
}  // namespace rrpc
