#include "util/memory_tracker.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace rrpc {
namespace {

TEST(MemoryTrackerTest, ChildCountsInItsParentAndEitherLimitApplies) {
  MemoryTracker root("root", 100);
  MemoryTracker a("a", 60, &root);
  MemoryTracker b("b", 60, &root);
  a.Consume(50);
  EXPECT_FALSE(a.OverLimit());
  b.Consume(51);
  EXPECT_EQ(101, root.consumption());
  EXPECT_TRUE(root.OverLimit());
  EXPECT_TRUE(a.OverLimit()) << "the parent's limit applies to every child";
  EXPECT_FALSE(a.AllBelow(0.75));
  b.Release(51);
  EXPECT_FALSE(a.OverLimit());
  EXPECT_FALSE(a.AllBelow(0.75)) << "a holds 50 of 60";
  a.Release(10);
  EXPECT_TRUE(a.AllBelow(0.75));
  EXPECT_EQ(101, root.peak());
  EXPECT_EQ(50, a.peak());
}

TEST(MemoryTrackerTest, NoLimitOfItsOwnLeavesTheParentsLimit) {
  MemoryTracker root("root", 10);
  MemoryTracker child("child", 0, &root);
  child.Consume(11);
  EXPECT_TRUE(child.OverLimit());
  child.Release(11);
  EXPECT_FALSE(child.OverLimit());
}

TEST(MemoryTrackerTest, DestroyedChildReturnsWhatItHeld) {
  MemoryTracker root("root", 0);
  {
    MemoryTracker child("child", 0, &root);
    child.Consume(42);
    EXPECT_EQ(42, root.consumption());
  }
  EXPECT_EQ(0, root.consumption());
}

TEST(MemoryTrackerTest, ThreadsConsumeAndReleaseConsistently) {
  MemoryTracker root("root", 0);
  MemoryTracker child("child", 0, &root);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; t++) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; i++) {
        child.Consume(3);
        child.Release(3);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(0, child.consumption());
  EXPECT_EQ(0, root.consumption());
  EXPECT_GE(root.peak(), 3);
}

}  // namespace
}  // namespace rrpc
